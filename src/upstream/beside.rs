//! A relist beside its watch.
//!
//! A relist after a 410 lists the whole resource again, seconds at
//! 150,000 pods; changes made meanwhile would reach no stream until the
//! list is in. So, before it lists, the informer asks the upstream for its
//! current resourceVersion `R` (a one-item LIST, a consistent read) and
//! opens a watch from `R`, whose events it applies to the hub while the
//! list runs, on top of the old cache: each is a true change, and the
//! transition rule gives each view the right kind. The list, a snapshot
//! at `S >= R`, is then merged ([`crate::hub::Hub::relist_beside`]): what the watch
//! wrote after `S` stays, every other key takes the list's version, and
//! the watch goes on as the informer's watch. The merge (150,000 keys
//! hashed and a new cache built: about a second) runs on a blocking
//! thread while the watch goes on being applied; what it wrote meanwhile
//! is then kept ([`crate::hub::Hub::file_merged`]), so the merge delays no
//! change either. Plain relists and first lists run there too
//! ([`blocking`]): an async worker that spends a second diffing would
//! hold every stream it serves for that second. A list older than `R` (a
//! `resourceVersion=0` list from a lagging watch cache) cannot be merged
//! and relists as before. Where the one-item LIST or the watch fails, the
//! relist goes on without it. Nothing else in the hub changes: kube's own
//! reflector (and kube-apiserver's cacher) relist the same way without the
//! watch beside, and end every watcher.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{WatchEvent, WatchParams};

use super::events::{self, Events};
use super::informer::{Informer, ListFailed, Listed};
use super::ingest::{Object, ingest};
use super::list::ListKind;
use crate::hub::{EventType, Merging, Obj, ObjKey, RelistOutcome};

/// A watch kept beside a relist (this module).
pub(super) struct Beside {
    /// Its events, until it ends.
    pub(super) events: Option<Events>,
    /// The resourceVersion it started from.
    pub(super) from: u64,
    /// The highest resourceVersion it brought.
    pub(super) rv: u64,
    /// The keys it deleted, and at which resourceVersion.
    pub(super) deleted: HashMap<ObjKey, u64>,
    /// How many events it applied.
    pub(super) applied: usize,
    /// While its list is merged: the keys it wrote meanwhile.
    written: Option<HashSet<ObjKey>>,
}

/// How long a relist waits for its watch beside to open before it lists
/// without one.
const BESIDE_OPEN: Duration = Duration::from_secs(10);

impl Informer {
    /// Opens the watch a relist keeps beside it, from the upstream's
    /// current resourceVersion; none if the upstream cannot give one soon.
    pub(super) async fn open_beside(&self) -> Option<Beside> {
        let name = self.hub.name();
        let opened = async {
            let from = self.current_resource_version().await?;
            self.metrics.upstream_watch(name);
            let wp = WatchParams::default().timeout(self.watch_timeout_secs());
            let (events, _warnings) = events::open(&self.api, &wp, &from.to_string()).await?;
            Ok::<_, kube::Error>((events, from))
        };
        let opened = tokio::select! {
            _ = self.shutdown.cancelled() => return None,
            opened = tokio::time::timeout(BESIDE_OPEN, opened) => opened,
        };
        match opened {
            Ok(Ok((events, from))) => Some({
                self.hub.relist_begins();
                Beside {
                    events: Some(events),
                    from,
                    rv: from,
                    deleted: HashMap::new(),
                    applied: 0,
                    written: None,
                }
            }),
            Ok(Err(err)) => {
                tracing::info!(resource = %name, error = %err,
                    "no watch beside the relist: changes made while it lists wait for it");
                None
            }
            Err(_) => {
                tracing::info!(resource = %name, seconds = BESIDE_OPEN.as_secs(),
                    "no watch beside the relist (the upstream did not answer in time): \
                     changes made while it lists wait for it");
                None
            }
        }
    }

    /// Lists as [`Informer::list`] does, applying the events of the watch
    /// `beside` it to the hub meanwhile.
    pub(super) async fn list_beside(
        &self,
        kind: ListKind,
        beside: &mut Option<Beside>,
    ) -> Result<Listed, ListFailed> {
        match beside.as_mut() {
            Some(b) => self.applying(self.list(kind), b).await,
            None => self.list(kind).await,
        }
    }

