//! The gateway's lifecycle, as one handle: keep-alive ticks, shutdown, and
//! the hard stop after the shutdown grace period (in the spirit of
//! mini-redis's `Shutdown`).
//!
//! Keep-alive ticks are spread over the interval: each stream (and each
//! `/ws` socket) is given one of [`PHASES`] phases when it starts, and
//! ticks once per interval, at its phase's beat; a beat comes every
//! `interval / PHASES`. One tick for every stream at once is a burst of
//! a write per stream (and, on WebSockets, a pong back for each), which
//! the next change's deliveries queue behind (`loadtest/RESULTS.md`,
//! "keep-alive ticks spread over the interval"); a beat is a sixteenth
//! of it.
//!
//! Everything that must notice one of these holds an `Arc<Lifecycle>`:
//! subscriptions poll its [`Epoch`] beside their hub's (one registration per
//! wait, see [`crate::epoch`]); async loops await [`Lifecycle::shutting_down`]
//! or [`Lifecycle::hard_stopped`]; informers get child tokens of the
//! shutdown. The three stages only move forward, and each move wakes every
//! kind of waiter at once, so no two of them can disagree about where the
//! gateway is.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::epoch::{Epoch, Registration};

/// How many parts a keep-alive interval's ticks are spread over.
pub const PHASES: usize = 16;

/// When in each keep-alive interval a stream ticks: one of [`PHASES`],
/// given round-robin ([`Lifecycle::phase`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phase(u8);

#[derive(Default)]
pub struct Lifecycle {
    /// Moves on every beat, at shutdown and at the hard stop: what a batch
    /// writer, which holds streams of every phase, waits on.
    epoch: Epoch,
    /// Each moves on its phase's beat, at shutdown and at the hard stop:
    /// what a stream of that phase waits on.
    phases: [Epoch; PHASES],
    /// Beats so far: phase `p`'s ticks are the beats `b` (from 0) with
    /// `b % PHASES == p`.
    beats: AtomicU64,
    next_phase: AtomicUsize,
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

    /// What a poll-based waiter that holds streams of every phase (a
    /// batch writer) registers with: it moves on every beat.
    pub fn epoch(&self) -> &Epoch {
        &self.epoch
    }

    /// The phase for a stream or socket that starts now: the next in
    /// turn, so the streams of every writer are spread evenly.
    pub fn phase(&self) -> Phase {
        Phase((self.next_phase.fetch_add(1, Ordering::Relaxed) % PHASES) as u8)
    }

    /// What a poll-based waiter of one phase (a subscription, a `/ws`
    /// socket's control loop) registers with: it moves on the phase's
    /// beats, at shutdown and at the hard stop.
    pub fn phase_epoch(&self, phase: Phase) -> &Epoch {
        &self.phases[usize::from(phase.0)]
    }

    /// A whole keep-alive interval passes at once: every phase ticks.
    pub fn tick(&self) {
        self.beats.fetch_add(PHASES as u64, Ordering::AcqRel);
        self.advance_all();
    }

    /// The next phase's beat: that phase ticks.
    pub fn beat(&self) {
        let beat = self.beats.fetch_add(1, Ordering::AcqRel);
        self.phases[(beat % PHASES as u64) as usize].advance();
        self.epoch.advance();
    }

    /// Keep-alive ticks phase `phase` has had so far: one per interval.
    pub fn ticks(&self, phase: Phase) -> u64 {
        let beats = self.beats.load(Ordering::Acquire);
        (beats + (PHASES as u64 - 1) - u64::from(phase.0)) / PHASES as u64
    }

    /// Whole keep-alive intervals passed so far (every phase ticked that
    /// often, or once more): what a stream of parts of several phases
    /// counts its keep-alives by.
    pub fn intervals(&self) -> u64 {
        self.beats.load(Ordering::Acquire) / PHASES as u64
    }

