//! One SSE stream across clusters: `GET /stream/{resource}?clusters=a,b`
//! (or `*`, every cluster that accepts the caller).
//!
//! A merged stream is one subscription per cluster, each on that
//! cluster's hub and view and authorized by that cluster as a
//! single-cluster stream would be ([`super::subscribe`]), framed as SSE
//! by [`SseFraming`] and then marked with its cluster: every message's
//! JSON gains `"cluster":"NAME"` as its first field, and every id becomes
//! the stream's compound id, `a=123,b=456~TAG`: each part's last
//! position, in the order the clusters were named. A resume
//! (`Last-Event-ID`) splits it and resumes each part by the usual rules,
//! so a part whose position is gone gets its own `RESET` and snapshot and
//! the others go on. Parts are polled in turn by the stream's one task,
//! so ids always describe what the client has received.
//!
//! A part that ends (its `ERROR`, which names the cluster) leaves the
//! others streaming; the stream ends when every part has. Merged streams
//! are written by their own task, not parked with a hub's batch writer
//! (`takeover::batch`): their frames are the shared ones with the
//! cluster put in, a copy per delivery. Making them batch is the
//! outbox-based design in ARCHITECTURE.md ("Several clusters").

use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use actix_web::http::header::{self, HeaderName};
use actix_web::{HttpRequest, HttpResponse};
use bytes::Bytes;

use super::message::Message;
use super::sse::SseFraming;
use super::stream::{BatchSource, Chunk, Framed, Framing, Stream};
use super::{ChunkSource, StreamParams, access_log, parse_position, subscribe, takeover};
use crate::auth::{Principal, Verb};
use crate::cluster::{Cluster, Clusters};
use crate::hub::scope::Position;
use crate::metrics::Transport;
use crate::status::ApiError;
use crate::transport::state::AppState;

/// The clusters a `clusters=` value names: every one for `*`, otherwise
/// each named once, in order (404 naming one that is not served).
pub fn named(clusters: &Clusters, value: &str) -> Result<(Vec<Arc<Cluster>>, bool), ApiError> {
    if !clusters.named() {
        return Err(ApiError::BadRequest(
            "clusters= needs a gateway serving several clusters (--cluster)".into(),
        ));
    }
    let value = value.trim();
    if value == "*" {
        return Ok((clusters.all().to_vec(), true));
    }
    let mut chosen: Vec<Arc<Cluster>> = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let cluster = clusters.get(name).ok_or_else(|| {
            ApiError::NotFound(format!(
                "no cluster {name:?} is served here (GET /clusters lists them)"
            ))
        })?;
        if !chosen.iter().any(|c| Arc::ptr_eq(c, cluster)) {
            chosen.push(cluster.clone());
        }
    }
    if chosen.is_empty() {
        return Err(ApiError::BadRequest(
            "clusters= names no cluster (a,b or *)".into(),
        ));
    }
    Ok((chosen, false))
}

/// A compound id (`a=123,b=456~TAG`) as each named cluster's position:
/// 400 for one that does not parse or names a cluster not asked for.
pub fn parse_compound(
    what: &str,
    value: &str,
    clusters: &[&str],
) -> Result<Vec<Option<Position>>, ApiError> {
    let mut positions = vec![None; clusters.len()];
    let value = value.trim();
    if value.is_empty() {
        return Ok(positions);
    }
    for part in value.split(',') {
        let Some((name, id)) = part.split_once('=') else {
            return Err(ApiError::BadRequest(format!(
                "{what} {value:?} is not a merged stream's id (NAME=ID,...)"
            )));
        };
        let Some(i) = clusters.iter().position(|c| *c == name.trim()) else {
            return Err(ApiError::BadRequest(format!(
                "{what} {value:?} names cluster {name:?}, which this stream does not ask for"
            )));
        };
        if positions[i].is_some() {
            return Err(ApiError::BadRequest(format!(
                "{what} {value:?} names cluster {name:?} twice"
            )));
        }
        positions[i] = parse_position(what, id.trim())?;
    }
    Ok(positions)
}

/// `err`, saying which cluster answered it.
fn in_cluster(err: ApiError, name: &str) -> ApiError {
    let say = |msg: String| format!("cluster {name:?}: {msg}");
    match err {
        ApiError::BadRequest(m) => ApiError::BadRequest(say(m)),
        ApiError::NotFound(m) => ApiError::NotFound(say(m)),
        ApiError::Forbidden(m) => ApiError::Forbidden(say(m)),
        ApiError::Unavailable(m) => ApiError::Unavailable(say(m)),
        ApiError::Unauthorized(m) => ApiError::Unauthorized(say(m)),
        ApiError::TooManyRequests(m, s) => ApiError::TooManyRequests(say(m), s),
        ApiError::Status(code, reason, m) => ApiError::Status(code, reason, say(m)),
    }
}

