// One connection per browser, however many tabs. Browsers open at most six
// HTTP/1.1 connections per host, and each EventSource holds one: with the
// dashboard's three streams per tab, the third tab of a browser never
// loaded. Through the client library's SharedWorker, every tab of the
// browser shares one /ws socket.
//
// Here: eight dashboard tabs in one browser over plain HTTP/1.1, against a
// gateway that admits at most TWO requests in flight from the browser's
// address at once (`--max-connections-per-address 2`, open streams
// included; the page and the library are not gated). Every tab must show
// every pod within 2 s of being opened, changes must reach every tab within
// 2 s, and the gateway must have refused nothing. Then the fallback: a
// browser without SharedWorker, where each tab keeps a socket of its own.
//
//   cargo build && (cd web-test && npm ci && npm test)

import {after, before, test} from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import {ARTIFACTS, Cluster, freePort, launch, metric, newPod, podBlock, waitForBlocks, waitForState} from './support.mjs';

const PODS = 40;
const NODES = 3;
const TABS = 8;
const FALLBACK_TABS = 3;
const PROMISED = 2000;

const cluster = new Cluster({pods: PODS, nodes: NODES});
let limited; // the gateway that admits two requests in flight per address
let plain;
const contexts = [];

before(async () => {
  await cluster.startSim();
  const limitedPort = await freePort();
  const plainPort = await freePort();
  await cluster.startGateway(limitedPort, ['--max-connections-per-address', '2']);
  await cluster.startGateway(plainPort);
  limited = `http://127.0.0.1:${limitedPort}`;
  plain = `http://127.0.0.1:${plainPort}`;
});

after(async () => {
  for (const c of contexts) await c.close().catch(() => {});
  await cluster.stopAll();
});

/** Opens the dashboard in tab `n` of `context`; resolves once it shows every pod, within 2 s. */
async function openTab(context, base, want, n) {
  const page = context.pages().find((p) => p.url() === 'about:blank') || (await context.newPage());
  const started = Date.now();
  try {
    await page.goto(`${base}/`, {timeout: PROMISED});
    await waitForBlocks(page, want, Math.max(1, PROMISED - (Date.now() - started)));
  } catch (err) {
    throw new Error(`tab ${n} did not show ${want} pods within ${PROMISED} ms: ${err.message}`);
  }
  return page;
}

test(`${TABS} dashboard tabs in one browser over HTTP/1.1 all show every pod, through one connection`, async () => {
  const context = await launch(path.join(cluster.tmp, 'profile-shared'));
  contexts.push(context);
  const tabs = [];
  for (let i = 0; i < TABS; i++) {
    const page = await openTab(context, limited, PODS, i + 1);
    assert.equal(await page.locator('#conn').getAttribute('data-shared'), 'true', `tab ${i + 1} uses the shared connection`);
    tabs.push(page);
  }
  for (const [i, page] of tabs.entries()) {
    await waitForState(page, 'live', PROMISED);
    assert.equal(await page.locator('#total-pods').textContent(), String(PODS), `tab ${i + 1}`);
    assert.equal(await page.locator('#board section.node').count(), NODES, `tab ${i + 1}`);
  }
  // The gateway's view: a pods subscription per tab, all on WebSocket, and
  // not one request refused by the limit of two.
  assert.equal(await metric(limited, 'kubefan_subscribers', {resource: 'pods', transport: 'WebSocket'}), TABS);
  assert.equal(await metric(limited, 'kubefan_subscribers', {transport: 'Sse'}), 0);
  assert.equal(await metric(limited, 'kubefan_limits_hit_total', {kind: 'connections'}), 0);

  // A pod created, moved and deleted appears, moves and disappears in every tab.
  const name = 'tabs-moving';
  const key = `default/${name}`;
  await cluster.api('POST', '/api/v1/namespaces/default/pods', newPod(name, 'node-0'));
  await Promise.all(tabs.map((page) => podBlock(page, key, 'node-0').waitFor({timeout: PROMISED})));
  await cluster.api('PATCH', `/api/v1/namespaces/default/pods/${name}`, {spec: {nodeName: 'node-2'}}, 'application/merge-patch+json');
  await Promise.all(tabs.map((page) => podBlock(page, key, 'node-2').waitFor({timeout: PROMISED})));
  await cluster.api('DELETE', `/api/v1/namespaces/default/pods/${name}`);
  await Promise.all(tabs.map((page) => podBlock(page, key).waitFor({state: 'detached', timeout: PROMISED})));

  fs.mkdirSync(ARTIFACTS, {recursive: true});
  const shot = path.join(ARTIFACTS, 'dashboard-tab8.png');
  await tabs[TABS - 1].bringToFront();
  await tabs[TABS - 1].screenshot({path: shot, fullPage: true});
  assert.ok(fs.statSync(shot).size > 10000);

  // Tabs that go away leave: their subscriptions end, the others' stay.
  for (const page of tabs.splice(0, TABS / 2)) await page.close({runBeforeUnload: true});
  const deadline = Date.now() + 5000;
  let left;
  while (Date.now() < deadline) {
    left = await metric(limited, 'kubefan_subscribers', {resource: 'pods', transport: 'WebSocket'});
    if (left === TABS / 2) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  assert.equal(left, TABS / 2, 'the closed tabs were unsubscribed');
  // The remaining tabs still follow changes.
  await cluster.api('POST', '/api/v1/namespaces/default/pods', newPod('tabs-after-close', 'node-1'));
  await Promise.all(tabs.map((page) => podBlock(page, 'default/tabs-after-close', 'node-1').waitFor({timeout: PROMISED})));
  await cluster.api('DELETE', '/api/v1/namespaces/default/pods/tabs-after-close');
  await Promise.all(tabs.map((page) => waitForBlocks(page, PODS, PROMISED)));
});

test(`without SharedWorker, each of ${FALLBACK_TABS} tabs keeps a socket of its own and shows every pod`, async () => {
  const context = await launch(path.join(cluster.tmp, 'profile-fallback'));
  contexts.push(context);
  // A browser that has no SharedWorker (as some mobile ones).
  await context.addInitScript(() => {
    delete window.SharedWorker;
  });
  const tabs = [];
  for (let i = 0; i < FALLBACK_TABS; i++) {
    const page = await openTab(context, plain, PODS, i + 1);
    assert.equal(await page.locator('#conn').getAttribute('data-shared'), 'false', `tab ${i + 1} has its own connection`);
    tabs.push(page);
  }
  for (const page of tabs) await waitForState(page, 'live', PROMISED);
  assert.equal(await metric(plain, 'kubefan_subscribers', {resource: 'pods', transport: 'WebSocket'}), FALLBACK_TABS);
  assert.equal(await metric(plain, 'kubefan_subscribers', {transport: 'Sse'}), 0);

  await cluster.api('POST', '/api/v1/namespaces/default/pods', newPod('fallback-pod', 'node-2'));
  await Promise.all(tabs.map((page) => podBlock(page, 'default/fallback-pod', 'node-2').waitFor({timeout: PROMISED})));
  await cluster.api('DELETE', '/api/v1/namespaces/default/pods/fallback-pod');
  await Promise.all(tabs.map((page) => waitForBlocks(page, PODS, PROMISED)));

  const shot = path.join(ARTIFACTS, 'dashboard-fallback.png');
  await tabs[0].screenshot({path: shot, fullPage: true});
  assert.ok(fs.statSync(shot).size > 10000);
});
