//! The hub: one per resource, the single owner of consistency.
//!
//! State: the cache (key → `Arc<Obj>`, and per indexed field value → its
//! objects), the resourceVersion it reflects, and
//! a ring log of recent events bounded by count and by bytes. Subscribers are
//! cursors (`seq` numbers) into that log, driven by [`Subscription`].
//!
//! # Invariant
//! Every mutation (apply, bookmark, relist, close) and every join (a
//! snapshot and a cursor) happens under one lock, so a joiner's snapshot reflects
//! exactly the events before its cursor: no gap, no duplicate. The
//! snapshot is a clone of the cache's copy-on-write trees (`cache`), taken
//! in O(1) under the lock and read after under none, so a join delays no
//! append however many objects the cache holds. A mutation
//! never waits on a subscriber: after releasing the lock it moves the
//! hub's one [`Epoch`] ([`Hub::changes`]), which wakes every waiter at
//! once — subscriptions, and whoever waits for a resourceVersion or the
//! first sync — and subscribers copy `Arc`s out under a read lock. One that
//! falls behind the log's tail is lapped and must take a fresh snapshot
//! (see [`Subscription`]). Event resourceVersions never decrease along the
//! log; the hub's resourceVersion never decreases except on a rewind,
//! which laps every cursor.

mod cache;
pub mod encode;
mod filter;
mod life;
mod log;
mod object;
pub mod pin;
pub mod projection;
mod relist;
pub mod scope;
mod snapshot;
mod subscription;
pub mod transition;
mod upstream;
mod view;
mod views;

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use tokio::sync::watch;

use crate::epoch::Epoch;
use crate::metrics::{HubMetrics, Metrics};
use cache::Cache;
pub use encode::{EventType, Frame};
pub use filter::Filter;
pub use life::SubscriberGuard;
pub use object::{Event, Obj, ObjKey};
pub use pin::{Dim, Pin};
pub use relist::{Merged, Merging, RelistOutcome};
pub use snapshot::Snapshot;
pub use subscription::{
    Advance, Batchable, Delivery, Denial, Item, ResetReason, Step, Subscribe, Subscription,
    SubscriptionContext, SubscriptionError,
};
pub use view::{Delta, Shape, View, ViewSpec};
use views::Views;

/// Bounds of the event log. Whichever is hit first trims the oldest events.
#[derive(Debug, Clone, Copy)]
pub struct LogLimits {
    pub max_events: usize,
    pub max_bytes: usize,
}

impl Default for LogLimits {
    fn default() -> Self {
        LogLimits {
            max_events: 10_000,
            max_bytes: 64 << 20,
        }
    }
}

/// What a hub serves: its canonical name and the type of its objects.
#[derive(Debug, Clone)]
pub struct ResourceMeta {
    /// `pods`, or `deployments.apps` for grouped resources.
    pub name: String,
    pub api_version: String,
    pub kind: String,
}

impl ResourceMeta {
    /// `name` (`pods`, `deployments.apps`), its objects' `apiVersion` and
    /// `kind`.
    pub fn new(name: &str, api_version: &str, kind: &str) -> ResourceMeta {
        ResourceMeta {
            name: name.into(),
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }
}

/// Where a joining subscriber starts.
#[derive(Debug)]
pub enum Joined {
    /// The log holds everything after the client's position: read from `cursor`.
    Resumed { cursor: u64, rv: u64 },
    /// A full snapshot at `rv`, then deltas from `cursor`. `resume_failed`
    /// tells that the client asked to resume and could not.
    Snapshot {
        cursor: u64,
        objects: Snapshot,
        rv: u64,
        resume_failed: bool,
    },
}

/// The cursor fell off the log's tail: the events it needed are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lapped;

/// Sizes of the hub's state, for gauges and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HubStats {
    pub objects: usize,
    pub log_events: usize,
    pub log_bytes: usize,
    pub resource_version: u64,
    pub synced: bool,
}

pub struct Hub {
    meta: ResourceMeta,
    limits: LogLimits,
    /// The fields its cache is indexed by (`hub::cache`).
    indexed: &'static [&'static str],
    state: RwLock<State>,
    /// Moves after every mutation: what subscriptions and every other
    /// waiter on this hub wait on.
    changes: Epoch,
    /// Set with `State::closed`, read without the lock.
    is_closed: AtomicBool,
    /// Users counted in ([`Hub::enter`]): open subscriptions and readers.
    /// The informer registry stops an on-demand hub that stays at 0.
    subscribers_tx: watch::Sender<usize>,
    /// The `Warning`s the API server sent with the resource's last LIST
    /// (`upstream::warning`): kubefan's answers for it carry them too.
    warnings: std::sync::Mutex<Arc<[&'static str]>>,
    /// Live views (see [`Hub::view`]).
    views: std::sync::Mutex<Views>,
    metrics: HubMetrics,
    /// Its cluster's metrics, for its subscriptions and streams.
    recorder: Arc<Metrics>,
    /// Whether its informer reaches the API server ([`Hub::upstream`]).
    upstream: upstream::Upstream,
}

struct State {
    cache: Cache,
    /// The resourceVersion the cache reflects.
    rv: u64,
    /// A client at `rv >= base_rv` can resume from the log.
    base_rv: u64,
    log: VecDeque<Arc<Event>>,
    next_seq: u64,
    log_bytes: usize,
    synced: bool,
    /// Set once the hub will never change again (see [`Hub::close`]).
    closed: Option<String>,
    /// A relist waiting for the next upstream resourceVersion to be filed
    /// at ([`Hub::relist_beside`]).
    pending: Option<relist::Pending>,
    /// The cache lacks what changed while the informer could not watch: a
    /// relist beside its watch is under way ([`Hub::relist_begins`]), so
    /// `rv` is where the watch has reached, not a state the cache holds.
    gap: bool,
}

impl State {
    fn first_seq(&self) -> u64 {
        self.next_seq - self.log.len() as u64
    }
}

impl Hub {
    pub fn new(meta: ResourceMeta, limits: LogLimits, metrics: Arc<Metrics>) -> Arc<Hub> {
        let indexed = cache::indexed_fields(&meta.name);
        Arc::new(Hub {
            limits,
            indexed,
            state: RwLock::new(State {
                cache: Cache::new(indexed),
                rv: 0,
                base_rv: 0,
                log: VecDeque::new(),
                next_seq: 0,
                log_bytes: 0,
                synced: false,
                closed: None,
                pending: None,
                gap: false,
            }),
            changes: Epoch::default(),
            is_closed: AtomicBool::new(false),
            subscribers_tx: watch::channel(0).0,
            warnings: std::sync::Mutex::new(Arc::from([])),
            views: std::sync::Mutex::new(Views::default()),
            metrics: metrics.hub_metrics(&meta.name),
            recorder: metrics,
            upstream: upstream::Upstream::default(),
            meta,
        })
    }

