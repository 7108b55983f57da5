// kubefan dashboard: pods on nodes, live. A module script with no build
// step, compiled into the kubefan binary, and the first user of kubefan's
// client library (clients/js, served at /lib/kubefan.js), which does all
// of the protocol:
// - one connection for every tab of the browser (a SharedWorker holding
//   one multiplexed /ws socket; a socket per tab where SharedWorker is
//   missing), so any number of tabs load over plain HTTP/1.1;
// - `fields=` projections, so it downloads only what it draws;
// - snapshots applied at their end marker, with the previous picture kept
//   on screen until then (the first one, after a RESET, after a new
//   filter); deltas as they come;
// - after a dropped connection, a resume from the last resourceVersion
//   (this replica or another), so nothing is redrawn from scratch;
// - refusals (401, 403, a 400 for a bad selector) and ERROR events (token
//   expired, gateway restarting), shown here with the gateway's message;
//   a refused pod watch leaves its last picture dimmed, its counts "—",
//   until a request is accepted again;
// - a caller who may read pods but not nodes (a team member with `view`
//   in their namespaces): the nodes the visible pods name are the board's
//   columns, and a quiet note says node details need read access;
// - signing in (`--auth oidc`): a "Sign in" button where a token is asked
//   for, who is signed in, and the session refreshed while the page is
//   open, so its streams outlive the id-token.
// Everything shown is set with textContent or attributes: no data is ever
// parsed as HTML.
import {connect, keyOf, watch} from './lib/kubefan.js';

const params = new URLSearchParams(location.search);
// A token in the URL (`?access_token=`, as the README opens the page) is
// traded at once for an HttpOnly session cookie (POST /session) and taken
// out of the address bar, so it does not stay in the browser's history or
// reach access logs and Referer headers with later requests; the streams
// then authenticate with the cookie, in every tab. Only if the trade fails
// is the token kept, in memory, for the streams to report why.
const token = await tradeForCookie(params.get('access_token') || '');

// Who is signed in (GET /session): whether this gateway offers sign-in,
// and the session's user and expiry when there is one.
const account = await fetch('session', {credentials: 'same-origin'})
  .then((r) => (r.ok ? r.json() : {}))
  .catch(() => ({}));

async function tradeForCookie(t) {
  if (!t) return '';
  const url = new URL(location.href);
  url.searchParams.delete('access_token');
  history.replaceState(null, '', url);
  try {
    const r = await fetch('session', {method: 'POST', headers: {Authorization: 'Bearer ' + t}, credentials: 'same-origin'});
    if (r.ok) return '';
  } catch {
    // The streams will say what is wrong.
  }
  return t;
}
// ---- clusters --------------------------------------------------------------

// A gateway serving several clusters (`--cluster`) serves this page at
// `/clusters/NAME/` too, where every relative URL (this library, the
// streams, the session) is that cluster's. At the gateway's root,
// `?cluster=all` shows every cluster the caller may see at once (as does
// the root of a gateway with no default cluster), nodes grouped by
// cluster; the picker moves between them.
const under = location.pathname.match(/^(.*\/)clusters\/([a-z0-9]([-a-z0-9]*[a-z0-9])?)\/$/);
const root = under ? under[1] : location.pathname.replace(/[^/]*$/, '');
const here = under ? under[2] : null;
const clusters = await fetch(root + 'clusters', {
  credentials: 'same-origin',
  headers: token ? {Authorization: 'Bearer ' + token} : {},
})
  .then((r) => (r.ok ? r.json() : {clusters: []}))
  .then((d) => d.clusters || [])
  .catch(() => []);
const all = !here && clusters.length > 0 && (params.get('cluster') === 'all' || !clusters.some((c) => c.default));
const clusterNames = clusters.map((c) => c.name);

const filters = {
  namespace: params.get('namespace') || '',
  selector: params.get('labelSelector') || '',
};
const PHASES = ['Running', 'Pending', 'Succeeded', 'Failed', 'Unknown'];

