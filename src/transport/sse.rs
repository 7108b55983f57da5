//! Server-Sent Events: `GET /stream/{resource}`.
//!
//! Frames only: every event and snapshot object arrives from the hub
//! already encoded as an SSE frame ([`crate::hub::Frame`]), shared by all
//! subscribers; [`SseFraming`] writes them out back to back, and builds the
//! few per-subscriber frames (snapshot end, progress bookmark, reset,
//! the ERROR that ends a stream). The protocol is specified in
//! `proto/PROTOCOL.md`.
//!
//! The stream is hand-framed rather than built on `actix-web-lab`'s `Sse`
//! because that type re-encodes each event per subscriber, which is the
//! per-delivery cost the hub's encode-once design removes.

use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::Bytes;

use super::message::{Message, bookmark_object, event_json, reset_status};
use super::stream::ChunkSource;
use super::stream::{BatchSource, Chunk, Framed, Framing, Stream};
use super::{access_log, parse_position, parse_stream_query, subscribe, takeover};
use crate::auth::{self, Principal, Verb};
use crate::cluster::ClusterOf;
use crate::hub::encode::added_sse;
use crate::hub::scope::Position;
use crate::metrics::Transport;
use crate::status::ApiError;
use crate::transport::state::AppState;

/// `GET /stream/{resource}`: a snapshot, its end marker, then every change.
pub async fn stream(
    req: HttpRequest,
    resource: web::Path<String>,
    state: web::Data<AppState>,
    principal: Principal,
) -> Result<HttpResponse, ApiError> {
    let query = auth::strip_token(req.query_string());
    if let Some((clusters, pairs)) = merged_query(&query)? {
        return merged(&req, &state, &principal, &resource, &clusters, pairs).await;
    }
    let cluster = ClusterOf::of(&req)?;
    let mut params = parse_stream_query(&query)?;
    if let Some(id) = req.headers().get("Last-Event-ID") {
        // The header wins over `?resourceVersion=`: a browser reconnecting
        // sends the original URL with its newest id in the header.
        if let Some(position) = parse_last_event_id(id)? {
            params.resume = Some(position);
        }
    }
    let sub = subscribe(
        &state,
        &cluster,
        &principal,
        &resource,
        &params,
        Transport::Sse,
    )
    .await?;
    access_log::note(&req, Verb::Watch, sub.hub().name(), &sub.namespaces());
    let warnings = sub.hub().warnings();
    let body = SseBody {
        preamble: Some(Bytes::from(format!(
            "retry: {}\n\n",
            retry_hint(state.stream.retry)
        ))),
        framed: Framed::new(sub, SseFraming, Transport::Sse, principal.name()),
    };
    let mut headers = vec![
        (header::CONTENT_TYPE, "text/event-stream"),
        (header::CACHE_CONTROL, "no-cache"),
        // Behind nginx (an ingress): pass each event on at once.
        (HeaderName::from_static("x-accel-buffering"), "no"),
    ];
    // The API server's warnings for the resource (a deprecated API's).
    headers.extend(warnings.iter().map(|w| (header::WARNING, *w)));
    Ok(takeover::respond(&req, &state.streams, &headers, body))
}

/// The query of a stream across clusters: its `clusters=` value and the
/// other pairs; `None` when it names no `clusters`.
fn merged_query(query: &str) -> Result<Option<(String, Pairs)>, ApiError> {
    let pairs = web::Query::<Pairs>::from_query(query)
        .map_err(|e| ApiError::BadRequest(format!("malformed query string: {e}")))?
        .into_inner();
    let (clusters, rest): (Vec<_>, Vec<_>) = pairs.into_iter().partition(|(k, _)| k == "clusters");
    Ok(clusters
        .into_iter()
        .next_back()
        .map(|(_, value)| (value, rest)))
}

/// A query's key/value pairs.
type Pairs = Vec<(String, String)>;

