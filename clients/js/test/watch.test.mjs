// The store against a fake client: what it makes of each protocol message,
// and what it does when a stream fails. Time is mocked; nothing sleeps.
import {test} from 'node:test';
import assert from 'node:assert/strict';

import {Watch} from '../kubefan.js';
import {added, bookmark, deleted, end, error, fakeClient, modified, patched, pod, record, reset, settle, status} from './fakes.mjs';

function watching(options = {}, client = fakeClient()) {
  const w = new Watch(client, 'pods', options, false);
  return {w, client, log: record(w)};
}

const names = (w) => w.list().map((o) => o.metadata.name).sort();

test('a snapshot is applied at its end marker, not before', () => {
  const {w, client, log} = watching();
  const s = client.last;
  assert.equal(s.request.from, '');
  s.sink.opened();
  assert.equal(w.state, 'syncing');
  s.sink.message(added(pod('a', {rv: '3'})));
  s.sink.message(added(pod('b', {rv: '4'})));
  assert.equal(w.size, 0, 'nothing shown before the end marker');
  assert.equal(w.synced, false);
  s.sink.message(end('10'));
  assert.deepEqual(names(w), ['a', 'b']);
  assert.equal(w.resourceVersion, '10');
  assert.equal(w.state, 'live');
  assert.equal(w.snapshots, 1);
  assert.deepEqual(log, ['state syncing', 'added a', 'added b', 'state live', 'synced 10']);
});

test('a WARNING from the gateway is emitted as a warning, and changes nothing else', () => {
  const {w, client, log} = watching();
  const warnings = [];
  w.on('warning', (m) => warnings.push(m));
  const s = client.last;
  s.sink.opened();
  s.sink.message({type: 'WARNING', message: 'v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice'});
  s.sink.message(added(pod('a', {rv: '3'})));
  s.sink.message(end('10'));
  assert.deepEqual(warnings, ['v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice']);
  assert.deepEqual(names(w), ['a']);
  assert.deepEqual(log, ['state syncing', 'added a', 'state live', 'synced 10']);
});

test('changes after the snapshot are applied in order and move the position', () => {
  const {w, client, log} = watching();
  const s = client.last;
  s.sink.opened();
  s.sink.message(added(pod('a', {rv: '3', phase: 'Pending'})));
  s.sink.message(end('10'));
  log.length = 0;
  s.sink.message(modified(pod('a', {rv: '11', phase: 'Running'}), '11'));
  s.sink.message(added(pod('c', {rv: '12'}), '12'));
  s.sink.message(deleted(pod('a', {rv: '13'}), '13'));
  assert.deepEqual(names(w), ['c']);
  assert.equal(w.resourceVersion, '13');
  assert.deepEqual(log, ['modified a', 'added c', 'deleted a']);
  s.sink.message(bookmark('20'));
  assert.equal(w.resourceVersion, '20', 'a progress bookmark is a position too');
});

test('merge patches are applied to the object the store holds (RFC 7386)', () => {
  const {w, client} = watching({patch: true});
  assert.equal(client.last.request.params.delta, 'merge-patch');
  const s = client.last;
  s.sink.opened();
  s.sink.message(added(pod('a', {rv: '3', node: 'n1', labels: {app: 'web', tier: 'x'}})));
  s.sink.message(end('10'));
  let seen;
  w.on('modified', (now, before) => {
    seen = {now, before};
  });
  s.sink.message(patched({metadata: {name: 'a', namespace: 'web', resourceVersion: '11', labels: {tier: null}}, spec: {nodeName: 'n2'}}, '11'));
  const a = w.get('web', 'a');
  assert.equal(a.spec.nodeName, 'n2');
  assert.deepEqual(a.metadata.labels, {app: 'web'});
  assert.equal(a.metadata.resourceVersion, '11');
  assert.equal(a.status.phase, 'Running', 'untouched fields stay');
  assert.equal(seen.before.spec.nodeName, 'n1', 'the previous version is handed over unchanged');
  assert.equal(w.resourceVersion, '11');
});

