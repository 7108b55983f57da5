//! A credential's expiry that can move: a signed-in session refreshed
//! while its streams are open. Every stream of one session on this
//! replica holds the same lease; a refresh moves it, and a stream whose
//! timer fires first asks the lease whether it still ends then
//! (`hub::subscription`, the `/ws` socket), so no stream is woken by the
//! refresh itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Debug)]
pub struct Lease {
    /// Milliseconds since the Unix epoch.
    until_ms: AtomicU64,
}

impl Lease {
    pub fn new(until: SystemTime) -> Lease {
        Lease {
            until_ms: AtomicU64::new(millis(until)),
        }
    }

    /// When it ends now.
    pub fn until(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.until_ms.load(Ordering::Acquire))
    }

    /// Moves the end to `until`, if that is later.
    pub fn extend(&self, until: SystemTime) {
        self.until_ms.fetch_max(millis(until), Ordering::AcqRel);
    }

    /// [`Lease::until`] on tokio's clock, for `sleep_until`, if it is
    /// still ahead: what a stream whose timer fired waits for instead of
    /// ending.
    pub fn later(&self) -> Option<tokio::time::Instant> {
        let until = self.until();
        if until <= SystemTime::now() {
            return None;
        }
        deadline_of(until)
    }
}

/// `at` on tokio's clock; `None` for an instant too far away for it.
pub fn deadline_of(at: SystemTime) -> Option<tokio::time::Instant> {
    let left = at.duration_since(SystemTime::now()).unwrap_or_default();
    tokio::time::Instant::now().checked_add(left)
}

fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_only_moves_later() {
        let now = SystemTime::now();
        let lease = Lease::new(now + Duration::from_secs(60));
        lease.extend(now + Duration::from_secs(30));
        assert!(lease.until() >= now + Duration::from_secs(59));
        lease.extend(now + Duration::from_secs(600));
        assert!(lease.until() >= now + Duration::from_secs(599));
        assert!(lease.later().is_some());
        assert!(Lease::new(now - Duration::from_secs(1)).later().is_none());
    }
}
