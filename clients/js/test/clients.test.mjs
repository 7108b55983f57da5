// The clients against fake transports: what they send, and how they turn
// what comes back into stream events for the store.
import {afterEach, test} from 'node:test';
import assert from 'node:assert/strict';

import {SseClient, WsClient} from '../kubefan.js';
import {added, end, error, fakeFetch, fakeWebSocket, pod, settle} from './fakes.mjs';

// ---- SSE ----------------------------------------------------------------------

function sink() {
  const got = [];
  return {
    got,
    opened: () => got.push('opened'),
    message: (m) => got.push(m),
    dropped: (info) => got.push('dropped ' + info.reason),
    refused: (s, retryAfter) => got.push(`refused ${s.code} ${s.message} ${retryAfter}`),
  };
}

const sse = (m) => `event: ${m.type}\n` + (m.id !== undefined ? `id: ${m.id}\n` : '') + `data: ${JSON.stringify({type: m.type, object: m.object, ...(m.patch ? {patch: m.patch} : {})})}\n\n`;

test('SSE: the request carries the options, the position and the token in a header', async (t) => {
  const {fetch, calls} = fakeFetch();
  const client = new SseClient({base: 'http://gw.test/prefix', token: 't0', fetch});
  t.after(() => client.close());
  const s = sink();
  client.open({resource: 'pods', params: {namespace: 'web', labelSelector: 'app in (a,b)', delta: 'merge-patch'}, from: '42'}, s);
  await settle();
  const {url, init} = calls[0];
  assert.equal(url.pathname, '/prefix/stream/pods');
  assert.equal(url.searchParams.get('namespace'), 'web');
  assert.equal(url.searchParams.get('labelSelector'), 'app in (a,b)');
  assert.equal(url.searchParams.get('delta'), 'merge-patch');
  assert.equal(url.searchParams.get('resourceVersion'), '42');
  assert.equal(url.searchParams.has('access_token'), false, 'no token in the URL');
  assert.equal(init.headers.Authorization, 'Bearer t0');
});

test('SSE: frames become messages with the id exactly where the stream has one', async () => {
  const {fetch, calls} = fakeFetch();
  const client = new SseClient({base: 'http://gw.test', fetch});
  const s = sink();
  client.open({resource: 'pods', params: {}, from: ''}, s);
  await settle();
  const a = pod('a');
  calls[0].write('retry: 3000\n\n' + sse(added(a)).slice(0, 10));
  calls[0].write(sse(added(a)).slice(10) + sse(end('9')));
  calls[0].write(sse({type: 'MODIFIED', object: {metadata: {name: 'a'}}, patch: 'merge', id: '10'}));
  calls[0].finish();
  await settle();
  await settle();
  assert.deepEqual(s.got, [
    'opened',
    {type: 'ADDED', object: a},
    end('9'),
    {type: 'MODIFIED', object: {metadata: {name: 'a'}}, patch: 'merge', id: '10'},
    'dropped ended',
  ]);
  assert.equal(client.retryMs, 3000, 'the retry: hint is kept');
});

test('SSE: an HTTP error is a refusal with its Status and Retry-After', async () => {
  const {fetch} = fakeFetch(() =>
    new Response(JSON.stringify({kind: 'Status', apiVersion: 'v1', status: 'Failure', code: 429, reason: 'TooManyRequests', message: 'slow down'}), {
      status: 429,
      headers: {'Retry-After': '3', 'Content-Type': 'application/json'},
    }),
  );
  const client = new SseClient({base: 'http://gw.test', fetch});
  const s = sink();
  client.open({resource: 'pods', params: {}, from: ''}, s);
  await settle();
  await settle();
  assert.deepEqual(s.got, ['refused 429 slow down 3']);
});

test('SSE: a failed fetch is a drop; close() aborts the request and says nothing', async () => {
  const failing = new SseClient({base: 'http://gw.test', fetch: async () => Promise.reject(new TypeError('connection refused'))});
  const s1 = sink();
  failing.open({resource: 'pods', params: {}, from: ''}, s1);
  await settle();
  assert.deepEqual(s1.got, ['dropped network']);

  const {fetch, calls} = fakeFetch();
  const client = new SseClient({base: 'http://gw.test', fetch});
  const s2 = sink();
  const ch = client.open({resource: 'pods', params: {}, from: ''}, s2);
  await settle();
  ch.close();
  await settle();
  assert.ok(calls[0].aborted);
  assert.deepEqual(s2.got, ['opened']);
});

