// What the browser tests share: the two real processes (`kubefan sim`, no
// churn, and `kubefan serve` pointed at it), the simulated API server's
// HTTP API, Debian's Chromium driven by playwright-core (which never
// downloads a browser here), and bounded waits.
//
// KUBEFAN_BIN overrides the binary (default: $CARGO_TARGET_DIR or target,
// then debug/kubefan), CHROMIUM the browser (default: /usr/bin/chromium).
// Screenshots go to artifacts/ at the repository root.

import assert from 'node:assert/strict';
import {execFileSync, spawn} from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import {fileURLToPath} from 'node:url';
import {chromium} from 'playwright-core';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const BIN = process.env.KUBEFAN_BIN
  || path.join(process.env.CARGO_TARGET_DIR || path.join(ROOT, 'target'), 'debug', 'kubefan');
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
export const ARTIFACTS = path.join(ROOT, 'artifacts');

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const {port} = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export function delay(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Polls `probe` until it returns a truthy value, for at most `ms`.
export async function eventually(what, ms, probe, child) {
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

/** The simulated cluster and the gateways in front of it, as processes. */
export class Cluster {
  constructor({pods, nodes}) {
    this.pods = pods;
    this.nodes = nodes;
    this.tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kubefan-web-'));
    this.kubeconfig = path.join(this.tmp, 'sim.kubeconfig');
    this.children = new Set();
    // Should the test process be ended early, its children end with it.
    const reap = () => {
      for (const child of this.children) child.kill('SIGKILL');
    };
    process.once('exit', reap);
    for (const signal of ['SIGTERM', 'SIGINT']) {
      process.once(signal, () => {
        reap();
        process.exit(130);
      });
    }
  }

  start(name, args) {
    const child = spawn(BIN, args, {stdio: ['ignore', 'pipe', 'pipe'], env: {...process.env, RUST_LOG: 'warn'}});
    child.output = '';
    const keep = (chunk) => {
      child.output = (child.output + chunk).slice(-20000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.exited = new Promise((resolve) => child.once('exit', (code, signal) => {
      this.children.delete(child);
      resolve({code, signal});
    }));
    child.label = name;
    this.children.add(child);
    return child;
  }

  async startSim() {
    assert.ok(fs.existsSync(BIN), `${BIN} is missing: run cargo build first`);
    const simPort = await freePort();
    this.simUrl = `http://127.0.0.1:${simPort}`;
    const sim = this.start('sim', [
      'sim', '--listen', `127.0.0.1:${simPort}`, '--kubeconfig-out', this.kubeconfig,
      '--churn-rate', '0', '--pods', String(this.pods), '--nodes', String(this.nodes), '--seed', '7',
    ]);
    await eventually('simulated API server', 20000, () => fs.existsSync(this.kubeconfig), sim);
  }

  /**
   * Simulated clusters named `names` (each with this cluster's pods and
   * nodes, seeded apart), for a gateway serving them all
   * (`startClustersGateway`); `sims` maps each name to its URL and
   * kubeconfig.
   */
  async startSims(names) {
    assert.ok(fs.existsSync(BIN), `${BIN} is missing: run cargo build first`);
    this.sims = new Map();
    for (const [i, name] of names.entries()) {
      const port = await freePort();
      const kubeconfig = path.join(this.tmp, `sim-${name}.kubeconfig`);
      const sim = this.start(`sim ${name}`, [
        'sim', '--listen', `127.0.0.1:${port}`, '--kubeconfig-out', kubeconfig,
        '--churn-rate', '0', '--pods', String(this.pods), '--nodes', String(this.nodes), '--seed', String(7 + i),
      ]);
      await eventually(`simulated API server ${name}`, 20000, () => fs.existsSync(kubeconfig), sim);
      this.sims.set(name, {url: `http://127.0.0.1:${port}`, kubeconfig});
    }
  }

  /** A gateway on `port` serving every sim of `startSims` by name (`--cluster`). */
  async startClustersGateway(port, extra = []) {
    const clusters = [...this.sims].flatMap(([name, s]) => ['--cluster', `${name}=${s.kubeconfig}`]);
    const child = this.start('gateway', [
      'serve', ...clusters, '--listen', `127.0.0.1:${port}`,
      '--resources', 'pods,nodes', '--shutdown-grace-secs', '1', ...extra,
    ]);
    await eventually('gateway ready', 30000, async () => (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200, child);
    return child;
  }

  /** A gateway on `port` against the simulator, with `extra` flags; resolves once ready. */
  async startGateway(port, extra = [], scheme = 'http') {
    const child = this.start('gateway', [
      'serve', '--kubeconfig', this.kubeconfig, '--listen', `127.0.0.1:${port}`,
      '--resources', 'pods,nodes', '--shutdown-grace-secs', '1', ...extra,
    ]);
    await eventually('gateway ready', 30000, async () => {
      const r = await fetch(`${scheme}://127.0.0.1:${port}/readyz`);
      return r.status === 200;
    }, child);
    return child;
  }

  async stop(child, signal = 'SIGTERM') {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill(signal);
    const done = await Promise.race([child.exited, delay(10000).then(() => null)]);
    if (!done) {
      child.kill('SIGKILL');
      await child.exited;
    }
  }

  async stopAll() {
    for (const child of [...this.children]) await this.stop(child);
    fs.rmSync(this.tmp, {recursive: true, force: true});
  }

  async api(method, pathname, body, contentType = 'application/json') {
    const r = await fetch(this.simUrl + pathname, {
      method,
      headers: body ? {'Content-Type': contentType} : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    assert.ok(r.ok, `${method} ${pathname}: ${r.status} ${text}`);
    return JSON.parse(text);
  }

  async listPods(query = '') {
    return (await this.api('GET', '/api/v1/pods' + query)).items;
  }

  /** A `pod-reader` Role in `ns`, bound to `group` (what a team member has). */
  async grantPods(ns, group) {
    await this.api('POST', `${RBAC}/namespaces/${ns}/roles`, {
      apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role',
      metadata: {name: 'pod-reader', namespace: ns},
      rules: [{apiGroups: [''], resources: ['pods'], verbs: ['get', 'list', 'watch']}],
    });
    await this.api('POST', `${RBAC}/namespaces/${ns}/rolebindings`, {
      apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding',
      metadata: {name: `${group.replace(/[^a-z0-9-]/g, '-')}-reads-pods`, namespace: ns},
      roleRef: {apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'pod-reader'},
      subjects: [{apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: group}],
    });
  }

  /** Nodes readable by `group`, through a ClusterRoleBinding named `binding`. */
  async grantNodes(group, binding) {
    if (!this.nodeReader) {
      await this.api('POST', `${RBAC}/clusterroles`, {
        apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole',
        metadata: {name: 'node-reader'},
        rules: [{apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch']}],
      });
      this.nodeReader = true;
    }
    await this.api('POST', `${RBAC}/clusterrolebindings`, {
      apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding',
      metadata: {name: binding},
      roleRef: {apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'node-reader'},
      subjects: [{apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: group}],
    });
  }
}

const RBAC = '/apis/rbac.authorization.k8s.io/v1';

export function newPod(name, node) {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {name, namespace: 'default', labels: {app: 'e2e'}},
    spec: {nodeName: node, containers: [{name: 'main', image: 'registry.example/e2e:1'}]},
    status: {phase: 'Running'},
  };
}

/**
 * A self-signed P-256 certificate for 127.0.0.1 (CA:FALSE: rustls refuses a
 * CA certificate as a server's), made with openssl in `dir`.
 */
export function selfSignedCertificate(dir) {
  const cert = path.join(dir, 'tls.crt');
  const key = path.join(dir, 'tls.key');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1',
    '-keyout', key, '-out', cert, '-subj', '/CN=kubefan-web-test',
    '-addext', 'subjectAltName=IP:127.0.0.1', '-addext', 'basicConstraints=critical,CA:FALSE',
  ], {stdio: 'ignore'});
  return {cert, key};
}

/**
 * A browser with its own profile: its tabs are pages of the returned context.
 * `trustAnyCertificate` accepts the test's own self-signed certificate.
 */
export async function launch(profile, {trustAnyCertificate = false} = {}) {
  const context = await chromium.launchPersistentContext(profile, {
    ignoreHTTPSErrors: trustAnyCertificate,
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-quic', '--no-first-run', '--disable-component-update', '--disable-sync',
      // Playwright's ignoreHTTPSErrors does not reach a SharedWorker's
      // WebSocket; the browser-wide switch does.
      ...(trustAnyCertificate ? ['--ignore-certificate-errors'] : []),
    ],
    viewport: {width: 1440, height: 900},
  });
  context.on('page', (page) => page.on('pageerror', (err) => console.error('page error:', err)));
  for (const page of context.pages()) page.on('pageerror', (err) => console.error('page error:', err));
  return context;
}

export const podBlock = (page, key, node) =>
  node === undefined
    ? page.locator(`[data-pod="${key}"]`)
    : page.locator(`.pods[data-node="${node}"] > [data-pod="${key}"]`);

export function blocks(page) {
  return page.locator('#board .pod, #unscheduled .pod').count();
}

export async function waitForBlocks(page, n, timeout) {
  // Polled on a timer, not on animation frames (Playwright's default):
  // Chromium runs a tab that is not in front at one frame a second, and
  // the page itself draws on animation frames, so frame polling would add
  // a second of the test's own to the page's delay.
  await page.waitForFunction(
    (want) => document.querySelectorAll('#board .pod, #unscheduled .pod').length === want,
    n,
    {timeout, polling: 50},
  );
}

export const waitForState = (page, state, timeout) =>
  page.locator(`#conn[data-state="${state}"]`).waitFor({timeout});

/** The value of a Prometheus sample of `name` whose labels include `labels`, summed (0 when absent). */
export async function metric(base, name, labels = {}) {
  const text = await (await fetch(`${base}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = line.match(/^([a-z_]+)(\{([^}]*)\})? ([0-9.e+-]+)$/);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries((m[3] || '').split(',').filter(Boolean).map((kv) => {
      const [k, v] = kv.split('=');
      return [k, v.replace(/^"|"$/g, '')];
    }));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[4]);
  }
  return sum;
}