    pub fn meta(&self) -> &ResourceMeta {
        &self.meta
    }

    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// What its subscriptions and streams record into: the metrics of
    /// its cluster (`Metrics::for_cluster`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.recorder
    }

    /// The API server's `Warning`s for this resource, as its last LIST
    /// came with them (none, for most).
    pub fn warnings(&self) -> Arc<[&'static str]> {
        self.warnings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Keeps the `Warning`s the resource's LIST came with.
    pub fn set_warnings(&self, warnings: Vec<&'static str>) {
        let mut kept = self.warnings.lock().unwrap_or_else(PoisonError::into_inner);
        if **kept != *warnings {
            *kept = Arc::from(warnings);
        }
    }

    // Nothing panics while holding the lock, but a poisoned lock must not
    // take the whole resource down: the state is consistent after each
    // mutation step, so recover it.
    fn read_state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Updates gauges, releases the lock, then wakes subscribers. Gauges
    /// are set under the lock (a few atomic stores) so that a concurrent
    /// [`Hub::close`] reliably has the last word on them.
    fn publish(&self, st: RwLockWriteGuard<'_, State>) {
        let stats = stats_of(&st);
        self.metrics.state(
            stats.objects,
            stats.log_events,
            stats.log_bytes,
            stats.synced,
        );
        drop(st);
        self.changes.advance();
    }

    /// Joins a subscriber: a resume when `resume` is a position the log
    /// still covers, otherwise a snapshot of the objects `filter` can
    /// match (the reader applies the filter). Both are taken under the
    /// lock `append` takes, in O(log n) whatever the cache holds
    /// (`hub::cache`): an agent's snapshot is its node's objects, read
    /// from the index.
    pub fn join(&self, resume: Option<u64>, filter: &Filter) -> Joined {
        let st = self.read_state();
        if let Some(r) = resume
            && st.synced
            && r >= st.base_rv
            && r <= st.rv
        {
            let idx = st.log.partition_point(|e| e.rv <= r);
            return Joined::Resumed {
                cursor: st.first_seq() + idx as u64,
                rv: r,
            };
        }
        Joined::Snapshot {
            cursor: st.next_seq,
            objects: st.cache.snapshot(filter),
            rv: st.rv,
            resume_failed: resume.is_some(),
        }
    }

    /// A snapshot of the cached objects `filter` can match and the
    /// resourceVersion, if `cursor` is caught up (no event after it):
    /// taken under the lock appends take, they are exactly what that
    /// cursor's subscriber holds.
    pub fn objects_at(&self, cursor: u64, filter: &Filter) -> Option<(Snapshot, u64)> {
        let st = self.read_state();
        (cursor == st.next_seq).then(|| (st.cache.snapshot(filter), st.rv))
    }

    /// Copies up to `max` events from `*cursor` on into `out` and advances
    /// the cursor. Returns the hub's resourceVersion when the cursor is
    /// caught up afterwards (the position a caught-up client holds).
    pub fn read(
        &self,
        cursor: &mut u64,
        max: usize,
        out: &mut Vec<Arc<Event>>,
    ) -> Result<Option<u64>, Lapped> {
        let st = self.read_state();
        let first = st.first_seq();
        if *cursor < first {
            return Err(Lapped);
        }
        let start = (*cursor - first) as usize;
        let end = st.log.len().min(start.saturating_add(max));
        if start < end {
            out.extend(st.log.range(start..end).cloned());
        }
        *cursor = first + end.max(start) as u64;
        Ok((*cursor == st.next_seq).then_some(st.rv))
    }

    /// The `seq` the next event will get: a cursor here is caught up.
    pub fn head(&self) -> u64 {
        self.read_state().next_seq
    }

    /// The view for `spec`, shared with every subscription asking the
    /// same, however it was spelt: the view holds the normalised spec
    /// ([`ViewSpec::normalized`]).
    pub fn view(&self, spec: ViewSpec) -> Arc<View> {
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        views.shared(spec.normalized(), |spec| {
            let (plural, group) = self
                .meta
                .name
                .split_once('.')
                .unwrap_or((&self.meta.name, ""));
            View::new(
                spec,
                crate::selector::selectable_fields(group, plural),
                self.metrics.view_encodings(),
                self.metrics.views(),
            )
        })
    }

    /// Moves after every mutation: what subscriptions wait on.
    pub fn changes(&self) -> &Epoch {
        &self.changes
    }

    /// Whether the first list has been loaded (a hub closed before its
    /// first list never is).
    pub fn is_synced(&self) -> bool {
        self.read_state().synced
    }

    /// Waits until the first list has been loaded or the hub is closed,
    /// at most `timeout`; false if neither happened in time. A closed hub
    /// may never have synced: callers check [`Hub::closed`] next.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        self.wait_until(timeout, |st| st.synced || st.closed.is_some())
            .await
    }

    pub fn resource_version(&self) -> u64 {
        self.read_state().rv
    }

    pub fn stats(&self) -> HubStats {
        stats_of(&self.read_state())
    }

    /// One object by namespace and name.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<Obj>> {
        self.read_state()
            .cache
            .get(&ObjKey::new(namespace, name))
            .cloned()
    }

    /// Waits until the hub has reached `rv`, at most `timeout`.
    pub async fn wait_for_rv(&self, rv: u64, timeout: Duration) -> bool {
        self.wait_until(timeout, |st| st.rv >= rv && !st.gap).await
    }

    /// Waits until `done` holds of the state, at most `timeout`.
    async fn wait_until(&self, timeout: Duration, done: impl Fn(&State) -> bool) -> bool {
        let until = self.changes.until(|| done(&self.read_state()));
        tokio::time::timeout(timeout, until).await.is_ok()
    }

    /// The current objects (in key order), for tests.
    pub fn objects(&self) -> (Vec<Arc<Obj>>, u64) {
        let (snapshot, rv) = {
            let st = self.read_state();
            (st.cache.snapshot(&Filter::default()), st.rv)
        };
        (snapshot.collect(&|_| true), rv)
    }
}

/// An event's shared encoding, with an `id:` when it carries a position.
fn event_frame(kind: EventType, rv: u64, has_id: bool, object: &[u8]) -> Frame {
    Frame::encode(kind.as_str(), kind.as_str(), has_id.then_some(rv), object)
}

