//! Test support: the real gateway app on port 0 against the simulated API
//! server, an SSE client that checks every frame against
//! `proto/kubefan.schema.json`, and a client-side view that applies events
//! the way the protocol says a client must, failing on any gap, duplicate
//! or out-of-order resourceVersion.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use kubefan::app::App;
use kubefan::config::Config;
use kubefan_sim::{Sim, SimConfig, SimServer};
use serde_json::Value;

/// Every wait in the tests is bounded by this.
pub const WAIT: Duration = Duration::from_secs(20);

pub struct TestEnv {
    pub sim: Sim,
    pub server: SimServer,
    pub app: App,
    pub base: String,
    pub http: reqwest::Client,
}

/// Gateway settings for tests: port 0, quick back-off, fast keep-alives.
pub fn test_config(boot: &[&str]) -> Config {
    let mut cfg = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        workers: 2,
        shutdown_grace: Duration::from_secs(5),
        ..Config::default()
    };
    cfg.upstream.boot_resources = boot.iter().map(|s| s.to_string()).collect();
    cfg.upstream.informer.backoff_min = Duration::from_millis(20);
    cfg.upstream.informer.backoff_max = Duration::from_millis(200);
    cfg.stream.sync_timeout = Duration::from_secs(10);
    cfg
}

pub fn sim_config() -> SimConfig {
    SimConfig {
        bookmark_interval: Duration::from_millis(500),
        ..SimConfig::default()
    }
}

/// Starts a simulated API server and the gateway against it.
pub async fn spawn(sim: Sim, cfg: Config) -> TestEnv {
    spawn_as(sim, cfg, None).await
}

/// [`spawn`], the gateway authenticating to the simulator with `token`.
pub async fn spawn_as(sim: Sim, cfg: Config, token: Option<&str>) -> TestEnv {
    let server = sim
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .expect("sim binds");
    let config = match token {
        Some(token) => server.client_config_with_token(token),
        None => server.client_config(),
    };
    let client = kube::Client::try_from(config).expect("kube client");
    let app = App::build(cfg, client).await.expect("gateway starts");
    let base = format!("http://{}", app.local_addr());
    TestEnv {
        sim,
        server,
        app,
        base,
        http: reqwest::Client::new(),
    }
}

impl TestEnv {
    /// Waits until the gateway's hub for `resource` has synced.
    pub async fn synced(&self, resource: &str) {
        let hub = self
            .app
            .informers()
            .hub(resource)
            .await
            .expect("resource resolves");
        assert!(hub.wait_synced(WAIT).await, "{resource} did not sync");
    }

    /// Waits until the gateway's hub for `resource` has taken in every
    /// upstream change up to `rv`.
    pub async fn caught_up(&self, resource: &str, rv: u64) {
        let hub = self
            .app
            .informers()
            .hub(resource)
            .await
            .expect("resource resolves");
        assert!(
            hub.wait_for_rv(rv, WAIT).await,
            "gateway did not reach resourceVersion {rv}"
        );
    }

    pub async fn sse(&self, path_and_query: &str) -> SseClient {
        self.sse_with(path_and_query, None).await
    }

    pub async fn sse_with(&self, path_and_query: &str, last_event_id: Option<&str>) -> SseClient {
        let mut req = self.http.get(format!("{}{}", self.base, path_and_query));
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        let resp = tokio::time::timeout(WAIT, req.send())
            .await
            .expect("response in time")
            .expect("request");
        assert_eq!(resp.status(), 200, "GET {path_and_query}");
        SseClient::new(resp)
    }

