//! One informer: the list-then-watch loop that feeds one hub.
//!
//! Paginated LIST, then WATCH from the list's resourceVersion with
//! bookmarks. The first LIST may be at a position saved by a process
//! before this one (`upstream::positions`): at exactly that
//! resourceVersion, so that the log holds every change since and the
//! clients of that process resume; if the upstream cannot give it, the
//! LIST is at the latest as usual. A watch that ends is resumed from the
//! last resourceVersion seen (no relist); a 410 Expired relists, and the
//! hub turns the new list into synthetic events. Errors back off exponentially with jitter. The
//! loop ends when its token is cancelled (shutdown, or the registry stopped
//! it), when the upstream answers 404 NotFound (the registry then checks
//! discovery and either removes the resource or runs the informer again),
//! or 403 Forbidden: kubefan may not read it, and retrying cannot help
//! (the registry says what to grant; `upstream::access`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::StreamExt;
use kube::api::{
    Api, DynamicObject, ListParams, ObjectList, VersionMatch, WatchEvent, WatchParams,
};
use kube::core::ApiResource;
use tokio_util::sync::CancellationToken;

use super::ingest::{IngestOptions, ingest};
use crate::hub::{EventType, Hub, Obj};
use crate::metrics::Metrics;

/// How an informer talks to the upstream.
#[derive(Debug, Clone, Copy)]
pub struct InformerConfig {
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
            page_size: 500,
            watch_timeout: Duration::from_secs(290),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(30),
            ingest: IngestOptions::default(),
        }
    }
}

/// The longest the LIST at a saved position may take. kube-rs retries a
/// 504 for minutes, and 504 is what kube-apiserver answers a position it
/// has not reached (an etcd restored from a backup): the ordinary LIST
/// then starts instead.
const SAVED_LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// A watch that ends this soon without delivering anything is treated as
/// a failure (backed off), so a misbehaving upstream is not hammered.
const SHORT_WATCH: Duration = Duration::from_secs(1);

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