test('a patch for an object the store does not hold starts again from a snapshot', () => {
  const {w, client} = watching({patch: true});
  client.last.sink.opened();
  client.last.sink.message(end('10'));
  client.last.sink.message(patched({metadata: {name: 'ghost', namespace: 'web', resourceVersion: '11'}}, '11'));
  assert.equal(client.streams.length, 2);
  assert.ok(client.streams[0].closed);
  assert.equal(client.last.request.from, '', 'a fresh snapshot, not a resume');
  assert.equal(w.size, 0);
});

test('a RESET keeps the old picture until the new snapshot ends, then tells the differences', () => {
  const {w, client, log} = watching();
  const s = client.last;
  s.sink.opened();
  s.sink.message(added(pod('a', {rv: '3'})));
  s.sink.message(added(pod('b', {rv: '4'})));
  s.sink.message(end('10'));
  log.length = 0;

  s.sink.message(reset('Lapped'));
  assert.equal(w.state, 'reset');
  assert.equal(w.resets, 1);
  s.sink.message(added(pod('b', {rv: '15', phase: 'Failed'})));
  s.sink.message(added(pod('c', {rv: '16'})));
  assert.deepEqual(names(w), ['a', 'b'], 'the old picture stays meanwhile');
  assert.equal(w.get('web/b').status.phase, 'Running');
  assert.equal(w.resourceVersion, '10', 'and so does its position');

  s.sink.message(end('20'));
  assert.deepEqual(names(w), ['b', 'c']);
  assert.equal(w.get('web/b').status.phase, 'Failed');
  assert.equal(w.resourceVersion, '20');
  assert.equal(w.snapshots, 2);
  assert.deepEqual(log, ['state reset', 'reset Lapped', 'modified b', 'added c', 'deleted a', 'state live', 'synced 20']);
});

test('a stream that drops resumes from the position after a back-off, without a new snapshot', (t) => {
  t.mock.timers.enable({apis: ['setTimeout']});
  const {w, client, log} = watching();
  client.last.sink.opened();
  client.last.sink.message(added(pod('a')));
  client.last.sink.message(end('10'));
  client.last.sink.message(modified(pod('a', {rv: '12', phase: 'Failed'}), '12'));
  log.length = 0;

  client.last.sink.dropped({reason: 'network'});
  assert.equal(w.state, 'reconnecting');
  assert.equal(client.streams.length, 1, 'not at once');
  t.mock.timers.tick(1000);
  assert.equal(client.streams.length, 2);
  assert.equal(client.last.request.from, '12');
  client.last.sink.opened();
  assert.equal(w.state, 'live', 'a resumed stream is live at once');
  client.last.sink.message(deleted(pod('a', {rv: '13'}), '13'));
  assert.equal(w.size, 0);
  assert.equal(w.snapshots, 1);
  assert.deepEqual(log, ['state reconnecting', 'state live', 'deleted a']);
});

test('a stream that drops while a snapshot after a RESET is collected resumes from the old picture', (t) => {
  t.mock.timers.enable({apis: ['setTimeout']});
  const {w, client} = watching();
  client.last.sink.opened();
  client.last.sink.message(added(pod('a')));
  client.last.sink.message(end('10'));
  client.last.sink.message(reset());
  client.last.sink.message(added(pod('b')));
  client.last.sink.dropped({reason: 'network'});
  t.mock.timers.tick(1000);
  assert.equal(client.last.request.from, '10');
  assert.deepEqual(names(w), ['a']);
  // The gateway may answer with the changes after 10 (then no snapshot is
  // awaited) or with another RESET and a snapshot.
  client.last.sink.opened();
  client.last.sink.message(reset());
  client.last.sink.message(added(pod('b')));
  client.last.sink.message(end('30'));
  assert.deepEqual(names(w), ['b']);
});

test('a drop before the first snapshot ended asks for a snapshot again', (t) => {
  t.mock.timers.enable({apis: ['setTimeout']});
  const {w, client} = watching();
  client.last.sink.opened();
  client.last.sink.message(added(pod('a')));
  client.last.sink.dropped({reason: 'network'});
  t.mock.timers.tick(1000);
  assert.equal(client.last.request.from, '');
  client.last.sink.opened();
  client.last.sink.message(added(pod('a')));
  client.last.sink.message(end('5'));
  assert.deepEqual(names(w), ['a']);
});

