// The dashboard of a gateway serving two clusters (`kubefan serve
// --cluster east=... --cluster west=...`, no default cluster), as a person
// uses it in Chromium: the root shows every cluster at once, each node
// under its cluster's name; the picker moves to one cluster's page at
// /clusters/NAME/, which shows that cluster alone, live.
//
//   cargo build && (cd web-test && npm ci && npm test)

import {after, before, test} from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import * as support from './support.mjs';
import {ARTIFACTS, Cluster, freePort, launch, newPod} from './support.mjs';

const PODS = 12;
const NODES = 2;
const TIMEOUT = 5000;

const cluster = new Cluster({pods: PODS, nodes: NODES});
let base;
let context;
let page;

async function pods(name) {
  const r = await fetch(cluster.sims.get(name).url + '/api/v1/pods');
  return (await r.json()).items;
}

before(async () => {
  await cluster.startSims(['east', 'west']);
  const port = await freePort();
  await cluster.startClustersGateway(port);
  base = `http://127.0.0.1:${port}`;
  context = await launch(path.join(cluster.tmp, 'profile'));
  page = context.pages()[0] || (await context.newPage());
});

after(async () => {
  if (context) await context.close();
  await cluster.stopAll();
});

test('the root shows every cluster, nodes grouped by cluster, and the picker moves to one', async () => {
  await page.goto(`${base}/`);
  const east = await pods('east');
  const west = await pods('west');
  await support.waitForBlocks(page, east.length + west.length, TIMEOUT);
  await support.waitForState(page, 'live', TIMEOUT);
  // Every cluster's watches on the one connection this browser's tabs
  // share (the root's /ws, each subscription naming its cluster; this
  // gateway has no default cluster).
  await page.locator('#conn[data-shared="true"]').waitFor({timeout: TIMEOUT});
  // Each cluster's nodes, each under its cluster's name.
  for (const name of ['east', 'west']) {
    for (let n = 0; n < NODES; n++) {
      const col = page.locator(`#board .node[data-node="${name}/node-${n}"]`);
      await col.waitFor({timeout: TIMEOUT});
      assert.equal(await col.locator('.cluster').textContent(), name);
    }
  }
  const p = east[0];
  const key = `east/${p.metadata.namespace}/${p.metadata.name}`;
  assert.equal(await support.podBlock(page, key, `east/${p.spec.nodeName}`).count(), 1);
  // A pod created in west appears in west's column, live.
  await fetch(cluster.sims.get('west').url + '/api/v1/namespaces/default/pods', {
    method: 'POST',
    headers: {'Content-Type': 'application/json'},
    body: JSON.stringify(newPod('from-west', 'node-1')),
  }).then((r) => assert.ok(r.ok));
  await support.podBlock(page, 'west/default/from-west', 'west/node-1').waitFor({timeout: TIMEOUT});
  assert.deepEqual(
    await page.locator('#cluster option').evaluateAll((os) => os.map((o) => o.value)),
    ['all', 'east', 'west'],
  );
  assert.equal(await page.locator('#cluster').inputValue(), 'all');
  fs.mkdirSync(ARTIFACTS, {recursive: true});
  await page.screenshot({path: path.join(ARTIFACTS, 'dashboard-clusters.png')});

  // The picker: west alone, at its own path.
  await Promise.all([page.waitForURL(`${base}/clusters/west/`, {timeout: TIMEOUT}), page.selectOption('#cluster', 'west')]);
  await support.waitForBlocks(page, west.length + 1, TIMEOUT);
  await support.waitForState(page, 'live', TIMEOUT);
  await support.podBlock(page, 'default/from-west', 'node-1').waitFor({timeout: TIMEOUT});
  assert.equal(await page.locator('#board .node .cluster').count(), 0, 'one cluster: no cluster badges');
  assert.equal(await page.locator('#cluster').inputValue(), 'west');
  await page.screenshot({path: path.join(ARTIFACTS, 'dashboard-cluster-west.png')});

  // And back to all of them.
  await Promise.all([page.waitForURL(/cluster=all/, {timeout: TIMEOUT}), page.selectOption('#cluster', 'all')]);
  await support.waitForBlocks(page, east.length + west.length + 1, TIMEOUT);
});
