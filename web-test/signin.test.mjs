// Signing in as a teammate does, with a real OpenID provider (panva's
// oidc-provider, web-test/oidc/) over HTTPS with a test CA: the dashboard
// offers "Sign in", the provider's form signs alice in, the dashboard comes
// back showing who is signed in and only the namespace her group's
// RoleBinding grants, goes on streaming past the id-token's lifetime
// (sessions refreshed), follows the provider's key rotation, and signs out
// at the provider. A flood of made-up key ids costs the provider a bounded
// number of key fetches.
//
//   cargo build && (cd web-test && npm ci && npm test)

import {after, before, test} from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import {SignJWT, importJWK} from 'jose';

import {makeTestCertificates, rsaPrivateJwk, startIssuer} from './oidc/issuer.mjs';
import {ARTIFACTS, Cluster, delay, freePort, launch, waitForBlocks, waitForState} from './support.mjs';

const PODS = 20;
const ID_TOKEN_TTL = 8;
const cluster = new Cluster({pods: PODS, nodes: 2});
let base;
let op;
let context;
let webPods;

const rbac = '/apis/rbac.authorization.k8s.io/v1';

before(async () => {
  await cluster.startSim();
  // Alice's group may read pods in the namespace of the first pod only.
  const pods = await cluster.listPods();
  const ns = pods[0].metadata.namespace;
  webPods = pods.filter((p) => p.metadata.namespace === ns).length;
  assert.ok(webPods > 0 && webPods < PODS, `pods in ${ns}: ${webPods} of ${PODS}`);
  await cluster.api('POST', `${rbac}/namespaces/${ns}/roles`, {
    apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role',
    metadata: {name: 'pod-reader', namespace: ns},
    rules: [{apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch']}],
  });
  await cluster.api('POST', `${rbac}/namespaces/${ns}/rolebindings`, {
    apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding',
    metadata: {name: 'team-a-reads-pods', namespace: ns},
    roleRef: {apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'pod-reader'},
    subjects: [{apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: 'oidc:team-a'}],
  });
  // Nodes for everyone signed in, so the board has its columns.
  await cluster.api('POST', `${rbac}/clusterroles`, {
    apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole',
    metadata: {name: 'node-reader'},
    rules: [{apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch']}],
  });
  await cluster.api('POST', `${rbac}/clusterrolebindings`, {
    apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding',
    metadata: {name: 'signed-in-read-nodes'},
    roleRef: {apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'node-reader'},
    subjects: [{apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: 'system:authenticated'}],
  });

  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  fs.mkdirSync(path.join(cluster.tmp, 'oidc'));
  const certs = makeTestCertificates(path.join(cluster.tmp, 'oidc'));
  op = await startIssuer({
    certFile: certs.cert,
    keyFile: certs.key,
    idTokenTtl: ID_TOKEN_TTL,
    accessTokenTtl: ID_TOKEN_TTL,
    logoutPrompt: false,
    clients: [{
      client_id: 'kubefan',
      redirect_uris: [`${base}/oauth2/callback`],
      post_logout_redirect_uris: [`${base}/`],
    }],
  });
  const secretFile = path.join(cluster.tmp, 'session.secret');
  fs.writeFileSync(secretFile, crypto.randomBytes(48));
  await cluster.startGateway(port, [
    '--auth', 'oidc',
    '--oidc-issuer-url', op.issuer,
    '--oidc-client-id', 'kubefan',
    '--oidc-ca-file', certs.ca,
    '--oidc-username-claim', 'email',
    '--oidc-groups-claim', 'groups',
    '--oidc-groups-prefix', 'oidc:',
    '--oidc-scopes', 'openid,email,groups',
    '--session-secret-file', secretFile,
  ]);
  context = await launch(path.join(cluster.tmp, 'profile'), {trustAnyCertificate: true});
});

after(async () => {
  if (context) await context.close().catch(() => {});
  if (op) await op.stop().catch(() => {});
  await cluster.stopAll();
});

test('a teammate signs in at the provider, sees what her group may see, streams past the id-token, and signs out', async () => {
  const page = context.pages()[0] || (await context.newPage());
  await page.goto(`${base}/`);
  // Not signed in: the page offers to sign in.
  await page.locator('#banner:not([hidden])').waitFor({timeout: 10000});
  assert.equal(await page.locator('#banner-text').textContent(), 'Not signed in (401). Sign in, or paste a token:');
  assert.ok(await page.locator('#sign-in').isVisible());
  fs.mkdirSync(ARTIFACTS, {recursive: true});
  await page.screenshot({path: path.join(ARTIFACTS, 'signin-offered.png')});

  // The provider's own sign-in form.
  await page.click('#sign-in');
  await page.waitForURL((url) => url.href.startsWith(op.issuer), {timeout: 10000});
  await page.fill('#login', 'alice');
  await page.fill('#password', 'any');
  await page.click('#submit');
  await page.waitForURL((url) => url.href.startsWith(base), {timeout: 10000});

  // Back on the dashboard: who, and only her group's namespace.
  await waitForState(page, 'live', 10000);
  await waitForBlocks(page, webPods, 10000);
  assert.equal(await page.locator('#account-name').textContent(), 'alice@example.com');
  assert.ok(await page.locator('#sign-out').isVisible());
  const cookie = (await context.cookies(base)).find((c) => c.name === 'kubefan_session');
  assert.ok(cookie, 'the session cookie is set');
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, 'Lax');
  await page.screenshot({path: path.join(ARTIFACTS, 'signin-signed-in.png')});

  // The provider rotates its keys; two id-token lifetimes later the page
  // still streams (refreshed, with the new key): a pod made now shows.
  const kidBefore = op.kid;
  op.rotateKeys({keep: false});
  assert.notEqual(op.kid, kidBefore);
  await delay(2 * ID_TOKEN_TTL * 1000);
  assert.equal(await page.locator('#conn').getAttribute('data-state'), 'live');
  assert.ok(op.stats.refreshes.ok >= 2, `refreshes: ${JSON.stringify(op.stats.refreshes)}`);
  const first = (await cluster.listPods())[0];
  const ns = first.metadata.namespace;
  await cluster.api('POST', `/api/v1/namespaces/${ns}/pods`, {
    apiVersion: 'v1', kind: 'Pod',
    metadata: {name: 'after-two-id-tokens', namespace: ns},
    spec: {nodeName: first.spec.nodeName, containers: [{name: 'main', image: 'registry.example/e2e:1'}]},
    status: {phase: 'Running'},
  });
  await waitForBlocks(page, webPods + 1, 10000);
  assert.ok(await page.locator('#banner').isHidden(), 'no error on the way');

  // Signing out: at the provider too, then back, offered to sign in again.
  await page.click('#sign-out');
  await page.waitForURL((url) => url.href.startsWith(base), {timeout: 10000});
  await page.locator('#sign-in:not([hidden])').waitFor({timeout: 10000});
  assert.equal((await context.cookies(base)).some((c) => c.name === 'kubefan_session'), false);
  assert.ok(op.stats.end_session >= 1, 'signed out at the provider');
  await page.screenshot({path: path.join(ARTIFACTS, 'signin-signed-out.png')});
});

test('made-up key ids cost the provider at most one key fetch per five seconds', async () => {
  const key = await importJWK(rsaPrivateJwk(), 'RS256');
  const before = op.stats.jwks;
  const started = Date.now();
  const statuses = await Promise.all(Array.from({length: 100}, async (_, i) => {
    const token = await new SignJWT({email: 'mallory@example.com', email_verified: true})
      .setProtectedHeader({alg: 'RS256', kid: `made-up-${i}`})
      .setIssuer(op.issuer).setAudience('kubefan').setSubject('mallory')
      .setIssuedAt().setExpirationTime('5m')
      .sign(key);
    const r = await fetch(`${base}/api/v1/pods`, {headers: {Authorization: `Bearer ${token}`}});
    return r.status;
  }));
  assert.deepEqual([...new Set(statuses)], [401]);
  const windows = Math.floor((Date.now() - started) / 5000) + 1;
  const fetched = op.stats.jwks - before;
  assert.ok(fetched <= windows, `${fetched} key fetches for 100 made-up kids in ${Date.now() - started} ms`);
});
