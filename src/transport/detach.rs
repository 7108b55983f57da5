//! Long-lived responses written outside actix.
//!
//! Once the gate and a stream's handler have accepted a request, the
//! handler hands its [`ChunkSource`] to [`respond`], which takes the
//! connection's socket away from actix ([`crate::server::Takeover`]) and
//! writes the response on it from a small task of its own: the head, then
//! each chunk as it comes, straight from the hub's shared buffers to the
//! socket (one `writev` per chunk, no copy). actix lets the emptied
//! connection go, so a stream keeps neither actix's read and write
//! buffers nor its connection task.
//!
//! HTTP/1.1 responses are chunked and end with the last chunk; HTTP/1.0
//! ones end when the connection closes. Both carry `Connection: close`:
//! the connection is not reused after a stream. The task notices a client
//! that hangs up (end of file or a reset on its socket) without waiting
//! for the next write, and ends the subscription.
//!
//! WebSockets are taken over the same way ([`upgrade`]): [`Inbox`] parses
//! what the client sends from the socket's read half (with actix-http's
//! frame codec), and [`WsWriter`] frames kubefan's messages onto the write
//! half.
//!
//! No stream waits for its client forever: one that cannot write a single
//! byte for the write timeout gives up and closes the connection, and at
//! shutdown every stream still blocked after the grace period is ended.

use std::future::poll_fn;
use std::io::{self, IoSlice, Write as _};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_http::ws::{Frame, Item, ProtocolError};
use actix_web::http::Version;
use actix_web::http::header::{self, HeaderMap, HeaderName};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, ResponseError};
use actix_ws::AggregatedMessage;
use bytes::{BufMut, Bytes, BytesMut};
use prometheus_client::metrics::counter::Counter;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio_util::codec::Decoder;
use tokio_util::task::TaskTracker;

use super::ChunkSource;
use super::error::ApiError;
use crate::lifecycle::Lifecycle;
use crate::limits::Permit;
use crate::metrics::Metrics;
use crate::server::Takeover;

/// Where detached streams run, and how they are stopped.
pub struct Streams {
    runtime: tokio::runtime::Handle,
    tracker: TaskTracker,
    stall: Stall,
}

/// When a stream blocked on a client that does not read gives up.
#[derive(Clone)]
struct Stall {
    /// Its hard stop ends every stream at once, even one blocked writing
    /// to a client that does not read (after the shutdown grace period).
    lifecycle: Arc<Lifecycle>,
    /// Longest wait for a client to take any byte at all.
    timeout: Duration,
    metrics: Arc<Metrics>,
}

impl Streams {
    /// Streams run on the runtime current when this is called. A stream
    /// whose client takes no byte for `write_timeout` is closed (and
    /// counted in `kubefan_limits_hit_total{kind="write_timeout"}`).
    pub fn on_current_runtime(
        write_timeout: Duration,
        lifecycle: Arc<Lifecycle>,
        metrics: Arc<Metrics>,
    ) -> Streams {
        Streams {
            runtime: tokio::runtime::Handle::current(),
            tracker: TaskTracker::new(),
            stall: Stall {
                lifecycle,
                timeout: write_timeout,
                metrics,
            },
        }
    }

    /// `fut`, counted among the streams [`Streams::stop`] waits for.
    pub fn track<F: Future>(&self, fut: F) -> tokio_util::task::task_tracker::TrackedFuture<F> {
        self.tracker.track_future(fut)
    }

    /// Runs `fut` as a stream: on the streams' runtime (the informer's,
    /// whose wake-ups then cross no thread), counted among the streams
    /// [`Streams::stop`] waits for.
    pub fn spawn<F: Future<Output = ()> + Send + 'static>(&self, fut: F) {
        self.runtime.spawn(self.tracker.track_future(fut));
    }

    /// Waits up to `grace` for the streams to end (they end by themselves
    /// on shutdown, after their ERROR message), then ends the rest.
    pub async fn stop(&self, grace: Duration) {
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::info!(
                streams = self.tracker.len(),
                "ending streams still writing after the grace period"
            );
            self.stall.lifecycle.hard_stop();
            self.tracker.wait().await;
        }
    }
}

