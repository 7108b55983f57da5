//! HTTP/2 connections (ALPN `h2` over TLS), driven by kubefan on the h2
//! crate (the version actix-http's own `http2` feature would bring).
//!
//! Every request goes to the same actix-web application as over HTTP/1.1:
//! middleware, routes and handlers are the same, and so are the answers.
//! An ordinary response is sent from the request's own small task on this
//! worker. A stream (SSE, a Kubernetes watch) is taken by its handler
//! (`h2_stream`): its head is sent at once and its chunks by a task on the
//! streams' runtime, as a taken-over HTTP/1.1 stream's are, so an open
//! HTTP/2 stream costs its subscription, its task and h2's state for the
//! stream, not a request future.
//!
//! Why not actix-http's own HTTP/2 dispatcher: it waits for a stream's
//! flow-control window with no deadline (`handle_response` awaits
//! `poll_capacity` for as long as the client gives no window), keeps each
//! stream's whole request future on the worker, and cannot hand a stream
//! to the streams' runtime; kubefan needs all three (ARCHITECTURE.md).
//!
//! Flow control is per stream: a stream whose client grants no window
//! stops pulling its subscription, which the hub laps like any slow reader
//! (`RESET`, or 410 on the watch face, once the client reads again); the
//! other streams of the connection go on. A stream granted no window for
//! the write timeout is reset (`RST_STREAM CANCEL`).
//!
//! The connection: at most `max_streams` streams at once; a ping every
//! keep-alive interval, and a peer whose pong has not come back within the
//! write timeout (it reads nothing at all) is dropped; frames that do
//! nothing past the connection's ration end it with GOAWAY
//! `ENHANCE_YOUR_CALM` (`h2_guard`); at shutdown a GOAWAY, then the
//! connection ends once its streams have.

use std::cell::RefCell;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use actix_http::body::{BodySize, BoxBody, MessageBody};
use actix_http::header::{self, HeaderValue};
use actix_http::{HttpMessage, Method, Request, Response, Version};
use actix_service::Service;
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Ping, RecvStream};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;

use super::Streams;
use super::h2_guard::Guarded;
use super::h2_stream::{OpenStreams, Stream, send_chunk};
use super::io::{WriteDeadline, linger};
use super::ration::IDLE_FRAMES;
use crate::lifecycle::Lifecycle;
use crate::tls::PeerCertificates;

/// Data a stream may have queued in h2 and not yet written to the
/// connection: h2 grants it no more window until some is written.
const SEND_BUFFER: usize = 64 << 10;

/// How long a client has to complete the HTTP/2 preface and settings.
const PREFACE_TIMEOUT: Duration = Duration::from_secs(10);

/// How many keep-alive intervals a connection may go with no stream open
/// before it is closed (GOAWAY, then the end once h2 has sent it): 2
/// minutes at the default 15 s. A client that opens one and never a stream
/// held it otherwise for as long as it answered pings, which h2 does by
/// itself: connections collected so, counted by nothing (no request
/// reaches the limits), until the file descriptors ran out. Browsers open
/// a new one when they need it.
const IDLE_INTERVALS: u32 = 8;

/// How long a connection cut for its frames (`h2_guard`) has to take its
/// GOAWAY before it is dropped.
const GOAWAY_WAIT: Duration = Duration::from_secs(1);

/// How HTTP/2 connections are served.
pub struct Settings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_streams: u32,
    /// Largest request header list accepted (h2 refuses larger ones; the
    /// middleware's own bound answers 431 below it).
    pub max_header_bytes: u32,
    /// Interval of the connection's pings.
    pub keepalive: Duration,
    /// Frames that do nothing a connection may send at once and every
    /// minute (`h2_guard`).
    pub idle_frames_per_minute: u32,
    deadline: WriteDeadline,
}

impl Settings {
    /// Writes wait as the streams' writes do (`Streams`' write timeout
    /// and hard stop).
    pub fn new(
        streams: &Streams,
        max_streams: u32,
        max_header_bytes: u32,
        keepalive: Duration,
        idle_frames_per_minute: u32,
    ) -> Settings {
        Settings {
            max_streams,
            max_header_bytes,
            keepalive,
            idle_frames_per_minute,
            deadline: streams.deadline.clone(),
        }
    }

    fn lifecycle(&self) -> &Arc<Lifecycle> {
        &self.deadline.lifecycle
    }
}