test('an expired token is renewed and the stream resumes from its position, with no RESET', async (t) => {
  t.mock.timers.enable({apis: ['Date']});
  const {w, client, log} = watching();
  client.last.sink.opened();
  client.last.sink.message(added(pod('a')));
  client.last.sink.message(end('10'));
  client.last.sink.message(modified(pod('a', {rv: '11'}), '11'));
  log.length = 0;
  client.last.sink.message(error(401, 'Unauthorized', 'token expired'));
  assert.ok(client.streams[0].closed);
  assert.equal(client.renewals, 1);
  await settle();
  assert.equal(client.streams.length, 2, 'reopened as soon as the token is renewed');
  assert.equal(client.last.request.from, '11');
  client.last.sink.opened();
  assert.equal(w.state, 'live');
  assert.equal(w.error, null);
  assert.equal(w.resets, 0);
  assert.equal(w.snapshots, 1);
  assert.deepEqual(log, ['error 401', 'state reconnecting', 'state live']);

  // Later, the renewed token expires too, the stream having run quietly
  // with it: renewed again.
  t.mock.timers.tick(60000);
  client.last.sink.message(error(401, 'Unauthorized', 'token expired'));
  await settle();
  assert.equal(client.renewals, 2);
  assert.equal(client.streams.length, 3);
});

test('a 401 right after a renewal is final: the watch reports an error and stops', async () => {
  const {w, client} = watching();
  client.last.sink.refused(status(401, 'Unauthorized', 'token expired'), 0);
  await settle();
  assert.equal(client.streams.length, 2);
  client.last.sink.refused(status(401, 'Unauthorized', 'bad signature'), 0);
  await settle();
  assert.equal(client.streams.length, 2);
  assert.equal(w.state, 'error');
  assert.equal(w.error.message, 'bad signature');
});

test('without a way to renew the token, a 401 is an error at once', async () => {
  const {w, client} = watching({}, fakeClient({renew: async () => false}));
  client.last.sink.refused(status(401, 'Unauthorized', 'no token'), 0);
  await settle();
  assert.equal(w.state, 'error');
  assert.equal(client.streams.length, 1);
});

test('a refused request (400, 403, 404) is not retried until update() or retry()', (t) => {
  t.mock.timers.enable({apis: ['setTimeout']});
  const {w, client, log} = watching({labelSelector: 'app in ('});
  assert.equal(client.last.request.params.labelSelector, 'app in (');
  client.last.sink.refused(status(400, 'BadRequest', 'labelSelector: unclosed'), 0);
  t.mock.timers.tick(60000);
  assert.equal(client.streams.length, 1);
  assert.equal(w.state, 'error');
  assert.deepEqual(log, ['error 400', 'state error']);
  w.update({labelSelector: 'app=web'});
  assert.equal(client.streams.length, 2);
  assert.equal(client.last.request.params.labelSelector, 'app=web');
  client.last.sink.opened();
  assert.equal(w.error, null);

  client.last.sink.message(error(404, 'NotFound', 'the resource is gone'));
  t.mock.timers.tick(60000);
  assert.equal(client.streams.length, 2);
  w.retry();
  assert.equal(client.streams.length, 3);
});

test('429 and 503 are retried after Retry-After, or the back-off, resuming', (t) => {
  t.mock.timers.enable({apis: ['setTimeout']});
  const {w, client} = watching();
  client.last.sink.opened();
  client.last.sink.message(end('10'));
  client.last.sink.message(error(503, 'ServiceUnavailable', 'kubefan is shutting down; reconnect'));
  assert.equal(w.state, 'reconnecting');
  t.mock.timers.tick(1000);
  assert.equal(client.streams.length, 2);
  assert.equal(client.last.request.from, '10');
  client.last.sink.refused(status(429, 'TooManyRequests', 'limit'), 7);
  t.mock.timers.tick(6999);
  assert.equal(client.streams.length, 2, 'Retry-After is honoured');
  t.mock.timers.tick(1);
  assert.equal(client.streams.length, 3);
});