/// `GET /stream/{resource}?clusters=...` (`transport::merged`); the
/// position to resume from is the compound id, from `Last-Event-ID` or
/// `resourceVersion`.
async fn merged(
    req: &HttpRequest,
    state: &web::Data<AppState>,
    principal: &Principal,
    resource: &str,
    clusters: &str,
    pairs: Pairs,
) -> Result<HttpResponse, ApiError> {
    use crate::transport::merged;
    if actix_web::HttpMessage::extensions(req).contains::<crate::cluster::Prefixed>() {
        return Err(ApiError::BadRequest(
            "clusters= merges clusters at the root paths (/stream/...), not under /clusters/NAME/"
                .into(),
        ));
    }
    let chosen = merged::named(&state.clusters, clusters)?;
    let (positions, pairs): (Vec<_>, Vec<_>) =
        pairs.into_iter().partition(|(k, _)| k == "resourceVersion");
    let params = crate::transport::parse_stream_params(pairs, "query parameter")?;
    let names: Vec<&str> = chosen.0.iter().map(|c| c.name().unwrap_or("")).collect();
    let header = req
        .headers()
        .get("Last-Event-ID")
        .map(|v| {
            v.to_str()
                .map_err(|_| ApiError::BadRequest("Last-Event-ID is not valid text".into()))
        })
        .transpose()?
        .filter(|v| !v.trim().is_empty());
    // The header wins, as on a single-cluster stream.
    let resume = match (header, positions.last()) {
        (Some(id), _) => merged::parse_compound("Last-Event-ID", id, &names)?,
        (None, Some((_, rv))) => merged::parse_compound("resourceVersion", rv, &names)?,
        (None, None) => vec![None; names.len()],
    };
    let preamble = Bytes::from(format!("retry: {}\n\n", retry_hint(state.stream.retry)));
    let plan = merged::Plan {
        asked: merged::Asked {
            resource,
            params,
            chosen,
            resume,
        },
        preamble,
    };
    merged::stream(req, state, principal, plan).await
}

pub(crate) fn parse_last_event_id(value: &HeaderValue) -> Result<Option<Position>, ApiError> {
    let text = value
        .to_str()
        .map_err(|_| ApiError::BadRequest("Last-Event-ID is not valid text".into()))?
        .trim();
    if text.is_empty() {
        return Ok(None);
    }
    parse_position("Last-Event-ID", text)
}

/// One stream's `retry:` hint, in milliseconds: `--retry-ms` plus a
/// random share of up to as much again. Clients dropped together (kubefan
/// restarting, a replica going away) then come back spread over that
/// window instead of in the same instant.
fn retry_hint(base: Duration) -> u64 {
    let base = u64::try_from(base.as_millis()).unwrap_or(u64::MAX / 2);
    base + getrandom::u64().unwrap_or(0) % (base + 1)
}

/// The `retry:` hint, then the framed stream.
struct SseBody {
    preamble: Option<Bytes>,
    framed: Framed<SseFraming>,
}

impl ChunkSource for SseBody {
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(preamble) = self.preamble.take() {
            self.framed.wrote(preamble.len() as u64);
            return Poll::Ready(Some(preamble));
        }
        self.framed.poll_next_chunk(cx)
    }

    fn batch(&mut self) -> Option<&mut dyn BatchSource> {
        match self.preamble {
            None => Some(&mut self.framed),
            Some(_) => None,
        }
    }
}

/// Messages as SSE frames.
pub struct SseFraming;

impl Framing for SseFraming {
    type Out = Chunk;

    fn batched(mut out: Chunk) -> Option<(Bytes, u64)> {
        out.take().map(|bytes| {
            let len = bytes.len() as u64;
            (bytes, len)
        })
    }

