//! HTTP/1.1 responses written by kubefan on a taken-over socket (the
//! [`Wire`] a chunk stream's `Pump` drives there): the head,
//! then each chunk as it comes, straight from the hub's shared buffers (one
//! vectored write per chunk, no copy). HTTP/1.1 responses are chunked and end
//! with the last chunk; HTTP/1.0 ones end when the connection closes. Both
//! carry `Connection: close`: the connection is not reused after a stream.
//! A client that hangs up is noticed without waiting for the next write.
//! Over TLS the same, through the connection's session (`socket`); a
//! request that came over HTTP/2 is answered on its HTTP/2 stream
//! instead (`h2_stream`).

use std::io::{self, IoSlice, Write as _};
use std::task::{Context, Poll, ready};

use super::io::{Blocked, InputWatch, WriteDeadline, poll_write_parts};
use super::pump::{Chunks, Heard, Wire};
use super::socket::{Detached, Socket};
use super::{CorsHeaders, Streams, h2_stream, not_taken_over, socket_of};
use crate::lifecycle::Lifecycle;
use crate::limits::Permit;
use crate::transport::stream::ChunkSource;
use actix_web::http::Version;
use actix_web::http::header::{self, HeaderMap, HeaderName};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, ResponseError};
use bytes::{BufMut, Bytes, BytesMut};

/// Answers `req` with `200 OK`, `headers` and the chunks of `source`,
/// on the connection taken over from
/// actix.
pub fn respond<S: ChunkSource>(
    req: &HttpRequest,
    streams: &Streams,
    headers: &[(HeaderName, &'static str)],
    source: S,
) -> HttpResponse {
    if let Some(stream) = h2_stream::take(req) {
        return stream.respond(req, streams, headers, source);
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
    let wire = Http1 {
        _permit: req.extensions_mut().remove::<Permit>(),
        detached: Some(socket),
        socket: None,
        chunked,
        hang_up: InputWatch::default(),
        out: Out::bytes(head),
        blocked: Blocked::default(),
    };
    streams.drive(Chunks(source), wire);
    // actix writes this into the emptied connection, where it vanishes.
    HttpResponse::Ok().finish()
}

/// A chunk stream's wire on a taken-over HTTP/1.1 socket (plain or TLS):
/// the response head first, then each chunk (framed as one chunk of a
/// chunked response; as it is for HTTP/1.0, whose end is the
/// connection's), then the last chunk and the socket's shutdown. A client
/// that hangs up is noticed without waiting for the next write.
struct Http1 {
    /// Held for as long as the stream lasts (the connection limits).
    _permit: Option<Permit>,
    /// Taken on the first poll: attached to the task's runtime.
    detached: Option<Detached>,
    socket: Option<Socket>,
    chunked: bool,
    hang_up: InputWatch,
    /// What is being written.
    out: Out,
    /// How a write waits for a client that takes nothing.
    blocked: Blocked,
}

impl Wire for Http1 {
    type Item = Bytes;
    type End = ();

    fn poll_open(&mut self, _cx: &mut Context<'_>) -> Poll<bool> {
        Poll::Ready(match self.detached.take().map(Detached::attach) {
            Some(Ok(socket)) => {
                self.socket = Some(socket);
                true
            }
            _ => false,
        })
    }

    fn start(&mut self, chunk: Bytes) {
        self.out = if self.chunked {
            Out::chunk(chunk)
        } else {
            Out::bytes(chunk)
        };
    }

    fn finish(&mut self, (): ()) {
        if self.chunked {
            self.out = Out::bytes(Bytes::from_static(b"0\r\n\r\n"));
        }
    }

    fn busy(&self) -> bool {
        !self.out.is_empty()
    }

    /// Over TLS, also sends what the session holds (an empty `out` too).
    fn poll_write(
        &mut self,
        deadline: &WriteDeadline,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ()>> {
        let Some(socket) = &self.socket else {
            return Poll::Ready(Err(()));
        };
        self.out
            .poll_write(socket, deadline, &mut self.blocked, cx)
            .map(|done| done.map_err(drop))
    }

    fn poll_close(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        if let Some(socket) = &self.socket {
            socket.shutdown();
        }
        Poll::Ready(())
    }

    /// Only whether the client hung up: it has nothing else to say.
    fn heard(&mut self, _lifecycle: &Lifecycle, cx: &mut Context<'_>) -> Heard {
        match &self.socket {
            Some(socket) if !self.hang_up.hung_up(socket, cx) => Heard::Nothing,
            _ => Heard::Gone,
        }
    }

    /// Chunked: an HTTP/1.0 response has no chunks to frame a batch in.
    fn idle(&self) -> bool {
        self.chunked
    }

    fn poll_input(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match &self.socket {
            Some(socket) => socket.tcp().poll_read_ready(cx).map(|_| ()),
            None => Poll::Ready(()),
        }
    }

    fn send_now(&mut self, bytes: &Bytes) -> io::Result<(usize, usize)> {
        let Some(socket) = &self.socket else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        // The chunk around the shared bytes, without a handle on them.
        let mut line = [0u8; 18];
        let line = chunk_size_line(&mut line, bytes.len());
        let went = socket.send_now(&[
            IoSlice::new(line),
            IoSlice::new(bytes),
            IoSlice::new(b"\r\n"),
        ])?;
        Ok((went, line.len() + bytes.len() + 2))
    }

    fn flushed(&self) -> bool {
        self.socket.as_ref().is_none_or(|s| !s.holds_records())
    }

    fn unparked(&mut self, rest: Option<(Bytes, usize)>) {
        if let Some((bytes, written)) = rest {
            self.out = Out::chunk(bytes);
            self.out.written = written;
        }
        // Its task watches the socket with its own waker.
        self.hang_up.rearm();
    }
}

/// Bytes on their way to the socket: one chunk (with its chunk-size line
/// and CRLF when chunked) and how much of it went.
#[derive(Default)]
struct Out {
    line: [u8; 18],
    line_len: u8,
    body: Bytes,
    tail: &'static [u8],
    written: usize,
}

impl Out {
    /// `body` as it is.
    fn bytes(body: Bytes) -> Out {
        Out {
            body,
            ..Out::default()
        }
    }

    /// `body` as one chunk of a chunked response.
    fn chunk(body: Bytes) -> Out {
        let mut line = [0u8; 18];
        let line_len = chunk_size_line(&mut line, body.len()).len() as u8;
        Out {
            line,
            line_len,
            body,
            tail: b"\r\n",
            written: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.body.is_empty() && self.line_len == 0 && self.tail.is_empty()
    }

    /// Writes what is left; empty once all of it went.
    fn poll_write(
        &mut self,
        socket: &Socket,
        deadline: &WriteDeadline,
        blocked: &mut Blocked,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        let parts = [
            &self.line[..usize::from(self.line_len)],
            &self.body[..],
            self.tail,
        ];
        ready!(poll_write_parts(
            socket,
            deadline,
            blocked,
            cx,
            &parts,
            &mut self.written
        ))?;
        *self = Out::default();
        Poll::Ready(Ok(()))
    }
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

/// `len` in hex, then CRLF: the line before a chunk.
fn chunk_size_line(buf: &mut [u8; 18], len: usize) -> &[u8] {
    let mut cursor = io::Cursor::new(&mut buf[..]);
    // 16 hex digits and CRLF always fit in 18 bytes.
    let _ = write!(cursor, "{len:x}\r\n");
    let end = cursor.position() as usize;
    &buf[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_size_lines_are_hex() {
        let mut buf = [0u8; 18];
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
