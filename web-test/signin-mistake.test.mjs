// A sign-in set-up mistake, as a teammate meets it: `--oidc-issuer-url`
// with a trailing slash the issuer's own URL lacks. The dashboard says
// why sign-in cannot work and that waiting will not help, naming the flag,
// instead of offering a Sign in button; /login says the same on a page of
// its own (it answered raw JSON, "not reachable yet; try again shortly").

import {after, before, test} from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import {startSignInGateway} from './signin.mjs';
import {ARTIFACTS, Cluster, launch} from './support.mjs';

const cluster = new Cluster({pods: 6, nodes: 2});
let base;
let op;
let context;

before(async () => {
  await cluster.startSim();
  ({base, op} = await startSignInGateway(cluster, {issuerUrl: (url) => url + '/'}));
  context = await launch(path.join(cluster.tmp, 'profile'), {trustAnyCertificate: true});
});

after(async () => {
  if (context) await context.close().catch(() => {});
  if (op) await op.stop().catch(() => {});
  await cluster.stopAll();
});

test('a trailing slash in --oidc-issuer-url is named on the dashboard and at /login, as a mistake waiting will not fix', async () => {
  const page = context.pages()[0] || (await context.newPage());
  // Readiness does not wait for the issuer: the first discovery may not
  // have failed yet. /session says once it has (bounded polling of the
  // gateway's own answer; nothing else tells a browser test).
  const deadline = Date.now() + 10000;
  for (;;) {
    const s = await (await fetch(`${base}/session`)).json();
    if (s.issuer && s.issuer.reason && s.issuer.waitingHelps === false) break;
    assert.ok(Date.now() < deadline, `the issuer's state: ${JSON.stringify(s)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  await page.goto(`${base}/`);
  await page.locator('#banner:not([hidden])').waitFor({timeout: 10000});
  const text = await page.locator('#banner-text').textContent();
  assert.match(text, /^Sign-in is not available: /);
  assert.match(text, /names the issuer/);
  assert.match(text, /Waiting will not help/);
  assert.match(text, /--oidc-issuer-url/);
  assert.equal(await page.locator('#sign-in').isVisible(), false, 'no Sign in button that cannot work');
  assert.ok(await page.locator('#token-form').isVisible(), 'a token still works');
  fs.mkdirSync(ARTIFACTS, {recursive: true});
  await page.screenshot({path: path.join(ARTIFACTS, 'signin-mistake.png')});

  // /login, as the browser goes there: a page saying the same.
  const login = await page.goto(`${base}/login`);
  assert.equal(login.status(), 503);
  const body = await page.locator('body').textContent();
  assert.match(body, /Sign-in is not available/);
  assert.match(body, /names the issuer/);
  assert.match(body, /--oidc-issuer-url/);
  await page.screenshot({path: path.join(ARTIFACTS, 'signin-mistake-login.png')});
});
