//! WebSocket: `GET /stream/{resource}` upgraded (one subscription per
//! socket, `single`) and `GET /ws` (many subscriptions on one socket,
//! named by client-chosen ids, `mux`). The protocol is specified in
//! `proto/PROTOCOL.md`.
//!
//! Frames only, as SSE does: a message is the SSE `data` JSON the hub
//! already encoded, with the id and the subscription spliced in
//! ([`message`]); the items of a subscription become messages on the path
//! every transport shares (`transport::stream`).
//!
//! # Never waiting on a client, never buffering without bound
//! Both kinds of socket are taken over from actix after the handshake
//! (`transport::takeover`, which also reads what the client sends: each
//! frame bounded from its header before its payload is buffered, and
//! frames that do nothing rationed, `takeover::ws_read`).
//!
//! Both are driven as an SSE stream is (`takeover::Pump`), in one task
//! on the streams' runtime or, caught up, parked with its hub's batch
//! writer; only their wires differ. A single-stream socket's wire
//! (`single`) writes each message straight onto the socket, and between
//! messages looks at the socket's readiness for the client's frames
//! (pings, pongs, Close). A socket that is not read blocks its task (up
//! to the write timeout) with the cursor in place.
//!
//! On `/ws`, each subscription is a stream of its own (`mux::sub`), whose
//! wire is its socket's outbox
//! (`mux::outbox`): straight onto the socket while nothing is queued, else
//! into a bounded queue that the socket's control loop writes. A socket
//! that is not read fills the queue and its subscriptions wait. The
//! control loop (client messages, pings, idle timeout, the socket's
//! writing) only ever *tries* to queue its own ping, and reads the client
//! only while the queue has room, queueing at most one frame (a pong, a
//! reply) per message read: a client that does not read what it asks for
//! is not read either, and is closed at the idle timeout. The control loop
//! and every subscription task are streams too: on the streams' runtime,
//! waited for at shutdown.
//!
//! Either way the hub never waits for a subscriber and, if one stays
//! behind, laps it: RESET and a fresh snapshot, as on SSE.

mod keepalive;
pub mod message;
mod mux;
pub(crate) mod ops;
mod single;

use actix_web::{HttpRequest, HttpResponse, web};
use actix_ws::{AggregatedMessage, CloseCode, CloseReason};
use bytes::Bytes;
use bytestring::ByteString;

use std::task::{Context, Poll, ready};

use super::takeover::{self, InboxError, InboxLimits, Taken};
use super::{access_log, parse_stream_query, subscribe};
use crate::auth::{self, Principal, Verb};
use crate::cluster::ClusterOf;
use crate::hub::Subscription;
use crate::metrics::Transport;
use crate::status::ApiError;
use crate::transport::state::AppState;
use crate::transport::stream::{Framed, Framing};
use message::{Outgoing, WsFraming, close_reason};

/// `GET /stream/{resource}` with `Upgrade: websocket`: the SSE stream's
/// messages, one JSON text frame each. The subscription starts before the
/// upgrade, so every refusal is a plain HTTP error with a `Status` body.
pub async fn stream(
    req: HttpRequest,
    resource: web::Path<String>,
    state: web::Data<AppState>,
    cluster: ClusterOf,
    principal: Principal,
) -> Result<HttpResponse, ApiError> {
    let params = parse_stream_query(&auth::strip_token(req.query_string()))?;
    let sub = subscribe(
        &state,
        &cluster,
        &principal,
        &resource,
        &params,
        Transport::WebSocket,
    )
    .await?;
    access_log::note(&req, Verb::Watch, sub.hub().name(), &sub.namespaces());
    let taken = handshake(&req, &state, &sub.hub().warnings())?;
    let phase = sub.phase();
    let framed = framed(sub, principal.name());
    let wire = single::Single::new(
        Box::new(taken),
        state.stream.effective_ws_idle_timeout(),
        &state.lifecycle,
        phase,
    );
    state.streams.drive(framed, wire);
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
    // At `/ws` on a gateway of several clusters and no default one, the
    // socket has none: its subscriptions name theirs.
    let cluster = match ClusterOf::of(&req) {
        Ok(cluster) => Some(cluster.0),
        Err(_) if state.clusters.named() => None,
        Err(err) => return Err(err),
    };
    let across = actix_web::HttpMessage::extensions(&req).contains::<crate::cluster::Across>();
    let taken = handshake(&req, &state, &[])?;
    mux::spawn(state, (cluster, across), Box::new(taken), principal);
    // actix writes this into the emptied connection, where it vanishes.
    Ok(HttpResponse::Ok().finish())
}