test('SSE: a stream silent for longer than the idle timeout is dropped', async (t) => {
  const {fetch, calls} = fakeFetch();
  t.mock.timers.enable({apis: ['setTimeout']});
  const client = new SseClient({base: 'http://gw.test', fetch, idleTimeoutMs: 45000});
  const s = sink();
  client.open({resource: 'pods', params: {}, from: ''}, s);
  await settle();
  calls[0].write(': keep-alive\n\n');
  await settle();
  t.mock.timers.tick(44999);
  assert.deepEqual(s.got, ['opened']);
  t.mock.timers.tick(1);
  assert.deepEqual(s.got, ['opened', 'dropped idle']);
  assert.ok(calls[0].aborted);
});

test('SSE: getToken is asked once at the start and again to renew', async (t) => {
  const tokens = ['first', 'second'];
  const asked = [];
  const {fetch, calls} = fakeFetch();
  const client = new SseClient({base: 'http://gw.test', fetch, getToken: async (ctx) => (asked.push(ctx.reason), tokens.shift())});
  t.after(() => client.close());
  client.open({resource: 'pods', params: {}, from: ''}, sink());
  await settle();
  assert.equal(calls[0].init.headers.Authorization, 'Bearer first');
  assert.equal(await client.renew(), true);
  client.open({resource: 'pods', params: {}, from: '5'}, sink());
  await settle();
  assert.equal(calls[1].init.headers.Authorization, 'Bearer second');
  assert.deepEqual(asked, ['connect', 'renew']);
});

// ---- /ws ----------------------------------------------------------------------

const clients = [];
afterEach(() => {
  for (const c of clients.splice(0)) c.close();
});

function wsClient(options = {}) {
  const {WebSocket, sockets} = fakeWebSocket();
  const probes = [];
  const fetch = async function (url) {
    if (this !== undefined && this !== globalThis) throw new TypeError('Illegal invocation');
    probes.push(new URL(url));
    return options.probe ? options.probe() : new Response('not a WebSocket handshake', {status: 400});
  };
  const client = new WsClient({base: 'http://gw.test', WebSocket, fetch, ...options});
  clients.push(client);
  return {client, sockets, probes};
}

test('/ws: one socket carries every watch, each a subscription with its options and position', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const {client, sockets} = wsClient({token: 'tok'});
  const a = sink();
  const b = sink();
  client.open({resource: 'pods', params: {fields: 'spec.nodeName', delta: 'merge-patch'}, from: ''}, a);
  client.open({resource: 'nodes', params: {}, from: '77'}, b);
  t.mock.timers.tick(0);
  await settle();
  assert.equal(sockets.length, 1);
  const ws = sockets[0];
  assert.equal(ws.url.href, 'ws://gw.test/ws?access_token=tok');
  ws.accept();
  assert.deepEqual(ws.subscribes(), [
    {op: 'subscribe', id: 'k1', resource: 'pods', fields: 'spec.nodeName', delta: 'merge-patch'},
    {op: 'subscribe', id: 'k2', resource: 'nodes', resourceVersion: '77'},
  ]);
  assert.deepEqual([a.got, b.got], [['opened'], ['opened']]);

  ws.deliver({sub: 'k2', ...added({metadata: {name: 'n1'}})});
  ws.deliver({sub: 'k1', ...end('5')});
  ws.deliver({sub: 'zz', ...end('5')});
  assert.deepEqual(b.got, ['opened', {type: 'ADDED', object: {metadata: {name: 'n1'}}}]);
  assert.deepEqual(a.got, ['opened', end('5')]);

  // A third watch later goes on the open socket.
  const c = sink();
  client.open({resource: 'namespaces', params: {}, from: ''}, c);
  await settle();
  assert.equal(sockets.length, 1);
  assert.equal(ws.subscribes()[2].resource, 'namespaces');
});

