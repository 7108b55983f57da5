// The client against a gateway serving two simulated clusters
// (`kubefan serve --cluster east=... --cluster west=...`): `cluster`
// reaches one under /clusters/NAME/, `clusters` watches both as one
// picture, over SSE and /ws.
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

    test('`clusters` is one picture keyed by cluster, each part its own', async () => {
      const w = watch('pods', {transport, base: gateway.base, token: gateway.token(), clusters: ['east', 'west']});
      open.push(w);
      const added = [];
      w.on('added', (obj, cluster) => added.push(`${cluster} ${obj.metadata.name}`));
      await w.ready();
      assert.equal(w.state, 'live');
      // One client at the gateway's root for every part (over ws, one
      // socket: the root's default is east, so west's pods below come
      // only through its subscription naming west).
      assert.equal(w.client.cluster, null);
      for (const part of w.parts.values()) assert.equal(part.client, w.client);
      assert.equal(w.client.kind, transport);
      for (const cluster of ['east', 'west']) {
        const want = names(await gateway.listPods(cluster));
        const got = names(w.list().filter(([c]) => c === cluster).map(([, o]) => o));
        assert.deepEqual(got, want, cluster);
      }
      assert.equal(w.size, (await gateway.listPods('east')).length + (await gateway.listPods('west')).length);
      const pod = `${transport}-both`;
      await gateway.createPod(pod, 'node-1', {app: 'e2e'}, 'east');
      await when(w.parts.get('east'), 'east\'s pod', () => w.get('east', 'default', pod));
      assert.equal(w.get('west', 'default', pod), undefined);
      assert.ok(w.objects.has(`east/default/${pod}`));
      assert.ok(added.includes(`east ${pod}`), added.join(', '));
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
