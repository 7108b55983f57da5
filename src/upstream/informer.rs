//! One informer: the list-then-watch loop that feeds one hub.
//!
//! The state comes from a list (`upstream::list`: which one, and why):
//! by default the streaming list (`upstream::watchlist`), whose watch goes
//! on from the state it brought; where the upstream does not serve it, a
//! paginated LIST, then a WATCH from the list's resourceVersion with
//! bookmarks. The first LIST may be at a position saved by a process
//! before this one (`upstream::positions`): at exactly that
//! resourceVersion, so that the log holds every change since and the
//! clients of that process resume; if the upstream cannot give it, the
//! list is the ordinary one. A watch that ends is resumed from the last
//! resourceVersion seen (no relist); a 410 Expired lists again, and the
//! hub turns the new list into synthetic events. Errors back off
//! exponentially with jitter; the back-off starts over once a watch
//! delivered something.
//!
//! # A 410 right after a LIST cannot loop
//! A LIST slower than the upstream's watch history (a paged LIST of a big
//! resource from etcd, under churn) ends older than anything a watch can
//! resume from, and so would every LIST after it. When the watch that
//! follows a LIST is 410 before it delivered anything, the informer warns
//! once for it (how long the list took), counts it
//! (`kubefan_upstream_relists_total{reason="list_outran_history"}`), backs
//! off, and its later LISTs are `resourceVersion=0` ones, served from the
//! API server's watch cache at a position its watches have
//! (`ListPlan::outran_history`); a streaming list cannot fall behind at
//! all.
//!
//! # A relist beside its watch
//! `upstream::beside`: a relist's changes reach streams while it lists.
//!
//! The loop ends when its token is cancelled (shutdown, or the registry
//! stopped it), when the upstream answers 404 NotFound (the registry then
//! checks discovery and either removes the resource or runs the informer
//! again), or 403 Forbidden: kubefan may not read it, and retrying cannot
//! help (the registry says what to grant; `upstream::access`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::StreamExt;
use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};
use kube::core::ApiResource;
use tokio_util::sync::CancellationToken;

use super::beside::blocking;
use super::events::{self, Events};
use super::ingest::{IngestOptions, Ingesting, ingest_event};
use super::list::{ListKind, ListMode, ListPlan};
use super::watchlist::WatchListEnd;
use crate::hub::{EventType, Hub, Obj};
use crate::metrics::Metrics;

/// How an informer talks to the upstream.
#[derive(Debug, Clone, Copy)]
pub struct InformerConfig {
    /// Which list gets the state (`--upstream-list`).
    pub list: ListMode,
    /// LIST page size (`limit`).
    pub page_size: u32,
    /// `timeoutSeconds` of each WATCH; the API server caps it anyway.
    pub watch_timeout: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    pub ingest: IngestOptions,
}

impl Default for InformerConfig {
    fn default() -> Self {
        InformerConfig {
            list: ListMode::default(),
            page_size: 500,
            watch_timeout: Duration::from_secs(290),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(30),
            ingest: IngestOptions::default(),
        }
    }
}

/// A watch that ends this soon without delivering anything is treated as
/// a failure (backed off), so a misbehaving upstream is not hammered.
pub(super) const SHORT_WATCH: Duration = Duration::from_secs(1);

pub struct Informer {
    pub hub: Arc<Hub>,
    pub api: Api<DynamicObject>,
    pub resource: ApiResource,
    pub cfg: InformerConfig,
    pub metrics: Arc<Metrics>,
    /// Cancelled at shutdown or when the registry stops this informer.
    pub shutdown: CancellationToken,
    /// A position saved before a restart: the first LIST is at exactly it.
    pub start_at: Option<u64>,
}

/// Why [`Informer::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Its token was cancelled.
    Stopped,
    /// The upstream answered a LIST or WATCH with 404: the resource may
    /// have been removed (a deleted CRD).
    NotFound,
    /// The upstream answered this verb with 403: kubefan may not read the
    /// resource, and retrying cannot help.
    Forbidden(&'static str),
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

fn is_forbidden(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 403)
}

enum WatchEnd {
    /// Resume from the last resourceVersion.
    Resume,
    /// Resume after a back-off.
    Failed,
    /// The resourceVersion is gone: list again.
    Expired,
    /// 404: the resource is not served any more.
    NotFound,
    /// 403: kubefan may not watch it.
    Forbidden,
    Shutdown,
}

/// A resource's state, as a list brought it.
pub(super) struct Listed {
    pub(super) objects: Vec<Obj>,
    pub(super) rv: u64,
    /// A streaming list's watch, which goes on from `rv`.
    pub(super) events: Option<Events>,
}