const $ = (id) => document.getElementById(id);
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function phaseOf(pod) {
  return PHASES.includes(pod.phase) ? pod.phase : 'Unknown';
}

// ---- state ---------------------------------------------------------------

const pods = new Map(); // key -> {key, ns, name, node, phase, labels}
const nodes = new Set(); // node names
const streamNamespaces = new Set(); // from the namespaces watch, when allowed
// The fallback for a caller who may not list namespaces: the namespaces
// seen on pods, never forgotten while the page is open and kept in this
// tab across the reloads the page does (the cluster picker, a pasted
// token, signing in), so that a refused stream (a namespace the caller
// may not see) never takes the caller's own namespaces off the picker.
// Keyed by user and view: another user signing in here starts afresh.
const seenKey = 'kubefan.namespaces ' + JSON.stringify([account.user || '', location.pathname, all]);
const seenNamespaces = new Set(readSeen());
function readSeen() {
  try {
    const list = JSON.parse(sessionStorage.getItem(seenKey) || '[]');
    return Array.isArray(list) ? list.filter((ns) => typeof ns === 'string') : [];
  } catch {
    return []; // storage disabled or not ours: this page's life only
  }
}
function see(ns) {
  if (!ns || seenNamespaces.has(ns)) return;
  seenNamespaces.add(ns);
  try {
    sessionStorage.setItem(seenKey, JSON.stringify([...seenNamespaces]));
  } catch {
    // Full or disabled: kept for this page's life all the same.
  }
}
const dirtyColumns = new Set(); // node names ('' = unscheduled) to redraw
let allDirty = true;
let lastChange = null;

// In the all-clusters view, pods and nodes are keyed `cluster/...`, so
// that each cluster's nodes are columns of their own, side by side.
const inCluster = (cluster, name) => (all && cluster ? cluster + '/' + name : name);
function podOf(obj, cluster) {
  const m = obj.metadata || {};
  const node = (obj.spec && obj.spec.nodeName) || '';
  return {
    key: inCluster(cluster, keyOf(obj)),
    cluster: all ? cluster : here,
    ns: m.namespace || '',
    name: m.name || '',
    node: node && inCluster(cluster, node),
    phase: (obj.status && obj.status.phase) || 'Unknown',
    labels: m.labels || {},
  };
}
function setPod(obj, cluster) {
  const p = podOf(obj, cluster);
  const old = pods.get(p.key);
  if (old) dirtyColumns.add(old.node);
  dirtyColumns.add(p.node);
  pods.set(p.key, p);
  see(p.ns);
  if (podWatch.state === 'live') lastChange = new Date();
  changed();
}
function removePod(obj, cluster) {
  const key = inCluster(cluster, keyOf(obj));
  const old = pods.get(key);
  if (old) dirtyColumns.add(old.node);
  pods.delete(key);
  if (podWatch.state === 'live') lastChange = new Date();
  changed();
}

// ---- watches -------------------------------------------------------------

// One client for the page's watches; its socket is shared with every
// other tab of this browser. In the all-clusters view it is the gateway's
// root, and each watch there is one merged subscription of every cluster
// (`watch(resource, {clusters, client})`): still one socket.
const kubefan = connect(Object.assign(all ? {base: new URL(root, location.href).href} : {}, token ? {token} : {}));
function watchOf(resource, options) {
  if (!all) return kubefan.watch(resource, options);
  return watch(resource, Object.assign({client: kubefan, clusters: clusterNames}, options));
}
function podOptions() {
  return {
    fields: 'spec.nodeName,status.phase,metadata.labels',
    namespace: filters.namespace,
    labelSelector: filters.selector,
  };
}
const podWatch = watchOf('pods', podOptions());
const nodeWatch = watchOf('nodes', {fields: 'metadata.name'});
// Only to fill the namespace picker; when not allowed (or across
// clusters), the namespaces seen on pods are offered instead.
const namespaceWatch = all ? null : kubefan.watch('namespaces', {fields: 'metadata.name'});
const shown = [podWatch, nodeWatch];

