//! Whether a hub's informer reaches its API server (`Hub::upstream`).

use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, Ordering};

use super::Hub;
use crate::epoch::Epoch;

/// Whether a hub's informer reaches its API server: what a stream across
/// clusters announces (`transport::merged`), so that a cluster whose API
/// server went away is said to be gone rather than silently quiet.
#[derive(Default)]
pub(super) struct Upstream {
    /// Why it does not, while it does not.
    down: std::sync::Mutex<Option<String>>,
    /// Set with `down`, read without the lock (on every watch opened).
    is_down: AtomicBool,
    /// Moves whenever `down` changes.
    changes: Epoch,
}

impl Hub {
    /// Why its informer does not reach the API server now, if it does not.
    pub fn upstream(&self) -> Option<String> {
        if !self.upstream.is_down.load(Ordering::Acquire) {
            return None;
        }
        self.upstream
            .down
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Moves whenever [`Hub::upstream`] changes.
    pub fn upstream_changes(&self) -> &Epoch {
        &self.upstream.changes
    }

    /// The informer failed to reach the API server (`why`): said once, on
    /// the first failure after it was reached.
    pub fn upstream_down(&self, why: String) {
        if self.upstream.is_down.load(Ordering::Acquire) {
            return;
        }
        *self
            .upstream
            .down
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(why);
        self.upstream.is_down.store(true, Ordering::Release);
        self.upstream.changes.advance();
    }

    /// The informer reached the API server (a list, a watch that
    /// delivered): cheap when it was not down.
    pub fn upstream_up(&self) {
        if !self.upstream.is_down.load(Ordering::Acquire) {
            return;
        }
        *self
            .upstream
            .down
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        self.upstream.is_down.store(false, Ordering::Release);
        self.upstream.changes.advance();
    }
}
