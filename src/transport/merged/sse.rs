//! A merged stream as SSE: `GET /stream/{resource}?clusters=a,b` (see
//! the module above). Each part is framed by [`SseFraming`] and marked
//! ([`ClusterSse`]): `"cluster":"NAME",` after each `data:` line's `{`,
//! and each `id:` made the compound id. Keep-alive comments are one per
//! tick for the whole stream, while any part is idle ([`Ids::comment`]).

use std::sync::Arc;
use std::task::{Context, Poll};

use actix_web::http::header::{self, HeaderName};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;

use super::{Asked, Ids, Parts, Start, about_json, open, warning_text};
use crate::auth::{Principal, Verb};
use crate::lifecycle::Lifecycle;
use crate::metrics::Transport;
use crate::status::ApiError;
use crate::transport::message::Message;
use crate::transport::sse::SseFraming;
use crate::transport::state::AppState;
use crate::transport::stream::ChunkSource;
use crate::transport::stream::{BatchSource, Chunk, Framed, Framing, Stream};
use crate::transport::{access_log, takeover};
use serde_json::Value;

/// What a merged SSE stream is opened with.
pub struct Plan<'a> {
    pub asked: Asked<'a>,
    /// What the stream starts with (the `retry:` hint).
    pub preamble: Bytes,
}

/// Opens the merged stream `plan` describes.
pub async fn stream(
    req: &HttpRequest,
    state: &web::Data<AppState>,
    principal: &Principal,
    plan: Plan<'_>,
) -> Result<HttpResponse, ApiError> {
    let Plan { asked, preamble } = plan;
    let resource = asked.resource;
    let opened = open(state, principal, asked, Transport::Sse).await?;
    access_log::note(req, Verb::Watch, resource, &opened.namespaces);
    let ids = Arc::new(Ids::default());
    // Those of the parts that start now: a part that joins later has no
    // response to carry them.
    let mut warnings = Vec::new();
    let mut head = preamble.to_vec();
    for (name, status) in &opened.refused {
        head.extend_from_slice(&event_about(name, "CLUSTER", "object", status));
    }
    let mut parts = Vec::with_capacity(opened.parts.len());
    for (name, start, resumed) in opened.parts {
        if let Start::Now(sub) = &start {
            warnings.extend(sub.hub().warnings().iter().copied());
        }
        let index = ids.push(name.clone(), resumed);
        let framing = ClusterSse {
            cluster: name.clone(),
            index,
            ids: ids.clone(),
            lifecycle: state.lifecycle.clone(),
        };
        parts.push((name, start, framing));
    }
    warnings.sort_unstable();
    warnings.dedup();
    let body = MergedSse {
        preamble: Some(Bytes::from(head)),
        parts: Parts::new(parts, Transport::Sse, principal.name()),
    };
    let mut headers = vec![
        (header::CONTENT_TYPE, "text/event-stream"),
        (header::CACHE_CONTROL, "no-cache"),
        (HeaderName::from_static("x-accel-buffering"), "no"),
    ];
    headers.extend(warnings.iter().map(|w| (header::WARNING, *w)));
    Ok(takeover::respond(req, &state.streams, &headers, body))
}

/// An SSE event `kind` about `cluster` ([`about_json`]).
fn event_about(cluster: &str, kind: &str, field: &str, value: &Value) -> Vec<u8> {
    format!(
        "event: {kind}\ndata: {}\n\n",
        about_json(cluster, kind, field, value)
    )
    .into_bytes()
}

/// One part's framing: SSE as a single-cluster stream frames it, then
/// marked with the cluster and given the compound id.
struct ClusterSse {
    cluster: Arc<str>,
    index: usize,
    ids: Arc<Ids>,
    /// Whose ticks its keep-alives are.
    lifecycle: Arc<Lifecycle>,
}

impl ClusterSse {
    /// Rewrites SSE events (as `SseFraming` makes them: `field: value`
    /// lines, one `data:` line of compact JSON each) into `out`.
    fn mark(&self, frames: &[u8], out: &mut Chunk) {
        let mut buf = Vec::with_capacity(frames.len() + 64);
        for line in frames.split_inclusive(|b| *b == b'\n') {
            if let Some(json) = line.strip_prefix(b"data: {") {
                buf.extend_from_slice(b"data: {\"cluster\":\"");
                // A DNS label: nothing to escape.
                buf.extend_from_slice(self.cluster.as_bytes());
                buf.push(b'"');
                if !json.starts_with(b"}") {
                    buf.push(b',');
                }
                buf.extend_from_slice(json);
            } else if let Some(value) = line.strip_prefix(b"id:") {
                let value = std::str::from_utf8(value).unwrap_or("").trim();
                let position = (!value.is_empty()).then_some(value);
                let id = self.ids.set(self.index, position);
                buf.extend_from_slice(b"id:");
                if !id.is_empty() {
                    buf.push(b' ');
                    buf.extend_from_slice(id.as_bytes());
                }
                buf.push(b'\n');
            } else {
                buf.extend_from_slice(line);
            }
        }
        out.put(&buf);
    }
}

impl Framing for ClusterSse {
    type Out = Chunk;

