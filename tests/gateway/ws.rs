//! The WebSocket transport, end to end: single streams on
//! `/stream/{resource}`, multiplexed subscriptions on `/ws`, heartbeat,
//! limits and close codes. Every server message is validated against the
//! schema (`$defs/wsMessage` or `$defs/muxMessage`).

use std::collections::HashMap;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use kubefan_sim::pod;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::sse::{pods_of, seeded};
use crate::support::{
    ClientView, SseEvent, TestEnv, WAIT, rv_of, spawn, test_config, validate_def, validate_status,
};

/// A WebSocket client that checks every message against `$defs/{def}`.
pub(crate) struct WsClient {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    def: &'static str,
    pub pings: usize,
    /// Bytes of the text messages received (what kubefan counts as sent).
    pub received: u64,
}

/// How a socket ended: the Close frame's code, or `None` without one.
type Closed = Option<u16>;

impl WsClient {
    pub(crate) async fn connect(env: &TestEnv, path: &str) -> WsClient {
        Self::connect_to(env.app.local_addr(), path).await
    }

    /// [`WsClient::connect`] to a gateway at `addr`.
    pub(crate) async fn connect_to(addr: std::net::SocketAddr, path: &str) -> WsClient {
        Self::connect_with(addr, path, &[]).await
    }

    /// [`WsClient::connect_to`] with more request headers (a `Cookie`).
    pub(crate) async fn connect_with(
        addr: std::net::SocketAddr,
        path: &str,
        headers: &[(&'static str, String)],
    ) -> WsClient {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut request = format!("ws://{addr}{path}").into_client_request().unwrap();
        for (name, value) in headers {
            request.headers_mut().insert(*name, value.parse().unwrap());
        }
        let (ws, resp) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request))
            .await
            .expect("handshake in time")
            .unwrap_or_else(|e| panic!("WebSocket {path}: {e}"));
        assert_eq!(resp.status(), 101);
        let route = path.split('?').next().unwrap_or(path);
        let def = if route.ends_with("/ws") {
            "muxMessage"
        } else {
            "wsMessage"
        };
        WsClient {
            ws,
            def,
            pings: 0,
            received: 0,
        }
    }

    /// The next JSON message (pings are counted and answered); panics if
    /// the socket closes or nothing comes within [`WAIT`].
    pub(crate) async fn next(&mut self) -> Value {
        match self.next_or_close().await {
            Ok(v) => v,
            Err(closed) => panic!("socket closed ({closed:?}) while a message was expected"),
        }
    }

    async fn next_or_close(&mut self) -> Result<Value, Closed> {
        tokio::time::timeout(WAIT, async {
            loop {
                match self.ws.next().await {
                    Some(Ok(Message::Text(text))) => {
                        self.received += text.len() as u64;
                        let v: Value = serde_json::from_str(&text).expect("messages are JSON");
                        validate_def(self.def, &v);
                        return Ok(v);
                    }
                    Some(Ok(Message::Ping(_))) => self.pings += 1,
                    Some(Ok(Message::Pong(_))) => {}
                    Some(Ok(Message::Close(frame))) => {
                        return Err(Some(frame.map_or(1005, |f| u16::from(f.code))));
                    }
                    Some(Ok(other)) => panic!("unexpected frame {other:?}"),
                    Some(Err(_)) | None => return Err(None),
                }
            }
        })
        .await
        .expect("a message or a close in time")
    }

    /// Reads (answering pings) until `n` more pings came; panics on a
    /// text message or a close, or if they do not come within [`WAIT`].
    pub(crate) async fn pings(&mut self, n: usize) {
        let until = self.pings + n;
        tokio::time::timeout(WAIT, async {
            while self.pings < until {
                match self.ws.next().await {
                    Some(Ok(Message::Ping(_))) => self.pings += 1,
                    other => panic!("expected a ping, got {other:?}"),
                }
            }
        })
        .await
        .expect("pings in time");
    }

    /// Reads until the server's Close frame; returns its code.
    pub(crate) async fn closed(&mut self) -> u16 {
        loop {
            match self.next_or_close().await {
                Ok(_) => {}
                Err(Some(code)) => return code,
                Err(None) => panic!("the connection ended without a Close frame"),
            }
        }
    }

    async fn send(&mut self, msg: Message) {
        tokio::time::timeout(WAIT, self.ws.send(msg))
            .await
            .expect("send in time")
            .expect("send");
    }

    pub(crate) async fn send_json(&mut self, v: Value) {
        self.send(Message::text(v.to_string())).await;
    }

    pub(crate) async fn subscribe(&mut self, msg: Value) {
        validate_def("clientMessage", &msg);
        self.send_json(msg).await;
    }
}

/// A single-stream message as the SSE event it mirrors.
pub(crate) fn event(v: &Value) -> SseEvent {
    SseEvent {
        event: v["type"].as_str().expect("a type").to_string(),
        id: v
            .get("id")
            .map(|id| id.as_str().expect("ids are strings").to_string()),
        data: v.clone(),
    }
}

/// Applies messages to `view` until it has reached `rv` with no snapshot
/// half-received.
pub(crate) async fn follow(ws: &mut WsClient, view: &mut ClientView, rv: u64) {
    while !view.settled(rv) {
        let msg = ws.next().await;
        view.apply(&event(&msg));
    }
}

pub(crate) async fn subscribed(env: &TestEnv, path: &str) -> (WsClient, ClientView) {
    let mut ws = WsClient::connect(env, path).await;
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        let msg = ws.next().await;
        view.apply(&event(&msg));
    }
    (ws, view)
}

/// A `/ws` socket's messages, sorted into one view per subscription.
#[derive(Default)]
struct Mux {
    views: HashMap<String, ClientView>,
    /// (sub, message) of everything that is not a stream message.
    other: Vec<(Value, Value)>,
}