// Nodes the caller may not read (403): most team members may read pods in
// their own namespaces and nothing cluster-wide, and the board is still
// theirs. For each cluster whose nodes are refused, the nodes its visible
// pods name are drawn as its nodes, the refused watch is left out of the
// connection state and the banner, and a note says what reading nodes
// would add. A cluster stays "refused" until its nodes watch is live
// again, so a retry that is refused again changes nothing on screen.
const nodeParts = all ? [...nodeWatch.parts.values()] : [nodeWatch];
const nodesRefused = new Map(); // part of nodeWatch -> the gateway's Status
let nodesRefusals = 0;
for (const part of nodeParts) {
  part.on('error', (status) => {
    if (!status || status.code !== 403) return;
    nodesRefused.set(part, status);
    nodesRefusals += 1;
    nodesChanged();
  });
  part.on('state', (state) => {
    if (state === 'live' && nodesRefused.delete(part)) nodesChanged();
  });
}
function nodesChanged() {
  allDirty = true;
  showConnection();
  showBanner();
  changed();
}
const clusterOfNode = (name) => (all ? name.slice(0, name.indexOf('/')) : null);
// Whether the columns of `name`'s cluster come from its pods.
function nodesFromPods(name) {
  if (!nodesRefused.size) return false;
  if (!all) return true;
  const part = nodeWatch.parts.get(clusterOfNode(name));
  return Boolean(part && nodesRefused.has(part));
}
// Refused nodes are asked for again when something may have changed what
// the caller may see: a new filter, a refreshed session (new groups).
function retryRefusedNodes() {
  for (const part of nodesRefused.keys()) if (part.state === 'error') part.retry();
}

// Whether the board shows what the pod watch asks for. A refused watch (a
// bad selector, a namespace the caller may not see) has stopped: its last
// picture stays, dimmed, its counts shown as "—", beside the gateway's
// message, until a stream is accepted again.
let podsCurrent = true;
podWatch.on('state', (state) => {
  const current = state === 'error' ? false : state === 'live' || state === 'partial' ? true : podsCurrent;
  if (current === podsCurrent) return;
  podsCurrent = current;
  allDirty = true;
});

// A Watch's events carry no cluster; a ClustersWatch's carry it last.
podWatch.on('added', (o, cluster) => setPod(o, cluster));
podWatch.on('modified', (o, prev, cluster) => setPod(o, cluster));
podWatch.on('deleted', (o, prev, cluster) => removePod(o, cluster));
nodeWatch.on('added', (o, cluster) => nodes.add(inCluster(cluster, o.metadata.name)));
nodeWatch.on('deleted', (o, prev, cluster) => nodes.delete(inCluster(cluster, o.metadata.name)));
if (namespaceWatch) {
  namespaceWatch.on('added', (o) => streamNamespaces.add(o.metadata.name));
  namespaceWatch.on('deleted', (o) => streamNamespaces.delete(o.metadata.name));
}
nodeWatch.on('added', () => (allDirty = true));
nodeWatch.on('deleted', () => (allDirty = true));
for (const w of [podWatch, nodeWatch, namespaceWatch].filter(Boolean)) {
  w.on('synced', changed);
  w.on('state', () => {
    showConnection();
    showBanner();
    changed();
  });
  w.on('error', showBanner);
}
kubefan.on('state', showConnection);

// ---- the signed-in session ------------------------------------------------