/// What a stream answers if its connection cannot be taken over: every
/// connection of `crate::server` can be, so this is a bug, not a client's
/// mistake.
pub fn not_taken_over() -> ApiError {
    tracing::error!("a stream's connection could not be taken over from actix");
    ApiError::Status(
        500,
        "InternalError",
        "this connection cannot carry a stream".into(),
    )
}

/// The CORS headers the gate decided a response gets (set by the gate for
/// listed origins; a detached response writes them itself).
#[derive(Clone)]
pub struct CorsHeaders(pub HeaderMap);

/// Answers `req` with `200 OK`, `headers` and the chunks of `source`,
/// counting the bytes in `bytes_sent`, on the connection taken over from
/// actix.
pub(crate) fn respond<S: ChunkSource>(
    req: &HttpRequest,
    streams: &Streams,
    headers: &[(HeaderName, &'static str)],
    source: S,
    bytes_sent: Counter,
) -> HttpResponse {
    let socket = match take(req) {
        Some(Ok(socket)) => socket,
        Some(Err(err)) => {
            // The socket left actix but could not leave its reactor: the
            // connection is lost either way.
            tracing::warn!(error = %err, "could not take a stream's connection over");
            return HttpResponse::InternalServerError().finish();
        }
        None => return not_taken_over().error_response(),
    };
    let chunked = req.version() != Version::HTTP_10;
    let cors = req.extensions().get::<CorsHeaders>().cloned();
    let head = head(headers, cors.as_ref().map(|c| &c.0), chunked);
    let permit = req.extensions_mut().remove::<Permit>();
    let stall = streams.stall.clone();
    streams.spawn(async move {
        pump(socket, head, source, chunked, bytes_sent, &stall).await;
        drop(permit);
    });
    // actix writes this into the emptied connection, where it vanishes.
    HttpResponse::Ok().finish()
}

/// `req`'s socket, taken from actix and out of its reactor (which drops
/// actix's waker for it, and through it actix's whole connection task);
/// `None` if the connection cannot be taken over.
fn take(req: &HttpRequest) -> Option<io::Result<std::net::TcpStream>> {
    let socket = req.conn_data::<Takeover>()?.take()?;
    Some(socket.into_std())
}

/// The response head.
fn head(headers: &[(HeaderName, &'static str)], cors: Option<&HeaderMap>, chunked: bool) -> Bytes {
    let mut out = BytesMut::with_capacity(256);
    out.put_slice(b"HTTP/1.1 200 OK\r\n");
    let mut line = |name: &[u8], value: &[u8]| {
        out.put_slice(name);
        out.put_slice(b": ");
        out.put_slice(value);
        out.put_slice(b"\r\n");
    };
    for (name, value) in headers {
        line(name.as_str().as_bytes(), value.as_bytes());
    }
    for (name, value) in cors.into_iter().flat_map(HeaderMap::iter) {
        line(name.as_str().as_bytes(), value.as_bytes());
    }
    line(
        header::DATE.as_str().as_bytes(),
        httpdate::fmt_http_date(std::time::SystemTime::now()).as_bytes(),
    );
    line(header::CONNECTION.as_str().as_bytes(), b"close");
    if chunked {
        line(header::TRANSFER_ENCODING.as_str().as_bytes(), b"chunked");
    }
    out.put_slice(b"\r\n");
    out.freeze()
}

/// Writes the head, then every chunk, until the source ends, the client
/// hangs up or a write fails.
async fn pump<S: ChunkSource>(
    socket: std::net::TcpStream,
    head: Bytes,
    mut source: S,
    chunked: bool,
    bytes_sent: Counter,
    stall: &Stall,
) {
    let Ok(mut socket) = TcpStream::from_std(socket) else {
        return;
    };
    // Each chunk is a whole message; do not hold it back for the next one.
    let _ = socket.set_nodelay(true);
    if write_all(&socket, stall, &mut [IoSlice::new(&head)])
        .await
        .is_err()
    {
        return;
    }
    // Not kept for as long as the stream lasts.
    drop(head);
    let mut hang_up = ReadGate::default();
    loop {
        let next = {
            let mut chunk = pin!(source.chunk());
            poll_fn(|cx| {
                if hang_up.hung_up(&socket, cx) {
                    return Poll::Ready(None);
                }
                chunk.as_mut().poll(cx).map(Some)
            })
            .await
        };
        let written = match next {
            None => return,
            Some(Some(chunk)) if chunk.is_empty() => continue,
            Some(Some(chunk)) => {
                bytes_sent.inc_by(chunk.len() as u64);
                if chunked {
                    let mut size = [0u8; 20];
                    let size = chunk_size_line(&mut size, chunk.len());
                    write_all(
                        &socket,
                        stall,
                        &mut [
                            IoSlice::new(size),
                            IoSlice::new(&chunk),
                            IoSlice::new(b"\r\n"),
                        ],
                    )
                    .await
                } else {
                    write_all(&socket, stall, &mut [IoSlice::new(&chunk)]).await
                }
            }
            Some(None) => {
                if chunked {
                    let _ = write_all(&socket, stall, &mut [IoSlice::new(b"0\r\n\r\n")]).await;
                }
                let _ = socket.shutdown().await;
                return;
            }
        };
        if written.is_err() {
            return;
        }
    }
}

/// A WebSocket connection taken over from actix after its handshake was
/// validated: [`Inbox`] reads what the client sends from the socket's read
/// half, and [`WsWriter`] frames what kubefan sends onto the write half.
pub struct Upgraded {
    pub inbox: Inbox,
    pub writer: WsWriter,
}

/// A WebSocket connection taken from actix, out of any reactor until
/// [`Taken::open`] is called on the runtime that is to drive it.
pub struct Taken {
    socket: std::net::TcpStream,
    head: Bytes,
    max_message: usize,
    stall: Stall,
    permit: Option<Permit>,
}

/// Takes `req`'s connection over for a WebSocket, if it can. `head` is the
/// `101 Switching Protocols` response, written before the first frame;
/// client messages larger than `max_message` bytes are refused.
pub fn upgrade(
    req: &HttpRequest,
    streams: &Streams,
    head: Bytes,
    max_message: usize,
) -> Option<io::Result<Taken>> {
    let socket = match take(req)? {
        Ok(socket) => socket,
        Err(err) => return Some(Err(err)),
    };
    let permit = req.extensions_mut().remove::<Permit>();
    Some(Ok(Taken {
        socket,
        head,
        max_message,
        stall: streams.stall.clone(),
        permit,
    }))
}

impl Taken {
    /// Registers the socket with the current runtime's reactor.
    pub fn open(self) -> io::Result<Upgraded> {
        let socket = TcpStream::from_std(self.socket)?;
        // Every message is whole: do not hold one back for the next.
        socket.set_nodelay(true)?;
        let (read, write) = socket.into_split();
        Ok(Upgraded {
            inbox: Inbox::new(read, self.max_message),
            writer: WsWriter {
                write,
                head: Some(self.head),
                stall: self.stall,
                _permit: self.permit,
            },
        })
    }
}

/// A taken-over WebSocket's client messages: frames parsed by actix-http's
/// codec, continuations joined as actix-ws joins them (same limits, same
/// errors). Nothing is buffered between frames.
pub struct Inbox {
    read: OwnedReadHalf,
    gate: ReadGate,
    /// Bytes of a frame not complete yet.
    pending: BytesMut,
    codec: actix_http::ws::Codec,
    max_message: usize,
    /// A message arriving in continuation frames.
    joining: Option<Joining>,
    /// The rest of a message that grew too big is being skipped.
    skipping: bool,
    ended: bool,
}

struct Joining {
    text: bool,
    parts: Vec<Bytes>,
    size: usize,
}

/// The error actix-ws gives a message too big in continuation frames.
fn too_big() -> ProtocolError {
    ProtocolError::Io(io::Error::other("Exceeded maximum continuation size"))
}

/// A text message's payload, which must be UTF-8.
fn text_message(bytes: Bytes) -> Result<AggregatedMessage, ProtocolError> {
    bytestring::ByteString::try_from(bytes)
        .map(AggregatedMessage::Text)
        .map_err(|err| ProtocolError::Io(io::Error::new(io::ErrorKind::InvalidData, err)))
}

impl Inbox {
    /// Reads from `read`; messages over `max_message` bytes are refused.
    fn new(read: OwnedReadHalf, max_message: usize) -> Inbox {
        Inbox {
            read,
            gate: ReadGate::default(),
            pending: BytesMut::new(),
            codec: actix_http::ws::Codec::new().max_size(max_message),
            max_message,
            joining: None,
            skipping: false,
            ended: false,
        }
    }

    /// The message `frame` completes, if any.
    fn take(&mut self, frame: Frame) -> Option<Result<AggregatedMessage, ProtocolError>> {
        let (start, bytes, last) = match frame {
            Frame::Text(bytes) => return Some(text_message(bytes)),
            Frame::Binary(bytes) => return Some(Ok(AggregatedMessage::Binary(bytes))),
            Frame::Ping(bytes) => return Some(Ok(AggregatedMessage::Ping(bytes))),
            Frame::Pong(bytes) => return Some(Ok(AggregatedMessage::Pong(bytes))),
            Frame::Close(reason) => return Some(Ok(AggregatedMessage::Close(reason))),
            Frame::Continuation(Item::FirstText(bytes)) => (Some(true), bytes, false),
            Frame::Continuation(Item::FirstBinary(bytes)) => (Some(false), bytes, false),
            Frame::Continuation(Item::Continue(bytes)) => (None, bytes, false),
            Frame::Continuation(Item::Last(bytes)) => (None, bytes, true),
        };
        if self.skipping {
            self.skipping = !last;
            return None;
        }
        let joining = self.joining.get_or_insert(Joining {
            text: false,
            parts: Vec::new(),
            size: 0,
        });
        if let Some(text) = start {
            *joining = Joining {
                text,
                parts: Vec::new(),
                size: 0,
            };
        }
        joining.size += bytes.len();
        if joining.size > self.max_message {
            self.joining = None;
            self.skipping = !last;
            return Some(Err(too_big()));
        }
        // Empty parts are not kept: endless empty frames cannot grow this.
        if !bytes.is_empty() {
            joining.parts.push(bytes);
        }
        if !last {
            return None;
        }
        let joined = self.joining.take()?;
        let mut whole = BytesMut::with_capacity(joined.size);
        for part in &joined.parts {
            whole.put_slice(part);
        }
        let whole = whole.freeze();
        Some(if joined.text {
            text_message(whole)
        } else {
            Ok(AggregatedMessage::Binary(whole))
        })
    }
}

impl futures::Stream for Inbox {
    type Item = Result<AggregatedMessage, ProtocolError>;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            if !this.pending.is_empty() {
                match this.codec.decode(&mut this.pending) {
                    Err(err) => {
                        this.ended = true;
                        return Poll::Ready(Some(Err(err)));
                    }
                    Ok(Some(frame)) => match this.take(frame) {
                        Some(message) => return Poll::Ready(Some(message)),
                        None => continue,
                    },
                    Ok(None) => {}
                }
            }
            if this.pending.is_empty() && this.pending.capacity() > 0 {
                // Idle: hold no buffer.
                this.pending = BytesMut::new();
            }
            let pending = &mut this.pending;
            let read = |socket: &TcpStream| {
                let mut scratch = [0u8; 2048];
                let n = socket.try_read(&mut scratch)?;
                pending.extend_from_slice(&scratch[..n]);
                Ok(n)
            };
            match this.gate.poll_read(this.read.as_ref(), cx, read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(err)) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(ProtocolError::Io(err))));
                }
                Poll::Ready(Ok(0)) => {
                    this.ended = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(Ok(_)) => {}
            }
        }
    }
}

