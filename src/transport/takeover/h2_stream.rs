//! A stream's response on its HTTP/2 stream: what a taken-over socket is
//! to an HTTP/1.1 stream. The handler takes the request's HTTP/2 stream
//! ([`take`]), sends the head at once, and a task on the streams' runtime
//! sends each chunk (the hub's shared bytes, uncopied until TLS encrypts
//! them) as the client's flow-control window allows.
//!
//! A stream whose window stays shut does not pull its subscription, which
//! the hub laps; when the client reads again it gets the rest of the chunk
//! it was sent, then the `RESET` (or the watch face's 410). A window shut
//! for the write timeout resets the stream (`RST_STREAM CANCEL`), as an
//! HTTP/1.1 stream's socket would be closed; so does the hard stop. A
//! client that resets the stream ends it at once.

use std::cell::RefCell;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::Poll;

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::{HttpMessage, HttpRequest, HttpResponse};
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, SendStream};
use prometheus_client::metrics::counter::Counter;

use super::io::WriteDeadline;
use super::{CorsHeaders, Streams};
use crate::limits::Permit;
use crate::transport::ChunkSource;

/// A request's HTTP/2 stream, in the request's extensions until a stream
/// handler takes it (or the connection answers the request itself).
#[derive(Clone)]
pub(super) struct Stream(pub(super) Rc<RefCell<Option<SendResponse<Bytes>>>>);

/// `req`'s HTTP/2 stream, taken from the connection's request task; `None`
/// for a request that did not come over HTTP/2.
pub(super) fn take(req: &HttpRequest) -> Option<Taken> {
    let slot = req.extensions().get::<Stream>()?.0.clone();
    let respond = slot.borrow_mut().take()?;
    Some(Taken(respond))
}

/// An HTTP/2 stream taken for a streaming response.
pub(super) struct Taken(SendResponse<Bytes>);

impl Taken {
    /// Answers with `200 OK`, `headers` and the chunks of `source`; the
    /// returned response only tells actix the request was answered.
    pub fn respond<S: ChunkSource>(
        self,
        req: &HttpRequest,
        streams: &Streams,
        headers: &[(HeaderName, &'static str)],
        source: S,
        bytes_sent: Counter,
    ) -> HttpResponse {
        let cors = req.extensions().get::<CorsHeaders>().cloned();
        let head = head(headers, cors.as_ref().map(|c| &c.0));
        let Taken(mut respond) = self;
        let send = match respond.send_response(head, false) {
            Ok(send) => send,
            Err(err) => {
                tracing::debug!(error = %err, "an HTTP/2 stream ended before its response");
                return HttpResponse::Ok().finish();
            }
        };
        streams.spawn(pump(Box::new(Pumped {
            send,
            source,
            bytes_sent,
            deadline: streams.deadline.clone(),
            _permit: req.extensions_mut().remove::<Permit>(),
        })));
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

/// What an HTTP/2 stream's task owns, boxed once: an `async fn` keeps each
/// argument twice in its state (`-Zprint-type-sizes`). HTTP/1.1 streams
/// have no `async` state at all (`http::Pump`); this one could take the
/// same shape.
struct Pumped<S> {
    send: SendStream<Bytes>,
    source: S,
    bytes_sent: Counter,
    deadline: WriteDeadline,
    /// Held for as long as the stream lasts (the connection limits).
    _permit: Option<Permit>,
}

/// Sends every chunk until the source ends, the client resets the stream,
/// or a send fails or times out.
async fn pump<S: ChunkSource>(mut p: Box<Pumped<S>>) {
    let Pumped {
        send,
        source,
        bytes_sent,
        deadline,
        ..
    } = &mut *p;
    loop {
        let next = tokio::select! {
            biased;
            _ = poll_fn(|cx| send.poll_reset(cx)) => return,
            chunk = source.chunk() => chunk,
        };
        match next {
            None => {
                let _ = send.send_data(Bytes::new(), true);
                return;
            }
            Some(chunk) if chunk.is_empty() => {}
            Some(chunk) => {
                bytes_sent.inc_by(chunk.len() as u64);
                if send_chunk(send, chunk, deadline).await.is_err() {
                    return;
                }
            }
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
    while !chunk.is_empty() {
        send.reserve_capacity(chunk.len());
        let granted = match poll_fn(|cx| Poll::Ready(send.poll_capacity(cx))).await {
            Poll::Ready(granted) => granted,
            // Boxed: the task holds this state only while its client is
            // behind.
            Poll::Pending => Box::pin(window(send, deadline)).await?,
        };
        match granted {
            Some(Ok(0)) => {}
            Some(Ok(n)) => {
                let part = chunk.split_to(n.min(chunk.len()));
                send.send_data(part, false).map_err(drop)?;
            }
            Some(Err(_)) | None => return Err(()),
        }
    }
    Ok(())
}

/// Waits for window, at most the write timeout and not past the hard stop;
/// resets the stream if none comes.
async fn window(
    send: &mut SendStream<Bytes>,
    deadline: &WriteDeadline,
) -> Result<Option<Result<usize, h2::Error>>, ()> {
    tokio::select! {
        granted = poll_fn(|cx| send.poll_capacity(cx)) => return Ok(granted),
        _ = deadline.lifecycle.hard_stopped() => {}
        _ = tokio::time::sleep(deadline.timeout) => {
            tracing::debug!(timeout = ?deadline.timeout, "resetting an HTTP/2 stream whose client grants no window");
            deadline.metrics.limit_hit("write_timeout");
        }
    }
    send.send_reset(Reason::CANCEL);
    Err(())
}
