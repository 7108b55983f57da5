//! A hub's life: who is counted in as its user (open subscriptions, and
//! one-off readers such as a LIST), and its close, which an informer's
//! end or an idle stop makes, atomically with the counting.

use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLockWriteGuard};

use tokio::sync::watch;

use super::{Hub, State, SubscriptionError};

impl Hub {
    /// Ends the hub: its informer has stopped (the resource is gone
    /// upstream, or it was stopped for lack of subscribers). Subscribers
    /// are woken and receive [`Item::Closed`](super::Item::Closed) with `reason`; new ones are
    /// refused; later upstream changes are ignored. Its gauges are reset
    /// (no objects, not synced), since a hub started later for the same
    /// resource shares them. Idempotent; the first reason wins.
    pub fn close(&self, reason: &str) {
        self.close_locked(self.write_state(), reason);
    }

    /// Closes the hub only if no one is counted in (see [`Hub::enter`]),
    /// atomically with respect to `enter`: either the joiner is counted
    /// first and the hub stays open, or the joiner sees it closed.
    pub fn close_if_unused(&self, reason: &str) -> bool {
        let st = self.write_state();
        if *self.subscribers_tx.borrow() > 0 {
            return false;
        }
        self.close_locked(st, reason);
        true
    }

    fn close_locked(&self, mut st: RwLockWriteGuard<'_, State>, reason: &str) {
        if st.closed.is_none() {
            st.closed = Some(reason.to_string());
        }
        self.metrics.state(0, 0, 0, false);
        self.is_closed.store(true, Ordering::Release);
        drop(st);
        // Wakes everyone, joiners still waiting for the first sync too
        // ([`Hub::wait_synced`] ends on a close); `synced` stays as it was.
        self.changes.advance();
    }

    /// Why the hub was closed, if it was.
    pub fn closed(&self) -> Option<String> {
        if !self.is_closed.load(Ordering::Acquire) {
            return None;
        }
        self.read_state().closed.clone()
    }

    /// Counts a user in, unless the hub is closed: while the guard lives,
    /// an idle stop ([`Hub::close_if_unused`]) leaves the hub open.
    /// Subscriptions enter on start; a one-off reader (a LIST) holds a
    /// guard while it reads. The only way to be counted in: counting
    /// under the state lock, after the closed check, is what makes
    /// `close_if_unused` atomic with it.
    pub fn enter(self: &Arc<Self>) -> Result<SubscriberGuard, SubscriptionError> {
        let st = self.read_state();
        if let Some(reason) = &st.closed {
            return Err(SubscriptionError::Closed(
                self.name().to_string(),
                reason.clone(),
            ));
        }
        self.subscribers_tx.send_modify(|n| *n += 1);
        let guard = SubscriberGuard(self.clone());
        drop(st);
        Ok(guard)
    }

    /// The number of open subscriptions, changing as they come and go.
    pub fn subscribers_rx(&self) -> watch::Receiver<usize> {
        self.subscribers_tx.subscribe()
    }
}

/// Keeps a hub's subscriber count up while alive.
pub struct SubscriberGuard(Arc<Hub>);

impl Drop for SubscriberGuard {
    fn drop(&mut self) {
        self.0
            .subscribers_tx
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}
