//! Waking many waiting subscribers at once, cheaply.
//!
//! An [`Epoch`] is a counter and the wakers of everyone waiting for it to
//! move on. A waiter registers once per epoch (a subscription that is
//! polled again for another reason does not register twice), and
//! [`Epoch::advance`] moves the counter and wakes each registered waiter
//! exactly once. A subscription that goes away takes its waker out, so a
//! quiet epoch holds no waker of a finished task. Each hub has one (its
//! changes), and the gateway's lifecycle one (ticks
//! and shutdown).
//!
//! This replaces a `tokio::sync::watch` plus `select!` per subscription,
//! which registered and unregistered three waiters (change, keep-alive
//! tick, shutdown) under three locks on every event for every subscriber:
//! the largest user-space cost of a delivery in the load test's profile.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use slab::Slab;

#[derive(Default)]
pub struct Epoch {
    epoch: AtomicU64,
    waiters: Mutex<Waiters>,
}

#[derive(Default)]
struct Waiters {
    current: Slab<Waker>,
    /// An empty slab with room, swapped in by `advance` so that the
    /// next epoch's registrations do not grow a fresh one.
    spare: Slab<Waker>,
}

/// [`Epoch::poll_moved`] with a [`Registration`] taken out on drop.
pub struct Waiting<'a> {
    epoch: &'a Epoch,
    reg: Registration,
}

impl Waiting<'_> {
    /// Ready once the epoch is past `seen` ([`Epoch::poll_moved`]).
    pub fn poll_moved(&mut self, seen: u64, cx: &mut Context<'_>) -> Poll<()> {
        self.epoch.poll_moved(seen, &mut self.reg, cx)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.epoch.deregister(&mut self.reg);
    }
}

/// One waiter's place in an epoch: the epoch it registered in and its key.
/// Whoever holds one must [`Epoch::deregister`] it when done waiting (a
/// subscription does in its `Drop`; [`Epoch::until`] does itself).
#[derive(Default)]
pub struct Registration(Option<(u64, usize)>);

impl Epoch {
    /// The current value: a waiter that saw this one waits for the next.
    pub fn current(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, Waiters> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Moves the epoch on and wakes every registered waiter.
    pub fn advance(&self) {
        let mut taken = {
            let mut waiters = self.lock();
            // Under the lock: a waiter that checks the epoch under the
            // lock either sees the new one or is in the taken set.
            self.epoch.fetch_add(1, Ordering::AcqRel);
            let spare = std::mem::take(&mut waiters.spare);
            std::mem::replace(&mut waiters.current, spare)
        };
        // Woken outside the lock; waking only schedules a task.
        for waker in taken.drain() {
            waker.wake();
        }
        let mut waiters = self.lock();
        if waiters.spare.capacity() < taken.capacity() {
            waiters.spare = taken;
        }
    }

    /// Ready once the epoch is past `seen`; until then `cx`'s waker is
    /// registered (once per epoch, unless the waker changes).
    pub fn poll_moved(&self, seen: u64, reg: &mut Registration, cx: &mut Context<'_>) -> Poll<()> {
        if self.current() != seen {
            return Poll::Ready(());
        }
        let mut guard = self.lock();
        let waiters = &mut guard.current;
        let epoch = self.epoch.load(Ordering::Acquire);
        if epoch != seen {
            return Poll::Ready(());
        }
        // Registered in this epoch: the waker is in the slab (only
        // `advance`, which moves the epoch, and `deregister`, which clears
        // `reg`, take it out), and is replaced only if it changed. One
        // waker clone per registration, none per poll after it.
        match reg
            .0
            .and_then(|(e, key)| (e == epoch).then(|| waiters.get_mut(key)).flatten())
        {
            Some(waker) => {
                if !waker.will_wake(cx.waker()) {
                    waker.clone_from(cx.waker());
                }
            }
            None => {
                let key = waiters.insert(cx.waker().clone());
                reg.0 = Some((epoch, key));
            }
        }
        Poll::Pending
    }

    /// Resolves once `done` holds, checking it now and whenever the epoch
    /// moves. Cancel-safe: a dropped wait leaves no waker behind.
    pub async fn until(&self, mut done: impl FnMut() -> bool) {
        let mut waiting = self.waiting();
        std::future::poll_fn(|cx| {
            loop {
                let seen = self.current();
                if done() {
                    return Poll::Ready(());
                }
                if waiting.poll_moved(seen, cx).is_pending() {
                    return Poll::Pending;
                }
            }
        })
        .await
    }

    /// A registration with this epoch that deregisters itself when
    /// dropped, for a waiter whose wait may be dropped (an `async fn`).
    pub fn waiting(&self) -> Waiting<'_> {
        Waiting {
            epoch: self,
            reg: Registration::default(),
        }
    }

