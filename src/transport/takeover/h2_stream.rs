//! A stream's response on its HTTP/2 stream: what a taken-over socket is
//! to an HTTP/1.1 stream. The handler takes the request's HTTP/2 stream
//! ([`take`]), sends the head at once, and a task on the streams' runtime
//! sends each chunk (the hub's shared bytes, uncopied until TLS encrypts
//! them) as the client's flow-control window allows; once caught up, the
//! stream is written by its hub's batch writer instead, as an HTTP/1.1
//! stream is, within the same window.
//!
//! A stream whose window stays shut does not pull its subscription, which
//! the hub laps; when the client reads again it gets the rest of the chunk
//! it was sent, then the `RESET` (or the watch face's 410). A window shut
//! for the write timeout resets the stream (`RST_STREAM CANCEL`), as an
//! HTTP/1.1 stream's socket would be closed; so does the hard stop. A
//! client that resets the stream ends it at once.

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll, ready};

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, SendStream};

use super::io::{Blocked, WriteDeadline};
use super::pump::{Chunks, Heard, Wire};
use super::{CorsHeaders, Streams};
use crate::lifecycle::Lifecycle;
use crate::limits::Permit;
use crate::transport::stream::ChunkSource;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A request's HTTP/2 stream, in the request's extensions until a stream
/// handler takes it (or the connection answers the request itself), and
/// its connection's count of open streams.
#[derive(Clone)]
pub(super) struct Stream(
    pub(super) Rc<RefCell<Option<SendResponse<Bytes>>>>,
    pub(super) OpenStreams,
);

/// How many streams of an HTTP/2 connection are open: requests being
/// answered, and streaming responses wherever they are written from. A
/// connection with none for a while is closed (`h2::serve`).
#[derive(Clone, Default)]
pub(super) struct OpenStreams(Arc<AtomicUsize>);

impl OpenStreams {
    /// One more open, until the returned guard drops.
    pub(super) fn open(&self) -> OpenStream {
        self.0.fetch_add(1, Ordering::Relaxed);
        OpenStream(self.0.clone())
    }

