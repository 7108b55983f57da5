//! The floor: the least a fan-out server can do per delivery on this
//! kernel, to measure kubefan and nchan against in the same sitting.
//!
//! `loadtest floor` speaks the subset of nchan's protocol the generator
//! uses (`GET /sub/NAME` as Server-Sent Events or a WebSocket, `POST
//! /pub/NAME` to publish), on one thread. A published message is framed
//! once, then written to every subscriber's socket with exactly one
//! `write` each and nothing else: no per-subscriber state beyond the
//! socket, no buffering, no filtering, no keep-alives, no wake-ups. What a
//! delivery costs here is the kernel's TCP send plus, on loopback, the
//! receiver's input and wake-up, which run in the sender's context (see
//! RESULTS.md). A subscriber whose socket cannot take a whole message at
//! once is dropped and counted (the generator then reports it as lost), so
//! the floor never does more work than one write.
//!
//! With `--tls-listen` (and a certificate and key) subscribers may also
//! connect over TLS there: after the handshake each keeps its socket and its
//! rustls session, and a publication is encrypted into each session and its
//! record written with one vectored write, as kubefan writes a TLS stream
//! (`src/transport/takeover/socket.rs`): the TLS floor. Publications come
//! in on the plain listener.

use std::cell::RefCell;
use std::io::{self, IoSlice, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use anyhow::Context;
use base64::Engine;
use memchr::memmem;
use sha1::{Digest, Sha1};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Largest request head or published body accepted.
const MAX_REQUEST: usize = 1 << 20;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Framing {
    Sse,
    WebSocket,
}

struct Subscriber {
    socket: TcpStream,
    /// Over TLS: the session the frames are encrypted into.
    tls: Option<Box<rustls::ServerConnection>>,
    framing: Framing,
}

/// A TLS listener: where, and with which certificate and key.
pub struct TlsListen {
    pub listen: SocketAddr,
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Default)]
struct Channel {
    subscribers: Vec<Subscriber>,
    /// Subscribers dropped because a write was short or failed.
    dropped: u64,
}

/// Binds `listen` and serves until the process is killed (the run script
/// kills it).
pub async fn run(listen: SocketAddr, tls: Option<TlsListen>) -> anyhow::Result<()> {
    let listener =
        std::net::TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    eprintln!("floor listening on {}", listener.local_addr()?);
    let tls = match tls {
        Some(t) => {
            let listener = std::net::TcpListener::bind(t.listen)
                .with_context(|| format!("binding {}", t.listen))?;
            eprintln!("floor listening for TLS on {}", listener.local_addr()?);
            Some((listener, acceptor(&t.cert, &t.key)?))
        }
        None => None,
    };
    serve(listener, tls).await
}

/// A TLS acceptor (ring, HTTP/1.1) for the certificate and key in PEM.
fn acceptor(cert: &PathBuf, key: &PathBuf) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("reading {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()?;
    let key =
        PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading {}", key.display()))?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

/// Serves on `listener` (and on the TLS listener, if any), on the current
/// thread.
async fn serve(
    listener: std::net::TcpListener,
    tls: Option<(std::net::TcpListener, tokio_rustls::TlsAcceptor)>,
) -> anyhow::Result<()> {
    listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(listener)?;
    let channel = Rc::new(RefCell::new(Channel::default()));
    let local = tokio::task::LocalSet::new();
    if let Some((tls_listener, acceptor)) = tls {
        tls_listener.set_nonblocking(true)?;
        let tls_listener = TcpListener::from_std(tls_listener)?;
        let channel = channel.clone();
        local.spawn_local(async move {
            loop {
                let Ok((socket, _)) = tls_listener.accept().await else {
                    continue;
                };
                let _ = socket.set_nodelay(true);
                let (channel, acceptor) = (channel.clone(), acceptor.clone());
                tokio::task::spawn_local(async move {
                    let served = async {
                        let tls = acceptor.accept(socket).await?;
                        handle(tls, channel, |tls| {
                            let (socket, session) = tls.into_inner();
                            (socket, Some(Box::new(session)))
                        })
                        .await
                    };
                    if let Err(err) = served.await {
                        eprintln!("floor (TLS): {err:#}");
                    }
                });
            }
        });
    }
    local
        .run_until(async move {
            loop {
                let (socket, _) = listener.accept().await?;
                socket.set_nodelay(true)?;
                let channel = channel.clone();
                tokio::task::spawn_local(async move {
                    if let Err(err) = handle(socket, channel, |socket| (socket, None)).await {
                        eprintln!("floor: {err:#}");
                    }
                });
            }
        })
        .await
}

/// Reads one request and serves it: a subscriber joins the channel, a
/// publication is written to every subscriber before it is answered.
async fn handle<S: AsyncRead + AsyncWrite + Unpin>(
    mut socket: S,
    channel: Rc<RefCell<Channel>>,
    subscriber: impl FnOnce(S) -> (TcpStream, Option<Box<rustls::ServerConnection>>),
) -> anyhow::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head_end = loop {
        if let Some(end) = memmem::find(&buf, b"\r\n\r\n") {
            break end + 4;
        }
        anyhow::ensure!(buf.len() < MAX_REQUEST, "request head too large");
        if socket.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    };
    let head = std::str::from_utf8(&buf[..head_end]).context("request head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let header = |name: &str| {
        head.split("\r\n").skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    };
    match (method, path.starts_with("/sub/"), path.starts_with("/pub/")) {
        ("GET", true, _) => {
            let framing = if let Some(key) = header("sec-websocket-key") {
                let accept = base64::engine::general_purpose::STANDARD.encode(
                    Sha1::new()
                        .chain_update(key.as_bytes())
                        .chain_update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11")
                        .finalize(),
                );
                socket
                    .write_all(
                        format!(
                            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
                        )
                        .as_bytes(),
                    )
                    .await?;
                Framing::WebSocket
            } else {
                socket
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n")
                    .await?;
                Framing::Sse
            };
            socket.flush().await?;
            let (socket, tls) = subscriber(socket);
            channel.borrow_mut().subscribers.push(Subscriber {
                socket,
                tls,
                framing,
            });
            Ok(())
        }
        ("POST", _, true) => {
            let length: usize = header("content-length")
                .and_then(|v| v.parse().ok())
                .context("a publication needs a Content-Length")?;
            anyhow::ensure!(length <= MAX_REQUEST, "publication too large");
            while buf.len() < head_end + length {
                if socket.read_buf(&mut buf).await? == 0 {
                    anyhow::bail!("publisher closed before its body");
                }
            }
            let body = &buf[head_end..head_end + length];
            let dropped = publish(&mut channel.borrow_mut(), body);
            if dropped > 0 {
                eprintln!(
                    "floor: dropped {dropped} subscribers that could not take a message in one write"
                );
            }
            socket
                .write_all(
                    b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await?;
            Ok(())
        }
        _ => {
            socket
                .write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await?;
            Ok(())
        }
    }
}

/// Frames `body` once per framing, then writes it to every subscriber with
/// one `write` each. Returns how many were dropped.
fn publish(channel: &mut Channel, body: &[u8]) -> u64 {
    let sse = sse_frame(body);
    let ws = ws_frame(body);
    let before = channel.subscribers.len();
    channel.subscribers.retain_mut(|s| {
        let frame = match s.framing {
            Framing::Sse => &sse[..],
            Framing::WebSocket => &ws[..],
        };
        // A short write, a full socket or a closed one: dropped.
        match &mut s.tls {
            None => matches!(s.socket.try_write(frame), Ok(n) if n == frame.len()),
            Some(session) => send_tls(session, &s.socket, frame),
        }
    });
    let dropped = (before - channel.subscribers.len()) as u64;
    channel.dropped += dropped;
    dropped
}

/// `frame` encrypted into `session`, then its records written with one
/// vectored write: false unless all of them went.
fn send_tls(session: &mut rustls::ServerConnection, socket: &TcpStream, frame: &[u8]) -> bool {
    if session.writer().write_all(frame).is_err() {
        return false;
    }
    let mut out = TryWrite(socket);
    session.write_tls(&mut out).is_ok() && !session.wants_write()
}

/// A socket as `io::Write`, one non-blocking (vectored) write per call.
struct TryWrite<'a>(&'a TcpStream);

