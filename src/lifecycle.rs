//! The gateway's lifecycle, as one handle: keep-alive ticks, shutdown, and
//! the hard stop after the shutdown grace period (in the spirit of
//! mini-redis's `Shutdown`).
//!
//! Everything that must notice one of these holds an `Arc<Lifecycle>`:
//! subscriptions poll its [`Epoch`] beside their hub's (one registration per
//! wait, see [`crate::epoch`]); async loops await [`Lifecycle::shutting_down`]
//! or [`Lifecycle::hard_stopped`]; informers get child tokens of the
//! shutdown. The three stages only move forward, and each move wakes every
//! kind of waiter at once, so no two of them can disagree about where the
//! gateway is.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::epoch::Epoch;

#[derive(Default)]
pub struct Lifecycle {
    /// Moves on every tick, at shutdown and at the hard stop.
    epoch: Epoch,
    ticks: AtomicU64,
    /// Set with `shutdown`, for [`Lifecycle::is_shutting_down`]: every
    /// subscription asks on every delivery, and a token's
    /// `is_cancelled` takes its lock.
    shutting_down: AtomicBool,
    shutdown: CancellationToken,
    hard_stop: CancellationToken,
}

impl Lifecycle {
    pub fn new() -> Arc<Lifecycle> {
        Arc::new(Lifecycle::default())
    }

    /// What poll-based waiters (subscriptions) register with.
    pub fn epoch(&self) -> &Epoch {
        &self.epoch
    }

    /// A keep-alive interval has passed.
    pub fn tick(&self) {
        self.ticks.fetch_add(1, Ordering::AcqRel);
        self.epoch.advance();
    }

    /// Keep-alive intervals passed so far.
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Acquire)
    }

    /// Ticks every `interval` until shutdown.
    pub fn spawn_ticker(self: &Arc<Self>, interval: Duration) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut timer = tokio::time::interval(interval);
            timer.tick().await;
            loop {
                tokio::select! {
                    _ = this.shutting_down() => return,
                    _ = timer.tick() => this.tick(),
                }
            }
        });
    }

    /// Begins the shutdown: streams send their last message and end,
    /// informers and background tasks stop. Idempotent.
    pub fn shut_down(&self) {
        self.shutting_down.store(true, Ordering::Release);
        self.shutdown.cancel();
        self.epoch.advance();
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Resolves once the shutdown has begun.
    pub async fn shutting_down(&self) {
        self.shutdown.cancelled().await
    }

    /// A token cancelled at shutdown, or earlier by whoever holds it (an
    /// informer stopped for idleness).
    pub fn child_token(&self) -> CancellationToken {
        self.shutdown.child_token()
    }

    /// Ends what is still running after the grace period: a stream blocked
    /// writing to a client that reads nothing gives up. Implies shutdown.
    pub fn hard_stop(&self) {
        self.shutting_down.store(true, Ordering::Release);
        self.shutdown.cancel();
        self.hard_stop.cancel();
        self.epoch.advance();
    }

    /// Whether the hard stop came.
    pub fn is_hard_stopped(&self) -> bool {
        self.hard_stop.is_cancelled()
    }

    /// Resolves at the hard stop.
    pub async fn hard_stopped(&self) {
        self.hard_stop.cancelled().await
    }

    /// Resolves at the next tick after `seen` (a value of [`Lifecycle::ticks`]),
    /// or at shutdown; returns the ticks then.
    pub async fn next_tick(&self, seen: u64) -> u64 {
        self.epoch
            .until(|| self.ticks() != seen || self.is_shutting_down())
            .await;
        self.ticks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ticks_come_every_interval_until_shutdown() {
        let lifecycle = Lifecycle::new();
        lifecycle.spawn_ticker(Duration::from_secs(15));
        let seen = lifecycle.ticks();
        let wait = tokio::time::timeout(Duration::from_secs(16), lifecycle.next_tick(seen));
        assert_eq!(wait.await.expect("a tick within the interval"), seen + 1);
        lifecycle.shut_down();
        assert!(lifecycle.is_shutting_down());
        // At shutdown a tick waiter returns at once, ticks unchanged.
        assert_eq!(lifecycle.next_tick(seen + 1).await, seen + 1);
        tokio::time::timeout(Duration::from_secs(1), lifecycle.shutting_down())
            .await
            .expect("shutdown is seen by async waiters too");
    }

    #[tokio::test]
    async fn the_hard_stop_implies_shutdown_and_moves_the_epoch() {
        let lifecycle = Lifecycle::new();
        let before = lifecycle.epoch().current();
        let child = lifecycle.child_token();
        lifecycle.hard_stop();
        assert!(lifecycle.is_shutting_down() && child.is_cancelled());
        assert_ne!(lifecycle.epoch().current(), before);
        tokio::time::timeout(Duration::from_secs(1), lifecycle.hard_stopped())
            .await
            .expect("hard stop seen");
    }
}
