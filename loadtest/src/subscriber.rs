//! Subscribers: connect over one transport, wait for the snapshot (or the
//! connection, for nchan), then record every change's latency.
//!
//! A change carries `"loadtest/sent":"SEQ:NANOS"` in its payload (an
//! annotation on kubefan's side, the message body on nchan's); each
//! subscriber records, per sequence number, whether it arrived and how late.

use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use futures::StreamExt;
use memchr::memmem;
use tokio_tungstenite::tungstenite::Message;

/// What a subscriber saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// Latency in microseconds per sequence number (`u32::MAX`: not seen).
    pub latency_us: Vec<u32>,
    pub duplicates: u64,
    pub resets: u64,
}

impl Seen {
    pub fn new(changes: usize) -> Seen {
        Seen {
            latency_us: vec![u32::MAX; changes],
            ..Seen::default()
        }
    }

    fn record(&mut self, payload: &[u8]) {
        let Some((seq, sent)) = parse_sent(payload) else {
            return;
        };
        let now = now_nanos();
        let Some(slot) = self.latency_us.get_mut(seq as usize) else {
            return;
        };
        if *slot != u32::MAX {
            self.duplicates += 1;
            return;
        }
        *slot = (now.saturating_sub(sent) / 1000).min(u32::MAX as u64 - 1) as u32;
    }
}

pub fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Finds `"loadtest/sent":"SEQ:NANOS"` (possibly JSON-escaped once).
fn parse_sent(payload: &[u8]) -> Option<(u64, u64)> {
    let key = b"loadtest/sent";
    let at = memmem::find(payload, key)? + key.len();
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

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum Transport {
    Sse,
    Ws,
    /// The Kubernetes watch face (kubefan only).
    Watch,
}

/// Where and how to subscribe.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Target {
    /// `kubefan` or `nchan`.
    pub server: String,
    /// Base URL, `http://127.0.0.1:8080`.
    pub base: String,
    pub transport: Transport,
    /// Overrides the path (and query) subscribed to.
    pub path: Option<String>,
}

impl Target {
    fn url(&self) -> String {
        if let Some(path) = &self.path {
            return format!("{}{path}", self.base);
        }
        match (self.server.as_str(), self.transport) {
            ("nchan", Transport::Ws) => {
                format!("{}/sub/loadtest", self.base.replacen("http", "ws", 1))
            }
            ("nchan", _) => format!("{}/sub/loadtest", self.base),
            (_, Transport::Sse) => format!("{}/stream/pods?namespace=loadtest", self.base),
            (_, Transport::Ws) => format!(
                "{}/stream/pods?namespace=loadtest",
                self.base.replacen("http", "ws", 1)
            ),
            (_, Transport::Watch) => format!(
                "{}/api/v1/namespaces/loadtest/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
                self.base
            ),
        }
    }
}

/// Marks the end of kubefan's snapshot on every transport.
const SNAPSHOT_END: &[u8] = b"k8s.io/initial-events-end";

/// A connected subscriber, ready for changes.
pub enum Conn {
    Http(futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>),
    Ws(
        Box<
            tokio_tungstenite::WebSocketStream<
                tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
            >,
        >,
    ),
}

/// Connects and reads until the snapshot is complete (kubefan) or the
/// response has started (nchan).
pub async fn connect(
    target: &Target,
    client: &reqwest::Client,
    local: IpAddr,
) -> anyhow::Result<Conn> {
    let url = target.url();
    let nchan = target.server == "nchan";
    match target.transport {
        Transport::Ws => {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind((local, 0).into())?;
            let host = url.split('/').nth(2).context("url has a host")?;
            let addr: std::net::SocketAddr = host.parse()?;
            let stream = socket.connect(addr).await?;
            let (mut ws, _) = tokio_tungstenite::client_async(
                url.as_str(),
                tokio_tungstenite::MaybeTlsStream::Plain(stream),
            )
            .await?;
            if !nchan {
                loop {
                    match ws.next().await {
                        Some(Ok(Message::Text(t)))
                            if memmem::find(t.as_bytes(), SNAPSHOT_END).is_some() =>
                        {
                            break;
                        }
                        Some(Ok(_)) => {}
                        other => bail!("WebSocket ended before its snapshot: {other:?}"),
                    }
                }
            }
            Ok(Conn::Ws(Box::new(ws)))
        }
        Transport::Sse | Transport::Watch => {
            let mut req = client.get(&url);
            if nchan {
                req = req.header("Accept", "text/event-stream");
            }
            let resp = req.send().await?;
            if !resp.status().is_success() {
                bail!("{url}: HTTP {}", resp.status());
            }
            let mut body = resp.bytes_stream().boxed();
            if !nchan {
                // Only the new chunk and a marker-sized tail of the previous
                // one are searched: snapshots can be tens of megabytes.
                let mut tail: Vec<u8> = Vec::new();
                loop {
                    let chunk = body
                        .next()
                        .await
                        .context("stream ended before its snapshot")??;
                    tail.extend_from_slice(&chunk);
                    if memmem::find(&tail, SNAPSHOT_END).is_some() {
                        break;
                    }
                    let keep = tail.len().saturating_sub(SNAPSHOT_END.len());
                    tail.drain(..keep);
                }
            }
            Ok(Conn::Http(body))
        }
    }
}

/// Reads changes until `deadline`, or until every change has arrived.
pub async fn read(conn: Conn, changes: usize, deadline: tokio::time::Instant) -> Seen {
    let mut seen = Seen::new(changes);
    let mut pending = changes;
    let mut buf: Vec<u8> = Vec::new();
    let done = |seen: &Seen, pending: &mut usize| {
        *pending = seen.latency_us.iter().filter(|l| **l == u32::MAX).count();
        *pending == 0
    };
    match conn {
        Conn::Http(mut body) => loop {
            let next = tokio::time::timeout_at(deadline, body.next()).await;
            let Ok(Some(Ok(chunk))) = next else { break };
            buf.extend_from_slice(&chunk);
            // Frames end with a blank line (SSE) or a newline (watch); a
            // change is one frame, so split on newlines.
            while let Some(end) = memchr::memchr(b'\n', &buf) {
                let line: Vec<u8> = buf.drain(..=end).collect();
                if memmem::find(&line, b"\"RESET\"").is_some() {
                    seen.resets += 1;
                }
                seen.record(&line);
            }
            if chunk.len() < 64 * 1024 && done(&seen, &mut pending) {
                break;
            }
        },
        Conn::Ws(mut ws) => loop {
            let next = tokio::time::timeout_at(deadline, ws.next()).await;
            match next {
                Ok(Some(Ok(Message::Text(t)))) => {
                    if memmem::find(t.as_bytes(), b"\"RESET\"").is_some() {
                        seen.resets += 1;
                    }
                    seen.record(t.as_bytes());
                    if done(&seen, &mut pending) {
                        break;
                    }
                }
                Ok(Some(Ok(_))) => {}
                _ => break,
            }
        },
    }
    let _ = pending;
    seen
}

pub fn client_for(local: IpAddr) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .local_address(local)
        .pool_max_idle_per_host(0)
        .connect_timeout(Duration::from_secs(10))
        .build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_sent_mark_in_any_framing() {
        assert_eq!(
            parse_sent(br#"data: {"annotations":{"loadtest/sent":"12:345"}}"#),
            Some((12, 345))
        );
        assert_eq!(parse_sent(br#"{\"loadtest/sent\":\"7:9\"}"#), Some((7, 9)));
        assert_eq!(parse_sent(b"nothing"), None);
    }
}