/// Validates the handshake and takes the connection over from actix: kubefan
/// reads the client's frames from the socket and writes its own, without
/// actix's connection, buffers and body stream.
///
/// `warnings` (the API server's for the resource) go with the `101` as
/// `Warning` headers.
fn handshake(
    req: &HttpRequest,
    state: &AppState,
    warnings: &[&'static str],
) -> Result<Taken, ApiError> {
    let mut accept = actix_http::ws::handshake(req.head())
        .map_err(|e| ApiError::BadRequest(format!("not a WebSocket handshake: {e}")))?
        .finish();
    crate::transport::append_warnings(accept.headers_mut(), warnings);
    let limits = InboxLimits {
        max_message: state.stream.ws_max_message,
        max_fragments: state.stream.ws_max_fragments,
        idle_frames_per_minute: state.limits.config().idle_frames_per_minute,
    };
    takeover::upgrade(req, &state.streams, switching(&accept), limits)
        .ok_or_else(takeover::not_taken_over)?
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

/// A subscription framed as WebSocket messages.
fn framed(sub: Subscription, principal: &str) -> Framed<WsFraming> {
    Framed::new(sub, WsFraming::default(), Transport::WebSocket, principal)
}

/// The messages of a stream's next item, counted as sent: their payloads
/// and `extra` bytes each (a `/ws` subscription's prefix); `None` once the
/// stream is over.
pub(crate) fn poll_messages<F: Framing<Out = Vec<Outgoing>>>(
    framed: &mut Framed<F>,
    cx: &mut Context<'_>,
    extra: u64,
) -> Poll<Option<Vec<Outgoing>>> {
    let mut out = Vec::new();
    if !ready!(framed.poll_next_into(cx, &mut out)) {
        return Poll::Ready(None);
    }
    let bytes = out.iter().map(|msg| msg.payload_len() + extra).sum();
    framed.wrote(bytes);
    Poll::Ready(Some(out))
}

/// Why a socket ends: the Close frame to send (none when the connection is
/// gone: nobody to send it to).
type Ending = Option<CloseReason>;

/// What a client's frame (or the end of its connection) asks of either kind
/// of socket.
enum ClientFrame {
    /// A ping, to answer with this pong payload.
    Ping(Bytes),
    /// A pong: only a sign of life.
    Pong,
    /// A text message.
    Text(ByteString),
    /// The socket ends.
    End(Ending),
}

impl ClientFrame {
    fn of(msg: Option<Result<AggregatedMessage, InboxError>>) -> ClientFrame {
        match msg {
            None | Some(Err(InboxError::Io(_))) => ClientFrame::End(None),
            Some(Err(InboxError::Refused(refusal))) => {
                ClientFrame::End(Some(close_reason(refusal.code(), &refusal.to_string())))
            }
            Some(Ok(AggregatedMessage::Ping(payload))) => ClientFrame::Ping(payload),
            Some(Ok(AggregatedMessage::Pong(_))) => ClientFrame::Pong,
            Some(Ok(AggregatedMessage::Text(text))) => ClientFrame::Text(text),
            // The client's code echoed, no reason.
            Some(Ok(AggregatedMessage::Close(reason))) => ClientFrame::End(Some(CloseReason {
                code: reason.map_or(CloseCode::Normal, |r| r.code),
                description: None,
            })),
            Some(Ok(AggregatedMessage::Binary(_))) => ClientFrame::End(Some(close_reason(
                CloseCode::Unsupported,
                "kubefan accepts JSON text messages only",
            ))),
        }
    }
}
