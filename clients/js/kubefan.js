// kubefan client: a live store of Kubernetes objects fed by a kubefan
// gateway. Plain ESM, no dependency, no build step; types in kubefan.d.ts.
// The protocol it implements is kubefan's proto/PROTOCOL.md.
//
// Layout (one file, so that a page can import it from the gateway itself):
// - helpers: keyOf, mergePatch (RFC 7386), Emitter, back-off;
// - the store: Store applies a snapshot at its end marker (keeping the
//   previous picture until then), changes as they come, merge patches, a
//   RESET by collecting a fresh snapshot aside; Subscription and `verdict`
//   decide what to do when a stream fails: resume from its position, renew
//   the token on a 401, wait and retry on 429/5xx, stop on 400/403/404.
//   A Watch is a Store with a subscription of its own; a ClustersWatch (at
//   the end) is one merged subscription feeding a Store per cluster;
// - clients, which carry streams and know nothing of the store:
//   SseClient (GET /stream/{resource}, read with fetch), WsClient (one
//   multiplexed /ws socket for every watch), SharedClient (a page's end of a
//   SharedWorker that holds one WsClient for every tab of the browser) and
//   SharedHub (the worker's end).
//
// A client's streams are one-shot: `open(request, sink)` starts one, and it
// ends with `sink.dropped` (the connection went away), `sink.refused` (an
// HTTP error, or a socket refused before it opened) or an ERROR message
// (`ends`: in a merged stream, one naming no cluster). The Watch then
// opens a new one, resuming from its position. Only the WsClient
// reconnects by itself, and only a socket nobody has used yet.
//
// A request is {resource, params, from, cluster?, clusters?}: `cluster`
// names the one cluster of a stream on a client at the gateway's root,
// `clusters` the clusters merged into one stream (then `from` is a
// compound id and each message carries its `cluster`).

/** The annotation on the BOOKMARK that ends a snapshot. */
export const INITIAL_EVENTS_END = 'k8s.io/initial-events-end';

const DEFAULT_IDLE_TIMEOUT_MS = 45000; // kubefan leaves no stream silent for two 15 s keep-alive intervals
const BACKOFF_BASE_MS = 1000;
const BACKOFF_CAP_MS = 10000;
const SOCKET_LINGER_MS = 5000;
// A stream refused with a 401 this soon after it was opened with a renewed
// token is refused for good (the fresh token is refused too); one refused
// later, after running quietly with it, is that token's expiry, renewed
// again. Over /ws nothing says a subscription was accepted (a quiet one
// gets no message), so the time it ran is what tells them apart.
const AUTH_SETTLED_MS = 10000;
const WORKER_READY_MS = 5000;
const TOKEN_ASK_MS = 5000;

// ---- helpers -----------------------------------------------------------------

/** The key a store files an object under: `namespace/name`, or `name`. */
export function keyOf(obj) {
  const m = (obj && obj.metadata) || {};
  return m.namespace ? m.namespace + '/' + m.name : m.name;
}

function isObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * RFC 7386 JSON Merge Patch: `patch` applied to `target`, as a new value
 * (`target` is not modified). `null` in the patch removes a field; arrays
 * and scalars replace.
 */
export function mergePatch(target, patch) {
  if (!isObject(patch)) return patch;
  const out = isObject(target) ? Object.assign({}, target) : {};
  for (const name of Object.keys(patch)) {
    const value = patch[name];
    if (value === null) delete out[name];
    else out[name] = mergePatch(out[name], value);
  }
  return out;
}

/** Structural equality of two JSON values. */
function equal(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  for (const k of ka) if (!Object.prototype.hasOwnProperty.call(b, k) || !equal(a[k], b[k])) return false;
  return true;
}

function reportLater(err) {
  if (typeof globalThis.reportError === 'function') globalThis.reportError(err);
  else setTimeout(() => {
    throw err;
  }, 0);
}

/** `on(type, fn)` returns a function that removes `fn`. */
class Emitter {
  constructor() {
    this._listeners = new Map();
  }

  on(type, fn) {
    if (!this._listeners.has(type)) this._listeners.set(type, new Set());
    this._listeners.get(type).add(fn);
    return () => this.off(type, fn);
  }

  off(type, fn) {
    const set = this._listeners.get(type);
    if (set) set.delete(fn);
  }

  emit(type, ...args) {
    const set = this._listeners.get(type);
    if (!set) return;
    for (const fn of [...set]) {
      try {
        fn(...args);
      } catch (err) {
        // A listener's bug must not break the protocol; surface it anyway.
        reportLater(err);
      }
    }
  }
}

/** Exponential back-off with jitter: attempt 0 waits 0.5–1 s, then doubling to 5–10 s. */
function backoff(attempt, base = BACKOFF_BASE_MS, cap = BACKOFF_CAP_MS) {
  return Math.min(cap, base * 2 ** Math.min(attempt, 20)) * (0.5 + Math.random() / 2);
}

/** A Kubernetes `Status` for an HTTP error, from its body when it is one. */
function statusOf(code, body, fallback) {
  if (isObject(body) && body.kind === 'Status') return body;
  return {kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason: fallback || '', message: typeof body === 'string' ? body : fallback || ''};
}

async function readStatus(resp) {
  const text = await resp.text().catch(() => '');
  let body = text;
  try {
    body = JSON.parse(text);
  } catch (_) {
    // Not JSON: the text is the message.
  }
  const s = statusOf(resp.status, body, resp.statusText);
  if (!s.code) s.code = resp.status;
  return s;
}

/**
 * The `fetch` to use, called as a plain function: browsers throw "Illegal
 * invocation" when their fetch is called as a method of something else.
 */
function fetchOf(options) {
  const f = options.fetch || globalThis.fetch;
  return typeof f === 'function' ? (url, init) => f(url, init) : null;
}

function retryAfterOf(resp) {
  const n = Number(resp.headers.get('Retry-After'));
  return Number.isFinite(n) && n > 0 ? n : 0;
}

function defaultBase() {
  try {
    const here = new URL(import.meta.url);
    // Served by a gateway at /lib/kubefan.js: that gateway.
    if ((here.protocol === 'http:' || here.protocol === 'https:') && here.pathname.endsWith('/lib/kubefan.js')) {
      return new URL('..', here).href;
    }
  } catch (_) {
    // No import.meta.url (a bundler rewrote it): fall through.
  }
  if (typeof location !== 'undefined' && /^https?:$/.test(location.protocol)) return location.origin + '/';
  throw new TypeError('kubefan: the `base` option (the gateway URL) is required outside a web page');
}

/** A cluster name of a gateway serving several (`--cluster`): a DNS label. */
const CLUSTER_NAME = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

function checkCluster(name) {
  if (typeof name !== 'string' || !CLUSTER_NAME.test(name)) {
    throw new TypeError('kubefan: cluster ' + JSON.stringify(name) + ' is not a cluster name (a DNS label)');
  }
  return name;
}

/** The gateway's URL, with `/clusters/NAME/` when `options.cluster` names one. */
function baseOf(options) {
  const b = (options && options.base) || defaultBase();
  const base = String(b).endsWith('/') ? String(b) : String(b) + '/';
  return options && options.cluster ? base + 'clusters/' + checkCluster(options.cluster) + '/' : base;
}

/**
 * The cluster a watch names itself: `options.cluster` on a client at the
 * gateway's root (one socket or worker for every cluster's watches);
 * nothing on a client under `/clusters/NAME/`, whose watches are that
 * cluster's (naming another is an error).
 */
function clusterOfWatch(client, options) {
  const named = options && options.cluster ? checkCluster(options.cluster) : null;
  if (!named || named === client.cluster) return null;
  if (client.cluster) {
    throw new TypeError('kubefan: this client is cluster ' + JSON.stringify(client.cluster) + '\'s; a watch of cluster ' + JSON.stringify(named) + ' needs a client at the gateway\'s root');
  }
  return named;
}

/** The stream options of a watch, as query parameters / subscribe fields. */
function paramsOf(options) {
  const o = options || {};
  const list = (v) => (Array.isArray(v) ? v.join(',') : v || '');
  const params = {};
  if (list(o.namespace)) params.namespace = list(o.namespace);
  if (o.labelSelector) params.labelSelector = o.labelSelector;
  if (o.fieldSelector) params.fieldSelector = o.fieldSelector;
  if (list(o.fields)) params.fields = list(o.fields);
  if (o.patch) params.delta = 'merge-patch';
  return params;
}

/**
 * Whether `msg` ends the stream `request` opened: an ERROR, except in a
 * merged stream one naming its cluster, which ends that cluster's part
 * alone (PROTOCOL "One stream across clusters").
 */
