//! WATCH on the Kubernetes face: newline-delimited `{"type","object"}`.
//!
//! Mapping from a [`Subscription`]'s items, as kube-apiserver's watch
//! cache behaves:
//! - a resume the log cannot serve, or a cursor lapped mid-stream, is an
//!   in-stream `ERROR` event with a 410 Expired `Status`, then the end of
//!   the stream (HTTP status 200, as kube-apiserver sends it);
//! - a snapshot is initial `ADDED` events, followed, for
//!   `sendInitialEvents=true`, by the BOOKMARK annotated
//!   `k8s.io/initial-events-end`;
//! - with `allowWatchBookmarks`, a BOOKMARK with the current position on
//!   every keep-alive interval;
//! - the stream ends cleanly after `timeoutSeconds`, on shutdown, or when
//!   the resource's hub closes (after an ERROR).

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};
use bytes::{BufMut, Bytes, BytesMut};
use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

use super::KubeQuery;
use crate::app::AppState;
use crate::hub::{Filter, Hub, Item, ResourceMeta, Subscription, ViewSpec};
use crate::metrics::Transport;
use crate::transport::error::{ApiError, status_json};
use crate::transport::{ChunkSource, detach};

/// A watch without `timeoutSeconds` ends after this long, as
/// kube-apiserver's `--min-request-timeout` (1800 s) bounds it.
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

pub async fn watch(
    req: &HttpRequest,
    state: &AppState,
    hub: Arc<Hub>,
    filter: Filter,
    q: &KubeQuery,
    expires: Option<Instant>,
) -> Result<HttpResponse, ApiError> {
    let send_initial = q.send_initial_events == Some(true);
    if send_initial {
        if q.resource_version_match.as_deref() != Some("NotOlderThan") {
            return Err(ApiError::Status(
                422,
                "Invalid",
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".into(),
            ));
        }
        if !q.allow_bookmarks {
            return Err(ApiError::Status(
                422,
                "Invalid",
                "allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true".into(),
            ));
        }
    } else if q.resource_version_match.is_some() {
        return Err(ApiError::Status(
            422,
            "Invalid",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided".into(),
        ));
    }
    let rv = q.resource_version_number()?;
    if let Some(r) = rv
        && hub.wait_synced(state.stream.sync_timeout).await
    {
        super::reached(state, &hub, r).await?;
    }
    // sendInitialEvents: a snapshot not older than `rv` (waited for above).
    let resume = if send_initial { None } else { rv };
    let sub = Subscription::start(
        hub,
        ViewSpec::new(filter),
        resume,
        state.stream.sync_timeout,
        state.lifecycle.clone(),
        state.metrics.clone(),
        Transport::KubeWatch,
    )
    .await?;
    let timeout = q
        .timeout_seconds
        .filter(|t| *t > 0)
        .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
    let meta_name = sub.hub().name().to_string();
    let body = WatchBody {
        sent: state
            .metrics
            .events_sent(sub.hub().name(), Transport::KubeWatch),
        meta: sub.hub().meta().clone(),
        sub,
        send_initial,
        bookmarks: q.allow_bookmarks,
        position: rv.unwrap_or(0),
        deadline: Instant::now() + timeout,
        expires,
        ended: false,
    };
    let bytes_sent = state.metrics.bytes_sent(&meta_name, Transport::KubeWatch);
    Ok(detach::respond(
        req,
        &state.streams,
        &[
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-cache, private"),
        ],
        body,
        bytes_sent,
    ))
}

struct WatchBody {
    sub: Subscription,
    meta: ResourceMeta,
    sent: Counter,
    send_initial: bool,
    bookmarks: bool,
    /// The newest resourceVersion this client holds.
    position: u64,
    deadline: Instant,
    /// When the client's token expires: an ERROR (401), then the end.
    expires: Option<Instant>,
    ended: bool,
}

impl ChunkSource for WatchBody {
    fn chunk(&mut self) -> impl Future<Output = Option<Bytes>> + Send {
        self.next_chunk()
    }
}

impl WatchBody {
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if self.ended {
                return None;
            }
            let item = tokio::select! {
                item = self.sub.next() => item?,
                _ = tokio::time::sleep_until(self.deadline) => return None,
                _ = tokio::time::sleep_until(self.expires.unwrap_or(self.deadline)), if self.expires.is_some() => {
                    self.ended = true;
                    return Some(error_line(401, "Unauthorized", "token expired"));
                }
            };
            match item {
                Item::Snapshot(objects) => {
                    let mut buf = BytesMut::with_capacity(objects.iter().map(|f| f.len()).sum());
                    for obj in &objects {
                        buf.put_slice(&obj.ndjson());
                    }
                    self.sent.inc_by(objects.len() as u64);
                    return Some(buf.freeze());
                }
                Item::SnapshotEnd { rv } => {
                    self.position = rv;
                    if self.send_initial {
                        return Some(self.bookmark(true));
                    }
                }
                Item::Events(events) => {
                    let mut buf =
                        BytesMut::with_capacity(events.iter().map(|e| e.frame().len()).sum());
                    for ev in &events {
                        buf.put_slice(&ev.frame().ndjson());
                        self.position = self.position.max(ev.rv());
                    }
                    self.sent.inc_by(events.len() as u64);
                    return Some(buf.freeze());
                }
                Item::Progress { rv } => {
                    self.position = self.position.max(rv);
                    if self.bookmarks {
                        return Some(self.bookmark(false));
                    }
                }
                Item::KeepAlive => {
                    if self.bookmarks && self.position > 0 {
                        return Some(self.bookmark(false));
                    }
                }
                Item::Reset(reason) => {
                    // Kubernetes clients relist on 410; a reset is never
                    // replayed as a snapshot on this face.
                    self.ended = true;
                    let message = match reason {
                        crate::hub::ResetReason::Expired => {
                            format!(
                                "too old resource version: {} ({})",
                                self.position,
                                self.sub.hub().resource_version()
                            )
                        }
                        crate::hub::ResetReason::Lapped => format!(
                            "the watch fell behind the event log (too slow reader) at resource version {}",
                            self.position
                        ),
                    };
                    return Some(error_line(410, "Expired", &message));
                }
                Item::Closed(reason) => {
                    self.ended = true;
                    return Some(error_line(
                        404,
                        "NotFound",
                        &format!("{} is no longer served: {reason}", self.meta.name),
                    ));
                }
                Item::Shutdown => return None,
            }
        }
    }

    fn bookmark(&self, initial_end: bool) -> Bytes {
        let annotations = if initial_end {
            r#","annotations":{"k8s.io/initial-events-end":"true"}"#
        } else {
            ""
        };
        Bytes::from(format!(
            "{{\"type\":\"BOOKMARK\",\"object\":{{\"kind\":{},\"apiVersion\":{},\"metadata\":{{\"resourceVersion\":\"{}\"{annotations}}}}}}}\n",
            serde_json::Value::from(self.meta.kind.as_str()),
            serde_json::Value::from(self.meta.api_version.as_str()),
            self.position,
        ))
    }
}

fn error_line(code: u16, reason: &str, message: &str) -> Bytes {
    Bytes::from(format!(
        "{{\"type\":\"ERROR\",\"object\":{}}}\n",
        status_json(code, reason, message)
    ))
}
