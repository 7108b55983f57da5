//! WebSocket: `GET /stream/{resource}` upgraded (one subscription per
//! socket) and `GET /ws` (many subscriptions on one socket, named by
//! client-chosen ids). The protocol is specified in `proto/PROTOCOL.md`.
//!
//! Frames only, as SSE does: a message is the SSE `data` JSON the hub
//! already encoded, with `"id"` spliced in where SSE sends an `id:` line
//! and, on `/ws`, `{"sub":ID,` spliced in front; one copy, no
//! re-serialisation.
//!
//! # Never waiting on a client, never buffering without bound
//! Both kinds of socket are taken over from actix after the handshake
//! (`transport::detach`, which also parses what the client sends, with
//! actix-http's frame codec).
//!
//! A single-stream socket is one task on the streams' runtime, as an SSE
//! stream is: it pulls its [`Subscription`] and writes each message
//! straight onto the socket, and between messages looks at the socket's
//! readiness for the client's frames (pongs, Close). A socket that is not
//! read blocks its task (up to the write timeout) with the cursor in place.
//!
//! On `/ws`, each subscription is a task that pulls its subscription and
//! pushes text frames into the socket's outbox, a channel of [`OUTBOX`]
//! messages drained by one writer task; a socket that is not read fills
//! the outbox and its subscriptions wait. The control loop (client frames,
//! pings, idle timeout) only ever *tries* to queue a ping or pong, and
//! waits at most the idle timeout to queue anything else, so a stuck
//! socket cannot pin it.
//!
//! Either way the hub never waits for a subscriber and, if one stays
//! behind, laps it: RESET and a fresh snapshot, as on SSE.

use std::collections::HashMap;
use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use actix_ws::{AggregatedMessage, CloseCode, CloseReason, Message, ProtocolError};
use bytes::{BufMut, Bytes, BytesMut};
use bytestring::ByteString;
use futures::StreamExt;
use prometheus_client::metrics::counter::Counter;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::detach::{self, Inbox, Opcode, Taken, Upgraded, WsWriter};
use super::error::{ApiError, status_json};
use super::sse::{bookmark_object, closed_status, reset_status, shutdown_status};
use super::{StreamParams, parse_stream_params, parse_stream_query, subscribe};
use crate::app::AppState;
use crate::auth::{self, Principal};
use crate::hub::{Item, ResourceMeta, Subscription};
use crate::metrics::Transport;

/// Messages a socket's subscriptions may have queued for its writer.
const OUTBOX: usize = 64;
/// Longest subscription id a client may choose, in bytes.
const MAX_SUB_ID: usize = 128;
/// Time a Close frame gets to be queued behind a stuck socket.
const CLOSE_WAIT: Duration = Duration::from_secs(1);
/// The Close code of a socket whose token expired (after an ERROR per
/// subscription); see `proto/PROTOCOL.md`.
pub const CLOSE_TOKEN_EXPIRED: u16 = 4001;

/// `GET /stream/{resource}` with `Upgrade: websocket`: the SSE stream's
/// messages, one JSON text frame each. The subscription starts before the
/// upgrade, so every refusal is a plain HTTP error with a `Status` body.
pub async fn stream(
    req: HttpRequest,
    resource: web::Path<String>,
    state: web::Data<AppState>,
    principal: Principal,
) -> Result<HttpResponse, ApiError> {
    let params = parse_stream_query(&auth::strip_token(req.query_string()))?;
    let sub = subscribe(&state, &principal, &resource, &params, Transport::WebSocket).await?;
    let taken = handshake(&req, &state)?;
    state
        .streams
        .spawn(single(taken, sub, state.clone(), principal));
    // actix writes this into the emptied connection, where it vanishes.
    Ok(HttpResponse::Ok().finish())
}

/// `GET /ws`: one socket, any number of subscriptions (up to
/// `max_subscriptions_per_socket`), opened and closed by client messages.
pub async fn mux(
    req: HttpRequest,
    state: web::Data<AppState>,
    principal: Principal,
) -> Result<HttpResponse, ApiError> {
    let Upgraded { writer, inbox } = handshake(&req, &state)?.open().map_err(lost)?;
    let max = state.stream.max_subscriptions_per_socket.max(1);
    let (socket, done_rx) = Socket::new(state, writer, max, principal);
    actix_web::rt::spawn(socket.run(done_rx, inbox));
    // actix writes this into the emptied connection, where it vanishes.
    Ok(HttpResponse::Ok().finish())
}

