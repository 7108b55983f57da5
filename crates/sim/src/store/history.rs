//! A resource's event history: its events, what each costs against the
//! history's byte bound, the watch line each makes, and the trimming that
//! keeps the bounds (the invariants are in `store`'s header).

use bytes::Bytes;
use serde_json::Value;

use super::write;
use super::{EventKind, Limits, Resource, Store, Stored};
use crate::attrs::Attrs;
use crate::watch::event_line;
use std::sync::Arc;

pub(super) struct Event {
    pub(super) rv: u64,
    /// When it was recorded, for the history's time window.
    pub(super) at: std::time::Instant,
    pub(super) kind: EventKind,
    /// The object encoded once for all watchers.
    pub(super) encoded: Bytes,
    pub(super) attrs: Arc<Attrs>,
    /// The version this event replaced or deleted (`None` for ADDED): its
    /// attributes turn selector transitions into ADDED/DELETED like the
    /// real watch cache, and undoing the history down to a resourceVersion
    /// gives an exact-version LIST (`list.rs`).
    pub(super) old: Option<Stored>,
}

impl Event {
    /// What the event holds, for the history's byte bound. The replaced
    /// version is counted too: it is often shared with the previous event,
    /// but kept alive by this one alone once that event is trimmed.
    pub(super) fn cost(&self) -> usize {
        let old = self
            .old
            .as_ref()
            .map_or(0, |o| o.encoded.len() + o.attrs.size());
        self.encoded.len() + self.attrs.size() + old
    }

    /// The watch line of type `ty` for this event. A MODIFIED that makes
    /// the object stop matching a watcher's selector is sent as DELETED
    /// carrying the previous version (the one that matched), stamped with
    /// this event's resourceVersion, as kube-apiserver's cacher does
    /// (staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go,
    /// `convertToWatchEvent`: "return a delete event with the previous
    /// object content, but with the event's resource version").
    pub(super) fn line(&self, ty: &'static str) -> Bytes {
        match (&self.old, self.kind, ty) {
            (Some(old), EventKind::Modified, "DELETED") => {
                event_line(ty, &restamp(&old.encoded, self.rv))
            }
            _ => event_line(ty, &self.encoded),
        }
    }
}

/// `encoded` with `metadata.resourceVersion` set to `rv`; the bytes
/// unchanged if they do not parse (they always do: the store wrote them).
fn restamp(encoded: &Bytes, rv: u64) -> Bytes {
    match serde_json::from_slice::<Value>(encoded) {
        Ok(mut v) => {
            write::set_meta(&mut v, "resourceVersion", Value::String(rv.to_string()));
            Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
        }
        Err(_) => encoded.clone(),
    }
}

impl Resource {
    /// Drops the oldest events until both bounds hold.
    pub(super) fn trim_history(&mut self, limits: &Limits) {
        let now = std::time::Instant::now();
        while self.history.len() > limits.history || self.history_bytes > limits.history_bytes {
            // Events younger than the window stay, up to the hard cap, as
            // kube-apiserver's watch cache keeps `eventFreshDuration` of
            // events by growing its capacity (watch_cache.go, `resizeCacheLocked`).
            let fresh = self
                .history
                .front()
                .is_some_and(|e| now.saturating_duration_since(e.at) < limits.history_window);
            if fresh && self.history.len() <= crate::HISTORY_WINDOW_CAP {
                break;
            }
            let Some(old) = self.history.pop_front() else {
                break;
            };
            self.history_bytes -= old.cost();
            self.floor = self.floor.max(old.rv);
        }
    }
}

impl Store {
    /// Drops every resource's event history and every list snapshot, like an
    /// etcd compaction at the current revision.
    pub fn compact(&mut self) {
        let rv = self.rv;
        for r in self.resources.values_mut() {
            r.history.clear();
            r.history_bytes = 0;
            r.floor = rv;
        }
        self.snapshots.clear();
    }
}
