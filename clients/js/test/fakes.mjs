// Test doubles: a client that hands each stream's sink to the test, a
// fetch and a WebSocket whose server side the test plays, and message
// builders.

/** Pods as the gateway sends them: `pod('a', {rv: '5', node: 'n1', phase: 'Running'})`. */
export function pod(name, {ns = 'web', rv = '1', node = '', phase = 'Running', labels} = {}) {
  const metadata = {name, namespace: ns, resourceVersion: rv};
  if (labels) metadata.labels = labels;
  return {apiVersion: 'v1', kind: 'Pod', metadata, spec: {nodeName: node}, status: {phase}};
}

export const added = (object, id) => (id === undefined ? {type: 'ADDED', object} : {type: 'ADDED', object, id});
export const modified = (object, id) => ({type: 'MODIFIED', object, id});
export const patched = (object, id) => ({type: 'MODIFIED', object, id, patch: 'merge'});
export const deleted = (object, id) => ({type: 'DELETED', object, id});
export const bookmark = (rv) => ({type: 'BOOKMARK', object: {kind: 'Pod', apiVersion: 'v1', metadata: {resourceVersion: rv}}, id: rv});
export const end = (rv) => ({
  type: 'BOOKMARK',
  object: {kind: 'Pod', apiVersion: 'v1', metadata: {resourceVersion: rv, annotations: {'k8s.io/initial-events-end': 'true'}}},
  id: rv,
});
export const reset = (reason = 'Expired') => ({type: 'RESET', object: {kind: 'Status', apiVersion: 'v1', status: 'Failure', code: 410, reason, message: 'gone'}, id: ''});
export const status = (code, reason, message = reason) => ({kind: 'Status', apiVersion: 'v1', status: 'Failure', code, reason, message});
export const error = (code, reason, message) => ({type: 'ERROR', object: status(code, reason, message)});

/** A message of cluster `cluster`'s part of a merged stream, with the stream's compound `id` where it has one. */
export const inCluster = (cluster, msg, id) => {
  const out = Object.assign({cluster}, msg);
  delete out.id;
  if (id !== undefined) out.id = id;
  return out;
};

/** A client whose streams the test drives: `client.last.sink.message(...)`. */
export function fakeClient({renew = async () => true} = {}) {
  const streams = [];
  return {
    streams,
    retryMs: 0,
    closed: false,
    renewals: 0,
    open(request, sink) {
      const s = {
        request,
        sink,
        closed: false,
        close() {
          s.closed = true;
        },
      };
      streams.push(s);
      return s;
    },
    renew(st) {
      this.renewals += 1;
      return renew(st);
    },
    close() {
      this.closed = true;
    },
    get last() {
      return streams[streams.length - 1];
    },
  };
}

/** Records what a watch emits, in order, as short strings. */
export function record(w) {
  const log = [];
  w.on('added', (o) => log.push('added ' + o.metadata.name));
  w.on('modified', (o) => log.push('modified ' + o.metadata.name));
  w.on('deleted', (o) => log.push('deleted ' + o.metadata.name));
  w.on('synced', (s) => log.push('synced ' + s.resourceVersion));
  w.on('reset', (s) => log.push('reset ' + s.reason));
  w.on('state', (s) => log.push('state ' + s));
  w.on('error', (s) => log.push('error ' + s.code));
  return log;
}

/** A fetch (for SseClient) whose responses the test writes: `calls[i].write(text)`, `.finish()`. */
export function fakeFetch(answer) {
  const calls = [];
  // As browsers' fetch: called as a method of anything but the global, it throws.
  const fetch = async function (url, init) {
    if (this !== undefined && this !== globalThis) throw new TypeError('Illegal invocation');
    const call = {url: new URL(url), init};
    calls.push(call);
    const custom = answer && answer(call);
    if (custom) return custom;
    const encoder = new TextEncoder();
    const body = new ReadableStream({
      start(controller) {
        call.write = (text) => controller.enqueue(encoder.encode(text));
        call.finish = () => controller.close();
      },
    });
    init.signal.addEventListener('abort', () => {
      call.aborted = true;
    });
    return new Response(body, {status: 200, headers: {'Content-Type': 'text/event-stream'}});
  };
  return {fetch, calls};
}

/**
 * A WebSocket class whose instances the test opens, feeds and closes,
 * playing kubefan's side of `/ws`.
 */
export function fakeWebSocket() {
  const sockets = [];
  class FakeSocket {
    constructor(url) {
      this.url = new URL(url);
      this.sent = [];
      this.readyState = 0;
      this.closedWith = null;
      sockets.push(this);
    }

    send(text) {
      if (this.readyState !== 1) throw new Error('not open');
      this.sent.push(JSON.parse(text));
    }

    close(code = 1000) {
      if (this.readyState >= 2) return;
      this.readyState = 3;
      this.closedWith = code;
      queueMicrotask(() => this.onclose && this.onclose({code, reason: ''}));
    }

    // ---- the server's side ----
    accept() {
      this.readyState = 1;
      this.onopen && this.onopen({});
    }

    refuse() {
      this.readyState = 3;
      this.onerror && this.onerror({});
      this.onclose && this.onclose({code: 1006, reason: ''});
    }

    deliver(msg) {
      this.onmessage && this.onmessage({data: JSON.stringify(msg)});
    }

    drop(code = 1006, reason = '') {
      this.readyState = 3;
      this.onclose && this.onclose({code, reason});
    }

    subscribes() {
      return this.sent.filter((m) => m.op === 'subscribe');
    }
  }
  return {WebSocket: FakeSocket, sockets};
}

/** Lets queued callbacks (microtasks, zero-delay timers, port messages) run. */
export function settle() {
  return new Promise((resolve) => setImmediate(resolve));
}