/// Validates the handshake and takes the connection over from actix
/// (`transport::detach`): kubefan reads the client's frames from the socket
/// and writes its own, without actix's connection, buffers and body stream.
fn handshake(req: &HttpRequest, state: &AppState) -> Result<Taken, ApiError> {
    let accept = actix_http::ws::handshake(req.head())
        .map_err(|e| ApiError::BadRequest(format!("not a WebSocket handshake: {e}")))?
        .finish();
    let max = state.stream.ws_max_message;
    detach::upgrade(req, &state.streams, switching(&accept), max)
        .ok_or_else(detach::not_taken_over)?
        .map_err(lost)
}

/// The socket left actix but could not be driven by kubefan: the connection
/// is lost either way.
fn lost(err: std::io::Error) -> ApiError {
    tracing::warn!(error = %err, "could not take a WebSocket's connection over");
    ApiError::Status(
        500,
        "InternalError",
        "this connection cannot carry a stream".into(),
    )
}

/// The `101 Switching Protocols` head of a handshake `response`.
fn switching<B>(response: &actix_http::Response<B>) -> Bytes {
    let status = response.status();
    let mut head = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_str(),
        status.canonical_reason().unwrap_or("")
    );
    for (name, value) in response.headers() {
        head.push_str(name.as_str());
        head.push_str(": ");
        head.push_str(value.to_str().unwrap_or(""));
        head.push_str("\r\n");
    }
    // actix writes this one from the response's connection type.
    head.push_str("connection: Upgrade\r\n\r\n");
    Bytes::from(head)
}

/// The `id` a message carries: where SSE sends `id:`, and empty where SSE
/// clears the client's id (RESET).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Id {
    None,
    Clear,
    Rv(u64),
}

/// `json` (a `{"type":..}` object), with `prefix` (`{"sub":ID,`) spliced in
/// front and `"id"` at the end. Without either it is `json` itself, shared.
fn message(prefix: Option<&[u8]>, json: Bytes, id: Id) -> ByteString {
    if prefix.is_none() && id == Id::None {
        return text(json);
    }
    let mut tail = [0u8; TAIL];
    let parts = parts(prefix, &json, id, &mut tail);
    let mut buf = BytesMut::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        buf.put_slice(part);
    }
    text(buf.freeze())
}

/// Room for the end of a message: `,"id":"` and a `u64` and `"}`.
const TAIL: usize = 32;