function ends(request, msg) {
  return msg.type === 'ERROR' && !(request.clusters && msg.cluster);
}

// ---- the store ------------------------------------------------------------------

/** Codes a request cannot be helped by retrying as it is (PROTOCOL "Errors"). */
const FINAL_CODES = [400, 403, 404, 405, 422];

/**
 * What a stream refused or ended with `status` does next: 'renew' the
 * token and resume (a 401, unless the stream was refused again soon after
 * it was opened with a renewed token: `renewedJustNow`), 'stop' (the
 * request itself is wrong, refused, or names nothing: `update()` or
 * `retry()` starts again), or 'retry' later (429, 503, anything else).
 */
function verdict(code, renewedJustNow) {
  if (code === 401) return renewedJustNow ? 'stop' : 'renew';
  return FINAL_CODES.includes(code) ? 'stop' : 'retry';
}

/**
 * One stream's picture of a resource's objects, and the one place the
 * stream's messages are applied to it: the snapshot collected aside and
 * applied at its end marker, changes and merge patches as they come, a
 * RESET collecting a fresh snapshot while the picture stays. A Watch is a
 * Store with a subscription of its own; a ClustersWatch's part is one
 * cluster's Store in a merged subscription. Which stream feeds it, what
 * follows when that stream fails, and `_resync()` (a fresh snapshot is
 * needed: a patch came for an object the picture lacks) are theirs.
 */
class Store extends Emitter {
  constructor(client, resource) {
    super();
    this.client = client;
    this.resource = resource;
    /** key -> object: the picture as of `resourceVersion`. */
    this.objects = new Map();
    this.state = 'connecting';
    /** The last Status a stream failed with, until a stream opens again. */
    this.error = null;
    this.snapshots = 0;
    this.resets = 0;
    this._position = '';
    this._buffer = null; // a snapshot being collected, or null
    this._closed = false;
  }

  /** The resourceVersion the picture reflects ('' before the first snapshot). */
  get resourceVersion() {
    return this._position;
  }

  /** Whether the picture is a complete snapshot (plus changes). */
  get synced() {
    return this.snapshots > 0;
  }

  get size() {
    return this.objects.size;
  }

  /** `get('ns/name')`, `get('ns', 'name')`, or `get('name')` for cluster-scoped objects. */
  get(keyOrNamespace, name) {
    return this.objects.get(name === undefined ? keyOrNamespace : keyOrNamespace + '/' + name);
  }

  list() {
    return [...this.objects.values()];
  }

  [Symbol.iterator]() {
    return this.objects.values();
  }

  /** Resolves once a snapshot has been applied; rejects if the watch stops first. */
  ready() {
    if (this.synced) return Promise.resolve(this);
    if (this._closed) return Promise.reject(new Error('kubefan: the watch is closed'));
    return new Promise((resolve, reject) => {
      const offs = [];
      const done = (fn, v) => {
        for (const off of offs) off();
        fn(v);
      };
      offs.push(this.on('synced', () => done(resolve, this)));
      offs.push(this.on('state', (s) => {
        if (s === 'error') done(reject, Object.assign(new Error('kubefan: ' + ((this.error && this.error.message) || 'the watch failed')), {status: this.error}));
        else if (s === 'closed') done(reject, new Error('kubefan: the watch is closed'));
      }));
    });
  }

  /** A stream starts: it resumes from the position, or a snapshot is collected aside. */
  _begin(state) {
    this._buffer = this._position ? null : new Map();
    this._setState(state || (this.synced || this._position ? 'reconnecting' : 'connecting'));
  }

  _opened() {
    // The stream is under way. Over SSE the gateway accepted it (HTTP 200);
    // over /ws its subscribe was only sent, and may still be refused with
    // an ERROR 401: a message that is not an ERROR, or time
    // (`AUTH_SETTLED_MS`), says the credentials were taken (`verdict`).
    this.error = null;
    this._setState(this._buffer ? 'syncing' : 'live');
  }

  /** Applies one of the stream's messages; an ERROR is for its owner, which knows what follows. */
  _apply(msg) {
    switch (msg.type) {
      case 'ADDED':
      case 'MODIFIED':
      case 'DELETED':
        this._change(msg);
        break;
      case 'BOOKMARK':
        this._bookmark(msg);
        break;
      case 'RESET':
        // Our position is gone; a snapshot follows. The picture stays, and
        // so does its position: should this stream drop before the new
        // snapshot ends, resuming from it is still right.
        this._buffer = new Map();
        this.resets += 1;
        this._setState('reset');
        this.emit('reset', msg.object);
        break;
      case 'WARNING':
        // The API server's warning about the resource (a deprecated API):
        // `/ws` sends it before a subscription's first event.
        this.emit('warning', msg.message);
        break;
      default:
      // Unknown types are for newer clients: ignored.
    }
  }

  _change(msg) {
    const obj = msg.object || {};
    const key = keyOf(obj);
    if (this._buffer) {
      // Snapshots hold ADDED only; anything else is applied to the
      // collection all the same.
      if (msg.type === 'DELETED') this._buffer.delete(key);
      else if (msg.patch === 'merge') this._buffer.set(key, mergePatch(this._buffer.get(key), obj));
      else this._buffer.set(key, obj);
      return;
    }
    const prev = this.objects.get(key);
    if (msg.type === 'DELETED') {
      this.objects.delete(key);
      if (prev) this.emit('deleted', obj, prev);
    } else {
      let next = obj;
      if (msg.patch === 'merge') {
        if (!prev) {
          // A patch for an object we do not hold: our picture is not the
          // one the gateway patched. Start again from a snapshot.
          this._resync();
          return;
        }
        next = mergePatch(prev, obj);
      }
      this.objects.set(key, next);
      if (!prev) this.emit('added', next);
      else this.emit('modified', next, prev);
    }
    if (msg.id) this._position = msg.id;
  }

  _bookmark(msg) {
    const meta = (msg.object && msg.object.metadata) || {};
    const end = meta.annotations && meta.annotations[INITIAL_EVENTS_END] === 'true';
    if (end && this._buffer) {
      const fresh = this._buffer;
      this._buffer = null;
      this._position = msg.id || meta.resourceVersion || this._position;
      this.snapshots += 1;
      this._replace(fresh);
      this._setState('live');
      this.emit('synced', {resourceVersion: this._position, size: this.objects.size});
      return;
    }
    if (!this._buffer && msg.id) {
      this._position = msg.id;
      this.emit('bookmark', msg.id);
    }
  }

  /** A snapshot replaces the picture: its differences are told as changes. */
  _replace(fresh) {
    const old = this.objects;
    this.objects = fresh;
    for (const [key, obj] of fresh) {
      const prev = old.get(key);
      if (!prev) this.emit('added', obj);
      else if (!equal(prev, obj)) this.emit('modified', obj, prev);
    }
    for (const [key, prev] of old) if (!fresh.has(key)) this.emit('deleted', prev, prev);
  }

  _setState(state) {
    if (state === this.state) return;
    const prev = this.state;
    this.state = state;
    this.emit('state', state, prev);
  }
}

/**
 * The life of one subscription on a client, for its owner (a Watch, or a
 * ClustersWatch's merged one): its current stream, the timer that opens
 * the next, and what paces them (back-off, `Retry-After`, the renewal of
 * a refused token). Nothing a stream delivers after `end()` or a newer
 * `open()` reaches the owner, whose hooks are `_open()` (time for the
 * next stream), `_opened()`, `_message(msg)` (a message that is not an
 * ERROR also resets the back-off), `_dropped(info)` and
 * `_failed(status, retryAfter)` (refused).
 */
class Subscription {
  constructor(client, owner) {
    this.client = client;
    this.owner = owner;
    this._gen = 0;
    this._channel = null;
    this._timer = null;
    this._attempt = 0;
    this._authFailures = 0;
    this._openedAt = 0;
  }

  open(request) {
    clearTimeout(this._timer);
    this._timer = null;
    const gen = ++this._gen;
    const owner = this.owner;
    const mine = () => gen === this._gen && !owner._closed;
    this._openedAt = Date.now();
    const sink = {
      opened: () => {
        if (mine()) owner._opened();
      },
      message: (msg) => {
        if (!mine()) return;
        if (msg.type !== 'ERROR') this.heard();
        owner._message(msg);
      },
      dropped: (info) => {
        if (!mine()) return;
        this._channel = null;
        owner._dropped(info);
      },
      refused: (status, retryAfter) => {
        if (!mine()) return;
        this._channel = null;
        owner._failed(status, retryAfter);
      },
    };
    this._channel = this.client.open(request, sink);
  }

