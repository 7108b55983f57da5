//! HTTP/1.1 responses written by kubefan on a taken-over socket: the head,
//! then each chunk as it comes, straight from the hub's shared buffers (one
//! `writev` per chunk, no copy). HTTP/1.1 responses are chunked and end
//! with the last chunk; HTTP/1.0 ones end when the connection closes. Both
//! carry `Connection: close`: the connection is not reused after a stream.
//! A client that hangs up is noticed without waiting for the next write.
//! Over TLS the same, through the connection's session (`socket`); a
//! request that came over HTTP/2 is answered on its HTTP/2 stream
//! instead (`h2_stream`).

use std::future::poll_fn;
use std::io::{self, IoSlice, Write as _};
use std::pin::pin;
use std::task::Poll;

use super::io::{InputWatch, WriteDeadline, write_all};
use super::socket::Detached;
use super::{CorsHeaders, Streams, h2_stream, not_taken_over, socket_of};
use crate::limits::Permit;
use crate::transport::ChunkSource;
use actix_web::http::Version;
use actix_web::http::header::{self, HeaderMap, HeaderName};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, ResponseError};
use bytes::{BufMut, Bytes, BytesMut};
use prometheus_client::metrics::counter::Counter;

/// Answers `req` with `200 OK`, `headers` and the chunks of `source`,
/// counting the bytes in `bytes_sent`, on the connection taken over from
/// actix.
pub fn respond<S: ChunkSource>(
    req: &HttpRequest,
    streams: &Streams,
    headers: &[(HeaderName, &'static str)],
    source: S,
    bytes_sent: Counter,
) -> HttpResponse {
    if let Some(stream) = h2_stream::take(req) {
        return stream.respond(req, streams, headers, source, bytes_sent);
    }
    let socket = match socket_of(req) {
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
    streams.spawn(pump(Box::new(Pumped {
        socket: Some(socket),
        head,
        source,
        chunked,
        bytes_sent,
        deadline: streams.deadline.clone(),
        _permit: req.extensions_mut().remove::<Permit>(),
    })));
    // actix writes this into the emptied connection, where it vanishes.
    HttpResponse::Ok().finish()
}

/// What a stream's task owns, boxed once: an `async fn` keeps each of its
/// arguments twice in its state (as passed and as moved into its body),
/// so a stream's source passed by value cost its ~500 bytes twice over in
/// every stream's task (`-Zprint-type-sizes`); boxed, it costs them once.
struct Pumped<S> {
    /// Taken when the task starts: attached to the task's runtime.
    socket: Option<Detached>,
    head: Bytes,
    source: S,
    chunked: bool,
    bytes_sent: Counter,
    deadline: WriteDeadline,
    /// Held for as long as the stream lasts (the connection limits).
    _permit: Option<Permit>,
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
async fn pump<S: ChunkSource>(mut p: Box<Pumped<S>>) {
    let Some(socket) = p.socket.take().and_then(|s| s.attach().ok()) else {
        return;
    };
    if write_all(&socket, &p.deadline, &mut [IoSlice::new(&p.head)])
        .await
        .is_err()
    {
        return;
    }
    // Not kept for as long as the stream lasts.
    p.head = Bytes::new();
    let Pumped {
        source,
        chunked,
        bytes_sent,
        deadline,
        ..
    } = &mut *p;
    let chunked = *chunked;
    let mut hang_up = InputWatch::default();
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
                        deadline,
                        &mut [
                            IoSlice::new(size),
                            IoSlice::new(&chunk),
                            IoSlice::new(b"\r\n"),
                        ],
                    )
                    .await
                } else {
                    write_all(&socket, deadline, &mut [IoSlice::new(&chunk)]).await
                }
            }
            Some(None) => {
                if chunked {
                    let _ = write_all(&socket, deadline, &mut [IoSlice::new(b"0\r\n\r\n")]).await;
                }
                socket.shutdown();
                return;
            }
        };
        if written.is_err() {
            return;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