    fn frame(&mut self, msg: Message<'_>, stream: &Stream<'_>, out: &mut Chunk) -> bool {
        let keep_alive = matches!(msg, Message::KeepAlive);
        let mut framed = Chunk::default();
        let more = SseFraming.frame(msg, stream, &mut framed);
        if let Some(frames) = framed.take() {
            if keep_alive {
                // One comment per interval for the stream, not one per
                // part (whose ticks come at their own phases' beats).
                if self.ids.comment(self.lifecycle.intervals()) {
                    out.shared(&frames);
                }
            } else {
                self.mark(&frames, out);
            }
        }
        more
    }

    fn batched(mut out: Chunk) -> Option<(Bytes, u64)> {
        out.take().map(|bytes| {
            let len = bytes.len() as u64;
            (bytes, len)
        })
    }
}

/// The `retry:` hint and the refused clusters' `CLUSTER` events, then the
/// parts, polled in turn, and a `CLUSTER` event whenever a part's API
/// server stops or starts being reached (`Hub::upstream`).
struct MergedSse {
    preamble: Option<Bytes>,
    parts: Parts<ClusterSse>,
}

impl MergedSse {
    /// A chunk of the stream's own (not of a part's stream), counted as
    /// sent.
    fn own(&mut self, chunk: Bytes) -> Poll<Option<Bytes>> {
        self.parts.wrote(chunk.len() as u64);
        Poll::Ready(Some(chunk))
    }
}

impl ChunkSource for MergedSse {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(preamble) = self.preamble.take() {
            return self.own(preamble);
        }
        // A part that joined later sends its warnings as events naming
        // its cluster (the response's headers are gone), as on `/ws`; one
        // that could not join is said to, as one left out.
        while let Some((cluster, joined)) = self.parts.poll_joined(cx) {
            match joined {
                Ok(said) => {
                    let frames: Vec<u8> = said
                        .iter()
                        .flat_map(|w| event_about(&cluster, "WARNING", "message", &warning_text(w)))
                        .collect();
                    if !frames.is_empty() {
                        return self.own(Bytes::from(frames));
                    }
                }
                Err(status) => {
                    let frame = event_about(&cluster, "CLUSTER", "object", &status);
                    return self.own(Bytes::from(frame));
                }
            }
        }
        if let Some((cluster, status)) = self.parts.poll_reach(cx) {
            let frame = event_about(&cluster, "CLUSTER", "object", &status);
            return self.own(Bytes::from(frame));
        }
        self.parts.poll_next(cx, Framed::poll_next_chunk)
    }

    fn batch(&mut self) -> Option<&mut dyn BatchSource> {
        None
    }
}

/// A `Status` as a `CLUSTER` event's object, for tests of the framing.
#[cfg(test)]
fn refused(cluster: &str, code: u16, message: &str) -> Vec<u8> {
    let status = crate::status::status_json(code, "Forbidden", message);
    event_about(cluster, "CLUSTER", "object", &status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_marks_its_events_with_its_cluster_and_the_compound_id() {
        let ids = Arc::new(Ids::default());
        let a = ClusterSse {
            cluster: "a".into(),
            index: ids.push("a".into(), None),
            ids: ids.clone(),
            lifecycle: Arc::new(Lifecycle::default()),
        };
        let b = ClusterSse {
            cluster: "b".into(),
            index: ids.push("b".into(), Some("40".into())),
            ids: ids.clone(),
            lifecycle: Arc::new(Lifecycle::default()),
        };
        let marked = |part: &ClusterSse, frames: &str| {
            let mut out = Chunk::default();
            part.mark(frames.as_bytes(), &mut out);
            String::from_utf8(out.take().unwrap().to_vec()).unwrap()
        };
        assert_eq!(
            marked(
                &a,
                "event: ADDED\ndata: {\"type\":\"ADDED\",\"object\":{}}\n\n"
            ),
            "event: ADDED\ndata: {\"cluster\":\"a\",\"type\":\"ADDED\",\"object\":{}}\n\n"
        );
        assert_eq!(
            marked(
                &a,
                "event: MODIFIED\ndata: {\"type\":\"MODIFIED\"}\nid: 7\n\n"
            ),
            "event: MODIFIED\ndata: {\"cluster\":\"a\",\"type\":\"MODIFIED\"}\nid: a=7,b=40\n\n"
        );
        assert_eq!(
            marked(&b, "event: BOOKMARK\ndata: {}\nid: 41~0a0b0c0d\n\n"),
            "event: BOOKMARK\ndata: {\"cluster\":\"b\"}\nid: a=7,b=41~0a0b0c0d\n\n"
        );
        // A reset clears the part's position, not the others'.
        assert_eq!(
            marked(&a, "event: RESET\nid:\ndata: {}\n\n"),
            "event: RESET\nid: b=41~0a0b0c0d\ndata: {\"cluster\":\"a\"}\n\n"
        );
        let frame = String::from_utf8(refused("b", 403, "no")).unwrap();
        let data: serde_json::Value = serde_json::from_str(
            frame
                .lines()
                .nth(1)
                .unwrap()
                .strip_prefix("data: ")
                .unwrap(),
        )
        .unwrap();
        assert_eq!(data["cluster"], "b");
        assert_eq!(data["object"]["code"], 403);
    }
}
