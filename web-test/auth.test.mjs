// The dashboard under `--auth jwt`, opened as the README says: with
// `?access_token=TOKEN`. The page and its library load without a token; the
// page trades the token for an HttpOnly session cookie and takes it out of
// the address bar; the shared connection authenticates with the cookie, and
// when the token expires the page says so with the gateway's message and
// offers the token box. Another tab is signed in by the cookie; once the
// session is ended (DELETE /session), a new tab is asked for a token.
//
//   cargo build && (cd web-test && npm ci && npm test)

import {after, before, test} from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import {ARTIFACTS, Cluster, freePort, launch, waitForBlocks, waitForState} from './support.mjs';

const PODS = 20;
const cluster = new Cluster({pods: PODS, nodes: 2});
const secret = crypto.randomBytes(32).toString('hex');
let base;
let context;

const b64url = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');
function jwt(ttl) {
  const head = b64url({alg: 'HS256', typ: 'JWT'});
  const body = b64url({sub: 'web-test', exp: Math.floor(Date.now() / 1000) + ttl, 'kubefan/namespaces': ['*'], 'kubefan/resources': ['*']});
  return `${head}.${body}.${crypto.createHmac('sha256', secret).update(`${head}.${body}`).digest('base64url')}`;
}

before(async () => {
  await cluster.startSim();
  const secretFile = path.join(cluster.tmp, 'jwt.secret');
  fs.writeFileSync(secretFile, secret);
  const port = await freePort();
  await cluster.startGateway(port, ['--auth', 'jwt', '--jwt-secret-file', secretFile, '--jwt-leeway-secs', '0']);
  base = `http://127.0.0.1:${port}`;
  context = await launch(path.join(cluster.tmp, 'profile'));
});

after(async () => {
  if (context) await context.close().catch(() => {});
  await cluster.stopAll();
});

test('with ?access_token= the page shows every pod over the shared connection; when the token expires it says so and asks for one', async () => {
  const page = context.pages()[0] || (await context.newPage());
  await page.goto(`${base}/?access_token=${jwt(4)}`);
  await waitForBlocks(page, PODS, 5000);
  await waitForState(page, 'live', 2000);
  assert.equal(await page.locator('#conn').getAttribute('data-shared'), 'true');
  // The token left the address bar for a cookie scripts cannot read.
  assert.equal(new URL(page.url()).searchParams.has('access_token'), false, page.url());
  const cookie = (await context.cookies(base)).find((c) => c.name === 'kubefan_token');
  assert.ok(cookie, 'the session cookie is set');
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, 'Strict');
  assert.equal(await page.evaluate(() => document.cookie.includes('kubefan_token')), false);

  // The gateway ends the streams when the token expires (no leeway).
  await waitForState(page, 'error', 10000);
  await page.locator('#banner:not([hidden])').waitFor({timeout: 2000});
  assert.match(await page.locator('#banner-text').textContent(), /token is no longer accepted: token expired/);
  assert.ok(await page.locator('#token-form').isVisible(), 'the token box is offered');
  // The picture stays.
  await waitForBlocks(page, PODS, 1000);
  fs.mkdirSync(ARTIFACTS, {recursive: true});
  await page.screenshot({path: path.join(ARTIFACTS, 'dashboard-expired.png')});

  // A fresh token typed in the box: the page reloads with it and is live.
  await page.fill('#token', jwt(600));
  await page.press('#token', 'Enter');
  await waitForState(page, 'live', 5000);
  await waitForBlocks(page, PODS, 5000);
  assert.ok(await page.locator('#banner').isHidden());
  assert.equal(new URL(page.url()).searchParams.has('access_token'), false, page.url());
});

test('a tab without a token is signed in by the session cookie; once the session is ended, a new tab is asked for one, with the gateway\'s message', async () => {
  const signedIn = await context.newPage();
  for (const other of context.pages()) if (other !== signedIn) await other.close({runBeforeUnload: true});
  await signedIn.goto(`${base}/`);
  await waitForState(signedIn, 'live', 5000);
  await waitForBlocks(signedIn, PODS, 5000);
  // Signing out needs no token (it may have expired).
  assert.equal(await signedIn.evaluate(async () => (await fetch('/session', {method: 'DELETE'})).status), 204);
  assert.equal((await context.cookies(base)).some((c) => c.name === 'kubefan_token'), false);

  const page = await context.newPage();
  await signedIn.close({runBeforeUnload: true});
  await page.goto(`${base}/`);
  await page.locator('#banner:not([hidden])').waitFor({timeout: 5000});
  assert.match(await page.locator('#banner-text').textContent(), /Not signed in \(401\)/);
  assert.ok(await page.locator('#token-form').isVisible());
  assert.equal(await page.locator('#conn').getAttribute('data-state'), 'error');
  await page.close();
});

test('in a browser, the library carries watches over SSE, /ws and the shared connection, with a token', async () => {
  const page = await context.newPage();
  await page.goto(`${base}/healthz`);
  const result = await page.evaluate(async ({token}) => {
    const {connect} = await import('/lib/kubefan.js');
    const out = {};
    for (const transport of ['sse', 'ws', 'shared']) {
      const client = connect({transport, token});
      const w = client.watch('pods', {fields: 'status.phase'});
      const timeout = new Promise((resolve, reject) => setTimeout(() => reject(new Error(`${transport}: no snapshot in 5 s (${w.state})`)), 5000));
      await Promise.race([w.ready(), timeout]);
      out[transport] = {size: w.size, state: w.state, shared: client.shared === undefined ? null : client.shared};
      client.close();
    }
    return out;
  }, {token: jwt(600)});
  assert.deepEqual(result, {
    sse: {size: PODS, state: 'live', shared: null},
    ws: {size: PODS, state: 'live', shared: null},
    shared: {size: PODS, state: 'live', shared: true},
  });
  await page.close();
});