/// Serves one HTTP/2 connection until it ends; each request carries the
/// certificate chain its TLS client presented (`client`).
pub(super) async fn serve<S>(
    io: TlsStream<TcpStream>,
    app: Rc<S>,
    peer: Option<SocketAddr>,
    client: Option<PeerCertificates>,
    settings: &Settings,
) where
    S: Service<Request, Response = Response<BoxBody>> + 'static,
    S::Error: Into<Response<BoxBody>>,
{
    let io = Guarded::new(io, settings.idle_frames_per_minute);
    let (cut, io_handle) = (io.cut(), io.handle());
    let handshake = h2::server::Builder::new()
        .max_concurrent_streams(settings.max_streams)
        .max_header_list_size(settings.max_header_bytes)
        .max_send_buffer_size(SEND_BUFFER)
        .handshake::<_, Bytes>(io);
    let mut conn = match tokio::time::timeout(PREFACE_TIMEOUT, handshake).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(err)) => {
            tracing::debug!(?peer, error = %err, "HTTP/2 handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(?peer, "HTTP/2 handshake timed out");
            return;
        }
    };
    let mut pings = conn.ping_pong();
    let mut ping_sent: Option<Instant> = None;
    let mut ticker =
        tokio::time::interval_at(Instant::now() + settings.keepalive, settings.keepalive);
    let mut draining = false;
    let lifecycle = settings.lifecycle().clone();
    let open = OpenStreams::default();
    // Since when no stream has been open (none yet: since the handshake).
    let mut idle_since = Some(Instant::now());
    let idle_timeout = settings.keepalive * IDLE_INTERVALS;
    let idle = tokio::time::sleep(idle_timeout);
    let mut idle = pin!(idle);
    loop {
        tokio::select! {
            next = conn.accept() => match next {
                Some(Ok((request, respond))) => {
                    let deadline = settings.deadline.clone();
                    let stream = Stream(Rc::new(RefCell::new(Some(respond))), open.clone());
                    let counted = open.open();
                    idle_since = None;
                    let serving = serve_request(request, stream, app.clone(), peer, client.clone(), deadline);
                    tokio::task::spawn_local(async move {
                        serving.await;
                        drop(counted);
                    });
                }
                Some(Err(err)) => {
                    tracing::debug!(?peer, error = %err, "HTTP/2 connection ended with an error");
                    return;
                }
                None => {
                    // Closed gracefully (no stream open for a while, or
                    // shutdown): h2 sent its last GOAWAY and the FIN.
                    // Dropped at once, the socket is reset under what the
                    // client still sends (the answer to h2's last ping),
                    // and the client reads an error, not the GOAWAY.
                    if draining && let Some(io) = io_handle.take() {
                        drop(conn);
                        linger(io).await;
                    }
                    return;
                }
            },
            // Set while h2 reads (`h2_guard`), which then wakes this task.
            () = poll_fn(|_| if cut.is_cut() { Poll::Ready(()) } else { Poll::Pending }) => {
                tracing::debug!(?peer, "closing an HTTP/2 connection that sent too many frames that do nothing");
                settings.deadline.metrics.limit_hit(IDLE_FRAMES);
                conn.abrupt_shutdown(h2::Reason::ENHANCE_YOUR_CALM);
                let _ = tokio::time::timeout(GOAWAY_WAIT, poll_fn(|cx| conn.poll_closed(cx))).await;
                // The GOAWAY went (and the FIN): the client has a moment
                // to read it before the close resets the connection.
                if let Some(io) = io_handle.take() {
                    drop(conn);
                    linger(io).await;
                }
                return;
            }
            _ = lifecycle.shutting_down(), if !draining => {
                draining = true;
                conn.graceful_shutdown();
            }
            // Looked at on each ping tick: streams end without telling
            // this task.
            () = &mut idle, if idle_since.is_some() && !draining => {
                tracing::debug!(?peer, "closing an HTTP/2 connection with no stream open");
                draining = true;
                conn.graceful_shutdown();
            }
            _ = ticker.tick(), if pings.is_some() || !draining => {
                match (open.count(), idle_since) {
                    (0, None) => {
                        let now = Instant::now();
                        idle_since = Some(now);
                        idle.as_mut().reset(now + idle_timeout);
                    }
                    (0, Some(_)) => {}
                    (_, _) => idle_since = None,
                }
                let Some(pings) = pings.as_mut() else { continue };
                match ping_sent {
                    Some(at) if at.elapsed() >= settings.deadline.timeout => {
                        tracing::debug!(?peer, "closing an HTTP/2 connection whose peer answers no ping");
                        settings.deadline.metrics.limit_hit("write_timeout");
                        return;
                    }
                    Some(_) => {}
                    None => {
                        if pings.send_ping(Ping::opaque()).is_ok() {
                            ping_sent = Some(Instant::now());
                        }
                    }
                }
            }
            pong = poll_fn(|cx| match pings.as_mut() {
                Some(pings) => pings.poll_pong(cx),
                None => Poll::Pending,
            }), if ping_sent.is_some() => {
                if pong.is_err() {
                    return;
                }
                ping_sent = None;
            }
        }
    }
}