    /// Beats every `interval / PHASES` (so each phase ticks every
    /// `interval`) until shutdown.
    pub fn spawn_ticker(self: &Arc<Self>, interval: Duration) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut timer = tokio::time::interval(interval / PHASES as u32);
            timer.tick().await;
            loop {
                tokio::select! {
                    _ = this.shutting_down() => return,
                    _ = timer.tick() => this.beat(),
                }
            }
        });
    }

    fn advance_all(&self) {
        for epoch in &self.phases {
            epoch.advance();
        }
        self.epoch.advance();
    }

    /// Begins the shutdown: streams send their last message and end,
    /// informers and background tasks stop. Idempotent.
    pub fn shut_down(&self) {
        self.shutting_down.store(true, Ordering::Release);
        self.shutdown.cancel();
        self.advance_all();
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
        self.advance_all();
    }

    /// Whether the hard stop came.
    pub fn is_hard_stopped(&self) -> bool {
        self.hard_stop.is_cancelled()
    }

    /// Resolves at the hard stop.
    pub async fn hard_stopped(&self) {
        self.hard_stop.cancelled().await
    }

    /// Resolves at `phase`'s next tick after `seen` (a value of
    /// [`Lifecycle::ticks`]), or at shutdown; returns its ticks then.
    pub async fn next_tick(&self, phase: Phase, seen: u64) -> u64 {
        self.phase_epoch(phase)
            .until(|| self.ticks(phase) != seen || self.is_shutting_down())
            .await;
        self.ticks(phase)
    }
}

/// A poll-based waiter's hold on one phase of the lifecycle (a
/// subscription's, a `/ws` socket control loop's): the phase's epoch it
/// last saw, the ticks it last saw, and its registration with the epoch,
/// taken out when it is dropped.
pub struct PhaseWait {
    lifecycle: Arc<Lifecycle>,
    seen: u64,
    /// The phase's ticks seen, modulo 2^32 (only ever compared for
    /// equality; 2^32 intervals are centuries): with the phase it fits the
    /// 8 bytes a `u64` alone took, and a subscription is no larger than
    /// with these fields loose in it.
    ticks: u32,
    phase: Phase,
    reg: Registration,
}

impl PhaseWait {
    /// Waits in `phase`, with the lifecycle's moves up to now seen.
    pub fn new(lifecycle: Arc<Lifecycle>, phase: Phase) -> PhaseWait {
        PhaseWait {
            seen: lifecycle.phase_epoch(phase).current(),
            ticks: lifecycle.ticks(phase) as u32,
            lifecycle,
            phase,
            reg: Registration::default(),
        }
    }