impl Write for TryWrite<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `data: BODY\n\n` (the body is one line of JSON).
fn sse_frame(body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(body.len() + 8);
    frame.extend_from_slice(b"data: ");
    frame.extend_from_slice(body);
    frame.extend_from_slice(b"\n\n");
    frame
}

/// One unmasked text frame (RFC 6455, section 5.2).
fn ws_frame(body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(body.len() + 10);
    frame.push(0x81);
    match body.len() {
        n if n < 126 => frame.push(n as u8),
        n if n <= u16::MAX as usize => {
            frame.push(126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(body);
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_carry_the_body_once() {
        assert_eq!(sse_frame(b"{}"), b"data: {}\n\n");
        assert_eq!(ws_frame(b"ab"), [0x81, 2, b'a', b'b']);
        let big = vec![b'x'; 300];
        let f = ws_frame(&big);
        assert_eq!(&f[..4], &[0x81, 126, 1, 44]);
        assert_eq!(f.len(), 304);
    }

    #[tokio::test]
    async fn a_publication_reaches_every_subscriber_once() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let local = tokio::task::LocalSet::new();
        local.spawn_local(async move {
            let _ = serve(listener, None).await;
        });
        local
            .run_until(async move {
                let wait = std::time::Duration::from_secs(5);
                let connect = || async { TcpStream::connect(addr).await.unwrap() };
                let read_until = |mut s: TcpStream, needle: &'static [u8]| async move {
                    let mut got = Vec::new();
                    tokio::time::timeout(wait, async {
                        while memmem::find(&got, needle).is_none() {
                            assert!(s.read_buf(&mut got).await.unwrap() > 0, "closed early");
                        }
                    })
                    .await
                    .expect("in time");
                    (s, got)
                };
                let mut sse = connect().await;
                sse.write_all(b"GET /sub/t HTTP/1.1\r\nHost: x\r\n\r\n")
                    .await
                    .unwrap();
                let (sse, head) = read_until(sse, b"\r\n\r\n").await;
                assert!(head.starts_with(b"HTTP/1.1 200"));
                let mut ws = connect().await;
                ws.write_all(b"GET /sub/t HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").await.unwrap();
                let (ws, head) = read_until(ws, b"\r\n\r\n").await;
                // RFC 6455's own example key and answer.
                assert!(
                    memmem::find(&head, b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=").is_some(),
                    "{}",
                    String::from_utf8_lossy(&head)
                );
                let mut publisher = connect().await;
                publisher
                    .write_all(b"POST /pub/t HTTP/1.1\r\nContent-Length: 6\r\n\r\n{\"a\":1")
                    .await
                    .unwrap();
                let (_, answer) = read_until(publisher, b"\r\n\r\n").await;
                assert!(answer.starts_with(b"HTTP/1.1 201"));
                let (_, got) = read_until(sse, b"data: {\"a\":1\n\n").await;
                assert_eq!(got, b"data: {\"a\":1\n\n");
                let (_, got) = read_until(ws, b"{\"a\":1").await;
                assert_eq!(got, b"\x81\x06{\"a\":1");
            })
            .await;
    }
}