  /** Forgets the current stream: nothing it still delivers is applied. */
  end() {
    this._gen++;
    clearTimeout(this._timer);
    this._timer = null;
    const ch = this._channel;
    this._channel = null;
    if (ch) ch.close();
  }

  /** Whether the next stream waits for its time (back-off). */
  get waiting() {
    return this._timer !== null;
  }

  /** A message that is not an ERROR: the stream is accepted, its credentials too. */
  heard() {
    this._attempt = 0;
    this._authFailures = 0;
  }

  /** Starting over (`update()`, `retry()`): no failure counts, or only the back-off's (`keepAttempts`). */
  fresh(keepAttempts) {
    if (!keepAttempts) this._attempt = 0;
    this._authFailures = 0;
  }

  /** Whether the stream was opened long enough ago for a 401 to be its token's expiry rather than a refusal of a renewed one. */
  get settled() {
    return Date.now() - this._openedAt >= AUTH_SETTLED_MS;
  }

  /** What follows `status` for this subscription (`verdict`), counting a 401 toward the renewal it asks for. */
  verdict(status) {
    const next = verdict(status.code, this._authFailures > 0 && !this.settled);
    if (next === 'renew') this._authFailures = 1;
    return next;
  }

  /** Renews the token, then `then(ok)`, unless the subscription moved on meanwhile. */
  renew(status, then) {
    const gen = this._gen;
    Promise.resolve(this.client.renew(status))
      .catch(() => false)
      .then((ok) => {
        if (gen === this._gen && !this.owner._closed) then(ok);
      });
  }

  /** The wait before the next stream after a drop: back-off. */
  backoff() {
    return backoff(this._attempt++);
  }

  /** The wait before the next stream after a refusal: back-off, and at least the `Retry-After` (s) and `retry:` hints. */
  delay(retryAfter) {
    return Math.max(retryAfter * 1000 || 0, this.client.retryMs || 0, backoff(this._attempt++));
  }

  /** The owner's next stream, in `ms`. */
  later(ms) {
    clearTimeout(this._timer);
    this._timer = setTimeout(() => {
      this._timer = null;
      this.owner._open();
    }, ms);
  }
}

/**
 * A live store of one resource's objects, as one subscription sees them.
 * Created by `client.watch()` or `watch()`; see kubefan.d.ts.
 */
export class Watch extends Store {
  constructor(client, resource, options, ownsClient) {
    if (!resource || typeof resource !== 'string') throw new TypeError('kubefan: watch(resource): resource must be a string');
    super(client, resource);
    this.params = paramsOf(options);
    /** The cluster this watch names on a client at the gateway's root (null: the client's). */
    this.cluster = clusterOfWatch(client, options);
    this._ownsClient = Boolean(ownsClient);
    this._sub = new Subscription(client, this);
    if (client._watches) client._watches.add(this);
    this._open();
  }

  /**
   * New stream options (namespace, selectors, fields, patch): a fresh
   * snapshot replaces the picture when it is complete; until then the old
   * one stays.
   */
  update(options) {
    if (this._closed) return;
    this.params = paramsOf(options);
    this._position = '';
    this.error = null;
    this._sub.fresh();
    this._sub.end();
    this._open('connecting');
  }

  /** Opens a stream now (after an error, or to cut a back-off short). */
  retry() {
    if (this._closed) return;
    this.error = null;
    this._sub.fresh(true);
    this._sub.end();
    this._open();
  }

  close() {
    if (this._closed) return;
    this._sub.end();
    this._closed = true;
    if (this.client._watches) this.client._watches.delete(this);
    this._setState('closed');
    if (this._ownsClient) this.client.close();
  }

  // ---- a stream's life ----

  /** Opens a stream, resuming from the position if there is one. */
  _open(state) {
    const from = this._position;
    this._begin(state);
    const request = {resource: this.resource, params: Object.assign({}, this.params), from};
    if (this.cluster) request.cluster = this.cluster;
    this._sub.open(request);
  }

  _message(msg) {
    if (msg.type !== 'ERROR') return this._apply(msg);
    this._sub.end();
    this._failed(msg.object || statusOf(500, null, 'InternalError'), 0);
  }

  _resync() {
    this._position = '';
    this._sub.end();
    this._open();
  }

  _dropped() {
    this._setState('reconnecting');
    this._sub.later(this._sub.backoff());
  }

  _failed(status, retryAfter) {
    this.error = status;
    this.emit('error', status);
    const next = this._sub.verdict(status);
    if (next === 'stop') return this._setState('error');
    this._setState('reconnecting');
    if (next === 'renew') this._sub.renew(status, (ok) => (ok ? this._open() : this._setState('error')));
    else this._sub.later(this._sub.delay(retryAfter));
  }
}

// ---- clients --------------------------------------------------------------------

class Client extends Emitter {
  constructor(options) {
    super();
    this.options = Object.assign({}, options);
    this.base = baseOf(options);
    /** The cluster this client's base is under (null: the gateway's root). */
    this.cluster = options && options.cluster ? checkCluster(options.cluster) : null;
    this.token = this.options.token || undefined;
    this.state = 'idle';
    this.retryMs = 0;
    this._renewal = null;
    this._closed = false;
    this._watches = new Set();
  }

  /** A live store of `resource`'s objects over this client. */
  watch(resource, options) {
    if (this._closed) throw new Error('kubefan: the client is closed');
    return new Watch(this, resource, options, false);
  }

  /** A fresh token from `getToken` (several callers share one call). */
  renew() {
    if (!this.options.getToken) return Promise.resolve(false);
    if (!this._renewal) {
      this._renewal = (async () => {
        try {
          const token = await this.options.getToken({reason: 'renew'});
          // The same token again would be refused again.
          if (!token || token === this.token) return false;
          this.token = token;
          return true;
        } catch (err) {
          this.emit('error', statusOf(401, null, 'token renewal failed: ' + (err && err.message)));
          return false;
        } finally {
          this._renewal = null;
        }
      })();
    }
    return this._renewal;
  }

  /**
   * A signed-in session was refreshed (`POST /session/refresh`), perhaps
   * at another replica: hands its `renewal` to this client's streams, so
   * those on a replica the refresh did not reach run on past the old
   * id-token (`/ws` `renew`). Returns whether it was sent: SSE streams
   * cannot be sent anything (one that ends with a 401 resumes).
   */
  renewSession(renewal) {
    return false;
  }

  async _currentToken() {
    if (this._renewal) await this._renewal;
    if (this.token === undefined && this.options.getToken) {
      try {
        this.token = (await this.options.getToken({reason: 'connect'})) || undefined;
      } catch (_) {
        this.token = undefined;
      }
    }
    return this.token;
  }

  _url(path, query) {
    const url = new URL(path, this.base);
    for (const [k, v] of Object.entries(query || {})) url.searchParams.set(k, v);
    return url;
  }

  _setState(state) {
    if (state === this.state) return;
    const prev = this.state;
    this.state = state;
    this.emit('state', state, prev);
  }

  /** Closes the client and every watch on it. */
  close() {
    this._closed = true;
    for (const w of [...this._watches]) w.close();
    this._setState('closed');
  }
}

/**
 * Server-Sent Events parsing as the HTML standard describes it (the
 * "event stream interpretation"), fed with decoded text in any slices.
 * `onEvent({type, data, id})`: `id` is the event's own `id:` field
 * (undefined when it had none, '' when empty).
 */
export class EventStreamParser {
  constructor(onEvent, onRetry) {
    this.onEvent = onEvent;
    this.onRetry = onRetry || (() => {});
    this._rest = '';
    this._type = '';
    this._data = [];
    this._id = undefined;
  }

  feed(text) {
    const buf = this._rest + text;
    const eol = /[\r\n]/g;
    let pos = 0;
    for (;;) {
      eol.lastIndex = pos;
      const m = eol.exec(buf);
      if (!m) break;
      const at = m.index;
      let next = at + 1;
      if (buf.charCodeAt(at) === 13) {
        if (at + 1 === buf.length) break; // a CR at the end: an LF may follow
        if (buf.charCodeAt(at + 1) === 10) next = at + 2;
      }
      this._line(buf.slice(pos, at));
      pos = next;
    }
    this._rest = buf.slice(pos);
  }

  /** The end of the stream: a line ended by a lone CR is complete; an unfinished event is dropped. */
  end() {
    if (this._rest.endsWith('\r')) this._line(this._rest.slice(0, -1));
    this._rest = '';
  }

