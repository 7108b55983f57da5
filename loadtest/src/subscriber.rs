//! Subscribers: connect over one transport, wait for the snapshot (or the
//! connection, for nchan), then record every change's latency.
//!
//! A change carries `"loadtest/sent":"SEQ:NANOS"` in its payload (an
//! annotation on kubefan's side, the message body on nchan's); each
//! subscriber records, per sequence number, whether it arrived and how late.
//!
//! What a subscriber subscribes to, and with which credential, is
//! [`crate::target`]'s; the clients that read the wire are
//! [`crate::http1`] (SSE, watches) and [`crate::ws`] (WebSockets, `/ws`),
//! and HTTP/2 is the `h2` crate's.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bytes::Bytes;
use futures::FutureExt;
use memchr::memmem;

use crate::arrival::{Arrival, Stamped};
use crate::http1::{HttpConn, Io};
use crate::target::{Credential, Target, Transport};
use crate::ws::WsConn;

/// What a subscriber saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Latency in microseconds per sequence number, to when the generator
    /// read it (`u32::MAX`: not seen).
    pub latency_us: Vec<u32>,
    /// The same, to when its bytes reached the socket ([`crate::arrival`]).
    pub arrival_us: Vec<u32>,
    /// Whether the subscriber is to get change SEQ, at SEQ mod its length
    /// (with `--namespaces`, change SEQ is to namespace SEQ mod K, and a
    /// token may see only some); empty: every change.
    pub wanted: Vec<bool>,
    pub duplicates: u64,
    pub resets: u64,
    /// Deliveries of changes the subscriber was not to get: a namespace
    /// its token may not see (a stream not narrowed as it should be).
    pub leaked: u64,
    /// Changes it is to get that have not come yet: [`Seen::complete`]
    /// is asked after every delivery, and counting the unseen slots there
    /// went over every change before the first missing one, each time.
    missing: usize,
}

impl Seen {
    pub fn new(changes: usize, wanted: Vec<bool>) -> Seen {
        let mut seen = Seen {
            latency_us: vec![u32::MAX; changes],
            arrival_us: vec![u32::MAX; changes],
            wanted,
            ..Seen::default()
        };
        seen.missing = seen.expected() as usize;
        seen
    }

    pub fn wants(&self, seq: usize) -> bool {
        self.wanted.is_empty() || self.wanted[seq % self.wanted.len()]
    }

    /// How many changes the subscriber is to get.
    pub fn expected(&self) -> u64 {
        (0..self.latency_us.len())
            .filter(|s| self.wants(*s))
            .count() as u64
    }

    /// Whether every change it is to get has arrived.
    fn complete(&self) -> bool {
        self.missing == 0
    }

    fn record(&mut self, payload: &[u8], arrived: Option<u64>) {
        let Some((seq, sent)) = parse_sent(payload) else {
            return;
        };
        let now = now_nanos();
        if (seq as usize) < self.latency_us.len() && !self.wants(seq as usize) {
            self.leaked += 1;
            return;
        }
        let Some(slot) = self.latency_us.get_mut(seq as usize) else {
            return;
        };
        if *slot != u32::MAX {
            self.duplicates += 1;
            return;
        }
        let us = |at: u64| (at.saturating_sub(sent) / 1000).min(u32::MAX as u64 - 1) as u32;
        *slot = us(now);
        self.arrival_us[seq as usize] = us(arrived.unwrap_or(now));
        self.missing -= 1;
    }

    /// One message (a WebSocket message, or one line of an SSE stream or
    /// a watch), whose bytes reached the socket at `arrived`.
    fn take(&mut self, message: &[u8], arrived: Option<u64>) {
        if RESET.find(message).is_some() {
            self.resets += 1;
        }
        self.record(message, arrived);
    }
}

pub fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Searchers for what every delivery is searched for, built once:
/// `memmem::find` builds its searcher on every call, which was 1.5% of the
/// generator's core at 10,000 subscribers (`RESULTS.md`, stop 42).
static SENT_KEY: std::sync::LazyLock<memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memmem::Finder::new(b"loadtest/sent"));
static RESET: std::sync::LazyLock<memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memmem::Finder::new(b"\"RESET\""));