    /// Takes `reg`'s waker out, if it is still waiting in this epoch.
    pub fn deregister(&self, reg: &mut Registration) {
        if let Some((epoch, key)) = reg.0.take() {
            let mut waiters = self.lock();
            // A key from an earlier epoch was drained by `advance` and
            // may belong to someone else now.
            if self.epoch.load(Ordering::Acquire) == epoch {
                waiters.current.try_remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_waiter_registers_once_per_epoch_and_is_woken_once() {
        let epoch = Epoch::default();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let mut reg = Registration::default();
        let seen = epoch.current();
        for _ in 0..5 {
            assert!(epoch.poll_moved(seen, &mut reg, &mut cx).is_pending());
        }
        assert_eq!(
            epoch.lock().current.len(),
            1,
            "polled five times, registered once"
        );
        epoch.advance();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(epoch.poll_moved(seen, &mut reg, &mut cx).is_ready());
        assert!(epoch.lock().current.is_empty());
    }

    #[test]
    fn a_waiter_polled_with_another_waker_is_woken_through_that_one_only() {
        let epoch = Epoch::default();
        let (first, second) = (
            Arc::new(Count(AtomicUsize::new(0))),
            Arc::new(Count(AtomicUsize::new(0))),
        );
        let (first_waker, second_waker) = (Waker::from(first.clone()), Waker::from(second.clone()));
        let mut reg = Registration::default();
        let seen = epoch.current();
        let poll = |waker: &Waker, reg: &mut Registration| {
            epoch.poll_moved(seen, reg, &mut Context::from_waker(waker))
        };
        assert!(poll(&first_waker, &mut reg).is_pending());
        assert!(poll(&second_waker, &mut reg).is_pending());
        assert_eq!(
            epoch.lock().current.len(),
            1,
            "one place, its waker replaced"
        );
        epoch.advance();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn until_returns_when_the_condition_holds_and_leaves_no_waker() {
        let epoch = Arc::new(Epoch::default());
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waiter = tokio::spawn({
            let (epoch, flag) = (epoch.clone(), flag.clone());
            async move { epoch.until(|| flag.load(Ordering::Acquire)).await }
        });
        while epoch.lock().current.is_empty() {
            tokio::task::yield_now().await;
        }
        epoch.advance();
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "moved, but the condition is false");
        flag.store(true, Ordering::Release);
        epoch.advance();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .unwrap();
        // A wait given up leaves nothing registered.
        let gave_up =
            tokio::time::timeout(std::time::Duration::from_millis(1), epoch.until(|| false)).await;
        assert!(gave_up.is_err());
        assert!(epoch.lock().current.is_empty());
    }

    #[test]
    fn a_departed_waiter_leaves_nothing_behind_and_stale_keys_are_ignored() {
        let epoch = Epoch::default();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        let (mut a, mut b) = (Registration::default(), Registration::default());
        let seen = epoch.current();
        let _ = epoch.poll_moved(seen, &mut a, &mut cx);
        epoch.deregister(&mut a);
        assert!(epoch.lock().current.is_empty());
        // `b` registered in an old epoch; its key may be reused since.
        let _ = epoch.poll_moved(seen, &mut b, &mut cx);
        epoch.advance();
        let seen = epoch.current();
        let _ = epoch.poll_moved(seen, &mut a, &mut cx);
        epoch.deregister(&mut b);
        assert_eq!(epoch.lock().current.len(), 1, "a's new place is kept");
    }
}
