// Types of kubefan.js: a live store of Kubernetes objects fed by a kubefan
// gateway. The protocol is kubefan's proto/PROTOCOL.md.

/** A Kubernetes object as the gateway sends it (projected by `fields`, if given). */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: {
    name: string;
    namespace?: string;
    uid?: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    [field: string]: unknown;
  };
  [field: string]: unknown;
}

/** A Kubernetes `Status`: why a stream was refused or ended. */
export interface Status {
  kind: 'Status';
  apiVersion?: string;
  status?: 'Failure' | 'Success';
  /** The HTTP status: 400, 401, 403, 404, 410, 429, 503, ... */
  code: number;
  reason: string;
  message: string;
  details?: unknown;
}

/**
 * - `connecting`: a first stream is being opened.
 * - `syncing`: the stream is open and a snapshot is coming.
 * - `live`: the picture is complete and changes are applied as they come.
 * - `reset`: the gateway lost our position (RESET); a fresh snapshot is
 *   coming, and the old picture stays until it is complete.
 * - `reconnecting`: the stream dropped (or the token is being renewed); it
 *   resumes from `resourceVersion`, and the picture stays. A ClustersWatch
 *   part is also `reconnecting` while the gateway cannot reach its
 *   cluster's API server (a `CLUSTER` 503), until it can (`CLUSTER` 200).
 * - `error`: refused (see `error`); not retried until `update()` or `retry()`.
 * - `closed`: `close()` was called.
 */
export type WatchState = 'connecting' | 'syncing' | 'live' | 'reset' | 'reconnecting' | 'error' | 'closed';

/** The state of a client's socket ('shared' and 'ws'); an 'sse' client is always 'open'. */
export type ConnectionState = 'idle' | 'connecting' | 'open' | 'reconnecting' | 'closed';

export interface WatchOptions {
  /** One namespace, several (comma-separated or a list); absent: all. */
  namespace?: string | string[];
  /** Full Kubernetes syntax: `app in (web,db), tier!=cache`. */
  labelSelector?: string;
  /** `=`, `==`, `!=` on any dotted path: `spec.nodeName=node-1`. */
  fieldSelector?: string;
  /** Projection: dotted paths kept (plus the object's identity). */
  fields?: string | string[];
  /** MODIFIED as RFC 7386 merge patches (`delta=merge-patch`), applied by the store. */
  patch?: boolean;
}

export interface ConnectOptions {
  /**
   * The gateway's URL. Default: the gateway this module was imported from
   * (`…/lib/kubefan.js`), else the page's origin. Required in Node.
   */
  base?: string | URL;
  /**
   * A gateway serving several clusters (`--cluster`): the one to use, its
   * streams at `base` + `/clusters/NAME/`. Default: the gateway's root
   * paths (its `--default-cluster`, or its only cluster).
   */
  cluster?: string;
  /** 'shared' (default in pages with SharedWorker), 'ws' (default elsewhere with WebSocket), or 'sse'. */
  transport?: 'shared' | 'ws' | 'sse';
  /** A bearer token (a JWT, a Kubernetes token). */
  token?: string;
  /**
   * Called for the first token when `token` is not given, and again to
   * renew it when the gateway says it expired or refuses it (401). The
   * streams then resume where they were, with no RESET.
   */
  getToken?: (context: {reason: 'connect' | 'renew'}) => string | undefined | Promise<string | undefined>;
  /** `fetch` credentials mode for SSE and probes (default 'same-origin': cookies to the page's own origin). */
  credentials?: RequestCredentials;
  /** SSE: a stream silent this long (no event, no keep-alive) is dropped and resumed. Default 45000. */
  idleTimeoutMs?: number;
  /** 'ws': how long a socket with no subscription stays open. Default 5000. */
  lingerMs?: number;
  /** 'shared': the worker script. Default: kubefan-worker.js beside this module. */
  workerUrl?: string | URL;
  /** Implementations to use instead of the globals (Node before 22: the `ws` package's WebSocket). */
  fetch?: typeof fetch;
  WebSocket?: unknown;
  SharedWorker?: unknown;
}

export interface Synced {
  /** The resourceVersion the snapshot reflects. */
  resourceVersion: string;
  size: number;
}