/// One request: the application's answer, sent here unless a stream took
/// the request's HTTP/2 stream.
async fn serve_request<S>(
    request: http::Request<RecvStream>,
    stream: Stream,
    app: Rc<S>,
    peer: Option<SocketAddr>,
    client: Option<PeerCertificates>,
    deadline: WriteDeadline,
) where
    S: Service<Request, Response = Response<BoxBody>> + 'static,
    S::Error: Into<Response<BoxBody>>,
{
    let (parts, body) = request.into_parts();
    // No route of kubefan reads a request body. Dropped at once, the
    // stream's receiving half discards whatever DATA follows instead of
    // queueing it (h2's `RecvStream` drop clears and closes its buffer), so
    // a client cannot pile frames up on a stream kubefan never reads
    // (RUSTSEC-2026-0258, unbounded empty DATA frames, is fixed only in h2
    // 0.4, which needs the `http` 1 types actix-http 3 does not use).
    drop(body);
    let head_only = parts.method == Method::HEAD;
    let mut req = Request::new();
    {
        let head = req.head_mut();
        head.method = parts.method;
        head.version = Version::HTTP_2;
        head.headers = parts.headers.into();
        head.peer_addr = peer;
        // HTTP/2 carries the authority in `:authority`: handlers and the
        // middleware read `Host`, as an HTTP/1.1 request has it.
        if !head.headers.contains_key(header::HOST)
            && let Some(host) = parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            head.headers.insert(header::HOST, host);
        }
        head.uri = parts.uri;
    }
    let slot = stream.0.clone();
    req.extensions_mut().insert(stream);
    if let Some(client) = client {
        req.extensions_mut().insert(client);
    }
    let res = match app.call(req).await {
        Ok(res) => res,
        Err(err) => err.into(),
    };
    let Some(respond) = slot.borrow_mut().take() else {
        // A stream answered on it.
        return;
    };
    send_response(respond, res, head_only, &deadline).await;
}

/// Sends an ordinary response: its head, then its body as flow control
/// allows, within the write deadline.
async fn send_response(
    mut respond: SendResponse<Bytes>,
    res: Response<BoxBody>,
    head_only: bool,
    deadline: &WriteDeadline,
) {
    let (res, body) = res.into_parts();
    let size = body.size();
    let mut head = http::Response::new(());
    *head.status_mut() = res.status();
    *head.version_mut() = http::Version::HTTP_2;
    let headers = head.headers_mut();
    for (name, value) in res.headers().iter() {
        if !is_connection_specific(name) && name != header::CONTENT_LENGTH {
            headers.append(name.clone(), value.clone());
        }
    }
    if let BodySize::Sized(len) = size {
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    if !headers.contains_key(header::DATE)
        && let Ok(date) =
            HeaderValue::from_str(&httpdate::fmt_http_date(std::time::SystemTime::now()))
    {
        headers.insert(header::DATE, date);
    }
    let empty = head_only || matches!(size, BodySize::None | BodySize::Sized(0));
    let Ok(mut send) = respond.send_response(head, empty) else {
        return;
    };
    if empty {
        return;
    }
    let mut body = pin!(body);
    while let Some(chunk) = poll_fn(|cx| body.as_mut().poll_next(cx)).await {
        let Ok(chunk) = chunk else {
            send.send_reset(h2::Reason::INTERNAL_ERROR);
            return;
        };
        if send_chunk(&mut send, chunk, deadline).await.is_err() {
            return;
        }
    }
    let _ = send.send_data(Bytes::new(), true);
}

/// Headers HTTP/2 forbids (RFC 9113, section 8.2.2).
pub(super) fn is_connection_specific(name: &header::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_specific_headers_are_not_sent_over_http2() {
        for name in ["connection", "transfer-encoding", "keep-alive", "upgrade"] {
            assert!(is_connection_specific(&header::HeaderName::from_static(
                name
            )));
        }
        assert!(!is_connection_specific(&header::CONTENT_TYPE));
        assert!(!is_connection_specific(&header::CACHE_CONTROL));
    }
}