// A session is refreshed at 60% of what is left of its id-token's life
// (the gateway renews it in the second half, and tells what is left), by
// one tab at a time (a Web Lock), so tabs of one browser never spend the
// same refresh token twice. A stream refused with 401 while signed in
// refreshes first, then picks up where it stopped.
let refreshTimer = null;
function scheduleRefresh(seconds) {
  clearTimeout(refreshTimer);
  if (!account.signedIn || !account.refreshable) return;
  refreshTimer = setTimeout(refreshSession, Math.max(1000, seconds * 600));
}
async function refreshSession() {
  const once = async () => {
    try {
      const r = await fetch('session/refresh', {method: 'POST', credentials: 'same-origin'});
      if (r.ok) {
        const s = await r.json();
        account.expiresInSeconds = s.expiresInSeconds;
        scheduleRefresh(s.expiresInSeconds);
        // The socket may be on another replica than this refresh: its
        // streams of this session run on past the old id-token.
        kubefan.renewSession(s.renewal);
        retryRefusedNodes();
        return true;
      }
      if (r.status === 401) {
        account.signedIn = false;
        showAccount();
        return false;
      }
    } catch {
      // The gateway is unreachable: try again soon.
    }
    scheduleRefresh(5);
    return false;
  };
  const locks = navigator.locks;
  return locks ? locks.request('kubefan-session-refresh', once) : once();
}
let recovering = null;
function recoverSession() {
  if (!account.signedIn || recovering) return;
  recovering = refreshSession().then((ok) => {
    recovering = null;
    if (ok) for (const w of shown) if (w.state === 'error') w.retry();
  });
}
for (const w of [podWatch, nodeWatch]) {
  w.on('state', (state) => {
    if (state === 'error' && w.error && w.error.code === 401) recoverSession();
  });
}
function showAccount() {
  $('account').hidden = !account.signedIn;
  $('account-name').textContent = account.user || '';
  const here = location.pathname.replace(/[^/]*$/, '');
  $('sign-in').href = here + 'login?then=' + encodeURIComponent(location.pathname + location.search);
  $('sign-out').href = here + 'logout';
}
showAccount();
scheduleRefresh(account.expiresInSeconds || 0);

// ---- connection state and messages ---------------------------------------

const ORDER = ['error', 'reset', 'reconnecting', 'connecting', 'syncing', 'partial', 'live'];
// The watches the badge and the banner follow: nodes refused are not one.
const followed = () => [podWatch, ...nodeParts.filter((p) => !nodesRefused.has(p))];
// The nodes watch's state over the parts followed, as ClustersWatch puts
// it (null when every part is refused).
function nodesState() {
  const states = nodeParts.filter((p) => !nodesRefused.has(p)).map((p) => p.state);
  if (!states.length) return null;
  if (states.every((s) => s === states[0])) return states[0];
  return states.includes('live') ? 'partial' : states.find((s) => s !== 'closed') || 'closed';
}
function showConnection() {
  const nodesNow = nodesState();
  let state = podWatch.state;
  if (nodesNow && ORDER.indexOf(nodesNow) < ORDER.indexOf(state)) state = nodesNow;
  const conn = $('conn');
  conn.dataset.state = state;
  $('conn-text').textContent = state;
  const shared = Boolean(kubefan.shared);
  const how = (shared ? 'one connection shared by this browser\'s tabs' : 'a connection of this tab') + (all ? ', for every cluster' : '');
  const nodesSaid = nodesNow ? nodesNow + (nodesRefused.size ? ' (some refused)' : '') : 'not readable (403)';
  conn.title = 'pods: ' + podWatch.state + ', nodes: ' + nodesSaid + ' · ' + how;
  // For whoever inspects the page (and its tests): how the pod watch got
  // its state, whether the connection is the shared one, and how often
  // the nodes watch was refused.
  conn.dataset.snapshots = String(podWatch.snapshots);
  conn.dataset.resets = String(podWatch.resets);
  conn.dataset.shared = String(shared);
  conn.dataset.nodesRefusals = String(nodesRefusals);
}