export interface WatchEvents<T> {
  /** An object appeared (a change, or one the latest snapshot has that the picture had not). */
  added: (object: T) => void;
  /** An object changed; `previous` is the version the store held. */
  modified: (object: T, previous: T) => void;
  /** An object is gone; `object` is its last state. */
  deleted: (object: T, previous: T) => void;
  /** A snapshot was applied (the first one, or one after a RESET or `update()`); its differences came before as added/modified/deleted. */
  synced: (info: Synced) => void;
  /** The gateway reset our position; a snapshot follows. */
  reset: (status: Status) => void;
  /** A progress BOOKMARK moved the position. */
  bookmark: (resourceVersion: string) => void;
  state: (state: WatchState, previous: WatchState) => void;
  /** A stream was refused or ended with an ERROR (token expired, shutdown, bad selector, ...). */
  error: (status: Status) => void;
  /** The Kubernetes API server's warning about the resource (a deprecated API's), as `/ws` passes it on. */
  warning: (message: string) => void;
}

/** A live store of one resource's objects, keyed `namespace/name` (or `name`). */
export class Watch<T extends KubeObject = KubeObject> {
  readonly client: Client;
  readonly resource: string;
  /** The cluster this watch named on a client at the gateway's root; null: its client's. */
  readonly cluster: string | null;
  /** The picture: key → object. Read it, do not modify it. */
  readonly objects: ReadonlyMap<string, T>;
  readonly state: WatchState;
  /** The position of the picture ('' before the first snapshot). */
  readonly resourceVersion: string;
  /** Whether a snapshot has been applied. */
  readonly synced: boolean;
  /** Snapshots applied (a resume applies none). */
  readonly snapshots: number;
  /** RESETs received. */
  readonly resets: number;
  /** Why the last stream failed; null once one opens again. */
  readonly error: Status | null;
  readonly size: number;
  get(key: string): T | undefined;
  get(namespace: string, name: string): T | undefined;
  list(): T[];
  [Symbol.iterator](): IterableIterator<T>;
  /** Subscribes to an event; returns the function that unsubscribes. */
  on<E extends keyof WatchEvents<T>>(type: E, listener: WatchEvents<T>[E]): () => void;
  off<E extends keyof WatchEvents<T>>(type: E, listener: WatchEvents<T>[E]): void;
  /** Resolves at the first snapshot; rejects (with `.status`) if the watch errs or closes first. */
  ready(): Promise<this>;
  /** New stream options: a fresh snapshot replaces the picture once complete. */
  update(options: WatchOptions): void;
  /** Opens a stream now, resuming (after `error`, or to cut a back-off short). */
  retry(): void;
  close(): void;
}

export interface ClientEvents {
  state: (state: ConnectionState, previous: ConnectionState) => void;
  /** A message the gateway refused that concerns no watch, or a failed token renewal. */
  error: (status: Status) => void;
  /** 'shared' only: the worker could not be used; this tab has a socket of its own. */
  fallback: (reason: string) => void;
  /** 'ws' only: the gateway took a `renewSession` (its streams' seconds left). */
  renewed: (expiresInSeconds: number) => void;
}

/**
 * A watch's options on a client. On a client at the gateway's root,
 * `cluster` names the cluster the watch is of (its `/ws` subscription
 * names it; over SSE its request goes to `/clusters/NAME/`), so one socket
 * carries every cluster's watches. On a client of one cluster, naming
 * another throws.
 */
export type ClientWatchOptions = WatchOptions & {cluster?: string};

/** A connection to one gateway, carrying any number of watches. */
export interface Client {
  readonly kind: 'shared' | 'ws' | 'sse';
  readonly base: string;
  /** The cluster `base` is under (`ConnectOptions.cluster`); null at the gateway's root. */
  readonly cluster: string | null;
  readonly state: ConnectionState;
  watch<T extends KubeObject = KubeObject>(resource: string, options?: ClientWatchOptions): Watch<T>;
  on<E extends keyof ClientEvents>(type: E, listener: ClientEvents[E]): () => void;
  off<E extends keyof ClientEvents>(type: E, listener: ClientEvents[E]): void;
  /**
   * A signed-in session was refreshed (`POST /session/refresh`, perhaps
   * at another replica): its `renewal`, for this client's streams, so
   * that those on another replica run past the old id-token (`/ws`
   * `renew`). Whether it was sent: false over SSE (a stream that then
   * ends with a 401 resumes) or with no socket open.
   */
  renewSession(renewal: string): boolean;
  /** Closes every watch and the connection. */
  close(): void;
}