/// Finds `"loadtest/sent":"SEQ:NANOS"` (possibly JSON-escaped once).
pub(crate) fn parse_sent(payload: &[u8]) -> Option<(u64, u64)> {
    let at = SENT_KEY.find(payload)? + SENT_KEY.needle().len();
    let rest = &payload[at..];
    let start = rest.iter().position(|b| b.is_ascii_digit())?;
    let rest = &rest[start..];
    let colon = rest.iter().position(|b| *b == b':')?;
    let seq = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
    let rest = &rest[colon + 1..];
    let end = rest
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(rest.len());
    let sent = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    Some((seq, sent))
}

/// Marks the end of kubefan's snapshot on every transport.
pub const SNAPSHOT_END: &[u8] = b"k8s.io/initial-events-end";

/// A connected subscriber, ready for changes.
pub struct Conn {
    wire: Wire,
    /// When what was last read off its socket arrived.
    arrival: Arrival,
}

/// What a [`Conn`] reads.
enum Wire {
    /// An HTTP/1.1 streaming response (SSE, a Kubernetes watch).
    Http(Box<HttpConn>),
    Ws(Box<WsConn>),
    /// A `/ws` socket carrying one or more subscriptions (`s0`, `s1`, ...).
    WsMux(Box<WsConn>),
    /// An HTTP/2 stream; its window is given back as it is read.
    H2(h2::RecvStream),
}

/// What subscribers connect through.
#[derive(Clone)]
pub enum Client {
    /// HTTP/1.1 (plain or TLS), one connection per subscriber.
    Http1,
    /// One HTTP/2 connection, shared by several subscribers' streams.
    H2(h2::client::SendRequest<Bytes>, Arrival),
}

/// A rustls client (ring) trusting `ca_pem`, offering `alpn`.
pub fn tls_config(ca_pem: &str, alpn: &[&[u8]]) -> anyhow::Result<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

/// A TLS session over `tcp`, trusting `ca_pem`, offering `alpn`, for the
/// server's IP address.
pub(crate) async fn tls_connect(
    ca_pem: &str,
    alpn: &[&[u8]],
    tcp: Stamped,
) -> anyhow::Result<tokio_rustls::client::TlsStream<Stamped>> {
    let name = rustls::pki_types::ServerName::try_from(tcp.peer_ip()?.to_string())?;
    Ok(
        tokio_rustls::TlsConnector::from(Arc::new(tls_config(ca_pem, alpn)?))
            .connect(name, tcp)
            .await?,
    )
}

/// `host:port` of a base URL.
pub(crate) fn authority(base: &str) -> anyhow::Result<&str> {
    base.split("://")
        .nth(1)
        .map(|rest| rest.split('/').next().unwrap_or(rest))
        .context("the base URL has a host")
}

/// Opens one HTTP/2 connection (TLS, ALPN `h2`) from `local`, with
/// browser-sized windows (6 MiB per stream, 15 MiB per connection).
pub async fn h2_connection(target: &Target, local: IpAddr) -> anyhow::Result<Client> {
    let ca = target
        .ca_pem
        .as_deref()
        .context("HTTP/2 needs TLS: --tls-ca")?;
    let host = authority(&target.base)?;
    let addr: std::net::SocketAddr = host.parse()?;
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((local, 0).into())?;
    let (tcp, arrival) = Stamped::new(socket.connect(addr).await?)?;
    let tls = tls_connect(ca, &[b"h2"], tcp).await?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        bail!("{host} did not agree to HTTP/2");
    }
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(6 << 20)
        .initial_connection_window_size(15 << 20)
        .handshake::<_, Bytes>(tls)
        .await?;
    tokio::spawn(conn);
    Ok(Client::H2(send, arrival))
}

