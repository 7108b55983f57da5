//! Watch streams: the JSON-lines body of one watch request.
//!
//! Owns the stream's timing (bookmarks, timeout, `end_watches`, stalls) and
//! the encoding of watch lines. What events a watcher gets, and in which
//! order, is decided by `store.rs` under its lock; this side only drains the
//! watcher's queue. A BOOKMARK carries the current global rv and is sent only
//! when the queue is empty under the store lock, so every event at or below
//! that rv has already been written.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::Stream;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::resource::ResourceDef;
use super::store::WatchStart;
use super::{Sim, SimError};

/// About how many bytes of initial events one write carries.
const INITIAL_WRITE: usize = 64 << 10;

/// `{"type":TY,"object":OBJ}\n` around an already encoded object.
pub(crate) fn event_line(ty: &str, object: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(object.len() + ty.len() + 24);
    b.extend_from_slice(b"{\"type\":\"");
    b.extend_from_slice(ty.as_bytes());
    b.extend_from_slice(b"\",\"object\":");
    b.extend_from_slice(object);
    b.extend_from_slice(b"}\n");
    b.freeze()
}

/// A BOOKMARK at `rv`; `initial_events_end` adds the annotation that closes
/// the initial events of `sendInitialEvents`.
pub(crate) fn bookmark_line(def: &ResourceDef, rv: u64, initial_events_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let obj = json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": meta});
    event_line("BOOKMARK", obj.to_string().as_bytes())
}

/// An in-stream ERROR carrying `err` as a Status.
pub(crate) fn error_line(err: &SimError) -> Bytes {
    event_line("ERROR", err.status().to_string().as_bytes())
}

/// How one watch stream behaves over time.
pub(crate) struct WatchTiming {
    /// `Some(interval)` when the client sent `allowWatchBookmarks=true`.
    pub bookmarks: Option<Duration>,
    pub timeout: Duration,
}

struct WatchStream {
    sim: Sim,
    key: String,
    start: WatchStart,
    bookmarks: Option<Interval>,
    deadline: Instant,
    end: CancellationToken,
    stall: watch::Receiver<bool>,
    done: bool,
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        self.sim.store().unwatch(&self.key, self.start.id);
    }
}

impl WatchStream {
    /// A BOOKMARK at the current rv if nothing is queued for this watcher.
    fn bookmark(&self) -> Option<Bytes> {
        let store = self.sim.store();
        let caught_up = self.start.rx.is_empty() && !self.start.overflowed.load(Ordering::SeqCst);
        caught_up.then(|| bookmark_line(&self.start.def, store.rv(), false))
    }

    async fn next_line(&mut self) -> Option<Bytes> {
        while !self.done {
            // Before the initial events too: a watch whose timeout has
            // passed (a negative `timeoutSeconds`) sends nothing.
            if Instant::now() >= self.deadline {
                return None;
            }
            if *self.stall.borrow_and_update() {
                tokio::select! {
                    _ = self.end.cancelled() => return None,
                    _ = tokio::time::sleep_until(self.deadline) => return None,
                    changed = self.stall.changed() => if changed.is_err() { return None },
                }
                continue;
            }
            if let Some(line) = self.start.initial.pop_front() {
                // The first lines go out in writes of about 64 KiB, as a
                // LIST page does, not one write per object (150,000 of
                // them in a streaming list at Kubernetes' limits).
                let first = line.into_line();
                if self.start.initial.is_empty() || first.len() >= INITIAL_WRITE {
                    return Some(first);
                }
                let mut out = BytesMut::with_capacity(INITIAL_WRITE + first.len());
                out.extend_from_slice(&first);
                while out.len() < INITIAL_WRITE {
                    let Some(line) = self.start.initial.pop_front() else {
                        break;
                    };
                    out.extend_from_slice(&line.into_line());
                }
                return Some(out.freeze());
            }
            tokio::select! {
                biased;
                _ = self.end.cancelled() => return None,
                _ = tokio::time::sleep_until(self.deadline) => return None,
                changed = self.stall.changed() => if changed.is_err() { return None },
                line = self.start.rx.recv() => match line {
                    Some(line) => return Some(line),
                    // The queue is closed: the watch is over. A watcher
                    // that overflowed it ends after the events it had
                    // queued, with no error, as kube-apiserver's cacher
                    // ends one that does not keep up ("Forcing watcher
                    // close due to unresponsiveness": `cacheWatcher.add`
                    // and `forget(graceful)` drain its buffer and close
                    // it, storage/cacher/cache_watcher.go); its client
                    // watches again from the last resourceVersion it got,
                    // which the history window covers.
                    None => self.done = true,
                },
                _ = async { self.bookmarks.as_mut()?.tick().await; Some(()) }, if self.bookmarks.is_some() => {
                    if let Some(line) = self.bookmark() {
                        return Some(line);
                    }
                }
            }
        }
        None
    }
}

/// The body of a watch response for a registered watcher.
pub(crate) fn stream(
    sim: Sim,
    key: String,
    start: WatchStart,
    timing: WatchTiming,
) -> impl Stream<Item = Result<Bytes, Infallible>> + 'static {
    let bookmarks = timing.bookmarks.map(|period| {
        let period = period.max(Duration::from_millis(1));
        let mut i = tokio::time::interval_at(Instant::now() + period, period);
        i.set_missed_tick_behavior(MissedTickBehavior::Delay);
        i
    });
    let state = WatchStream {
        end: sim.end_token(),
        stall: sim.stall_receiver(),
        // Capped so that any `timeoutSeconds` is representable.
        deadline: Instant::now() + timing.timeout.min(Duration::from_secs(365 * 24 * 3600)),
        sim,
        key,
        start,
        bookmarks,
        done: false,
    };
    futures::stream::unfold(state, |mut s| async move {
        let line = s.next_line().await?;
        Some((Ok(line), s))
    })
}