test('/ws: closing a watch unsubscribes it, and an idle socket closes after a while', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const {client, sockets} = wsClient({lingerMs: 5000});
  const a = sink();
  const ch = client.open({resource: 'pods', params: {}, from: ''}, a);
  t.mock.timers.tick(0);
  await settle();
  sockets[0].accept();
  ch.close();
  assert.deepEqual(sockets[0].sent.at(-1), {op: 'unsubscribe', id: 'k1'});
  sockets[0].deliver({sub: 'k1', type: 'UNSUBSCRIBED'});
  sockets[0].deliver({sub: 'k1', ...end('3')});
  assert.deepEqual(a.got, ['opened'], 'nothing after close');
  t.mock.timers.tick(4999);
  assert.equal(sockets[0].closedWith, null);
  t.mock.timers.tick(1);
  assert.equal(sockets[0].closedWith, 1000);
});

test('/ws: an ERROR ends that subscription only', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const {client, sockets} = wsClient();
  const a = sink();
  const b = sink();
  client.open({resource: 'pods', params: {labelSelector: 'app in ('}, from: ''}, a);
  client.open({resource: 'nodes', params: {}, from: ''}, b);
  t.mock.timers.tick(0);
  await settle();
  sockets[0].accept();
  sockets[0].deliver({sub: 'k1', ...error(400, 'BadRequest', 'labelSelector: bad')});
  sockets[0].deliver({sub: 'k1', ...end('3')});
  sockets[0].deliver({sub: 'k2', ...end('3')});
  assert.equal(a.got.length, 2);
  assert.equal(a.got[1].object.code, 400);
  assert.deepEqual(b.got, ['opened', end('3')]);
});

test('/ws: a lost socket drops its subscriptions; the next one waits for the back-off', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const {client, sockets} = wsClient();
  const states = [];
  client.on('state', (s) => states.push(s));
  const a = sink();
  client.open({resource: 'pods', params: {}, from: ''}, a);
  t.mock.timers.tick(0);
  await settle();
  sockets[0].accept();
  sockets[0].drop(1006);
  assert.deepEqual(a.got, ['opened', 'dropped closed']);
  const again = sink();
  client.open({resource: 'pods', params: {}, from: '9'}, again);
  t.mock.timers.tick(0);
  await settle();
  assert.equal(sockets.length, 1, 'not at once');
  t.mock.timers.tick(1000);
  await settle();
  assert.equal(sockets.length, 2);
  sockets[1].accept();
  assert.deepEqual(sockets[1].subscribes(), [{op: 'subscribe', id: 'k2', resource: 'pods', resourceVersion: '9'}]);
  assert.deepEqual(states, ['connecting', 'open', 'reconnecting', 'open']);
});

test('/ws: a socket refused before it opened keeps its subscriptions waiting while the gateway is unreachable', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const {client, sockets, probes} = wsClient({probe: () => Promise.reject(new TypeError('connection refused'))});
  const a = sink();
  client.open({resource: 'pods', params: {}, from: '4'}, a);
  t.mock.timers.tick(0);
  await settle();
  sockets[0].refuse();
  await settle();
  assert.equal(probes.length, 1, 'asked why');
  t.mock.timers.tick(1000);
  await settle();
  assert.equal(sockets.length, 2, 'tried again after the back-off');
  sockets[1].refuse();
  await settle();
  t.mock.timers.tick(2000);
  await settle();
  assert.equal(sockets.length, 3);
  sockets[2].accept();
  assert.deepEqual(a.got, ['opened']);
  assert.equal(sockets[2].subscribes()[0].resourceVersion, '4');
});

test('/ws: an upgrade refused with an HTTP error refuses the waiting subscriptions with its Status', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const body = {kind: 'Status', apiVersion: 'v1', status: 'Failure', code: 401, reason: 'Unauthorized', message: 'token expired'};
  const {client, sockets, probes} = wsClient({token: 'old', probe: () => new Response(JSON.stringify(body), {status: 401})});
  const a = sink();
  client.open({resource: 'pods', params: {}, from: ''}, a);
  t.mock.timers.tick(0);
  await settle();
  sockets[0].refuse();
  await settle();
  await settle();
  assert.equal(probes[0].searchParams.get('access_token'), 'old', 'the probe carries the same token');
  assert.deepEqual(a.got, ['refused 401 token expired 0']);
});