  _line(line) {
    if (line === '') return this._dispatch();
    if (line.charCodeAt(0) === 58) return; // ':' a comment
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (field === 'event') this._type = value;
    else if (field === 'data') this._data.push(value);
    else if (field === 'id') {
      if (!value.includes('\0')) this._id = value;
    } else if (field === 'retry') {
      if (/^[0-9]+$/.test(value)) this.onRetry(Number(value));
    }
  }

  _dispatch() {
    const id = this._id;
    const type = this._type;
    const data = this._data;
    this._id = undefined;
    this._type = '';
    this._data = [];
    if (!data.length) return;
    this.onEvent({type: type || 'message', data: data.join('\n'), id});
  }
}

/**
 * SSE: one `GET /stream/{resource}` per watch (`?clusters=a,b` for one
 * across clusters), read with `fetch` (so the token goes in an
 * `Authorization` header and HTTP errors are seen as they are). Each
 * HTTP/1.1 stream takes a connection of the browser's six per host:
 * prefer WsClient or SharedClient for several watches in a browser.
 */
export class SseClient extends Client {
  constructor(options) {
    super(options);
    this.kind = 'sse';
    this._fetch = fetchOf(this.options);
    if (!this._fetch) throw new TypeError('kubefan: no fetch; pass options.fetch');
    this.idleTimeoutMs = this.options.idleTimeoutMs || DEFAULT_IDLE_TIMEOUT_MS;
    this._streams = new Set(); // each open stream's end
    this._setState('open');
  }

  open(request, sink) {
    if (this._closed) {
      queueMicrotask(() => sink.dropped({reason: 'closed'}));
      return {close() {}};
    }
    const ctl = new AbortController();
    let over = false;
    const finish = (fn) => {
      if (over) return;
      over = true;
      this._streams.delete(stop);
      clearTimeout(idle);
      ctl.abort();
      fn();
    };
    const stop = () => finish(() => sink.dropped({reason: 'closed'}));
    this._streams.add(stop);
    let idle = null;
    const alive = () => {
      clearTimeout(idle);
      idle = setTimeout(() => finish(() => sink.dropped({reason: 'idle'})), this.idleTimeoutMs);
    };
    (async () => {
      const token = await this._currentToken();
      if (over) return;
      const query = Object.assign({}, request.params);
      if (request.clusters) query.clusters = request.clusters.join(',');
      if (request.from) query.resourceVersion = request.from;
      const path = (request.cluster ? 'clusters/' + request.cluster + '/' : '') + 'stream/' + encodeURIComponent(request.resource);
      const url = this._url(path, query);
      const headers = {Accept: 'text/event-stream'};
      if (token) headers.Authorization = 'Bearer ' + token;
      let resp;
      try {
        alive();
        resp = await this._fetch(url.href, {headers, signal: ctl.signal, cache: 'no-store', credentials: this.options.credentials || 'same-origin'});
      } catch (err) {
        return finish(() => sink.dropped({reason: 'network', error: err}));
      }
      if (over) return;
      if (!resp.ok) {
        const status = await readStatus(resp);
        return finish(() => sink.refused(status, retryAfterOf(resp)));
      }
      sink.opened();
      const parser = new EventStreamParser(
        (ev) => {
          if (over) return;
          let body;
          try {
            body = JSON.parse(ev.data);
          } catch (_) {
            return; // not one of kubefan's messages
          }
          const msg = {type: body.type || ev.type, object: body.object};
          if (ev.id !== undefined) msg.id = ev.id;
          if (body.patch) msg.patch = body.patch;
          if (body.cluster) msg.cluster = body.cluster;
          if (body.message !== undefined) msg.message = body.message;
          sink.message(msg);
        },
        (ms) => {
          this.retryMs = ms;
        },
      );
      const decoder = new TextDecoder();
      try {
        const reader = resp.body.getReader();
        for (;;) {
          const {done, value} = await reader.read();
          if (over) return;
          if (done) break;
          alive();
          parser.feed(decoder.decode(value, {stream: true}));
        }
        parser.feed(decoder.decode());
        parser.end();
      } catch (err) {
        return finish(() => sink.dropped({reason: 'network', error: err}));
      }
      finish(() => sink.dropped({reason: 'ended'}));
    })();
    return {
      close: () => finish(() => {}),
    };
  }

  close() {
    if (this._closed) return;
    super.close();
    for (const stop of [...this._streams]) stop();
  }
}

/**
 * One multiplexed `/ws` socket carrying every watch opened on it (each a
 * subscription with an id of ours). It connects when a watch needs it,
 * paces its attempts with back-off (and `Retry-After`), and closes a few
 * seconds after its last watch ends. The token, if any, is the socket's: it
 * goes in the `access_token` query parameter (browsers cannot set headers
 * on a WebSocket).
 */
export class WsClient extends Client {
  constructor(options) {
    super(options);
    this.kind = 'ws';
    this._WebSocket = this.options.WebSocket || globalThis.WebSocket;
    if (typeof this._WebSocket !== 'function') throw new TypeError('kubefan: no WebSocket; pass options.WebSocket');
    this._fetch = fetchOf(this.options);
    this.lingerMs = this.options.lingerMs === undefined ? SOCKET_LINGER_MS : this.options.lingerMs;
    this._subs = new Map(); // id -> {request, sink, socket (sent on) | null}
    this._seq = 0;
    this._socket = null; // {ws, opened, stale}
    this._connecting = false;
    this._attempt = 0;
    this._notBefore = 0;
    this._timer = null;
    this._linger = null;
  }

  open(request, sink) {
    if (this._closed) {
      queueMicrotask(() => sink.dropped({reason: 'closed'}));
      return {close() {}};
    }
    const id = 'k' + ++this._seq;
    const entry = {id, request, sink, socket: null};
    this._subs.set(id, entry);
    clearTimeout(this._linger);
    this._linger = null;
    const s = this._socket;
    if (s && s.opened && !s.stale) queueMicrotask(() => this._send(entry));
    else this._want();
    return {close: () => this._unsubscribe(id)};
  }

  renew(status) {
    // The socket's token is refused or expired: no new subscription goes on
    // that socket, and the next one carries the fresh token.
    const was = this._socket;
    if (was) was.stale = true;
    return super.renew(status).then((ok) => {
      const s = this._socket;
      if (ok && s && s.stale) this._retire(s);
      // No fresh token: the socket's is the best there is, and it serves
      // its other subscriptions; were it left stale, the next subscription
      // would open another socket beside it, and this one, no longer the
      // client's, would never be unsubscribed from nor closed.
      else if (!ok && s && s === was) s.stale = false;
      return ok;
    });
  }

  renewSession(renewal) {
    const s = this._socket;
    if (!renewal || !s || !s.opened || s.gone) return false;
    try {
      s.ws.send(JSON.stringify({op: 'renew', session: renewal}));
    } catch (_) {
      return false;
    }
    return true;
  }

  /** Drops the token; a socket opened with it closes (its watches come back on a new one). */
  forgetToken() {
    this.token = undefined;
    const s = this._socket;
    if (s && s.token) this._retire(s);
  }

  close() {
    if (this._closed) return;
    clearTimeout(this._timer);
    clearTimeout(this._linger);
    const subs = [...this._subs.values()];
    this._subs.clear();
    if (this._socket) this._retire(this._socket);
    super.close();
    for (const e of subs) e.sink.dropped({reason: 'closed'});
  }

  _send(entry) {
    const s = this._socket;
    if (!this._subs.has(entry.id) || entry.socket || !s || !s.opened || s.stale) return;
    const msg = Object.assign({op: 'subscribe', id: entry.id, resource: entry.request.resource}, entry.request.params);
    if (entry.request.from) msg.resourceVersion = entry.request.from;
    if (entry.request.cluster) msg.cluster = entry.request.cluster;
    if (entry.request.clusters) msg.clusters = entry.request.clusters;
    try {
      s.ws.send(JSON.stringify(msg));
    } catch (_) {
      return; // the socket is closing: its close event re-queues the rest
    }
    entry.socket = s;
    entry.sink.opened();
  }

  _unsubscribe(id) {
    const entry = this._subs.get(id);
    if (!entry) return;
    this._subs.delete(id);
    const s = entry.socket;
    if (s && s === this._socket && s.opened) {
      try {
        s.ws.send(JSON.stringify({op: 'unsubscribe', id}));
      } catch (_) {
        // Closing anyway.
      }
    }
    this._idle();
  }