    fn frame(&mut self, msg: Message<'_>, stream: &Stream<'_>, out: &mut Chunk) -> bool {
        let meta = stream.meta;
        match msg {
            Message::Object(object) => out.put_parts(&added_sse(object)),
            Message::Event(delivery) => match stream.tag {
                Some(_) if delivery.has_id() => {
                    // The shared frame up to its blank line, then the tagged
                    // id: the last `id:` field of an event is the one kept.
                    let sse = delivery.frame().sse();
                    out.shared(&sse.slice(..sse.len() - 1));
                    out.put(format!("id: {}\n\n", stream.id(delivery.rv())).as_bytes());
                }
                _ => out.shared(delivery.frame().sse()),
            },
            Message::Bookmark { rv, initial_end } => out.put(&frame(
                "BOOKMARK",
                Some(&stream.id(rv)),
                &bookmark_object(meta, rv, initial_end),
                false,
            )),
            // The same bytes for every stream, and no copy of them.
            Message::KeepAlive => out.shared(&Bytes::from_static(b": keep-alive\n\n")),
            // `id:` with no value clears the client's Last-Event-ID, so a
            // reconnect during the snapshot asks for a fresh one.
            Message::Reset(reason) => out.put(&frame(
                "RESET",
                None,
                &reset_status(reason).to_string(),
                true,
            )),
            Message::End(ending) => {
                out.put(&frame(
                    "ERROR",
                    None,
                    &ending.status(meta).to_string(),
                    false,
                ));
                return false;
            }
        }
        true
    }

    fn reserve(&mut self, out: &mut Chunk, bytes: usize) {
        out.reserve(bytes);
    }
}

/// An SSE frame `event: NAME` whose data is `{"type":NAME,"object":OBJECT}`.
fn frame(name: &str, id: Option<&str>, object: &str, clear_id: bool) -> Vec<u8> {
    let mut out = format!("event: {name}\n");
    if let Some(id) = id {
        out.push_str(&format!("id: {id}\n"));
    } else if clear_id {
        out.push_str("id:\n");
    }
    out.push_str("data: ");
    out.push_str(&event_json(name, object));
    out.push_str("\n\n");
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    #[test]
    fn retry_hints_spread_over_one_to_two_base_delays() {
        let hints: std::collections::BTreeSet<u64> = (0..200)
            .map(|_| super::retry_hint(Duration::from_millis(2000)))
            .collect();
        assert!(hints.iter().all(|h| (2000..=4000).contains(h)), "{hints:?}");
        assert!(hints.len() > 100, "spread, not one value: {}", hints.len());
    }

    use super::*;
    use crate::hub::ResourceMeta;

    #[test]
    fn last_event_id_must_be_a_resource_version() {
        assert_eq!(
            parse_last_event_id(&HeaderValue::from_static("42")).unwrap(),
            Some(Position { rv: 42, tag: None })
        );
        assert_eq!(
            parse_last_event_id(&HeaderValue::from_static("")).unwrap(),
            None
        );
        assert!(parse_last_event_id(&HeaderValue::from_static("abc")).is_err());
        assert!(parse_last_event_id(&HeaderValue::from_static("-1")).is_err());
    }

    #[test]
    fn snapshot_end_is_an_annotated_bookmark_with_an_id() {
        let meta = ResourceMeta::new("pods", "v1", "Pod");
        let mut chunk = Chunk::default();
        let bookmark = Message::Bookmark {
            rv: 9,
            initial_end: true,
        };
        let stream = Stream {
            meta: &meta,
            tag: None,
        };
        assert!(SseFraming.frame(bookmark, &stream, &mut chunk));
        let text = String::from_utf8(chunk.take().unwrap().to_vec()).unwrap();
        assert!(text.starts_with("event: BOOKMARK\nid: 9\ndata: "), "{text}");
        assert!(text.ends_with("\n\n"));
        let data: serde_json::Value =
            serde_json::from_str(text.lines().nth(2).unwrap().strip_prefix("data: ").unwrap())
                .unwrap();
        assert_eq!(
            data["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
        assert_eq!(data["object"]["metadata"]["resourceVersion"], "9");
    }
}
