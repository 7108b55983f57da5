//! A subscription: one client's cursor into a hub, seen through a view.
//!
//! It turns the hub's log into a sequence of [`Item`]s that every transport
//! frames in its own way: a snapshot (in chunks, then its end), deltas,
//! progress marks, keep-alives, resets. It owns the slow-consumer policy: a
//! cursor that falls off the log's tail is lapped and gets a [`Item::Reset`]
//! followed by a fresh snapshot, never a silent gap. It holds no event
//! buffer of its own: memory per subscriber is the cursor plus what the
//! transport has in flight.
//!
//! - `item`: what it yields ([`Item`], [`Delivery`], [`ResetReason`],
//!   [`Denial`]);
//! - `request`: what it is started with ([`Subscribe`],
//!   [`SubscriptionContext`]) and refused with;
//! - `scoped`: following an access that changes while it is open;
//! - `step`: one read of the log ([`Step`], [`Advance`]) and what a batch
//!   writer holding the subscription must watch ([`Batchable`]).

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::{Instant, Sleep};

mod item;
mod request;
mod scoped;
mod step;

pub use item::{Delivery, Denial, Item, ResetReason};
pub use request::{Subscribe, SubscriptionContext, SubscriptionError};
use scoped::Scoped;
pub use step::{Advance, Batchable, Step};

use super::scope::{scope_tag, shown};
use super::{Hub, Joined, Lapped, Snapshot, SubscriberGuard, View};
use crate::auth::lease::Lease;
use crate::epoch::Registration;
use crate::lifecycle::{Phase, PhaseWait};
use crate::metrics::Transport;

/// Snapshot objects handed out per item.
const SNAPSHOT_CHUNK: usize = 256;
/// ... and at most about this many bytes of their JSON: an item becomes
/// one buffer per subscriber until the socket has taken it.
const SNAPSHOT_CHUNK_BYTES: usize = 64 * 1024;
/// Events read from the log per item.
const READ_BATCH: usize = 256;

pub struct Subscription {
    hub: Arc<Hub>,
    view: Arc<View>,
    cursor: u64,
    /// Where this waits for the hub's changes, and the epoch it last read at.
    hub_wait: Registration,
    hub_seen: u64,
    /// Keep-alive ticks (at its phase's beats) and shutdown.
    life: PhaseWait,
    /// Boxed: a subscription streams far longer than it snapshots.
    snapshot: Option<Box<SnapshotProgress>>,
    /// A snapshot's join deferred until this is done (a consistent read
    /// waited for in the stream's own task: [`Subscription::start_after`]).
    join_after: Option<BoxFuture<'static, ()>>,
    reset: Option<ResetReason>,
    /// The last position told to the client (an id it could resume from).
    sent_rv: u64,
    /// `sent_rv` at the last keep-alive tick: a stream that told the
    /// client a position since is not idle, and owes that tick nothing.
    ticked_rv: u64,
    /// The position reached (events read, filtered or not).
    pos_rv: u64,
    finished: bool,
    /// When the subscriber's credentials expire.
    expires: Option<Instant>,
    /// A timer for `expires`, while this subscription's own task waits
    /// (boxed: most subscriptions have none). A batch writer follows the
    /// deadlines of the streams it holds in one timer structure of its
    /// own, so a parked stream has none ([`Subscription::stop_waiting`]).
    expiry_timer: Option<Pin<Box<Sleep>>>,
    /// A signed-in session's lease: when `expires` comes, the end it holds
    /// now.
    lease: Option<Arc<Lease>>,
    /// Where its namespaces come from, when they can change.
    scoped: Option<Box<Scoped>>,
    /// A progress mark is owed (the id's tag changed).
    announce: bool,
    transport: Transport,
    _counted: SubscriberGuard,
}

struct SnapshotProgress {
    /// The hub's objects as they were at the join (`hub::Snapshot`),
    /// read a chunk at a time.
    objects: Snapshot,
    rv: u64,
    /// Objects and encoded bytes handed out so far (for metrics).
    sent_objects: u64,
    sent_bytes: u64,
}

/// The longest a resume from a position ahead of the hub waits for the
/// hub to reach it before it becomes a RESET: kube-apiserver's watch cache
/// waits as long for a resourceVersion it has not seen (`blockTimeout` in
/// `staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go`).
pub const AHEAD_WAIT: Duration = Duration::from_secs(3);