  /** A socket is needed: connect now, or when back-off allows. */
  _want() {
    if (this._closed || this._connecting || this._timer) return;
    const s = this._socket;
    if (s && !s.stale) return;
    const wait = Math.max(0, this._notBefore - Date.now());
    this._timer = setTimeout(() => {
      this._timer = null;
      this._connect();
    }, wait);
  }

  async _connect() {
    if (this._closed || this._connecting || ![...this._subs.values()].some((e) => !e.socket)) return;
    this._connecting = true;
    this._setState(this._attempt || this._lostOne ? 'reconnecting' : 'connecting');
    let token;
    try {
      token = await this._currentToken();
    } finally {
      this._connecting = false;
    }
    if (this._closed) return;
    const url = this._url('ws', token ? {access_token: token} : {});
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    let ws;
    try {
      ws = new this._WebSocket(url.href);
    } catch (err) {
      this._failedConnect(null);
      return;
    }
    const s = {ws, opened: false, stale: false, token};
    this._socket = s;
    ws.onopen = () => {
      if (this._socket !== s) return;
      s.opened = true;
      this._attempt = 0;
      this._lostOne = false;
      this._setState('open');
      for (const entry of [...this._subs.values()]) if (!entry.socket) this._send(entry);
      this._idle();
    };
    ws.onmessage = (ev) => this._receive(s, ev.data);
    ws.onclose = (ev) => this._lost(s, ev);
    ws.onerror = () => {
      // Browsers follow with a close event; some implementations (Node's,
      // for a refused handshake) do not.
      if (!s.opened) this._lost(s, {code: 1006, reason: ''});
    };
  }

  _receive(s, data) {
    let msg;
    try {
      msg = JSON.parse(data);
    } catch (_) {
      return;
    }
    if (msg.sub === null || msg.sub === undefined) {
      // About no subscription: a message of ours the gateway did not take,
      // or the answer to a `renew`.
      if (msg.type === 'ERROR') this.emit('error', msg.object);
      if (msg.type === 'RENEWED') this.emit('renewed', msg.expiresInSeconds);
      return;
    }
    const entry = this._subs.get(msg.sub);
    if (!entry || entry.socket !== s) return; // late, for a subscription we left
    if (msg.type === 'UNSUBSCRIBED') return;
    const over = ends(entry.request, msg);
    if (over) this._subs.delete(entry.id); // that subscription is over
    const out = {type: msg.type, object: msg.object};
    if (msg.id !== undefined) out.id = msg.id;
    if (msg.patch) out.patch = msg.patch;
    if (msg.message !== undefined) out.message = msg.message;
    if (msg.cluster) out.cluster = msg.cluster;
    entry.sink.message(out);
    if (over) this._idle();
  }

  _lost(s, ev) {
    if (s.gone) return;
    s.gone = true;
    const info = {reason: 'closed', code: ev && ev.code, text: ev && ev.reason};
    const current = this._socket === s;
    if (current) this._socket = null;
    for (const entry of [...this._subs.values()]) {
      if (entry.socket === s) {
        this._subs.delete(entry.id);
        entry.sink.dropped(info);
      }
    }
    if (!current || this._closed) return;
    if (!s.opened) {
      this._failedConnect(s.token);
      return;
    }
    // Its watches come back, after their back-off.
    this._lostOne = true;
    this._setState('reconnecting');
    if (info.code !== 4001 && info.code !== 1000) this._notBefore = Date.now() + backoff(0);
    if (this._subs.size) this._want();
  }

  /**
   * A socket that never opened. Browsers do not say why; a plain GET of
   * `/ws` does: its HTTP error (401, 403, 429, 503) refuses the waiting
   * subscriptions, anything else (no answer; 400, "not a WebSocket
   * handshake", meaning the gate let it through) is retried after back-off.
   */
  async _failedConnect(token) {
    this._notBefore = Date.now() + backoff(this._attempt++);
    this._setState('reconnecting');
    const found = await this._probe(token);
    if (this._closed) return;
    if (found) {
      const {status, retryAfter} = found;
      if (retryAfter) this._notBefore = Math.max(this._notBefore, Date.now() + retryAfter * 1000);
      for (const entry of [...this._subs.values()]) {
        if (!entry.socket) {
          this._subs.delete(entry.id);
          entry.sink.refused(status, retryAfter);
        }
      }
      this._idle();
      return;
    }
    if ([...this._subs.values()].some((e) => !e.socket)) this._want();
  }

  async _probe(token) {
    if (!this._fetch) return null;
    const url = this._url('ws', token ? {access_token: token} : {});
    let resp;
    try {
      resp = await this._fetch(url.href, {cache: 'no-store', credentials: this.options.credentials || 'same-origin', signal: AbortSignal.timeout(5000)});
    } catch (_) {
      return null;
    }
    if (resp.ok || resp.status === 400) {
      resp.body && resp.body.cancel().catch(() => {});
      return null;
    }
    return {status: await readStatus(resp), retryAfter: retryAfterOf(resp)};
  }

  _retire(s) {
    s.stale = true;
    if (this._socket === s) this._socket = null;
    try {
      s.ws.close(1000);
    } catch (_) {
      // Already closing.
    }
    // Its subscriptions learn of it from the close event; until then the
    // rest wait for a socket with the fresh token.
    const waiting = [...this._subs.values()].some((e) => !e.socket);
    if (waiting) this._want();
  }

  /** With no subscription left, the socket closes after `lingerMs`. */
  _idle() {
    if (this._subs.size || !this._socket || this._linger) return;
    this._linger = setTimeout(() => {
      this._linger = null;
      if (!this._subs.size && this._socket) {
        this._retire(this._socket);
        this._setState('idle');
      }
    }, this.lingerMs);
  }
}

// ---- one connection per browser: SharedWorker ---------------------------------
//
// The tab's SharedClient and the worker's SharedHub talk over the worker's
// MessagePort, in batches (arrays) of these messages:
//   tab -> worker: hello {tab, base, credentials}, held, open {id, request},
//                  close {id}, renew {rid}, token {rid, token}, bye
//   worker -> tab: ready {state}, state {state}, opened {id},
//                  message {id, msg}, dropped {id, info},
//                  refused {id, status, retryAfter}, renewed {rid, ok},
//                  token? {rid, fresh}
// A tab that goes away says `bye` (pagehide); one that dies without a word
// releases a Web Lock the worker waits on, with the same effect: its
// subscriptions are closed.

/** `post(msg)` queues `msg` for `port`; queued messages go as one array. */
function batcher(port) {
  let queue = null;
  let timer = null;
  const flush = () => {
    clearTimeout(timer);
    const q = queue;
    queue = null;
    if (!q) return;
    try {
      port.postMessage(q);
    } catch (_) {
      // The other end is gone.
    }
  };
  const post = (msg) => {
    if (!queue) {
      queue = [];
      timer = setTimeout(flush, 0);
    }
    queue.push(msg);
  };
  post.flush = flush;
  return post;
}

/**
 * A page's end of the SharedWorker (`kubefan-worker.js`) that holds one
 * WsClient for every tab of this origin. Where SharedWorker is missing or
 * the worker cannot start, it carries on as a WsClient of its own.
 */
export class SharedClient extends Client {
  constructor(options) {
    super(options);
    this.kind = 'shared';
    this._channels = new Map(); // id -> {sink, request}
    this._seq = 0;
    this._rpc = new Map(); // rid -> resolve
    this._fallback = null;
    this._post = null;
    this._ready = false;
    this._tab = Math.random().toString(36).slice(2) + Date.now().toString(36);
    this._start();
  }

  _start() {
    const Shared = this.options.SharedWorker || globalThis.SharedWorker;
    if (typeof Shared !== 'function') return this._useFallback('no SharedWorker');
    const url = this.options.workerUrl || new URL('./kubefan-worker.js', import.meta.url);
    let worker;
    try {
      worker = new Shared(url, {type: 'module', name: 'kubefan ' + this.base});
    } catch (err) {
      return this._useFallback('the shared worker cannot start: ' + (err && err.message));
    }
    this._worker = worker;
    worker.onerror = () => this._useFallback('the shared worker failed to load');
    const port = worker.port;
    this._port = port;
    this._post = batcher(port);
    port.onmessage = (ev) => {
      for (const m of [].concat(ev.data)) this._receive(m);
    };
    if (port.start) port.start();
    this._readyTimer = setTimeout(() => {
      if (!this._ready) this._useFallback('the shared worker did not answer');
    }, WORKER_READY_MS);
    this._post({op: 'hello', tab: this._tab, base: this.base, credentials: Boolean(this.token || this.options.getToken)});
    const locks = this.options.locks || (typeof navigator !== 'undefined' && navigator.locks);
    if (locks && typeof locks.request === 'function') {
      // Held until this page is gone; once it holds it, the worker waits
      // for it.
      locks
        .request('kubefan-tab:' + this._tab, () => {
          if (this._post) this._post({op: 'held'});
          return new Promise((resolve) => {
            this._releaseLock = resolve;
          });
        })
        .catch(() => {});
    }
    if (typeof addEventListener === 'function' && !this._pagehide) {
      // Leaving the page (or going into the back/forward cache): leave the
      // worker. Coming back from that cache: join it again.
      this._pagehide = () => this._bye();
      this._pageshow = (ev) => {
        if (!ev.persisted || this._closed || this._fallback) return;
        const open = [...this._channels.values()];
        this._channels.clear();
        this._start();
        for (const ch of open) ch.sink.dropped({reason: 'page shown again'});
      };
      addEventListener('pagehide', this._pagehide);
      addEventListener('pageshow', this._pageshow);
    }
  }