    pub(super) fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// One open stream of a connection ([`OpenStreams`]).
pub(super) struct OpenStream(Arc<AtomicUsize>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `req`'s HTTP/2 stream, taken from the connection's request task; `None`
/// for a request that did not come over HTTP/2.
pub(super) fn take(req: &HttpRequest) -> Option<TakenStream> {
    let stream = req.extensions().get::<Stream>()?.clone();
    let respond = stream.0.borrow_mut().take()?;
    Some(TakenStream(respond, stream.1.open()))
}

/// An HTTP/2 stream taken for a streaming response, counted open.
pub(super) struct TakenStream(SendResponse<Bytes>, OpenStream);

impl TakenStream {
    /// Answers with `200 OK`, `headers` and the chunks of `source`; the
    /// returned response only tells actix the request was answered.
    pub fn respond<S: ChunkSource>(
        self,
        req: &HttpRequest,
        streams: &Streams,
        headers: &[(HeaderName, &'static str)],
        source: S,
    ) -> HttpResponse {
        let cors = req.extensions().get::<CorsHeaders>().cloned();
        let head = head(headers, cors.as_ref().map(|c| &c.0));
        let TakenStream(mut respond, open) = self;
        let send = match respond.send_response(head, false) {
            Ok(send) => send,
            Err(err) => {
                tracing::debug!(error = %err, "an HTTP/2 stream ended before its response");
                return HttpResponse::Ok().finish();
            }
        };
        streams.drive(
            Chunks(source),
            H2 {
                _permit: req.extensions_mut().remove::<Permit>(),
                _open: open,
                send,
                chunk: None,
                end: false,
                blocked: Blocked::default(),
            },
        );
        HttpResponse::Ok().finish()
    }
}

/// The response head: `200`, the stream's headers, CORS and a date.
fn head(headers: &[(HeaderName, &'static str)], cors: Option<&HeaderMap>) -> http::Response<()> {
    let mut head = http::Response::new(());
    *head.version_mut() = http::Version::HTTP_2;
    let out = head.headers_mut();
    for (name, value) in headers {
        out.append(name.clone(), HeaderValue::from_static(value));
    }
    for (name, value) in cors.into_iter().flat_map(HeaderMap::iter) {
        out.append(name.clone(), value.clone());
    }
    if let Ok(date) = HeaderValue::from_str(&httpdate::fmt_http_date(std::time::SystemTime::now()))
    {
        out.insert(actix_web::http::header::DATE, date);
    }
    head
}

/// A chunk stream's wire on its HTTP/2 stream (the [`Wire`] its `Pump`
/// drives there): every chunk as the window allows, then `END_STREAM`. A
/// caught-up stream's DATA goes straight into the connection's send buffer
/// as the window allows, and the connection's task writes the frames of
/// all its streams together. The client's reset, or the connection's end,
/// is the client gone.
struct H2 {
    /// Held for as long as the stream lasts (the connection limits).
    _permit: Option<Permit>,
    /// Counted among its connection's open streams while it lasts.
    _open: OpenStream,
    send: SendStream<Bytes>,
    /// What is left of the chunk being sent.
    chunk: Option<Bytes>,
    /// The end is to be sent, after the chunk.
    end: bool,
    /// How a write waits for window.
    blocked: Blocked,
}

impl Wire for H2 {
    type Item = Bytes;
    type End = ();

    fn start(&mut self, chunk: Bytes) {
        self.chunk = Some(chunk);
    }

    fn finish(&mut self, (): ()) {
        self.end = true;
    }

    fn busy(&self) -> bool {
        self.chunk.is_some() || self.end
    }

    /// What is left of the chunk, as the window allows; then the end (an
    /// empty DATA frame with `END_STREAM`, which needs no window).
    fn poll_write(
        &mut self,
        deadline: &WriteDeadline,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ()>> {
        if let Some(chunk) = &mut self.chunk {
            ready!(poll_send_chunk(
                &mut self.send,
                chunk,
                &mut self.blocked,
                deadline,
                cx
            ))?;
        }
        self.chunk = None;
        if std::mem::take(&mut self.end) {
            let _ = self.send.send_data(Bytes::new(), true);
        }
        Poll::Ready(Ok(()))
    }

    /// Only whether the client reset the stream.
    fn heard(&mut self, _lifecycle: &Lifecycle, cx: &mut Context<'_>) -> Heard {
        match self.send.poll_reset(cx) {
            Poll::Pending => Heard::Nothing,
            Poll::Ready(_) => Heard::Gone,
        }
    }

    /// The client's reset, or the connection's end.
    fn poll_input(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.send.poll_reset(cx).map(|_| ())
    }

    /// As much as the stream's window takes now, into the connection's
    /// send buffer (its task writes it); the rest is its task's.
    fn send_now(&mut self, bytes: &Bytes) -> io::Result<(usize, usize)> {
        self.send.reserve_capacity(bytes.len());
        let went = self.send.capacity().min(bytes.len());
        if went > 0 {
            self.send
                .send_data(bytes.slice(..went), false)
                .map_err(io::Error::other)?;
        }
        Ok((went, bytes.len()))
    }

    /// Woken (the stream's one waker in h2 is also its window's): it
    /// stays parked unless the stream was reset.
    fn absorb(&mut self, cx: &mut Context<'_>) -> bool {
        self.send.poll_reset(cx).is_pending()
    }

    fn unparked(&mut self, rest: Option<(Bytes, usize)>) {
        if let Some((bytes, went)) = rest {
            self.chunk = Some(bytes.slice(went..));
        }
    }
}

/// Sends `chunk` as the stream's window allows. An error: the stream is
/// gone, or was reset for getting no window for the write timeout (or at
/// the hard stop).
pub(super) async fn send_chunk(
    send: &mut SendStream<Bytes>,
    mut chunk: Bytes,
    deadline: &WriteDeadline,
) -> Result<(), ()> {
    let mut blocked = Blocked::default();
    poll_fn(|cx| poll_send_chunk(send, &mut chunk, &mut blocked, deadline, cx)).await
}

/// [`send_chunk`] as a poll: what is left of `chunk` stays in it, and
/// `blocked` holds the wait for window (made only once the window is
/// shut), which gives up (`RST_STREAM CANCEL`) after the write timeout or
/// at the hard stop, counted and logged as any write's timeout.
fn poll_send_chunk(
    send: &mut SendStream<Bytes>,
    chunk: &mut Bytes,
    blocked: &mut Blocked,
    deadline: &WriteDeadline,
    cx: &mut Context<'_>,
) -> Poll<Result<(), ()>> {
    while !chunk.is_empty() {
        send.reserve_capacity(chunk.len());
        match send.poll_capacity(cx) {
            Poll::Ready(Some(Ok(0))) => {}
            Poll::Ready(Some(Ok(n))) => {
                blocked.clear();
                let part = chunk.split_to(n.min(chunk.len()));
                send.send_data(part, false).map_err(drop)?;
            }
            Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(Err(())),
            Poll::Pending => {
                ready!(blocked.poll_give_up(deadline, cx));
                send.send_reset(Reason::CANCEL);
                return Poll::Ready(Err(()));
            }
        }
    }
    Poll::Ready(Ok(()))
}
