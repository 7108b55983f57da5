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
// KUBEFAN_BIN overrides the binary (default: $CARGO_TARGET_DIR or target, then debug/kubefan),
// CHROMIUM the browser (default: /usr/bin/chromium). The screenshot goes
// to artifacts/dashboard.png at the repository root.

import {after, before, test} from 'node:test';
import assert from 'node:assert/strict';
import {spawn} from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import {fileURLToPath} from 'node:url';
import {chromium} from 'playwright-core';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const BIN = process.env.KUBEFAN_BIN
  || path.join(process.env.CARGO_TARGET_DIR || path.join(ROOT, 'target'), 'debug', 'kubefan');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = path.join(ROOT, 'artifacts');
const PODS = 60;
const NODES = 4;
const PROMISED = 2000; // "appears, moves and disappears within two seconds"

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kubefan-web-'));
const kubeconfig = path.join(tmp, 'sim.kubeconfig');
const children = new Set();
let simUrl;
let gatewayPort;
let gateway;
let context;
let page;

// ---- processes -------------------------------------------------------------

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const {port} = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function start(name, args) {
  const child = spawn(BIN, args, {stdio: ['ignore', 'pipe', 'pipe'], env: {...process.env, RUST_LOG: 'warn'}});
  child.output = '';
  const keep = (chunk) => {
    child.output = (child.output + chunk).slice(-20000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  child.exited = new Promise((resolve) => child.once('exit', (code, signal) => {
    children.delete(child);
    resolve({code, signal});
  }));
  child.label = name;
  children.add(child);
  return child;
}

async function stop(child, signal = 'SIGTERM') {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill(signal);
  const done = await Promise.race([child.exited, delay(10000).then(() => null)]);
  if (!done) {
    child.kill('SIGKILL');
    await child.exited;
  }
}

function delay(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Polls `probe` until it returns a truthy value, for at most `ms`.
async function eventually(what, ms, probe, child) {
  const deadline = Date.now() + ms;
  let last;
  while (Date.now() < deadline) {
    try {
      const v = await probe();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (child && (child.exitCode !== null || child.signalCode !== null)) break;
    await delay(50);
  }
  throw new Error(`${what} not within ${ms} ms${last ? `: ${last}` : ''}${child ? `\n${child.label} output:\n${child.output}` : ''}`);
}

async function startGateway() {
  const child = start('gateway', [
    'serve', '--kubeconfig', kubeconfig, '--listen', `127.0.0.1:${gatewayPort}`,
    '--resources', 'pods,nodes', '--shutdown-grace-secs', '1',
  ]);
  await eventually('gateway ready', 30000, async () => {
    const r = await fetch(`http://127.0.0.1:${gatewayPort}/readyz`);
    return r.status === 200;
  }, child);
  return child;
}

// ---- the simulated API server ------------------------------------------------

async function api(method, pathname, body, contentType = 'application/json') {
  const r = await fetch(simUrl + pathname, {
    method,
    headers: body ? {'Content-Type': contentType} : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  assert.ok(r.ok, `${method} ${pathname}: ${r.status} ${text}`);
  return JSON.parse(text);
}

const listPods = async (query = '') => (await api('GET', '/api/v1/pods' + query)).items;

function newPod(name, node) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {name, namespace: 'default', labels: {app: 'e2e'}},
    spec: {nodeName: node, containers: [{name: 'main', image: 'registry.example/e2e:1'}]},
    status: {phase: 'Running'},
  };
}

// ---- the page ----------------------------------------------------------------

const podBlock = (key, node) =>
  node === undefined
    ? page.locator(`[data-pod="${key}"]`)
    : page.locator(`.pods[data-node="${node}"] > [data-pod="${key}"]`);

async function blocks() {
  return page.locator('#board .pod, #unscheduled .pod').count();
}

async function waitForBlocks(n, timeout) {
  await page.waitForFunction(
    (want) => document.querySelectorAll('#board .pod, #unscheduled .pod').length === want,
    n,
    {timeout},
  );
}

const waitForState = (state, timeout) =>
  page.locator(`#conn[data-state="${state}"]`).waitFor({timeout});

// ---- set-up --------------------------------------------------------------------

before(async () => {
  assert.ok(fs.existsSync(BIN), `${BIN} is missing: run cargo build first`);
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install -y chromium`);
  const simPort = await freePort();
  simUrl = `http://127.0.0.1:${simPort}`;
  const sim = start('sim', [
    'sim', '--listen', `127.0.0.1:${simPort}`, '--kubeconfig-out', kubeconfig,
    '--churn-rate', '0', '--pods', String(PODS), '--nodes', String(NODES), '--seed', '7',
  ]);
  await eventually('simulated API server', 20000, () => fs.existsSync(kubeconfig), sim);
  gatewayPort = await freePort();
  gateway = await startGateway();

  context = await chromium.launchPersistentContext(path.join(tmp, 'profile'), {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-quic', '--no-first-run', '--disable-component-update', '--disable-sync',
    ],
    viewport: {width: 1440, height: 900},
  });
  page = context.pages()[0] || (await context.newPage());
  page.on('pageerror', (err) => {
    console.error('page error:', err);
  });
  await page.goto(`http://127.0.0.1:${gatewayPort}/`);
});

after(async () => {
  if (context) await context.close().catch(() => {});
  for (const child of [...children]) await stop(child);
  fs.rmSync(tmp, {recursive: true, force: true});
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
  // The namespace picker offers the cluster's namespaces.
  await page.waitForFunction(() => document.querySelectorAll('#namespace option').length > 2, null, {timeout: 5000});
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
