//! WATCH registration: what a new watcher replays first (the history
//! after its resourceVersion, or the current objects), and forgetting it
//! when its stream ends. Streaming itself is `watch.rs`'s.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::{Filter, Store, Watcher};
use crate::SimError;
use crate::resource::ResourceDef;
use crate::watch::{bookmark_line, event_line};

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchFrom {
    /// Synthetic ADDED for every current object; with `initial_events_end`,
    /// then the annotated BOOKMARK of `sendInitialEvents`.
    Now { initial_events_end: bool },
    /// Every event after this rv.
    After(u64),
}

/// One of a watcher's first lines: built, or an object whose ADDED line
/// the stream builds when it writes it. Registering a streaming list
/// (`sendInitialEvents`) at 150,000 pods only takes a reference to each
/// object under the store lock: building their lines there held every
/// write up for 4.3 s and a second copy of every object (about 1 GB) for
/// as long as the stream took to send them (README, "Simulator at
/// Kubernetes' limits").
#[derive(Clone)]
pub(crate) enum Initial {
    Line(Bytes),
    Added(Bytes),
}

impl Initial {
    pub fn into_line(self) -> Bytes {
        match self {
            Initial::Line(line) => line,
            Initial::Added(obj) => event_line("ADDED", &obj),
        }
    }
}

/// A registered watcher's first lines and its live queue.
pub(crate) struct WatchStart {
    pub id: u64,
    pub def: Arc<ResourceDef>,
    pub initial: VecDeque<Initial>,
    pub rx: mpsc::Receiver<Bytes>,
    pub overflowed: Arc<AtomicBool>,
}

impl Store {
    /// Registers a watcher and collects what it must replay first.
    /// `Err(Expired)` when `from` is older than the retained history.
    pub fn watch(
        &mut self,
        key: &str,
        filter: Filter,
        from: WatchFrom,
    ) -> Result<WatchStart, SimError> {
        let rv = self.rv;
        let id = self.next_id;
        self.next_id += 1;
        let cap = self.limits.watch_queue.max(1);
        let r = self.resource_mut(key)?;
        let mut initial = VecDeque::new();
        match from {
            WatchFrom::After(n) if n < r.floor => {
                return Err(SimError::Expired(format!(
                    "too old resource version: {n} ({})",
                    r.floor
                )));
            }
            WatchFrom::After(n) => {
                for ev in r.history.iter().filter(|e| e.rv > n) {
                    if let Some(ty) = filter.view(ev) {
                        initial.push_back(Initial::Line(ev.line(ty)));
                    }
                }
            }
            WatchFrom::Now { initial_events_end } => {
                for obj in r.objects.values().filter(|o| filter.matches(&o.attrs)) {
                    initial.push_back(Initial::Added(obj.encoded.clone()));
                }
                if initial_events_end {
                    initial.push_back(Initial::Line(bookmark_line(&r.def, rv, true)));
                }
            }
        }
        let (tx, rx) = mpsc::channel(cap);
        let overflowed = Arc::new(AtomicBool::new(false));
        r.watchers.push(Watcher {
            id,
            filter,
            tx,
            overflowed: overflowed.clone(),
        });
        r.stats.open_watches += 1;
        Ok(WatchStart {
            id,
            def: r.def.clone(),
            initial,
            rx,
            overflowed,
        })
    }

    /// Forgets a watcher whose stream has ended.
    pub fn unwatch(&mut self, key: &str, id: u64) {
        if let Some(r) = self.resources.get_mut(key) {
            r.watchers.retain(|w| w.id != id);
            // A watcher of a resource unregistered and registered again
            // meanwhile was never counted here.
            if id >= r.first_id {
                r.stats.open_watches = r.stats.open_watches.saturating_sub(1);
            }
        }
    }
}