/// Connects and reads until the snapshot is complete (kubefan) or the
/// response has started (nchan). `subscriptions` are the run-wide indexes
/// of the subscribers the connection carries: one, or on a `/ws` socket
/// as many as it has subscriptions.
pub async fn connect(
    target: &Target,
    client: &Client,
    local: IpAddr,
    credential: Option<&Credential>,
    subscriptions: std::ops::Range<usize>,
) -> anyhow::Result<Conn> {
    let url = target.url(subscriptions.start);
    let nchan = target.server != "kubefan";
    if nchan && target.transport == Transport::WsMux {
        bail!("ws-mux is kubefan's /ws");
    }
    if let Client::H2(send, arrival) = client {
        let body = connect_h2(target, send.clone(), &url, credential).await?;
        return Ok(Conn {
            wire: Wire::H2(body),
            arrival: arrival.clone(),
        });
    }
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind((local, 0).into())?;
    let mut parts = url.splitn(4, '/');
    let host = parts.nth(2).context("url has a host")?;
    let path = format!("/{}", parts.next().unwrap_or(""));
    let addr: std::net::SocketAddr = host.parse()?;
    let (stream, arrival) = Stamped::new(socket.connect(addr).await?)?;
    let tls = url.starts_with("wss:") || url.starts_with("https:");
    let stream: Box<dyn Io> = match (&target.ca_pem, tls) {
        // One session per subscriber, as a browser's tab has.
        (Some(ca), true) => Box::new(tls_connect(ca, &[b"http/1.1"], stream).await?),
        (None, true) => bail!("{url}: TLS needs --tls-ca"),
        _ => Box::new(stream),
    };
    match target.transport {
        Transport::Ws | Transport::WsMux => {
            let mut ws = WsConn::handshake(stream, host, &path, credential).await?;
            if target.transport == Transport::WsMux {
                subscribe_all(target, &mut ws, subscriptions.clone()).await?;
                return Ok(Conn {
                    wire: Wire::WsMux(Box::new(ws)),
                    arrival,
                });
            }
            if !nchan {
                loop {
                    match ws.next().await? {
                        Some(msg) if memmem::find(&msg, SNAPSHOT_END).is_some() => break,
                        Some(_) => {}
                        None => bail!("WebSocket ended before its snapshot"),
                    }
                }
            }
            Ok(Conn {
                wire: Wire::Ws(Box::new(ws)),
                arrival,
            })
        }
        Transport::Sse | Transport::Watch => {
            let accept = if nchan {
                "Accept: text/event-stream\r\n"
            } else {
                ""
            };
            let mut body = HttpConn::get(stream, host, &path, credential, accept)
                .await
                .with_context(|| url.clone())?;
            if !nchan {
                // Only the new chunk and a marker-sized tail of the previous
                // one are searched: snapshots can be tens of megabytes.
                let mut tail: Vec<u8> = Vec::new();
                loop {
                    let chunk = body
                        .next()
                        .await?
                        .context("stream ended before its snapshot")?;
                    tail.extend_from_slice(&chunk);
                    if memmem::find(&tail, SNAPSHOT_END).is_some() {
                        break;
                    }
                    let keep = tail.len().saturating_sub(SNAPSHOT_END.len());
                    tail.drain(..keep);
                }
            }
            Ok(Conn {
                wire: Wire::Http(Box::new(body)),
                arrival,
            })
        }
    }
}

/// Subscribes on a `/ws` socket for each of `subscribers` (run-wide
/// indexes; `s0` ... `s{n-1}`) and reads until every subscription's
/// snapshot is complete.
async fn subscribe_all(
    target: &Target,
    ws: &mut WsConn,
    subscribers: std::ops::Range<usize>,
) -> anyhow::Result<()> {
    let n = subscribers.len();
    for (id, index) in subscribers.enumerate() {
        ws.send_text(target.subscribe_message(id, index).as_bytes())
            .await?;
    }
    let mut snapshots = vec![false; n];
    let mut pending = n;
    while pending > 0 {
        let msg = ws
            .next()
            .await?
            .context("the /ws socket closed before its snapshots")?;
        if memmem::find(&msg, br#""type":"ERROR""#).is_some() {
            bail!("/ws: {}", String::from_utf8_lossy(&msg));
        }
        if memmem::find(&msg, SNAPSHOT_END).is_some() {
            let id = mux_sub(&msg).context("a /ws message names its subscription")?;
            if let Some(done) = snapshots.get_mut(id).filter(|d| !**d) {
                *done = true;
                pending -= 1;
            }
        }
    }
    Ok(())
}