test('/ws: a subscription refused with 401 again after its renewal is final, not renewed in a loop', async (t) => {
  // As a cluster whose review refuses the token refuses a subscription
  // naming it, the socket staying open for the others.
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  let n = 0;
  const {client, sockets} = wsClient({getToken: async () => 'token-' + ++n});
  const w = client.watch('pods', {cluster: 'b'});
  for (let round = 0; round < 4 && w.state !== 'error'; round++) {
    t.mock.timers.tick(0);
    await settle();
    const s = sockets[sockets.length - 1];
    if (s.readyState === 0) s.accept();
    await settle();
    const sub = s.subscribes().at(-1);
    s.deliver({sub: sub.id, ...error(401, 'Unauthorized', 'cluster "b": the token is not accepted')});
    await settle();
    await settle();
  }
  assert.equal(w.state, 'error', 'a second 401 in a row is final');
  assert.equal(sockets.length, 2, 'one renewal, one new socket');
  assert.equal(n, 2);
  w.close();
});

test('/ws: a subscription refused with 401 and no fresh token leaves its socket the one in use', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const {client, sockets} = wsClient({token: 't'});
  const b = client.watch('pods', {cluster: 'b'});
  const a = client.watch('nodes', {cluster: 'a'});
  t.mock.timers.tick(0);
  await settle();
  sockets[0].accept();
  await settle();
  const [kb, ka] = sockets[0].subscribes().map((m) => m.id);
  sockets[0].deliver({sub: kb, ...error(401, 'Unauthorized', 'cluster "b": the token is not accepted')});
  await settle();
  await settle();
  assert.equal(b.state, 'error', 'no token to renew with');
  b.retry();
  t.mock.timers.tick(0);
  await settle();
  assert.equal(sockets.length, 1, 'subscribed again on the same socket, not a second beside it');
  assert.equal(sockets[0].subscribes().length, 3);
  a.close();
  b.close();
  t.mock.timers.tick(client.lingerMs + 1);
  await settle();
  const unsubscribed = sockets[0].sent.filter((m) => m.op === 'unsubscribe').map((m) => m.id);
  assert.ok(unsubscribed.includes(ka), JSON.stringify(sockets[0].sent));
  assert.equal(sockets[0].closedWith, 1000, 'closed once idle');
});

test('/ws: token expiry (ERROR 401, close 4001) renews the token once and reconnects with it', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  let n = 0;
  const {client, sockets} = wsClient({getToken: async () => 'token-' + ++n});
  const a = sink();
  const b = sink();
  client.open({resource: 'pods', params: {}, from: ''}, a);
  client.open({resource: 'nodes', params: {}, from: ''}, b);
  t.mock.timers.tick(0);
  await settle();
  assert.equal(sockets[0].url.searchParams.get('access_token'), 'token-1');
  sockets[0].accept();
  sockets[0].deliver({sub: 'k1', ...error(401, 'Unauthorized', 'token expired')});
  sockets[0].deliver({sub: 'k2', ...error(401, 'Unauthorized', 'token expired')});
  // Both watches ask; one renewal.
  const [r1, r2] = await Promise.all([client.renew(), client.renew()]);
  assert.deepEqual([r1, r2], [true, true]);
  assert.equal(n, 2);
  sockets[0].drop(4001, 'token expired');
  client.open({resource: 'pods', params: {}, from: '10'}, sink());
  client.open({resource: 'nodes', params: {}, from: '11'}, sink());
  t.mock.timers.tick(0);
  await settle();
  assert.equal(sockets.length, 2, 'reconnected at once: an expiry is not a failure');
  assert.equal(sockets[1].url.searchParams.get('access_token'), 'token-2');
  sockets[1].accept();
  assert.deepEqual(sockets[1].subscribes().map((m) => m.resourceVersion), ['10', '11']);
});

test('/ws: a refreshed session\'s renewal goes on the open socket as renew, and SSE has none to send', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const {client, sockets} = wsClient();
  assert.equal(client.renewSession('sealed'), false, 'no socket yet');
  client.open({resource: 'pods', params: {}, from: ''}, sink());
  t.mock.timers.tick(0);
  await settle();
  const ws = sockets[0];
  ws.accept();
  const renewed = [];
  client.on('renewed', (s) => renewed.push(s));
  assert.equal(client.renewSession('sealed'), true);
  assert.deepEqual(ws.sent.at(-1), {op: 'renew', session: 'sealed'});
  ws.deliver({sub: null, type: 'RENEWED', expiresInSeconds: 290});
  assert.deepEqual(renewed, [290]);
  const sse = new SseClient({base: 'http://gw.test', fetch: fakeFetch().fetch});
  clients.push(sse);
  assert.equal(sse.renewSession('sealed'), false);
});
