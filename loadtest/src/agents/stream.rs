//! What an agent asks for and how its stream is read: the paths each
//! client opens (SSE and WebSocket `/stream/pods`, the watch face's watch
//! list, watch and LIST pages), and a stream's messages taken whole off
//! its socket: SSE events, watch lines, WebSocket messages.

use std::collections::VecDeque;

use super::agent::PAGE;
use super::frame::{Id, SseEvent};
use crate::arrival::Arrival;
use crate::http1::HttpConn;
use crate::ws::WsConn;

/// `spec.nodeName=NODE`, as a query parameter.
fn selector(node: Option<&str>) -> Option<String> {
    node.map(|n| format!("fieldSelector=spec.nodeName%3D{n}"))
}

fn query(parts: impl IntoIterator<Item = Option<String>>) -> String {
    let parts: Vec<String> = parts.into_iter().flatten().collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// SSE and WebSocket: `/stream/pods`, resuming from `from` (WebSocket; SSE
/// sends `Last-Event-ID`).
pub fn stream_path(node: Option<&str>, ws_from: Option<u64>) -> String {
    format!(
        "/stream/pods{}",
        query([
            selector(node),
            ws_from.map(|rv| format!("resourceVersion={rv}"))
        ])
    )
}

/// The watch face: a watch list as client-go's WatchList informer opens it
/// (`None`), or a watch from a resourceVersion.
pub fn watch_path(node: Option<&str>, from: Option<u64>) -> String {
    let how = match from {
        None => "allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
            .to_string(),
        Some(rv) => format!("allowWatchBookmarks=true&resourceVersion={rv}"),
    };
    format!(
        "/api/v1/pods{}",
        query([Some("watch=1".into()), selector(node), Some(how)])
    )
}

/// A LIST page as client-go's reflector asks for it: the first at
/// `resourceVersion=0` (the watch cache), the next with `continue` alone.
pub fn list_path(node: Option<&str>, cont: Option<&str>) -> String {
    let at = match cont {
        None => "resourceVersion=0".to_string(),
        Some(token) => format!("continue={}", super::upstream::urlencode(token)),
    };
    format!(
        "/api/v1/pods{}",
        query([selector(node), Some(format!("limit={PAGE}")), Some(at)])
    )
}

/// A stream being read: its messages, each whole, and when the bytes of
/// the last read reached the socket.
pub struct Stream {
    wire: Wire,
    pub arrival: Arrival,
    queue: VecDeque<(Id, Vec<u8>)>,
}

pub enum Wire {
    /// SSE (`sse`: its event being assembled) or a watch (one JSON a line).
    Http {
        body: Box<HttpConn>,
        partial: Vec<u8>,
        sse: Option<SseEvent>,
    },
    Ws(Box<WsConn>),
}

impl Stream {
    pub fn new(wire: Wire, arrival: Arrival) -> Stream {
        Stream {
            wire,
            arrival,
            queue: VecDeque::new(),
        }
    }

    /// The next message: an SSE event's `id` and `data`, a watch's line, a
    /// WebSocket message. `None` at the end.
    pub async fn next(&mut self) -> anyhow::Result<Option<(Id, Vec<u8>)>> {
        // Bounded: each round reads from the socket, which ends or fails.
        loop {
            if let Some(message) = self.queue.pop_front() {
                return Ok(Some(message));
            }
            match &mut self.wire {
                Wire::Ws(ws) => return Ok(ws.next().await?.map(|m| (Id::Absent, m.to_vec()))),
                Wire::Http { body, partial, sse } => {
                    let Some(chunk) = body.next().await? else {
                        return Ok(None);
                    };
                    let mut rest: &[u8] = &chunk;
                    while let Some(end) = memchr::memchr(b'\n', rest) {
                        let (line, after) = rest.split_at(end);
                        rest = &after[1..];
                        let whole;
                        let line = if partial.is_empty() {
                            line
                        } else {
                            partial.extend_from_slice(line);
                            whole = std::mem::take(partial);
                            &whole[..]
                        };
                        match sse {
                            Some(sse) => {
                                if let Some((id, data)) = sse.line(line)
                                    && !data.is_empty()
                                {
                                    self.queue.push_back((id, data));
                                }
                            }
                            None => {
                                let line = line.strip_suffix(b"\r").unwrap_or(line);
                                if !line.is_empty() {
                                    self.queue.push_back((Id::Absent, line.to_vec()));
                                }
                            }
                        }
                    }
                    partial.extend_from_slice(rest);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_what_each_client_asks_for() {
        assert_eq!(
            stream_path(Some("node-3"), None),
            "/stream/pods?fieldSelector=spec.nodeName%3Dnode-3"
        );
        assert_eq!(stream_path(None, Some(7)), "/stream/pods?resourceVersion=7");
        assert_eq!(
            watch_path(Some("node-3"), None),
            "/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dnode-3\
             &allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        );
        assert_eq!(
            watch_path(None, Some(9)),
            "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=9"
        );
        assert_eq!(
            list_path(Some("n"), None),
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn&limit=500&resourceVersion=0"
        );
        assert_eq!(
            list_path(None, Some("a=")),
            "/api/v1/pods?limit=500&continue=a%3D"
        );
    }
}
