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
//! - the stream ends cleanly after `timeoutSeconds` (at once, with an
//!   empty body, when it is negative; after a year at most:
//!   `KubeQuery::watch_timeout`), on shutdown, or when the resource's hub
//!   closes (after an ERROR).
//!
//! Once caught up, a watch is written by its hub's batch writer
//! (`transport::takeover::batch`) like an SSE stream; the position its
//! bookmarks carry follows what the writer sent it
//! ([`Framing::sent_up_to`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse};
use bytes::Bytes;
use futures::future::BoxFuture;
use prometheus_client::metrics::counter::Counter;
use tokio::time::{Instant, Sleep};

use super::params::Plan;
use crate::auth::Principal;
use crate::hub::encode::added_line;
use crate::hub::scope::Position;
use crate::hub::{
    Advance, Batchable, Filter, Hub, ResetReason, ResourceMeta, Shape, Step, Subscribe,
    Subscription, ViewSpec,
};
use crate::metrics::Transport;
use crate::status::{ApiError, status_json};
use crate::table::{Clock, partial_object};
use crate::transport::message::{Ending, Message, bookmark_object, event_json};
use crate::transport::state::AppState;
use crate::transport::stream::ChunkSource;
use crate::transport::stream::{BatchSource, Batched, Chunk, Framed, Framing, Stream};
use crate::transport::takeover;

/// What a watch serves, and to whom.
pub struct Watch<'a> {
    pub hub: Arc<Hub>,
    pub filter: Filter,
    pub shape: Shape,
    pub plan: &'a Plan,
    pub principal: &'a Principal,
    /// A watch list's consistent read (sendInitialEvents with no
    /// resourceVersion): its initial events wait for this, in the
    /// stream's own task.
    pub consistent: Option<BoxFuture<'static, ()>>,
}

/// Serves a WATCH whose query `plan` checked (`KubeQuery::plan`).
pub async fn watch(
    req: &HttpRequest,
    state: &AppState,
    watch: Watch<'_>,
) -> Result<HttpResponse, ApiError> {
    let Watch {
        hub,
        filter,
        shape,
        plan,
        principal,
        consistent,
    } = watch;
    let q = &plan.query;
    let send_initial = q.send_initial_events == Some(true);
    let rv = plan.resource_version;
    if let Some(r) = rv
        && hub.wait_synced(state.stream.sync_timeout).await
    {
        super::reached(state, &hub, r).await?;
    }
    // sendInitialEvents: a snapshot not older than `rv` (waited for above).
    let resume = if send_initial { None } else { rv };
    let access = crate::auth::Authorizer::watch_scoping(principal, &filter.namespaces);
    let request = Subscribe {
        spec: ViewSpec {
            shape: shape.clone(),
            ..ViewSpec::new(filter)
        },
        resume: resume.map(|rv| Position { rv, tag: None }),
        transport: Transport::KubeWatch,
        expires: principal.deadline(),
        lease: principal.lease().cloned(),
        access,
    };
    let sub = match consistent {
        Some(wait) => {
            Subscription::start_after(hub.clone(), request, &state.subscriptions, wait).await?
        }
        _ => Subscription::start(hub.clone(), request, &state.subscriptions).await?,
    };
    // Once synced: the informer's first list brought them.
    let hub_warnings = hub.warnings();
    let framing = WatchFraming {
        hub,
        send_initial,
        bookmarks: q.allow_bookmarks,
        position: rv.unwrap_or(0),
        shape,
        columns_sent: false,
    };
    // The API server's warnings for the resource, as kube-apiserver sends
    // them with a watch's response.
    let mut headers = vec![
        (header::CONTENT_TYPE, "application/json"),
        (header::CACHE_CONTROL, "no-cache, private"),
    ];
    headers.extend(hub_warnings.iter().map(|w| (header::WARNING, *w)));
    let body = WatchBody {
        framed: Framed::new(sub, framing, Transport::KubeWatch, principal.name()),
        // At most a year away (`MAX_WATCH_TIMEOUT`), so this never fails;
        // if it did, the watch would have no deadline rather than a panic.
        deadline: Instant::now().checked_add(plan.timeout),
        timer: None,
    };
    Ok(takeover::respond(req, &state.streams, &headers, body))
}