  _receive(m) {
    switch (m.op) {
      case 'ready':
        this._ready = true;
        clearTimeout(this._readyTimer);
        this._setState(m.state);
        break;
      case 'state':
        this._setState(m.state);
        break;
      case 'opened': {
        const ch = this._channels.get(m.id);
        if (ch) ch.sink.opened();
        break;
      }
      case 'message': {
        const ch = this._channels.get(m.id);
        if (!ch) break;
        if (ends(ch.request, m.msg)) this._channels.delete(m.id);
        ch.sink.message(m.msg);
        break;
      }
      case 'dropped': {
        const ch = this._channels.get(m.id);
        this._channels.delete(m.id);
        if (ch) ch.sink.dropped(m.info);
        break;
      }
      case 'refused': {
        const ch = this._channels.get(m.id);
        this._channels.delete(m.id);
        if (ch) ch.sink.refused(m.status, m.retryAfter);
        break;
      }
      case 'renewed': {
        const resolve = this._rpc.get(m.rid);
        this._rpc.delete(m.rid);
        if (resolve) resolve(m.ok);
        break;
      }
      case 'token?':
        // For a renewal, a token this tab has not handed out before.
        if (m.fresh && this.options.getToken) this.token = undefined;
        this._currentToken(m.fresh ? 'renew' : 'connect').then(
          (token) => this._post && this._post({op: 'token', rid: m.rid, token: token || null}),
          () => this._post && this._post({op: 'token', rid: m.rid, token: null}),
        );
        break;
      default:
    }
  }

  open(request, sink) {
    if (this._fallback) return this._fallback.open(request, sink);
    if (this._closed) {
      queueMicrotask(() => sink.dropped({reason: 'closed'}));
      return {close() {}};
    }
    const id = ++this._seq;
    this._channels.set(id, {sink, request});
    this._post({op: 'open', id, request});
    return {
      close: () => {
        if (!this._channels.delete(id)) return;
        if (this._post) this._post({op: 'close', id});
      },
    };
  }

  renew(status) {
    if (this._fallback) return this._fallback.renew(status);
    // The worker asks the tabs for a token; this tab answers with a fresh
    // one from getToken (a fixed token stays what it is).
    if (this.options.getToken) this.token = undefined;
    const rid = ++this._seq;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        if (this._rpc.delete(rid)) resolve(false);
      }, TOKEN_ASK_MS * 2);
      this._rpc.set(rid, (ok) => {
        clearTimeout(timer);
        resolve(ok);
      });
      if (this._post) this._post({op: 'renew', rid, status});
    });
  }

  async _currentToken(reason) {
    if (this.token === undefined && this.options.getToken) this.token = (await this.options.getToken({reason: reason || 'connect'})) || undefined;
    return this.token;
  }

  /** Whether the streams go through the shared worker (false: a socket of this tab's own). */
  get shared() {
    return !this._fallback && this._ready;
  }

  renewSession(renewal) {
    if (this._fallback) return this._fallback.renewSession(renewal);
    if (!renewal || !this._post) return false;
    this._post({op: 'session', renewal});
    return true;
  }

  _useFallback(why) {
    if (this._fallback || this._closed) return;
    clearTimeout(this._readyTimer);
    this.fallbackReason = why;
    this._bye();
    this._fallback = new WsClient(this.options);
    this._fallback.on('state', (s) => this._setState(s));
    this._fallback.on('error', (e) => this.emit('error', e));
    this.emit('fallback', why);
    const open = [...this._channels.values()];
    this._channels.clear();
    for (const ch of open) ch.sink.dropped({reason: 'fallback'});
  }

  /** Leaves the worker: it closes this tab's subscriptions. */
  _bye() {
    const post = this._post;
    this._post = null;
    if (!post) return;
    post({op: 'bye'});
    post.flush();
    try {
      this._port.close();
    } catch (_) {
      // Never started.
    }
  }

  close() {
    if (this._closed) return;
    clearTimeout(this._readyTimer);
    if (this._fallback) this._fallback.close();
    this._bye();
    if (this._releaseLock) this._releaseLock();
    if (this._pagehide && typeof removeEventListener === 'function') {
      removeEventListener('pagehide', this._pagehide);
      removeEventListener('pageshow', this._pageshow);
    }
    const open = [...this._channels.values()];
    this._channels.clear();
    super.close();
    for (const ch of open) ch.sink.dropped({reason: 'closed'});
  }
}

/**
 * The worker's end: relays each tab's streams onto one WsClient. Used by
 * kubefan-worker.js; `attach(port)` for each connecting tab.
 */
export class SharedHub {
  constructor(options) {
    this.options = Object.assign({}, options);
    this.tabs = new Map(); // port -> {id, post, channels: Map<id, channel>, credentials}
    this.client = null;
    this._seq = 0;
    this._asks = new Map(); // rid -> resolve
  }

  attach(port) {
    const tab = {id: null, post: batcher(port), channels: new Map(), credentials: false, port};
    this.tabs.set(port, tab);
    port.onmessage = (ev) => {
      for (const m of [].concat(ev.data)) this._receive(tab, m);
    };
    if (port.start) port.start();
  }

  _ensureClient(base) {
    if (this.client) return this.client;
    this.client = new WsClient(Object.assign({}, this.options, {base, getToken: (ctx) => this._askToken(Boolean(ctx && ctx.reason === 'renew'))}));
    this.client.on('state', (state) => {
      for (const tab of this.tabs.values()) tab.post({op: 'state', state});
    });
    return this.client;
  }

  _receive(tab, m) {
    if (!this.tabs.has(tab.port)) return;
    switch (m.op) {
      case 'hello': {
        tab.id = m.tab;
        tab.credentials = Boolean(m.credentials);
        const client = this._ensureClient(m.base);
        tab.post({op: 'ready', state: client.state});
        break;
      }
      case 'held': {
        const locks = this.options.locks || (typeof navigator !== 'undefined' && navigator.locks);
        if (tab.id && locks && typeof locks.request === 'function') {
          // Granted when the tab's lock is released: the tab is gone.
          locks.request('kubefan-tab:' + tab.id, () => this.detach(tab.port)).catch(() => {});
        }
        break;
      }
      case 'open': {
        if (!this.client) break;
        const id = m.id;
        const sink = {
          opened: () => tab.post({op: 'opened', id}),
          message: (msg) => {
            if (ends(m.request, msg)) tab.channels.delete(id);
            tab.post({op: 'message', id, msg});
          },
          dropped: (info) => {
            tab.channels.delete(id);
            tab.post({op: 'dropped', id, info: {reason: info.reason, code: info.code, text: info.text}});
          },
          refused: (status, retryAfter) => {
            tab.channels.delete(id);
            tab.post({op: 'refused', id, status, retryAfter});
          },
        };
        tab.channels.set(id, this.client.open(m.request, sink));
        break;
      }
      case 'close': {
        const ch = tab.channels.get(m.id);
        tab.channels.delete(m.id);
        if (ch) ch.close();
        break;
      }
      case 'renew':
        if (!this.client) break;
        this.client.renew(m.status).then((ok) => tab.post({op: 'renewed', rid: m.rid, ok}));
        break;
      case 'session':
        // A tab's refreshed session, for the socket every tab shares.
        if (this.client) this.client.renewSession(m.renewal);
        break;
      case 'token': {
        const resolve = this._asks.get(m.rid);
        this._asks.delete(m.rid);
        if (resolve) resolve(m.token || undefined);
        break;
      }
      case 'bye':
        this.detach(tab.port);
        break;
      default:
    }
  }

