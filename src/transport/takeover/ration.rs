//! A connection's ration of frames that do nothing: WebSocket pings,
//! pongs and empty fragments (`ws_read`), HTTP/2 frames beyond what the
//! connection's own traffic earns (`h2_guard`). Such frames cost the
//! server a read and a parse each and give it nothing to serve; a client
//! sending millions of them a second would hold a worker thread. A
//! well-behaved client sends a handful a minute (the pong to each of
//! kubefan's keep-alive pings, a browser's occasional PING or PRIORITY),
//! so each connection gets a burst of `per_minute` of them, refilled at
//! `per_minute` a minute; past that it is closed (WebSocket 1008, HTTP/2
//! GOAWAY `ENHANCE_YOUR_CALM`) and counted in
//! `kubefan_limits_hit_total{kind="idle_frames"}`.
//!
//! The budget is a generic cell rate (GCRA, as in ATM's traffic policing
//! and most HTTP rate limiters): one instant per connection, no counters
//! to refill.

use std::time::Duration;

use tokio::time::Instant;

/// The `kind` label frames past a connection's ration are counted under.
pub const IDLE_FRAMES: &str = "idle_frames";
/// ... and `/ws` subscriptions past a socket's ration of them
/// (`transport::ws::mux`).
pub const WS_SUBSCRIBES: &str = "ws_subscribes";

/// How far ahead of now a ration may be spent: a minute's allowance is
/// the burst.
const WINDOW: Duration = Duration::from_secs(60);

/// One connection's ration (see the module documentation); 32 bytes, kept
/// by every WebSocket.
#[derive(Debug, Clone)]
pub struct Ration {
    /// Time one frame's allowance takes to come back.
    interval: Duration,
    /// When the allowance spent so far is back in full.
    full_at: Instant,
}

impl Ration {
    /// A ration of `per_minute` frames in a burst, refilled at
    /// `per_minute` a minute (at least one).
    pub fn per_minute(per_minute: u32) -> Ration {
        Ration {
            interval: WINDOW / per_minute.max(1),
            full_at: Instant::now(),
        }
    }

    /// Spends one frame's allowance at `now`; false if none is left (the
    /// allowance is not spent then).
    pub fn spend(&mut self, now: Instant) -> bool {
        self.spend_many(now, 1)
    }

    /// Spends `n` allowances at once (at most the whole burst: a ration
    /// smaller than `n` still lets one such spend through a minute);
    /// false, spending nothing, if fewer are left.
    pub fn spend_many(&mut self, now: Instant, n: u32) -> bool {
        let cost = self.interval.saturating_mul(n.max(1)).min(WINDOW);
        let full_at = self.full_at.max(now) + cost;
        if full_at > now + WINDOW {
            return false;
        }
        self.full_at = full_at;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_the_ration_passes_then_one_frame_per_interval() {
        let mut ration = Ration::per_minute(60);
        let start = Instant::now();
        for i in 0..60 {
            assert!(ration.spend(start), "frame {i} of the burst");
        }
        assert!(!ration.spend(start), "the 61st at once is refused");
        assert!(!ration.spend(start), "and a refusal spends nothing");
        tokio::time::advance(Duration::from_millis(999)).await;
        assert!(!ration.spend(Instant::now()), "not yet a second later");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(ration.spend(Instant::now()), "one a second comes back");
        assert!(!ration.spend(Instant::now()));
        // A quiet minute gives the whole burst back, and no more.
        tokio::time::advance(Duration::from_secs(3600)).await;
        let now = Instant::now();
        assert_eq!((0..100).filter(|_| ration.spend(now)).count(), 60);
    }

    #[tokio::test(start_paused = true)]
    async fn several_allowances_are_spent_at_once_or_not_at_all() {
        let mut ration = Ration::per_minute(60);
        let now = Instant::now();
        assert!(ration.spend_many(now, 50));
        assert!(!ration.spend_many(now, 11), "ten are left");
        assert!(ration.spend_many(now, 10));
        assert!(!ration.spend(now));
        // More than the burst costs the whole burst: one a minute.
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(ration.spend_many(Instant::now(), 1000));
        assert!(!ration.spend(Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_ration_of_zero_still_lets_one_frame_through_a_minute() {
        let mut ration = Ration::per_minute(0);
        assert!(ration.spend(Instant::now()));
        assert!(!ration.spend(Instant::now()));
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(ration.spend(Instant::now()));
    }
}