// What to tell about a watch's last error, or null.
function messageOf(w) {
  const s = w.error;
  if (!s) return null;
  const why = s.message || s.reason || 'error';
  if (s.code === 401) {
    // Sign-in cannot work now (GET /session says why): say so, and
    // whether waiting helps, rather than offer a button that cannot.
    const issuer = account.issuer;
    if (account.signIn && issuer && !issuer.ready) {
      return issuer.waitingHelps
        ? {level: 'warn', text: 'Sign-in is not available yet: ' + issuer.reason + '. kubefan keeps trying; reload in a minute, or paste a token:', token: true}
        : {level: 'error', text: 'Sign-in is not available: ' + issuer.reason + '. Waiting will not help: ' + issuer.fix + '. Or paste a token:', token: true};
    }
    if (account.signIn) {
      return w.synced
        ? {level: 'error', text: 'You are no longer signed in: ' + why + '.', token: true, signIn: true}
        : {level: 'error', text: /^not signed in/.test(why) ? 'Not signed in (401). Sign in, or paste a token:' : 'Not signed in (401): ' + why + '. Sign in, or paste a token:', token: true, signIn: true};
    }
    return w.synced
      ? {level: 'error', text: 'Your token is no longer accepted: ' + why + '.', token: true}
      : {level: 'error', text: 'Not signed in (401): ' + why + '. Paste a token (or open this page with ?access_token=TOKEN):', token: true};
  }
  if (s.code === 403) return {level: 'error', text: 'Not allowed to see ' + w.resource + ' (403): ' + why, retry: true};
  if (s.code === 400) return {level: 'error', text: 'The gateway refused the request (400): ' + why};
  if (s.code === 503 && w.state === 'reconnecting') return {level: 'warn', text: 'The gateway is restarting: ' + why + '. Reconnecting…'};
  if (w.state === 'reconnecting') return {level: 'warn', text: w.resource + ': ' + s.code + ' ' + why + '. Retrying…'};
  return {level: 'error', text: w.resource + ': ' + s.code + ' ' + (s.reason || 'Error') + ': ' + why, retry: true};
}

function showBanner() {
  const m = followed().map(messageOf).find(Boolean);
  const banner = $('banner');
  banner.hidden = !m;
  if (!m) return;
  banner.dataset.level = m.level;
  $('banner-text').textContent = m.text;
  $('token-form').hidden = !m.token;
  $('sign-in').hidden = !m.signIn;
  $('banner-retry').hidden = !m.retry;
}

// ---- drawing -------------------------------------------------------------

const podEls = new Map(); // key -> element
const columns = new Map(); // node name -> {root, count, bar, pods}
let scheduled = false;

function changed() {
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(render);
}

function podEl(p) {
  let e = podEls.get(p.key);
  if (!e) {
    e = el('div');
    e.dataset.pod = p.key;
    podEls.set(p.key, e);
  }
  const phase = phaseOf(p);
  const cls = 'pod phase-' + phase.toLowerCase();
  if (e.className !== cls) e.className = cls;
  const title = p.key + ' · ' + p.phase;
  if (e.title !== title) e.title = title;
  return e;
}

function column(name, known) {
  let c = columns.get(name);
  if (!c) {
    const root = el('section', 'node');
    root.dataset.node = name;
    const h = el('h2');
    const slash = all ? name.indexOf('/') : -1;
    if (slash >= 0) {
      // All clusters: each node under its cluster's name.
      root.dataset.cluster = name.slice(0, slash);
      h.append(el('span', 'cluster', name.slice(0, slash)));
    }
    h.append(el('span', 'name', name.slice(slash + 1)), el('span', 'count', '0'));
    const bar = el('div', 'bar');
    const list = el('div', 'pods');
    list.dataset.node = name;
    root.append(h, bar, list);
    c = {root, count: h.lastChild, bar, pods: list};
    columns.set(name, c);
  }
  c.root.classList.toggle('unknown-node', !known);
  c.root.title = known ? '' : 'not (or no longer) a node the gateway knows';
  return c;
}

function drawBar(bar, counts, total) {
  const parts = [];
  for (const phase of PHASES) {
    if (!counts[phase]) continue;
    const s = el('span', 'phase-' + phase.toLowerCase());
    s.style.width = (100 * counts[phase]) / total + '%';
    parts.push(s);
  }
  bar.replaceChildren(...parts);
}

