// The dashboard at `/`, tested as a person uses it: Debian's Chromium,
// headless, driven by playwright-core (which never downloads a browser
// here), against two real processes: `kubefan sim` (the simulated API
// server, no churn) and `kubefan serve` pointed at it.
//
// Every wait is bounded: page changes are asserted with Playwright's waitFor
// and a timeout (2 s where the issue promises it), and process start-up is
// polled with a deadline.
//
//   cargo build && (cd web-test && npm ci && npm test)
//
// See support.mjs for KUBEFAN_BIN and CHROMIUM. The screenshot goes to
// artifacts/dashboard.png at the repository root.

import {after, before, test} from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import * as support from './support.mjs';
import {ARTIFACTS, BIN, CHROMIUM, Cluster, freePort, launch, newPod} from './support.mjs';

const PODS = 60;
const NODES = 4;
const PROMISED = 2000; // "appears, moves and disappears within two seconds"

const cluster = new Cluster({pods: PODS, nodes: NODES});
let gatewayPort;
let gateway;
let context;
let page;

const startGateway = () => cluster.startGateway(gatewayPort);
const api = (...args) => cluster.api(...args);
const listPods = (query) => cluster.listPods(query);
const podBlock = (key, node) => support.podBlock(page, key, node);
const blocks = () => support.blocks(page);
const waitForBlocks = (n, timeout) => support.waitForBlocks(page, n, timeout);
const waitForState = (state, timeout) => support.waitForState(page, state, timeout);

// ---- set-up --------------------------------------------------------------------

before(async () => {
  assert.ok(fs.existsSync(BIN), `${BIN} is missing: run cargo build first`);
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install -y chromium`);
  await cluster.startSim();
  gatewayPort = await freePort();
  gateway = await startGateway();
  context = await launch(path.join(cluster.tmp, 'profile'));
  // Anything the Content-Security-Policy blocks is recorded.
  await context.addInitScript(() => {
    window.cspViolations = [];
    document.addEventListener('securitypolicyviolation', (e) => {
      window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  page = context.pages()[0] || (await context.newPage());
  await page.goto(`http://127.0.0.1:${gatewayPort}/`);
});

after(async () => {
  if (context) await context.close().catch(() => {});
  await cluster.stopAll();
});

// ---- tests -----------------------------------------------------------------------

test('the page shows one block per pod of the simulated cluster, and its nodes', async () => {
  const pods = await listPods();
  assert.equal(pods.length, PODS);
  await waitForState('live', 10000);
  await waitForBlocks(pods.length, 10000);
  assert.equal(await page.locator('#board section.node').count(), NODES);
  assert.equal(await page.locator('#total-pods').textContent(), String(pods.length));
  assert.equal(await page.locator('#total-nodes').textContent(), String(NODES));
  const unscheduled = pods.filter((p) => !p.spec.nodeName).length;
  assert.equal(await page.locator('#unscheduled .pod').count(), unscheduled);
  assert.equal(await page.locator('#unscheduled-count').textContent(), String(unscheduled));
  for (let i = 0; i < NODES; i++) {
    const node = `node-${i}`;
    const want = pods.filter((p) => p.spec.nodeName === node).length;
    const column = page.locator(`section.node[data-node="${node}"]`);
    assert.equal(await column.locator('.pod').count(), want, node);
    assert.equal(await column.locator('h2 .count').textContent(), String(want), node);
  }
  const running = pods.filter((p) => p.status.phase === 'Running').length;
  assert.equal(await page.locator('#phases [data-phase="Running"] .count').textContent(), String(running));
  // One cluster: no Cluster picker (its label's flex display once showed
  // it empty).
  assert.equal(await page.locator('#cluster-pick').isVisible(), false);
  // The namespace picker offers the cluster's namespaces.
  await page.waitForFunction(() => document.querySelectorAll('#namespace option').length > 2, null, {timeout: 5000});
  // Its streams go through the client library's shared connection, which
  // the page's policy admits (script and worker from this origin).
  assert.equal(await page.locator('#conn').getAttribute('data-shared'), 'true');
  assert.deepEqual(await page.evaluate(() => window.cspViolations), []);
  const csp = (await (await fetch(`http://127.0.0.1:${gatewayPort}/`)).headers.get('content-security-policy'));
  assert.doesNotMatch(csp, /unsafe/);
});

test('a pod created, moved and deleted upstream appears, moves and disappears within 2 s', async () => {
  const name = 'e2e-moving';
  const key = `default/${name}`;
  await api('POST', '/api/v1/namespaces/default/pods', newPod(name, 'node-0'));
  await podBlock(key, 'node-0').waitFor({timeout: PROMISED});

  await api('PATCH', `/api/v1/namespaces/default/pods/${name}`, {spec: {nodeName: 'node-2'}}, 'application/merge-patch+json');
  await podBlock(key, 'node-2').waitFor({timeout: PROMISED});
  assert.equal(await podBlock(key).count(), 1, 'the block moved, it was not copied');

  await api('PATCH', `/api/v1/namespaces/default/pods/${name}`, {status: {phase: 'Failed'}}, 'application/merge-patch+json');
  await page.locator(`[data-pod="${key}"].phase-failed`).waitFor({timeout: PROMISED});

  await api('DELETE', `/api/v1/namespaces/default/pods/${name}`);
  await podBlock(key).waitFor({state: 'detached', timeout: PROMISED});
  await waitForBlocks(PODS, PROMISED);
});