/// What a merged stream is opened with.
pub struct Plan<'a> {
    pub resource: &'a str,
    /// Every part's options (its resume position aside).
    pub params: StreamParams,
    /// The clusters, in the order named, and whether they were asked as
    /// `*` (a cluster that refuses is then left out and announced instead
    /// of failing the request).
    pub chosen: (Vec<Arc<Cluster>>, bool),
    /// Each cluster's position to resume from.
    pub resume: Vec<Option<Position>>,
    /// What the stream starts with (the `retry:` hint).
    pub preamble: Bytes,
}

/// Opens the merged stream `plan` describes.
pub async fn stream(
    req: &HttpRequest,
    state: &AppState,
    principal: &Principal,
    plan: Plan<'_>,
) -> Result<HttpResponse, ApiError> {
    let Plan {
        resource,
        params,
        chosen: (chosen, every),
        resume,
        preamble,
    } = plan;
    // Under `--auth kubernetes` each cluster reviews the token itself: an
    // identity is its cluster's own.
    let token =
        crate::auth::token_from(req.headers(), req.query_string(), state.auth.cookie_name());
    let token = token.as_deref();
    let starts = chosen.iter().zip(&resume).map(|(cluster, resume)| {
        let mut params = params.clone();
        params.resume = resume.clone();
        async move {
            let there = state
                .auth
                .principal_in(principal, token, cluster.authorizer())
                .await?;
            subscribe(state, cluster, &there, resource, &params, Transport::Sse).await
        }
    });
    let started = futures::future::join_all(starts).await;
    let ids = Arc::new(Ids {
        parts: Mutex::new(Vec::with_capacity(chosen.len())),
    });
    let mut parts = Vec::new();
    let mut refused = Vec::new();
    let mut namespaces = Vec::new();
    let mut warnings = Vec::new();
    for ((cluster, resume), started) in chosen.iter().zip(resume).zip(started) {
        let name: Arc<str> = Arc::from(cluster.name().unwrap_or(""));
        match started {
            Ok(sub) => {
                namespaces.extend(sub.namespaces());
                warnings.extend(sub.hub().warnings().iter().copied());
                let index = ids.push(name.clone(), resume.map(|p| p.to_string()));
                let framing = ClusterSse {
                    cluster: name,
                    index,
                    ids: ids.clone(),
                };
                parts.push(Some(Framed::new(
                    sub,
                    framing,
                    Transport::Sse,
                    principal.name(),
                )));
            }
            Err(err) if every => {
                let status = err.status();
                refused.push(cluster_frame(&name, "CLUSTER", &status.to_string()));
            }
            Err(err) => return Err(in_cluster(err, &name)),
        }
    }
    if parts.is_empty() {
        return Err(ApiError::Forbidden(format!(
            "no cluster serves {resource} to {}",
            principal.name()
        )));
    }
    namespaces.sort();
    namespaces.dedup();
    access_log::note(req, Verb::Watch, resource, &namespaces);
    warnings.sort_unstable();
    warnings.dedup();
    let mut head = preamble.to_vec();
    for frame in refused {
        head.extend_from_slice(&frame);
    }
    let reach = parts.iter().map(|_| Reach::default()).collect();
    let body = MergedSse {
        preamble: Some(Bytes::from(head)),
        parts,
        reach,
        next: 0,
    };
    let mut headers = vec![
        (header::CONTENT_TYPE, "text/event-stream"),
        (header::CACHE_CONTROL, "no-cache"),
        (HeaderName::from_static("x-accel-buffering"), "no"),
    ];
    headers.extend(warnings.iter().map(|w| (header::WARNING, *w)));
    Ok(takeover::respond(req, &state.streams, &headers, body))
}

/// An SSE event `name` about `cluster`, with `object` (JSON).
fn cluster_frame(cluster: &str, name: &str, object: &str) -> Vec<u8> {
    format!(
        "event: {name}\ndata: {{\"cluster\":{},\"type\":\"{name}\",\"object\":{object}}}\n\n",
        serde_json::Value::from(cluster)
    )
    .into_bytes()
}

/// The positions of a merged stream's parts, in the order named; what
/// every part's next id is made of.
struct Ids {
    parts: Mutex<Vec<(Arc<str>, Option<String>)>>,
}

impl Ids {
    fn push(&self, cluster: Arc<str>, position: Option<String>) -> usize {
        let mut parts = self.parts.lock().unwrap_or_else(PoisonError::into_inner);
        parts.push((cluster, position));
        parts.len() - 1
    }

    /// Part `index` is now at `position` (`None`: it has none, as during
    /// a snapshot after a reset): the stream's compound id.
    fn set(&self, index: usize, position: Option<&str>) -> String {
        let mut parts = self.parts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(part) = parts.get_mut(index) {
            part.1 = position.map(str::to_string);
        }
        let mut id = String::new();
        for (cluster, position) in parts.iter() {
            if let Some(position) = position {
                if !id.is_empty() {
                    id.push(',');
                }
                id.push_str(cluster);
                id.push('=');
                id.push_str(position);
            }
        }
        id
    }
}

