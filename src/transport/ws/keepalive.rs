//! The WebSocket keep-alive, one for a single-stream socket (in its task
//! and parked with its batch writer) and for a `/ws` socket's control
//! loop: a ping at each tick of the socket's phase (`lifecycle::Phase`),
//! and the idle timeout, which closes a socket whose client sent nothing
//! for it. Both are looked at on the socket's ticks only, with no timer
//! per socket: the idle timeout is at least 2.5 keep-alive intervals
//! (`StreamConfig::effective_ws_idle_timeout`), so it is noticed up to an
//! interval late. Answering the client's pings is its socket's (a pong
//! is framed where the socket's other frames are).

use std::time::Duration;

use tokio::time::Instant;

use crate::lifecycle::{Lifecycle, Phase};

/// A socket's keep-alive: when its client was last heard, and the tick
/// of its phase it last pinged at.
pub(super) struct KeepAlive {
    heard: Instant,
    /// Modulo 2^32: only ever compared for equality (2^32 intervals are
    /// centuries), and with the phase it fits 8 bytes.
    pinged: u32,
    phase: Phase,
}

/// What a socket's keep-alive owes now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Beat {
    /// Nothing: its phase has not ticked since the last ping.
    Quiet,
    /// A ping: its phase ticked, and the client was heard within the idle
    /// timeout.
    Ping,
    /// The close: its client was not heard for the idle timeout. Said
    /// again until the socket closes (the tick is not taken).
    Idle,
}

impl KeepAlive {
    /// A keep-alive of a socket in `phase` whose client was just heard
    /// (its handshake); the ticks up to now are pinged for.
    pub(super) fn new(lifecycle: &Lifecycle, phase: Phase) -> KeepAlive {
        KeepAlive {
            heard: Instant::now(),
            pinged: lifecycle.ticks(phase) as u32,
            phase,
        }
    }

    /// The client sent a frame: the idle timeout starts again.
    pub(super) fn heard(&mut self) {
        self.heard = Instant::now();
    }

    /// What is owed now, with `idle_timeout`: the clock is read only once
    /// the socket's phase has ticked.
    pub(super) fn beat(&mut self, lifecycle: &Lifecycle, idle_timeout: Duration) -> Beat {
        let ticks = lifecycle.ticks(self.phase) as u32;
        if ticks == self.pinged {
            return Beat::Quiet;
        }
        if self.heard.elapsed() >= idle_timeout {
            return Beat::Idle;
        }
        self.pinged = ticks;
        Beat::Ping
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ping once per tick of the socket's phase; the close once the
    /// client has been quiet for the timeout, said until the socket acts
    /// on it; a client heard in time keeps it open.
    #[tokio::test(start_paused = true)]
    async fn a_ping_each_tick_and_the_close_once_the_client_is_quiet() {
        let lifecycle = Lifecycle::new();
        let phase = lifecycle.phase();
        let mut keepalive = KeepAlive::new(&lifecycle, phase);
        let timeout = Duration::from_secs(25);
        assert_eq!(keepalive.beat(&lifecycle, timeout), Beat::Quiet);
        lifecycle.tick();
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(keepalive.beat(&lifecycle, timeout), Beat::Ping);
        assert_eq!(
            keepalive.beat(&lifecycle, timeout),
            Beat::Quiet,
            "once a tick"
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        keepalive.heard();
        tokio::time::advance(Duration::from_secs(20)).await;
        lifecycle.tick();
        assert_eq!(
            keepalive.beat(&lifecycle, timeout),
            Beat::Ping,
            "heard 20 s ago"
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(
            keepalive.beat(&lifecycle, timeout),
            Beat::Quiet,
            "looked at on ticks only"
        );
        lifecycle.tick();
        assert_eq!(keepalive.beat(&lifecycle, timeout), Beat::Idle);
        assert_eq!(
            keepalive.beat(&lifecycle, timeout),
            Beat::Idle,
            "until the socket closes"
        );
    }
}