impl Mux {
    fn apply(&mut self, msg: Value) {
        let sub = msg["sub"].clone();
        let kind = msg["type"].as_str().unwrap();
        if kind == "UNSUBSCRIBED" || kind == "ERROR" || sub.is_null() {
            self.other.push((sub, msg));
            return;
        }
        #[allow(
            clippy::unwrap_or_default,
            reason = "new() expects a snapshot; default() does not"
        )]
        self.views
            .entry(sub.as_str().unwrap().to_string())
            .or_insert_with(ClientView::new)
            .apply(&event(&msg));
    }

    /// Reads until `done` holds.
    async fn until(&mut self, ws: &mut WsClient, done: impl Fn(&Mux) -> bool) {
        while !done(self) {
            let msg = ws.next().await;
            self.apply(msg);
        }
    }

    fn settled(&self, sub: &str, rv: u64) -> bool {
        self.views.get(sub).is_some_and(|v| v.settled(rv))
    }

    /// The non-stream message for `sub` of type `kind`, if received.
    fn find(&self, sub: Value, kind: &str) -> Option<&Value> {
        self.other
            .iter()
            .find(|(s, m)| *s == sub && m["type"] == kind)
            .map(|(_, m)| m)
    }
}

pub(crate) fn ws_config() -> kubefan::config::Config {
    let mut cfg = test_config(&["pods", "nodes"]);
    cfg.stream.keepalive = Duration::from_millis(200);
    cfg.stream.ws_idle_timeout = Duration::from_millis(600);
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_stream_converges_resumes_and_refuses_before_upgrading() {
    let mut cfg = ws_config();
    cfg.upstream.log_limits.max_events = 50;
    let env = spawn(seeded(20), cfg).await;
    env.synced("pods").await;
    let (mut ws, mut view) = subscribed(&env, "/stream/pods").await;
    let snapshot_end = view
        .last_id
        .clone()
        .expect("the snapshot end carries an id");
    env.sim
        .create("pods", pod("ws-new").ns("web").build())
        .unwrap();
    env.sim
        .merge_patch(
            "pods",
            Some("web"),
            "ws-new",
            &json!({"status": {"phase": "Running"}}),
        )
        .unwrap();
    let (objects, _) = pods_of(&env.sim);
    let victim = &objects[0]["metadata"];
    env.sim
        .delete(
            "pods",
            victim["namespace"].as_str(),
            victim["name"].as_str().unwrap(),
        )
        .unwrap();
    let (objects, rv) = pods_of(&env.sim);
    follow(&mut ws, &mut view, rv).await;
    view.assert_matches(&objects);
    let kinds: Vec<&str> = view.changes.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"]);
    drop(ws);

    // Resume inside the log: exactly the missed events, no snapshot.
    let mut missed = Vec::new();
    for i in 0..3 {
        let o = env
            .sim
            .create("pods", pod(&format!("missed-{i}")).ns("web").build())
            .unwrap();
        missed.push(rv_of(&o));
    }
    let (objects, rv) = pods_of(&env.sim);
    env.caught_up("pods", rv).await;
    let last = view.last_id.clone().unwrap();
    let mut ws = WsClient::connect(&env, &format!("/stream/pods?resourceVersion={last}")).await;
    view.resume();
    let before = view.changes.len();
    follow(&mut ws, &mut view, rv).await;
    assert_eq!(view.snapshots, 1, "a resume sends no snapshot");
    let got: Vec<u64> = view.changes[before..].iter().map(|(_, rv)| *rv).collect();
    assert_eq!(got, missed, "exactly the missed events");
    view.assert_matches(&objects);

    // Resume from before the log's tail: RESET with an empty id, then a snapshot.
    for i in 0..60 {
        env.sim
            .create("pods", pod(&format!("flood-{i}")).ns("web").build())
            .unwrap();
    }
    let (objects, rv) = pods_of(&env.sim);
    env.caught_up("pods", rv).await;
    let mut ws = WsClient::connect(
        &env,
        &format!("/stream/pods?resourceVersion={snapshot_end}"),
    )
    .await;
    let first = ws.next().await;
    assert_eq!(first["type"], "RESET");
    assert_eq!(first["id"], "", "a reset clears the client's position");
    assert_eq!(first["object"]["reason"], "Expired");
    view.apply(&event(&first));
    follow(&mut ws, &mut view, rv).await;
    view.assert_matches(&objects);

    let metrics = env.metrics().await;
    assert!(
        metrics.contains(r#"kubefan_subscribers{resource="pods",transport="WebSocket"}"#),
        "{metrics}"
    );
    // Refusals are plain HTTP with a Status body, before any upgrade.
    for (path, code) in [
        ("/stream/podz", 404),
        ("/stream/secrets", 403),
        ("/stream/pods?namespace=Not_Valid", 400),
        ("/stream/pods?resourceVersion=ten", 400),
    ] {
        let resp = env
            .http
            .get(format!("{}{}", env.base, path))
            .header("Connection", "Upgrade")
            .header("Upgrade", "websocket")
            .header("Sec-WebSocket-Version", "13")
            .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), code, "{path}");
        let body: Value = resp.json().await.unwrap();
        validate_status(&body);
        assert_eq!(body["code"], code);
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_socket_carries_tagged_subscriptions_and_unsubscribe_stops_one() {
    let env = spawn(seeded(30), ws_config()).await;
    env.synced("pods").await;
    env.synced("nodes").await;
    let mut ws = WsClient::connect(&env, "/ws").await;
    ws.subscribe(json!({"op": "subscribe", "id": "all-pods", "resource": "pods"}))
        .await;
    ws.subscribe(json!({"op": "subscribe", "id": "web", "resource": "po", "namespace": "web"}))
        .await;
    ws.subscribe(
        json!({"op": "subscribe", "id": "nodes", "resource": "nodes", "resourceVersion": "0"}),
    )
    .await;
    let mut mux = Mux::default();
    mux.until(&mut ws, |m| {
        ["all-pods", "web", "nodes"]
            .iter()
            .all(|s| m.views.get(*s).is_some_and(|v| v.snapshots == 1))
    })
    .await;
    env.sim
        .create("pods", pod("in-web").ns("web").build())
        .unwrap();
    env.sim
        .create("pods", pod("in-default").ns("default").build())
        .unwrap();
    let (pods, rv) = pods_of(&env.sim);
    let (nodes, _) = env.sim.list("nodes");
    mux.until(&mut ws, |m| {
        m.settled("all-pods", rv) && m.settled("web", rv)
    })
    .await;
    mux.views["all-pods"].assert_matches(&pods);
    let web: Vec<Value> = pods
        .iter()
        .filter(|o| o["metadata"]["namespace"] == "web")
        .cloned()
        .collect();
    mux.views["web"].assert_matches(&web);
    mux.views["nodes"].assert_matches(&nodes);
    assert!(mux.views["nodes"].changes.is_empty());

    ws.send_json(json!({"op": "unsubscribe", "id": "web"}))
        .await;
    mux.until(&mut ws, |m| m.find(json!("web"), "UNSUBSCRIBED").is_some())
        .await;
    let web_changes = mux.views["web"].changes.len();
    let o = env
        .sim
        .create("pods", pod("after").ns("web").build())
        .unwrap();
    mux.until(&mut ws, |m| m.settled("all-pods", rv_of(&o)))
        .await;
    assert_eq!(
        mux.views["web"].changes.len(),
        web_changes,
        "nothing for an unsubscribed id"
    );
    // The id is free again.
    ws.subscribe(json!({"op": "subscribe", "id": "web", "resource": "pods", "namespace": "web"}))
        .await;
    mux.views.remove("web");
    mux.until(&mut ws, |m| {
        m.views.get("web").is_some_and(|v| v.snapshots == 1)
    })
    .await;
    assert_eq!(mux.views["web"].objects.len(), web.len() + 1);
    assert!(mux.other.iter().all(|(_, m)| m["type"] != "ERROR"));
    ws.send(Message::Close(None)).await;
    assert_eq!(ws.closed().await, 1000);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_on_ws_get_errors_for_their_id_and_the_socket_keeps_flowing() {
    let mut cfg = ws_config();
    cfg.stream.max_subscriptions_per_socket = 3;
    let env = spawn(seeded(5), cfg).await;
    env.synced("pods").await;
    let mut ws = WsClient::connect(&env, "/ws").await;
    ws.subscribe(json!({"op": "subscribe", "id": "ok", "resource": "pods"}))
        .await;
    let mut mux = Mux::default();
    mux.until(&mut ws, |m| {
        m.views.get("ok").is_some_and(|v| v.snapshots == 1)
    })
    .await;
    let refused = [
        (
            json!({"op": "subscribe", "id": "podz", "resource": "podz"}),
            404,
        ),
        (
            json!({"op": "subscribe", "id": "sec", "resource": "secrets"}),
            403,
        ),
        (
            json!({"op": "subscribe", "id": "ns", "resource": "pods", "namespace": "Bad_NS"}),
            400,
        ),
        (
            json!({"op": "subscribe", "id": "rv", "resource": "pods", "resourceVersion": "ten"}),
            400,
        ),
        (
            json!({"op": "subscribe", "id": "typo", "resource": "pods", "nmespace": "web"}),
            400,
        ),
        (json!({"op": "subscribe", "id": "nores"}), 400),
        (
            json!({"op": "subscribe", "id": "ok", "resource": "nodes"}),
            409,
        ),
        (json!({"op": "unsubscribe", "id": "never"}), 404),
    ];
    for (msg, _) in &refused {
        ws.send_json(msg.clone()).await;
    }
    mux.until(&mut ws, |m| {
        refused
            .iter()
            .all(|(msg, _)| m.find(msg["id"].clone(), "ERROR").is_some())
    })
    .await;
    for (msg, code) in &refused {
        let err = mux.find(msg["id"].clone(), "ERROR").unwrap();
        assert_eq!(err["object"]["code"], *code, "{msg}: {err}");
    }
    // Up to the limit (3), then 429 for that id only.
    for id in ["n2", "n3", "n4"] {
        ws.subscribe(json!({"op": "subscribe", "id": id, "resource": "nodes"}))
            .await;
    }
    mux.until(&mut ws, |m| m.find(json!("n4"), "ERROR").is_some())
        .await;
    let err = mux.find(json!("n4"), "ERROR").unwrap();
    assert_eq!(err["object"]["code"], 429);
    assert_eq!(err["object"]["reason"], "TooManyRequests");
    // Messages that name no subscription get "sub": null.
    for text in [
        "{not json",
        r#"{"op":"dance","id":"x"}"#,
        r#"{"op":"subscribe","resource":"pods"}"#,
        "[1,2]",
    ] {
        let before = mux.other.len();
        ws.send(Message::text(text)).await;
        mux.until(&mut ws, |m| m.other.len() > before).await;
        let (sub, err) = mux.other.last().unwrap();
        assert!(sub.is_null(), "{text}: {err}");
        assert_eq!(err["type"], "ERROR");
        assert_eq!(err["object"]["code"], 400);
    }
    // The good subscription still flows, on the same socket.
    let o = env
        .sim
        .create("pods", pod("still-flowing").ns("web").build())
        .unwrap();
    let (pods, _) = pods_of(&env.sim);
    mux.until(&mut ws, |m| m.settled("ok", rv_of(&o))).await;
    mux.views["ok"].assert_matches(&pods);

    // A closed hub ends that subscription with an ERROR, not the socket;
    // a single stream gets the ERROR, then a normal close.
    let (mut single, _view) = subscribed(&env, "/stream/pods").await;
    let hub = env.app.informers().hub("pods").await.unwrap();
    hub.close("removed upstream");
    let err = single.next().await;
    assert_eq!(err["type"], "ERROR");
    assert_eq!(err["object"]["code"], 404);
    assert_eq!(single.closed().await, 1000);
    let errors_for_ok = |m: &Mux| -> Vec<Value> {
        m.other
            .iter()
            .filter(|(s, msg)| s == "ok" && msg["type"] == "ERROR")
            .map(|(_, msg)| msg.clone())
            .collect()
    };
    mux.until(&mut ws, |m| errors_for_ok(m).len() == 2).await;
    assert_eq!(errors_for_ok(&mux)[1]["object"]["code"], 404);
    ws.send_json(json!({"op": "unsubscribe", "id": "n2"})).await;
    mux.until(&mut ws, |m| m.find(json!("n2"), "UNSUBSCRIBED").is_some())
        .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_again_and_again_is_rationed_per_socket() {
    let mut cfg = ws_config();
    cfg.stream.subscribes_per_minute = 3;
    let env = spawn(seeded(2), cfg).await;
    env.synced("pods").await;
    let mut ws = WsClient::connect(&env, "/ws").await;
    let mut mux = Mux::default();
    // Subscribing and unsubscribing in a loop: each subscription starts a
    // stream and sends its snapshot. Three at once are allowed, and then
    // three a minute.
    for id in ["s1", "s2", "s3"] {
        ws.subscribe(json!({"op": "subscribe", "id": id, "resource": "pods"}))
            .await;
        mux.until(&mut ws, |m| {
            m.views.get(id).is_some_and(|v| v.snapshots == 1)
        })
        .await;
        ws.send_json(json!({"op": "unsubscribe", "id": id})).await;
        mux.until(&mut ws, |m| m.find(json!(id), "UNSUBSCRIBED").is_some())
            .await;
    }
    ws.subscribe(json!({"op": "subscribe", "id": "s4", "resource": "pods"}))
        .await;
    mux.until(&mut ws, |m| m.find(json!("s4"), "ERROR").is_some())
        .await;
    let err = mux.find(json!("s4"), "ERROR").unwrap();
    assert_eq!(err["object"]["code"], 429, "{err}");
    assert_eq!(err["object"]["reason"], "TooManyRequests");
    assert!(
        err["object"]["message"]
            .as_str()
            .unwrap()
            .contains("within the last minute"),
        "{err}"
    );
    assert!(
        env.metrics()
            .await
            .contains(r#"kubefan_limits_hit_total{kind="ws_subscribes"} 1"#)
    );
    // The socket itself goes on: its requests are still answered.
    ws.send_json(json!({"op": "unsubscribe", "id": "s4"})).await;
    let errors = |m: &Mux| -> Vec<Value> {
        m.other
            .iter()
            .filter(|(s, msg)| *s == json!("s4") && msg["type"] == "ERROR")
            .map(|(_, msg)| msg["object"]["code"].clone())
            .collect()
    };
    mux.until(&mut ws, |m| errors(m).len() == 2).await;
    assert_eq!(errors(&mux), [json!(429), json!(404)], "not subscribed");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_binary_frames_close_the_socket_with_their_codes() {
    let mut cfg = ws_config();
    cfg.stream.ws_max_message = 1024;
    let env = spawn(seeded(1), cfg).await;
    env.synced("pods").await;
    let mut ws = WsClient::connect(&env, "/ws").await;
    let big = json!({"op": "subscribe", "id": "x".repeat(2000), "resource": "pods"});
    ws.send_json(big).await;
    assert_eq!(ws.closed().await, 1009, "too big");

    let mut ws = WsClient::connect(&env, "/ws").await;
    ws.send(Message::binary(vec![1, 2, 3])).await;
    assert_eq!(ws.closed().await, 1003, "binary is unsupported");

    let (mut ws, _view) = subscribed(&env, "/stream/pods").await;
    ws.send(Message::binary(vec![1, 2, 3])).await;
    assert_eq!(ws.closed().await, 1003, "binary is unsupported");
    env.stop().await;
}

/// A WebSocket client that reads frames but never answers a ping.
struct SilentPeer {
    tcp: TcpStream,
    buf: Vec<u8>,
}

impl SilentPeer {
    async fn connect(env: &TestEnv, path: &str) -> SilentPeer {
        let mut tcp = TcpStream::connect(env.app.local_addr()).await.unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
            env.app.local_addr()
        );
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut peer = SilentPeer {
            tcp,
            buf: Vec::new(),
        };
        let end = loop {
            if let Some(end) = peer.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            peer.fill().await;
        };
        let head = String::from_utf8_lossy(&peer.buf[..end]).to_string();
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        peer.buf.drain(..end + 4);
        peer
    }

    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(WAIT, self.tcp.read(&mut chunk))
            .await
            .expect("bytes in time")
            .unwrap_or(0);
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    /// The next frame's opcode and payload; `None` at end of stream.
    async fn frame(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if self.buf.len() >= 2 {
                let opcode = self.buf[0] & 0x0f;
                let (len, header) = match self.buf[1] & 0x7f {
                    126 if self.buf.len() >= 4 => {
                        (u16::from_be_bytes([self.buf[2], self.buf[3]]) as usize, 4)
                    }
                    127 if self.buf.len() >= 10 => (
                        u64::from_be_bytes(self.buf[2..10].try_into().unwrap()) as usize,
                        10,
                    ),
                    126 | 127 => (usize::MAX, 0),
                    n => (n as usize, 2),
                };
                if len != usize::MAX && self.buf.len() >= header + len {
                    let payload = self.buf[header..header + len].to_vec();
                    self.buf.drain(..header + len);
                    return Some((opcode, payload));
                }
            }
            if !self.fill().await {
                return None;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_answers_pings_is_closed_while_a_live_one_stays() {
    let env = spawn(seeded(1), ws_config()).await;
    env.synced("pods").await;
    let (mut live, _view) = subscribed(&env, "/stream/pods?namespace=nobody-here").await;
    let started = tokio::time::Instant::now();
    // A single-stream socket, and a `/ws` socket (whose control loop looks
    // at the idle timeout on each tick).
    let silent = |mut silent: SilentPeer| async move {
        let mut pings = 0;
        loop {
            match silent.frame().await {
                Some((0x9, _)) => pings += 1,
                Some((0x8, payload)) => {
                    break (u16::from_be_bytes([payload[0], payload[1]]), pings);
                }
                Some(_) => {}
                None => panic!("closed without a Close frame"),
            }
        }
    };
    let silent = futures::future::join(
        silent(SilentPeer::connect(&env, "/stream/pods?namespace=nobody-here").await),
        silent(SilentPeer::connect(&env, "/ws").await),
    );
    tokio::pin!(silent);
    // Meanwhile the live client keeps reading, so it answers every ping.
    let ((code, pings), (mux_code, mux_pings)) = tokio::time::timeout(WAIT, async {
        loop {
            tokio::select! {
                done = &mut silent => break done,
                frame = live.ws.next() => match frame {
                    Some(Ok(Message::Ping(_))) => live.pings += 1,
                    other => panic!("the live client got {other:?}"),
                },
            }
        }
    })
    .await
    .expect("the silent peers are closed in time");
    assert_eq!(code, 1008, "heartbeat timeout is a policy close");
    assert_eq!(mux_code, 1008, "on /ws too");
    assert!(pings >= 2, "the server pinged ({pings})");
    assert!(mux_pings >= 2, "the server pinged /ws ({mux_pings})");
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "closed after the idle timeout, not before: {:?}",
        started.elapsed()
    );
    // The live client answers pings (tungstenite pongs as it reads) and
    // is still served.
    let o = env
        .sim
        .create("pods", pod("late").ns("nobody-here").build())
        .unwrap();
    let msg = live.next().await;
    assert_eq!(msg["type"], "ADDED");
    assert_eq!(msg["id"], rv_of(&o).to_string());
    assert!(live.pings >= 2, "the live client was pinged too");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reader_is_lapped_and_reset_while_a_fast_one_gets_everything() {
    let mut cfg = test_config(&["pods"]);
    let log_bytes = 2 << 20;
    cfg.upstream.log_limits.max_bytes = log_bytes;
    let env = spawn(seeded(5), cfg).await;
    env.synced("pods").await;
    let (mut slow, mut slow_view) = subscribed(&env, "/stream/pods").await;
    let (mut fast, mut fast_view) = subscribed(&env, "/stream/pods").await;
    // A `/ws` subscription that reads nothing either: its outbox fills
    // behind the socket, and its hub's writer gives it back to its task.
    let mut slow_mux = WsClient::connect(&env, "/ws").await;
    slow_mux
        .subscribe(json!({"op": "subscribe", "id": "s", "resource": "pods"}))
        .await;
    let mut mux = Mux::default();
    mux.until(&mut slow_mux, |m| {
        m.views.get("s").is_some_and(|v| v.snapshots == 1)
    })
    .await;
    env.sim
        .create("pods", pod("big").ns("web").build())
        .unwrap();
    // ~19 MB of changes: more than the slow reader's socket buffers, its
    // outbox and the 2 MB log hold. The fast reader keeps up batch by batch.
    for batch in 0..24 {
        let last = crate::sse::big_changes(&env.sim, batch);
        follow(&mut fast, &mut fast_view, last).await;
    }
    let (objects, rv) = pods_of(&env.sim);
    assert!(
        fast_view.resets.is_empty(),
        "the fast reader was never reset"
    );
    assert_eq!(fast_view.changes.len(), 1 + 24 * 50, "every change");
    fast_view.assert_matches(&objects);

    follow(&mut slow, &mut slow_view, rv).await;
    assert_eq!(
        slow_view.resets,
        ["Lapped"],
        "the slow reader was reset, not skipped"
    );
    assert_eq!(slow_view.snapshots, 2);
    slow_view.assert_matches(&objects);

    mux.until(&mut slow_mux, |m| m.settled("s", rv)).await;
    let slow_sub = &mux.views["s"];
    assert_eq!(slow_sub.resets, ["Lapped"], "the slow /ws subscription too");
    slow_sub.assert_matches(&objects);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sends_an_error_per_subscription_then_going_away() {
    let env = spawn(seeded(3), ws_config()).await;
    env.synced("pods").await;
    env.synced("nodes").await;
    let (mut single, _view) = subscribed(&env, "/stream/pods").await;
    let mut ws = WsClient::connect(&env, "/ws").await;
    ws.subscribe(json!({"op": "subscribe", "id": "a", "resource": "pods"}))
        .await;
    ws.subscribe(json!({"op": "subscribe", "id": "b", "resource": "nodes"}))
        .await;
    let mut mux = Mux::default();
    mux.until(&mut ws, |m| {
        ["a", "b"]
            .iter()
            .all(|s| m.views.get(*s).is_some_and(|v| v.snapshots == 1))
    })
    .await;
    let TestEnv { app, server, .. } = env;
    let stopping = tokio::spawn(app.stop());

    let err = single.next().await;
    assert_eq!(err["type"], "ERROR");
    assert_eq!(err["object"]["code"], 503);
    assert_eq!(single.closed().await, 1001);

    let mut codes = Vec::new();
    let code = loop {
        match ws.next_or_close().await {
            Ok(msg) => {
                assert_eq!(msg["type"], "ERROR", "{msg}");
                assert_eq!(msg["object"]["code"], 503);
                codes.push(msg["sub"].as_str().unwrap().to_string());
            }
            Err(code) => break code,
        }
    };
    codes.sort();
    assert_eq!(codes, ["a", "b"], "one ERROR per subscription");
    assert_eq!(code, Some(1001));
    tokio::time::timeout(WAIT, stopping).await.unwrap().unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mux_tasks_are_streams_that_the_stop_waits_for() {
    let env = spawn(seeded(3), ws_config()).await;
    env.synced("pods").await;
    env.synced("nodes").await;
    let streams = env.app.streams().clone();
    let before = streams.running();
    let mut ws = WsClient::connect(&env, "/ws").await;
    ws.subscribe(json!({"op": "subscribe", "id": "a", "resource": "pods"}))
        .await;
    ws.subscribe(json!({"op": "subscribe", "id": "b", "resource": "nodes"}))
        .await;
    let mut mux = Mux::default();
    mux.until(&mut ws, |m| {
        ["a", "b"]
            .iter()
            .all(|s| m.views.get(*s).is_some_and(|v| v.snapshots == 1))
    })
    .await;
    // The control loop (which writes the socket too) and each
    // subscription (in a task of its own, or parked with its hub's
    // writer, a task too), all counted where the stop waits (one more for
    // a moment while a subscription's task hands it to its writer).
    let running = streams.running();
    assert!((before + 3..=before + 5).contains(&running), "{running}");
    let nodes = env.app.informers().hub("nodes").await.unwrap();
    let mut watching_nodes = nodes.subscribers_rx();
    ws.send_json(json!({"op": "unsubscribe", "id": "b"})).await;
    mux.until(&mut ws, |m| m.find(json!("b"), "UNSUBSCRIBED").is_some())
        .await;
    tokio::time::timeout(WAIT, watching_nodes.wait_for(|n| *n == 0))
        .await
        .expect("b's subscription ends, wherever it was")
        .unwrap();

    // The stop returns only once the socket's last frames went: the
    // client reads them afterwards.
    let TestEnv { app, server, .. } = env;
    tokio::time::timeout(WAIT, app.stop())
        .await
        .expect("stopped within the grace period");
    assert_eq!(streams.running(), 0);
    let err = ws.next().await;
    assert_eq!(err["type"], "ERROR", "{err}");
    assert_eq!(err["sub"], "a");
    assert_eq!(err["object"]["code"], 503);
    assert_eq!(ws.closed().await, 1001);
    server.stop().await;
}

/// A `/ws` connection with a small receive buffer, whose client has read
/// the 101 head (a client sends no frame before it, RFC 6455, 4.1) and
/// reads nothing after it unless the test does.
async fn unread_mux_socket(env: &TestEnv) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut conn = socket.connect(env.app.local_addr()).await.unwrap();
    conn.write_all(
        b"GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n\
          Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
          Sec-WebSocket-Version: 13\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = tokio::time::timeout(WAIT, conn.read_u8())
            .await
            .expect("the 101 in time")
            .unwrap();
        head.push(byte);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{head:?}");
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mux_socket_whose_client_reads_nothing_ends_at_the_hard_stop() {
    let mut cfg = test_config(&["pods"]);
    cfg.shutdown_grace = Duration::from_millis(300);
    // Neither the write timeout nor the idle timeout ends the socket: only
    // the hard stop can.
    cfg.stream.write_timeout = Duration::from_secs(3600);
    cfg.stream.keepalive = Duration::from_secs(600);
    cfg.stream.ws_idle_timeout = Duration::from_secs(3600);
    // A snapshot of several MB, more than the socket's buffers hold: the
    // writer blocks on it, the outbox fills and the subscription waits.
    let env = spawn(seeded(4000), cfg).await;
    env.synced("pods").await;
    let hub = env.app.informers().hub("pods").await.unwrap();
    let mut subscribers = hub.subscribers_rx();
    let mut conn = unread_mux_socket(&env).await;
    // One masked text frame (a zero mask leaves the payload as it is).
    let op = br#"{"op":"subscribe","id":"a","resource":"pods"}"#;
    let mut frame = vec![0x81, 0x80 | op.len() as u8, 0, 0, 0, 0];
    frame.extend_from_slice(op);
    conn.write_all(&frame).await.unwrap();
    tokio::time::timeout(WAIT, subscribers.wait_for(|n| *n >= 1))
        .await
        .expect("subscribed")
        .unwrap();
    let streams = env.app.streams().clone();
    let TestEnv { app, server, .. } = env;
    tokio::time::timeout(WAIT, app.stop())
        .await
        .expect("the stop ends the socket at the hard stop");
    assert_eq!(streams.running(), 0);
    drop(conn);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mux_client_that_reads_none_of_its_replies_is_not_read_then_cut_off() {
    let mut cfg = test_config(&["pods"]);
    // Neither a tick nor the idle timeout comes: the write timeout ends it.
    cfg.stream.write_timeout = Duration::from_secs(2);
    cfg.stream.keepalive = Duration::from_secs(600);
    cfg.stream.ws_idle_timeout = Duration::from_secs(3600);
    let env = spawn(seeded(1), cfg).await;
    env.synced("pods").await;
    let streams = env.app.streams().clone();
    let before = streams.running();
    let mut conn = unread_mux_socket(&env).await;
    // Each request is answered (a 404: no such subscription); none of the
    // answers is read. Masked text frames (a zero mask).
    let op = br#"{"op":"unsubscribe","id":"nope"}"#;
    let mut frame = vec![0x81, 0x80 | op.len() as u8, 0, 0, 0, 0];
    frame.extend_from_slice(op);
    let burst: Vec<u8> = frame.repeat(1000);
    // The control loop reads the client only while the socket's outbox has
    // room: once the answers back up, it stops reading, and the client's
    // writes stall (a burst that does not go within 200 ms), well before
    // the write timeout cuts the socket.
    let stalled = tokio::time::timeout(WAIT, async {
        loop {
            match tokio::time::timeout(Duration::from_millis(200), conn.write_all(&burst)).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => break false,
                Err(_) => break true,
            }
        }
    })
    .await
    .expect("the client's writes stall or fail");
    assert!(
        stalled,
        "the gateway stops reading a client that reads none of its answers"
    );
    // Still reading nothing: its answers not taken within the write
    // timeout, the connection is dropped, and the client's writes fail.
    let cut = tokio::time::timeout(WAIT, async {
        while conn.write_all(&burst).await.is_ok() {}
    })
    .await;
    assert!(cut.is_ok(), "the gateway drops the connection");
    tokio::time::timeout(WAIT, async {
        while streams.running() > before {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the socket's task ends");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_with_nothing_to_send_is_answered_at_once_and_its_bytes_counted() {
    // The handshake answer is written when the connection is taken over,
    // not with the first frame: with pings 10 minutes apart, a `/ws`
    // socket with no subscription yet still completes its handshake, and
    // its first subscription flows.
    let mut cfg = ws_config();
    cfg.stream.keepalive = Duration::from_secs(600);
    cfg.stream.ws_idle_timeout = Duration::from_secs(1500);
    let env = spawn(seeded(3), cfg).await;
    env.synced("pods").await;
    let mut ws = WsClient::connect(&env, "/ws").await;
    ws.subscribe(json!({"op": "subscribe", "id": "a", "resource": "pods"}))
        .await;
    let mut mux = Mux::default();
    mux.until(&mut ws, |m| {
        m.views.get("a").is_some_and(|v| v.snapshots == 1)
    })
    .await;
    // What went out is counted, per resource, as for SSE.
    let metrics = env.metrics().await;
    let sent: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"kubefan_bytes_sent_total{resource="pods",transport="WebSocket"} "#)
        })
        .unwrap_or_else(|| panic!("no WebSocket bytes in\n{metrics}"))
        .parse()
        .unwrap();
    assert!(sent > 0.0);
    env.stop().await;
}

/// Single-stream sockets on the batching tests' paths, each written by its
/// hub's writer once it caught up, through churn (`sse::batched_through_churn`).
/// The clients read nothing (so answer no ping) while the churn is made:
/// `idle_timeout` must be longer than that.
pub(crate) async fn batched_sockets(
    idle_timeout: Duration,
) -> (TestEnv, Vec<(&'static str, (WsClient, ClientView))>) {
    use crate::sse::{BATCH_PATHS, batched_through_churn, batching_env};
    let mut cfg = ws_config();
    cfg.stream.ws_idle_timeout = idle_timeout;
    let env = batching_env(cfg).await;
    let mut subs = Vec::new();
    for path in BATCH_PATHS {
        subs.push((path, subscribed(&env, path).await));
    }
    batched_through_churn(&env, &mut subs, async |ws, view, rv| {
        follow(ws, view, rv).await
    })
    .await;
    (env, subs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caught_up_single_stream_sockets_are_written_together_and_get_every_change_once() {
    let (env, subs) = batched_sockets(Duration::from_secs(60)).await;
    // Every byte counted as sent arrived, whichever path wrote it: the
    // writer counts message bytes, not its frames' headers, as a socket's
    // own task does. (Nothing is sent after the last change: ticks only
    // ping.)
    let received: u64 = subs.iter().map(|(_, (ws, _))| ws.received).sum();
    let metrics = env.metrics().await;
    let counted = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"kubefan_bytes_sent_total{resource="pods",transport="WebSocket"} "#)
        })
        .and_then(|v| v.parse::<u64>().ok());
    assert_eq!(counted, Some(received), "{metrics}");
    env.stop().await;
}

/// `kubefan_bytes_sent_total` of pods over WebSocket.
async fn ws_pod_bytes(env: &TestEnv) -> Option<u64> {
    let metrics = env.metrics().await;
    metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"kubefan_bytes_sent_total{resource="pods",transport="WebSocket"} "#)
        })
        .and_then(|v| v.parse::<u64>().ok())
}

/// Reads both sockets until each of their subscriptions reached `rv`.
async fn settle_mux(sockets: &mut [(WsClient, Mux, Vec<&str>)], rv: u64) {
    for (ws, mux, ids) in sockets.iter_mut() {
        let ids = ids.clone();
        tokio::time::timeout(
            WAIT,
            mux.until(ws, |m| ids.iter().all(|id| m.settled(id, rv))),
        )
        .await
        .unwrap_or_else(|_| panic!("{ids:?} reached {rv}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caught_up_ws_subscriptions_are_written_by_their_views_writers_with_their_ids() {
    use crate::sse::{batching_env, churned_batch_truth, touch_tracked};
    let mut cfg = ws_config();
    cfg.stream.ws_idle_timeout = Duration::from_secs(60);
    let env = batching_env(cfg).await;
    // Two views over two sockets: each socket holds one subscription of
    // each, so a writer writes to both sockets and each socket is written
    // by both writers.
    let mut sockets = Vec::new();
    for ids in [["a", "b"], ["c", "d"]] {
        let mut ws = WsClient::connect(&env, "/ws").await;
        ws.subscribe(json!({"op": "subscribe", "id": ids[0], "resource": "pods"}))
            .await;
        ws.subscribe(
            json!({"op": "subscribe", "id": ids[1], "resource": "pods", "namespace": "batch"}),
        )
        .await;
        sockets.push((ws, Mux::default(), ids.to_vec()));
    }
    let mut all_batched = false;
    for round in 0..200 {
        let rv = touch_tracked(&env.sim, &round.to_string());
        settle_mux(&mut sockets, rv).await;
        let metrics = env.metrics().await;
        if metrics.lines().any(|l| l == "kubefan_streams_batched 4") {
            all_batched = true;
            break;
        }
    }
    assert!(all_batched, "caught-up subscriptions are parked");
    let (rv, objects, in_batch) = churned_batch_truth(&env.sim).await;
    settle_mux(&mut sockets, rv).await;
    for (_, mux, ids) in &sockets {
        for (id, expected) in ids.iter().zip([&objects, &in_batch]) {
            let view = &mux.views[*id];
            assert!(view.resets.is_empty(), "{id}: {:?}", view.resets);
            view.assert_matches(expected);
        }
        assert!(mux.other.is_empty(), "{:?}", mux.other);
    }
    // Every byte counted arrived, prefixes included, whichever path wrote
    // it.
    let received: u64 = sockets.iter().map(|(ws, _, _)| ws.received).sum();
    assert_eq!(ws_pod_bytes(&env).await, Some(received));
    assert_eq!(
        unparked_total(&env).await,
        0,
        "the writers kept them through the ticks"
    );

    // Unsubscribed while parked: the reply, and nothing of it after; its
    // writer lets it go, and the others go on.
    let hub = env.app.informers().hub("pods").await.unwrap();
    let mut subscribers = hub.subscribers_rx();
    let (ws, mux, ids) = &mut sockets[0];
    ws.send_json(json!({"op": "unsubscribe", "id": "b"})).await;
    mux.until(ws, |m| m.find(json!("b"), "UNSUBSCRIBED").is_some())
        .await;
    let b_changes = mux.views["b"].changes.len();
    ids.retain(|id| *id != "b");
    let d_changes = sockets[1].1.views["d"].changes.len();
    tokio::time::timeout(WAIT, subscribers.wait_for(|n| *n == 3))
        .await
        .expect("b's subscription is dropped")
        .unwrap();
    let rv = touch_tracked(&env.sim, "after");
    settle_mux(&mut sockets, rv).await;
    assert_eq!(sockets[0].1.views["b"].changes.len(), b_changes);
    assert_eq!(sockets[1].1.views["d"].changes.len(), d_changes + 1);
    env.stop().await;
}

/// `kubefan_streams_unparked_total`, over every reason but `Write` and
/// `Flush` (a socket that took part of a write) and `Refused`.
async fn unparked_total(env: &TestEnv) -> u64 {
    let metrics = env.metrics().await;
    metrics
        .lines()
        .filter(|l| l.starts_with("kubefan_streams_unparked_total{"))
        .filter(|l| {
            !["Write", "Flush", "Refused"]
                .iter()
                .any(|r| l.contains(&format!("\"{r}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// A single-stream socket's wire answers the client itself, parked with
/// its writer or not: a ping gets its pong (same payload) and the stream
/// goes on, back with its writer once caught up again; a Close is echoed
/// with its code and the connection ends, the other sockets untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_stream_socket_answers_pings_and_echoes_a_close_parked_or_not() {
    let (env, mut subs) = batched_sockets(Duration::from_secs(60)).await;
    let (_, (ws, _)) = &mut subs[0];
    ws.send(Message::Ping(b"are you there".to_vec().into()))
        .await;
    let pong = tokio::time::timeout(WAIT, async {
        loop {
            match ws.ws.next().await {
                Some(Ok(Message::Pong(payload))) => return payload,
                Some(Ok(Message::Ping(_))) => ws.pings += 1,
                Some(Ok(Message::Text(_))) => {}
                other => panic!("expected a pong, got {other:?}"),
            }
        }
    })
    .await
    .expect("a pong in time");
    assert_eq!(&pong[..], b"are you there");
    // The stream goes on after the answer, and every socket is written by
    // its writer again once caught up (`batched_through_churn` waits for
    // all of them to be parked).
    crate::sse::batched_through_churn(&env, &mut subs, async |ws, view, rv| {
        follow(ws, view, rv).await
    })
    .await;

    let (_, (ws, _)) = &mut subs[0];
    ws.send(Message::Close(Some(
        tokio_tungstenite::tungstenite::protocol::CloseFrame {
            code: 4321.into(),
            reason: "bye".into(),
        },
    )))
    .await;
    assert_eq!(ws.closed().await, 4321, "its code echoed");
    let rest = &mut subs[1..];
    let rv = crate::sse::touch_tracked(&env.sim, "after the close");
    for (path, (ws, view)) in rest.iter_mut() {
        tokio::time::timeout(WAIT, follow(ws, view, rv))
            .await
            .unwrap_or_else(|_| panic!("{path} reached {rv} after another socket closed"));
    }
    env.stop().await;
}

/// A `/ws` client that sends small requests as fast as it reads their
/// answers keeps its socket's task busy, not a thread: the control loop
/// yields after a bounded number of steps. On a runtime of one thread
/// (this test's, which the gateway's streams, its informers and the other
/// client share), another client's change comes while the flood goes on;
/// a loop that never yielded would hold that thread until the flood
/// stopped (at 20 s, or at the change).
#[tokio::test(flavor = "current_thread")]
async fn a_mux_client_flooding_requests_whose_answers_it_reads_does_not_hold_the_thread() {
    use std::io::{ErrorKind, Read, Write};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let env = spawn(seeded(1), test_config(&["pods"])).await;
    env.synced("pods").await;
    let resp = env
        .http
        .get(format!("{}/stream/pods", env.base))
        .send()
        .await
        .unwrap();
    let mut sse = crate::support::SseClient::new(resp);
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        view.apply(&sse.next().await.expect("the snapshot"));
    }

    let addr = env.app.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let (flooding_tx, flooding) = tokio::sync::oneshot::channel();
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            let mut conn = std::net::TcpStream::connect(addr).unwrap();
            conn.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            conn.set_write_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            conn.write_all(
                b"GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n\
                  Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                  Sec-WebSocket-Version: 13\r\n\r\n",
            )
            .unwrap();
            // A thousand `{}` (answered: no op), masked with a zero mask.
            let burst = [0x81, 0x82, 0, 0, 0, 0, b'{', b'}'].repeat(1000);
            let mut reader = conn.try_clone().unwrap();
            let answers = std::thread::spawn({
                let stop = stop.clone();
                move || {
                    let (mut read, mut flooding_tx) = (0usize, Some(flooding_tx));
                    let mut buf = vec![0u8; 1 << 16];
                    while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
                        match reader.read(&mut buf) {
                            Ok(0) => break,
                            Ok(n) => read += n,
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    ErrorKind::WouldBlock | ErrorKind::TimedOut
                                ) => {}
                            Err(_) => break,
                        }
                        // Well into the flood: the 101 and many answers read.
                        if read > 1 << 20
                            && let Some(tx) = flooding_tx.take()
                        {
                            let _ = tx.send(());
                        }
                    }
                    read
                }
            });
            let mut sent = 0usize;
            while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < deadline {
                match conn.write(&burst) {
                    Ok(n) => sent += n,
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => break,
                }
            }
            let ended = std::time::Instant::now();
            let read = answers.join().unwrap();
            (sent, read, ended)
        })
    };
    tokio::time::timeout(Duration::from_secs(30), flooding)
        .await
        .expect("the flood under way")
        .expect("the flooding client read answers");
    env.sim
        .create("pods", pod("during-the-flood").ns("default").build())
        .unwrap();
    loop {
        let ev = sse.next().await.expect("the stream goes on");
        view.apply(&ev);
        if view.objects.keys().any(|k| k.contains("during-the-flood")) {
            break;
        }
    }
    let came = std::time::Instant::now();
    stop.store(true, Ordering::Relaxed);
    let (sent, read, ended) = tokio::task::spawn_blocking(move || flood.join().unwrap())
        .await
        .unwrap();
    assert!(
        came < ended,
        "the change came only after the flood ended at its deadline ({sent} bytes sent, {read} read)"
    );
    env.stop().await;
}
