// A ClustersWatch against fakes: one merged subscription for every
// cluster (PROTOCOL "One stream across clusters"), each message applied to
// its cluster's part, the compound id resumed from, and what concerns one
// cluster kept to its part. Time is mocked; nothing sleeps.
import {afterEach, test} from 'node:test';
import assert from 'node:assert/strict';

import {SseClient, WsClient, watch} from '../kubefan.js';
import {added, deleted, end, error, fakeClient, fakeFetch, fakeWebSocket, inCluster, modified, patched, pod, reset, settle, status} from './fakes.mjs';

const open = [];
afterEach(() => {
  for (const c of open.splice(0)) c.close();
});

/** Records what a ClustersWatch emits, each event with the cluster it names last. */
function record(w) {
  const log = [];
  w.on('added', (o, c) => log.push(`added ${c} ${o.metadata.name}`));
  w.on('modified', (o, prev, c) => log.push(`modified ${c} ${o.metadata.name}`));
  w.on('deleted', (o, prev, c) => log.push(`deleted ${c} ${o.metadata.name}`));
  w.on('synced', (s) => log.push(`synced ${s.cluster} ${s.resourceVersion}`));
  w.on('reset', (s, c) => log.push(`reset ${c} ${s.reason}`));
  w.on('error', (s, c) => log.push(`error ${c} ${s.code}`));
  w.on('state', (s) => log.push(`state ${s}`));
  return log;
}