  /**
   * A tab is gone: its subscriptions end. When the last tab that had
   * credentials goes, so does the token it lent the socket: the tabs left
   * reconnect with none of their own.
   */
  detach(port) {
    const tab = this.tabs.get(port);
    if (!tab) return;
    this.tabs.delete(port);
    for (const ch of tab.channels.values()) ch.close();
    tab.channels.clear();
    try {
      port.close();
    } catch (_) {
      // Already closed.
    }
    if (tab.credentials && this.client && ![...this.tabs.values()].some((t) => t.credentials)) this.client.forgetToken();
  }

  /** A token from the newest tab that has credentials, then the next. */
  async _askToken(fresh) {
    const tabs = [...this.tabs.values()].filter((t) => t.credentials).reverse();
    for (const tab of tabs) {
      if (!this.tabs.has(tab.port)) continue;
      const rid = ++this._seq;
      const token = await new Promise((resolve) => {
        const timer = setTimeout(() => {
          if (this._asks.delete(rid)) resolve(undefined);
        }, TOKEN_ASK_MS);
        this._asks.set(rid, (t) => {
          clearTimeout(timer);
          resolve(t);
        });
        tab.post({op: 'token?', rid, fresh});
      });
      if (token) return token;
    }
    return undefined;
  }
}

// ---- entry points -------------------------------------------------------------------

function defaultTransport(options) {
  if (typeof (options.SharedWorker || globalThis.SharedWorker) === 'function' && typeof document !== 'undefined') return 'shared';
  if (typeof (options.WebSocket || globalThis.WebSocket) === 'function') return 'ws';
  return 'sse';
}

/**
 * A client for a kubefan gateway. `transport`: 'shared' (one /ws socket for
 * every tab of the browser, through a SharedWorker; the default in pages
 * that have it), 'ws' (one /ws socket for this client) or 'sse' (one
 * EventSource-style request per watch).
 */
export function connect(options = {}) {
  const kind = options.transport || defaultTransport(options);
  if (kind === 'sse') return new SseClient(options);
  if (kind === 'ws') return new WsClient(options);
  if (kind === 'shared') return new SharedClient(options);
  throw new TypeError('kubefan: unknown transport ' + JSON.stringify(kind) + ' (sse, ws or shared)');
}

/** One watch on a client of its own (closed with it); `options` has both kinds of options. */
export function watch(resource, options = {}) {
  if (options.clusters) return new ClustersWatch(resource, options);
  if (options.client) return options.client.watch(resource, options);
  const client = connect(options);
  return new Watch(client, resource, options, true);
}

/**
 * One resource across several clusters of a gateway (`--cluster`): one
 * merged subscription (PROTOCOL "One stream across clusters": `clusters`
 * in a `/ws` subscribe, `GET /stream/{resource}?clusters=a,b` over SSE)
 * on a client at the gateway's root, and one picture keyed
 * `cluster/namespace/name`. `options.client` is used instead if given (a
 * client at the root). Events carry the cluster as their last argument.
 *
 * Each cluster's part is a Store of its own, fed the messages naming its
 * cluster (each id its own position, read from the compound id), so it
 * keeps its snapshot, changes and RESETs as a Watch does. The
 * subscription resumes with every part's position (`resourceVersion`,
 * `east=123,west=456`). What concerns one cluster stays its part's: its
 * ERROR, or a refusal naming it, takes it alone out of the subscription
 * (the others go on, in a new subscription if the old one was refused),
 * until `retry()` or, for what may pass (429, 5xx), a subscription a
 * back-off later; a `CLUSTER` 503 (its API server unreachable, or the
 * part left out) makes it `reconnecting`, the others untouched, until
 * `CLUSTER` 200. `state` is 'live' once every part is, 'partial' while
 * some are and others are not.
 */
export class ClustersWatch extends Emitter {
  constructor(resource, options) {
    super();
    if (!resource || typeof resource !== 'string') throw new TypeError('kubefan: watch(resource): resource must be a string');
    const names = options.clusters;
    if (!Array.isArray(names) || names.length === 0) {
      throw new TypeError('kubefan: clusters must be a non-empty array of cluster names');
    }
    this.resource = resource;
    this.clusters = [...new Set(names.map(checkCluster))];
    const rest = Object.assign({}, options, {clusters: undefined, client: undefined, cluster: undefined});
    if (options.client && options.client.cluster) {
      throw new TypeError('kubefan: clusters needs a client at the gateway\'s root, not cluster ' + JSON.stringify(options.client.cluster) + '\'s');
    }
    if (options.client && options.client._closed) throw new Error('kubefan: the client is closed');
    /** The one client the subscription is on. */
    this.client = options.client || connect(rest);
    this._ownsClient = !options.client;
    this.params = paramsOf(rest);
    /** cluster → its part. */
    this.parts = new Map();
    this.state = 'connecting';
    this._closed = false;
    this._sub = new Subscription(this.client, this);
    this._partsTimer = null;
    this._partsDue = 0;
    this._renewing = null;
    for (const cluster of this.clusters) {
      const part = new ClusterPart(this, cluster);
      this.parts.set(cluster, part);
      for (const type of ['added', 'modified', 'deleted', 'reset', 'bookmark', 'error', 'warning']) {
        part.on(type, (...args) => this.emit(type, ...args, cluster));
      }
      part.on('synced', (info) => {
        this.emit('synced', Object.assign({cluster}, info));
        this._state();
      });
      part.on('state', () => this._state());
    }
    if (this.client._watches) this.client._watches.add(this);
    this._open();
  }

  /** The picture: `cluster/namespace/name` → object (a fresh Map each time). */
  get objects() {
    const all = new Map();
    for (const [cluster, part] of this.parts) {
      for (const [key, obj] of part.objects) all.set(cluster + '/' + key, obj);
    }
    return all;
  }

  get size() {
    let n = 0;
    for (const part of this.parts.values()) n += part.size;
    return n;
  }

  /** Whether every cluster's part has applied a snapshot. */
  get synced() {
    return [...this.parts.values()].every((p) => p.synced);
  }

  /** Every part's position, `east=123,west=456` (those that have one): the compound id it resumes from. */
  get resourceVersion() {
    return compoundId([...this.parts.values()]);
  }

  /** Snapshots applied, over every part. */
  get snapshots() {
    let n = 0;
    for (const p of this.parts.values()) n += p.snapshots;
    return n;
  }

  /** RESETs received, over every part. */
  get resets() {
    let n = 0;
    for (const p of this.parts.values()) n += p.resets;
    return n;
  }

  /** The first part's error, if one has (its Status names no cluster: see `error` events). */
  get error() {
    for (const p of this.parts.values()) if (p.error) return p.error;
    return null;
  }

  /** `get(cluster, 'ns/name')` or `get(cluster, 'ns', 'name')`. */
  get(cluster, keyOrNamespace, name) {
    const part = this.parts.get(cluster);
    return part ? part.get(keyOrNamespace, name) : undefined;
  }

  /** Every object, each with the cluster it is in: `[cluster, object]`. */
  list() {
    const out = [];
    for (const [cluster, part] of this.parts) for (const obj of part.objects.values()) out.push([cluster, obj]);
    return out;
  }

  /** Resolves once every cluster's part has a snapshot; rejects if one errs or closes first. */
  ready() {
    return Promise.all([...this.parts.values()].map((p) => p.ready())).then(() => this);
  }

  /** New stream options for every part: each part's fresh snapshot replaces its picture when complete. */
  update(options) {
    if (this._closed) return;
    this.params = paramsOf(options);
    for (const p of this.parts.values()) {
      p._position = '';
      p.error = null;
      p._out = '';
      p._attempt = 0;
      p._authFailures = 0;
    }
    this._sub.fresh();
    this._sub.end();
    this._open('connecting');
  }

  /** Opens the subscription now, with every part (after an error, or to cut a back-off short). */
  retry() {
    if (this._closed) return;
    for (const p of this.parts.values()) {
      p.error = null;
      p._out = '';
      p._authFailures = 0;
    }
    this._sub.fresh(true);
    this._sub.end();
    this._open();
  }

  close() {
    if (this._closed) return;
    this._sub.end();
    clearTimeout(this._partsTimer);
    this._closed = true;
    if (this.client._watches) this.client._watches.delete(this);
    for (const p of this.parts.values()) {
      p._closed = true;
      p._setState('closed');
    }
    if (this._ownsClient) this.client.close();
    this._state();
  }

  // ---- the merged subscription's life ----

  /** The parts the subscription asks for: not stopped, not waiting for their back-off. */
  _members() {
    return [...this.parts.values()].filter((p) => !p._out);
  }

