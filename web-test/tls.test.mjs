// Eight dashboard tabs in one browser over TLS, where Chromium speaks
// HTTP/2 to kubefan (ALPN h2): the page and its library come over one
// HTTP/2 connection, the tabs' watches over the SharedWorker's one socket
// (WebSocket stays HTTP/1.1: kubefan does not offer it over HTTP/2). Every
// tab shows every pod, and a pod created, moved and deleted appears, moves
// and disappears in every tab, within 2 s. The certificate is the test's
// own, self-signed (made with openssl), which this process and the
// browser are told to accept.
//
//   cargo build && (cd web-test && npm ci && npm test)

import {after, before, test} from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import {ARTIFACTS, Cluster, freePort, launch, metric, newPod, podBlock, selfSignedCertificate, waitForBlocks, waitForState} from './support.mjs';

// This process's fetches (readiness, metrics) trust the test's certificate.
process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';

const PODS = 40;
const TABS = 8;
const PROMISED = 2000;

const cluster = new Cluster({pods: PODS, nodes: 3});
let base;
// `/metrics` over plain HTTP on a port of its own (`--metrics-listen`):
// this process's reads of it are not HTTP/1.1-over-TLS connections to
// count against the browser's, however long its connections are kept.
let metrics;
let context;

before(async () => {
  await cluster.startSim();
  const port = await freePort();
  const metricsPort = await freePort();
  const {cert, key} = selfSignedCertificate(cluster.tmp);
  await cluster.startGateway(
    port,
    ['--tls-cert-file', cert, '--tls-key-file', key, '--metrics-listen', `127.0.0.1:${metricsPort}`],
    'https',
  );
  base = `https://127.0.0.1:${port}`;
  metrics = `http://127.0.0.1:${metricsPort}`;
  context = await launch(path.join(cluster.tmp, 'profile-tls'), {trustAnyCertificate: true});
});

after(async () => {
  if (context) await context.close().catch(() => {});
  await cluster.stopAll();
});

test(`${TABS} dashboard tabs over TLS and HTTP/2 all show every pod and follow a change`, async () => {
  // This process's readiness checks were HTTP/1.1 over TLS too.
  const ownBefore = await metric(metrics, 'kubefan_connections_total', {protocol: 'Https1'});
  const tabs = [];
  for (let i = 0; i < TABS; i++) {
    const page = context.pages().find((p) => p.url() === 'about:blank') || (await context.newPage());
    const started = Date.now();
    await page.goto(`${base}/`, {timeout: PROMISED});
    await waitForBlocks(page, PODS, Math.max(1, PROMISED - (Date.now() - started)));
    assert.equal(await page.locator('#conn').getAttribute('data-shared'), 'true', `tab ${i + 1} uses the shared connection`);
    assert.equal(
      await page.evaluate(() => performance.getEntriesByType('navigation')[0].nextHopProtocol),
      'h2',
      `tab ${i + 1} was served over HTTP/2`,
    );
    tabs.push(page);
  }
  for (const page of tabs) await waitForState(page, 'live', PROMISED);
  assert.ok(await metric(metrics, 'kubefan_connections_total', {protocol: 'H2'}) >= 1, 'HTTP/2 connections');
  const h1 = (await metric(metrics, 'kubefan_connections_total', {protocol: 'Https1'})) - ownBefore;
  assert.equal(h1, 1, 'HTTP/1.1 over TLS for the shared socket alone');
  assert.equal(await metric(metrics, 'kubefan_subscribers', {resource: 'pods', transport: 'WebSocket'}), TABS);

  const key = 'default/tls-moving';
  await cluster.api('POST', '/api/v1/namespaces/default/pods', newPod('tls-moving', 'node-0'));
  await Promise.all(tabs.map((page) => podBlock(page, key, 'node-0').waitFor({timeout: PROMISED})));
  await cluster.api('PATCH', '/api/v1/namespaces/default/pods/tls-moving', {spec: {nodeName: 'node-2'}}, 'application/merge-patch+json');
  await Promise.all(tabs.map((page) => podBlock(page, key, 'node-2').waitFor({timeout: PROMISED})));
  await cluster.api('DELETE', '/api/v1/namespaces/default/pods/tls-moving');
  await Promise.all(tabs.map((page) => podBlock(page, key).waitFor({state: 'detached', timeout: PROMISED})));

  fs.mkdirSync(ARTIFACTS, {recursive: true});
  const shot = path.join(ARTIFACTS, 'dashboard-tls-tab8.png');
  await tabs[TABS - 1].bringToFront();
  await tabs[TABS - 1].screenshot({path: shot, fullPage: true});
  assert.ok(fs.statSync(shot).size > 10000);
});