const keys = (w) => [...w.objects.keys()].sort();
const states = (w) => Object.fromEntries([...w.parts].map(([c, p]) => [c, p.state]));
const unreachable = (cluster) => ({type: 'CLUSTER', object: status(503, 'ServiceUnavailable', `cluster "${cluster}": the API server cannot be reached; its part resumes when it is back`)});
const reachable = {type: 'CLUSTER', object: {kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success', code: 200, message: 'reached again'}};

/** A ClustersWatch of east and west on a fake client; `to(cluster, msg, id)` delivers on its latest stream. */
function watching(options = {}) {
  const client = fakeClient();
  const w = watch('pods', Object.assign({client, clusters: ['east', 'west']}, options));
  open.push(w);
  const to = (cluster, msg, id) => client.last.sink.message(inCluster(cluster, msg, id));
  return {w, client, to, log: record(w)};
}

/** Both parts synced: east holds a (at 10), west holds b (at 20). */
function synced(options) {
  const t = watching(options);
  t.client.last.sink.opened();
  t.to('east', added(pod('a')));
  t.to('west', added(pod('b')));
  t.to('east', end('10'), 'east=10');
  t.to('west', end('20'), 'east=10,west=20');
  t.log.length = 0;
  return t;
}

function wsClient(options = {}) {
  const {WebSocket, sockets} = fakeWebSocket();
  const fetch = async () => new Response('not a WebSocket handshake', {status: 400});
  const client = new WsClient({base: 'http://gw.test', WebSocket, fetch, ...options});
  open.push(client);
  return {client, sockets};
}

test('over /ws: one subscription for every cluster, its messages routed by cluster, resumed with the compound id', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const {client, sockets} = wsClient();
  const w = watch('pods', {client, clusters: ['east', 'west'], namespace: 'web'});
  const log = record(w);
  t.mock.timers.tick(0);
  await settle();
  assert.equal(sockets.length, 1);
  sockets[0].accept();
  assert.deepEqual(sockets[0].subscribes(), [{op: 'subscribe', id: 'k1', resource: 'pods', namespace: 'web', clusters: ['east', 'west']}]);
  const to = (cluster, msg, id) => sockets.at(-1).deliver({sub: sockets.at(-1).subscribes().at(-1).id, ...inCluster(cluster, msg, id)});

  // Each part's snapshot, interleaved, ends with its own bookmark.
  to('east', added(pod('a')));
  to('west', added(pod('a', {phase: 'Pending'})));
  to('east', added(pod('x')));
  to('east', end('10'), 'east=10');
  assert.deepEqual(states(w), {east: 'live', west: 'syncing'});
  assert.equal(w.state, 'partial');
  to('west', added(pod('b')));
  to('west', end('20'), 'east=10,west=20');
  assert.equal(w.state, 'live');
  assert.deepEqual(keys(w), ['east/web/a', 'east/web/x', 'west/web/a', 'west/web/b']);
  assert.equal(w.get('west', 'web', 'a').status.phase, 'Pending');
  assert.equal(w.get('east', 'web/a').status.phase, 'Running');
  assert.equal(w.resourceVersion, 'east=10,west=20');
  assert.deepEqual([w.parts.get('east').resourceVersion, w.parts.get('west').resourceVersion], ['10', '20']);

  // Changes go to their cluster's part; each part keeps its own position.
  to('west', modified(pod('a', {phase: 'Running'})), 'east=10,west=21');
  to('east', deleted(pod('a')), 'east=11,west=21');
  assert.equal(w.get('west', 'web', 'a').status.phase, 'Running');
  assert.equal(w.get('east', 'web', 'a'), undefined);
  assert.equal(w.resourceVersion, 'east=11,west=21');
  assert.deepEqual(log.filter((l) => !l.startsWith('state')), [
    'added east a', 'added east x', 'synced east 10', 'added west a', 'added west b', 'synced west 20',
    'modified west a', 'deleted east a',
  ]);

  // The socket drops: one subscription again, resuming every part.
  sockets[0].drop(1006);
  assert.equal(w.state, 'reconnecting');
  for (let i = 0; i < 3 && sockets.length < 2; i++) {
    t.mock.timers.tick(1000);
    await settle();
  }
  assert.equal(sockets.length, 2);
  sockets[1].accept();
  assert.deepEqual(sockets[1].subscribes(), [
    {op: 'subscribe', id: 'k2', resource: 'pods', namespace: 'web', clusters: ['east', 'west'], resourceVersion: 'east=11,west=21'},
  ]);
  assert.equal(w.state, 'live', 'resumed: no snapshot to wait for');
  assert.deepEqual(keys(w), ['east/web/x', 'west/web/a', 'west/web/b'], 'the picture stayed');
  assert.equal(w.snapshots, 2);

  // East's position is gone: its RESET drops it from the id, its
  // snapshot follows; west is untouched.
  log.length = 0;
  to('east', reset('Expired'), 'west=21');
  assert.deepEqual(states(w), {east: 'reset', west: 'live'});
  to('east', added(pod('c')));
  assert.ok(w.get('east', 'web', 'x'), 'the old picture stays until the snapshot ends');
  to('west', modified(pod('b', {phase: 'Failed'})), 'west=22');
  to('east', end('30'), 'east=30,west=22');
  assert.deepEqual(log.filter((l) => !l.startsWith('state')), ['reset east Expired', 'modified west b', 'added east c', 'deleted east x', 'synced east 30']);
  assert.deepEqual(keys(w), ['east/web/c', 'west/web/a', 'west/web/b']);
  assert.equal(w.resets, 1);
  assert.equal(w.resourceVersion, 'east=30,west=22');

  // West's API server is lost, then found: west alone is not live meanwhile.
  log.length = 0;
  to('west', unreachable('west'));
  assert.deepEqual(states(w), {east: 'live', west: 'reconnecting'});
  assert.equal(w.state, 'partial');
  assert.equal(w.parts.get('west').error.code, 503);
  assert.equal(w.get('west', 'web', 'b').status.phase, 'Failed', 'its picture stays');
  to('east', added(pod('d')), 'east=31,west=22');
  to('west', reachable);
  assert.deepEqual(states(w), {east: 'live', west: 'live'});
  assert.equal(w.state, 'live');
  assert.equal(w.parts.get('west').error, null);
  assert.deepEqual(log, ['error west 503', 'state partial', 'added east d', 'state live']);
  assert.equal(sockets.length, 2);
  assert.equal(sockets[1].subscribes().length, 1, 'still the one subscription');

  w.close();
  assert.deepEqual(sockets[1].sent.at(-1), {op: 'unsubscribe', id: 'k2'});
  assert.equal(w.state, 'closed');
});

test('over /ws: a part\'s ERROR ends that part only; the subscription goes on for the others', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const {client, sockets} = wsClient({lingerMs: 120000});
  const w = watch('pods', {client, clusters: ['east', 'west']});
  t.mock.timers.tick(0);
  await settle();
  sockets[0].accept();
  const to = (cluster, msg, id) => sockets[0].deliver({sub: 'k1', ...inCluster(cluster, msg, id)});
  to('east', end('10'), 'east=10');
  to('west', end('20'), 'east=10,west=20');
  to('west', error(403, 'Forbidden', 'cluster "west": alice may no longer watch pods'));
  assert.deepEqual(states(w), {east: 'live', west: 'error'});
  assert.equal(w.state, 'partial');
  to('east', added(pod('a')), 'east=11,west=20');
  assert.ok(w.get('east', 'web', 'a'), 'east still streams on the same subscription');
  // The subscription ends once every part has.
  to('east', error(404, 'NotFound', 'pods is no longer served'));
  sockets[0].deliver({sub: 'k1', ...error(404, 'NotFound', 'every cluster\'s part of this subscription has ended; the last, cluster "east"\'s: pods is no longer served')});
  assert.deepEqual(states(w), {east: 'error', west: 'error'});
  assert.equal(w.state, 'error');
  t.mock.timers.tick(60000);
  await settle();
  assert.equal(sockets[0].subscribes().length, 1, 'refused for good: nothing asked again');
  // retry() asks for every part again, each from its position.
  w.retry();
  await settle();
  assert.deepEqual(sockets[0].subscribes()[1], {op: 'subscribe', id: 'k2', resource: 'pods', clusters: ['east', 'west'], resourceVersion: 'east=11,west=20'});
});