/// The subscription a `/ws` message is for: `N` of its leading
/// `{"sub":"sN",`.
fn mux_sub(msg: &[u8]) -> Option<usize> {
    let rest = msg.strip_prefix(br#"{"sub":"s"#)?;
    let end = rest.iter().position(|b| !b.is_ascii_digit())?;
    std::str::from_utf8(&rest[..end]).ok()?.parse().ok()
}

/// An HTTP/2 stream, read until its snapshot is complete.
async fn connect_h2(
    target: &Target,
    send: h2::client::SendRequest<Bytes>,
    url: &str,
    credential: Option<&Credential>,
) -> anyhow::Result<h2::RecvStream> {
    if matches!(target.transport, Transport::Ws | Transport::WsMux) {
        bail!("WebSocket is HTTP/1.1 only (kubefan does not offer RFC 8441)");
    }
    let mut send = send.ready().await?;
    let mut req = http::Request::get(url);
    if let Some(c) = credential {
        req = req.header(c.header, &c.value);
    }
    let req = req.body(())?;
    let (response, _) = send.send_request(req, true)?;
    let response = response.await?;
    if !response.status().is_success() {
        bail!("{url}: HTTP {}", response.status());
    }
    let mut body = response.into_body();
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let chunk = body
            .data()
            .await
            .context("stream ended before its snapshot")??;
        let _ = body.flow_control().release_capacity(chunk.len());
        tail.extend_from_slice(&chunk);
        if memmem::find(&tail, SNAPSHOT_END).is_some() {
            break;
        }
        let keep = tail.len().saturating_sub(SNAPSHOT_END.len());
        tail.drain(..keep);
    }
    Ok(body)
}

/// Reads changes into `seen` (one per subscriber the connection carries)
/// until `deadline`, or until every change each is to get has arrived;
/// then hands the connection back, open. The worker closes its
/// connections only once all its readers are done: a reader that hung up
/// as soon as it had the last change made the server handle thousands of
/// hang-ups while it was still delivering that change to the others, and
/// the run's slowest delivery was often that change's (`RESULTS.md`, stop
/// 41).
pub async fn read(
    mut conn: Conn,
    mut seen: Vec<Seen>,
    deadline: tokio::time::Instant,
) -> (Vec<Seen>, Conn) {
    if let Wire::WsMux(ws) = &mut conn.wire {
        let seen = read_mux(ws, &conn.arrival, seen, deadline).await;
        return (seen, conn);
    }
    let Some(one) = seen.pop() else {
        return (seen, conn);
    };
    seen.push(read_one(&mut conn, one, deadline).await);
    (seen, conn)
}

/// [`read`] for a connection carrying one subscriber.
///
/// The deadline is one timer per reader, registered once: a `timeout_at`
/// around each read put an entry into tokio's timer wheel and took it out
/// again for every delivery (3% of the generator's core at 10,000
/// subscribers, `RESULTS.md`, stop 42).
async fn read_one(conn: &mut Conn, mut seen: Seen, deadline: tokio::time::Instant) -> Seen {
    // The start of a line whose end has not come yet.
    let mut partial: Vec<u8> = Vec::new();
    let expired = tokio::time::sleep_until(deadline);
    tokio::pin!(expired);
    let arrival = &conn.arrival;
    match &mut conn.wire {
        wire @ (Wire::Http(_) | Wire::H2(_)) => {
            loop {
                let Some(chunk) = next_chunk(wire, expired.as_mut()).await else {
                    break;
                };
                let arrived = arrival.get();
                // Frames end with a blank line (SSE) or a newline (watch); a
                // change is one frame, so split on newlines. Lines are
                // read in the chunk where they can be; only one cut by
                // the chunk's end is copied.
                let mut rest: &[u8] = &chunk;
                while let Some(end) = memchr::memchr(b'\n', rest) {
                    let (line, after) = rest.split_at(end + 1);
                    if partial.is_empty() {
                        seen.take(line, arrived);
                    } else {
                        partial.extend_from_slice(line);
                        seen.take(&partial, arrived);
                        partial.clear();
                    }
                    rest = after;
                }
                partial.extend_from_slice(rest);
                if chunk.len() < 64 * 1024 && seen.complete() {
                    break;
                }
            }
        }
        Wire::Ws(ws) => loop {
            let Some(msg) = before(expired.as_mut(), ws.next()).await else {
                break;
            };
            seen.take(&msg, arrival.get());
            if seen.complete() {
                break;
            }
        },
        Wire::WsMux(_) => unreachable!("read_mux reads /ws sockets"),
    }
    seen
}

/// [`read`] for a `/ws` socket: each message to the subscriber it names.
async fn read_mux(
    ws: &mut WsConn,
    arrival: &Arrival,
    mut seen: Vec<Seen>,
    deadline: tokio::time::Instant,
) -> Vec<Seen> {
    let mut complete = vec![false; seen.len()];
    let mut pending = seen.len();
    let expired = tokio::time::sleep_until(deadline);
    tokio::pin!(expired);
    while pending > 0 {
        let Some(msg) = before(expired.as_mut(), ws.next()).await else {
            break;
        };
        let Some(id) = mux_sub(&msg).filter(|id| *id < seen.len()) else {
            continue;
        };
        seen[id].take(&msg, arrival.get());
        if !complete[id] && seen[id].complete() {
            complete[id] = true;
            pending -= 1;
        }
    }
    seen
}

