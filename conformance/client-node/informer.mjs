// @kubernetes/client-node's makeInformer pointed at kubefan: informers on
// pods, deployments and one custom resource, as the library's README runs
// them (restart after an error).
//
// Prints its caches to stdout, one JSON line each time they change (at most
// every 50 ms): each informer's own cache (informer.list()) as key ->
// resourceVersion, so that tests/gateway/real_clients.rs can compare them with
// the simulated API server's state. Exits when stdin closes (its driver is
// gone) or on SIGTERM/SIGINT.
//
// Usage: node informer.mjs KUBECONFIG [group/version/plural]

import * as k8s from '@kubernetes/client-node';

const [kubeconfigPath, crd = 'example.com/v1/widgets'] = process.argv.slice(2);
if (!kubeconfigPath) {
  console.error('usage: node informer.mjs KUBECONFIG [group/version/plural]');
  process.exit(2);
}
const [group, version, plural] = crd.split('/');
if (!plural) {
  console.error(`the custom resource ${crd} is not group/version/plural`);
  process.exit(2);
}

const kc = new k8s.KubeConfig();
kc.loadFromFile(kubeconfigPath);
const core = kc.makeApiClient(k8s.CoreV1Api);
const apps = kc.makeApiClient(k8s.AppsV1Api);
const custom = kc.makeApiClient(k8s.CustomObjectsApi);

// Each list's resourceVersion and size goes to stderr, which the test
// prints when the client fails to follow: the trail says whether a missed
// change was before the list (so the list should have held it) or after
// (so the watch from that resourceVersion should have brought it).
function traced(name, listFn) {
  return async () => {
    const list = await listFn();
    console.error(`${name}: listed ${list.items?.length ?? 0} at ${list.metadata?.resourceVersion}`);
    return list;
  };
}

const informers = {
  pods: k8s.makeInformer(
    kc,
    '/api/v1/pods',
    traced('pods', () => core.listPodForAllNamespaces()),
  ),
  'deployments.apps': k8s.makeInformer(
    kc,
    '/apis/apps/v1/deployments',
    traced('deployments.apps', () => apps.listDeploymentForAllNamespaces()),
  ),
  [`${plural}.${group}`]: k8s.makeInformer(
    kc,
    `/apis/${group}/${version}/${plural}`,
    traced(`${plural}.${group}`, () => custom.listClusterCustomObject({group, version, plural})),
  ),
};

let dirty = true;
let errors = 0;
let stopping = false;
// After an error the informer stops; the library leaves restarting to its
// user. Its README waits 5 s; a test has no time to lose.
const RESTART_MS = 200;
for (const [name, informer] of Object.entries(informers)) {
  informer.on('change', () => {
    dirty = true;
  });
  informer.on('connect', () => {
    console.error(`${name}: watching from ${informer.latestResourceVersion() || '(a new list)'}`);
  });
  informer.on('error', (err) => {
    // Stopping aborts the watches, which reports an error too.
    if (stopping) return;
    errors += 1;
    dirty = true;
    console.error(`${name}: ${err?.message ?? err}; restarting in ${RESTART_MS} ms`);
    setTimeout(() => informer.start().catch(() => {}), RESTART_MS);
  });
}

function digest(informer) {
  const out = {};
  for (const obj of informer.list()) {
    const m = obj.metadata ?? {};
    out[m.namespace ? `${m.namespace}/${m.name}` : m.name] = m.resourceVersion;
  }
  return out;
}

const tick = setInterval(() => {
  if (!dirty) return;
  dirty = false;
  const caches = {};
  for (const [name, informer] of Object.entries(informers)) caches[name] = digest(informer);
  process.stdout.write(JSON.stringify({errors, caches}) + '\n');
}, 50);

async function stop() {
  if (stopping) return;
  stopping = true;
  clearInterval(tick);
  await Promise.all(Object.values(informers).map((i) => i.stop()));
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
// The driver holds stdin open; its end means the driver is gone.
process.stdin.on('end', stop);
process.stdin.on('error', stop);
process.stdin.resume();
process.stdout.on('error', stop);

for (const informer of Object.values(informers)) {
  informer.start().catch((err) => console.error(`start: ${err?.message ?? err}`));
}
