// What the sign-in tests share: the test OpenID provider (oidc/issuer.mjs)
// over HTTPS with a test CA, a gateway with `--auth oidc` in front of the
// simulator that trusts it (groups prefixed `oidc:`, so alice is in
// `oidc:team-a`), and signing in through the provider's own form.

import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import {makeTestCertificates, startIssuer} from './oidc/issuer.mjs';
import {freePort} from './support.mjs';

/**
 * The provider and a gateway signing in at it, for `cluster` (its sim
 * started); id- and access tokens live `idTokenTtl` seconds. Resolves to
 * `{base, op}` once the gateway is ready; `op.stop()` is the caller's.
 * `issuerUrl` makes the `--oidc-issuer-url` given of the provider's (a
 * set-up mistake, for the tests of what such a mistake shows).
 */
export async function startSignInGateway(cluster, {idTokenTtl = 60, issuerUrl = (url) => url} = {}) {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  fs.mkdirSync(path.join(cluster.tmp, 'oidc'));
  const certs = makeTestCertificates(path.join(cluster.tmp, 'oidc'));
  const op = await startIssuer({
    certFile: certs.cert,
    keyFile: certs.key,
    idTokenTtl,
    accessTokenTtl: idTokenTtl,
    logoutPrompt: false,
    clients: [{
      client_id: 'kubefan',
      redirect_uris: [`${base}/oauth2/callback`],
      post_logout_redirect_uris: [`${base}/`],
    }],
  });
  const secretFile = path.join(cluster.tmp, 'session.secret');
  fs.writeFileSync(secretFile, crypto.randomBytes(48));
  try {
    await cluster.startGateway(port, [
      '--auth', 'oidc',
      '--oidc-issuer-url', issuerUrl(op.issuer),
      '--oidc-client-id', 'kubefan',
      '--oidc-ca-file', certs.ca,
      '--oidc-username-claim', 'email',
      '--oidc-groups-claim', 'groups',
      '--oidc-groups-prefix', 'oidc:',
      '--oidc-scopes', 'openid,email,groups',
      '--session-secret-file', secretFile,
    ]);
  } catch (err) {
    await op.stop().catch(() => {});
    throw err;
  }
  return {base, op};
}

/** From a dashboard offering "Sign in": the provider's form, as `login`, and back. */
export async function signIn(page, op, base, login) {
  await page.locator('#sign-in:not([hidden])').waitFor({timeout: 10000});
  await page.click('#sign-in');
  await page.waitForURL((url) => url.href.startsWith(op.issuer), {timeout: 10000});
  await page.fill('#login', login);
  await page.fill('#password', 'any');
  await page.click('#submit');
  await page.waitForURL((url) => url.href.startsWith(base), {timeout: 10000});
}
