
// kubefan dashboard: pods on nodes, live. Plain browser JavaScript, no
// framework, no build step; compiled into the kubefan binary.
//
// It uses only the public stream protocol (proto/PROTOCOL.md):
// - One EventSource per stream, with a `fields=` projection so it downloads
//   only what it draws.
// - A stream opened without a position begins with a snapshot: ADDED events,
//   then a BOOKMARK annotated `k8s.io/initial-events-end`. The snapshot is
//   collected aside and replaces the state at that marker; until then the
//   previous picture stays on screen.
// - ADDED / MODIFIED / DELETED after it are applied as they come.
// - RESET: a fresh snapshot follows; it is collected aside like the first.
// - A dropped connection: EventSource reconnects by itself and sends
//   Last-Event-ID, so the gateway (this replica or another) resumes with the
//   changes missed, and nothing is redrawn from scratch.
// - ERROR events and refused connections (401, 403, 400 for a bad selector)
//   are shown with the gateway's own message.
// Everything shown is set with textContent or attributes: no data is ever
// parsed as HTML.
'use strict';
(function () {
  const params = new URLSearchParams(location.search);
  const token = params.get('access_token') || '';
  const filters = {
    namespace: params.get('namespace') || '',
    selector: params.get('labelSelector') || '',
  };
  const PHASES = ['Running', 'Pending', 'Succeeded', 'Failed', 'Unknown'];
  const RETRY_MS = 2000;

  const $ = (id) => document.getElementById(id);
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function keyOf(obj) {
    const m = obj.metadata || {};
    return m.namespace ? m.namespace + '/' + m.name : m.name;
  }
  function phaseOf(pod) {
    return PHASES.includes(pod.phase) ? pod.phase : 'Unknown';
  }

  // ---- state ---------------------------------------------------------------

  const pods = new Map(); // key -> {key, ns, name, node, phase, labels}
  const nodes = new Set(); // node names
  const streamNamespaces = new Set(); // from /stream/namespaces, when allowed
  const seenNamespaces = new Set(); // from pods, the fallback
  const dirtyColumns = new Set(); // node names ('' = unscheduled) to redraw
  let allDirty = true;
  let lastChange = null;

  function podOf(obj) {
    const m = obj.metadata || {};
    return {
      key: keyOf(obj),
      ns: m.namespace || '',
      name: m.name || '',
      node: (obj.spec && obj.spec.nodeName) || '',
      phase: (obj.status && obj.status.phase) || 'Unknown',
      labels: m.labels || {},
    };
  }
  function setPod(p) {
    const old = pods.get(p.key);
    if (old) dirtyColumns.add(old.node);
    dirtyColumns.add(p.node);
    pods.set(p.key, p);
    if (p.ns) seenNamespaces.add(p.ns);
  }

  const podSink = {
    replace(objects) {
      pods.clear();
      for (const obj of objects.values()) setPod(podOf(obj));
      allDirty = true;
    },
    apply(type, obj) {
      const key = keyOf(obj);
      if (type === 'DELETED') {
        const old = pods.get(key);
        if (old) dirtyColumns.add(old.node);
        pods.delete(key);
      } else {
        setPod(podOf(obj));
      }
      lastChange = new Date();
    },
  };
  const nodeSink = {
    replace(objects) {
      nodes.clear();
      for (const obj of objects.values()) nodes.add(obj.metadata.name);
      allDirty = true;
    },
    apply(type, obj) {
      if (type === 'DELETED') nodes.delete(obj.metadata.name);
      else nodes.add(obj.metadata.name);
      allDirty = true;
    },
  };
  const namespaceSink = {
    replace(objects) {
      streamNamespaces.clear();
      for (const obj of objects.values()) streamNamespaces.add(obj.metadata.name);
    },
    apply(type, obj) {
      if (type === 'DELETED') streamNamespaces.delete(obj.metadata.name);
      else streamNamespaces.add(obj.metadata.name);
    },
  };

  // ---- streams -------------------------------------------------------------

  function streamUrl(resource, query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v) q.set(k, v);
    if (token) q.set('access_token', token);
    return '/stream/' + resource + '?' + q.toString();
  }

  // One subscription: follows the protocol and keeps its state
  // ('connecting', 'syncing', 'live', 'reconnecting', 'reset', 'error').
  class Stream {
    constructor(resource, sink, options) {
      this.resource = resource;
      this.sink = sink;
      this.quiet = Boolean(options && options.quiet);
      this.query = {};
      this.es = null;
      this.state = 'connecting';
      this.lastId = ''; // what EventSource sends as Last-Event-ID
      this.urlFrom = ''; // `resourceVersion` in the URL, if any
      this.position = ''; // the newest resourceVersion reached
      this.buffer = null; // a snapshot being received, or null
      this.message = null; // {level, text, token, retry}
      this.timer = 0;
      this.snapshots = 0; // snapshots applied (a resume applies none)
      this.resets = 0;
    }

    // Opens the stream: a fresh snapshot, or a resume from `from`.
    open(query, from) {
      if (query) this.query = query;
      this.close();
      const q = Object.assign({}, this.query);
      if (from) q.resourceVersion = from;
      this.lastId = from || '';
      // The URL's position counts on every automatic reconnect that sends
      // no Last-Event-ID.
      this.urlFrom = from || '';
      this.buffer = from ? null : new Map();
      this.url = streamUrl(this.resource, q);
      const es = new EventSource(this.url);
      this.es = es;
      this.setState(from ? 'reconnecting' : 'connecting');
      const on = (type, fn) =>
        es.addEventListener(type, (e) => {
          if (this.es === es) fn(e);
        });
      on('open', () => {
        // With no id to resume from, the gateway starts with a snapshot;
        // with one, it sends what was missed (or a RESET).
        if (!this.lastId && !this.urlFrom) {
          this.buffer = new Map();
          this.setState('syncing');
        } else {
          this.buffer = null;
          this.setState('live');
        }
        this.say(null);
      });
      for (const type of ['ADDED', 'MODIFIED', 'DELETED']) on(type, (e) => this.change(type, e));
      on('BOOKMARK', (e) => this.bookmark(e));
      on('RESET', (e) => this.reset(e));
      on('ERROR', (e) => this.failed(e));
      on('error', () => this.dropped(es));
    }

    close() {
      clearTimeout(this.timer);
      if (this.es) this.es.close();
      this.es = null;
    }

    track(e) {
      this.lastId = e.lastEventId;
      if (e.lastEventId) this.position = e.lastEventId;
    }

    change(type, e) {
      this.track(e);
      const obj = JSON.parse(e.data).object;
      if (this.buffer) {
        if (type === 'ADDED') this.buffer.set(keyOf(obj), obj);
        return;
      }
      this.sink.apply(type, obj);
      changed();
    }

    bookmark(e) {
      this.track(e);
      const obj = JSON.parse(e.data).object;
      const ann = (obj.metadata && obj.metadata.annotations) || {};
      if (ann['k8s.io/initial-events-end'] === 'true' && this.buffer) {
        this.sink.replace(this.buffer);
        this.buffer = null;
        this.snapshots += 1;
        this.setState('live');
      }
      changed();
    }

    reset(e) {
      this.track(e);
      this.buffer = new Map();
      this.resets += 1;
      this.setState('reset');
    }

    failed(e) {
      // The stream ends after an ERROR; EventSource then reconnects with
      // Last-Event-ID by itself.
      let status = {};
      try {
        status = JSON.parse(e.data).object || {};
      } catch (_) {
        // Not JSON: show the code only.
      }
      if (status.code === 503) {
        this.say({level: 'warn', text: 'The gateway is restarting: ' + (status.message || 'reconnecting') + '. Reconnecting…'});
      } else if (status.code === 401) {
        this.say({level: 'error', text: 'Your token is no longer accepted: ' + (status.message || 'unauthorized') + '.', token: true});
      } else {
        this.say({level: 'error', text: this.resource + ': ' + (status.code || '') + ' ' + (status.reason || 'Error') + ': ' + (status.message || '')});
      }
      this.setState('reconnecting');
    }

    dropped(es) {
      if (es.readyState === EventSource.CLOSED) {
        // Refused (an HTTP error rather than a stream): ask why.
        this.close();
        this.probe();
      } else {
        this.setState('reconnecting');
      }
    }

    async probe() {
      const ctl = new AbortController();
      let resp;
      try {
        resp = await fetch(this.url, {signal: ctl.signal, cache: 'no-store', credentials: 'same-origin'});
      } catch (_) {
        // Unreachable: keep trying, resuming where we were.
        this.setState('reconnecting');
        this.retry(RETRY_MS);
        return;
      }
      if (resp.ok) {
        ctl.abort();
        this.retry(0);
        return;
      }
      let status = {};
      try {
        status = await resp.json();
      } catch (_) {
        // A body that is not a Status: the code says enough.
      }
      const why = (status && status.message) || resp.statusText;
      this.setState('error');
      if (resp.status === 401) {
        this.say({level: 'error', text: 'Not signed in (401): ' + why + '. Open this page with ?access_token=TOKEN, or paste a token:', token: true});
      } else if (resp.status === 403) {
        this.say({level: 'error', text: 'Not allowed to see ' + this.resource + ' (403): ' + why, retry: true});
      } else if (resp.status === 400) {
        this.say({level: 'error', text: 'The gateway refused the request (400): ' + why});
      } else if (resp.status === 429 || resp.status >= 500) {
        const after = Number(resp.headers.get('Retry-After')) || 5;
        this.say({level: 'warn', text: this.resource + ': ' + resp.status + ' ' + why + '. Retrying in ' + after + ' s…'});
        this.retry(after * 1000);
      } else {
        this.say({level: 'error', text: this.resource + ': ' + resp.status + ' ' + why, retry: true});
      }
    }

    // Reopens after `ms`, resuming from the last position when there is one.
    retry(ms) {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.open(null, this.lastId), ms);
    }

    setState(state) {
      this.state = state;
      showConnection();
    }

    say(message) {
      this.message = message;
      showBanner();
    }
  }

  const podStream = new Stream('pods', podSink);
  const nodeStream = new Stream('nodes', nodeSink);
  const namespaceStream = new Stream('namespaces', namespaceSink, {quiet: true});
  const shown = [podStream, nodeStream];

  function podQuery() {
    return {
      fields: 'spec.nodeName,status.phase,metadata.labels',
      namespace: filters.namespace,
      labelSelector: filters.selector,
    };
  }

  // ---- connection state and messages ---------------------------------------

  const ORDER = ['error', 'reset', 'reconnecting', 'connecting', 'syncing', 'live'];
  function showConnection() {
    let state = 'live';
    for (const s of shown) if (ORDER.indexOf(s.state) < ORDER.indexOf(state)) state = s.state;
    const conn = $('conn');
    conn.dataset.state = state;
    $('conn-text').textContent = state;
    conn.title = shown.map((s) => s.resource + ': ' + s.state).join(', ');
    // For whoever inspects the page (and its tests): how the pod stream got
    // its state.
    conn.dataset.snapshots = String(podStream.snapshots);
    conn.dataset.resets = String(podStream.resets);
  }

  function showBanner() {
    const m = shown.map((s) => s.message).find(Boolean);
    const banner = $('banner');
    banner.hidden = !m;
    if (!m) return;
    banner.dataset.level = m.level;
    $('banner-text').textContent = m.text;
    $('token-form').hidden = !m.token;
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
      h.append(el('span', 'name', name), el('span', 'count', '0'));
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

    // Node columns: every node, plus any node a pod names that is unknown.
    const names = new Set(nodes);
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
    for (const name of order) {
      const c = column(name, nodes.has(name));
      roots.push(c.root);
      if (!allDirty && !dirtyColumns.has(name)) continue;
      const list = (byNode.get(name) || []).sort(byName);
      const counts = {};
      for (const p of list) counts[phaseOf(p)] = (counts[phaseOf(p)] || 0) + 1;
      c.count.textContent = String(list.length);
      drawBar(c.bar, counts, list.length);
      c.pods.replaceChildren(...list.map(podEl));
      if (!list.length) c.pods.append(el('span', 'empty', 'no pods'));
    }
    if (roots.length !== board.children.length || roots.some((r, i) => board.children[i] !== r)) {
      board.replaceChildren(...roots);
    }
    if (!order.length) board.replaceChildren(el('p', 'empty', nodeStream.state === 'live' ? 'No nodes.' : 'Waiting for nodes…'));

    if (allDirty || dirtyColumns.has('')) {
      const list = (byNode.get('') || []).sort(byName);
      $('unscheduled-count').textContent = String(list.length);
      const lane = document.querySelector('#unscheduled .pods');
      lane.replaceChildren(...list.map(podEl));
      if (!list.length) lane.append(el('span', 'empty', 'every pod is scheduled'));
    }
    allDirty = false;
    dirtyColumns.clear();

    $('total-pods').textContent = String(pods.size);
    $('total-nodes').textContent = String(nodes.size);
    const chips = PHASES.map((phase) => {
      const li = el('li');
      li.dataset.phase = phase;
      li.append(el('span', 'swatch phase-' + phase.toLowerCase()), el('span', '', phase), el('span', 'count', String(phaseTotals[phase] || 0)));
      return li;
    });
    $('phases').replaceChildren(...chips);

    drawNamespaces();
    $('position').textContent =
      'resourceVersion ' + (podStream.position || '–') +
      (lastChange ? ' · last change ' + lastChange.toLocaleTimeString() : '');
  }

  let namespaceOptions = '';
  function drawNamespaces() {
    const source = namespaceStream.state === 'live' ? streamNamespaces : seenNamespaces;
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
    podStream.say(null);
    podStream.open(podQuery());
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
    const url = new URL(location.href);
    url.searchParams.set('access_token', t);
    location.replace(url);
  });
  $('banner-retry').addEventListener('click', () => {
    for (const s of shown) {
      if (s.state === 'error') {
        s.say(null);
        s.open(null, s.lastId);
      }
    }
  });

  // ---- start ---------------------------------------------------------------

  nodeStream.open({fields: 'metadata.name'});
  podStream.open(podQuery());
  // Only to fill the namespace picker; when not allowed, the namespaces
  // seen on pods are offered instead.
  namespaceStream.open({fields: 'metadata.name'});
  drawNamespaces();
  changed();
})();
