// One connection per browser: tabs (SharedClient) and the worker
// (SharedHub) over real MessageChannels, the worker's socket a fake.
import {test} from 'node:test';
import assert from 'node:assert/strict';

import {SharedClient, SharedHub, watch} from '../kubefan.js';
import {added, end, error, fakeWebSocket, inCluster, modified, pod} from './fakes.mjs';

/** Web Locks as browsers grant them: one holder per name, waiters in order. */
function fakeLocks() {
  const held = new Map(); // name -> queue of waiting grants
  return {
    request(name, callback) {
      return new Promise((resolve, reject) => {
        const grant = () => {
          Promise.resolve()
            .then(callback)
            .then(resolve, reject)
            .finally(() => {
              const queue = held.get(name);
              queue.shift();
              if (queue.length) queue[0]();
              else held.delete(name);
            });
        };
        if (!held.has(name)) {
          held.set(name, [grant]);
          grant();
        } else {
          held.get(name).push(grant);
        }
      });
    },
  };
}

/** A browser: one worker (hub) behind every SharedWorker constructed. */
function browser() {
  const {WebSocket, sockets} = fakeWebSocket();
  const locks = fakeLocks();
  const hub = new SharedHub({WebSocket, locks, lingerMs: 0, fetch: async () => new Response('', {status: 400})});
  const workers = [];
  class FakeSharedWorker {
    constructor(url, options) {
      workers.push({url: String(url), options});
      const ch = new MessageChannel();
      this.port = ch.port1;
      hub.attach(ch.port2);
    }
  }
  const tabs = [];
  const tab = (options = {}) => {
    const c = new SharedClient({base: 'http://gw.test', SharedWorker: FakeSharedWorker, locks, ...options});
    tabs.push(c);
    return c;
  };
  return {hub, sockets, workers, tab, tabs, WebSocket};
}

