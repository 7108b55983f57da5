//! The allocator, and giving memory the process freed back to the
//! operating system.
//!
//! kubefan allocates with jemalloc (feature `jemalloc`, on by default).
//! What decided it is memory per subscriber (`loadtest/RESULTS.md`,
//! 2026-11-25): while each request is handled, actix holds ~22 KB for its
//! connection, freed once the stream takes its socket over, and what a
//! stream keeps (its task, its socket's registration: ~1 KB) is allocated
//! in between. glibc's allocator keeps those small blocks in the pages the
//! freed buffers were in, so the pages stay resident even after
//! `malloc_trim`: 2.8–3.1 KB of RSS per SSE subscriber at 10,000. jemalloc
//! keeps blocks of each size class apart from larger ones, so the freed
//! buffers' pages go back whole: 1.0 KB per subscriber, the same build.
//! What the hub keeps for long (its log's frames, its cache's JSON) is the
//! exception, allocated by glibc at its exact length
//! (`hub::encode::KeptBuf`): jemalloc's size classes held 1.4–1.5 times
//! that JSON, glibc 1.1–1.2.
//!
//! Either allocator keeps what a burst freed until asked or until its own
//! decay, and a reconnect storm (every dashboard coming back after a
//! deploy) is such a burst; a container's memory limit counts what it
//! keeps. A background task therefore gives it back every [`TRIM_EVERY`]
//! (a few milliseconds, off the runtime's threads): jemalloc purges every
//! arena and glibc trims its own. Built with `--no-default-features`
//! (for heaptrack, which sees only malloc's callers), glibc allocates
//! everything.

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

/// jemalloc, unless built without it.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Returns the free pages of every arena of both allocators to the
/// operating system (jemalloc's, and glibc's, which holds the hub's kept
/// buffers: `hub::encode::KeptBuf`); true if either did.
pub fn trim() -> bool {
    let jemalloc = purge_jemalloc();
    trim_glibc() || jemalloc
}

#[cfg(feature = "jemalloc")]
#[allow(unsafe_code)] // One of the crate's three foreign calls.
fn purge_jemalloc() -> bool {
    // `arena.<i>.purge` with <i> = MALLCTL_ARENAS_ALL (4096): every arena's
    // unused dirty pages (jemalloc(3), MALLCTL NAMESPACE).
    const PURGE_ALL: &std::ffi::CStr = c"arena.4096.purge";
    let none = std::ptr::null_mut();
    // SAFETY: a NUL-terminated name, and no old or new value (null
    // pointers, length 0), which is how this control is called; jemalloc
    // locks each arena while it purges it.
    unsafe { tikv_jemalloc_sys::mallctl(PURGE_ALL.as_ptr(), none, none.cast(), none, 0) == 0 }
}

#[cfg(not(feature = "jemalloc"))]
fn purge_jemalloc() -> bool {
    false
}

/// Gives glibc's allocator one arena, before the process starts its
/// threads. glibc holds only the hub's kept buffers (its log's frames, its
/// cache's JSON: `hub::encode::KeptBuf`), and by default each thread gets
/// its own arena, to which a block goes back when freed, whichever thread
/// frees it. A list is ingested on a blocking thread and later versions are
/// encoded on the runtime's, so the initial list's arena only ever emptied:
/// the holes each replaced object left there were never filled, and at
/// 150,000 pods and 200 changes/s glibc's free memory grew 5.5 MB every 10
/// s with no viewer, 1.9 MB with one arena (`loadtest/RESULTS.md`,
/// 2026-12-05). The lock one arena shares is taken a few hundred times a
/// second (once per event), by threads that allocate everything else from
/// jemalloc.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // One of the crate's three foreign calls.
pub fn one_glibc_arena() {
    // SAFETY: mallopt takes two integers; M_ARENA_MAX limits the arenas
    // made from now on (mallopt(3)).
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Other C libraries' allocators have no such arenas.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn one_glibc_arena() {}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // One of the crate's three foreign calls.
fn trim_glibc() -> bool {
    // SAFETY: malloc_trim takes no pointer and is thread-safe: it locks each
    // arena while it walks it.
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Other C libraries' allocators return memory by themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_glibc() -> bool {
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

    /// Blocks below glibc's mmap threshold (so they live in an arena),
    /// each followed by a small one that stays: once the big ones are
    /// freed, every hole is walled in by live blocks, so the allocator's
    /// own trimming (of an arena's top) cannot return them; only a trim
    /// can. `alloc` makes a block of the given size, filled.
    fn walled_holes_are_returned<T>(alloc: impl Fn(usize) -> T) {
        let blocks: Vec<(T, T)> = (0..1500).map(|_| (alloc(60_000), alloc(64))).collect();
        let with_blocks = rss_kib();
        let walls: Vec<T> = blocks.into_iter().map(|(_, wall)| wall).collect();
        let freed_only = rss_kib();
        assert!(super::trim(), "nothing was returned");
        let trimmed = rss_kib();
        drop(walls);
        assert!(
            trimmed + 40_000 < freed_only,
            "RSS {with_blocks} KiB with the blocks, {freed_only} KiB freed, {trimmed} KiB trimmed"
        );
    }

    // One test: the process's RSS is what both cases measure.
    #[test]
    fn freed_memory_between_live_blocks_goes_back_to_the_system() {
        walled_holes_are_returned(|len| vec![1u8; len]);
        // The hub's buffers come from glibc even when jemalloc is the
        // process's allocator: a trim returns what they freed as well.
        walled_holes_are_returned(|len| crate::hub::encode::KeptBuf::copy(&vec![1u8; len]));
    }
}
