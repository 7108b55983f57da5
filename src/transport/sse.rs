//! Server-Sent Events: `GET /stream/{resource}`.
//!
//! Frames only: every event and snapshot object arrives from the hub
//! already encoded as an SSE frame ([`crate::hub::Frame`]), shared by all
//! subscribers; this module writes them out back to back, and builds the
//! few per-subscriber frames (snapshot end, progress bookmark, reset,
//! shutdown). The protocol is specified in `proto/PROTOCOL.md`.
//!
//! The stream is hand-framed rather than built on `actix-web-lab`'s `Sse`
//! because that type re-encodes each event per subscriber, which is the
//! per-delivery cost the hub's encode-once design removes.

use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};
use bytes::{BufMut, Bytes, BytesMut};
use prometheus_client::metrics::counter::Counter;
use serde_json::json;

use super::error::{ApiError, status_json};
use super::{ChunkSource, detach, parse_stream_query, subscribe};
use crate::app::AppState;
use crate::auth::{self, Principal};
use crate::hub::{Item, ResetReason, ResourceMeta, Subscription};
use crate::metrics::Transport;

/// `GET /stream/{resource}`: a snapshot, its end marker, then every change.
pub async fn stream(
    req: HttpRequest,
    resource: web::Path<String>,
    state: web::Data<AppState>,
    principal: Principal,
) -> Result<HttpResponse, ApiError> {
    let mut params = parse_stream_query(&auth::strip_token(req.query_string()))?;
    if let Some(id) = req.headers().get("Last-Event-ID") {
        // The header wins over `?resourceVersion=`: a browser reconnecting
        // sends the original URL with its newest id in the header.
        if let Some(rv) = parse_last_event_id(id)? {
            params.resume = Some(rv);
        }
    }
    let sub = subscribe(&state, &principal, &resource, &params, Transport::Sse).await?;
    let sent = state.metrics.events_sent(sub.hub().name(), Transport::Sse);
    let meta = sub.hub().meta().clone();
    let preamble = Bytes::from(format!("retry: {}\n\n", state.stream.retry.as_millis()));
    let meta_name = sub.hub().name().to_string();
    let body = SseBody {
        sub,
        meta,
        sent,
        preamble: Some(preamble),
        expires: principal.deadline(),
        ended: false,
    };
    let bytes_sent = state.metrics.bytes_sent(&meta_name, Transport::Sse);
    Ok(detach::respond(
        &req,
        &state.streams,
        &[
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            // Behind nginx (an ingress): pass each event on at once.
            (HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        body,
        bytes_sent,
    ))
}

fn parse_last_event_id(value: &HeaderValue) -> Result<Option<u64>, ApiError> {
    let text = value
        .to_str()
        .map_err(|_| ApiError::BadRequest("Last-Event-ID is not valid text".into()))?
        .trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<u64>().map(Some).map_err(|_| {
        ApiError::BadRequest(format!(
            "Last-Event-ID {text:?} is not a resourceVersion (a decimal number)"
        ))
    })
}

struct SseBody {
    sub: Subscription,
    meta: ResourceMeta,
    sent: Counter,
    preamble: Option<Bytes>,
    /// When the client's credentials expire: the stream ends then, after
    /// an ERROR (401).
    expires: Option<tokio::time::Instant>,
    ended: bool,
}

impl ChunkSource for SseBody {
    fn chunk(&mut self) -> impl Future<Output = Option<Bytes>> + Send {
        self.next_chunk()
    }
}

impl SseBody {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(preamble) = self.preamble.take() {
            return Some(preamble);
        }
        if self.ended {
            return None;
        }
        let item = match self.expires {
            None => self.sub.next().await?,
            Some(at) => tokio::select! {
                item = self.sub.next() => item?,
                _ = tokio::time::sleep_until(at) => {
                    self.ended = true;
                    return Some(frame("ERROR", None, &expired_status().to_string(), false));
                }
            },
        };
        Some(match item {
            Item::Snapshot(objects) => {
                let mut buf = BytesMut::with_capacity(objects.iter().map(|f| f.len()).sum());
                for obj in &objects {
                    buf.put_slice(obj.sse());
                }
                self.sent.inc_by(objects.len() as u64);
                buf.freeze()
            }
            Item::Events(events) => {
                if let [single] = events.as_slice() {
                    self.sent.inc();
                    return Some(single.frame().sse().clone());
                }
                let mut buf = BytesMut::with_capacity(events.iter().map(|e| e.frame().len()).sum());
                for ev in &events {
                    buf.put_slice(ev.frame().sse());
                }
                self.sent.inc_by(events.len() as u64);
                buf.freeze()
            }
            Item::SnapshotEnd { rv } => bookmark(&self.meta, rv, true),
            Item::Progress { rv } => bookmark(&self.meta, rv, false),
            Item::KeepAlive => Bytes::from_static(b": keep-alive\n\n"),
            Item::Reset(reason) => {
                // `id:` with no value clears the client's Last-Event-ID, so a
                // reconnect during the snapshot asks for a fresh one.
                frame("RESET", None, &reset_status(reason).to_string(), true)
            }
            Item::Closed(reason) => frame(
                "ERROR",
                None,
                &closed_status(&self.meta, &reason).to_string(),
                false,
            ),
            Item::Shutdown => frame("ERROR", None, &shutdown_status().to_string(), false),
        })
    }
}

/// The `object` of a RESET message.
pub(super) fn reset_status(reason: ResetReason) -> serde_json::Value {
    status_json(
        410,
        reason.as_str(),
        &format!(
            "{}: your position is gone; a fresh snapshot follows and replaces your state",
            reason.as_str()
        ),
    )
}

/// The `object` of the ERROR that ends a stream whose hub was closed.
pub(super) fn closed_status(meta: &ResourceMeta, reason: &str) -> serde_json::Value {
    status_json(
        404,
        "NotFound",
        &format!("{} is no longer served: {reason}", meta.name),
    )
}

/// The `object` of the ERROR that ends a stream whose token expired.
pub(super) fn expired_status() -> serde_json::Value {
    status_json(
        401,
        "Unauthorized",
        "token expired; reconnect with a fresh token (Last-Event-ID resumes)",
    )
}

/// The `object` of the ERROR that ends every stream at shutdown.
pub(super) fn shutdown_status() -> serde_json::Value {
    status_json(
        503,
        "ServiceUnavailable",
        "kubefan is shutting down; reconnect",
    )
}

/// A BOOKMARK carrying a resume position; `initial_end` marks the end of
/// a snapshot, as Kubernetes marks the end of `sendInitialEvents`.
fn bookmark(meta: &ResourceMeta, rv: u64, initial_end: bool) -> Bytes {
    frame(
        "BOOKMARK",
        Some(rv),
        &bookmark_object(meta, rv, initial_end),
        false,
    )
}

/// The `object` of a BOOKMARK.
pub(super) fn bookmark_object(meta: &ResourceMeta, rv: u64, initial_end: bool) -> String {
    let annotations = if initial_end {
        r#","annotations":{"k8s.io/initial-events-end":"true"}"#
    } else {
        ""
    };
    format!(
        r#"{{"kind":{},"apiVersion":{},"metadata":{{"resourceVersion":"{rv}"{annotations}}}}}"#,
        json!(meta.kind),
        json!(meta.api_version),
    )
}

/// An SSE frame `event: NAME` whose data is `{"type":NAME,"object":OBJECT}`,
/// in the key order Kubernetes uses.
fn frame(name: &str, id: Option<u64>, object: &str, clear_id: bool) -> Bytes {
    let mut out = format!("event: {name}\n");
    if let Some(id) = id {
        out.push_str(&format!("id: {id}\n"));
    } else if clear_id {
        out.push_str("id:\n");
    }
    out.push_str(&format!(
        "data: {{\"type\":\"{name}\",\"object\":{object}}}\n\n"
    ));
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_event_id_must_be_a_resource_version() {
        assert_eq!(
            parse_last_event_id(&HeaderValue::from_static("42")).unwrap(),
            Some(42)
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
        let meta = ResourceMeta {
            name: "pods".into(),
            api_version: "v1".into(),
            kind: "Pod".into(),
        };
        let text = String::from_utf8(bookmark(&meta, 9, true).to_vec()).unwrap();
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