function render() {
  scheduled = false;
  const byNode = new Map();
  const phaseTotals = {};
  for (const p of pods.values()) {
    if (!byNode.has(p.node)) byNode.set(p.node, []);
    byNode.get(p.node).push(p);
    phaseTotals[phaseOf(p)] = (phaseTotals[phaseOf(p)] || 0) + 1;
  }
  for (const key of podEls.keys()) if (!pods.has(key)) podEls.delete(key);
  const byName = (a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0);

  // Node columns: every node, plus any node a pod names (an unknown one,
  // or, where nodes are refused, the only nodes there are to draw).
  const names = new Set();
  for (const n of nodes) if (!nodesFromPods(n)) names.add(n);
  for (const n of byNode.keys()) if (n) names.add(n);
  const order = [...names].sort();
  for (const name of [...columns.keys()]) {
    if (!names.has(name)) {
      columns.get(name).root.remove();
      columns.delete(name);
    }
  }
  const board = $('board');
  const roots = [];
  let nodeCount = 0;
  for (const name of order) {
    const known = nodes.has(name) || nodesFromPods(name);
    if (known) nodeCount += 1;
    const c = column(name, known);
    roots.push(c.root);
    if (!allDirty && !dirtyColumns.has(name)) continue;
    const list = (byNode.get(name) || []).sort(byName);
    const counts = {};
    for (const p of list) counts[phaseOf(p)] = (counts[phaseOf(p)] || 0) + 1;
    c.count.textContent = countText(list.length);
    drawBar(c.bar, counts, list.length);
    c.pods.replaceChildren(...list.map(podEl));
    if (!list.length) c.pods.append(el('span', 'empty', 'no pods'));
  }
  if (roots.length !== board.children.length || roots.some((r, i) => board.children[i] !== r)) {
    board.replaceChildren(...roots);
  }
  if (!order.length) board.replaceChildren(el('p', 'empty', emptyBoard()));

  if (allDirty || dirtyColumns.has('')) {
    const list = (byNode.get('') || []).sort(byName);
    $('unscheduled-count').textContent = countText(list.length);
    const lane = document.querySelector('#unscheduled .pods');
    lane.replaceChildren(...list.map(podEl));
    if (!list.length) lane.append(el('span', 'empty', 'every pod is scheduled'));
  }
  allDirty = false;
  dirtyColumns.clear();

  $('total-pods').textContent = countText(pods.size);
  // Nodes drawn from pods are as current as the pods; the nodes watch's
  // are as current as that watch, whatever the pod watch does.
  const nodesStopped = nodesRefused.size ? !podsCurrent : nodeWatch.state === 'error';
  $('total-nodes').textContent = nodesStopped ? '—' : String(nodeCount);
  const chips = PHASES.map((phase) => {
    const li = el('li');
    li.dataset.phase = phase;
    li.append(el('span', 'swatch phase-' + phase.toLowerCase()), el('span', '', phase), el('span', 'count', countText(phaseTotals[phase] || 0)));
    return li;
  });
  $('phases').replaceChildren(...chips);
  document.body.dataset.current = String(podsCurrent);
  $('not-current').hidden = podsCurrent;
  showNodesNote();

  drawNamespaces();
  $('position').textContent =
    'resourceVersion ' + (podWatch.resourceVersion || '–') +
    (lastChange ? ' · last change ' + lastChange.toLocaleTimeString() : '');
}

// A count as of the pod watch's picture: "—" while that picture is not
// what the watch asks for.
function countText(n) {
  return podsCurrent ? String(n) : '—';
}

function emptyBoard() {
  if (nodeParts.every((p) => nodesRefused.has(p))) {
    return podsCurrent && podWatch.synced ? 'No visible pod is on a node.' : 'No pods to show.';
  }
  return nodeWatch.synced ? 'No nodes.' : 'Waiting for nodes…';
}