    pub fn lifecycle(&self) -> &Lifecycle {
        &self.lifecycle
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Ready once the phase's epoch moved since [`PhaseWait::ticked`] last
    /// looked (a tick of the phase, shutdown or the hard stop); until then
    /// `cx`'s waker is registered.
    pub fn poll_moved(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.lifecycle
            .phase_epoch(self.phase)
            .poll_moved(self.seen, &mut self.reg, cx)
    }

    /// Whether the phase's epoch moved since [`PhaseWait::ticked`] last
    /// looked.
    pub fn moved(&self) -> bool {
        self.lifecycle.phase_epoch(self.phase).current() != self.seen
    }

    /// Sees the epoch's moves up to now; true if the phase ticked since
    /// the last time this said so.
    pub fn ticked(&mut self) -> bool {
        self.seen = self.lifecycle.phase_epoch(self.phase).current();
        let ticks = self.lifecycle.ticks(self.phase) as u32;
        let ticked = ticks != self.ticks;
        self.ticks = ticks;
        ticked
    }

    /// Takes its waker out of the epoch: whoever holds it now watches the
    /// lifecycle for it (a batch writer). [`PhaseWait::poll_moved`]
    /// registers again.
    pub fn stop_waiting(&mut self) {
        self.lifecycle
            .phase_epoch(self.phase)
            .deregister(&mut self.reg);
    }
}

impl Drop for PhaseWait {
    fn drop(&mut self) {
        self.stop_waiting();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ticks_come_every_interval_until_shutdown() {
        let lifecycle = Lifecycle::new();
        lifecycle.spawn_ticker(Duration::from_secs(15));
        let phase = lifecycle.phase();
        let seen = lifecycle.ticks(phase);
        let wait = tokio::time::timeout(Duration::from_secs(16), lifecycle.next_tick(phase, seen));
        assert_eq!(wait.await.expect("a tick within the interval"), seen + 1);
        lifecycle.shut_down();
        assert!(lifecycle.is_shutting_down());
        // At shutdown a tick waiter returns at once, ticks unchanged.
        assert_eq!(lifecycle.next_tick(phase, seen + 1).await, seen + 1);
        tokio::time::timeout(Duration::from_secs(1), lifecycle.shutting_down())
            .await
            .expect("shutdown is seen by async waiters too");
    }

    /// Each beat ticks one phase; every phase ticks once per interval, in
    /// turn; and a phase's epoch moves only on its own beats, so a stream
    /// is woken once per interval, not on every beat.
    #[tokio::test(start_paused = true)]
    async fn each_phase_ticks_once_per_interval_at_its_own_beat() {
        let lifecycle = Lifecycle::new();
        let phases: Vec<Phase> = (0..2 * PHASES).map(|_| lifecycle.phase()).collect();
        // Round-robin: the first PHASES are all different, then again.
        assert_eq!(phases[0], phases[PHASES]);
        assert!((1..PHASES).all(|i| phases[i] != phases[0]));
        let epochs: Vec<u64> = phases[..PHASES]
            .iter()
            .map(|&p| lifecycle.phase_epoch(p).current())
            .collect();
        let start = tokio::time::Instant::now();
        lifecycle.spawn_ticker(Duration::from_secs(16));
        for beat in 1..=PHASES {
            // Halfway between beats (a beat a second).
            let at = start + Duration::from_millis(1000 * beat as u64 + 500);
            tokio::time::sleep_until(at).await;
            for (i, &phase) in phases[..PHASES].iter().enumerate() {
                let ticked = i < beat;
                assert_eq!(
                    lifecycle.ticks(phase),
                    u64::from(ticked),
                    "phase {i} after beat {beat}"
                );
                assert_eq!(
                    lifecycle.phase_epoch(phase).current() != epochs[i],
                    ticked,
                    "phase {i}'s epoch after beat {beat}"
                );
            }
        }
        // A whole interval at once (`tick`): every phase once more.
        lifecycle.tick();
        assert!(phases.iter().all(|&p| lifecycle.ticks(p) == 2));
    }

    /// A `PhaseWait` is woken by its phase's beat only, says "ticked" once
    /// per tick, and is woken (without a tick) at shutdown.
    #[test]
    fn a_phase_wait_is_woken_by_its_own_beat_and_ticks_once_per_tick() {
        let lifecycle = Lifecycle::new();
        // The first stream's phase is phase 0: the first beat's.
        let mut wait = PhaseWait::new(lifecycle.clone(), lifecycle.phase());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(wait.poll_moved(&mut cx).is_pending());
        lifecycle.beat();
        assert!(wait.moved() && wait.poll_moved(&mut cx).is_ready());
        assert!(wait.ticked(), "its beat is a tick");
        assert!(!wait.moved() && !wait.ticked(), "once per tick");
        for _ in 1..PHASES {
            lifecycle.beat();
        }
        assert!(!wait.moved(), "the other phases' beats are not its");
        assert!(wait.poll_moved(&mut cx).is_pending());
        lifecycle.shut_down();
        assert!(wait.poll_moved(&mut cx).is_ready());
        assert!(!wait.ticked(), "shutdown moves the epoch but is no tick");
        lifecycle.beat();
        assert!(wait.ticked(), "the next interval's beat is");
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