impl Subscription {
    /// Waits (at most the sync timeout) for the hub's first list, then
    /// joins it at the resume position (waiting at most [`AHEAD_WAIT`]
    /// for the hub to reach a position ahead of it) or with a snapshot.
    pub async fn start(
        hub: Arc<Hub>,
        request: Subscribe,
        cx: &SubscriptionContext,
    ) -> Result<Subscription, SubscriptionError> {
        Subscription::start_with(hub, request, cx, None).await
    }

    /// [`Subscription::start`] of a snapshot (no resume position) whose
    /// join waits until `wait` is done, polled by whoever polls the
    /// subscription: a consistent read's wait for the upstream's
    /// resourceVersion (`transport::kube::consistent`) is then the
    /// stream's, not its request handler's. An actix handler that
    /// awaits leaves memory behind that outlives its request (about
    /// 1.3 KB a request of a herd that waited together:
    /// loadtest/RESULTS.md, 2026-12-04); a handler that starts this
    /// returns at once. The stream is not batchable before the join.
    pub async fn start_after(
        hub: Arc<Hub>,
        request: Subscribe,
        cx: &SubscriptionContext,
        wait: BoxFuture<'static, ()>,
    ) -> Result<Subscription, SubscriptionError> {
        debug_assert!(request.resume.is_none(), "a deferred join is a snapshot");
        Subscription::start_with(hub, request, cx, Some(wait)).await
    }

    async fn start_with(
        hub: Arc<Hub>,
        request: Subscribe,
        cx: &SubscriptionContext,
        join_after: Option<BoxFuture<'static, ()>>,
    ) -> Result<Subscription, SubscriptionError> {
        let Subscribe {
            mut spec,
            resume,
            transport,
            expires,
            lease,
            access,
        } = request;
        let SubscriptionContext {
            sync_timeout,
            lifecycle,
            ..
        } = cx.clone();
        // Counted in before waiting, so an idle stop cannot close the hub
        // between this check and the join.
        let counted = hub.enter()?;
        if !hub.wait_synced(sync_timeout).await {
            return Err(SubscriptionError::NotSynced(hub.name().to_string()));
        }
        if let Some(reason) = hub.closed() {
            return Err(SubscriptionError::Closed(hub.name().to_string(), reason));
        }
        let scoped = match access {
            None => None,
            Some(access) => {
                let seen = access.source.changes().current();
                let shown_now = shown(&access.requested, &access.source.scope())
                    .map_err(SubscriptionError::Denied)?;
                let tag = scope_tag(&access.requested, &shown_now);
                spec.filter.namespaces = shown_now;
                Some(Box::new(Scoped {
                    access,
                    seen,
                    wait: Registration::default(),
                    tag,
                    pending: None,
                }))
            }
        };
        hub.metrics().subscriber_joined(hub.name(), transport);
        let view = hub.view(spec);
        let phase = lifecycle.phase();
        let mut sub = Subscription {
            hub,
            view,
            cursor: 0,
            hub_wait: Registration::default(),
            hub_seen: 0,
            life: PhaseWait::new(lifecycle, phase),
            snapshot: None,
            join_after: None,
            reset: None,
            sent_rv: 0,
            ticked_rv: 0,
            pos_rv: 0,
            finished: false,
            expires,
            expiry_timer: None,
            lease,
            scoped,
            announce: false,
            transport,
            _counted: counted,
        };
        // A position taken under other namespaces than these cannot be
        // resumed: the client's state would keep what it may no longer see.
        let tag = sub.scoped.as_ref().and_then(|s| s.tag.clone());
        let resumable = resume.as_ref().filter(|p| p.tag == tag).map(|p| p.rv);
        if let Some(rv) = resumable
            && rv > sub.hub.resource_version()
        {
            // A position this hub has not reached: another replica's, or
            // this process's before a restart while its new log replays
            // from a saved position (`upstream::positions`). Waiting a
            // little turns what would be a RESET into a resume.
            sub.hub.wait_for_rv(rv, AHEAD_WAIT.min(sync_timeout)).await;
        }
        match join_after {
            Some(wait) => sub.join_after = Some(wait),
            None => sub.join(resumable),
        }
        if resume.is_some() && resumable.is_none() {
            sub.reset = Some(ResetReason::AccessChanged);
        }
        Ok(sub)
    }

    /// The namespaces this subscription shows now (empty: all).
    pub fn namespaces(&self) -> Vec<String> {
        self.view.spec().filter.namespaces.clone()
    }

    /// The tag this stream's ids carry (see `hub::scope`).
    pub fn id_tag(&self) -> Option<&str> {
        self.scoped.as_ref().and_then(|s| s.tag.as_deref())
    }