/**
 * A client for a gateway. In a page, the default shares one `/ws` socket
 * between every tab of the browser (a SharedWorker), and falls back to a
 * socket per tab where SharedWorker is missing.
 */
export function connect(options?: ConnectOptions): Client;

/** One watch on a client of its own, closed with it. */
export function watch<T extends KubeObject = KubeObject>(resource: string, options?: WatchOptions & ConnectOptions & {client?: Client}): Watch<T>;
/**
 * One resource across several clusters of a gateway: one merged
 * subscription (`clusters`), on one client at the gateway's root
 * (`client`, else one made from the options and closed with it), one
 * picture.
 */
export function watch<T extends KubeObject = KubeObject>(resource: string, options: WatchOptions & ConnectOptions & {clusters: string[]; client?: Client}): ClustersWatch<T>;

/** The events of a ClustersWatch: a Watch's, each with the cluster last. */
export interface ClustersWatchEvents<T> {
  added: (object: T, cluster: string) => void;
  modified: (object: T, previous: T, cluster: string) => void;
  deleted: (object: T, previous: T, cluster: string) => void;
  /** One cluster's part applied a snapshot; `resourceVersion` is that part's. */
  synced: (info: Synced & {cluster: string}) => void;
  reset: (status: Status, cluster: string) => void;
  bookmark: (resourceVersion: string, cluster: string) => void;
  /** 'live' once every part is; 'partial' while some are and others are not. */
  state: (state: WatchState | 'partial', previous: WatchState | 'partial') => void;
  /**
   * A part was refused or ended (its Status names its cluster), or the
   * gateway cannot reach its cluster's API server (`CLUSTER` 503); a
   * refusal of the whole subscription is told once for each part.
   */
  error: (status: Status, cluster: string) => void;
  warning: (message: string, cluster: string) => void;
}

/**
 * One cluster's part of a ClustersWatch: its picture and its state, fed
 * by the messages of the merged subscription that name its cluster. Its
 * events are a Watch's, without the cluster.
 */
export interface ClustersWatchPart<T extends KubeObject = KubeObject> {
  readonly client: Client;
  readonly resource: string;
  readonly cluster: string;
  readonly objects: ReadonlyMap<string, T>;
  readonly state: WatchState;
  /** Its own position: its cluster's part of the compound id. */
  readonly resourceVersion: string;
  readonly synced: boolean;
  readonly snapshots: number;
  readonly resets: number;
  /** Why it last failed, or why its cluster is unreachable; null once it streams again. */
  readonly error: Status | null;
  readonly size: number;
  get(key: string): T | undefined;
  get(namespace: string, name: string): T | undefined;
  list(): T[];
  [Symbol.iterator](): IterableIterator<T>;
  on<E extends keyof WatchEvents<T>>(type: E, listener: WatchEvents<T>[E]): () => void;
  off<E extends keyof WatchEvents<T>>(type: E, listener: WatchEvents<T>[E]): void;
  ready(): Promise<this>;
  /** Asks for this part again now (after an error): a new subscription, the other parts resuming in it. */
  retry(): void;
}

/**
 * One resource across several clusters (`watch(resource, {clusters})`):
 * one merged subscription (`clusters` in a `/ws` subscribe; over SSE,
 * `GET /stream/{resource}?clusters=a,b`), resumed with its compound id,
 * and a part per cluster, each keeping its own snapshot, changes and
 * RESETs. A part's ERROR, or a refusal naming its cluster, takes that
 * part alone out of the subscription: for good on 400/403/404 (until
 * `retry()`), else until a new subscription a back-off later, the others
 * resuming in it.
 */