// Quiet, not an error: the board works without nodes; this says what
// reading them would add, and the gateway's words are in its tooltip.
function showNodesNote() {
  const note = $('nodes-note');
  note.hidden = !nodesRefused.size;
  if (!nodesRefused.size) return;
  const where = all ? ' in ' + nodeParts.filter((p) => nodesRefused.has(p)).map((p) => p.cluster).join(', ') : '';
  const text = 'Nodes shown are those your pods run on: node details need read access to nodes' + where + '.';
  if (note.textContent !== text) note.textContent = text;
  note.title = [...nodesRefused.values()].map((s) => s.message || s.reason || '').filter(Boolean).join('\n');
}

let namespaceOptions = '';
function drawNamespaces() {
  const source = namespaceWatch && namespaceWatch.synced && namespaceWatch.state !== 'error' ? streamNamespaces : seenNamespaces;
  const list = [...new Set([...source, filters.namespace].filter(Boolean))].sort();
  const sig = list.join('\n');
  if (sig === namespaceOptions) return;
  namespaceOptions = sig;
  const select = $('namespace');
  const all = el('option', '', 'All namespaces');
  all.value = '';
  select.replaceChildren(all, ...list.map((ns) => {
    const o = el('option', '', ns);
    o.value = ns;
    return o;
  }));
  select.value = filters.namespace;
}

// ---- details on hover ----------------------------------------------------

function showDetail(e) {
  const target = e.target.closest ? e.target.closest('[data-pod]') : null;
  if (!target) return;
  const p = pods.get(target.dataset.pod);
  if (!p) return;
  const d = $('detail');
  const labels = Object.entries(p.labels).map(([k, v]) => k + '=' + v).join(', ');
  d.replaceChildren(
    el('b', '', p.name), ' in ', el('b', '', p.ns || '(cluster)'),
    p.cluster ? ' of cluster ' : '', p.cluster ? el('b', '', p.cluster) : '',
    ' on ', el('b', '', p.node || 'no node'), ' · ', el('b', '', p.phase),
    labels ? ' · ' + labels : '',
  );
}
document.addEventListener('mouseover', showDetail);

// ---- filters -------------------------------------------------------------

function applyFilters() {
  const url = new URL(location.href);
  for (const [k, v] of [['namespace', filters.namespace], ['labelSelector', filters.selector]]) {
    if (v) url.searchParams.set(k, v);
    else url.searchParams.delete(k);
  }
  history.replaceState(null, '', url);
  podWatch.update(podOptions());
  retryRefusedNodes();
}
$('selector').value = filters.selector;
$('filters').addEventListener('submit', (e) => {
  e.preventDefault();
  filters.selector = $('selector').value.trim();
  applyFilters();
});
$('namespace').addEventListener('change', () => {
  filters.namespace = $('namespace').value;
  filters.selector = $('selector').value.trim();
  applyFilters();
});
$('token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const t = $('token').value.trim();
  if (!t) return;
  // Reloaded with the token in the URL, the page trades it for the cookie
  // and takes it out again before anything else.
  const url = new URL(location.href);
  url.searchParams.set('access_token', t);
  location.replace(url);
});
$('banner-retry').addEventListener('click', () => {
  for (const w of shown) if (w.state === 'error') w.retry();
});

function drawClusters() {
  if (!clusters.length) return;
  $('cluster-pick').hidden = false;
  const select = $('cluster');
  const every = el('option', '', 'All clusters');
  every.value = 'all';
  select.replaceChildren(every, ...clusters.map((c) => {
    const o = el('option', '', c.name + (c.ready ? '' : ' (not ready)'));
    o.value = c.name;
    return o;
  }));
  select.value = all ? 'all' : here || (clusters.find((c) => c.default) || {}).name || 'all';
}
$('cluster').addEventListener('change', () => {
  const pick = $('cluster').value;
  const url = new URL(pick === 'all' ? root : root + 'clusters/' + encodeURIComponent(pick) + '/', location.href);
  for (const k of ['namespace', 'labelSelector']) if (params.get(k)) url.searchParams.set(k, params.get(k));
  if (pick === 'all') url.searchParams.set('cluster', 'all');
  location.assign(url);
});

// ---- start ---------------------------------------------------------------

showConnection();
drawNamespaces();
drawClusters();
changed();