impl Informer {
    pub async fn run(mut self) -> Exit {
        let name = self.hub.name().to_string();
        let mut backoff = self.new_backoff();
        let mut first = !self.hub.is_synced();
        // Only a hub's first list starts at a saved position.
        let mut start_at = self.start_at.take().filter(|_| first);
        'relist: loop {
            self.metrics.upstream_list(&name);
            let at = start_at.take();
            let listed = tokio::select! {
                _ = self.shutdown.cancelled() => return Exit::Stopped,
                listed = self.list_from(at) => listed,
            };
            let (objects, mut rv) = match listed {
                Ok(listed) => listed,
                Err(err) if at.is_some() && !is_forbidden(&err) && !is_not_found(&err) => {
                    // Compacted (410) or not served: the ordinary list,
                    // at once. Clients then get snapshots, as they would
                    // have without a saved position.
                    self.metrics.upstream_error(&name, "saved_position");
                    tracing::info!(resource = %name, resource_version = at, error = %err,
                        "upstream cannot list at the saved position; listing at the latest");
                    continue 'relist;
                }
                Err(err) if is_not_found(&err) => {
                    self.metrics.upstream_error(&name, "not_found");
                    tracing::info!(resource = %name, "upstream list answered 404 NotFound");
                    return Exit::NotFound;
                }
                Err(err) if is_forbidden(&err) => {
                    self.metrics.upstream_error(&name, "forbidden");
                    return Exit::Forbidden("list");
                }
                Err(err) => {
                    self.metrics.upstream_error(&name, "list");
                    tracing::warn!(resource = %name, error = %err, "upstream list failed");
                    self.hub
                        .upstream_down(format!("listing from its API server failed: {err}"));
                    if !self.pause(&mut backoff).await {
                        return Exit::Stopped;
                    }
                    continue 'relist;
                }
            };
            let count = objects.len();
            self.hub.upstream_up();
            let outcome = self.hub.relist(objects, rv);
            if first {
                tracing::info!(resource = %name, objects = count, resource_version = rv,
                    saved_position = at.is_some(), "informer synced");
                first = false;
            } else {
                tracing::info!(resource = %name, objects = count, resource_version = rv,
                    added = outcome.added, modified = outcome.modified, deleted = outcome.deleted,
                    rewound = outcome.rewound, "relisted");
            }
            backoff = self.new_backoff();

            loop {
                let (end, delivered) = self.watch_from(&mut rv).await;
                if delivered {
                    backoff = self.new_backoff();
                }
                match end {
                    WatchEnd::Resume => {}
                    WatchEnd::Failed => {
                        if !self.pause(&mut backoff).await {
                            return Exit::Stopped;
                        }
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

    /// [`Informer::list_all`]; at a saved position, given at most
    /// [`SAVED_LIST_TIMEOUT`].
    async fn list_from(&self, at: Option<u64>) -> Result<(Vec<Obj>, u64), kube::Error> {
        if at.is_none() {
            return self.list_all(None).await;
        }
        tokio::time::timeout(SAVED_LIST_TIMEOUT, self.list_all(at))
            .await
            .unwrap_or_else(|_| {
                Err(kube::Error::Api(
                    kube::core::Status::failure(
                        "listing at the saved position took too long",
                        "Timeout",
                    )
                    .boxed(),
                ))
            })
    }

    /// Every object, in pages, and the list's resourceVersion: the latest,
    /// or exactly `at`. (The resourceVersion goes with the first page
    /// only: the continue token carries it on, and kube-apiserver refuses
    /// both together.)
    async fn list_all(&self, at: Option<u64>) -> Result<(Vec<Obj>, u64), kube::Error> {
        let mut objects = Vec::new();
        let mut warnings = Vec::new();
        let mut token: Option<String> = None;
        let at = at.map(|rv| rv.to_string());
        loop {
            let mut lp = ListParams::default().limit(self.cfg.page_size);
            match (&token, &at) {
                (Some(t), _) => lp = lp.continue_token(t),
                (None, Some(rv)) => lp = lp.at(rv).matching(VersionMatch::Exact),
                (None, None) => {}
            }
            let (page, page_warnings) = self.list_page(&lp).await?;
            for warning in page_warnings {
                if !warnings.contains(&warning) {
                    warnings.push(warning);
                }
            }
            for item in page.items {
                match ingest(item, &self.resource, self.cfg.ingest) {
                    Ok(obj) => objects.push(obj),
                    Err(err) => self.decode_failed(err),
                }
            }
            match page.metadata.continue_ {
                Some(next) if !next.is_empty() => token = Some(next),
                _ => {
                    let rv = page.metadata.resource_version.unwrap_or_default();
                    let rv = rv.parse::<u64>().map_err(|_| {
                        kube::Error::Api(
                            kube::core::Status::failure(
                                &format!("list has a non-numeric resourceVersion {rv:?}"),
                                "BadResponse",
                            )
                            .boxed(),
                        )
                    })?;
                    self.hub.set_warnings(warnings);
                    return Ok((objects, rv));
                }
            }
        }
    }

    /// One page of the LIST, and the `Warning`s it came with (what
    /// `Api::list` drops): the request `Api::list` makes, sent as it sends
    /// it, its errors read as it reads them.
    async fn list_page(
        &self,
        lp: &ListParams,
    ) -> Result<(ObjectList<DynamicObject>, Vec<&'static str>), kube::Error> {
        let request = kube::core::Request::new(self.api.resource_url())
            .list(lp)
            .map_err(kube::Error::BuildRequest)?;
        let client = self.api.clone().into_client();
        let response = client.send(request.map(kube::client::Body::from)).await?;
        let status = response.status();
        let warnings = super::warning::of(response.headers());
        let body = response.into_body().collect_bytes().await?;
        if status.is_client_error() || status.is_server_error() {
            let failure = match serde_json::from_slice::<kube::core::Status>(&body) {
                Ok(failure) => failure,
                Err(_) => kube::core::Status::failure(
                    String::from_utf8_lossy(&body).trim(),
                    "Failed to parse error data",
                )
                .with_code(status.as_u16()),
            };
            return Err(kube::Error::Api(failure.boxed()));
        }
        let page = serde_json::from_slice(&body).map_err(kube::Error::SerdeError)?;
        Ok((page, warnings))
    }

    fn decode_failed(&self, err: super::ingest::IngestError) {
        self.metrics.upstream_error(self.hub.name(), "decode");
        tracing::warn!(resource = %self.hub.name(), error = %err, "skipping an object that cannot be ingested");
    }

    /// Watches from `*rv`, advancing it; tells how the watch ended and
    /// whether it delivered anything.
    async fn watch_from(&self, rv: &mut u64) -> (WatchEnd, bool) {
        let name = self.hub.name();
        self.metrics.upstream_watch(name);
        let timeout = self.cfg.watch_timeout.as_secs().clamp(1, 290) as u32;
        let wp = WatchParams::default().timeout(timeout);
        let started = Instant::now();
        let from = rv.to_string();
        let stream = tokio::select! {
            _ = self.shutdown.cancelled() => return (WatchEnd::Shutdown, false),
            s = self.api.watch(&wp, &from) => s,
        };
        let stream = match stream {
            Ok(stream) => stream,
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
        let mut stream = std::pin::pin!(stream);
        let mut delivered = false;
        loop {
            let next = tokio::select! {
                _ = self.shutdown.cancelled() => return (WatchEnd::Shutdown, delivered),
                next = stream.next() => next,
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
                Some(Ok(WatchEvent::Error(status))) if status.code == 410 => {
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
            match ingest(obj, &self.resource, self.cfg.ingest) {
                Ok(obj) => {
                    *rv = (*rv).max(obj.resource_version());
                    self.hub.apply(kind, obj);
                }
                Err(err) => self.decode_failed(err),
            }
        }
    }
}
