// The pure pieces: RFC 7386 merge patches and the SSE parser.
import {test} from 'node:test';
import assert from 'node:assert/strict';

import {EventStreamParser, keyOf, mergePatch} from '../kubefan.js';

test('merge patches follow the examples of RFC 7386 appendix A', () => {
  // https://www.rfc-editor.org/rfc/rfc7386#appendix-A
  const cases = [
    [{a: 'b'}, {a: 'c'}, {a: 'c'}],
    [{a: 'b'}, {b: 'c'}, {a: 'b', b: 'c'}],
    [{a: 'b'}, {a: null}, {}],
    [{a: 'b', b: 'c'}, {a: null}, {b: 'c'}],
    [{a: ['b']}, {a: 'c'}, {a: 'c'}],
    [{a: 'c'}, {a: ['b']}, {a: ['b']}],
    [{a: {b: 'c'}}, {a: {b: 'd', c: null}}, {a: {b: 'd'}}],
    [{a: [{b: 'c'}]}, {a: [1]}, {a: [1]}],
    [['a', 'b'], ['c', 'd'], ['c', 'd']],
    [{a: 'b'}, ['c'], ['c']],
    [{a: 'foo'}, null, null],
    [{a: 'foo'}, 'bar', 'bar'],
    [{e: null}, {a: 1}, {e: null, a: 1}],
    [[1, 2], {a: 'b', c: null}, {a: 'b'}],
    [{}, {a: {bb: {ccc: null}}}, {a: {bb: {}}}],
  ];
  for (const [target, patch, want] of cases) {
    const before = JSON.stringify(target);
    assert.deepEqual(mergePatch(target, patch), want, `${before} + ${JSON.stringify(patch)}`);
    assert.equal(JSON.stringify(target), before, 'the target is not modified');
  }
});

test('objects are keyed namespace/name, cluster-scoped ones by name', () => {
  assert.equal(keyOf({metadata: {name: 'a', namespace: 'web'}}), 'web/a');
  assert.equal(keyOf({metadata: {name: 'node-1'}}), 'node-1');
});

function parse(chunks) {
  const events = [];
  const retries = [];
  const p = new EventStreamParser((e) => events.push(e), (ms) => retries.push(ms));
  for (const c of chunks) p.feed(c);
  p.end();
  return {events, retries};
}

test('the SSE parser reads kubefan frames however the bytes are sliced', () => {
  const stream =
    'retry: 2000\n\n' +
    'event: ADDED\ndata: {"type":"ADDED"}\n\n' +
    ': keep-alive\n\n' +
    'event: BOOKMARK\nid: 7\ndata: {"type":"BOOKMARK"}\n\n' +
    'event: RESET\nid:\ndata: {"type":"RESET"}\n\n';
  const want = [
    {type: 'ADDED', data: '{"type":"ADDED"}', id: undefined},
    {type: 'BOOKMARK', data: '{"type":"BOOKMARK"}', id: '7'},
    {type: 'RESET', data: '{"type":"RESET"}', id: ''},
  ];
  for (let size = 1; size <= stream.length; size++) {
    const chunks = [];
    for (let i = 0; i < stream.length; i += size) chunks.push(stream.slice(i, i + size));
    const {events, retries} = parse(chunks);
    assert.deepEqual(events, want, `slices of ${size}`);
    assert.deepEqual(retries, [2000]);
  }
});

test('the SSE parser takes CR, LF and CRLF line ends, split anywhere', () => {
  for (const eol of ['\r', '\n', '\r\n']) {
    const stream = ['event: A', 'data: 1', 'data: 2', '', 'data:x', '', ''].join(eol);
    for (let cut = 0; cut <= stream.length; cut++) {
      const {events} = parse([stream.slice(0, cut), stream.slice(cut)]);
      assert.deepEqual(events, [{type: 'A', data: '1\n2', id: undefined}, {type: 'message', data: 'x', id: undefined}], JSON.stringify(eol) + ' cut at ' + cut);
    }
  }
});

test('the SSE parser drops an unfinished event at the end and events without data', () => {
  const {events, retries} = parse(['id: 5\n\n', 'retry: soon\n\n', 'event: ADDED\ndata: {}']);
  assert.deepEqual(events, []);
  assert.deepEqual(retries, [], 'a retry that is not a number is ignored');
});