/// A message in three parts, to copy or to write as they are: its start
/// (`prefix`, or `{`), the inside of `json`, and its end (`"id"` and `}`).
fn parts<'a>(
    prefix: Option<&'a [u8]>,
    json: &'a [u8],
    id: Id,
    tail: &'a mut [u8; TAIL],
) -> [&'a [u8]; 3] {
    debug_assert!(json.len() >= 2 && json[0] == b'{' && json[json.len() - 1] == b'}');
    let tail: &[u8] = match id {
        Id::None => b"}",
        Id::Clear => br#","id":""}"#,
        Id::Rv(rv) => {
            // Written backwards: `"}`, the digits, `,"id":"` (at most 29
            // bytes), without the formatting machinery, per socket and
            // message.
            let mut at = TAIL;
            let mut put = |bytes: &[u8]| {
                at -= bytes.len();
                tail[at..at + bytes.len()].copy_from_slice(bytes);
            };
            put(br#""}"#);
            let mut rest = rv;
            loop {
                put(&[b'0' + (rest % 10) as u8]);
                rest /= 10;
                if rest == 0 {
                    break;
                }
            }
            put(br#","id":""#);
            &tail[at..]
        }
    };
    [prefix.unwrap_or(b"{"), &json[1..json.len() - 1], tail]
}

/// Every message is built from serde_json output and ASCII, so it is UTF-8;
/// the lossy path only exists so that a broken invariant cannot panic.
fn text(bytes: Bytes) -> ByteString {
    ByteString::try_from(bytes.clone())
        .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned().into())
}

fn event_json(kind: &str, object: &str) -> Bytes {
    Bytes::from(format!(r#"{{"type":"{kind}","object":{object}}}"#))
}

/// An ERROR event carrying `status`.
fn error_json(status: &Value) -> Bytes {
    event_json("ERROR", &status.to_string())
}

fn error_message(prefix: Option<&[u8]>, status: &Value) -> ByteString {
    message(prefix, error_json(status), Id::None)
}

/// `{"sub":ID,` for a client's subscription id.
fn sub_prefix(id: &str) -> Bytes {
    Bytes::from(format!(r#"{{"sub":{},"#, Value::from(id)))
}

const NULL_PREFIX: &[u8] = br#"{"sub":null,"#;

/// A subscription task's view of its socket.
struct Outlet {
    out_tx: mpsc::Sender<Message>,
    prefix: Option<Bytes>,
    done_tx: mpsc::Sender<(String, u64)>,
    key: (String, u64),
    /// `kubefan_bytes_sent_total` for the subscription's resource, once
    /// it has one.
    bytes_sent: Option<Counter>,
}

impl Outlet {
    /// Queues a message; waits while the socket is slow. False once the
    /// socket is gone.
    async fn send(&self, msg: ByteString) -> bool {
        if let Some(bytes) = &self.bytes_sent {
            bytes.inc_by(msg.len() as u64);
        }
        self.out_tx.send(Message::Text(msg)).await.is_ok()
    }

    async fn send_error(&self, status: &Value) -> bool {
        self.send(error_message(self.prefix.as_deref(), status))
            .await
    }
}

/// Where a subscription's messages go: the socket's outbox, or the socket
/// itself when the writer runs the subscription.
trait Sink {
    /// Sends one text message, [`message`]`(prefix, json, id)`; false once
    /// the socket is gone.
    async fn message(&mut self, prefix: Option<&[u8]>, json: Bytes, id: Id) -> bool;
}

impl Sink for Outlet {
    async fn message(&mut self, prefix: Option<&[u8]>, json: Bytes, id: Id) -> bool {
        self.send(message(prefix, json, id)).await
    }
}

/// The writer's own socket, for the subscription it runs.
struct Direct<'a> {
    raw: &'a mut WsWriter,
    bytes_sent: &'a Counter,
}

impl Sink for Direct<'_> {
    /// The message's parts go to the socket as they are, in one `writev`:
    /// no copy per socket to splice the `"id"` in. They are UTF-8 as
    /// [`message`]'s are: the hub's JSON is serde_json output, the rest
    /// ASCII.
    async fn message(&mut self, prefix: Option<&[u8]>, json: Bytes, id: Id) -> bool {
        let mut tail = [0u8; TAIL];
        let parts = parts(prefix, &json, id, &mut tail);
        self.bytes_sent
            .inc_by(parts.iter().map(|p| p.len() as u64).sum());
        self.raw.send_parts(Opcode::Text, &parts).await.is_ok()
    }
}

/// Sends the messages of one item of a subscription; false once the socket
/// is gone. `prefix` is `{"sub":ID,` on `/ws`.
async fn emit(
    sink: &mut impl Sink,
    item: Item,
    prefix: Option<&[u8]>,
    meta: &ResourceMeta,
    sent: &Counter,
) -> bool {
    match item {
        Item::Snapshot(objects) => {
            for obj in &objects {
                if !sink.message(prefix, obj.json(), Id::None).await {
                    return false;
                }
                sent.inc();
            }
            true
        }
        Item::Events(events) => {
            for ev in &events {
                let id = if ev.has_id() {
                    Id::Rv(ev.rv())
                } else {
                    Id::None
                };
                if !sink.message(prefix, ev.frame().json(), id).await {
                    return false;
                }
                sent.inc();
            }
            true
        }
        Item::SnapshotEnd { rv } => {
            let json = event_json("BOOKMARK", &bookmark_object(meta, rv, true));
            sink.message(prefix, json, Id::Rv(rv)).await
        }
        Item::Progress { rv } => {
            let json = event_json("BOOKMARK", &bookmark_object(meta, rv, false));
            sink.message(prefix, json, Id::Rv(rv)).await
        }
        // The control loop pings on the same tick.
        Item::KeepAlive => true,
        Item::Reset(reason) => {
            let json = event_json("RESET", &reset_status(reason).to_string());
            sink.message(prefix, json, Id::Clear).await
        }
        Item::Closed(reason) => {
            let json = error_json(&closed_status(meta, &reason));
            sink.message(prefix, json, Id::None).await
        }
        Item::Shutdown => {
            sink.message(prefix, error_json(&shutdown_status()), Id::None)
                .await
        }
    }
}

/// What a subscription task starts from.
/// Started by the task (`/ws`); refusals become ERROR messages.
struct Start {
    resource: String,
    params: StreamParams,
}

/// One subscription: frames its items into the socket's outbox until the
/// stream ends (hub closed, shutdown) or the socket goes away.
async fn run_subscription(
    state: web::Data<AppState>,
    principal: Principal,
    outlet: Outlet,
    start: Box<Start>,
) {
    let Start { resource, params } = *start;
    // Boxed: the task then holds the subscription, not the larger state of
    // starting it, for as long as it streams.
    let sub = Box::pin(async {
        tokio::select! {
            biased;
            _ = state.lifecycle.shutting_down() => Err(shutdown_status()),
            started = subscribe(&state, &principal, &resource, &params, Transport::WebSocket) => started.map_err(|e| e.status()),
        }
    })
    .await;
    let mut sub = match sub {
        Ok(sub) => sub,
        Err(status) => {
            if outlet.send_error(&status).await {
                let _ = outlet.done_tx.send(outlet.key).await;
            }
            return;
        }
    };
    let meta = sub.hub().meta().clone();
    let sent = state
        .metrics
        .events_sent(sub.hub().name(), Transport::WebSocket);
    let mut outlet = outlet;
    outlet.bytes_sent = Some(
        state
            .metrics
            .bytes_sent(sub.hub().name(), Transport::WebSocket),
    );
    let prefix = outlet.prefix.clone();
    while let Some(item) = sub.next().await {
        if !emit(&mut outlet, item, prefix.as_deref(), &meta, &sent).await {
            return;
        }
    }
    let _ = outlet.done_tx.send(outlet.key).await;
}

struct Running {
    generation: u64,
    task: JoinHandle<()>,
}

/// A single-stream socket (`GET /stream/{resource}` upgraded), in one task
/// on the streams' runtime, as an SSE stream is: it writes the
/// subscription's messages straight onto the socket, answers the client's
/// frames, pings on every keep-alive tick, and ends the socket on the idle
/// timeout or when the token expires. No outbox, no second task.
async fn single(
    taken: Taken,
    mut sub: Subscription,
    state: web::Data<AppState>,
    principal: Principal,
) {
    let Upgraded {
        mut inbox,
        writer: mut raw,
    } = match taken.open() {
        Ok(upgraded) => upgraded,
        Err(err) => {
            // Logged; the 101 is not sent, and the connection closes.
            let _ = lost(err);
            return;
        }
    };
    if raw.open().await.is_err() {
        return;
    }
    let meta = sub.hub().meta().clone();
    let metrics = &state.metrics;
    let sent = metrics.events_sent(sub.hub().name(), Transport::WebSocket);
    let bytes_sent = metrics.bytes_sent(sub.hub().name(), Transport::WebSocket);
    let idle_timeout = state.stream.effective_ws_idle_timeout();
    let idle = tokio::time::sleep(idle_timeout);
    tokio::pin!(idle);
    let deadline = principal.deadline();
    let expiry = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now));
    tokio::pin!(expiry);
    let mut pinged = state.lifecycle.ticks();
    let ending: Ending = loop {
        // The client first: its frames are rare, and looking costs a load
        // of the socket's readiness.
        let next = tokio::select! {
            biased;
            msg = inbox.next() => Single::Client(msg),
            _ = &mut idle => break close(CloseCode::Policy, IDLE),
            _ = &mut expiry, if deadline.is_some() => {
                // Nothing of the subscription can follow the ERROR.
                drop(sub);
                let mut direct = Direct { raw: &mut raw, bytes_sent: &bytes_sent };
                let json = error_json(&super::sse::expired_status());
                if !direct.message(None, json, Id::None).await {
                    return;
                }
                break close(CloseCode::Other(CLOSE_TOKEN_EXPIRED), "token expired");
            }
            item = sub.next() => Single::Item(item),
        };
        match next {
            Single::Client(msg) => {
                idle.as_mut().reset(Instant::now() + idle_timeout);
                match heard(msg) {
                    Heard::End(ending) => break ending,
                    Heard::Ping(payload) => {
                        if raw.send(Opcode::Pong, &payload).await.is_err() {
                            return;
                        }
                    }
                    // A single stream takes no messages: text only proves
                    // the peer alive.
                    Heard::Alive | Heard::Text(_) => {}
                }
            }
            Single::Item(None) => {
                break if state.lifecycle.is_shutting_down() {
                    close(CloseCode::Away, GOING_AWAY)
                } else {
                    close(CloseCode::Normal, "the stream ended")
                };
            }
            Single::Item(Some(item)) => {
                let mut direct = Direct {
                    raw: &mut raw,
                    bytes_sent: &bytes_sent,
                };
                if !emit(&mut direct, item, None, &meta, &sent).await {
                    return;
                }
                // Pinged on every tick, even while the stream is busy: the
                // pong is what keeps the socket from its idle timeout.
                let ticks = state.lifecycle.ticks();
                if ticks != pinged {
                    pinged = ticks;
                    if raw.send(Opcode::Ping, b"").await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    if let Some(reason) = ending {
        raw.close(
            u16::from(reason.code),
            reason.description.as_deref().unwrap_or(""),
        )
        .await;
    }
}

/// What a single-stream socket's task does next.
enum Single {
    /// A client message, or the end of the connection.
    Client(Option<Result<AggregatedMessage, ProtocolError>>),
    /// The subscription's next item, or its end.
    Item(Option<Item>),
}

/// Why a socket's control loop closes it on an idle timeout.
const IDLE: &str = "no pong or message within the idle timeout";
/// ... on shutdown.
const GOING_AWAY: &str = "kubefan is shutting down; reconnect";

/// What a client's frame (or the end of its connection) asks of either kind
/// of socket.
enum Heard {
    /// A ping, to answer with this pong payload.
    Ping(Bytes),
    /// A pong: only a sign of life.
    Alive,
    /// A text message.
    Text(ByteString),
    /// The socket ends, with this Close frame (none when the connection is
    /// gone: nobody to send it to).
    End(Ending),
}

fn heard(msg: Option<Result<AggregatedMessage, ProtocolError>>) -> Heard {
    match msg {
        None => Heard::End(None),
        Some(Err(err)) => Heard::End(protocol_close(&err)),
        Some(Ok(AggregatedMessage::Ping(payload))) => Heard::Ping(payload),
        Some(Ok(AggregatedMessage::Pong(_))) => Heard::Alive,
        Some(Ok(AggregatedMessage::Text(text))) => Heard::Text(text),
        // The client's code echoed, no reason.
        Some(Ok(AggregatedMessage::Close(reason))) => Heard::End(Some(CloseReason {
            code: reason.map_or(CloseCode::Normal, |r| r.code),
            description: None,
        })),
        Some(Ok(AggregatedMessage::Binary(_))) => Heard::End(close(
            CloseCode::Unsupported,
            "kubefan accepts JSON text messages only",
        )),
    }
}

/// A `/ws` socket: its writer, its subscriptions, its control loop.
struct Socket {
    state: web::Data<AppState>,
    out_tx: mpsc::Sender<Message>,
    subs: HashMap<String, Running>,
    max_subs: usize,
    done_tx: mpsc::Sender<(String, u64)>,
    generation: u64,
    idle_timeout: Duration,
    /// Who opened the socket; `/ws` subscriptions are authorized as it.
    principal: Principal,
}

/// Why the control loop ended: the Close frame to send, if any.
type Ending = Option<CloseReason>;

fn close(code: CloseCode, description: &str) -> Ending {
    Some(CloseReason {
        code,
        description: Some(description.to_string()),
    })
}

impl Socket {
    /// The socket and the receiver of its subscriptions' end notices.
    fn new(
        state: web::Data<AppState>,
        writer: WsWriter,
        max_subs: usize,
        principal: Principal,
    ) -> (Socket, mpsc::Receiver<(String, u64)>) {
        let (out_tx, out_rx) = mpsc::channel(OUTBOX);
        // Each task sends one notice, at its end; the loop reads them first
        // of all, so this hardly ever holds more than a few (and a full
        // one only delays a task that has already finished).
        let (done_tx, done_rx) = mpsc::channel(max_subs);
        let idle_timeout = state.stream.effective_ws_idle_timeout();
        tokio::spawn(state.streams.track(write(writer, out_rx)));
        let socket = Socket {
            state,
            out_tx,
            subs: HashMap::new(),
            max_subs,
            done_tx,
            generation: 0,
            idle_timeout,
            principal,
        };
        (socket, done_rx)
    }

    /// Runs the socket's control loop: client messages, pings, the idle
    /// timeout and the token's expiry.
    async fn run(mut self, mut done_rx: mpsc::Receiver<(String, u64)>, mut msgs: Inbox) {
        let lifecycle = self.state.lifecycle.clone();
        let mut ticks = lifecycle.ticks();
        let idle = tokio::time::sleep(self.idle_timeout);
        tokio::pin!(idle);
        let deadline = self.principal.deadline();
        let expiry = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now));
        tokio::pin!(expiry);
        let ending: Ending = loop {
            tokio::select! {
                // Ordered: an ended subscription frees its id before the
                // next client message is read.
                biased;
                _ = lifecycle.shutting_down(), if self.subs.is_empty() => {
                    break close(CloseCode::Away, GOING_AWAY);
                }
                Some((id, generation)) = done_rx.recv() => {
                    if self.subs.get(&id).is_some_and(|r| r.generation == generation) {
                        self.subs.remove(&id);
                    }
                }
                ticked = lifecycle.next_tick(ticks), if !lifecycle.is_shutting_down() => {
                    ticks = ticked;
                    let _ = self.out_tx.try_send(Message::Ping(Bytes::new()));
                }
                _ = &mut idle => break close(CloseCode::Policy, IDLE),
                _ = &mut expiry, if deadline.is_some() => {
                    break Box::pin(self.expire()).await;
                }
                msg = msgs.next() => {
                    idle.as_mut().reset(Instant::now() + self.idle_timeout);
                    match heard(msg) {
                        Heard::End(ending) => break ending,
                        Heard::Ping(payload) => {
                            // Dropped if the socket is backed up: a peer that
                            // reads nothing needs no pong.
                            let _ = self.out_tx.try_send(Message::Pong(payload));
                        }
                        Heard::Alive => {}
                        Heard::Text(text) => {
                            // Boxed, as the other rare steps: the socket's
                            // task keeps only the state of its waiting.
                            if !Box::pin(self.handle(&text)).await {
                                break close(CloseCode::Policy, "not reading");
                            }
                        }
                    }
                }
            }
        };
        Box::pin(self.finish(ending)).await;
    }

    /// Stops every subscription, then queues the Close frame (at most
    /// [`CLOSE_WAIT`] behind a stuck socket) and lets the writer drain.
    async fn finish(self, ending: Ending) {
        for running in self.subs.values() {
            running.task.abort();
        }
        if let Some(reason) = ending {
            let _ =
                tokio::time::timeout(CLOSE_WAIT, self.out_tx.send(Message::Close(Some(reason))))
                    .await;
        }
        // Without a Close (the peer is gone) the writer ends once the
        // aborted tasks have dropped their senders.
    }

    /// The token expired: each subscription gets an ERROR (401), and the
    /// socket closes with [`CLOSE_TOKEN_EXPIRED`].
    async fn expire(&mut self) -> Ending {
        let status = super::sse::expired_status();
        for (id, running) in self.subs.drain() {
            // Nothing it sends can follow the ERROR.
            stop(running.task).await;
            let msg = error_message(Some(&sub_prefix(&id)), &status);
            if tokio::time::timeout(CLOSE_WAIT, self.out_tx.send(Message::Text(msg)))
                .await
                .is_err()
            {
                break;
            }
        }
        close(CloseCode::Other(CLOSE_TOKEN_EXPIRED), "token expired")
    }

    fn spawn(&mut self, id: String, prefix: Option<Bytes>, start: Box<Start>) {
        self.generation += 1;
        let outlet = Outlet {
            out_tx: self.out_tx.clone(),
            prefix,
            done_tx: self.done_tx.clone(),
            key: (id.clone(), self.generation),
            bytes_sent: None,
        };
        let task = tokio::spawn(run_subscription(
            self.state.clone(),
            self.principal.clone(),
            outlet,
            start,
        ));
        self.subs.insert(
            id,
            Running {
                generation: self.generation,
                task,
            },
        );
    }

    /// Queues a reply from the control loop; false if the socket accepted
    /// nothing for the idle timeout.
    async fn reply(&self, msg: ByteString) -> bool {
        tokio::time::timeout(self.idle_timeout, self.out_tx.send(Message::Text(msg)))
            .await
            .is_ok_and(|sent| sent.is_ok())
    }

    /// Acts on one client message of a `/ws` socket.
    async fn handle(&mut self, text: &str) -> bool {
        let op = match parse_op(text) {
            Ok(op) => op,
            Err(OpError::Socket(msg)) => {
                let status = status_json(400, "BadRequest", &msg);
                return self.reply(error_message(Some(NULL_PREFIX), &status)).await;
            }
            Err(OpError::Sub(id, err)) => {
                return self
                    .reply(error_message(Some(&sub_prefix(&id)), &err.status()))
                    .await;
            }
        };
        match op {
            Op::Subscribe {
                id,
                resource,
                params,
            } => {
                let prefix = sub_prefix(&id);
                let refusal = if self.subs.contains_key(&id) {
                    Some(status_json(
                        409,
                        "AlreadyExists",
                        &format!("subscription {id:?} is already active on this socket"),
                    ))
                } else if self.subs.len() >= self.max_subs {
                    Some(status_json(
                        429,
                        "TooManyRequests",
                        &format!(
                            "this socket already holds {} subscriptions, the most allowed",
                            self.max_subs
                        ),
                    ))
                } else {
                    None
                };
                match refusal {
                    Some(status) => self.reply(error_message(Some(&prefix), &status)).await,
                    None => {
                        self.spawn(id, Some(prefix), Box::new(Start { resource, params }));
                        true
                    }
                }
            }
            Op::Unsubscribe { id } => {
                let prefix = sub_prefix(&id);
                match self.subs.remove(&id) {
                    Some(running) => {
                        // Whatever it queued is ahead of the reply; nothing
                        // of it can follow.
                        stop(running.task).await;
                        let json = Bytes::from_static(br#"{"type":"UNSUBSCRIBED"}"#);
                        self.reply(message(Some(&prefix), json, Id::None)).await
                    }
                    None => {
                        let status = status_json(
                            404,
                            "NotFound",
                            &format!("no active subscription {id:?} on this socket"),
                        );
                        self.reply(error_message(Some(&prefix), &status)).await
                    }
                }
            }
        }
    }
}

/// The socket's one writer: outbox → socket, until a Close or the peer is
/// gone.
async fn write(mut raw: WsWriter, mut out_rx: mpsc::Receiver<Message>) {
    if raw.open().await.is_err() {
        return;
    }
    while let Some(msg) = out_rx.recv().await {
        let sent = match msg {
            Message::Close(reason) => {
                let (code, text) = reason.map_or((1000, String::new()), |r| {
                    (u16::from(r.code), r.description.unwrap_or_default())
                });
                raw.close(code, &text).await;
                return;
            }
            Message::Text(text) => raw.send(Opcode::Text, text.as_bytes()).await,
            Message::Ping(payload) => raw.send(Opcode::Ping, &payload).await,
            Message::Pong(payload) => raw.send(Opcode::Pong, &payload).await,
            // Never queued.
            Message::Binary(_) | Message::Continuation(_) | Message::Nop => Ok(()),
        };
        if sent.is_err() {
            return;
        }
    }
    raw.close(1000, "").await;
}

/// Stops a subscription's task: nothing it sends can follow what is
/// queued next.
async fn stop(task: JoinHandle<()>) {
    task.abort();
    let _ = task.await;
}

/// The Close frame for a frame the server cannot take.
fn protocol_close(err: &ProtocolError) -> Ending {
    match err {
        ProtocolError::Overflow => close(CloseCode::Size, "message too big"),
        ProtocolError::Io(io) if io.to_string().contains("continuation size") => {
            close(CloseCode::Size, "message too big")
        }
        ProtocolError::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
            close(CloseCode::Invalid, "text is not UTF-8")
        }
        ProtocolError::Io(_) => None,
        other => close(CloseCode::Protocol, &other.to_string()),
    }
}

/// A `/ws` client message.
#[derive(Debug, PartialEq)]
enum Op {
    Subscribe {
        id: String,
        resource: String,
        params: StreamParams,
    },
    Unsubscribe {
        id: String,
    },
}

#[derive(Debug)]
enum OpError {
    /// Not attributable to a subscription: answered with `"sub":null`.
    Socket(String),
    /// Refused for this subscription id.
    Sub(String, ApiError),
}

fn parse_op(text: &str) -> Result<Op, OpError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| OpError::Socket(format!("malformed JSON: {e}")))?;
    let Value::Object(mut fields) = value else {
        return Err(OpError::Socket(
            "a client message is a JSON object with \"op\" and \"id\"".into(),
        ));
    };
    let op = match fields.remove("op") {
        Some(Value::String(op)) => op,
        _ => {
            return Err(OpError::Socket(
                "missing \"op\" (\"subscribe\" or \"unsubscribe\")".into(),
            ));
        }
    };
    let id = match fields.remove("id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_SUB_ID => id,
        _ => {
            return Err(OpError::Socket(format!(
                "missing \"id\": a string of 1 to {MAX_SUB_ID} bytes naming the subscription"
            )));
        }
    };
    match op.as_str() {
        "subscribe" => {
            let resource = match fields.remove("resource") {
                Some(Value::String(r)) if !r.is_empty() => r,
                _ => {
                    return Err(OpError::Sub(
                        id,
                        ApiError::BadRequest("missing \"resource\" (e.g. \"pods\")".into()),
                    ));
                }
            };
            match options(fields).and_then(|pairs| parse_stream_params(pairs, "field")) {
                Ok(params) => Ok(Op::Subscribe {
                    id,
                    resource,
                    params,
                }),
                Err(err) => Err(OpError::Sub(id, err)),
            }
        }
        "unsubscribe" => match fields.keys().next() {
            None => Ok(Op::Unsubscribe { id }),
            Some(key) => Err(OpError::Sub(
                id.clone(),
                ApiError::BadRequest(format!("unknown field {key:?} in unsubscribe")),
            )),
        },
        other => Err(OpError::Socket(format!(
            "unknown op {other:?} (known: subscribe, unsubscribe)"
        ))),
    }
}

/// A subscribe message's options as the query string's key/value pairs:
/// a string or number is one value, a list of them repeats the key.
fn options(fields: Map<String, Value>) -> Result<Vec<(String, String)>, ApiError> {
    let mut pairs = Vec::new();
    for (key, value) in fields {
        let values = match value {
            Value::Array(items) => items,
            one => vec![one],
        };
        for value in values {
            let value = match value {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                _ => {
                    return Err(ApiError::BadRequest(format!(
                        "field {key:?} must be a string or a list of strings"
                    )));
                }
            };
            pairs.push((key.clone(), value));
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(b: ByteString) -> String {
        b.to_string()
    }

    #[test]
    fn messages_splice_sub_and_id_into_the_shared_json() {
        let json = Bytes::from_static(br#"{"type":"ADDED","object":{"a":1}}"#);
        assert_eq!(
            s(message(None, json.clone(), Id::None)),
            std::str::from_utf8(&json).unwrap()
        );
        assert_eq!(
            s(message(None, json.clone(), Id::Rv(42))),
            r#"{"type":"ADDED","object":{"a":1},"id":"42"}"#
        );
        assert_eq!(
            s(message(Some(&sub_prefix("a\"b")), json.clone(), Id::Clear)),
            r#"{"sub":"a\"b","type":"ADDED","object":{"a":1},"id":""}"#
        );
        assert_eq!(
            s(message(Some(NULL_PREFIX), json.clone(), Id::None)),
            r#"{"sub":null,"type":"ADDED","object":{"a":1}}"#
        );
        // The longest id fits the tail the writer keeps on its stack.
        let mut tail = [0u8; TAIL];
        assert_eq!(
            parts(None, &json, Id::Rv(u64::MAX), &mut tail).concat(),
            br#"{"type":"ADDED","object":{"a":1},"id":"18446744073709551615"}"#
        );
    }

    #[test]
    fn subscribe_takes_the_query_string_options() {
        let op = parse_op(
            r#"{"op":"subscribe","id":"a","resource":"pods","namespace":["web","db"],"resourceVersion":"12"}"#,
        )
        .unwrap();
        let Op::Subscribe {
            id,
            resource,
            params,
        } = op
        else {
            panic!("{op:?}")
        };
        assert_eq!((id.as_str(), resource.as_str()), ("a", "pods"));
        assert_eq!(params.namespaces, ["web", "db"]);
        assert_eq!(params.resume, Some(12));
        assert_eq!(
            parse_op(r#"{"op":"unsubscribe","id":"a"}"#).unwrap(),
            Op::Unsubscribe { id: "a".into() }
        );
    }

    #[test]
    fn bad_messages_are_refused_for_the_socket_or_the_id() {
        for text in [
            "{",
            "[]",
            r#"{"id":"a"}"#,
            r#"{"op":"subscribe"}"#,
            r#"{"op":"subscribe","id":""}"#,
            r#"{"op":"dance","id":"a"}"#,
        ] {
            assert!(matches!(parse_op(text), Err(OpError::Socket(_))), "{text}");
        }
        for text in [
            r#"{"op":"subscribe","id":"a"}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","nmespace":"x"}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","namespace":"Bad_NS"}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","namespace":{"x":1}}"#,
            r#"{"op":"unsubscribe","id":"a","resource":"pods"}"#,
        ] {
            match parse_op(text) {
                Err(OpError::Sub(id, ApiError::BadRequest(_))) => assert_eq!(id, "a"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