    /// Awaits `work`, applying the events of the watch `b` beside it
    /// meanwhile (until that watch ends).
    async fn applying<T>(&self, work: impl Future<Output = T>, b: &mut Beside) -> T {
        tokio::pin!(work);
        loop {
            let Some(events) = b.events.as_mut() else {
                return work.await;
            };
            let next = tokio::select! {
                done = &mut work => return done,
                next = events.next() => next,
            };
            if !self.apply_beside(b, next) {
                b.events = None;
            }
        }
    }

    /// Merges a list at `rv` that came with the watch `b` beside it into
    /// the hub (`Hub::merge_beside`, on a blocking thread), applying that
    /// watch's events meanwhile. Where the hub is not past the list, this
    /// is a plain relist, and the watch waits for it.
    pub(super) async fn merge_beside(
        &self,
        objects: Vec<Obj>,
        rv: u64,
        b: &mut Beside,
    ) -> RelistOutcome {
        let hub = self.hub.clone();
        // The informer is the hub's one writer: the hub cannot fall back
        // behind the list while the merge runs.
        if hub.resource_version() <= rv {
            return blocking(move || hub.relist(objects, rv)).await;
        }
        let deleted = std::mem::take(&mut b.deleted);
        b.written = Some(HashSet::new());
        let merging = blocking(move || hub.merge_beside(objects, rv, &deleted));
        let merging = self.applying(merging, b).await;
        let written = b.written.take().unwrap_or_default();
        match merging {
            Merging::Merged(merged) => self.hub.file_merged(merged, &written),
            Merging::Relisted(outcome) => outcome,
        }
    }

    /// Applies one event of the watch beside a relist; false once that
    /// watch has ended (the relist goes on without it).
    fn apply_beside(
        &self,
        b: &mut Beside,
        next: Option<Result<WatchEvent<Object>, kube::Error>>,
    ) -> bool {
        let name = self.hub.name();
        let (kind, obj) = match next {
            Some(Ok(WatchEvent::Added(o))) => (EventType::Added, o),
            Some(Ok(WatchEvent::Modified(o))) => (EventType::Modified, o),
            Some(Ok(WatchEvent::Deleted(o))) => (EventType::Deleted, o),
            Some(Ok(WatchEvent::Bookmark(bm))) => {
                if let Ok(at) = bm.metadata.resource_version.parse::<u64>() {
                    b.rv = b.rv.max(at);
                    self.hub.bookmark(at);
                }
                return true;
            }
            None => {
                tracing::debug!(resource = %name, "the watch beside the relist ended");
                return false;
            }
            Some(Ok(WatchEvent::Error(status))) | Some(Err(kube::Error::Api(status))) => {
                tracing::info!(resource = %name, code = status.code, message = %status.message,
                    "the watch beside the relist ended; the relist goes on");
                return false;
            }
            Some(Err(err)) => {
                tracing::info!(resource = %name, error = %err,
                    "the watch beside the relist broke; the relist goes on");
                return false;
            }
        };
        match ingest(&obj, &self.resource, self.cfg.ingest) {
            Ok(obj) => {
                let at = obj.resource_version();
                b.rv = b.rv.max(at);
                if kind == EventType::Deleted {
                    b.deleted.insert(obj.key(), at);
                }
                b.applied += 1;
                if let Some(written) = b.written.as_mut() {
                    written.insert(obj.key());
                }
                self.hub.apply(kind, obj);
            }
            Err(err) => self.decode_failed(err),
        }
        true
    }
}

/// Runs `work` on a blocking thread (a relist's diff, a merge: seconds of
/// CPU at 150,000 objects) and waits for it, so the async worker it would
/// otherwise hold goes on serving streams. A panic in it is the caller's.
pub(super) async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done,
        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        // Only a runtime shutting down cancels a blocking task, and then
        // this task is dropped with it.
        Err(err) => panic!("a blocking relist was cancelled: {err}"),
    }
}
