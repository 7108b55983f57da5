// The client against the real gateway (two processes: `kubefan sim` and
// `kubefan serve --auth jwt`), over each transport Node has: SSE and /ws.
// (The shared connection needs a browser: web-test/ covers it.)
//
//   cargo build && (cd clients/js && npm test)
import {after, before, describe, test} from 'node:test';
import assert from 'node:assert/strict';

import {connect, keyOf} from '../kubefan.js';
import {Cluster, when} from './gateway.mjs';

const cluster = new Cluster({pods: 20, nodes: 3});
before(() => cluster.start());
after(() => cluster.stop());

const TRANSPORTS = ['sse', 'ws'];
const open = [];
function client(transport, options = {}) {
  const c = connect({transport, base: cluster.base, token: cluster.token(), ...options});
  open.push(c);
  return c;
}
after(() => open.forEach((c) => c.close()));

/** What the gateway sent, as text, whichever the transport. */
function spies() {
  const seen = [];
  class SpySocket extends WebSocket {
    constructor(url) {
      super(url);
      this.addEventListener('message', (e) => seen.push(e.data));
    }
  }
  const spyFetch = async (url, init) => {
    const resp = await fetch(url, init);
    if (!resp.body) return resp;
    const [mine, theirs] = resp.body.tee();
    (async () => {
      const decoder = new TextDecoder();
      try {
        for await (const chunk of mine) seen.push(decoder.decode(chunk, {stream: true}));
      } catch (_) {
        // Aborted with the stream.
      }
    })();
    return new Response(theirs, {status: resp.status, statusText: resp.statusText, headers: resp.headers});
  };
  return {seen, WebSocket: SpySocket, fetch: spyFetch};
}

function record(w, filter = () => true) {
  const log = [];
  for (const type of ['added', 'modified', 'deleted']) w.on(type, (o) => filter(o) && log.push(`${type} ${keyOf(o)}`));
  w.on('reset', (s) => log.push('reset ' + s.reason));
  w.on('error', (s) => log.push('error ' + s.code));
  return log;
}

for (const transport of TRANSPORTS) {
  describe(`over ${transport}`, () => {
    test('the snapshot is the cluster, as projected', async () => {
      const c = client(transport);
      const pods = c.watch('pods', {fields: 'spec.nodeName,status.phase'});
      const nodes = c.watch('nodes', {fields: 'metadata.name'});
      await Promise.all([pods.ready(), nodes.ready()]);
      const want = await cluster.listPods();
      assert.deepEqual([...pods.objects.keys()].sort(), want.map(keyOf).sort());
      for (const p of want) {
        const got = pods.get(keyOf(p));
        assert.equal((got.spec || {}).nodeName, p.spec.nodeName || undefined, keyOf(p));
        assert.equal(got.status.phase, p.status.phase, keyOf(p));
        assert.equal((got.spec || {}).containers, undefined, 'projected away');
      }
      assert.deepEqual([...nodes.objects.keys()].sort(), ['node-0', 'node-1', 'node-2']);
      assert.equal(pods.state, 'live');
      assert.match(pods.resourceVersion, /^[0-9]+$/);
      pods.close();
      nodes.close();
    });

    test('a pod created, moved and deleted arrives as added, modified, deleted', async () => {
      const c = client(transport);
      const pods = c.watch('pods', {namespace: 'default'});
      await pods.ready();
      const name = `${transport}-moving`;
      const key = `default/${name}`;
      const log = record(pods, (o) => keyOf(o) === key);
      await cluster.createPod(name, 'node-0');
      await when(pods, 'created', () => pods.get(key));
      await cluster.patchPod(name, {spec: {nodeName: 'node-2'}});
      await when(pods, 'moved', () => pods.get(key).spec.nodeName === 'node-2');
      const rv = pods.resourceVersion;
      await cluster.deletePod(name);
      await when(pods, 'deleted', () => !pods.get(key));
      assert.ok(BigInt(pods.resourceVersion) > BigInt(rv), 'the position moves with each change');
      assert.deepEqual(log, [`added ${key}`, `modified ${key}`, `deleted ${key}`]);
      pods.close();
    });

    test('merge patches keep the store equal to the cluster', async () => {
      const spy = spies();
      const c = client(transport, {WebSocket: spy.WebSocket, fetch: spy.fetch});
      const pods = c.watch('pods', {namespace: 'default', patch: true, fields: 'metadata.labels,spec.nodeName,status.phase'});
      await pods.ready();
      const name = `${transport}-patched`;
      const key = `default/${name}`;
      await cluster.createPod(name, 'node-1', {app: 'e2e', tier: 'cache'});
      await when(pods, 'created', () => pods.get(key));
      await cluster.patchPod(name, {metadata: {labels: {tier: null, color: 'blue'}}, status: {phase: 'Failed'}});
      await when(pods, 'patched', () => pods.get(key).status.phase === 'Failed');
      const upstream = (await cluster.api('GET', `/api/v1/namespaces/default/pods/${name}`));
      const got = pods.get(key);
      assert.deepEqual(got.metadata.labels, upstream.metadata.labels);
      assert.deepEqual(got.metadata.labels, {app: 'e2e', color: 'blue'});
      assert.equal(got.spec.nodeName, 'node-1');
      assert.equal(got.metadata.resourceVersion, upstream.metadata.resourceVersion);
      assert.ok(spy.seen.join('').includes('"patch":"merge"'), 'the change came as a merge patch');
      await cluster.deletePod(name);
      await when(pods, 'deleted', () => !pods.get(key));
      pods.close();
    });

    test('an expired token is renewed through getToken and the stream resumes without a reset', async () => {
      const issued = [];
      const c = client(transport, {
        token: undefined,
        getToken: async () => {
          // The first token lives two seconds; the next ones an hour.
          const t = cluster.token(issued.length ? 3600 : 2);
          issued.push(t);
          return t;
        },
      });
      const pods = c.watch('pods', {namespace: 'default'});
      const log = record(pods);
      await pods.ready();
      const position = pods.resourceVersion;
      await when(pods, 'token expiry', () => log.includes('error 401'), 8000);
      await when(pods, 'live again', () => pods.state === 'live' && issued.length === 2);
      assert.equal(pods.error, null);
      assert.equal(pods.resets, 0, 'no RESET');
      assert.equal(pods.snapshots, 1, 'resumed, not re-snapshotted');
      assert.equal(pods.resourceVersion, position);

      const name = `${transport}-after-expiry`;
      await cluster.createPod(name, 'node-0');
      await when(pods, 'a change after the renewal', () => pods.get(`default/${name}`));
      assert.deepEqual(log.filter((l) => l.startsWith('error') || l.startsWith('reset')), ['error 401']);
      await cluster.deletePod(name);
      pods.close();
    });

    test('without a valid token the watch stops with the 401 and its message', async () => {
      const c = client(transport, {token: 'not-a-jwt'});
      const pods = c.watch('pods');
      await assert.rejects(pods.ready(), (err) => err.status.code === 401);
      assert.equal(pods.state, 'error');
      assert.equal(pods.error.reason, 'Unauthorized');
      pods.close();
    });

    test('a malformed selector is a 400 naming the option, and update() recovers', async () => {
      const c = client(transport);
      const pods = c.watch('pods', {labelSelector: 'app in ('});
      await assert.rejects(pods.ready(), (err) => err.status.code === 400 && /labelSelector/.test(err.status.message));
      pods.update({labelSelector: 'app=e2e-nothing'});
      await pods.ready();
      assert.equal(pods.size, 0);
      assert.equal(pods.state, 'live');
      pods.close();
    });
  });
}