/// `next`'s item if it comes before `expired` does; `None` if it does not,
/// or if it is an error or the end.
async fn before<T, E>(
    expired: std::pin::Pin<&mut tokio::time::Sleep>,
    next: impl Future<Output = Result<Option<T>, E>>,
) -> Option<T> {
    tokio::select! {
        biased;
        item = next => item.ok().flatten(),
        () = expired => None,
    }
}

/// The next chunk of an HTTP/1.1 or HTTP/2 body, before `expired`.
async fn next_chunk(
    wire: &mut Wire,
    expired: std::pin::Pin<&mut tokio::time::Sleep>,
) -> Option<Bytes> {
    match wire {
        Wire::Http(body) => before(expired, body.next()).await,
        Wire::H2(body) => {
            let chunk = before(expired, body.data().map(Option::transpose)).await?;
            let _ = body.flow_control().release_capacity(chunk.len());
            Some(chunk)
        }
        Wire::Ws(_) | Wire::WsMux(_) => None,
    }
}

/// An HTTP/1.1 client from `local`, trusting `ca_pem` for https.
pub fn client_for(local: IpAddr, ca_pem: Option<&str>) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .local_address(local)
        .pool_max_idle_per_host(0)
        .connect_timeout(Duration::from_secs(10));
    if let Some(ca) = ca_pem {
        builder = builder.use_preconfigured_tls(tls_config(ca, &[b"http/1.1"])?);
    }
    Ok(builder.build()?)
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::http1::accept_request;
    use crate::target::bearer_line;
    use crate::ws::server_text;

    #[tokio::test]
    async fn a_ws_mux_socket_subscribes_k_times_and_sorts_deliveries_by_subscription() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut tcp, head, mut input) = accept_request(&listener).await;
            tcp.write_all(b"HTTP/1.1 101 Switching Protocols\r\n\r\n")
                .await
                .unwrap();
            // Two masked text frames (a zero key).
            let mut subscribes = Vec::new();
            while subscribes.len() < 2 {
                if input.len() >= 2 {
                    let (len, header) = match input[1] & 0x7f {
                        126 if input.len() >= 4 => {
                            (u16::from_be_bytes([input[2], input[3]]) as usize, 8)
                        }
                        126 => (usize::MAX, 0),
                        n => (n as usize, 6),
                    };
                    if len != usize::MAX && input.len() >= header + len {
                        assert_eq!(input[0], 0x81);
                        assert_eq!(input[1] & 0x80, 0x80, "masked");
                        subscribes
                            .push(String::from_utf8(input[header..header + len].to_vec()).unwrap());
                        input.drain(..header + len);
                        continue;
                    }
                }
                let mut chunk = [0u8; 4096];
                let n = tcp.read(&mut chunk).await.unwrap();
                input.extend_from_slice(&chunk[..n]);
            }
            let end = r#"{"type":"BOOKMARK","object":{"metadata":{"annotations":{"k8s.io/initial-events-end":"true"}}},"id":"1"}"#;
            let mut out = Vec::new();
            for sub in ["s1", "s0"] {
                out.extend(server_text(&format!(r#"{{"sub":"{sub}",{}"#, &end[1..])));
            }
            let now = now_nanos();
            for (sub, seq) in [("s0", 0), ("s0", 0), ("s1", 0), ("s1", 1), ("s0", 1)] {
                out.extend(server_text(&format!(
                    r#"{{"sub":"{sub}","type":"MODIFIED","object":{{"metadata":{{"annotations":{{"loadtest/sent":"{seq}:{now}"}}}}}}}}"#
                )));
            }
            tcp.write_all(&out).await.unwrap();
            (head, subscribes)
        });
        let target = Target {
            ws_mux: 2,
            ..Target::kubefan(format!("http://{addr}"), Transport::WsMux)
        };
        let client = Client::Http1;
        let credential = bearer_line("tok");
        let conn = connect(
            &target,
            &client,
            "127.0.0.1".parse().unwrap(),
            Some(&credential),
            0..2,
        )
        .await
        .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let (seen, _conn) = read(
            conn,
            vec![Seen::new(2, vec![]), Seen::new(2, vec![])],
            deadline,
        )
        .await;
        let (head, subscribes) = server.await.unwrap();
        assert!(head.starts_with("GET /ws HTTP/1.1\r\n"), "{head}");
        assert!(head.contains("Authorization: Bearer tok\r\n"), "{head}");
        let first: serde_json::Value = serde_json::from_str(&subscribes[0]).unwrap();
        assert_eq!(
            first,
            serde_json::json!({"op": "subscribe", "id": "s0", "resource": "pods", "namespace": "loadtest"})
        );
        assert!(seen.iter().all(|s| s.complete()));
        assert_eq!(seen[0].duplicates, 1);
        assert_eq!(seen[1].duplicates, 0);
        assert_eq!(mux_sub(br#"{"sub":"s12","type":"ADDED"}"#), Some(12));
        assert_eq!(mux_sub(br#"{"sub":null,"type":"ERROR"}"#), None);
    }

    #[tokio::test]
    async fn sse_lines_cut_anywhere_by_the_chunks_are_each_read_once() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut tcp, _, _) = accept_request(&listener).await;
            let now = now_nanos();
            let mut body = format!(
                "event: BOOKMARK\ndata: {}\n\n",
                std::str::from_utf8(SNAPSHOT_END).unwrap()
            )
            .into_bytes();
            let snapshot = body.len();
            // Change 0, then 0 again, a reset, and change 1.
            for seq in [0, 0, 1] {
                if seq == 1 {
                    body.extend_from_slice(b"event: RESET\ndata: {\"type\":\"RESET\"}\n\n");
                }
                body.extend_from_slice(
                    format!("id: {seq}\nevent: MODIFIED\ndata: {{\"loadtest/sent\":\"{seq}:{now}\"}}\n\n")
                        .as_bytes(),
                );
            }
            // The snapshot in a chunk of its own, then chunks of 7 bytes,
            // which cut lines everywhere.
            let mut out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            let (first, rest) = body.split_at(snapshot);
            for part in std::iter::once(first).chain(rest.chunks(7)) {
                out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                out.extend_from_slice(part);
                out.extend_from_slice(b"\r\n");
            }
            for part in out.chunks(64) {
                tcp.write_all(part).await.unwrap();
                tcp.flush().await.unwrap();
            }
            tcp
        });
        let target = Target::kubefan(format!("http://{addr}"), Transport::Sse);
        let conn = connect(
            &target,
            &Client::Http1,
            "127.0.0.1".parse().unwrap(),
            None,
            0..1,
        )
        .await
        .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let (seen, _conn) = read(conn, vec![Seen::new(2, vec![])], deadline).await;
        let _tcp = server.await.unwrap();
        assert!(seen[0].complete());
        assert!(seen[0].latency_us.iter().all(|l| *l != u32::MAX));
        // Each change's bytes reached the socket no later than they were read.
        for (arrived, read) in seen[0].arrival_us.iter().zip(&seen[0].latency_us) {
            assert!(arrived <= read, "arrived {arrived} µs, read {read} µs");
        }
        assert_eq!((seen[0].duplicates, seen[0].resets), (1, 1));
    }

    #[test]
    fn finds_the_sent_mark_in_any_framing() {
        assert_eq!(
            parse_sent(br#"data: {"annotations":{"loadtest/sent":"12:345"}}"#),
            Some((12, 345))
        );
        assert_eq!(parse_sent(br#"{\"loadtest/sent\":\"7:9\"}"#), Some((7, 9)));
        assert_eq!(parse_sent(b"nothing"), None);
    }

    #[test]
    fn a_narrowed_subscriber_expects_its_namespaces_and_counts_others_as_leaked() {
        // Changes 0..6 over 3 namespaces; this one sees loadtest-1.
        let mut seen = Seen::new(6, bearer_line("t loadtest-1").wanted(3));
        assert_eq!(seen.expected(), 2);
        let now = now_nanos();
        seen.record(format!(r#""loadtest/sent":"1:{now}""#).as_bytes(), None);
        assert!(!seen.complete());
        seen.record(format!(r#""loadtest/sent":"2:{now}""#).as_bytes(), None);
        assert_eq!(seen.leaked, 1);
        seen.record(format!(r#""loadtest/sent":"4:{now}""#).as_bytes(), None);
        assert!(seen.complete());
        assert_eq!(seen.duplicates, 0);
    }
}
