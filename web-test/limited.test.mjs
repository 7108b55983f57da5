// The dashboard for a team member: alice signs in (the test OpenID
// provider, as in signin.test.mjs) with a pod-reader Role in one namespace
// and nothing cluster-wide, as most members of a team have. Her board is
// live with no error: the nodes her pods run on are its columns and its
// count, and a quiet note says node details need read access to nodes,
// also after the nodes watch is asked again and refused again. A namespace
// she may not see is refused with the gateway's message, the board marked
// not current, and her own namespace is still offered to go back to.
// Granted nodes later, the board shows every node.
//
//   cargo build && (cd web-test && npm ci && node --test limited.test.mjs)

import {after, before, test} from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import {signIn, startSignInGateway} from './signin.mjs';
import {ARTIFACTS, Cluster, eventually, launch, waitForBlocks, waitForState} from './support.mjs';

const PODS = 40;
const NODES = 6;
// The session is refreshed every ~5 s, and with it the refused nodes
// watch is asked again.
const ID_TOKEN_TTL = 8;
const cluster = new Cluster({pods: PODS, nodes: NODES});
let base;
let op;
let context;
let mine; // alice's namespace: the one whose pods are on the fewest nodes
let theirs; // a namespace she may not see
let myPods;
let myNodes;

before(async () => {
  await cluster.startSim();
  const pods = await cluster.listPods();
  const byNamespace = new Map();
  for (const p of pods) {
    const ns = p.metadata.namespace;
    if (!byNamespace.has(ns)) byNamespace.set(ns, []);
    byNamespace.get(ns).push(p);
  }
  const nodesOf = (list) => new Set(list.map((p) => p.spec.nodeName).filter(Boolean));
  [mine] = [...byNamespace.keys()].sort((a, b) => nodesOf(byNamespace.get(a)).size - nodesOf(byNamespace.get(b)).size);
  theirs = [...byNamespace.keys()].find((ns) => ns !== mine);
  myPods = byNamespace.get(mine).length;
  myNodes = [...nodesOf(byNamespace.get(mine))].sort();
  // Otherwise "the nodes her pods are on" could not be told from "every node".
  assert.ok(myNodes.length > 0 && myNodes.length < NODES, `${mine}'s pods are on ${myNodes.length} of ${NODES} nodes`);
  assert.ok(theirs, 'the seed gives more than one namespace');
  await cluster.grantPods(mine, 'oidc:team-a');
  ({base, op} = await startSignInGateway(cluster, {idTokenTtl: ID_TOKEN_TTL}));
  context = await launch(path.join(cluster.tmp, 'profile'), {trustAnyCertificate: true});
  fs.mkdirSync(ARTIFACTS, {recursive: true});
});

after(async () => {
  if (context) await context.close().catch(() => {});
  if (op) await op.stop().catch(() => {});
  await cluster.stopAll();
});

const columns = (page) => page.$$eval('#board section.node', (all) => all.map((s) => s.dataset.node).sort());
const options = (page) => page.$$eval('#namespace option', (all) => all.map((o) => o.value));
const refusals = async (page) => Number(await page.locator('#conn').getAttribute('data-nodes-refusals'));