/// WebSocket opcodes kubefan sends (RFC 6455 section 5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    Text = 0x1,
    Close = 0x8,
    Ping = 0x9,
    Pong = 0xA,
}

/// The write half of a taken-over WebSocket: each message is one
/// unfragmented, unmasked frame (a server's frames are never masked),
/// written as its header and payload in one `writev`.
pub struct WsWriter {
    write: OwnedWriteHalf,
    /// The handshake response, not yet sent.
    head: Option<Bytes>,
    stall: Stall,
    /// The connection's place in the limits, given back when it ends.
    _permit: Option<Permit>,
}

impl WsWriter {
    /// Sends the handshake response (`101 Switching Protocols`).
    pub async fn open(&mut self) -> io::Result<()> {
        match self.head.take() {
            Some(head) => write_all(&self.write, &self.stall, &mut [IoSlice::new(&head)]).await,
            None => Ok(()),
        }
    }

    /// Sends one frame; an error means the connection is gone.
    pub async fn send(&mut self, opcode: Opcode, payload: &[u8]) -> io::Result<()> {
        self.send_parts(opcode, &[payload]).await
    }

    /// Sends one frame whose payload is `parts` (at most three) one after
    /// the other, in one `writev` with no copy.
    pub async fn send_parts<const N: usize>(
        &mut self,
        opcode: Opcode,
        parts: &[&[u8]; N],
    ) -> io::Result<()> {
        const { assert!(N <= 3, "a frame is sent in at most three parts") };
        self.open().await?;
        let mut header = [0u8; 10];
        let len = parts.iter().map(|p| p.len()).sum();
        let header = frame_header(&mut header, opcode, len);
        let mut bufs = [IoSlice::new(&[]); 4];
        bufs[0] = IoSlice::new(header);
        for (buf, part) in bufs[1..].iter_mut().zip(parts) {
            *buf = IoSlice::new(part);
        }
        write_all(&self.write, &self.stall, &mut bufs[..=N]).await
    }