test('a part that ends with what may pass is asked for again a back-off later, the others resuming', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const {w, client, to} = synced();
  to('east', error(503, 'ServiceUnavailable', 'cluster "east": the resource stopped syncing'));
  assert.deepEqual(states(w), {east: 'reconnecting', west: 'live'});
  assert.equal(client.streams.length, 1);
  t.mock.timers.tick(1000);
  assert.equal(client.streams.length, 2);
  assert.ok(client.streams[0].closed);
  assert.deepEqual(client.last.request.clusters, ['east', 'west']);
  assert.equal(client.last.request.from, 'east=10,west=20');
  client.last.sink.opened();
  assert.deepEqual(states(w), {east: 'live', west: 'live'});
});

test('a refusal naming one cluster takes that part out; the others go on in a new subscription, and part.retry() asks again', () => {
  const {w, client, log} = watching();
  client.last.sink.refused(status(403, 'Forbidden', 'cluster "west": alice may not watch pods'), 0);
  assert.deepEqual(states(w), {east: 'connecting', west: 'error'});
  assert.equal(client.streams.length, 2);
  assert.deepEqual(client.last.request.clusters, ['east']);
  client.last.sink.opened();
  client.last.sink.message(inCluster('east', end('10'), 'east=10'));
  assert.equal(w.state, 'partial');
  assert.ok(log.includes('error west 403'));
  w.parts.get('west').retry();
  assert.equal(client.streams.length, 3);
  assert.ok(client.streams[1].closed);
  assert.deepEqual([client.last.request.clusters, client.last.request.from], [['east', 'west'], 'east=10']);
  // A refusal that names no cluster is every part's.
  client.last.sink.refused(status(400, 'BadRequest', 'labelSelector: bad'), 0);
  assert.deepEqual(states(w), {east: 'error', west: 'error'});
  assert.equal(client.streams.length, 3);
});

test('a part said to be left out before it began is asked for again, unless it streams meanwhile', (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const {w, client, to} = watching();
  client.last.sink.opened();
  to('east', end('10'), 'east=10');
  to('west', unreachable('west'));
  assert.deepEqual(states(w), {east: 'live', west: 'reconnecting'});
  t.mock.timers.tick(1000);
  assert.equal(client.streams.length, 2, 'west is asked for again');
  assert.equal(client.last.request.from, 'east=10');
  client.last.sink.opened();
  assert.equal(w.parts.get('east').state, 'live', 'east resumed without a flicker');
  // This time its API server is unreachable, but its hub has a picture.
  to('west', unreachable('west'));
  to('west', added(pod('b')));
  to('west', end('20'), 'east=10,west=20');
  t.mock.timers.tick(60000);
  assert.equal(client.streams.length, 2, 'it streams: nothing to ask again');
  assert.deepEqual(states(w), {east: 'live', west: 'reconnecting'});
  assert.ok(w.get('west', 'web', 'b'));
  to('west', reachable);
  assert.equal(w.state, 'live');
});

