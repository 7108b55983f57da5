//! An HTTP/1.1 streaming GET read straight off its socket, for SSE and
//! Kubernetes watch subscribers: the head is checked, the body's chunked
//! framing (RFC 9112, section 7.1) taken off in place, and the data handed
//! out as it comes, never copied or wrapped.
//!
//! Hand-written for a measured reason, as the WebSocket client beside it:
//! reqwest (hyper) ran two tasks per connection, the connection's and the
//! body reader's, with a channel between them, and an SSE delivery cost the
//! generator more than a WebSocket one; with the generator's core saturated
//! at 10,000 subscribers, SSE's measured tails were partly the generator's
//! (`RESULTS.md`, stop 42).

use anyhow::{Context, bail};
use bytes::{Buf, Bytes, BytesMut};
use memchr::memmem;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::target::Credential;

/// A chunk-size line longer than this is not one (RFC 9112 sets no limit;
/// a real one is a few hex digits and perhaps an extension).
const MAX_SIZE_LINE: usize = 1024;
/// A response head longer than this is refused.
const MAX_HEAD: usize = 64 * 1024;
/// Room made before each read.
const READ_ROOM: usize = 16 * 1024;

/// What a subscriber's connection is read from and written to: a TCP
/// stream, plain or through a rustls client session.
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// An HTTP/1.1 response body being streamed.
pub struct HttpConn {
    io: Box<dyn Io>,
    buf: BytesMut,
    body: Body,
}

/// How the body is framed, and where in the framing the reader is.
#[derive(Debug, PartialEq)]
enum Body {
    /// Until the connection closes.
    Close,
    /// Chunked: `left` bytes of the current chunk still to come, then its
    /// CRLF if `crlf`; with neither, a chunk-size line is next.
    Chunked { left: usize, crlf: bool },
    /// The last chunk has come.
    Done,
}