/** Yields to the event loop until `cond()` holds, for at most 5 s. */
async function until(what, cond) {
  const deadline = performance.now() + 5000;
  while (performance.now() < deadline) {
    if (cond()) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
  assert.fail('never: ' + what);
}

test('every tab of the browser shares one socket, and each gets its own subscriptions', async (t) => {
  const b = browser();
  const one = b.tab();
  const two = b.tab();
  t.after(() => b.tabs.forEach((c) => c.close()));
  const pods1 = one.watch('pods', {namespace: 'web'});
  const pods2 = two.watch('pods', {labelSelector: 'app=db'});
  const nodes2 = two.watch('nodes');
  await until('a socket', () => b.sockets.length === 1);
  assert.equal(b.workers[0].options.type, 'module');
  assert.equal(b.workers[0].options.name, 'kubefan http://gw.test/');
  assert.ok(b.workers[0].url.endsWith('/kubefan-worker.js'));
  const ws = b.sockets[0];
  ws.accept();
  await until('three subscriptions', () => ws.subscribes().length === 3);
  const subs = ws.subscribes();
  const idOf = (pred) => subs.find(pred).id;
  const s1 = idOf((m) => m.namespace === 'web');
  const s2 = idOf((m) => m.labelSelector === 'app=db');
  const s3 = idOf((m) => m.resource === 'nodes');
  assert.equal(new Set([s1, s2, s3]).size, 3);

  ws.deliver({sub: s1, ...added(pod('w1'))});
  ws.deliver({sub: s1, ...end('10')});
  ws.deliver({sub: s2, ...added(pod('d1', {ns: 'db'}))});
  ws.deliver({sub: s2, ...end('10')});
  ws.deliver({sub: s3, ...end('10')});
  await until('all synced', () => pods1.synced && pods2.synced && nodes2.synced);
  assert.deepEqual([...pods1.objects.keys()], ['web/w1']);
  assert.deepEqual([...pods2.objects.keys()], ['db/d1']);
  assert.equal(nodes2.size, 0);

  ws.deliver({sub: s1, ...modified(pod('w1', {rv: '11', phase: 'Failed'}), '11')});
  await until('the change', () => pods1.resourceVersion === '11');
  assert.equal(pods1.get('web/w1').status.phase, 'Failed');
  assert.equal(b.sockets.length, 1, 'still one socket');
  assert.equal(one.shared, true);
});

test('a watch across clusters is one subscription of the worker\'s socket, which a part\'s ERROR does not end', async (t) => {
  const b = browser();
  const tab = b.tab();
  t.after(() => b.tabs.forEach((c) => c.close()));
  const w = watch('pods', {client: tab, clusters: ['east', 'west']});
  await until('a socket', () => b.sockets.length === 1);
  const ws = b.sockets[0];
  ws.accept();
  await until('a subscription', () => ws.subscribes().length === 1);
  const [sub] = ws.subscribes();
  assert.deepEqual(sub.clusters, ['east', 'west']);
  assert.equal(sub.cluster, undefined);
  ws.deliver({sub: sub.id, ...inCluster('east', added(pod('a')))});
  ws.deliver({sub: sub.id, ...inCluster('east', end('10'), 'east=10')});
  ws.deliver({sub: sub.id, ...inCluster('west', error(403, 'Forbidden', 'cluster "west": no'))});
  ws.deliver({sub: sub.id, ...inCluster('east', modified(pod('a', {phase: 'Failed'})), 'east=11')});
  await until('east\'s change', () => w.resourceVersion === 'east=11');
  assert.equal(w.get('east', 'web', 'a').status.phase, 'Failed');
  assert.deepEqual([w.parts.get('east').state, w.parts.get('west').state], ['live', 'error']);
  assert.equal(ws.subscribes().length, 1);
});

test('a tab that closes, or dies without a word, has its subscriptions unsubscribed', async (t) => {
  const b = browser();
  const keep = b.tab();
  const leaving = b.tab();
  const dying = b.tab();
  t.after(() => {
    keep.close();
    // Closed as well as crashed: left open, its port closing would send it
    // to a socket of its own, the real WebSocket's, retrying gw.test for
    // ever and keeping this test file's process alive.
    dying.close();
    dying._port.close();
  });
  keep.watch('pods');
  leaving.watch('pods', {namespace: 'a'});
  dying.watch('pods', {namespace: 'b'});
  await until('a socket', () => b.sockets.length === 1);
  const ws = b.sockets[0];
  ws.accept();
  await until('three subscriptions', () => ws.subscribes().length === 3);
  const idOf = (ns) => ws.subscribes().find((m) => m.namespace === ns).id;
  const unsubscribed = () => ws.sent.filter((m) => m.op === 'unsubscribe').map((m) => m.id);

  leaving.close(); // says bye
  await until('leaving unsubscribed', () => unsubscribed().length === 1);
  assert.deepEqual(unsubscribed(), [idOf('a')]);

  // A tab that crashes sends nothing; the lock it held is released.
  dying._post = null;
  dying._releaseLock();
  await until('dying unsubscribed', () => unsubscribed().length === 2);
  assert.deepEqual(unsubscribed(), [idOf('a'), idOf('b')]);
  assert.equal(b.hub.tabs.size, 1);
  assert.equal(ws.closedWith, null, 'the socket stays for the tab that remains');
});

test('the worker takes its token from a tab, and a fresh one from a tab to renew it', async (t) => {
  const b = browser();
  let n = 0;
  const tab = b.tab({getToken: async () => 'tok-' + ++n});
  const plain = b.tab();
  t.after(() => b.tabs.forEach((c) => c.close()));
  const w = tab.watch('pods');
  plain.watch('nodes');
  await until('a socket', () => b.sockets.length === 1);
  assert.equal(b.sockets[0].url.searchParams.get('access_token'), 'tok-1');
  const ws = b.sockets[0];
  ws.accept();
  await until('subscribed', () => ws.subscribes().length === 2);
  const sub = ws.subscribes().find((m) => m.resource === 'pods').id;
  ws.deliver({sub, ...end('10')});
  await until('synced', () => w.synced);

  ws.deliver({sub, type: 'ERROR', object: {kind: 'Status', code: 401, reason: 'Unauthorized', message: 'token expired'}});
  ws.drop(4001, 'token expired');
  await until('a second socket', () => b.sockets.length === 2);
  assert.equal(b.sockets[1].url.searchParams.get('access_token'), 'tok-2');
  b.sockets[1].accept();
  await until('resubscribed', () => b.sockets[1].subscribes().some((m) => m.resource === 'pods'));
  assert.equal(b.sockets[1].subscribes().find((m) => m.resource === 'pods').resourceVersion, '10', 'resumed, no reset');
  await until('live', () => w.state === 'live');
  assert.equal(w.snapshots, 1);
});

test('a fixed token that expires is final: the watch reports it, and keeps the token for a retry', async (t) => {
  const b = browser();
  const tab = b.tab({token: 'fixed'});
  t.after(() => tab.close());
  const w = tab.watch('pods');
  await until('a socket', () => b.sockets.length === 1);
  assert.equal(b.sockets[0].url.searchParams.get('access_token'), 'fixed');
  b.sockets[0].accept();
  await until('subscribed', () => b.sockets[0].subscribes().length === 1);
  const sub = b.sockets[0].subscribes()[0].id;
  b.sockets[0].deliver({sub, ...end('10')});
  await until('synced', () => w.synced);
  b.sockets[0].deliver({sub, type: 'ERROR', object: {kind: 'Status', code: 401, reason: 'Unauthorized', message: 'token expired'}});
  b.sockets[0].drop(4001, 'token expired');
  await until('the error', () => w.state === 'error');
  assert.equal(w.error.message, 'token expired');
  assert.equal(b.sockets.length, 1, 'no reconnection with the same expired token');
  w.retry();
  await until('a retry', () => b.sockets.length === 2);
  assert.equal(b.sockets[1].url.searchParams.get('access_token'), 'fixed');
});

test('when the last tab with a token goes, the socket it lent its token to closes', async () => {
  const b = browser();
  const lender = b.tab({token: 'secret'});
  const other = b.tab();
  lender.watch('pods');
  const w = other.watch('pods', {namespace: 'web'});
  await until('a socket', () => b.sockets.length === 1);
  assert.equal(b.sockets[0].url.searchParams.get('access_token'), 'secret');
  b.sockets[0].accept();
  await until('subscribed', () => b.sockets[0].subscribes().length === 2);
  const sub = b.sockets[0].subscribes().find((m) => m.namespace === 'web').id;
  b.sockets[0].deliver({sub, ...end('10')});
  await until('synced', () => w.synced);

  lender.close();
  await until('the socket closed', () => b.sockets[0].closedWith === 1000);
  await until('a new socket', () => b.sockets.length === 2);
  assert.equal(b.sockets[1].url.searchParams.has('access_token'), false, 'no token the remaining tab did not give');
  other.close();
});

test('where SharedWorker is missing or fails, a tab keeps a socket of its own', async () => {
  const {WebSocket, sockets} = fakeWebSocket();
  const missing = new SharedClient({base: 'http://gw.test', SharedWorker: null, WebSocket});
  assert.equal(missing.fallbackReason, 'no SharedWorker');
  const w = missing.watch('pods');
  await until('a socket', () => sockets.length === 1);
  sockets[0].accept();
  await until('subscribed', () => sockets[0].subscribes().length === 1);
  sockets[0].deliver({sub: sockets[0].subscribes()[0].id, ...end('3')});
  await until('synced', () => w.synced);
  missing.close();

  class Broken {
    constructor() {
      throw new Error('blocked by policy');
    }
  }
  const broken = new SharedClient({base: 'http://gw.test', SharedWorker: Broken, WebSocket});
  assert.match(broken.fallbackReason, /blocked by policy/);
  assert.equal(broken.shared, false);
  broken.close();
});

test('a worker that fails after watches were opened hands them over to a socket of the tab', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout']});
  const {WebSocket, sockets} = fakeWebSocket();
  let worker;
  class Failing {
    constructor() {
      worker = this;
      this.port = new MessageChannel().port1;
    }
  }
  const client = new SharedClient({base: 'http://gw.test', SharedWorker: Failing, WebSocket});
  const w = client.watch('pods');
  worker.onerror(new Event('error'));
  assert.equal(w.state, 'reconnecting');
  t.mock.timers.tick(1000);
  t.mock.timers.tick(0);
  await until('a socket', () => sockets.length === 1);
  client.close();
});

test('a tab\'s refreshed session reaches the socket every tab shares as one renew', async (t) => {
  const b = browser();
  const one = b.tab();
  const two = b.tab();
  t.after(() => b.tabs.forEach((c) => c.close()));
  one.watch('pods');
  two.watch('nodes');
  await until('a socket', () => b.sockets.length === 1);
  const ws = b.sockets[0];
  ws.accept();
  await until('two subscriptions', () => ws.subscribes().length === 2);
  assert.equal(two.renewSession('sealed'), true);
  await until('the renew', () => ws.sent.some((m) => m.op === 'renew'));
  assert.deepEqual(ws.sent.filter((m) => m.op === 'renew'), [{op: 'renew', session: 'sealed'}]);
});