    /// A Close frame with `code` and `reason` (cut to fit the 125-byte
    /// control frame limit), then the end of the connection's sending side.
    pub async fn close(&mut self, code: u16, reason: &str) {
        let mut payload = code.to_be_bytes().to_vec();
        let mut end = reason.len().min(123);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        payload.extend_from_slice(&reason.as_bytes()[..end]);
        if self.send(Opcode::Close, &payload).await.is_ok() {
            let _ = self.write.shutdown().await;
        }
    }
}

/// The header of a final, unmasked frame of `len` payload bytes.
fn frame_header(buf: &mut [u8; 10], opcode: Opcode, len: usize) -> &[u8] {
    buf[0] = 0x80 | opcode as u8;
    if len < 126 {
        buf[1] = len as u8;
        &buf[..2]
    } else if let Ok(len) = u16::try_from(len) {
        buf[1] = 126;
        buf[2..4].copy_from_slice(&len.to_be_bytes());
        &buf[..4]
    } else {
        buf[1] = 127;
        buf[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        &buf[..10]
    }
}

/// `len` in hex, then CRLF: the line before a chunk.
fn chunk_size_line(buf: &mut [u8; 20], len: usize) -> &[u8] {
    let mut cursor = io::Cursor::new(&mut buf[..]);
    // 16 hex digits and CRLF always fit in 20 bytes.
    let _ = write!(cursor, "{len:x}\r\n");
    let end = cursor.position() as usize;
    &buf[..end]
}

/// Reads a socket only when it has something: a look at its readiness (no
/// lock, no new registration) is enough until the next readiness comes.
/// Streams poll this on every message they send, to notice a client's
/// frame or hang-up without waiting for their next write.
#[derive(Default)]
struct ReadGate {
    /// Registered for the socket's next readiness.
    armed: bool,
}

impl ReadGate {
    /// Calls `read` (which reads from `socket`) if the socket has something
    /// (`Ok(0)`: the client closed); otherwise the task is woken when it
    /// next becomes readable. `read` owns its buffer, so a look that finds
    /// nothing costs no buffer at all.
    fn poll_read(
        &mut self,
        socket: &TcpStream,
        cx: &mut Context<'_>,
        mut read: impl FnMut(&TcpStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            if self.armed {
                // Reads only if readiness came since arming.
                let mut looked = false;
                let done = socket.try_io(tokio::io::Interest::READABLE, || {
                    looked = true;
                    read(socket)
                });
                match done {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock && !looked => {
                        return Poll::Pending;
                    }
                    // The readiness was used up (and the registration with
                    // it): arm again.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.armed = false,
                    done => return Poll::Ready(done),
                }
            }
            match socket.poll_read_ready(cx) {
                Poll::Pending => {
                    self.armed = true;
                    return Poll::Pending;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => match read(socket) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    done => return Poll::Ready(done),
                },
            }
        }
    }

    /// Whether the client of a stream that takes no input is gone (end of
    /// file or an error); what it sends is read and dropped.
    fn hung_up(&mut self, socket: &TcpStream, cx: &mut Context<'_>) -> bool {
        let discard = |socket: &TcpStream| socket.try_read(&mut [0u8; 512]);
        loop {
            match self.poll_read(socket, cx, discard) {
                Poll::Pending => return false,
                Poll::Ready(Ok(0) | Err(_)) => return true,
                Poll::Ready(Ok(_)) => {}
            }
        }
    }
}

/// Waits until `socket` takes more, at most `stall.timeout` and not past
/// the hard stop.
async fn writable(socket: &impl Writer, stall: &Stall) -> io::Result<()> {
    tokio::select! {
        ready = socket.writable() => ready,
        _ = stall.lifecycle.hard_stopped() => Err(io::ErrorKind::TimedOut.into()),
        _ = tokio::time::sleep(stall.timeout) => {
            tracing::debug!(timeout = ?stall.timeout, "closing a stream whose client reads nothing");
            stall.metrics.limit_hit("write_timeout");
            Err(io::ErrorKind::TimedOut.into())
        }
    }
}

/// A socket, or its write half.
trait Writer {
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
    fn writable(&self) -> impl Future<Output = io::Result<()>>;
}

impl Writer for TcpStream {
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        TcpStream::try_write_vectored(self, bufs)
    }
    fn writable(&self) -> impl Future<Output = io::Result<()>> {
        TcpStream::writable(self)
    }
}