/// One part's framing: SSE as a single-cluster stream frames it, then
/// marked with the cluster and given the compound id.
struct ClusterSse {
    cluster: Arc<str>,
    index: usize,
    ids: Arc<Ids>,
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
                // One comment per tick for the stream, not one per part.
                if self.index == 0 {
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
    /// `None` once a part has ended.
    parts: Vec<Option<Framed<ClusterSse>>>,
    /// What each part's stream was told of its API server.
    reach: Vec<Reach>,
    /// The part polled first next time, so that a busy cluster cannot
    /// starve the others.
    next: usize,
}

/// What a merged stream said of one part's API server.
#[derive(Default)]
struct Reach {
    /// The `Hub::upstream_changes` epoch last looked at (`None`: never).
    seen: Option<u64>,
    /// Whether the stream was told it is unreachable.
    down: bool,
    /// The part's task, waiting for the epoch to move.
    wait: crate::epoch::Registration,
}

impl MergedSse {
    /// A `CLUSTER` event for the first part whose API server was lost or
    /// found since the stream last said (registering for the next change
    /// of each).
    fn poll_reach(&mut self, cx: &mut Context<'_>) -> Option<Bytes> {
        for (part, reach) in self.parts.iter().zip(&mut self.reach) {
            let Some(part) = part else { continue };
            let hub = part.subscription().hub();
            let changes = hub.upstream_changes();
            loop {
                let now = changes.current();
                if reach.seen != Some(now) {
                    reach.seen = Some(now);
                    let down = hub.upstream();
                    if down.is_some() != reach.down {
                        reach.down = down.is_some();
                        let cluster = &part.framing().cluster;
                        let status = match down {
                            Some(why) => crate::status::status_json(
                                503,
                                "ServiceUnavailable",
                                &format!(
                                    "cluster {cluster:?}: {why}; its part resumes when it is back"
                                ),
                            ),
                            None => serde_json::json!({"kind": "Status", "apiVersion": "v1",
                                "metadata": {}, "status": "Success", "code": 200,
                                "message": format!("cluster {cluster:?}: the API server is reached again")}),
                        };
                        return Some(Bytes::from(cluster_frame(
                            cluster,
                            "CLUSTER",
                            &status.to_string(),
                        )));
                    }
                }
                if changes.poll_moved(now, &mut reach.wait, cx).is_pending() {
                    break;
                }
            }
        }
        None
    }
}

impl Drop for MergedSse {
    fn drop(&mut self) {
        for (part, reach) in self.parts.iter().zip(&mut self.reach) {
            if let Some(part) = part {
                part.subscription()
                    .hub()
                    .upstream_changes()
                    .deregister(&mut reach.wait);
            }
        }
    }
}

impl ChunkSource for MergedSse {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(preamble) = self.preamble.take() {
            return Poll::Ready(Some(preamble));
        }
        if let Some(said) = self.poll_reach(cx) {
            return Poll::Ready(Some(said));
        }
        let n = self.parts.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let Some(part) = &mut self.parts[i] else {
                continue;
            };
            match part.poll_next_chunk(cx) {
                Poll::Ready(Some(chunk)) => {
                    self.next = (i + 1) % n;
                    return Poll::Ready(Some(chunk));
                }
                Poll::Ready(None) => {
                    if let Some(part) = self.parts[i].take() {
                        let hub = part.subscription().hub();
                        hub.upstream_changes().deregister(&mut self.reach[i].wait);
                    }
                }
                Poll::Pending => {}
            }
        }
        if self.parts.iter().all(Option::is_none) {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }

    fn batch(&mut self) -> Option<&mut dyn BatchSource> {
        None
    }
}

/// A `Status` as a `CLUSTER` event's object, for tests of the framing.
#[cfg(test)]
fn refused(cluster: &str, code: u16, message: &str) -> Vec<u8> {
    let status = crate::status::status_json(code, "Forbidden", message);
    cluster_frame(cluster, "CLUSTER", &status.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_marks_its_events_with_its_cluster_and_the_compound_id() {
        let ids = Arc::new(Ids {
            parts: Mutex::new(Vec::new()),
        });
        let a = ClusterSse {
            cluster: "a".into(),
            index: ids.push("a".into(), None),
            ids: ids.clone(),
        };
        let b = ClusterSse {
            cluster: "b".into(),
            index: ids.push("b".into(), Some("40".into())),
            ids: ids.clone(),
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

    #[test]
    fn a_compound_id_names_only_the_clusters_asked_for_once_each() {
        let names = ["a", "b", "c"];
        let got = parse_compound("Last-Event-ID", "b=41~0a0b0c0d, a=7", &names).unwrap();
        let got: Vec<Option<String>> = got
            .iter()
            .map(|p| p.as_ref().map(|p| p.to_string()))
            .collect();
        assert_eq!(got, [Some("7".into()), Some("41~0a0b0c0d".into()), None]);
        assert_eq!(
            parse_compound("Last-Event-ID", "", &names).unwrap(),
            [None, None, None]
        );
        for (bad, why) in [
            ("7", "not a merged stream's id"),
            ("a=7,d=1", "which this stream does not ask for"),
            ("a=7,a=8", "twice"),
            ("a=seven", "not a resourceVersion"),
        ] {
            let err = parse_compound("Last-Event-ID", bad, &names).unwrap_err();
            assert!(err.to_string().contains(why), "{bad}: {err}");
        }
    }
}