test('the label selector box re-subscribes with labelSelector, and clearing it shows every pod again', async () => {
  const pods = await listPods();
  const app = pods[0].metadata.labels.app;
  const want = pods.filter((p) => p.metadata.labels.app === app).length;
  assert.ok(want < pods.length, 'the seed gives more than one app');
  await page.fill('#selector', `app=${app}`);
  await page.press('#selector', 'Enter');
  await waitForBlocks(want, 5000);
  assert.ok(page.url().includes('labelSelector=app%3D'), page.url());

  await page.fill('#selector', 'app in (');
  await page.press('#selector', 'Enter');
  await page.locator('#banner:not([hidden])').waitFor({timeout: 5000});
  assert.match(await page.locator('#banner-text').textContent(), /400/);

  await page.fill('#selector', '');
  await page.press('#selector', 'Enter');
  await waitForBlocks(pods.length, 5000);
  await waitForState('live', 5000);
  assert.ok(await page.locator('#banner').isHidden());
});

test('a bad label selector marks the board not current, with the gateway\'s message; a good one makes it live again', async () => {
  const pods = await listPods();
  const app = pods[0].metadata.labels.app;
  const want = pods.filter((p) => p.metadata.labels.app === app).length;
  await waitForState('live', 5000);
  await waitForBlocks(PODS, 5000);
  assert.equal(await page.locator('body').getAttribute('data-current'), 'true');
  assert.ok(await page.locator('#not-current').isHidden());

  await page.fill('#selector', 'app in (web');
  await page.press('#selector', 'Enter');
  await page.locator('#not-current:not([hidden])').waitFor({timeout: 5000});
  assert.equal(await page.locator('#conn').getAttribute('data-state'), 'error');
  assert.equal(await page.locator('#banner').getAttribute('data-level'), 'error');
  assert.match(await page.locator('#banner-text').textContent(), /^The gateway refused the request \(400\): .+/);
  // The old picture stays, dimmed, and no count claims to be live: the
  // nodes' count is the nodes watch's, still live.
  assert.equal(await page.locator('body').getAttribute('data-current'), 'false');
  assert.equal(await blocks(), PODS);
  const opacity = await page.locator('#board').evaluate((e) => Number(getComputedStyle(e).opacity));
  assert.ok(opacity < 0.5, `board opacity ${opacity}`);
  assert.equal(await page.locator('#total-pods').textContent(), '—');
  assert.equal(await page.locator('#unscheduled-count').textContent(), '—');
  assert.deepEqual([...new Set(await page.locator('#phases .count').allTextContents())], ['—']);
  assert.deepEqual([...new Set(await page.locator('#board section.node h2 .count').allTextContents())], ['—']);
  assert.equal(await page.locator('#total-nodes').textContent(), String(NODES));
  fs.mkdirSync(ARTIFACTS, {recursive: true});
  await page.screenshot({path: path.join(ARTIFACTS, 'dashboard-bad-selector.png'), fullPage: true});

  await page.fill('#selector', `app=${app}`);
  await page.press('#selector', 'Enter');
  await waitForBlocks(want, 5000);
  await waitForState('live', 5000);
  assert.equal(await page.locator('body').getAttribute('data-current'), 'true');
  assert.ok(await page.locator('#not-current').isHidden());
  assert.ok(await page.locator('#banner').isHidden());
  assert.equal(await page.locator('#total-pods').textContent(), String(want));
  assert.equal(await page.locator('#board').evaluate((e) => getComputedStyle(e).opacity), '1');

  await page.fill('#selector', '');
  await page.press('#selector', 'Enter');
  await waitForBlocks(PODS, 5000);
  await waitForState('live', 5000);
});

test('after the gateway is killed and restarted, the page reconnects by itself and resumes', async () => {
  await waitForState('live', 5000);
  // Mark a block: a page that resumed keeps its elements.
  const before = (await listPods())[0];
  const marked = `${before.metadata.namespace}/${before.metadata.name}`;
  await podBlock(marked).evaluate((e) => {
    e.dataset.survivor = 'yes';
  });

  const conn = page.locator('#conn');
  const snapshots = await conn.getAttribute('data-snapshots');
  const resets = await conn.getAttribute('data-resets');

  gateway.kill('SIGKILL');
  await gateway.exited;
  await waitForState('reconnecting', 5000);
  // While the gateway is down the picture stays.
  assert.equal(await blocks(), PODS);

  gateway = await startGateway();
  await waitForState('live', 15000);
  assert.equal(await page.locator('[data-survivor="yes"]').count(), 1, 'not redrawn from scratch');
  // Resumed with Last-Event-ID: no new snapshot, no RESET.
  assert.equal(await conn.getAttribute('data-snapshots'), snapshots, 'resumed, not re-snapshotted');
  assert.equal(await conn.getAttribute('data-resets'), resets, 'no RESET');

  const name = 'e2e-after-restart';
  await api('POST', '/api/v1/namespaces/default/pods', newPod(name, 'node-1'));
  await podBlock(`default/${name}`, 'node-1').waitFor({timeout: PROMISED});
  await waitForBlocks(PODS + 1, PROMISED);
});

test('a screenshot of the dashboard is saved to artifacts/dashboard.png', async () => {
  fs.mkdirSync(ARTIFACTS, {recursive: true});
  await page.hover(`.pods[data-node="node-1"] > [data-pod="default/e2e-after-restart"]`);
  const file = path.join(ARTIFACTS, 'dashboard.png');
  await page.screenshot({path: file, fullPage: true});
  assert.ok(fs.statSync(file).size > 10000);
});