    fn join(&mut self, resume: Option<u64>) {
        let view = &self.view;
        match self.hub.join(resume, &view.spec().filter) {
            Joined::Resumed { cursor, rv } => {
                self.cursor = cursor;
                self.sent_rv = rv;
                self.pos_rv = rv;
            }
            Joined::Snapshot {
                cursor,
                objects,
                rv,
                resume_failed,
            } => {
                self.cursor = cursor;
                // The snapshot's end sets the position: a reset's is no
                // later than the one reached before it if the upstream
                // rewound (an etcd restore), and a position of the old
                // timeline must not be told (nor resumed from) after it.
                self.pos_rv = 0;
                if resume_failed {
                    self.reset = Some(ResetReason::Expired);
                }
                self.snapshot = Some(Box::new(SnapshotProgress {
                    objects,
                    rv,
                    sent_objects: 0,
                    sent_bytes: 0,
                }));
            }
        }
    }

    /// The resource this subscription reads.
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// The next item, or `None` once the stream is over.
    pub async fn next(&mut self) -> Option<Item> {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    /// The next item, `None` once the stream is over; `Pending` (with
    /// `cx`'s waker registered for whatever can end the wait) while there
    /// is none. A subscription has no `async` state of its own (but a
    /// deferred join's wait, dropped once done): what it waits for is in
    /// its fields, so the task that writes it is the only state a stream
    /// has (`loadtest/RESULTS.md`, memory per subscriber).
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        if self.finished {
            return Poll::Ready(None);
        }
        let ready = |item| Poll::Ready(Some(item));
        loop {
            // Before anything else: nothing is sent past the expiry.
            if let Some(at) = self.expires
                && Instant::now() >= at
            {
                // A refreshed session moved its end: wait for that instead.
                match self.lease.as_ref().and_then(|lease| lease.later()) {
                    Some(later) => self.expires = Some(later),
                    _ => {
                        self.finished = true;
                        return ready(Item::Denied(Denial::expired()));
                    }
                }
            }
            if let Some(denial) = self.follow_scope() {
                self.finished = true;
                return ready(Item::Denied(denial));
            }
            if let Some(wait) = &mut self.join_after {
                ready!(wait.as_mut().poll(cx));
                self.join_after = None;
                self.join(None);
            }
            if let Some(reason) = self.reset.take() {
                self.hub.metrics().reset(self.hub.name(), reason.as_str());
                return ready(Item::Reset(reason));
            }
            if let Some(snap) = &mut self.snapshot {
                let view = &self.view;
                let chunk = snap
                    .objects
                    .next_chunk(SNAPSHOT_CHUNK, SNAPSHOT_CHUNK_BYTES, &|o| view.prefilter(o));
                if !chunk.is_empty() || !snap.objects.is_done() {
                    let frames = self.view.snapshot(&chunk);
                    if frames.is_empty() {
                        // Nothing kept of a few thousand objects: the
                        // others of this thread first (a filter that
                        // keeps few of 150,000 must not hold it).
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                    snap.sent_objects += frames.len() as u64;
                    snap.sent_bytes += frames.iter().map(|f| f.len() as u64).sum::<u64>();
                    return ready(Item::Snapshot(frames));
                }
                let rv = snap.rv;
                let (objects, bytes) = (snap.sent_objects, snap.sent_bytes);
                self.snapshot = None;
                self.sent_rv = rv;
                self.pos_rv = self.pos_rv.max(rv);
                self.hub
                    .metrics()
                    .snapshot_served(self.hub.name(), self.transport);
                self.hub
                    .metrics()
                    .snapshot_size(self.hub.name(), objects, bytes);
                return ready(Item::SnapshotEnd { rv });
            }
            if self.life.lifecycle().is_shutting_down() {
                self.finished = true;
                return ready(Item::Shutdown);
            }

            if let Some(reason) = self.hub.closed() {
                self.finished = true;
                return ready(Item::Closed(reason));
            }
            if self.announce {
                // The id's tag changed: tell the client where it is now.
                self.announce = false;
                self.sent_rv = self.pos_rv;
                return ready(Item::Progress { rv: self.pos_rv });
            }

            // Seen before reading: a change after this point wakes us.
            self.hub_seen = self.hub.changes().current();
            match Step::read(&self.hub, &self.view, self.cursor) {
                Err(Lapped) => {
                    self.lapped();
                    continue;
                }
                Ok(step) => {
                    self.took(&step.advance);
                    if !step.deliveries.is_empty() {
                        return ready(Item::Events(step.deliveries));
                    }
                    if step.advance.caught_up.is_none() {
                        continue;
                    }
                }
            }
            if let Some(namespaces) = self.scoped.as_mut().and_then(|s| s.pending.take()) {
                match self.rescope(&namespaces) {
                    Some(changed) if !changed.is_empty() => return ready(Item::Events(changed)),
                    Some(_) => {}
                    // An event came in meanwhile: read it first.
                    None => {
                        if let Some(scoped) = &mut self.scoped {
                            scoped.pending = Some(namespaces);
                        }
                    }
                }
                continue;
            }

            // Caught up: wait for the hub to move, a tick, shutdown, the
            // credentials' expiry or a change of scope.
            let moved = ready!(self.poll_wait(cx));
            if moved && let Some(item) = self.tick() {
                return ready(item);
            }
        }
    }

    /// What a keep-alive tick this subscription has not seen owes its
    /// client: a progress mark if its position moved past the last one
    /// told (events it did not show); nothing if it told the client a
    /// position since the tick before (it is not idle); else a
    /// keep-alive. `None` if it saw every tick, or the gateway is shutting
    /// down (the stream's end is owed instead).
    ///
    /// So a stream that is sent events is sent no keep-alives: otherwise
    /// a tick under load is a write to every stream, queued ahead of the
    /// next change's deliveries (measured in `loadtest/RESULTS.md`,
    /// "keep-alives only to idle streams"). A stream is still never silent
    /// for two keep-alive intervals. Its ticks come at its phase's beats
    /// ([`crate::lifecycle::Phase`]), once per interval, so the streams
    /// of a writer do not all tick at once.
    ///
    /// The lifecycle's moves up to now are seen after it. Asked by the
    /// subscription's own task when the lifecycle moves, and by a batch
    /// writer for the caught-up streams it holds
    /// (`transport::takeover::batch`), after [`Subscription::took`] of
    /// what it sent them.
    pub fn tick(&mut self) -> Option<Item> {
        if !self.life.ticked() || self.life.lifecycle().is_shutting_down() {
            return None;
        }
        if self.pos_rv > self.sent_rv {
            self.sent_rv = self.pos_rv;
            self.ticked_rv = self.sent_rv;
            return Some(Item::Progress { rv: self.pos_rv });
        }
        if self.sent_rv != self.ticked_rv {
            self.ticked_rv = self.sent_rv;
            return None;
        }
        Some(Item::KeepAlive)
    }

    /// Its cursor fell off the log: a fresh snapshot, announced as a reset.
    fn lapped(&mut self) {
        self.hub.metrics().lapped(self.hub.name());
        self.join(None);
        self.reset = Some(ResetReason::Lapped);
    }

    /// Moves this subscription past `step` (read from its cursor): its
    /// deliveries were, or are being, sent.
    pub fn took(&mut self, step: &Advance) {
        self.cursor = step.cursor;
        if let Some(rv) = step.read_rv {
            self.pos_rv = self.pos_rv.max(rv);
        }
        if let Some(rv) = step.sent_rv {
            self.sent_rv = rv;
        }
        if let Some(rv) = step.caught_up {
            self.pos_rv = self.pos_rv.max(rv);
        }
    }

    /// When in each keep-alive interval it ticks: a WebSocket's ping goes
    /// with its subscription's tick.
    pub fn phase(&self) -> Phase {
        self.life.phase()
    }

    /// The view this subscription sees its hub through.
    pub fn view(&self) -> &Arc<View> {
        &self.view
    }

    /// Ready once something this subscription waits for moved: true if the
    /// lifecycle did (a tick or shutdown), false for the hub, the
    /// credentials' expiry or a change of scope. Until then every source's
    /// waker is registered.
    fn poll_wait(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        if let Some(at) = self.expires {
            let timer = self
                .expiry_timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
            if timer.deadline() != at {
                timer.as_mut().reset(at);
            }
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(false);
            }
        }
        if let Some(scoped) = &mut self.scoped
            && scoped
                .access
                .source
                .changes()
                .poll_moved(scoped.seen, &mut scoped.wait, cx)
                .is_ready()
        {
            return Poll::Ready(false);
        }
        let hub = self
            .hub
            .changes()
            .poll_moved(self.hub_seen, &mut self.hub_wait, cx);
        let lifecycle = self.life.poll_moved(cx);
        match (hub, lifecycle) {
            (Poll::Pending, Poll::Pending) => Poll::Pending,
            (_, lifecycle) => Poll::Ready(lifecycle.is_ready()),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.changes().deregister(&mut self.hub_wait);
        if let Some(scoped) = &mut self.scoped {
            scoped.access.source.changes().deregister(&mut scoped.wait);
        }
        self.hub
            .metrics()
            .subscriber_left(self.hub.name(), self.transport);
    }
}