test('a merge patch for an object a part lacks resyncs that part alone', () => {
  const {w, client, to} = synced({patch: true});
  assert.equal(client.last.request.params.delta, 'merge-patch');
  to('west', patched({metadata: {name: 'ghost', namespace: 'web'}, status: {phase: 'Failed'}}), 'east=10,west=21');
  assert.equal(client.streams.length, 2);
  assert.equal(client.last.request.from, 'east=10', 'west starts again from a snapshot');
  client.last.sink.opened();
  assert.deepEqual(states(w), {east: 'live', west: 'syncing'});
  assert.ok(w.get('west', 'web', 'b'), 'its old picture stays meanwhile');
});

test('update() asks every part for a fresh snapshot in one subscription; the old pictures stay until each ends', () => {
  const {w, client, to, log} = synced();
  w.update({labelSelector: 'app=web'});
  assert.equal(client.streams.length, 2);
  assert.deepEqual(client.last.request, {resource: 'pods', params: {labelSelector: 'app=web'}, from: '', clusters: ['east', 'west']});
  client.last.sink.opened();
  to('east', end('40'), 'east=40');
  assert.deepEqual(keys(w), ['west/web/b']);
  assert.ok(log.includes('deleted east a'));
});

test('token expiry in every part is one renewal and one new subscription', async () => {
  const {w, client, to} = synced();
  to('east', error(401, 'Unauthorized', 'cluster "east": token expired'));
  to('west', error(401, 'Unauthorized', 'cluster "west": token expired'));
  client.last.sink.message(error(401, 'Unauthorized', 'every cluster\'s part of this subscription has ended'));
  await settle();
  assert.equal(client.renewals, 1);
  assert.equal(client.streams.length, 2);
  assert.equal(client.last.request.from, 'east=10,west=20');
  assert.deepEqual(states(w), {east: 'reconnecting', west: 'reconnecting'});
});

test('over SSE: one request with ?clusters= and the compound id; each event to its cluster\'s part', async (t) => {
  t.mock.timers.enable({apis: ['setTimeout', 'Date']});
  const {fetch, calls} = fakeFetch();
  const client = new SseClient({base: 'http://gw.test', fetch});
  open.push(client);
  const w = watch('pods', {client, clusters: ['east', 'west']});
  const warnings = [];
  w.on('warning', (m, c) => warnings.push(`${c}: ${m}`));
  await settle();
  assert.equal(calls.length, 1);
  assert.equal(calls[0].url.pathname, '/stream/pods');
  assert.equal(calls[0].url.searchParams.get('clusters'), 'east,west');
  assert.equal(calls[0].url.searchParams.has('resourceVersion'), false);
  const sse = (m) => `event: ${m.type}\n` + (m.id !== undefined ? `id: ${m.id}\n` : '') + `data: ${JSON.stringify({cluster: m.cluster, type: m.type, object: m.object, message: m.message})}\n\n`;
  calls[0].write(
    sse(inCluster('west', added(pod('b')))) +
      sse(inCluster('west', end('20'), 'west=20')) +
      sse(inCluster('east', {type: 'WARNING', message: 'v1 Endpoints is deprecated'})) +
      sse(inCluster('east', end('10'), 'east=10,west=20')),
  );
  await settle();
  assert.equal(w.state, 'live');
  assert.deepEqual(keys(w), ['west/web/b']);
  assert.equal(w.resourceVersion, 'east=10,west=20');
  assert.deepEqual(warnings, ['east: v1 Endpoints is deprecated']);
  // A part's ERROR over SSE ends that part, not the request.
  calls[0].write(sse(inCluster('west', error(403, 'Forbidden', 'cluster "west": no'))) + sse(inCluster('east', added(pod('a')), 'east=11,west=20')));
  await settle();
  assert.deepEqual(states(w), {east: 'live', west: 'error'});
  assert.ok(w.get('east', 'web', 'a'));
  assert.ok(!calls[0].aborted);
  // The stream ends: east resumes alone, from its position.
  calls[0].finish();
  await settle();
  assert.equal(w.parts.get('east').state, 'reconnecting');
  t.mock.timers.tick(1000);
  await settle();
  assert.equal(calls.length, 2);
  assert.equal(calls[1].url.searchParams.get('clusters'), 'east');
  assert.equal(calls[1].url.searchParams.get('resourceVersion'), 'east=11');
});