test('a user who may read pods in one namespace and no nodes sees a live board of the nodes her pods are on', async () => {
  const page = context.pages()[0] || (await context.newPage());
  await page.goto(`${base}/`);
  await signIn(page, op, base, 'alice');
  await waitForState(page, 'live', 10000);
  await waitForBlocks(page, myPods, 10000);
  await page.locator('#nodes-note:not([hidden])').waitFor({timeout: 10000});

  // Nothing in an error state: the badge is live, no banner.
  assert.equal(await page.locator('#conn').getAttribute('data-state'), 'live');
  assert.ok(await page.locator('#banner').isHidden(), `banner: ${await page.locator('#banner-text').textContent()}`);
  assert.equal(await page.locator('[data-state="error"], [data-level="error"]:not([hidden])').count(), 0);
  // The nodes were refused, and her pods' nodes are the columns, drawn
  // as nodes (not as nodes the gateway does not know), and counted.
  assert.ok((await refusals(page)) >= 1, 'the nodes watch was refused');
  assert.deepEqual(await columns(page), myNodes);
  assert.equal(await page.locator('#board section.node.unknown-node').count(), 0);
  assert.equal(await page.locator('#total-pods').textContent(), String(myPods));
  assert.equal(await page.locator('#total-nodes').textContent(), String(myNodes.length));
  assert.match(await page.locator('#nodes-note').textContent(), /node details need read access to nodes/);
  assert.ok(await page.locator('#not-current').isHidden());
  await page.screenshot({path: path.join(ARTIFACTS, 'limited-live.png'), fullPage: true});

  // Asked again (the session refreshed) and refused again: nothing moves.
  await page.evaluate(() => {
    window.connStates = [];
    new MutationObserver(() => window.connStates.push(document.getElementById('conn').dataset.state))
      .observe(document.getElementById('conn'), {attributes: true, attributeFilter: ['data-state']});
  });
  const before = await refusals(page);
  await eventually('the nodes watch refused again', 15000, async () => (await refusals(page)) > before);
  assert.deepEqual([...new Set(await page.evaluate(() => window.connStates))].filter((s) => s !== 'live'), []);
  assert.equal(await page.locator('#conn').getAttribute('data-state'), 'live');
  assert.ok(await page.locator('#banner').isHidden());
  assert.ok(await page.locator('#nodes-note').isVisible());
  assert.deepEqual(await columns(page), myNodes);
});

test('a namespace she may not see is refused and marked not current; her own is still offered and live again', async () => {
  const page = context.pages()[0];
  // Opened with ?namespace= (a link, or a typed address): the page
  // reloads, and the namespaces she was shown are still offered.
  await page.goto(`${base}/?namespace=${theirs}`);
  await waitForState(page, 'error', 10000);
  await page.locator('#banner:not([hidden])').waitFor({timeout: 10000});
  assert.equal(await page.locator('#banner').getAttribute('data-level'), 'error');
  const said = await page.locator('#banner-text').textContent();
  assert.match(said, /^Not allowed to see pods \(403\): /);
  assert.ok(said.includes(theirs), said);
  assert.ok(await page.locator('#not-current').isVisible());
  assert.equal(await page.locator('body').getAttribute('data-current'), 'false');
  assert.equal(await page.locator('#total-pods').textContent(), '—');
  assert.equal(await page.locator('#total-nodes').textContent(), '—');
  const offered = await options(page);
  assert.ok(offered.includes(mine), `offered: ${offered}`);
  assert.ok(offered.includes(theirs), `offered: ${offered}`);
  assert.equal(await page.locator('#namespace').inputValue(), theirs);
  await page.screenshot({path: path.join(ARTIFACTS, 'limited-refused.png'), fullPage: true});

  // Back to her own namespace, from the picker.
  await page.selectOption('#namespace', mine);
  await waitForState(page, 'live', 10000);
  await waitForBlocks(page, myPods, 10000);
  await page.locator('#not-current').waitFor({state: 'hidden', timeout: 5000});
  assert.equal(await page.locator('body').getAttribute('data-current'), 'true');
  assert.ok(await page.locator('#banner').isHidden());
  assert.equal(await page.locator('#total-pods').textContent(), String(myPods));
  assert.equal(await page.locator('#total-nodes').textContent(), String(myNodes.length));
  assert.deepEqual(await columns(page), myNodes);
  assert.ok((await options(page)).includes(mine));
  assert.ok(new URL(page.url()).searchParams.get('namespace') === mine, page.url());
  await page.screenshot({path: path.join(ARTIFACTS, 'limited-back.png'), fullPage: true});
});

test('granted nodes later, the board shows every node and the note goes', async () => {
  const page = context.pages()[0];
  await cluster.grantNodes('oidc:team-a', 'team-a-reads-nodes');
  // The next session refresh asks for nodes again.
  await page.locator('#nodes-note').waitFor({state: 'hidden', timeout: 15000});
  await eventually('every node drawn', 5000, async () => (await columns(page)).length === NODES);
  assert.equal(await page.locator('#total-nodes').textContent(), String(NODES));
  assert.equal(await page.locator('#conn').getAttribute('data-state'), 'live');
  assert.ok(await page.locator('#banner').isHidden());
});