  /**
   * Opens the subscription for its members, each resuming from its own
   * position. `quiet`: the others of a part asked for again, which stay
   * `live` while they resume.
   */
  _open(state, quiet) {
    const members = this._members();
    if (!members.length) return;
    for (const p of members) {
      // The new subscription says again what it knows of each cluster.
      p._streamed = false;
      p._unreachable = false;
      p._begin(quiet && p.state === 'live' && p._position ? 'live' : state);
    }
    const request = {
      resource: this.resource,
      params: Object.assign({}, this.params),
      from: compoundId(members),
      clusters: members.map((p) => p.cluster),
    };
    this._sub.open(request);
  }

  /** A new subscription now for the members (one came back, or needs a snapshot); the others resume. */
  _reopen() {
    this._sub.end();
    this._open(undefined, true);
  }

  _opened() {
    for (const p of this._members()) p._opened();
  }

  _message(msg) {
    const part = msg.cluster ? this.parts.get(msg.cluster) : null;
    if (!part) {
      // About the subscription itself: its ERROR, once every part has
      // ended, or a refusal before any began.
      if (msg.type !== 'ERROR') return;
      this._sub.end();
      // Parts said to be left out, never heard from, wait for their
      // back-off (`_later`); the Status is another part's.
      for (const p of this._members()) if (p._leftOut()) p._out = 'later';
      this._failed(msg.object || statusOf(500, null, 'InternalError'), 0);
      return;
    }
    if (part._out) return; // a part already out; nothing of it is applied
    if (msg.type === 'CLUSTER') return this._cluster(part, msg.object || {});
    if (msg.type === 'ERROR') return this._partFailed(part, msg.object || statusOf(500, null, 'InternalError'), 0);
    part._streamed = true;
    part._attempt = 0;
    part._authFailures = 0;
    part._apply(Object.assign({}, msg, {id: partOfId(msg.id, part.cluster)}));
  }

  /**
   * `CLUSTER`: the part's API server is unreachable (503; the part
   * resumes when it is back), or reached again (200); or the part was
   * left out (its cluster did not list the resource in time, 503, or
   * refused it later). Nothing says which: a part left out is one that
   * had not joined, so a 503 before anything of a part that has no
   * snapshot yet may be the last word on it, and unless the part streams
   * meanwhile, it is asked for again a back-off later (a synced part
   * joins at once, its hub synced, and is only unreachable). A refusal
   * is one of a part that never began: its own, as its ERROR would be.
   */
  _cluster(part, status) {
    if (status.code === 200) {
      part._unreachable = false;
      part.error = null;
      part._setState(part._wanted);
      return;
    }
    if (!part._streamed && verdict(status.code, false) !== 'retry') return this._partFailed(part, status, 0);
    part._unreachable = true;
    part.error = status;
    part.emit('error', status);
    part._setState(part._wanted);
    if (part._leftOut()) this._later(backoff(part._attempt++));
  }

  _dropped() {
    const members = this._members();
    if (!members.length) return;
    for (const p of members) p._setState('reconnecting');
    this._sub.later(this._sub.backoff());
  }

  /**
   * The subscription was refused, or ended. A refusal naming one of its
   * clusters (PROTOCOL: a named cluster that refuses the caller fails the
   * request, its Status naming it) is that part's; the others go on.
   */
  _failed(status, retryAfter) {
    const members = this._members();
    if (!members.length) return;
    const named = this.parts.get(clusterNamedBy(status));
    if (named && !named._out && members.length > 1) {
      this._partFailed(named, status, retryAfter);
      this._open();
      return;
    }
    for (const p of members) {
      p.error = status;
      p.emit('error', status);
    }
    const next = this._sub.verdict(status);
    if (next === 'stop') return this._stop(members);
    for (const p of members) p._setState('reconnecting');
    if (next === 'renew') this._sub.renew(status, (ok) => (ok ? this._open() : this._stop(this._members())));
    else this._sub.later(this._sub.delay(retryAfter));
  }

  /** One cluster's part ended or was refused: it alone leaves the subscription. */
  _partFailed(part, status, retryAfter) {
    part.error = status;
    part.emit('error', status);
    const next = verdict(status.code, part._authFailures > 0 && !this._sub.settled);
    if (next === 'stop') return this._stop([part]);
    part._setState('reconnecting');
    if (next === 'retry') {
      part._out = 'later';
      return this._later(Math.max(retryAfter * 1000 || 0, backoff(part._attempt++)));
    }
    // Its token refused there: one renewal for every part that asks at
    // once (a token's expiry ends them all), then one subscription.
    part._out = 'renew';
    part._authFailures = 1;
    if (this._renewing) return;
    this._renewing = Promise.resolve(this.client.renew(status))
      .catch(() => false)
      .then((ok) => {
        this._renewing = null;
        const waiting = [...this.parts.values()].filter((p) => p._out === 'renew');
        if (this._closed || !waiting.length) return;
        if (!ok) return this._stop(waiting);
        for (const p of waiting) p._out = '';
        this._reopen();
      });
  }

  /** Parts refused for good: out until `retry()` or `update()`. */
  _stop(parts) {
    for (const p of parts) {
      p._out = 'stopped';
      p._setState('error');
    }
  }

  /**
   * In `ms` (or sooner, if already due), the parts waiting for their
   * back-off are asked for again, as are those said to be left out that
   * have not streamed since: a new subscription, the others resuming.
   */
  _later(ms) {
    const due = Date.now() + ms;
    if (this._partsTimer && this._partsDue <= due) return;
    clearTimeout(this._partsTimer);
    this._partsDue = due;
    this._partsTimer = setTimeout(() => {
      this._partsTimer = null;
      let again = false;
      for (const p of this.parts.values()) {
        if (p._out === 'later') p._out = '';
        else if (p._out || !p._leftOut()) continue;
        again = true;
      }
      // A subscription waiting for its own back-off takes them then.
      if (again && !this._sub.waiting) this._reopen();
    }, ms);
  }

  _state() {
    const states = [...this.parts.values()].map((p) => p.state);
    let next;
    if (states.every((s) => s === states[0])) next = states[0];
    else if (states.some((s) => s === 'live')) next = 'partial';
    else next = states.find((s) => s !== 'closed') || 'closed';
    if (next === this.state) return;
    const prev = this.state;
    this.state = next;
    this.emit('state', next, prev);
  }
}

/**
 * One cluster's part of a ClustersWatch (`parts.get(cluster)`): its
 * picture, fed by the merged subscription. `retry()` asks for it again
 * (the other parts resume); options are the ClustersWatch's.
 */
class ClusterPart extends Store {
  constructor(owner, cluster) {
    super(owner.client, owner.resource);
    this.cluster = cluster;
    this._owner = owner;
    /** '' while in the subscription; else out of it: 'later' (its back-off), 'renew' (a token), 'stopped' (refused for good). */
    this._out = '';
    this._attempt = 0;
    this._authFailures = 0;
    /** Whether the subscription has sent anything of its own stream. */
    this._streamed = false;
    /** Whether its API server is unreachable (`CLUSTER` 503), which `state` shows as `reconnecting`. */
    this._unreachable = false;
    /** The state its stream is in, unreachable or not. */
    this._wanted = this.state;
  }

  retry() {
    const owner = this._owner;
    if (owner._closed) return;
    this.error = null;
    this._out = '';
    this._authFailures = 0;
    owner._reopen();
  }

  _resync() {
    this._position = '';
    this._owner._reopen();
  }

  /** Whether it may have been left out of the subscription (`ClustersWatch._cluster`). */
  _leftOut() {
    return this._unreachable && !this._streamed && !this.synced;
  }

  _setState(state) {
    this._wanted = state;
    super._setState(this._unreachable && state !== 'error' && state !== 'closed' ? 'reconnecting' : state);
  }
}

/** `parts`' positions as a merged stream's id: `east=123,west=456`, those that have one, in order. */
function compoundId(parts) {
  return parts
    .filter((p) => p._position)
    .map((p) => p.cluster + '=' + p._position)
    .join(',');
}

/** Cluster `name`'s position in compound id `id` ('' when it has none; `id` itself when not a string). */
function partOfId(id, name) {
  if (typeof id !== 'string') return id;
  for (const part of id.split(',')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq) === name) return part.slice(eq + 1);
  }
  return '';
}

/**
 * The cluster a merged stream's refusal names: its Status message starts
 * `cluster "NAME": ` (the cluster's own answer) or `no cluster "NAME"`
 * (not served). The gateway names it in no other field.
 */
function clusterNamedBy(status) {
  const m = /^(?:no )?cluster "([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)"/.exec((status && status.message) || '');
  return m ? m[1] : null;
}
