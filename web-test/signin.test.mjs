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
import fs from 'node:fs';
import path from 'node:path';

import {SignJWT, importJWK} from 'jose';

import {rsaPrivateJwk} from './oidc/issuer.mjs';
import {signIn, startSignInGateway} from './signin.mjs';
import {ARTIFACTS, Cluster, delay, launch, waitForBlocks, waitForState} from './support.mjs';

const PODS = 20;
const ID_TOKEN_TTL = 8;
const cluster = new Cluster({pods: PODS, nodes: 2});
let base;
let op;
let context;
let webPods;

before(async () => {
  await cluster.startSim();
  // Alice's group may read pods in the namespace of the first pod only.
  const pods = await cluster.listPods();
  const ns = pods[0].metadata.namespace;
  webPods = pods.filter((p) => p.metadata.namespace === ns).length;
  assert.ok(webPods > 0 && webPods < PODS, `pods in ${ns}: ${webPods} of ${PODS}`);
  await cluster.grantPods(ns, 'oidc:team-a');
  // Nodes for everyone signed in, so the board has its columns.
  await cluster.grantNodes('system:authenticated', 'signed-in-read-nodes');
  ({base, op} = await startSignInGateway(cluster, {idTokenTtl: ID_TOKEN_TTL}));
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
  await signIn(page, op, base, 'alice');

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