fn stats_of(st: &State) -> HubStats {
    HubStats {
        objects: st.cache.len(),
        log_events: st.log.len(),
        log_bytes: st.log_bytes,
        resource_version: st.rv,
        synced: st.synced,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::Lifecycle;
    use crate::metrics::Transport;
    use serde_json::json;
    use std::collections::{BTreeMap, HashMap};

    /// `pod("a").ns("x").rv(3)`
    struct PodBuilder {
        name: String,
        ns: String,
        rv: u64,
        phase: String,
    }

    fn pod(name: &str) -> PodBuilder {
        PodBuilder {
            name: name.into(),
            ns: "default".into(),
            rv: 1,
            phase: "Running".into(),
        }
    }

    impl PodBuilder {
        fn ns(mut self, ns: &str) -> Self {
            self.ns = ns.into();
            self
        }
        fn rv(mut self, rv: u64) -> Self {
            self.rv = rv;
            self
        }
        fn phase(mut self, phase: &str) -> Self {
            self.phase = phase.into();
            self
        }
        fn build(self) -> Obj {
            let v = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.name, "namespace": self.ns, "resourceVersion": self.rv.to_string()},
                "status": {"phase": self.phase}});
            Obj::new(
                Some(&self.ns),
                &self.name,
                self.rv,
                &serde_json::to_vec(&v).unwrap(),
            )
        }
    }

    fn hub_with(limits: LogLimits) -> Arc<Hub> {
        Hub::new(
            ResourceMeta::new("pods", "v1", "Pod"),
            limits,
            Arc::new(Metrics::new()),
        )
    }

    fn hub() -> Arc<Hub> {
        hub_with(LogLimits::default())
    }

    /// What a client holds: key → (rv, phase).
    type View = BTreeMap<String, (u64, String)>;

    fn view_of_hub(hub: &Hub) -> View {
        let (objs, _) = hub.objects();
        objs.iter().map(|o| entry_of(&o.json())).collect()
    }

    /// An object as a client's view entry: key → (rv, phase).
    fn entry_of(object: &[u8]) -> (String, (u64, String)) {
        let v: serde_json::Value = serde_json::from_slice(object).unwrap();
        let key = ObjKey::new(
            v["metadata"]["namespace"].as_str(),
            v["metadata"]["name"].as_str().unwrap(),
        );
        let rv = v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        (
            format!("{key:?}"),
            (rv, v["status"]["phase"].as_str().unwrap_or("").to_string()),
        )
    }

    /// Drives a subscription like a client: applies items to a view and
    /// checks ids never decrease, until it is caught up with `until_rv`.
    /// The subscription's next item, which must come within a second.
    async fn next_item(sub: &mut Subscription) -> Item {
        tokio::time::timeout(Duration::from_secs(1), sub.next())
            .await
            .expect("an item in time")
            .expect("the subscription goes on")
    }

    async fn drain(sub: &mut Subscription, view: &mut View, until_rv: u64) -> Vec<String> {
        let mut seen = Vec::new();
        // A snapshot being received (from a stream start or a reset).
        let mut pending: Option<View> = None;
        let mut last_id = 0u64;
        let mut position = 0u64;
        while position < until_rv {
            let item = tokio::time::timeout(Duration::from_secs(5), sub.next())
                .await
                .expect("subscription stalled")
                .expect("subscription ended");
            match item {
                Item::Reset(r) => {
                    seen.push(format!("reset:{}", r.as_str()));
                    pending = Some(View::new());
                }
                Item::Snapshot(objs) => {
                    let p = pending.get_or_insert_with(View::new);
                    for f in objs {
                        let (key, state) = entry_of(&f);
                        p.insert(key, state);
                    }
                }
                Item::SnapshotEnd { rv } => {
                    seen.push("snapshot".into());
                    *view = pending.take().unwrap_or_default();
                    position = rv;
                }
                Item::Events(evs) => {
                    assert!(pending.is_none(), "events inside a snapshot");
                    for ev in evs {
                        assert!(ev.rv() >= last_id, "resourceVersions went back");
                        let (key, state) = entry_of(&ev.frame().object());
                        match ev.kind() {
                            EventType::Added => {
                                assert!(view.insert(key, state).is_none(), "duplicate ADDED")
                            }
                            EventType::Modified => {
                                assert!(view.insert(key, state).is_some(), "MODIFIED of unknown")
                            }
                            EventType::Deleted => {
                                assert!(view.remove(&key).is_some(), "DELETED of unknown")
                            }
                        }
                        if ev.has_id() {
                            last_id = ev.rv();
                        }
                        position = position.max(ev.rv());
                        seen.push(format!("{}:{}", ev.kind().as_str(), ev.rv()));
                    }
                }
                Item::Progress { rv } => position = position.max(rv),
                Item::KeepAlive => {}
                Item::Shutdown | Item::Closed(_) | Item::Denied(_) => {
                    panic!("unexpected end: {item:?}")
                }
            }
        }
        seen
    }

    /// Starts a subscription with defaults (no resume, no ticks, its own
    /// metrics), for tests about whether it starts at all.
    fn request(spec: ViewSpec, resume: Option<u64>) -> Subscribe {
        Subscribe {
            spec,
            resume: resume.map(|rv| scope::Position { rv, tag: None }),
            transport: Transport::Sse,
            expires: None,
            lease: None,
            access: None,
        }
    }

    fn context(sync_timeout: Duration) -> (SubscriptionContext, Arc<Lifecycle>) {
        let lifecycle = Lifecycle::new();
        let cx = SubscriptionContext {
            sync_timeout,
            lifecycle: lifecycle.clone(),
            metrics: Arc::new(Metrics::new()),
        };
        (cx, lifecycle)
    }

    async fn try_start(
        hub: &Arc<Hub>,
        spec: ViewSpec,
        sync_timeout: Duration,
    ) -> Result<Subscription, SubscriptionError> {
        Subscription::start(hub.clone(), request(spec, None), &context(sync_timeout).0).await
    }

    async fn subscribe(
        hub: &Arc<Hub>,
        filter: Filter,
        resume: Option<u64>,
    ) -> (Subscription, Arc<Lifecycle>) {
        let (cx, lifecycle) = context(Duration::from_secs(1));
        let sub = Subscription::start(hub.clone(), request(ViewSpec::new(filter), resume), &cx)
            .await
            .unwrap();
        (sub, lifecycle)
    }

    #[tokio::test]
    async fn snapshot_then_deltas_equals_hub_state() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(5).build(), pod("b").rv(6).build()], 10);
        let (mut sub, _t) = subscribe(&hub, Filter::default(), None).await;
        hub.apply(EventType::Modified, pod("a").rv(11).phase("Failed").build());
        hub.apply(EventType::Added, pod("c").rv(12).build());
        hub.apply(EventType::Deleted, pod("b").rv(13).build());
        let mut view = View::new();
        let seen = drain(&mut sub, &mut view, 13).await;
        assert_eq!(seen, ["snapshot", "MODIFIED:11", "ADDED:12", "DELETED:13"]);
        assert_eq!(view, view_of_hub(&hub));
    }

    /// A consistent read's join waits in the stream, not before it: the
    /// snapshot is taken once the wait is done (so it holds what came
    /// meanwhile, as a snapshot, not as events), and nothing is handed
    /// out, nor is the stream batchable, before.
    #[tokio::test]
    async fn a_deferred_join_snapshots_once_its_wait_is_done() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(5).build()], 10);
        let (done, wait) = tokio::sync::oneshot::channel::<()>();
        let wait = futures::FutureExt::boxed(async move {
            let _ = wait.await;
        });
        let (cx, _lifecycle) = context(Duration::from_secs(1));
        let mut sub =
            Subscription::start_after(hub.clone(), request(ViewSpec::default(), None), &cx, wait)
                .await
                .unwrap();
        let mut poll_cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(sub.poll_next(&mut poll_cx).is_pending());
        assert!(sub.batchable().is_none(), "not batchable before its join");
        hub.apply(EventType::Added, pod("b").rv(11).build());
        assert!(sub.poll_next(&mut poll_cx).is_pending(), "still waiting");
        done.send(()).unwrap();
        let mut view = View::new();
        let seen = drain(&mut sub, &mut view, 11).await;
        assert_eq!(
            seen,
            ["snapshot"],
            "b is in the snapshot, not an event after it"
        );
        assert_eq!(view, view_of_hub(&hub));
        assert!(sub.batchable().is_some(), "caught up after the join");
    }

    #[tokio::test]
    async fn joining_between_appends_has_no_gap_and_no_duplicate() {
        let hub = hub();
        hub.relist(vec![], 1);
        let mut subs = Vec::new();
        for i in 0..20u64 {
            hub.apply(
                EventType::Added,
                pod(&format!("p{i}")).rv(2 + 2 * i).build(),
            );
            hub.apply(
                EventType::Modified,
                pod(&format!("p{i}"))
                    .rv(3 + 2 * i)
                    .phase("Succeeded")
                    .build(),
            );
            subs.push(subscribe(&hub, Filter::default(), None).await);
        }
        let end = hub.resource_version();
        for (sub, _t) in &mut subs {
            let mut view = View::new();
            drain(sub, &mut view, end).await;
            assert_eq!(view, view_of_hub(&hub));
        }
    }

    #[tokio::test]
    async fn resume_inside_the_log_gets_exactly_the_missed_events() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(2).build()], 2);
        for rv in 3..=6 {
            hub.apply(EventType::Modified, pod("a").rv(rv).build());
        }
        let (mut sub, _t) = subscribe(&hub, Filter::default(), Some(4)).await;
        let mut view: View = [(
            "ObjKey(\"default/a\")".to_string(),
            (4, "Running".to_string()),
        )]
        .into();
        let seen = drain(&mut sub, &mut view, 6).await;
        assert_eq!(seen, ["MODIFIED:5", "MODIFIED:6"]);
    }

    // Paused: the resume at 99, ahead of the hub, waits for it first.
    #[tokio::test(start_paused = true)]
    async fn resume_outside_the_log_gets_a_reset_snapshot() {
        let hub = hub_with(LogLimits {
            max_events: 2,
            max_bytes: usize::MAX,
        });
        hub.relist(vec![pod("a").rv(2).build()], 2);
        for rv in 3..=8 {
            hub.apply(EventType::Modified, pod("a").rv(rv).build());
        }
        for (resume, expect_reset) in [(3, true), (6, false), (7, false), (99, true)] {
            let (mut sub, _t) = subscribe(&hub, Filter::default(), Some(resume)).await;
            let first = tokio::time::timeout(Duration::from_secs(1), sub.next())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                matches!(first, Item::Reset(ResetReason::Expired)),
                expect_reset,
                "resume at {resume}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_resume_ahead_of_the_hub_waits_for_it_then_resumes() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(2).build()], 2);
        // The client was at 4 on another replica, or on this process
        // before a restart whose log is replaying from a saved position.
        let joining = tokio::spawn({
            let hub = hub.clone();
            async move { subscribe(&hub, Filter::default(), Some(4)).await }
        });
        tokio::task::yield_now().await;
        for rv in 3..=5 {
            hub.apply(EventType::Modified, pod("a").rv(rv).build());
        }
        let (mut sub, _t) = joining.await.unwrap();
        let mut view: View = [(
            "ObjKey(\"default/a\")".to_string(),
            (4, "Running".to_string()),
        )]
        .into();
        let seen = drain(&mut sub, &mut view, 5).await;
        assert_eq!(seen, ["MODIFIED:5"], "a resume, not a RESET");
    }

    #[tokio::test]
    async fn lapped_cursor_gets_reset_not_a_gap() {
        let hub = hub_with(LogLimits {
            max_events: 4,
            max_bytes: usize::MAX,
        });
        hub.relist(vec![pod("a").rv(1).build()], 1);
        let (mut sub, _t) = subscribe(&hub, Filter::default(), None).await;
        let mut view = View::new();
        drain(&mut sub, &mut view, 1).await;
        // The subscriber does not read while 10 events pass a 4-event log.
        for rv in 2..=11 {
            hub.apply(EventType::Modified, pod("a").rv(rv).build());
        }
        assert!(hub.stats().log_events <= 4);
        let seen = drain(&mut sub, &mut view, 11).await;
        assert_eq!(seen, ["reset:Lapped", "snapshot"]);
        assert_eq!(view, view_of_hub(&hub));
    }

    #[tokio::test]
    async fn log_is_bounded_by_bytes() {
        let hub = hub_with(LogLimits {
            max_events: usize::MAX,
            max_bytes: 4096,
        });
        hub.relist(vec![], 1);
        for rv in 2..500 {
            hub.apply(EventType::Added, pod(&format!("p{rv}")).rv(rv).build());
        }
        let stats = hub.stats();
        assert!(stats.log_bytes <= 4096, "{stats:?}");
        assert!(stats.log_events > 0);
        assert_eq!(stats.objects, 498);
    }

    /// The events a caught-up subscription gets next, as `KIND:name:rv`,
    /// with `#` for those that carry an id, until one with an id at `rv`.
    async fn events_until(sub: &mut Subscription, rv: u64) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            match next_item(sub).await {
                Item::Events(evs) => {
                    for ev in evs {
                        let object: serde_json::Value =
                            serde_json::from_slice(&ev.frame().object()).unwrap();
                        let name = object["metadata"]["name"].as_str().unwrap().to_string();
                        let id = if ev.has_id() { "#" } else { "" };
                        seen.push(format!("{}:{name}:{}{id}", ev.kind().as_str(), ev.rv()));
                        if ev.has_id() && ev.rv() == rv {
                            return seen;
                        }
                    }
                }
                Item::Progress { .. } | Item::KeepAlive => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// A relist beside a live watch (`upstream::informer`): the watch's
    /// changes go out as they come; the list, merged so that nothing the
    /// watch wrote after it is undone, is filed at the next upstream
    /// resourceVersion, without ids, just before that event.
    #[tokio::test]
    async fn a_relist_beside_its_watch_keeps_what_the_watch_wrote_and_files_the_rest_at_the_next_event()
     {
        let hub = hub();
        hub.relist(
            vec![
                pod("deleted-live").rv(2).build(),
                pod("changed-in-gap").rv(3).build(),
                pod("deleted-in-gap").rv(4).build(),
                pod("changed-live").rv(5).build(),
            ],
            5,
        );
        let (mut sub, _t) = subscribe(&hub, Filter::default(), None).await;
        let mut view = View::new();
        drain(&mut sub, &mut view, 5).await;
        // The watch beside, from 10 (the gap 6..=10 unseen): before and
        // after the list's 13.
        hub.relist_begins();
        hub.apply(
            EventType::Modified,
            pod("changed-live").rv(11).phase("Failed").build(),
        );
        hub.apply(EventType::Added, pod("born-live").rv(12).build());
        hub.apply(EventType::Deleted, pod("deleted-live").rv(14).build());
        assert_eq!(
            drain(&mut sub, &mut view, 14).await,
            ["MODIFIED:11", "ADDED:12", "DELETED:14"],
            "the watch's changes go out while the list runs"
        );
        let listed = vec![
            pod("deleted-live").rv(2).build(),
            pod("changed-in-gap").rv(7).phase("Failed").build(),
            pod("born-in-gap").rv(9).build(),
            pod("changed-live").rv(11).phase("Failed").build(),
            pod("born-live").rv(12).build(),
        ];
        let deleted = HashMap::from([(pod("deleted-live").build().key(), 14)]);
        let outcome = hub.relist_beside(listed, 13, &deleted);
        assert_eq!(
            (outcome.added, outcome.modified, outcome.deleted),
            (1, 1, 1),
            "only what the gap changed; the live deletion is not undone"
        );
        assert_eq!(hub.stats().log_events, 3, "held until the next event");
        assert_eq!(hub.stats().resource_version, 14);
        assert!(
            !hub.wait_for_rv(12, Duration::ZERO).await,
            "the cache lacks the gap's changes until the list is filed"
        );
        hub.apply(
            EventType::Modified,
            pod("born-live").rv(15).phase("Failed").build(),
        );
        assert!(hub.wait_for_rv(15, Duration::ZERO).await);
        assert_eq!(
            events_until(&mut sub, 15).await,
            [
                "MODIFIED:changed-in-gap:15",
                "ADDED:born-in-gap:15",
                "DELETED:deleted-in-gap:15",
                "MODIFIED:born-live:15#",
            ]
        );
        let mut upstream = View::new();
        for (name, rv, phase) in [
            ("changed-in-gap", 7, "Failed"),
            ("born-in-gap", 9, "Running"),
            ("changed-live", 11, "Failed"),
            ("born-live", 15, "Failed"),
        ] {
            upstream.insert(
                format!("ObjKey(\"default/{name}\")"),
                (rv, phase.to_string()),
            );
        }
        assert_eq!(view_of_hub(&hub), upstream);
        // A position at 14 resumes before them, one at 15 after.
        let (mut at14, _t) = subscribe(&hub, Filter::default(), Some(14)).await;
        assert_eq!(events_until(&mut at14, 15).await.len(), 4);
        let (mut at15, _t) = subscribe(&hub, Filter::default(), Some(15)).await;
        hub.apply(EventType::Added, pod("later").rv(16).build());
        assert_eq!(events_until(&mut at15, 16).await, ["ADDED:later:16#"]);
    }

    /// A merge made beside the watch ([`Hub::merge_beside`]) while that
    /// watch goes on: what it wrote meanwhile, seen in the log or only in
    /// `written` (a deletion of a key the cache never had), keeps the
    /// watch's state, and the merge's events for those keys are dropped.
    #[tokio::test]
    async fn a_merge_filed_after_the_watch_wrote_meanwhile_keeps_the_watch() {
        let hub = hub();
        hub.relist(
            vec![
                pod("changed-in-gap").rv(2).build(),
                pod("changed-live").rv(3).build(),
                pod("deleted-live").rv(4).build(),
                pod("deleted-in-gap").rv(5).build(),
            ],
            5,
        );
        let (mut sub, _t) = subscribe(&hub, Filter::default(), None).await;
        let mut view = View::new();
        drain(&mut sub, &mut view, 5).await;
        let (mut folded, _t2) = subscribe(&hub, Filter::default(), None).await;
        let mut folded_view = View::new();
        drain(&mut folded, &mut folded_view, 5).await;
        hub.relist_begins();
        hub.apply(EventType::Added, pod("born-live").rv(11).build());
        let listed = vec![
            pod("changed-in-gap").rv(7).phase("Failed").build(),
            pod("changed-live").rv(8).phase("Failed").build(),
            pod("deleted-live").rv(4).build(),
            pod("born-in-gap").rv(9).build(),
        ];
        let Merging::Merged(merged) = hub.merge_beside(listed, 10, &HashMap::new()) else {
            panic!("the hub is past the list: a merge");
        };
        // Meanwhile the watch changes a listed key, deletes one the cache
        // holds, and deletes one only the list has (the cache never had it,
        // so the hub logs nothing for it).
        hub.apply(
            EventType::Modified,
            pod("changed-live").rv(12).phase("Succeeded").build(),
        );
        hub.apply(EventType::Deleted, pod("deleted-live").rv(13).build());
        hub.apply(EventType::Deleted, pod("born-in-gap").rv(14).build());
        assert_eq!(
            drain(&mut sub, &mut view, 13).await,
            ["ADDED:11", "MODIFIED:12", "DELETED:13"]
        );
        assert_eq!(hub.stats().resource_version, 14);
        let written = ["changed-live", "deleted-live", "born-in-gap"]
            .into_iter()
            .map(|name| pod(name).build().key())
            .collect();
        let outcome = hub.file_merged(merged, &written);
        assert_eq!(
            (outcome.added, outcome.modified, outcome.deleted),
            (0, 1, 1),
            "the merge's events for keys written meanwhile are dropped"
        );
        hub.apply(EventType::Added, pod("later").rv(15).build());
        assert_eq!(
            events_until(&mut sub, 15).await,
            [
                "MODIFIED:changed-in-gap:15",
                "DELETED:deleted-in-gap:15",
                "ADDED:later:15#",
            ]
        );
        let mut upstream = View::new();
        for (name, rv, phase) in [
            ("changed-in-gap", 7, "Failed"),
            ("changed-live", 12, "Succeeded"),
            ("born-live", 11, "Running"),
            ("later", 15, "Running"),
        ] {
            upstream.insert(
                format!("ObjKey(\"default/{name}\")"),
                (rv, phase.to_string()),
            );
        }
        assert_eq!(view_of_hub(&hub), upstream);
        drain(&mut folded, &mut folded_view, 15).await;
        assert_eq!(folded_view, upstream, "a stream folds to the upstream");
    }

    /// A bookmark files a held relist too, its last event with the id.
    #[tokio::test]
    async fn a_bookmark_files_a_held_relist_with_its_id_on_the_last_event() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(2).build(), pod("b").rv(3).build()], 3);
        let (mut sub, _t) = subscribe(&hub, Filter::default(), None).await;
        let mut view = View::new();
        drain(&mut sub, &mut view, 3).await;
        hub.apply(EventType::Added, pod("c").rv(11).build());
        assert_eq!(drain(&mut sub, &mut view, 11).await, ["ADDED:11"]);
        // Listed at 10: b was deleted in the gap, a changed.
        let listed = vec![pod("a").rv(6).phase("Failed").build()];
        hub.relist_beside(listed, 10, &HashMap::new());
        hub.bookmark(20);
        assert_eq!(
            events_until(&mut sub, 20).await,
            ["MODIFIED:a:20", "DELETED:b:20#"]
        );
        assert_eq!(hub.stats().resource_version, 20);
        // A later plain relist drops one still held: nothing is filed twice.
        hub.apply(EventType::Added, pod("d").rv(21).build());
        hub.relist_beside(
            vec![pod("a").rv(6).phase("Failed").build()],
            20,
            &HashMap::new(),
        );
        hub.relist(
            vec![
                pod("a").rv(6).phase("Failed").build(),
                pod("c").rv(11).build(),
                pod("d").rv(21).build(),
            ],
            22,
        );
        hub.apply(EventType::Added, pod("e").rv(23).build());
        assert_eq!(
            events_until(&mut sub, 23).await,
            ["ADDED:d:21#", "ADDED:e:23#"]
        );
    }

    #[tokio::test]
    async fn relist_is_diffed_into_synthetic_events_without_reset() {
        let hub = hub();
        hub.relist(
            vec![
                pod("keep").rv(2).build(),
                pod("change").rv(3).build(),
                pod("gone").rv(4).build(),
            ],
            4,
        );
        let (mut sub, _t) = subscribe(&hub, Filter::default(), None).await;
        let mut view = View::new();
        drain(&mut sub, &mut view, 4).await;
        let outcome = hub.relist(
            vec![
                pod("keep").rv(2).build(),
                pod("change").rv(8).phase("Failed").build(),
                pod("new").rv(7).build(),
            ],
            9,
        );
        assert_eq!(
            (outcome.added, outcome.modified, outcome.deleted),
            (1, 1, 1)
        );
        let seen = drain(&mut sub, &mut view, 9).await;
        assert_eq!(seen, ["ADDED:7", "MODIFIED:8", "DELETED:9"]);
        assert_eq!(view, view_of_hub(&hub));
        // A client that saw rv 7 resumes with exactly the rest.
        let (mut sub, _t) = subscribe(&hub, Filter::default(), Some(7)).await;
        let mut view2 = view.clone();
        view2.insert("ObjKey(\"default/change\")".into(), (3, "Running".into()));
        view2.insert("ObjKey(\"default/gone\")".into(), (4, "Running".into()));
        assert_eq!(
            drain(&mut sub, &mut view2, 9).await,
            ["MODIFIED:8", "DELETED:9"]
        );
    }

    /// A relist with more changes than the log holds: the events the log
    /// could not keep are numbered, not kept, so a cursor before them is
    /// lapped (a reset, never a gap), a resume inside the kept ones gets
    /// exactly the rest, and the cache is the list.
    #[tokio::test]
    async fn a_relist_bigger_than_the_log_laps_those_before_it_and_keeps_its_last_events() {
        let hub = hub_with(LogLimits {
            max_events: 5,
            max_bytes: usize::MAX,
        });
        hub.relist(vec![pod("a").rv(2).build()], 2);
        let (mut before, _t) = subscribe(&hub, Filter::default(), None).await;
        let mut view = View::new();
        drain(&mut before, &mut view, 2).await;
        let fresh: Vec<Obj> = (0..20u64)
            .map(|i| pod(&format!("p{i:02}")).rv(10 + i).build())
            .collect();
        let outcome = hub.relist(fresh, 40);
        assert_eq!((outcome.added, outcome.deleted), (20, 1));
        let stats = hub.stats();
        assert_eq!(stats.log_events, 5, "the last five kept");
        assert_eq!(stats.objects, 20);
        assert!(
            matches!(
                next_item(&mut before).await,
                Item::Reset(ResetReason::Lapped)
            ),
            "a cursor before the relist is lapped"
        );
        let seen = drain(&mut before, &mut view, 40).await;
        assert_eq!(seen, ["snapshot"]);
        assert_eq!(view, view_of_hub(&hub));
        // The kept events are the relist's last: p16..p19, then a's delete.
        let (mut resumed, _t) = subscribe(&hub, Filter::default(), Some(28)).await;
        let mut held: View = (0..19u64)
            .map(|i| entry_of(&pod(&format!("p{i:02}")).rv(10 + i).build().json()))
            .filter(|(_, (rv, _))| *rv <= 28)
            .collect();
        held.insert("ObjKey(\"default/a\")".into(), (2, "Running".into()));
        let seen = drain(&mut resumed, &mut held, 40).await;
        assert_eq!(seen, ["ADDED:29", "DELETED:40"]);
        assert_eq!(held, view_of_hub(&hub));
    }

    /// A snapshot is read after the join, under no lock, while the cache
    /// changes: it is the cache as it was at the join, and the events
    /// after take the joiner to the hub's state, nothing twice.
    #[tokio::test]
    async fn a_snapshot_read_while_the_cache_changes_is_the_cache_at_the_join() {
        let hub = hub();
        let pods: Vec<Obj> = (0..600u64)
            .map(|i| pod(&format!("p{i:03}")).rv(1 + i).build())
            .collect();
        hub.relist(pods, 600);
        let (mut sub, _t) = subscribe(&hub, Filter::default(), None).await;
        // Every object changes, some go, some come, before the first
        // chunk is read (the snapshot holds more than one chunk).
        let mut rv = 600;
        for i in (0..600u64).step_by(3) {
            rv += 1;
            hub.apply(
                EventType::Modified,
                pod(&format!("p{i:03}")).rv(rv).phase("Failed").build(),
            );
            rv += 1;
            hub.apply(
                EventType::Deleted,
                pod(&format!("p{:03}", i + 1)).rv(rv).build(),
            );
            rv += 1;
            hub.apply(EventType::Added, pod(&format!("n{i:03}")).rv(rv).build());
        }
        let mut view = View::new();
        let seen = drain(&mut sub, &mut view, rv).await;
        assert_eq!(seen[0], "snapshot");
        assert_eq!(seen.len(), 1 + 600, "each change once after the snapshot");
        assert_eq!(view, view_of_hub(&hub));
    }

    /// A node agent's snapshot comes from the index: its node's objects,
    /// through reschedules, and nothing else.
    #[tokio::test]
    async fn a_node_agents_snapshot_is_its_nodes_objects() {
        let hub = hub();
        let on = |name: &str, node: &str, rv: u64| {
            let json = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "resourceVersion": rv.to_string()},
                "spec": {"nodeName": node}, "status": {"phase": "Running"}}))
            .unwrap();
            let fields = crate::selector::selectable_fields("", "pods");
            Obj::new(Some("default"), name, rv, &json).with_selectors(
                [],
                fields,
                fields
                    .iter()
                    .map(|f| (*f == "spec.nodeName").then(|| node.to_string())),
            )
        };
        hub.relist(
            (0..30u64)
                .map(|i| on(&format!("p{i}"), &format!("n{}", i % 3), 1 + i))
                .collect(),
            30,
        );
        hub.apply(EventType::Modified, on("p0", "n1", 31));
        let filter = Filter {
            fields: crate::selector::FieldSelector::parse_any("spec.nodeName=n1").unwrap(),
            ..Filter::default()
        };
        let (mut sub, _t) = subscribe(&hub, filter, None).await;
        let mut view = View::new();
        drain(&mut sub, &mut view, 31).await;
        let mut want: Vec<String> = (0..30)
            .filter(|i| i % 3 == 1 || *i == 0)
            .map(|i| format!("ObjKey(\"default/p{i}\")"))
            .collect();
        want.sort();
        assert_eq!(view.keys().cloned().collect::<Vec<_>>(), want);
    }

    #[tokio::test]
    async fn events_sharing_a_resource_version_carry_one_id() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(1).build(), pod("b").rv(1).build()], 1);
        hub.relist(vec![], 5);
        let mut out = Vec::new();
        let mut cursor = 0;
        hub.read(&mut cursor, 10, &mut out).unwrap();
        let ids: Vec<bool> = out.iter().map(|e| e.has_id).collect();
        assert_eq!(ids, [false, true]);
        assert!(out[0].frame.sse().starts_with(b"event: DELETED\ndata: "));
        assert!(out[1].frame.sse().starts_with(b"event: DELETED\nid: 5\n"));
        // Each carries its object's last state as of the deletion the
        // relist found, at 5, not its own older version (1): a client
        // keeping the last object's version as its position (client-go)
        // must not move back.
        for ev in &out {
            let object: serde_json::Value = serde_json::from_slice(&ev.obj.json()).unwrap();
            assert_eq!(object["metadata"]["resourceVersion"], "5", "{object}");
            assert_eq!(ev.obj.resource_version(), 5);
            assert_eq!(ev.frame.object(), ev.obj.json(), "framed as stamped");
        }
    }

    #[tokio::test]
    async fn snapshot_items_are_bounded_by_bytes() {
        let hub = hub();
        let big = "x".repeat(20_000);
        let pods = (0..10).map(|i| pod(&format!("p{i}")).rv(1).phase(&big).build());
        hub.relist(pods.collect(), 1);
        let (mut sub, _t) = subscribe(&hub, Filter::default(), None).await;
        let mut sizes = Vec::new();
        while let Some(Item::Snapshot(objects)) = sub.next().await {
            sizes.push(objects.len());
        }
        // About 64 KiB per item: the object that reaches it is the last.
        assert_eq!(sizes, [4, 4, 2]);
    }

    #[tokio::test]
    async fn each_version_is_stored_once_for_the_cache_and_the_log() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(1).build(), pod("b").rv(1).build()], 1);
        hub.apply(EventType::Modified, pod("a").rv(2).build());
        // Normalised: an ADDED of a known object is logged as MODIFIED.
        hub.apply(EventType::Added, pod("b").rv(3).phase("Failed").build());
        hub.apply(EventType::Modified, pod("c").rv(4).build());
        hub.relist(
            vec![
                pod("a").rv(2).build(),
                pod("b").rv(5).build(),
                pod("d").rv(6).build(),
            ],
            7,
        );
        let st = hub.read_state();
        let kinds: Vec<_> = st.log.iter().map(|e| e.kind).collect();
        use EventType::*;
        assert_eq!(kinds, [Modified, Modified, Added, Modified, Added, Deleted]);
        for ev in st.log.iter().filter(|e| e.kind != Deleted) {
            let key = ev.obj.key();
            assert_eq!(
                ev.obj.json().as_ptr(),
                ev.frame.object().as_ptr(),
                "{key:?}: the logged object is a slice of its frame"
            );
            if let Some(cached) = st.cache.get(&key).filter(|c| c.resource_version() == ev.rv) {
                assert_eq!(
                    cached.json().as_ptr(),
                    ev.frame.object().as_ptr(),
                    "{key:?}"
                );
            }
        }
        // The byte bound counts each version's JSON once (and the few
        // hundred bytes beside it).
        let json: usize = st.log.iter().map(|e| e.frame.len()).sum();
        let (bytes, events) = (st.log_bytes, st.log.len());
        assert!(
            bytes >= json && bytes < json + 400 * events,
            "{bytes} for {json}"
        );
    }

    #[tokio::test]
    async fn namespace_filter_applies_to_snapshot_and_deltas_and_progress_advances() {
        let hub = hub();
        hub.relist(
            vec![
                pod("a").ns("x").rv(2).build(),
                pod("b").ns("y").rv(3).build(),
            ],
            3,
        );
        let filter = Filter {
            namespaces: vec!["x".into()],
            ..Filter::default()
        };
        let (mut sub, tick) = subscribe(&hub, filter, None).await;
        let mut view = View::new();
        drain(&mut sub, &mut view, 3).await;
        assert_eq!(view.len(), 1);
        hub.apply(EventType::Modified, pod("b").ns("y").rv(4).build());
        hub.apply(EventType::Modified, pod("a").ns("x").rv(5).build());
        hub.apply(EventType::Modified, pod("b").ns("y").rv(6).build());
        assert_eq!(drain(&mut sub, &mut view, 5).await, ["MODIFIED:5"]);
        tick.tick();
        let item = next_item(&mut sub).await;
        assert!(matches!(item, Item::Progress { rv: 6 }), "{item:?}");
        tick.tick();
        let item = next_item(&mut sub).await;
        assert!(matches!(item, Item::KeepAlive), "{item:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_keepalive_goes_only_to_a_stream_that_told_nothing_since_the_tick_before() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(2).build()], 2);
        let (mut sub, tick) = subscribe(&hub, Filter::default(), None).await;
        let mut view = View::new();
        drain(&mut sub, &mut view, 2).await;
        let nothing = async |sub: &mut Subscription| {
            // Paused time: this resolves only once the subscription waits
            // with nothing to send.
            tokio::time::timeout(Duration::from_secs(1), sub.next())
                .await
                .is_err()
        };
        // The snapshot told the client a position: the first tick owes
        // nothing, the next (nothing told since) a keep-alive.
        tick.tick();
        assert!(nothing(&mut sub).await, "no keep-alive after the snapshot");
        tick.tick();
        assert!(matches!(next_item(&mut sub).await, Item::KeepAlive));
        // Events between two ticks: the tick owes nothing.
        hub.apply(EventType::Modified, pod("a").rv(3).build());
        assert_eq!(drain(&mut sub, &mut view, 3).await, ["MODIFIED:3"]);
        tick.tick();
        assert!(
            nothing(&mut sub).await,
            "no keep-alive on a stream sent events"
        );
        tick.tick();
        assert!(matches!(next_item(&mut sub).await, Item::KeepAlive));
        tick.tick();
        assert!(matches!(next_item(&mut sub).await, Item::KeepAlive));
    }

    #[tokio::test]
    async fn rewound_upstream_laps_every_cursor() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(10).build()], 10);
        let (mut sub, _t) = subscribe(&hub, Filter::default(), None).await;
        let mut view = View::new();
        drain(&mut sub, &mut view, 10).await;
        let outcome = hub.relist(vec![pod("z").rv(3).build()], 3);
        assert!(outcome.rewound);
        let item = tokio::time::timeout(Duration::from_secs(1), sub.next())
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(item, Item::Reset(ResetReason::Lapped)), "{item:?}");
    }

    /// After a rewind the stream is at the new timeline's position: a
    /// keep-alive tick tells no position of the old one (20 here), which
    /// the hub would accept as a resume once it passes 20 again, skipping
    /// every change between the reset's snapshot and it.
    #[tokio::test]
    async fn a_rewound_stream_tells_no_position_of_the_old_timeline() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(10).build()], 10);
        let (mut sub, tick) = subscribe(&hub, Filter::default(), None).await;
        let mut view = View::new();
        drain(&mut sub, &mut view, 10).await;
        hub.apply(EventType::Modified, pod("a").rv(20).build());
        drain(&mut sub, &mut view, 20).await;
        hub.relist(vec![pod("z").rv(3).build()], 3);
        let seen = drain(&mut sub, &mut view, 3).await;
        assert_eq!(seen[0], "reset:Lapped", "{seen:?}");
        // Told a position since the last tick (the snapshot's end): the
        // first tick owes nothing, the next a keep-alive.
        tick.tick();
        let first = futures::FutureExt::now_or_never(sub.next());
        assert!(first.is_none(), "{first:?}");
        tick.tick();
        let item = next_item(&mut sub).await;
        assert!(matches!(item, Item::KeepAlive), "{item:?}");
    }

    #[tokio::test]
    async fn stale_and_unknown_events_are_ignored() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(5).build()], 5);
        assert!(!hub.apply(EventType::Modified, pod("a").rv(4).build()));
        assert!(!hub.apply(EventType::Deleted, pod("nope").rv(6).build()));
        assert_eq!(hub.resource_version(), 6);
        assert!(hub.apply(EventType::Added, pod("a").rv(7).build()));
        let mut out = Vec::new();
        hub.read(&mut 0, 10, &mut out).unwrap();
        assert_eq!(
            out[0].kind,
            EventType::Modified,
            "ADDED of a known object is a MODIFIED"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_for_a_version_only_a_bookmark_reaches_returns_at_once() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(5).build()], 5);
        // A client resuming on this replica from a position another replica
        // reached on a quiet resource: only bookmarks move this one there.
        let waiter = tokio::spawn({
            let hub = hub.clone();
            async move { hub.wait_for_rv(9, Duration::from_secs(10)).await }
        });
        tokio::task::yield_now().await;
        hub.bookmark(9);
        let reached = tokio::time::timeout(Duration::from_millis(100), waiter)
            .await
            .expect("woken by the bookmark, not by its timeout")
            .unwrap();
        assert!(reached);
        // A DELETED of an object the hub never had moves it on too.
        let waiter = tokio::spawn({
            let hub = hub.clone();
            async move { hub.wait_for_rv(12, Duration::from_secs(10)).await }
        });
        tokio::task::yield_now().await;
        assert!(!hub.apply(EventType::Deleted, pod("gone").rv(12).build()));
        let reached = tokio::time::timeout(Duration::from_millis(100), waiter)
            .await
            .expect("woken by the change, not by its timeout")
            .unwrap();
        assert!(reached);
    }

    #[tokio::test(start_paused = true)]
    async fn subscriber_waits_for_sync_then_gives_up() {
        let hub = hub();
        let res = try_start(&hub, ViewSpec::default(), Duration::from_secs(3)).await;
        assert!(matches!(res, Err(SubscriptionError::NotSynced(_))));
    }

    #[tokio::test]
    async fn closing_a_hub_ends_its_subscriptions_and_refuses_new_ones() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(1).build()], 1);
        let (mut sub, _t) = subscribe(&hub, Filter::default(), None).await;
        let mut view = View::new();
        drain(&mut sub, &mut view, 1).await;
        hub.close("stopped: no subscribers");
        let item = tokio::time::timeout(Duration::from_secs(1), sub.next())
            .await
            .unwrap();
        assert!(
            matches!(item, Some(Item::Closed(ref r)) if r.contains("no subscribers")),
            "{item:?}"
        );
        assert!(sub.next().await.is_none());
        let again = try_start(&hub, ViewSpec::default(), Duration::from_secs(1)).await;
        assert!(matches!(again, Err(SubscriptionError::Closed(..))));
        // A hub closed before it ever synced does not leave joiners waiting.
        let never = super::tests::hub();
        never.close("resource removed upstream");
        let res = try_start(&never, ViewSpec::default(), Duration::from_secs(30)).await;
        assert!(matches!(res, Err(SubscriptionError::Closed(..))));
    }

    #[tokio::test]
    async fn closing_a_hub_that_never_listed_wakes_its_waiters_but_it_is_not_synced() {
        let hub = hub();
        let waiter = tokio::spawn({
            let hub = hub.clone();
            async move { hub.wait_synced(Duration::from_secs(30)).await }
        });
        let joiner = tokio::spawn({
            let hub = hub.clone();
            async move {
                try_start(&hub, ViewSpec::default(), Duration::from_secs(30))
                    .await
                    .map(|_| ())
            }
        });
        // Both counted in and waiting (the joiner enters before it waits).
        let mut counted = hub.subscribers_rx();
        tokio::time::timeout(Duration::from_secs(5), counted.wait_for(|n| *n == 1))
            .await
            .expect("the joiner enters")
            .unwrap();
        hub.close("resource removed upstream");
        let woken = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken by the close, not by its 30 s timeout")
            .unwrap();
        assert!(woken, "the wait ends with the close");
        let joined = tokio::time::timeout(Duration::from_secs(5), joiner)
            .await
            .expect("the joiner is released by the close")
            .unwrap();
        assert!(
            matches!(joined, Err(SubscriptionError::Closed(..))),
            "{joined:?}"
        );
        assert!(!hub.is_synced(), "a hub that never listed is not synced");
        assert!(!hub.stats().synced);
        assert_eq!(hub.closed().as_deref(), Some("resource removed upstream"));
        // A hub closed after it listed stays synced.
        let listed = super::tests::hub();
        listed.relist(vec![pod("a").rv(1).build()], 1);
        listed.close("stopped");
        assert!(listed.is_synced());
        assert!(listed.wait_synced(Duration::from_secs(1)).await);
    }

    #[tokio::test]
    async fn idle_close_spares_a_hub_in_use_and_turns_later_joiners_away() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(1).build()], 1);
        let reader = hub.enter().unwrap();
        assert!(!hub.close_if_unused("idle"));
        drop(reader);
        assert!(hub.close_if_unused("idle"));
        assert!(matches!(hub.enter(), Err(SubscriptionError::Closed(..))));
        assert_eq!(*hub.subscribers_rx().borrow(), 0);
        assert!(!hub.apply(EventType::Added, pod("b").rv(2).build()));
        assert_eq!(hub.resource_version(), 1, "a closed hub takes no changes");
    }

    #[tokio::test]
    async fn subscriber_count_follows_subscriptions() {
        let hub = hub();
        hub.relist(vec![], 1);
        let rx = hub.subscribers_rx();
        let (a, _t1) = subscribe(&hub, Filter::default(), None).await;
        let (b, _t2) = subscribe(&hub, Filter::default(), None).await;
        assert_eq!(*rx.borrow(), 2);
        drop(a);
        drop(b);
        assert_eq!(*rx.borrow(), 0);
    }

    #[test]
    fn specs_that_mean_the_same_share_one_view_and_others_do_not() {
        use crate::selector::{FieldSelector, LabelSelector};
        use crate::table::{IncludeObject, MetaVersion, Printer, TableView};
        let hub = hub();
        let spec = |ns: &[&str], labels: &str, fields: &str, projection: Option<&str>| ViewSpec {
            filter: Filter {
                namespaces: ns.iter().map(|n| n.to_string()).collect(),
                labels: LabelSelector::parse(labels).unwrap(),
                fields: FieldSelector::parse_any(fields).unwrap(),
            },
            projection: projection.map(|p| projection::Projection::parse(p).unwrap()),
            ..ViewSpec::default()
        };
        let table = |include| ViewSpec {
            shape: Shape::Table(TableView::new(
                Printer::builtin("", "pods").unwrap(),
                MetaVersion::V1,
                include,
            )),
            ..ViewSpec::default()
        };
        let merge = |s: ViewSpec| ViewSpec {
            delta: Delta::MergePatch,
            ..s
        };
        let same = [
            (
                spec(&["a", "b"], "", "", None),
                spec(&["b", "a"], "", "", None),
            ),
            (
                spec(&["a", "b", "a"], "", "", None),
                spec(&["b", "a"], "", "", None),
            ),
            (
                spec(&[], "app in (x,y),tier!=db,k", "", None),
                spec(&[], "k,tier!=db,app in (y, x, y)", "", None),
            ),
            (
                spec(&[], "app in (x)", "", None),
                spec(&[], "app=x", "", None),
            ),
            (
                spec(&[], "", "status.phase=Running,spec.nodeName!=n", None),
                spec(&[], "", "spec.nodeName!=n,status.phase==Running", None),
            ),
            (
                spec(&[], "", "", Some("status.phase,spec.nodeName")),
                spec(&[], "", "", Some("spec.nodeName,status.phase,status.phase")),
            ),
            (
                merge(spec(&["b", "a"], "y,x", "", Some("status"))),
                merge(spec(&["a", "b"], "x,y", "", Some("status"))),
            ),
            (table(IncludeObject::None), table(IncludeObject::None)),
        ];
        for (a, b) in same {
            let (view_a, view_b) = (hub.view(a.clone()), hub.view(b.clone()));
            assert!(Arc::ptr_eq(&view_a, &view_b), "{a:?} and {b:?}: one view");
        }
        let different = [
            (spec(&["a", "b"], "", "", None), spec(&["a"], "", "", None)),
            (spec(&["a"], "", "", None), spec(&[], "", "", None)),
            (
                spec(&[], "app in (x,y)", "", None),
                spec(&[], "app in (x)", "", None),
            ),
            (
                spec(&[], "app in (x,y)", "", None),
                spec(&[], "app notin (x,y)", "", None),
            ),
            (
                spec(&[], "", "status.phase=Running", None),
                spec(&[], "", "status.phase!=Running", None),
            ),
            (
                spec(&[], "", "", Some("status.phase")),
                spec(&[], "", "", Some("spec.nodeName")),
            ),
            (spec(&[], "", "", Some("status")), spec(&[], "", "", None)),
            (
                spec(&[], "", "", Some("status")),
                merge(spec(&[], "", "", Some("status"))),
            ),
            (table(IncludeObject::None), table(IncludeObject::Object)),
            (table(IncludeObject::None), ViewSpec::default()),
        ];
        for (a, b) in different {
            let (view_a, view_b) = (hub.view(a.clone()), hub.view(b.clone()));
            assert!(!Arc::ptr_eq(&view_a, &view_b), "{a:?} and {b:?}: two views");
        }
    }

    #[test]
    fn the_view_table_finds_each_live_view_and_forgets_dropped_ones() {
        let hub = hub();
        let node = |i: usize| {
            ViewSpec::new(Filter {
                fields: crate::selector::FieldSelector::parse_any(&format!("spec.nodeName={i}"))
                    .unwrap(),
                ..Filter::default()
            })
        };
        let views: Vec<Arc<super::View>> = (0..1000).map(|i| hub.view(node(i))).collect();
        for (i, view) in views.iter().enumerate() {
            assert_eq!(*view.spec(), node(i).normalized());
            assert!(
                Arc::ptr_eq(view, &hub.view(node(i))),
                "node {i}: not found again"
            );
        }
        let weak = Arc::downgrade(&views[7]);
        drop(views);
        assert!(weak.upgrade().is_none(), "a dropped view stays alive");
        // A view asked for after its last holder went is a new one, and
        // the entries of the dropped ones are gone.
        let again = hub.view(node(7));
        assert_eq!(*again.spec(), node(7).normalized());
        let table = hub.views.lock().unwrap();
        assert_eq!(table.table.len(), 1);
    }

    #[tokio::test]
    async fn a_thousand_identical_subscriptions_cost_one_encoding_per_event() {
        let metrics = Arc::new(Metrics::new());
        let hub = Hub::new(
            ResourceMeta::new("pods", "v1", "Pod"),
            LogLimits::default(),
            metrics.clone(),
        );
        hub.relist(
            (0..50)
                .map(|i| pod(&format!("p{i}")).rv(1).build())
                .collect(),
            1,
        );
        let spec = || ViewSpec {
            projection: Some(projection::Projection::parse("status.phase").unwrap()),
            ..ViewSpec::default()
        };
        let encodings = || {
            let text = metrics.encode();
            let line = text
                .lines()
                .find(|l| l.starts_with("kubefan_view_encodings_total"))
                .unwrap_or("x 0")
                .to_string();
            line.rsplit(' ').next().unwrap().parse::<u64>().unwrap()
        };
        let mut subs = Vec::new();
        for _ in 0..1000 {
            let cx = SubscriptionContext {
                sync_timeout: Duration::from_secs(1),
                lifecycle: Lifecycle::new(),
                metrics: metrics.clone(),
            };
            let sub = Subscription::start(hub.clone(), request(spec(), None), &cx)
                .await
                .unwrap();
            subs.push(sub);
        }
        let mut views: Vec<View> = (0..1000).map(|_| View::new()).collect();
        for (sub, view) in subs.iter_mut().zip(&mut views) {
            drain(sub, view, 1).await;
            assert_eq!(view.len(), 50);
        }
        assert_eq!(
            encodings(),
            50,
            "one encoding per snapshot object, shared by 1,000 snapshots"
        );
        for i in 0..10u64 {
            hub.apply(
                EventType::Modified,
                pod(&format!("p{i}")).rv(2 + i).phase("Failed").build(),
            );
        }
        for (sub, view) in subs.iter_mut().zip(&mut views) {
            assert_eq!(drain(sub, view, 11).await.len(), 10);
        }
        assert_eq!(
            encodings(),
            60,
            "one encoding per event, not one per subscriber"
        );
        assert!(
            metrics
                .encode()
                .contains("kubefan_views{resource=\"pods\"} 1")
        );
        drop(subs);
        assert!(
            metrics
                .encode()
                .contains("kubefan_views{resource=\"pods\"} 0"),
            "views go when unused"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn expired_credentials_end_the_subscription_with_a_denial() {
        let hub = hub();
        hub.relist(vec![pod("a").rv(5).build()], 5);
        let (cx, _lifecycle) = context(Duration::from_secs(1));
        let mut req = request(ViewSpec::default(), None);
        req.expires = Some(tokio::time::Instant::now() + Duration::from_secs(30));
        let mut sub = Subscription::start(hub.clone(), req, &cx).await.unwrap();
        assert!(matches!(sub.next().await, Some(Item::Snapshot(_))));
        assert!(matches!(sub.next().await, Some(Item::SnapshotEnd { .. })));
        // Waiting, caught up: the expiry wakes it.
        let started = tokio::time::Instant::now();
        match sub.next().await {
            Some(Item::Denied(denial)) => assert_eq!(denial.code, 401),
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() <= Duration::from_secs(30));
        assert!(sub.next().await.is_none(), "nothing follows the denial");
        // Busy, with events waiting: the expiry still comes first.
        let mut req = request(ViewSpec::default(), None);
        req.expires = Some(tokio::time::Instant::now());
        let mut sub = Subscription::start(hub.clone(), req, &cx).await.unwrap();
        hub.apply(EventType::Modified, pod("a").rv(6).build());
        let mut items = Vec::new();
        while let Some(item) = sub.next().await {
            items.push(item);
        }
        assert!(matches!(items.last(), Some(Item::Denied(_))), "{items:?}");
        assert!(!items.iter().any(|i| matches!(i, Item::Events(_))));
    }

    /// A scope a test changes by hand.
    struct TestScope {
        scope: std::sync::Mutex<scope::Scope>,
        changes: crate::epoch::Epoch,
    }

    impl scope::ScopeSource for TestScope {
        fn changes(&self) -> &crate::epoch::Epoch {
            &self.changes
        }
        fn scope(&self) -> scope::Scope {
            self.scope.lock().unwrap().clone()
        }
    }

    impl TestScope {
        fn only(ns: &[&str]) -> Arc<TestScope> {
            Arc::new(TestScope {
                scope: std::sync::Mutex::new(scope::Scope::Only(
                    ns.iter().map(|s| s.to_string()).collect(),
                )),
                changes: crate::epoch::Epoch::default(),
            })
        }
        fn set(&self, ns: &[&str]) {
            *self.scope.lock().unwrap() =
                scope::Scope::Only(ns.iter().map(|s| s.to_string()).collect());
            self.changes.advance();
        }
    }

    /// Keys and kinds of an item's deliveries.
    fn deliveries(item: Option<Item>) -> Vec<(EventType, String, bool)> {
        let Some(Item::Events(ds)) = item else {
            panic!("expected events, got {item:?}")
        };
        ds.iter()
            .map(|d| {
                let obj: serde_json::Value = serde_json::from_slice(&d.frame().object()).unwrap();
                let key = format!(
                    "{}/{}",
                    obj["metadata"]["namespace"].as_str().unwrap(),
                    obj["metadata"]["name"].as_str().unwrap()
                );
                (d.kind(), key, d.has_id())
            })
            .collect()
    }

    #[tokio::test]
    async fn a_stream_follows_its_scope_with_added_and_deleted_then_ends_when_nothing_is_left() {
        let hub = hub();
        hub.relist(
            vec![
                pod("p").ns("a").rv(2).build(),
                pod("q").ns("b").rv(3).build(),
                pod("r").ns("c").rv(4).build(),
            ],
            4,
        );
        let source = TestScope::only(&["a"]);
        let mut req = request(ViewSpec::default(), None);
        req.access = Some(scope::Scoping {
            source: source.clone(),
            requested: vec![],
        });
        let (cx, _lifecycle) = context(Duration::from_secs(1));
        let mut sub = Subscription::start(hub.clone(), req, &cx).await.unwrap();
        let first_tag = sub
            .id_tag()
            .expect("a narrowed stream tags its ids")
            .to_string();
        let Some(Item::Snapshot(frames)) = sub.next().await else {
            panic!()
        };
        assert_eq!(frames.len(), 1, "only namespace a");
        assert!(matches!(
            sub.next().await,
            Some(Item::SnapshotEnd { rv: 4 })
        ));

        // Gaining b: its pod arrives as ADDED, then the new position.
        source.set(&["a", "b"]);
        assert_eq!(
            deliveries(sub.next().await),
            [(EventType::Added, "b/q".to_string(), false)]
        );
        assert!(matches!(sub.next().await, Some(Item::Progress { rv: 4 })));
        let second_tag = sub.id_tag().unwrap().to_string();
        assert_ne!(first_tag, second_tag);

        // Events keep flowing under the new scope.
        hub.apply(EventType::Modified, pod("q").ns("b").rv(5).build());
        assert_eq!(
            deliveries(sub.next().await),
            [(EventType::Modified, "b/q".to_string(), true)]
        );

        // Losing a: its pod arrives as DELETED.
        source.set(&["b"]);
        assert_eq!(
            deliveries(sub.next().await),
            [(EventType::Deleted, "a/p".to_string(), false)]
        );
        assert!(matches!(sub.next().await, Some(Item::Progress { rv: 5 })));

        // Nothing left: a 403, and the end.
        source.set(&[]);
        match sub.next().await {
            Some(Item::Denied(denial)) => assert_eq!(denial.code, 403),
            other => panic!("{other:?}"),
        }
        assert!(sub.next().await.is_none());

        // A resume from a position taken under another scope is a reset.
        let source = TestScope::only(&["a", "b"]);
        let mut req = request(ViewSpec::default(), None);
        req.resume = Some(scope::Position {
            rv: 4,
            tag: Some(first_tag),
        });
        req.access = Some(scope::Scoping {
            source,
            requested: vec![],
        });
        let mut sub = Subscription::start(hub.clone(), req, &cx).await.unwrap();
        assert!(matches!(
            sub.next().await,
            Some(Item::Reset(ResetReason::AccessChanged))
        ));
        // ... and one with the current tag resumes.
        let source = TestScope::only(&["a", "b"]);
        let mut req = request(ViewSpec::default(), None);
        req.resume = Some(scope::Position {
            rv: 4,
            tag: Some(second_tag),
        });
        req.access = Some(scope::Scoping {
            source,
            requested: vec![],
        });
        let mut sub = Subscription::start(hub, req, &cx).await.unwrap();
        assert_eq!(
            deliveries(sub.next().await),
            [(EventType::Modified, "b/q".to_string(), true)]
        );
    }

    #[tokio::test]
    async fn shutdown_ends_the_subscription_with_a_shutdown_item() {
        let hub = hub();
        hub.relist(vec![], 1);
        let (cx, lifecycle) = context(Duration::from_secs(1));
        let mut sub = Subscription::start(hub, request(ViewSpec::default(), None), &cx)
            .await
            .unwrap();
        assert!(matches!(sub.next().await, Some(Item::SnapshotEnd { .. })));
        lifecycle.shut_down();
        let item = tokio::time::timeout(Duration::from_secs(1), sub.next())
            .await
            .unwrap();
        assert!(matches!(item, Some(Item::Shutdown)));
        assert!(sub.next().await.is_none());
    }
}
