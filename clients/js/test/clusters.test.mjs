// The client against a gateway serving two simulated clusters
// (`kubefan serve --cluster east=... --cluster west=...`): `cluster`
// reaches one under /clusters/NAME/, `clusters` watches both as one
// picture from one merged subscription, over SSE and /ws.
//
//   cargo build && (cd clients/js && npm test)
import {after, before, describe, test} from 'node:test';
import assert from 'node:assert/strict';

import {connect, watch} from '../kubefan.js';
import {Cluster, when} from './gateway.mjs';

const gateway = new Cluster({pods: 6, nodes: 2, names: ['east', 'west']});
before(() => gateway.start());
after(() => gateway.stop());

const open = [];
after(() => open.forEach((w) => w.close()));

function names(pods) {
  return pods.map((p) => p.metadata.namespace + '/' + p.metadata.name).sort();
}

/** Each cluster's part of `w`'s picture is that cluster's simulator's pods. */
async function picturesEqual(w) {
  for (const cluster of ['east', 'west']) {
    const want = names(await gateway.listPods(cluster));
    const got = names(w.list().filter(([c]) => c === cluster).map(([, o]) => o));
    assert.deepEqual(got, want, cluster);
  }
}

/**
 * Connection options that record what a client asks the gateway for and
 * what it gets: each `/ws` message sent and received, each SSE request.
 */
function recording() {
  const sent = [];
  const received = [];
  const requests = [];
  class RecordingSocket extends WebSocket {
    constructor(url) {
      super(url);
      this.addEventListener('message', (ev) => received.push(JSON.parse(ev.data)));
    }

    send(text) {
      sent.push(JSON.parse(text));
      super.send(text);
    }
  }
  return {
    options: {
      WebSocket: RecordingSocket,
      fetch: (url, init) => {
        requests.push(new URL(url));
        return fetch(url, init);
      },
    },
    subscribes: () => sent.filter((m) => m.op === 'subscribe'),
    received,
    streams: () => requests.filter((u) => u.pathname.startsWith('/stream/')),
  };
}

/** The subscriptions (over /ws) or requests (SSE) `seen` made for pods, each as what it asked for. */
function asked(transport, seen) {
  if (transport === 'ws') return seen.subscribes().map((m) => ({clusters: m.clusters, cluster: m.cluster, from: m.resourceVersion}));
  return seen.streams().map((u) => ({clusters: u.searchParams.get('clusters').split(','), cluster: undefined, from: u.searchParams.get('resourceVersion') || undefined}));
}