struct WatchBody {
    framed: Framed<WatchFraming>,
    /// `timeoutSeconds`: the watch ends cleanly then.
    deadline: Option<Instant>,
    /// Its timer, made on the runtime that polls the stream.
    timer: Option<Pin<Box<Sleep>>>,
}

/// A watch is written by its hub's batch writer once caught up, as an
/// SSE stream is, with its `timeoutSeconds` as a deadline the writer
/// follows; a table watch only once it sent its column definitions (the
/// bytes framed for every stream have none).
impl BatchSource for WatchBody {
    fn batchable(&self) -> Option<Batchable> {
        let framing = self.framed.framing();
        if matches!(framing.shape, Shape::Table(_)) && !framing.columns_sent {
            return None;
        }
        let mut batchable = self.framed.batchable()?;
        if let Some(deadline) = self.deadline {
            batchable.deadline = Some(batchable.deadline.map_or(deadline, |d| d.min(deadline)));
        }
        Some(batchable)
    }

    fn subscription(&self) -> &Subscription {
        self.framed.subscription()
    }

    fn subscription_mut(&mut self) -> &mut Subscription {
        self.framed.subscription_mut()
    }

    fn frame_step(&mut self, step: &Step) -> Option<Batched> {
        self.framed.frame_step(step)
    }

    fn took(&mut self, advance: &Advance, delivered: u64, bytes: u64) {
        self.framed.took(advance, delivered, bytes);
    }

    fn frame_tick(&mut self) -> Option<(Bytes, u64)> {
        self.framed.frame_tick()
    }

    fn wrote_batched(&mut self, bytes: u64) {
        self.framed.wrote_batched(bytes);
    }

    fn counters(&self) -> (Counter, Counter) {
        self.framed.counters()
    }
}

impl ChunkSource for WatchBody {
    fn batch(&mut self) -> Option<&mut dyn BatchSource> {
        Some(self)
    }

    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(deadline) = self.deadline {
            // The clock first: a timer fires only at the timer wheel's
            // next millisecond, and a deadline already past (a negative
            // `timeoutSeconds`, or a watch its writer handed back at its
            // deadline) ends the watch now, before anything more is sent.
            let past = deadline <= Instant::now()
                || self
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)))
                    .as_mut()
                    .poll(cx)
                    .is_ready();
            if past {
                self.framed.ending("timeoutSeconds reached");
                return Poll::Ready(None);
            }
        }
        self.framed.poll_next_chunk(cx)
    }
}

/// Messages as kube-apiserver's watch lines.
struct WatchFraming {
    hub: Arc<Hub>,
    send_initial: bool,
    bookmarks: bool,
    /// The newest resourceVersion this client holds.
    position: u64,
    /// How objects are encoded (events arrive encoded so by the view;
    /// bookmarks, this stream's own, are converted here).
    shape: Shape,
    /// Whether a table watch's column definitions were sent (with its
    /// first event; the shared frames of every event have none).
    columns_sent: bool,
}