    /// `GET path` with `token` as `Authorization: Bearer`, in time.
    pub async fn get_as(&self, path: &str, token: &str) -> reqwest::Response {
        tokio::time::timeout(
            WAIT,
            self.http
                .get(format!("{}{path}", self.base))
                .bearer_auth(token)
                .send(),
        )
        .await
        .expect("response in time")
        .expect("request")
    }

    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let resp =
            tokio::time::timeout(WAIT, self.http.get(format!("{}{}", self.base, path)).send())
                .await
                .expect("response in time")
                .expect("request");
        let status = resp.status().as_u16();
        let body = resp.json::<Value>().await.expect("JSON body");
        (status, body)
    }

    /// The gateway's `/metrics` text (with `token` when auth is on).
    pub async fn metrics(&self) -> String {
        self.metrics_with(None).await
    }

    /// The gateway's `/metrics` text: from its metrics listener, if it has
    /// one and no `token` is given (open there whatever the auth).
    pub async fn metrics_with(&self, token: Option<&str>) -> String {
        let url = match self.app.metrics_addr() {
            Some(addr) if token.is_none() => format!("http://{addr}/metrics"),
            _ => format!("{}/metrics", self.base),
        };
        let mut req = self.http.get(url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        tokio::time::timeout(WAIT, async {
            req.send().await.unwrap().text().await.unwrap()
        })
        .await
        .expect("metrics in time")
    }

    /// A kube client whose kubeconfig points at this gateway, sending
    /// `token` as its bearer token when given.
    pub async fn kube_client(&self, token: Option<&str>) -> kube::Client {
        use kube::config::{
            AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
            NamedContext,
        };
        let kc = Kubeconfig {
            clusters: vec![NamedCluster {
                name: "kubefan".into(),
                cluster: Some(Cluster {
                    server: Some(self.base.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            auth_infos: vec![NamedAuthInfo {
                name: "user".into(),
                auth_info: Some(AuthInfo {
                    token: token.map(|t| t.to_string().into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            contexts: vec![NamedContext {
                name: "kubefan".into(),
                context: Some(Context {
                    cluster: "kubefan".into(),
                    user: Some("user".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            current_context: Some("kubefan".into()),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        kube::Client::try_from(config).unwrap()
    }

    pub async fn stop(self) {
        tokio::time::timeout(WAIT, self.app.stop())
            .await
            .expect("gateway stops in time");
        self.server.stop().await;
    }
}

/// One SSE event as sent: `id` is `None` without an `id:` line and
/// A view of a stream's events up to its first snapshot's end (each
/// event waited for at most [`WAIT`], the whole at most [`WAIT`]).
pub async fn first_snapshot(sse: &mut SseClient) -> ClientView {
    let mut view = ClientView::new();
    tokio::time::timeout(WAIT, async {
        while view.snapshots == 0 {
            view.apply(&sse.next().await.expect("the snapshot"));
        }
    })
    .await
    .expect("the snapshot in time");
    view
}

/// `Some("")` for an `id:` that clears the last event id.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: Value,
}

pub struct SseClient {
    pub headers: reqwest::header::HeaderMap,
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buf: Vec<u8>,
    pub retry: Option<u64>,
    pub comments: usize,
    /// Body bytes read so far.
    pub received: u64,
}

impl SseClient {
    pub fn new(resp: reqwest::Response) -> SseClient {
        SseClient {
            headers: resp.headers().clone(),
            body: resp.bytes_stream().boxed(),
            buf: Vec::new(),
            retry: None,
            comments: 0,
            received: 0,
        }
    }

    /// The next event (comments and `retry:` are recorded, not returned);
    /// `None` when the stream ends. Panics after [`WAIT`].
    pub async fn next(&mut self) -> Option<SseEvent> {
        tokio::time::timeout(WAIT, self.next_unbounded())
            .await
            .expect("SSE event in time")
    }

    /// The `ERROR` event that ends the stream, each event before it
    /// applied to `view`; panics if the stream ends first (each event is
    /// waited for at most [`WAIT`]).
    pub async fn until_error(&mut self, view: &mut ClientView) -> SseEvent {
        loop {
            let ev = self.next().await.expect("an ERROR before the end");
            if ev.event == "ERROR" {
                return ev;
            }
            view.apply(&ev);
        }
    }

    /// Waits for the next keep-alive comment; panics if an event comes
    /// first or after [`WAIT`].
    pub async fn next_comment(&mut self) {
        let before = self.comments;
        tokio::time::timeout(WAIT, async {
            loop {
                while let Some(end) = find(&self.buf, b"\n\n") {
                    let block: Vec<u8> = self.buf.drain(..end + 2).collect();
                    if let Some(ev) = self.parse_block(&block[..end]) {
                        panic!("expected a keep-alive, got {ev:?}");
                    }
                    if self.comments > before {
                        return;
                    }
                }
                match self.body.next().await {
                    Some(Ok(chunk)) => {
                        self.received += chunk.len() as u64;
                        self.buf.extend_from_slice(&chunk);
                    }
                    other => panic!("stream ended or failed waiting for a keep-alive: {other:?}"),
                }
            }
        })
        .await
        .expect("keep-alive in time")
    }

    async fn next_unbounded(&mut self) -> Option<SseEvent> {
        loop {
            while let Some(end) = find(&self.buf, b"\n\n") {
                let block: Vec<u8> = self.buf.drain(..end + 2).collect();
                if let Some(ev) = self.parse_block(&block[..end]) {
                    return Some(ev);
                }
            }
            match self.body.next().await {
                Some(Ok(chunk)) => {
                    self.received += chunk.len() as u64;
                    self.buf.extend_from_slice(&chunk);
                }
                Some(Err(err)) => panic!("SSE body error: {err}"),
                None => {
                    assert!(
                        self.buf.is_empty(),
                        "stream ended inside a frame: {:?}",
                        String::from_utf8_lossy(&self.buf)
                    );
                    return None;
                }
            }
        }
    }

    fn parse_block(&mut self, block: &[u8]) -> Option<SseEvent> {
        let text = std::str::from_utf8(block).expect("SSE is UTF-8");
        let (mut event, mut id, mut data) = (None, None, None);
        for line in text.split('\n') {
            if line.starts_with(':') {
                self.comments += 1;
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => event = Some(value.to_string()),
                "id" => id = Some(value.to_string()),
                "data" => {
                    assert!(
                        data.is_none(),
                        "kubefan sends one data line per event: {text}"
                    );
                    data = Some(value.to_string());
                }
                "retry" => self.retry = Some(value.parse().expect("numeric retry")),
                other => panic!("unknown SSE field {other:?} in {text}"),
            }
        }
        let data = data?;
        let event = event.expect("every kubefan event is named");
        let data: Value = serde_json::from_str(&data).expect("data is JSON");
        validate(&data);
        assert_eq!(data["type"], event.as_str(), "event name equals data.type");
        Some(SseEvent { event, id, data })
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn schema() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proto/kubefan.schema.json"
        ))
        .unwrap();
        serde_json::from_str(&text).unwrap()
    })
}

/// Validates a stream message against the protocol schema.
pub fn validate(message: &Value) {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    let v = V.get_or_init(|| jsonschema::validator_for(schema()).expect("schema compiles"));
    let errors: Vec<String> = v.iter_errors(message).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "message violates the schema: {errors:?}\n{message}"
    );
}

/// Validates an HTTP error body against `$defs/status`.
pub fn validate_status(body: &Value) {
    validate_def("status", body);
}

/// Validates `value` against the schema's `$defs/{name}` (e.g. `wsMessage`,
/// `muxMessage`, `clientMessage`).
pub fn validate_def(name: &str, value: &Value) {
    static VALIDATORS: OnceLock<Mutex<HashMap<String, Arc<jsonschema::Validator>>>> =
        OnceLock::new();
    let v = VALIDATORS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(name.to_string())
        .or_insert_with(|| {
            let mut s = schema().clone();
            assert!(
                s["$defs"].get(name).is_some(),
                "the schema has no $defs/{name}"
            );
            s.as_object_mut().unwrap().remove("oneOf");
            s["$ref"] = Value::String(format!("#/$defs/{name}"));
            Arc::new(jsonschema::validator_for(&s).expect("schema compiles"))
        })
        .clone();
    let errors: Vec<String> = v.iter_errors(value).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "message violates $defs/{name}: {errors:?}\n{value}"
    );
}

/// What a protocol-abiding client holds, with checks on everything it is sent.
#[derive(Debug)]
pub struct ClientView {
    /// key → object, the client's state.
    pub objects: BTreeMap<String, Value>,
    snapshot: Option<BTreeMap<String, Value>>,
    in_snapshot: bool,
    /// The newest id received (what EventSource would send on reconnect).
    pub last_id: Option<String>,
    /// The resourceVersion position reached.
    pub position: u64,
    pub resets: Vec<String>,
    pub snapshots: usize,
    /// (type, resourceVersion) of every change received after a snapshot.
    pub changes: Vec<(String, u64)>,
    pub errors: usize,
    /// MODIFIED events received as merge patches.
    pub patches: usize,
    /// After a resume, until the first event with an id: the protocol lets
    /// the start of a relist run (events sharing one resourceVersion, only
    /// the last with an id) arrive again, and says re-applying it is
    /// harmless. Only then are repeats accepted.
    replaying: bool,
}

pub fn key_of(obj: &Value) -> String {
    let m = &obj["metadata"];
    match m["namespace"].as_str() {
        Some(ns) => format!("{ns}/{}", m["name"].as_str().unwrap()),
        None => m["name"].as_str().unwrap().to_string(),
    }
}

pub fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

impl Default for ClientView {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientView {
    /// A view that starts from a stream's beginning.
    pub fn new() -> ClientView {
        ClientView {
            objects: BTreeMap::new(),
            snapshot: None,
            in_snapshot: true,
            last_id: None,
            position: 0,
            resets: Vec::new(),
            snapshots: 0,
            changes: Vec::new(),
            errors: 0,
            patches: 0,
            replaying: false,
        }
    }

    /// Continues a view on a resumed stream (no snapshot expected first).
    pub fn resume(&mut self) {
        self.in_snapshot = false;
        self.snapshot = None;
        self.replaying = true;
    }

    pub fn apply(&mut self, ev: &SseEvent) {
        if let Some(id) = &ev.id {
            if !id.is_empty() {
                let n: u64 = id
                    .split('~')
                    .next()
                    .unwrap()
                    .parse()
                    .expect("ids are resourceVersions");
                assert!(
                    n >= self.position,
                    "id {n} went back from {}",
                    self.position
                );
                self.position = n;
            }
            self.last_id = Some(id.clone()).filter(|s| !s.is_empty());
        }
        let obj = &ev.data["object"];
        match ev.event.as_str() {
            "RESET" => {
                self.resets
                    .push(obj["reason"].as_str().unwrap().to_string());
                self.in_snapshot = true;
                self.snapshot = Some(BTreeMap::new());
            }
            "ADDED" if self.in_snapshot => {
                assert!(ev.id.is_none(), "snapshot objects carry no id");
                let prev = self
                    .snapshot
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key_of(obj), obj.clone());
                assert!(
                    prev.is_none(),
                    "object twice in one snapshot: {}",
                    key_of(obj)
                );
            }
            "BOOKMARK" => {
                let end = obj["metadata"]["annotations"]["k8s.io/initial-events-end"] == "true";
                if end {
                    assert!(self.in_snapshot, "snapshot end outside a snapshot");
                    self.objects = self.snapshot.take().unwrap_or_default();
                    self.in_snapshot = false;
                    self.snapshots += 1;
                } else {
                    assert!(!self.in_snapshot, "progress bookmark inside a snapshot");
                }
            }
            "ADDED" | "MODIFIED" | "DELETED" => {
                let key = key_of(obj);
                let rv = rv_of(obj);
                match ev.event.as_str() {
                    "ADDED" => {
                        let had = self.objects.insert(key.clone(), obj.clone()).is_some();
                        assert!(!had || self.replaying, "duplicate ADDED {key}");
                    }
                    "MODIFIED" if ev.data["patch"] == "merge" => {
                        let held = self
                            .objects
                            .get_mut(&key)
                            .unwrap_or_else(|| panic!("patch for unknown {key}"));
                        let before = rv_of(held);
                        json_patch::merge(held, obj);
                        assert!(rv_of(held) > before, "patched {key} does not move forward");
                        self.patches += 1;
                    }
                    "MODIFIED" => {
                        let old = self
                            .objects
                            .insert(key.clone(), obj.clone())
                            .unwrap_or_else(|| panic!("MODIFIED of unknown {key}"));
                        assert!(
                            rv > rv_of(&old) || (self.replaying && rv == rv_of(&old)),
                            "MODIFIED {key} does not move forward"
                        );
                    }
                    _ => {
                        let had = self.objects.remove(&key).is_some();
                        assert!(had || self.replaying, "DELETED of unknown {key}");
                    }
                }
                // An event without an id sits at the position of the run it
                // belongs to (its object may carry an older version).
                let event_rv = ev
                    .id
                    .as_deref()
                    .and_then(|i| i.split('~').next().unwrap().parse().ok())
                    .unwrap_or(self.position);
                if let Some((_, last)) = self.changes.last() {
                    assert!(event_rv >= *last || self.replaying, "changes out of order");
                }
                self.changes.push((ev.event.clone(), event_rv));
                if ev.id.as_deref().is_some_and(|i| !i.is_empty()) {
                    self.replaying = false;
                }
            }
            "ERROR" => self.errors += 1,
            other => panic!("unknown event {other}"),
        }
    }

    /// A new stream without a resume position: its snapshot will replace
    /// everything, so any half-received one is dropped.
    pub fn restart(&mut self) {
        self.in_snapshot = true;
        self.snapshot = None;
        self.replaying = false;
    }

    /// Whether a snapshot is being received.
    pub fn in_snapshot(&self) -> bool {
        self.in_snapshot
    }

    /// Whether the position has reached `rv` with no snapshot half-received.
    pub fn settled(&self, rv: u64) -> bool {
        self.position >= rv && !self.in_snapshot
    }

    /// Reads events until the position reaches `rv` (and no snapshot is
    /// half-received).
    pub async fn follow(&mut self, sse: &mut SseClient, rv: u64) {
        while self.position < rv || self.in_snapshot {
            let ev = sse
                .next()
                .await
                .unwrap_or_else(|| panic!("stream ended at {} before {rv}", self.position));
            self.apply(&ev);
        }
    }

    /// Compares with the simulated server's objects as a view shows them:
    /// `upstream` already filtered, each projected by `projection` (or
    /// compared on the usual fields without one).
    pub fn assert_matches_view(
        &self,
        upstream: &[Value],
        projection: Option<&kubefan::hub::projection::Projection>,
    ) {
        let Some(projection) = projection else {
            return self.assert_matches(upstream);
        };
        let want: BTreeMap<String, Value> = upstream
            .iter()
            .map(|o| (key_of(o), projection.apply(o)))
            .collect();
        assert_eq!(
            self.objects.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "the client's objects differ from the filtered upstream"
        );
        // A projected view skips changes it does not show, so an object's
        // resourceVersion is that of the last change it showed: not compared.
        let without_rv = |o: &Value| {
            let mut o = o.clone();
            o["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("resourceVersion");
            o
        };
        for (k, o) in &want {
            assert_eq!(
                without_rv(&self.objects[k]),
                without_rv(o),
                "projected object {k} differs"
            );
        }
    }

    /// Compares with the simulated server's objects: same keys, and per
    /// object the same resourceVersion, labels, uid, spec and status.
    pub fn assert_matches(&self, upstream: &[Value]) {
        let want: BTreeMap<String, Value> = upstream
            .iter()
            .map(|o| {
                let mut o = o.clone();
                o["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("managedFields");
                (key_of(&o), o)
            })
            .collect();
        let got_keys: Vec<&String> = self.objects.keys().collect();
        let want_keys: Vec<&String> = want.keys().collect();
        assert_eq!(
            got_keys, want_keys,
            "the client's objects differ from upstream"
        );
        for (k, o) in &want {
            let got = &self.objects[k];
            for path in [
                "/metadata/resourceVersion",
                "/metadata/labels",
                "/metadata/uid",
                "/spec",
                "/status",
                "/kind",
                "/apiVersion",
            ] {
                assert_eq!(
                    got.pointer(path),
                    o.pointer(path),
                    "object {k} differs at {path}"
                );
            }
            assert!(
                got["metadata"].get("managedFields").is_none(),
                "managedFields were not stripped"
            );
        }
    }
}

/// The access log as the gateway writes it (`kubefan::access` lines as
/// JSON), captured for the whole test binary: tests tell their own lines
/// apart by principal.
pub struct AccessLog {
    lines: Mutex<Vec<Value>>,
    written: tokio::sync::Notify,
}

struct AccessLogWriter;

impl std::io::Write for AccessLogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let log = access_log();
        for line in buf.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            if let Ok(v) = serde_json::from_slice::<Value>(line) {
                log.lines.lock().unwrap().push(v);
            }
        }
        log.written.notify_waiters();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The captured access log (installing the capture on first use).
pub fn access_log() -> &'static AccessLog {
    static LOG: OnceLock<AccessLog> = OnceLock::new();
    static INSTALLED: OnceLock<()> = OnceLock::new();
    let log = LOG.get_or_init(|| AccessLog {
        lines: Mutex::new(Vec::new()),
        written: tokio::sync::Notify::new(),
    });
    INSTALLED.get_or_init(|| {
        use tracing_subscriber::layer::{Layer, SubscriberExt};
        let layer = tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_writer(|| AccessLogWriter)
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target("kubefan::access", tracing::Level::INFO)
                    // What the issuer's discovery says went wrong.
                    .with_target("kubefan::auth::oidc::keys", tracing::Level::WARN),
            );
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer));
    });
    log
}

impl AccessLog {
    /// Waits (at most [`WAIT`]) for a line `pick` accepts, and returns it.
    pub async fn wait_for(&self, what: &str, pick: impl Fn(&Value) -> bool) -> Value {
        tokio::time::timeout(WAIT, async {
            loop {
                let written = self.written.notified();
                tokio::pin!(written);
                // Registered before looking, so no line slips in between.
                written.as_mut().enable();
                if let Some(line) = self.lines.lock().unwrap().iter().find(|l| pick(l)) {
                    return line.clone();
                }
                written.await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no access-log line {what}: {:?}",
                self.lines.lock().unwrap()
            )
        })
    }

    /// Every line captured so far.
    pub fn all(&self) -> Vec<Value> {
        self.lines.lock().unwrap().clone()
    }
}

/// A CA, and certificates it signs for 127.0.0.1 and localhost.
pub struct Authority(rcgen::CertifiedIssuer<'static, rcgen::KeyPair>);

impl Authority {
    pub fn new(name: &str) -> Authority {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let key = rcgen::KeyPair::generate().unwrap();
        Authority(rcgen::CertifiedIssuer::self_signed(params, key).unwrap())
    }

    /// A server certificate (PEM) and its key (PEM), with `name` as its
    /// common name.
    pub fn leaf(&self, name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.signed_by(&key, &*self.0).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    pub fn pem(&self) -> String {
        self.0.pem()
    }
}