impl Writer for OwnedWriteHalf {
    fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        OwnedWriteHalf::try_write_vectored(self, bufs)
    }
    fn writable(&self) -> impl Future<Output = io::Result<()>> {
        OwnedWriteHalf::writable(self)
    }
}

/// Writes all of `bufs`, waiting for the socket when its buffer is full
/// (not forever: see [`writable`]).
async fn write_all(
    socket: &impl Writer,
    stall: &Stall,
    mut bufs: &mut [IoSlice<'_>],
) -> io::Result<()> {
    while !bufs.is_empty() {
        match socket.try_write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            // Boxed: a stream's task holds this state only while its
            // client is behind, not for as long as it streams.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Box::pin(writable(socket, stall)).await?
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An inbox on one end of a loopback connection.
    async fn inbox(max_message: usize) -> (Inbox, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (read, _write) = server.into_split();
        (Inbox::new(read, max_message), client)
    }

    fn part(item: Item) -> Frame {
        Frame::Continuation(item)
    }

    #[tokio::test]
    async fn continuations_are_joined_and_checked_as_actix_ws_does() {
        let (mut inbox, _client) = inbox(8).await;
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        assert!(inbox.take(part(Item::FirstText(b("ab")))).is_none());
        assert!(inbox.take(part(Item::Continue(b("")))).is_none());
        assert!(inbox.take(part(Item::Continue(b("cd")))).is_none());
        match inbox.take(part(Item::Last(b("e")))) {
            Some(Ok(AggregatedMessage::Text(text))) => assert_eq!(&*text, "abcde"),
            other => panic!("{other:?}"),
        }
        // Too big: one error, then the rest of that message is skipped and
        // the next one is read normally.
        assert!(inbox.take(part(Item::FirstBinary(b("12345")))).is_none());
        match inbox.take(part(Item::Continue(b("6789")))) {
            Some(Err(ProtocolError::Io(e))) => {
                assert!(e.to_string().contains("continuation size"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert!(inbox.take(part(Item::Continue(b("more")))).is_none());
        assert!(inbox.take(part(Item::Last(b("end")))).is_none());
        assert!(matches!(
            inbox.take(Frame::Binary(b("x"))),
            Some(Ok(AggregatedMessage::Binary(_)))
        ));
        // Text must be UTF-8, whole or joined.
        match inbox.take(Frame::Text(Bytes::from_static(&[0xff, 0xfe]))) {
            Some(Err(ProtocolError::Io(e))) => assert_eq!(e.kind(), io::ErrorKind::InvalidData),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn the_inbox_reads_frames_from_the_socket_and_ends_at_eof() {
        use futures::StreamExt;
        let (mut inbox, mut client) = inbox(1024).await;
        // A masked text frame "hi" (clients always mask), then a close.
        let mask = [1u8, 2, 3, 4];
        let mut frame = vec![0x81, 0x80 | 2];
        frame.extend_from_slice(&mask);
        frame.extend(b"hi".iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
        client.write_all(&frame).await.unwrap();
        match tokio::time::timeout(Duration::from_secs(5), inbox.next()).await {
            Ok(Some(Ok(AggregatedMessage::Text(text)))) => assert_eq!(&*text, "hi"),
            other => panic!("{other:?}"),
        }
        assert!(inbox.pending.capacity() == 0, "no buffer held while idle");
        drop(client);
        assert!(
            tokio::time::timeout(Duration::from_secs(5), inbox.next())
                .await
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn websocket_frame_headers_use_the_shortest_length() {
        let mut buf = [0u8; 10];
        assert_eq!(frame_header(&mut buf, Opcode::Text, 5), [0x81, 5]);
        assert_eq!(frame_header(&mut buf, Opcode::Ping, 0), [0x89, 0]);
        assert_eq!(frame_header(&mut buf, Opcode::Text, 125), [0x81, 125]);
        assert_eq!(
            frame_header(&mut buf, Opcode::Text, 126),
            [0x81, 126, 0, 126]
        );
        assert_eq!(
            frame_header(&mut buf, Opcode::Close, 65535),
            [0x88, 126, 0xff, 0xff]
        );
        assert_eq!(
            frame_header(&mut buf, Opcode::Text, 65536),
            [0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0]
        );
    }

    #[test]
    fn chunk_size_lines_are_hex() {
        let mut buf = [0u8; 20];
        assert_eq!(chunk_size_line(&mut buf, 0), b"0\r\n");
        assert_eq!(chunk_size_line(&mut buf, 1300), b"514\r\n");
        assert_eq!(
            chunk_size_line(&mut buf, usize::MAX),
            b"ffffffffffffffff\r\n"
        );
    }

    #[test]
    fn head_is_chunked_for_http_11_and_closes() {
        let sse = head(&[(header::CONTENT_TYPE, "text/event-stream")], None, true);
        let text = std::str::from_utf8(&sse).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.contains("\r\ncontent-type: text/event-stream\r\n"));
        assert!(text.contains("\r\nconnection: close\r\n"));
        assert!(text.contains("\r\ntransfer-encoding: chunked\r\n"));
        assert!(text.contains("\r\ndate: "));
        assert!(text.ends_with("\r\n\r\n"));
        let plain = head(&[], None, false);
        assert!(!std::str::from_utf8(&plain).unwrap().contains("chunked"));
    }
}