impl Framing for WatchFraming {
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
            Message::Object(object) => self.object(object, out),
            Message::Event(delivery) => {
                self.event(&delivery.frame().ndjson(), out);
                self.position = self.position.max(delivery.rv());
            }
            Message::Bookmark {
                rv,
                initial_end: true,
            } => {
                self.position = rv;
                if self.send_initial {
                    out.put(&self.bookmark(meta, true));
                }
            }
            Message::Bookmark { rv, .. } => {
                self.position = self.position.max(rv);
                if self.bookmarks {
                    out.put(&self.bookmark(meta, false));
                }
            }
            Message::KeepAlive => {
                if self.bookmarks && self.position > 0 {
                    out.put(&self.bookmark(meta, false));
                }
            }
            Message::Reset(reason) => {
                // Kubernetes clients relist on 410; a reset is never
                // replayed as a snapshot on this face.
                let message = match reason {
                    ResetReason::Expired => format!(
                        "too old resource version: {} ({})",
                        self.position,
                        self.hub.resource_version()
                    ),
                    ResetReason::Lapped => format!(
                        "the watch fell behind the event log (too slow reader) at resource version {}",
                        self.position
                    ),
                    // Not reached: watches on this face are not narrowed.
                    ResetReason::AccessChanged => {
                        format!("access changed since resource version {}", self.position)
                    }
                };
                out.put(&error_line(&status_json(410, "Expired", &message)));
                return false;
            }
            // kube-apiserver closes its watches at shutdown with no event:
            // clients re-watch elsewhere.
            Message::End(Ending::Shutdown) => return false,
            Message::End(ending) => {
                out.put(&error_line(&ending.status(meta)));
                return false;
            }
        }
        true
    }

    fn reserve(&mut self, out: &mut Chunk, bytes: usize) {
        out.reserve(bytes);
    }

    fn sent_up_to(&mut self, rv: u64) {
        self.position = self.position.max(rv);
    }
}

impl WatchFraming {
    /// An object's event line: the shared one, except for the first of a
    /// table watch, which gets the column definitions (kube-apiserver
    /// sends them with the first event only).
    fn event(&mut self, line: &Bytes, out: &mut Chunk) {
        match &self.shape {
            Shape::Table(view) if !self.columns_sent => {
                self.columns_sent = true;
                out.put(&with_columns(line, view.printer().columns_json()));
            }
            _ => out.shared(line),
        }
    }

    /// A snapshot object's line: an ADDED event around it (the first of a
    /// table watch with the column definitions, as [`WatchFraming::event`]).
    fn object(&mut self, object: &[u8], out: &mut Chunk) {
        let line = added_line(object);
        match &self.shape {
            Shape::Table(view) if !self.columns_sent => {
                self.columns_sent = true;
                out.put(&with_columns(&line.concat(), view.printer().columns_json()));
            }
            _ => out.put_parts(&line),
        }
    }

    /// A BOOKMARK at the position this client holds, its object in the
    /// watch's shape (kube-apiserver converts bookmarks like any object:
    /// a one-row Table whose row keeps the metadata, or
    /// `PartialObjectMetadata`).
    fn bookmark(&mut self, meta: &ResourceMeta, initial_end: bool) -> Vec<u8> {
        let object = bookmark_object(meta, self.position, initial_end);
        let shaped = match &self.shape {
            Shape::Object => object,
            Shape::Table(view) => {
                let value = serde_json::from_str(&object).unwrap_or_default();
                let row = view.row(&value, object.as_bytes(), &Clock::new(SystemTime::now()));
                let headers = !std::mem::replace(&mut self.columns_sent, true);
                String::from_utf8_lossy(&view.single(&row, headers)).into_owned()
            }
            Shape::PartialMetadata(version) => {
                let value = serde_json::from_str(&object).unwrap_or_default();
                String::from_utf8_lossy(&partial_object(*version, &value)).into_owned()
            }
        };
        format!("{}\n", event_json("BOOKMARK", &shaped)).into_bytes()
    }
}

fn error_line(status: &serde_json::Value) -> Vec<u8> {
    format!("{{\"type\":\"ERROR\",\"object\":{status}}}\n").into_bytes()
}

/// `line` (an event whose object is a `Table` encoded without column
/// definitions) with `columns` in their place.
fn with_columns(line: &[u8], columns: &[u8]) -> Vec<u8> {
    const NONE: &[u8] = b"\"columnDefinitions\":null";
    let Some(at) = line.windows(NONE.len()).position(|w| w == NONE) else {
        return line.to_vec();
    };
    let mut out = Vec::with_capacity(line.len() + columns.len());
    out.extend_from_slice(&line[..at]);
    out.extend_from_slice(b"\"columnDefinitions\":");
    out.extend_from_slice(columns);
    out.extend_from_slice(&line[at + NONE.len()..]);
    out
}
