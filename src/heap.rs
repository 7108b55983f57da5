//! Gives memory the process freed back to the operating system.
//!
//! glibc's allocator keeps what a burst of short-lived allocations freed
//! inside its arenas and, on its own, trims only the top of the main one.
//! A reconnect storm (every dashboard coming back after a deploy) is such a
//! burst: while each request is handled, actix holds ~22 KB for its
//! connection, freed once the stream takes its socket over. Without help
//! the process's resident memory, which is what a container's memory limit
//! counts, stayed near the burst's peak: 42 MB at 5,000 SSE subscribers,
//! 32 MB after `malloc_trim` (`loadtest/RESULTS.md`). A background task
//! therefore trims every [`TRIM_EVERY`]; a trim takes a few milliseconds,
//! off the runtime's threads.

use std::time::Duration;

use std::sync::Arc;

use crate::lifecycle::Lifecycle;

/// How often freed memory is given back.
pub const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Trims every [`TRIM_EVERY`] until shutdown.
pub fn spawn_trimmer(lifecycle: Arc<Lifecycle>) {
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(TRIM_EVERY);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        interval.tick().await;
        loop {
            tokio::select! {
                _ = lifecycle.shutting_down() => return,
                _ = interval.tick() => {
                    let _ = tokio::task::spawn_blocking(trim).await;
                }
            }
        }
    });
}

/// Returns the free pages of every arena to the operating system; true if
/// any was returned.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // The crate's one foreign call.
pub fn trim() -> bool {
    // SAFETY: malloc_trim takes no pointer and is thread-safe: it locks each
    // arena while it walks it.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Other allocators return memory by themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> bool {
    false
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    /// Resident memory of this process, in KiB.
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn freed_memory_between_live_blocks_goes_back_to_the_system() {
        // Blocks below the mmap threshold (so they live in an arena), each
        // followed by a small one that stays: once the big ones are freed,
        // every hole is walled in by live blocks, so glibc's own trimming
        // (of the arena's top) cannot return them; only a trim can.
        let blocks: Vec<(Vec<u8>, Vec<u8>)> = (0..1500)
            .map(|_| (vec![1u8; 60_000], vec![1u8; 64]))
            .collect();
        let with_blocks = rss_kib();
        let walls: Vec<Vec<u8>> = blocks.into_iter().map(|(_, wall)| wall).collect();
        let freed_only = rss_kib();
        assert!(super::trim(), "nothing was returned");
        let trimmed = rss_kib();
        drop(walls);
        assert!(
            trimmed + 40_000 < freed_only,
            "RSS {with_blocks} KiB with the blocks, {freed_only} KiB freed, {trimmed} KiB trimmed"
        );
    }
}