impl Informer {
    pub async fn run(mut self) -> Exit {
        let name = self.hub.name().to_string();
        let mut backoff = self.new_backoff();
        let mut first = !self.hub.is_synced();
        // Only a hub's first list starts at a saved position.
        let mut start_at = self.start_at.take().filter(|_| first);
        let mut plan = ListPlan::new(self.cfg.list);
        'relist: loop {
            let mut kind = start_at.take().map_or(plan.next(), ListKind::Exact);
            let started = Instant::now();
            let mut beside = match self.hub.is_synced() {
                true => self.open_beside().await,
                false => None,
            };
            let listed = loop {
                self.metrics.upstream_list(&name, kind.label());
                let failed = match self.list_beside(kind, &mut beside).await {
                    Ok(listed) => break listed,
                    Err(failed) => failed,
                };
                match failed {
                    ListFailed::Stopped => return Exit::Stopped,
                    ListFailed::Refused(why) => {
                        self.metrics.upstream_error(&name, "watch_list_refused");
                        if let Some(fallback) = plan.fallback() {
                            tracing::info!(resource = %name, why = %why, list = fallback.label(),
                                "the upstream does not serve the streaming list; listing instead");
                            kind = fallback;
                            continue;
                        }
                        tracing::warn!(resource = %name, why = %why,
                            "the upstream refused the streaming list (--upstream-list streaming)");
                        self.hub.upstream_down(format!(
                            "its API server refused the streaming list: {why}"
                        ));
                    }
                    ListFailed::Broken(why) => {
                        self.metrics.upstream_error(&name, "watch_list");
                        tracing::warn!(resource = %name, why = %why,
                            "the streaming list broke before its end; starting over");
                    }
                    ListFailed::Api(err, ListKind::Exact(at))
                        if !is_forbidden(&err) && !is_not_found(&err) =>
                    {
                        // Compacted (410) or not served: the ordinary list,
                        // at once. Clients then get snapshots, as they would
                        // have without a saved position.
                        self.metrics.upstream_error(&name, "saved_position");
                        tracing::info!(resource = %name, resource_version = at, error = %err,
                            "upstream cannot list at the saved position; listing at the latest");
                        continue 'relist;
                    }
                    ListFailed::Api(err, kind) => {
                        // A streaming list needs the watch verb, a LIST the list verb.
                        let verb = if kind.is_list_request() {
                            "list"
                        } else {
                            "watch"
                        };
                        if is_not_found(&err) {
                            self.metrics.upstream_error(&name, "not_found");
                            tracing::info!(resource = %name, "upstream {verb} answered 404 NotFound");
                            return Exit::NotFound;
                        }
                        if is_forbidden(&err) {
                            self.metrics.upstream_error(&name, "forbidden");
                            return Exit::Forbidden(verb);
                        }
                        self.metrics.upstream_error(&name, "list");
                        tracing::warn!(resource = %name, list = kind.label(), error = %err, "upstream list failed");
                        self.hub
                            .upstream_down(format!("listing from its API server failed: {err}"));
                    }
                }
                if !self.pause(&mut backoff).await {
                    return Exit::Stopped;
                }
                continue 'relist;
            };
            let took = started.elapsed();
            let Listed {
                objects,
                mut rv,
                mut events,
            } = listed;
            let count = objects.len();
            self.hub.upstream_up();
            if events.is_some() {
                // A streaming list delivered: the upstream serves.
                backoff = self.new_backoff();
            }
            // Until a watch after a LIST delivers, a 410 means the list
            // ended older than the upstream's history.
            let mut just_listed = kind.is_list_request();
            let listed_at = rv;
            let (outcome, beside_applied) = match beside {
                Some(mut b) if rv >= b.from => {
                    let outcome = self.merge_beside(objects, rv, &mut b).await;
                    rv = rv.max(b.rv);
                    if let Some(watch) = b.events {
                        // It is ahead of the list's own watch, if any.
                        events = Some(watch);
                        just_listed = false;
                    }
                    (outcome, Some(b.applied))
                }
                _ => {
                    let hub = self.hub.clone();
                    (blocking(move || hub.relist(objects, rv)).await, None)
                }
            };
            if first {
                tracing::info!(resource = %name, objects = count, resource_version = rv,
                    list = kind.label(), seconds = took.as_secs_f64(), "informer synced");
                first = false;
            } else {
                tracing::info!(resource = %name, objects = count, resource_version = listed_at,
                    list = kind.label(), seconds = took.as_secs_f64(),
                    added = outcome.added, modified = outcome.modified, deleted = outcome.deleted,
                    rewound = outcome.rewound, applied_beside = beside_applied, "relisted");
            }
            loop {
                let (end, delivered) = match events.take() {
                    Some(events) => self.follow(events, &mut rv, Instant::now(), true).await,
                    None => self.watch_from(&mut rv).await,
                };
                if delivered {
                    backoff = self.new_backoff();
                    just_listed = false;
                }
                match end {
                    WatchEnd::Resume => {}
                    WatchEnd::Failed => {
                        if !self.pause(&mut backoff).await {
                            return Exit::Stopped;
                        }
                    }
                    WatchEnd::Expired if just_listed => {
                        self.metrics.upstream_relist(&name, "list_outran_history");
                        plan.outran_history();
                        let next = plan.next();
                        let instead = plan.fallback().filter(|f| *f != next);
                        tracing::warn!(resource = %name, list = kind.label(), seconds = took.as_secs_f64(),
                            resource_version = rv, next = next.label(), fallback = instead.map(ListKind::label),
                            "the list took {:.1} s, longer than the upstream keeps its watch history: \
                             the watch from its resourceVersion expired (410) before delivering anything; \
                             backing off, then listing with a {} list", took.as_secs_f64(), next.label());
                        if !self.pause(&mut backoff).await {
                            return Exit::Stopped;
                        }
                        continue 'relist;
                    }
                    WatchEnd::Expired => {
                        self.metrics.upstream_relist(&name, "expired");
                        tracing::info!(resource = %name, resource_version = rv, "watch expired (410); relisting");
                        continue 'relist;
                    }
                    WatchEnd::NotFound => {
                        self.metrics.upstream_error(&name, "not_found");
                        tracing::info!(resource = %name, "upstream watch answered 404 NotFound");
                        return Exit::NotFound;
                    }
                    WatchEnd::Forbidden => {
                        self.metrics.upstream_error(&name, "forbidden");
                        return Exit::Forbidden("watch");
                    }
                    WatchEnd::Shutdown => return Exit::Stopped,
                }
            }
        }
    }

    fn new_backoff(&self) -> ExponentialBackoff {
        ExponentialBuilder::new()
            .with_min_delay(self.cfg.backoff_min)
            .with_max_delay(self.cfg.backoff_max)
            .with_jitter()
            .without_max_times()
            .build()
    }

    /// Sleeps for the next back-off step; false if shut down meanwhile.
    async fn pause(&self, backoff: &mut ExponentialBackoff) -> bool {
        let delay = backoff.next().unwrap_or(self.cfg.backoff_max);
        tokio::select! {
            _ = self.shutdown.cancelled() => false,
            _ = tokio::time::sleep(delay) => true,
        }
    }

    /// The state by a list of `kind`.
    pub(super) async fn list(&self, kind: ListKind) -> Result<Listed, ListFailed> {
        if kind == ListKind::Streaming {
            return match self.watch_list().await {
                WatchListEnd::Listed {
                    objects,
                    rv,
                    events,
                } => Ok(Listed {
                    objects,
                    rv,
                    events: Some(events),
                }),
                WatchListEnd::Refused(why) => Err(ListFailed::Refused(why)),
                WatchListEnd::Broken(why) => Err(ListFailed::Broken(why)),
                WatchListEnd::Failed(err) => Err(ListFailed::Api(err, kind)),
                WatchListEnd::Shutdown => Err(ListFailed::Stopped),
            };
        }
        tokio::select! {
            _ = self.shutdown.cancelled() => Err(ListFailed::Stopped),
            listed = self.list_request(kind) => match listed {
                Ok((objects, rv)) => Ok(Listed { objects, rv, events: None }),
                Err(err) => Err(ListFailed::Api(err, kind)),
            },
        }
    }

    /// `timeoutSeconds` of a watch.
    pub(super) fn watch_timeout_secs(&self) -> u32 {
        self.cfg.watch_timeout.as_secs().clamp(1, 290) as u32
    }

    pub(super) fn decode_failed(&self, err: super::ingest::IngestError) {
        decode_failed(&self.metrics, self.hub.name(), err);
    }

    /// An [`Ingesting`] of a list of this informer's resource.
    pub(super) fn ingesting(&self) -> Ingesting {
        let (metrics, name) = (self.metrics.clone(), self.hub.name().to_string());
        Ingesting::start(self.resource.clone(), self.cfg.ingest, move |err| {
            decode_failed(&metrics, &name, err)
        })
    }

    /// Watches from `*rv`, advancing it; tells how the watch ended and
    /// whether it delivered anything.
    async fn watch_from(&self, rv: &mut u64) -> (WatchEnd, bool) {
        let name = self.hub.name();
        self.metrics.upstream_watch(name);
        let wp = WatchParams::default().timeout(self.watch_timeout_secs());
        let started = Instant::now();
        let from = rv.to_string();
        let opened = tokio::select! {
            _ = self.shutdown.cancelled() => return (WatchEnd::Shutdown, false),
            opened = events::open(&self.api, &wp, &from) => opened,
        };
        let events = match opened {
            Ok((events, _warnings)) => events,
            Err(kube::Error::Api(status)) if status.code == 410 => {
                return (WatchEnd::Expired, false);
            }
            Err(err) if is_not_found(&err) => return (WatchEnd::NotFound, false),
            Err(err) if is_forbidden(&err) => return (WatchEnd::Forbidden, false),
            Err(err) => {
                self.metrics.upstream_error(name, "watch");
                tracing::warn!(resource = %name, error = %err, "upstream watch failed");
                self.hub
                    .upstream_down(format!("watching its API server failed: {err}"));
                return (WatchEnd::Failed, false);
            }
        };
        // The watch is open: the API server is reached.
        self.hub.upstream_up();
        self.follow(events, rv, started, false).await
    }

    /// Follows an open watch into the hub, advancing `*rv`; tells how it
    /// ended and whether it delivered anything (`delivered` if something
    /// came on it before, as a streaming list's state).
    async fn follow(
        &self,
        mut events: Events,
        rv: &mut u64,
        started: Instant,
        mut delivered: bool,
    ) -> (WatchEnd, bool) {
        let name = self.hub.name();
        loop {
            let next = tokio::select! {
                _ = self.shutdown.cancelled() => return (WatchEnd::Shutdown, delivered),
                next = events.next() => next,
            };
            let (kind, obj) = match next {
                None => {
                    if !delivered && started.elapsed() < SHORT_WATCH {
                        return (WatchEnd::Failed, false);
                    }
                    return (WatchEnd::Resume, delivered);
                }
                Some(Ok(WatchEvent::Added(o))) => (EventType::Added, o),
                Some(Ok(WatchEvent::Modified(o))) => (EventType::Modified, o),
                Some(Ok(WatchEvent::Deleted(o))) => (EventType::Deleted, o),
                Some(Ok(WatchEvent::Bookmark(b))) => {
                    delivered = true;
                    if let Ok(b_rv) = b.metadata.resource_version.parse::<u64>() {
                        *rv = (*rv).max(b_rv);
                        self.hub.bookmark(b_rv);
                    }
                    continue;
                }
                Some(Ok(WatchEvent::Error(status))) | Some(Err(kube::Error::Api(status)))
                    if status.code == 410 =>
                {
                    return (WatchEnd::Expired, delivered);
                }
                Some(Ok(WatchEvent::Error(status))) if status.code == 404 => {
                    return (WatchEnd::NotFound, delivered);
                }
                Some(Ok(WatchEvent::Error(status))) if status.code == 403 => {
                    return (WatchEnd::Forbidden, delivered);
                }
                Some(Ok(WatchEvent::Error(status))) => {
                    self.metrics.upstream_error(name, "watch");
                    tracing::warn!(resource = %name, code = status.code, reason = %status.reason,
                        message = %status.message, "upstream watch error event");
                    return (WatchEnd::Failed, delivered);
                }
                Some(Err(err)) => {
                    self.metrics.upstream_error(name, "watch");
                    tracing::warn!(resource = %name, error = %err, "upstream watch stream broke");
                    return (WatchEnd::Failed, delivered);
                }
            };
            delivered = true;
            match ingest_event(&obj, &self.resource, self.cfg.ingest) {
                Ok(obj) => {
                    *rv = (*rv).max(obj.resource_version());
                    self.hub.apply(kind, obj);
                }
                Err(err) => self.decode_failed(err),
            }
        }
    }
}

/// Why a list brought no state.
pub(super) enum ListFailed {
    Stopped,
    /// The upstream does not serve the streaming list.
    Refused(String),
    /// The streaming list broke before its end.
    Broken(String),
    Api(kube::Error, ListKind),
}

/// An object the informer skips: counted and said.
fn decode_failed(metrics: &Metrics, resource: &str, err: super::ingest::IngestError) {
    metrics.upstream_error(resource, "decode");
    tracing::warn!(resource = %resource, error = %err, "skipping an object that cannot be ingested");
}