for (const transport of ['sse', 'ws']) {
  describe(`over ${transport}`, () => {
    test('`cluster` watches that cluster alone, at its path', async () => {
      const w = watch('pods', {transport, base: gateway.base, token: gateway.token(), cluster: 'west'});
      open.push(w);
      await w.ready();
      assert.deepEqual(names(w.list()), names(await gateway.listPods('west')));
      const pod = `${transport}-west-only`;
      await gateway.createPod(pod, 'node-0', {app: 'e2e'}, 'west');
      await when(w, 'west\'s new pod', () => w.get('default', pod));
      await gateway.createPod(pod, 'node-0', {app: 'e2e'}, 'east');
      assert.throws(() => watch('pods', {transport, base: gateway.base, cluster: 'West'}), /not a cluster name/);
    });

    test('`clusters` is one subscription across clusters, one picture keyed by cluster, each part its own', async () => {
      const seen = recording();
      const w = watch('pods', {transport, base: gateway.base, token: gateway.token(), clusters: ['east', 'west'], ...seen.options});
      open.push(w);
      const added = [];
      w.on('added', (obj, cluster) => added.push(`${cluster} ${obj.metadata.name}`));
      await w.ready();
      assert.equal(w.state, 'live');
      // One subscription (over SSE, one request) names both clusters, on
      // one client at the gateway's root.
      assert.equal(w.client.cluster, null);
      assert.equal(w.client.kind, transport);
      assert.deepEqual(asked(transport, seen), [{clusters: ['east', 'west'], cluster: undefined, from: undefined}]);
      if (transport === 'ws') {
        // Both clusters' messages come on it, each naming its cluster.
        const sub = seen.subscribes()[0].id;
        const of = seen.received.filter((m) => m.sub === sub);
        assert.deepEqual([...new Set(of.map((m) => m.cluster))].sort(), ['east', 'west']);
        assert.equal(seen.received.filter((m) => m.sub !== sub).length, 0);
      }
      await picturesEqual(w);
      assert.equal(w.size, (await gateway.listPods('east')).length + (await gateway.listPods('west')).length);
      assert.match(w.resourceVersion, /^east=[0-9]+(~[0-9a-f]{8})?,west=[0-9]+(~[0-9a-f]{8})?$/);
      // Each cluster's changes reach its part, and only its part.
      const pod = `${transport}-both`;
      await gateway.createPod(pod, 'node-1', {app: 'e2e'}, 'east');
      await when(w.parts.get('east'), 'east\'s pod', () => w.get('east', 'default', pod));
      assert.equal(w.get('west', 'default', pod), undefined);
      assert.ok(w.objects.has(`east/default/${pod}`));
      assert.ok(added.includes(`east ${pod}`), added.join(', '));
      const westPod = `${transport}-west-too`;
      await gateway.createPod(westPod, 'node-0', {app: 'e2e'}, 'west');
      await when(w.parts.get('west'), 'west\'s pod', () => w.get('west', 'default', westPod));
      assert.equal(w.get('east', 'default', westPod), undefined);
      assert.ok(added.includes(`west ${westPod}`), added.join(', '));
      await picturesEqual(w);
      assert.equal(asked(transport, seen).length, 1, 'still the one subscription');
      assert.throws(() => watch('pods', {base: gateway.base, clusters: []}), /non-empty array/);
      w.close();
      assert.equal(w.client.state, 'closed');
    });

    test('a watch on a root client names its cluster; one on a cluster\'s client cannot name another', async () => {
      const client = connect({transport, base: gateway.base, token: gateway.token()});
      const west = client.watch('pods', {cluster: 'west'});
      const root = client.watch('pods');
      open.push(west, root);
      await Promise.all([west.ready(), root.ready()]);
      assert.equal(west.cluster, 'west');
      assert.deepEqual(names(west.list()), names(await gateway.listPods('west')));
      // The root is the gateway's default cluster (east).
      assert.deepEqual(names(root.list()), names(await gateway.listPods('east')));
      const eastOnly = connect({transport, base: gateway.base, token: gateway.token(), cluster: 'east'});
      assert.equal(eastOnly.cluster, 'east');
      assert.equal(eastOnly.watch('pods', {cluster: 'east'}).cluster, null);
      assert.throws(() => eastOnly.watch('pods', {cluster: 'west'}), /needs a client at the gateway's root/);
      assert.throws(() => watch('pods', {base: gateway.base, client: eastOnly, clusters: ['east', 'west']}), /needs a client at the gateway's root/);
      eastOnly.close();
      client.close();
    });
  });
}

test('across clusters, a gateway restart is resumed with the compound id; a cluster that changed meanwhile resets alone', async () => {
  const seen = {sse: recording(), ws: recording()};
  const watches = ['sse', 'ws'].map((transport) => watch('pods', {transport, base: gateway.base, token: gateway.token(), clusters: ['east', 'west'], ...seen[transport].options}));
  open.push(...watches);
  await Promise.all(watches.map((w) => w.ready()));
  const positions = watches.map((w) => w.resourceVersion);
  await gateway.killGateway();
  await Promise.all(watches.map((w) => when(w, 'reconnecting', () => w.state === 'reconnecting')));
  await gateway.createPod('while-down', 'node-1', {app: 'e2e'}, 'west');
  await gateway.startGateway();
  await Promise.all(watches.map((w) => when(w, 'west\'s missed pod', () => w.state === 'live' && w.get('west', 'default', 'while-down'), 15000)));
  for (const [i, transport] of ['sse', 'ws'].entries()) {
    const w = watches[i];
    const again = asked(transport, seen[transport]).at(-1);
    assert.deepEqual(again, {clusters: ['east', 'west'], cluster: undefined, from: positions[i]}, transport);
    assert.deepEqual([w.parts.get('east').resets, w.parts.get('west').resets], [0, 1], transport);
    await picturesEqual(w);
  }
  watches.forEach((w) => w.close());
});