/// Sends `GET path` with `credential` (and `extra` header lines, each
/// ending in CRLF), reads the answer's head and checks its status (`200`,
/// or a WebSocket's `101`). The head, and what came after it.
pub async fn exchange(
    io: &mut Box<dyn Io>,
    host: &str,
    path: &str,
    credential: Option<&Credential>,
    extra: &str,
    status: u16,
) -> anyhow::Result<(String, BytesMut)> {
    let credential = credential
        .map(|c| format!("{}: {}\r\n", c.header, c.value))
        .unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{credential}{extra}\r\n");
    io.write_all(request.as_bytes()).await?;
    // A TLS session may hold what it could not write yet until flushed.
    io.flush().await?;
    let mut buf = BytesMut::with_capacity(READ_ROOM);
    let end = loop {
        if let Some(end) = memmem::find(&buf, b"\r\n\r\n") {
            break end;
        }
        if buf.len() > MAX_HEAD {
            bail!("{path}: a response head past {MAX_HEAD} bytes");
        }
        buf.reserve(READ_ROOM);
        if io.read_buf(&mut buf).await? == 0 {
            bail!("{path}: connection closed before the response head");
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let line = head.lines().next().unwrap_or_default();
    if !line.starts_with(&format!("HTTP/1.1 {status}")) {
        bail!("{path}: {line}");
    }
    buf.advance(end + 4);
    Ok((head, buf))
}

impl HttpConn {
    /// [`exchange`] for a `200`, whose body is then read.
    pub async fn get(
        mut io: Box<dyn Io>,
        host: &str,
        path: &str,
        credential: Option<&Credential>,
        extra: &str,
    ) -> anyhow::Result<HttpConn> {
        let (head, buf) = exchange(&mut io, host, path, credential, extra, 200).await?;
        let chunked = head.lines().skip(1).any(|line| {
            line.split_once(':').is_some_and(|(name, value)| {
                name.trim().eq_ignore_ascii_case("transfer-encoding")
                    && value.trim().eq_ignore_ascii_case("chunked")
            })
        });
        let body = if chunked {
            Body::Chunked {
                left: 0,
                crlf: false,
            }
        } else {
            Body::Close
        };
        Ok(HttpConn { io, buf, body })
    }

    /// The body's next bytes as they come (a chunk or part of one); `None`
    /// at its end.
    pub async fn next(&mut self) -> anyhow::Result<Option<Bytes>> {
        loop {
            if let Some(data) = self.take()? {
                return Ok(Some(data));
            }
            if self.body == Body::Done {
                return Ok(None);
            }
            self.buf.reserve(READ_ROOM);
            if self.io.read_buf(&mut self.buf).await? == 0 {
                if matches!(self.body, Body::Chunked { .. }) {
                    bail!("the connection closed inside a chunked body");
                }
                return Ok(None);
            }
        }
    }

    /// Body bytes already in the buffer, taken out of it.
    fn take(&mut self) -> anyhow::Result<Option<Bytes>> {
        loop {
            match &mut self.body {
                Body::Done => return Ok(None),
                Body::Close => {
                    return Ok((!self.buf.is_empty()).then(|| self.buf.split().freeze()));
                }
                Body::Chunked { left, .. } if *left > 0 => {
                    if self.buf.is_empty() {
                        return Ok(None);
                    }
                    let n = (*left).min(self.buf.len());
                    *left -= n;
                    return Ok(Some(self.buf.split_to(n).freeze()));
                }
                Body::Chunked { crlf, .. } if *crlf => {
                    if self.buf.len() < 2 {
                        return Ok(None);
                    }
                    if &self.buf[..2] != b"\r\n" {
                        bail!("a chunk not followed by CRLF");
                    }
                    self.buf.advance(2);
                    *crlf = false;
                }
                Body::Chunked { left, crlf } => {
                    let Some(end) = memmem::find(&self.buf, b"\r\n") else {
                        if self.buf.len() > MAX_SIZE_LINE {
                            bail!("a chunk-size line past {MAX_SIZE_LINE} bytes");
                        }
                        return Ok(None);
                    };
                    let line = std::str::from_utf8(&self.buf[..end])?;
                    let hex = line.split(';').next().unwrap_or_default().trim();
                    let size = usize::from_str_radix(hex, 16)
                        .with_context(|| format!("a chunk size {line:?}"))?;
                    self.buf.advance(end + 2);
                    if size == 0 {
                        // Trailers, if any, are not read: nothing follows.
                        self.body = Body::Done;
                        return Ok(None);
                    }
                    *left = size;
                    *crlf = true;
                }
            }
        }
    }
}

/// A test server's side of a request: accepts one connection and reads
/// until the end of its head. The connection, the head, and what came
/// after it.
#[cfg(test)]
pub async fn accept_request(
    listener: &tokio::net::TcpListener,
) -> (tokio::net::TcpStream, String, Vec<u8>) {
    let (mut tcp, _) = listener.accept().await.unwrap();
    let mut input = Vec::new();
    let end = loop {
        if let Some(at) = memmem::find(&input, b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = tcp.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the client closed before its request's head ended");
        input.extend_from_slice(&chunk[..n]);
    };
    let rest = input.split_off(end);
    (tcp, String::from_utf8_lossy(&input).into_owned(), rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An `HttpConn` over one end of a duplex pipe, the server's bytes
    /// written to the other end in pieces `split` bytes long.
    async fn body_of(response: &[u8], split: usize) -> anyhow::Result<Vec<u8>> {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let response = response.to_vec();
        let writer = tokio::spawn(async move {
            let mut request = vec![0u8; 4096];
            let n = server.read(&mut request).await.unwrap();
            assert!(request[..n].starts_with(b"GET /stream/pods HTTP/1.1\r\nHost: h\r\n"));
            for piece in response.chunks(split) {
                server.write_all(piece).await.unwrap();
                server.flush().await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut conn = HttpConn::get(Box::new(client), "h", "/stream/pods", None, "").await?;
        let mut body = Vec::new();
        while let Some(data) = conn.next().await? {
            body.extend_from_slice(&data);
        }
        writer.await.unwrap();
        Ok(body)
    }

    const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
        6\r\ndata: \r\nb;ext=1\r\nhello world\r\n2\r\n\n\n\r\n0\r\n\r\n";

    #[tokio::test]
    async fn a_chunked_body_is_unframed_however_it_is_split() {
        for split in [1, 2, 3, 7, CHUNKED.len()] {
            let body = body_of(CHUNKED, split).await.unwrap();
            assert_eq!(body, b"data: hello world\n\n", "split {split}");
        }
    }

    #[tokio::test]
    async fn a_body_without_framing_runs_until_the_connection_closes() {
        let body = body_of(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc\ndef", 4)
            .await
            .unwrap();
        assert_eq!(body, b"abc\ndef");
    }

    #[tokio::test]
    async fn bad_framing_and_statuses_are_errors() {
        let cut = &CHUNKED[..CHUNKED.len() - 8];
        let err = body_of(cut, 5).await.unwrap_err();
        assert!(err.to_string().contains("inside a chunked body"), "{err}");
        let err = body_of(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            64,
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("chunk size"), "{err}");
        let err = body_of(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabcd",
            64,
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("CRLF"), "{err}");
        let err = body_of(b"HTTP/1.1 403 Forbidden\r\n\r\n", 64)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("403 Forbidden"), "{err}");
    }
}