export class ClustersWatch<T extends KubeObject = KubeObject> {
  /** The client the subscription is on. */
  readonly client: Client;
  readonly resource: string;
  readonly clusters: string[];
  /** cluster → its part. */
  readonly parts: ReadonlyMap<string, ClustersWatchPart<T>>;
  readonly state: WatchState | 'partial';
  /** `cluster/namespace/name` → object. */
  readonly objects: ReadonlyMap<string, T>;
  readonly size: number;
  /** Whether every part has applied a snapshot. */
  readonly synced: boolean;
  /** Every part's position (those that have one), the compound id resumed from: `east=123,west=456`. */
  readonly resourceVersion: string;
  /** Snapshots applied and RESETs received, over every part. */
  readonly snapshots: number;
  readonly resets: number;
  /** The first part's last error; null if none has one. */
  readonly error: Status | null;
  get(cluster: string, key: string): T | undefined;
  get(cluster: string, namespace: string, name: string): T | undefined;
  /** `[cluster, object]` for every object. */
  list(): Array<[string, T]>;
  on<E extends keyof ClustersWatchEvents<T>>(type: E, listener: ClustersWatchEvents<T>[E]): () => void;
  off<E extends keyof ClustersWatchEvents<T>>(type: E, listener: ClustersWatchEvents<T>[E]): void;
  /** Resolves once every part has a snapshot; rejects if one errs or closes first. */
  ready(): Promise<this>;
  /** New stream options for every part: each one's fresh snapshot replaces its picture once complete. */
  update(options: WatchOptions): void;
  /** Opens the subscription now with every part, each resuming (after `error`, or to cut a back-off short). */
  retry(): void;
  close(): void;
}

/** RFC 7386 JSON Merge Patch, as a new value. */
export function mergePatch(target: unknown, patch: unknown): unknown;

/** `namespace/name`, or `name` for cluster-scoped objects. */
export function keyOf(object: {metadata?: {name?: string; namespace?: string}}): string;

/** The annotation on the BOOKMARK that ends a snapshot. */
export const INITIAL_EVENTS_END: 'k8s.io/initial-events-end';

/** SSE parsing as the HTML standard specifies it; `id` is the event's own id field. */
export class EventStreamParser {
  constructor(onEvent: (event: {type: string; data: string; id: string | undefined}) => void, onRetry?: (ms: number) => void);
  feed(text: string): void;
  end(): void;
}

export class SseClient implements Client {
  constructor(options?: ConnectOptions);
  readonly kind: 'sse';
  readonly base: string;
  /** The cluster `base` is under (`ConnectOptions.cluster`); null at the gateway's root. */
  readonly cluster: string | null;
  readonly state: ConnectionState;
  /** The `retry:` hint of the last stream, in ms. */
  readonly retryMs: number;
  watch<T extends KubeObject = KubeObject>(resource: string, options?: ClientWatchOptions): Watch<T>;
  on<E extends keyof ClientEvents>(type: E, listener: ClientEvents[E]): () => void;
  off<E extends keyof ClientEvents>(type: E, listener: ClientEvents[E]): void;
  close(): void;
}

export class WsClient implements Client {
  constructor(options?: ConnectOptions);
  readonly kind: 'ws';
  readonly base: string;
  /** The cluster `base` is under (`ConnectOptions.cluster`); null at the gateway's root. */
  readonly cluster: string | null;
  readonly state: ConnectionState;
  watch<T extends KubeObject = KubeObject>(resource: string, options?: ClientWatchOptions): Watch<T>;
  on<E extends keyof ClientEvents>(type: E, listener: ClientEvents[E]): () => void;
  off<E extends keyof ClientEvents>(type: E, listener: ClientEvents[E]): void;
  close(): void;
}

export class SharedClient implements Client {
  constructor(options?: ConnectOptions);
  readonly kind: 'shared';
  readonly base: string;
  /** The cluster `base` is under (`ConnectOptions.cluster`); null at the gateway's root. */
  readonly cluster: string | null;
  readonly state: ConnectionState;
  /** Whether the watches go through the shared worker (false before it answered, or after a fallback). */
  readonly shared: boolean;
  /** Why this tab uses a socket of its own, if it does. */
  readonly fallbackReason?: string;
  watch<T extends KubeObject = KubeObject>(resource: string, options?: ClientWatchOptions): Watch<T>;
  on<E extends keyof ClientEvents>(type: E, listener: ClientEvents[E]): () => void;
  off<E extends keyof ClientEvents>(type: E, listener: ClientEvents[E]): void;
  close(): void;
}

/** The worker's end of SharedClient (kubefan-worker.js): `attach(port)` per connecting tab. */
export class SharedHub {
  constructor(options?: Pick<ConnectOptions, 'fetch' | 'WebSocket' | 'lingerMs'>);
  attach(port: MessagePort): void;
  detach(port: MessagePort): void;
}