describe('across gateway restarts (both transports at once)', () => {
  test('after the gateway is killed and restarted, watches resume with no snapshot and no RESET', async () => {
    const watches = TRANSPORTS.map((t) => client(t).watch('pods'));
    await Promise.all(watches.map((w) => w.ready()));
    const logs = watches.map((w) => record(w));
    await cluster.killGateway();
    await Promise.all(watches.map((w) => when(w, 'reconnecting', () => w.state === 'reconnecting')));
    assert.ok(watches.every((w) => w.size === 20), 'the picture stays meanwhile');
    await cluster.startGateway();
    await Promise.all(watches.map((w) => when(w, 'live again', () => w.state === 'live', 15000)));
    for (const w of watches) {
      assert.equal(w.snapshots, 1);
      assert.equal(w.resets, 0);
    }
    await cluster.createPod('after-restart', 'node-1');
    await Promise.all(watches.map((w) => when(w, 'a change after the restart', () => w.get('default/after-restart'))));
    assert.deepEqual(logs, TRANSPORTS.map(() => ['added default/after-restart']));
    watches.forEach((w) => w.close());
  });

  test('changes missed while the gateway was down come as a RESET and a snapshot; the picture never empties', async () => {
    const watches = TRANSPORTS.map((t) => client(t).watch('pods'));
    await Promise.all(watches.map((w) => w.ready()));
    const before = watches[0].size;
    const logs = watches.map((w) => record(w));
    const sizes = watches.map(() => []);
    watches.forEach((w, i) => w.on('state', () => sizes[i].push(w.size)));
    await cluster.killGateway();
    await cluster.createPod('while-down', 'node-2');
    await cluster.deletePod('after-restart');
    await cluster.startGateway();
    await Promise.all(watches.map((w) => when(w, 'the new snapshot', () => w.snapshots === 2, 15000)));
    for (const [i, w] of watches.entries()) {
      assert.equal(w.resets, 1, TRANSPORTS[i]);
      assert.ok(w.get('default/while-down'), TRANSPORTS[i]);
      assert.equal(w.get('default/after-restart'), undefined, TRANSPORTS[i]);
      assert.equal(w.size, before);
      assert.deepEqual(logs[i], ['reset Expired', 'added default/while-down', 'deleted default/after-restart'], TRANSPORTS[i]);
      assert.ok(sizes[i].every((n) => n >= before - 1), 'never emptied while the snapshot came');
    }
    watches.forEach((w) => w.close());
  });
});