test('update() keeps the old picture until the new snapshot ends, and asks for a fresh one', () => {
  const {w, client, log} = watching({namespace: ['web', 'db'], fields: ['spec.nodeName', 'status.phase']});
  assert.deepEqual(client.last.request.params, {namespace: 'web,db', fields: 'spec.nodeName,status.phase'});
  client.last.sink.opened();
  client.last.sink.message(added(pod('a')));
  client.last.sink.message(added(pod('b')));
  client.last.sink.message(end('10'));
  log.length = 0;
  w.update({labelSelector: 'app=x'});
  assert.ok(client.streams[0].closed);
  assert.equal(client.last.request.from, '', 'another filter: a snapshot, not a resume');
  client.last.sink.opened();
  client.last.sink.message(added(pod('b')));
  assert.deepEqual(names(w), ['a', 'b']);
  client.last.sink.message(end('12'));
  assert.deepEqual(names(w), ['b']);
  assert.deepEqual(log, ['state connecting', 'state syncing', 'deleted a', 'state live', 'synced 12']);
});

test('messages of a stream the watch left are ignored', () => {
  const {w, client} = watching();
  const first = client.last;
  w.update({namespace: 'x'});
  first.sink.opened();
  first.sink.message(added(pod('stale')));
  first.sink.message(end('9'));
  assert.equal(w.size, 0);
  assert.equal(w.state, 'connecting');
});

test('a relist run replayed after a resume converges (events applied twice are harmless)', (t) => {
  t.mock.timers.enable({apis: ['setTimeout']});
  const {w, client} = watching();
  client.last.sink.opened();
  client.last.sink.message(added(pod('a', {rv: '3'})));
  client.last.sink.message(end('10'));
  // A run sharing resourceVersion 20: only its last event has the id.
  client.last.sink.message(modified(pod('a', {rv: '20', phase: 'Failed'})));
  assert.equal(w.resourceVersion, '10');
  client.last.sink.dropped({reason: 'network'});
  t.mock.timers.tick(1000);
  assert.equal(client.last.request.from, '10');
  client.last.sink.opened();
  client.last.sink.message(modified(pod('a', {rv: '20', phase: 'Failed'})));
  client.last.sink.message(added(pod('b', {rv: '20'}), '20'));
  assert.deepEqual(names(w), ['a', 'b']);
  assert.equal(w.get('web/a').status.phase, 'Failed');
  assert.equal(w.resourceVersion, '20');
});

test('ready() resolves at the first snapshot and rejects on an error before it', async () => {
  const one = watching();
  const ready = one.w.ready();
  one.client.last.sink.opened();
  one.client.last.sink.message(end('1'));
  assert.equal(await ready, one.w);

  const two = watching();
  const failing = two.w.ready();
  two.client.last.sink.refused(status(403, 'Forbidden', 'not granted'), 0);
  await assert.rejects(failing, (err) => err.status.code === 403);
});

test('close() ends the stream, stops retries, and closes a client the watch owns', (t) => {
  t.mock.timers.enable({apis: ['setTimeout']});
  const client = fakeClient();
  const w = new Watch(client, 'pods', {}, true);
  client.last.sink.dropped({reason: 'network'});
  w.close();
  t.mock.timers.tick(60000);
  assert.equal(client.streams.length, 1);
  assert.equal(w.state, 'closed');
  assert.ok(client.closed);
});

test('a listener that throws does not stop the others or the store', (t) => {
  const reported = [];
  const original = globalThis.reportError;
  globalThis.reportError = (err) => reported.push(err);
  t.after(() => {
    globalThis.reportError = original;
  });
  const {w, client} = watching();
  w.on('added', () => {
    throw new Error('listener bug');
  });
  const seen = [];
  w.on('added', (o) => seen.push(o.metadata.name));
  client.last.sink.opened();
  client.last.sink.message(added(pod('a')));
  client.last.sink.message(end('1'));
  assert.deepEqual(seen, ['a']);
  assert.equal(w.state, 'live');
  assert.equal(reported[0].message, 'listener bug');
});
