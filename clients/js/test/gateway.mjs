// The real thing for end-to-end tests: `kubefan sim` (the simulated API
// server, no churn) and `kubefan serve` against it, as two processes, with
// JWT authentication so that token expiry can be tested. Every wait is
// bounded.
//
// KUBEFAN_BIN overrides the binary (default: $CARGO_TARGET_DIR or the
// repository's target/, then debug/kubefan).

import assert from 'node:assert/strict';
import {spawn} from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import {fileURLToPath} from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const BIN = process.env.KUBEFAN_BIN || path.join(process.env.CARGO_TARGET_DIR || path.join(ROOT, 'target'), 'debug', 'kubefan');

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

function delay(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `probe` until it returns a truthy value, for at most `ms`. */
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
    if (child && child.exitCode !== null) break;
    await delay(50);
  }
  throw new Error(`${what} not within ${ms} ms${last ? `: ${last}` : ''}${child ? `\n${child.label} output:\n${child.output}` : ''}`);
}

const b64url = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

/** An HS256 JWT granting everything, expiring in `ttl` seconds. */
export function jwt(secret, ttl, sub = 'e2e') {
  const header = b64url({alg: 'HS256', typ: 'JWT'});
  const payload = b64url({
    sub,
    exp: Math.floor(Date.now() / 1000) + ttl,
    'kubefan/namespaces': ['*'],
    'kubefan/resources': ['*'],
  });
  const sig = crypto.createHmac('sha256', secret).update(`${header}.${payload}`).digest('base64url');
  return `${header}.${payload}.${sig}`;
}

export class Cluster {
  /**
   * `names`: serve several simulated clusters by these names (`--cluster
   * NAME=...`, the first also the default); the helpers below then take
   * the cluster they act on last (default: the first).
   */
  constructor({pods = 20, nodes = 3, names = null} = {}) {
    this.pods = pods;
    this.nodes = nodes;
    this.names = names;
    /** name → {url, kubeconfig}; one unnamed ('') without `names`. */
    this.sims = new Map();
    this.children = new Set();
    this.tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kubefan-js-'));
    this.secret = crypto.randomBytes(32).toString('hex');
    // Should this process be ended early (a test runner's timeout), the
    // gateway and the simulator end with it.
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

  _start(name, args) {
    const child = spawn(BIN, args, {stdio: ['ignore', 'pipe', 'pipe'], env: {...process.env, RUST_LOG: 'warn'}});
    child.output = '';
    const keep = (chunk) => {
      child.output = (child.output + chunk).slice(-20000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.exited = new Promise((resolve) => child.once('exit', () => {
      this.children.delete(child);
      resolve();
    }));
    child.label = name;
    this.children.add(child);
    return child;
  }

  async start() {
    assert.ok(fs.existsSync(BIN), `${BIN} is missing: run cargo build first`);
    this.secretFile = path.join(this.tmp, 'jwt.secret');
    fs.writeFileSync(this.secretFile, this.secret);
    for (const [i, name] of (this.names || ['']).entries()) {
      const simPort = await freePort();
      const kubeconfig = path.join(this.tmp, `sim${name ? '-' + name : ''}.kubeconfig`);
      const sim = this._start(`sim ${name}`, [
        'sim', '--listen', `127.0.0.1:${simPort}`, '--kubeconfig-out', kubeconfig,
        '--churn-rate', '0', '--pods', String(this.pods), '--nodes', String(this.nodes), '--seed', String(11 + i),
      ]);
      await eventually('simulated API server', 20000, () => fs.existsSync(kubeconfig), sim);
      this.sims.set(name, {url: `http://127.0.0.1:${simPort}`, kubeconfig});
    }
    const first = [...this.sims.values()][0];
    this.simUrl = first.url;
    this.kubeconfig = first.kubeconfig;
    this.port = await freePort();
    this.base = `http://127.0.0.1:${this.port}`;
    await this.startGateway();
  }

  async startGateway() {
    const upstream = this.names
      ? [...this.names.flatMap((n) => ['--cluster', `${n}=${this.sims.get(n).kubeconfig}`]), '--default-cluster', this.names[0]]
      : ['--kubeconfig', this.kubeconfig];
    const child = this._start('gateway', [
      'serve', ...upstream, '--listen', `127.0.0.1:${this.port}`,
      '--resources', 'pods,nodes', '--shutdown-grace-secs', '1',
      '--auth', 'jwt', '--jwt-secret-file', this.secretFile, '--jwt-leeway-secs', '0',
    ]);
    await eventually('gateway ready', 30000, async () => (await fetch(`${this.base}/readyz`)).status === 200, child);
    this.gateway = child;
  }

  async killGateway() {
    this.gateway.kill('SIGKILL');
    await this.gateway.exited;
  }

  token(ttl = 3600) {
    return jwt(this.secret, ttl);
  }

  async api(method, pathname, body, contentType = 'application/json', cluster = undefined) {
    const sim = cluster === undefined ? this.simUrl : this.sims.get(cluster).url;
    const r = await fetch(sim + pathname, {
      method,
      headers: body ? {'Content-Type': contentType} : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    assert.ok(r.ok, `${method} ${pathname}: ${r.status} ${text}`);
    return JSON.parse(text);
  }

  async listPods(cluster = undefined) {
    return (await this.api('GET', '/api/v1/pods', undefined, undefined, cluster)).items;
  }

  createPod(name, node, labels = {app: 'e2e'}, cluster = undefined) {
    return this.api('POST', '/api/v1/namespaces/default/pods', {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: {name, namespace: 'default', labels},
      spec: {nodeName: node, containers: [{name: 'main', image: 'registry.example/e2e:1'}]},
      status: {phase: 'Running'},
    }, 'application/json', cluster);
  }

  patchPod(name, patch) {
    return this.api('PATCH', `/api/v1/namespaces/default/pods/${name}`, patch, 'application/merge-patch+json');
  }

  deletePod(name) {
    return this.api('DELETE', `/api/v1/namespaces/default/pods/${name}`);
  }

  async stop() {
    for (const child of [...this.children]) {
      child.kill('SIGTERM');
      await Promise.race([child.exited, delay(10000)]);
      if (this.children.has(child)) {
        child.kill('SIGKILL');
        await child.exited;
      }
    }
    fs.rmSync(this.tmp, {recursive: true, force: true});
  }
}

const EVENTS = ['added', 'modified', 'deleted', 'synced', 'reset', 'state', 'error', 'bookmark'];

/**
 * Resolves when `cond()` holds, checked at every event of `watch`; fails
 * after `ms` saying `what`.
 */
export function when(watch, what, cond, ms = 5000) {
  return new Promise((resolve, reject) => {
    const offs = [];
    const done = (fn, v) => {
      clearTimeout(timer);
      for (const off of offs) off();
      fn(v);
    };
    const check = () => {
      let ok = false;
      try {
        ok = cond();
      } catch (err) {
        return done(reject, err);
      }
      if (ok) done(resolve);
    };
    const timer = setTimeout(
      () => done(reject, new Error(`${what}: not within ${ms} ms (state ${watch.state}, error ${JSON.stringify(watch.error)})`)),
      ms,
    );
    for (const type of EVENTS) offs.push(watch.on(type, check));
    check();
  });
}
