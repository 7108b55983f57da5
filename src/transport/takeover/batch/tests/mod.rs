//! The writer against fake streams: a real hub, subscriptions and SSE
//! framing, and a socket that is a buffer whose writes can be scripted
//! to go in part, not at all, or fail.

use std::collections::VecDeque;
use std::time::Duration;

use super::*;
use crate::hub::{
    EventType, Filter, Hub, Item, LogLimits, Obj, ResetReason, ResourceMeta, Step, Subscribe,
    Subscription, SubscriptionContext, ViewSpec,
};
use crate::lifecycle::PHASES;
use crate::metrics::Transport;
use crate::transport::sse::SseFraming;
use crate::transport::stream::Framed;

/// How one `send_now` goes (unscripted: all of it).
enum Write {
    /// Only this many bytes.
    Part(usize),
    WouldBlock,
    Fail,
}

/// What a test sees of one fake stream.
#[derive(Default)]
struct Socket {
    wrote: Mutex<Vec<u8>>,
    /// How many `send_now`s wrote something.
    writes: Mutex<usize>,
    /// Run once, just after the next write (a change in mid-pass).
    after_write: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    script: Mutex<VecDeque<Write>>,
    /// `poll_input` is ready.
    input: Mutex<bool>,
    /// Its task finds it waiting for its subscription (else it hands its
    /// subscription to the test and ends).
    waiting: Mutex<bool>,
    /// Its transport has something of its own under way.
    busy: Mutex<bool>,
    /// Its TLS session holds records its socket did not take.
    holds_records: Mutex<bool>,
    /// The waker the writer last gave `poll_input`.
    input_waker: Mutex<Option<Waker>>,
    /// `unparked(rest)`, once called.
    unparked: Mutex<Option<Option<(Bytes, usize)>>>,
    /// Its framed subscription, once its task polled it after it was
    /// unparked.
    returned: Mutex<Option<Framed<SseFraming>>>,
    dropped: Mutex<bool>,
}

impl Socket {
    fn wrote(&self) -> Vec<u8> {
        lock(&self.wrote).clone()
    }

    fn unparked(&self) -> Option<Option<(Bytes, usize)>> {
        lock(&self.unparked).clone()
    }
}

struct Fake {
    socket: Arc<Socket>,
    framed: Option<Framed<SseFraming>>,
    batches: Batches,
    lifecycle: Arc<Lifecycle>,
}

impl Parkable for Fake {
    fn poll_stream(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        if *lock(&self.socket.waiting) {
            return Poll::Pending;
        }
        // Only an unparked stream's task polls it: hand its
        // subscription to the test, and end.
        *lock(&self.socket.returned) = self.framed.take();
        Poll::Ready(())
    }

    fn idle(&self) -> bool {
        !*lock(&self.socket.busy)
    }

    fn batches(&self) -> &Batches {
        &self.batches
    }

    fn lifecycle(&self) -> &Arc<Lifecycle> {
        &self.lifecycle
    }

    fn source(&mut self) -> Option<&mut dyn BatchSource> {
        self.framed.as_mut().map(|f| f as &mut dyn BatchSource)
    }

    fn poll_input(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        *lock(&self.socket.input_waker) = Some(cx.waker().clone());
        if *lock(&self.socket.input) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    fn send_now(&mut self, bytes: &Bytes) -> io::Result<(usize, usize)> {
        let went = match lock(&self.socket.script).pop_front() {
            None => bytes.len(),
            Some(Write::Part(n)) => n.min(bytes.len()),
            Some(Write::WouldBlock) => return Err(io::ErrorKind::WouldBlock.into()),
            Some(Write::Fail) => return Err(io::ErrorKind::ConnectionReset.into()),
        };
        lock(&self.socket.wrote).extend_from_slice(&bytes[..went]);
        *lock(&self.socket.writes) += 1;
        let after = lock(&self.socket.after_write).take();
        if let Some(after) = after {
            after();
        }
        Ok((went, bytes.len()))
    }

    fn flushed(&self) -> bool {
        !*lock(&self.socket.holds_records)
    }

    fn unparked(&mut self, rest: Option<(Bytes, usize)>) {
        *lock(&self.socket.unparked) = Some(rest);
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        *lock(&self.socket.dropped) = true;
    }
}

/// One hub, its streams' lifecycle and metrics, and their writers.
struct Setup {
    hub: Arc<Hub>,
    lifecycle: Arc<Lifecycle>,
    metrics: Arc<Metrics>,
    batches: Batches,
    rv: u64,
}

impl Setup {
    fn new(limits: LogLimits) -> Setup {
        let metrics = Arc::new(Metrics::new());
        let hub = Hub::new(
            ResourceMeta::new("pods", "v1", "Pod"),
            limits,
            metrics.clone(),
        );
        hub.relist(vec![], 1);
        Setup {
            hub,
            lifecycle: Lifecycle::new(),
            batches: Batches::new(
                tokio::runtime::Handle::current(),
                TaskTracker::new(),
                metrics.clone(),
            ),
            metrics,
            rv: 1,
        }
    }

    /// A caught-up stream (its snapshot read), not parked yet.
    async fn stream(&self) -> (Box<Fake>, Arc<Socket>) {
        self.stream_until(None).await
    }

    /// [`Setup::stream`], its credentials ending at `expires`.
    async fn stream_until(&self, expires: Option<Instant>) -> (Box<Fake>, Arc<Socket>) {
        self.stream_of(Filter::default(), expires).await
    }

    /// A caught-up stream of `filter`'s view, not parked yet.
    async fn stream_of(
        &self,
        filter: Filter,
        expires: Option<Instant>,
    ) -> (Box<Fake>, Arc<Socket>) {
        let cx = SubscriptionContext {
            sync_timeout: Duration::from_secs(1),
            lifecycle: self.lifecycle.clone(),
            metrics: self.metrics.clone(),
        };
        let request = Subscribe {
            spec: ViewSpec::new(filter),
            resume: None,
            transport: Transport::Sse,
            expires,
            lease: None,
            access: None,
        };
        let mut sub = Subscription::start(self.hub.clone(), request, &cx)
            .await
            .unwrap();
        loop {
            let item = tokio::time::timeout(Duration::from_secs(5), sub.next()).await;
            match item {
                Ok(Some(Item::Snapshot(_))) => {}
                Ok(Some(Item::SnapshotEnd { .. })) => break,
                _ => panic!("not a snapshot"),
            }
        }
        let framed = Framed::new(sub, SseFraming, Transport::Sse, "test");
        assert!(framed.batchable().is_some(), "caught up");
        let socket = Arc::new(Socket::default());
        let fake = Fake {
            socket: socket.clone(),
            framed: Some(framed),
            batches: self.batches.clone(),
            lifecycle: self.lifecycle.clone(),
        };
        (Box::new(fake), socket)
    }

    /// A caught-up stream, parked.
    async fn parked(&self) -> Arc<Socket> {
        let (fake, socket) = self.stream().await;
        self.batches.park(fake);
        socket
    }

    /// Appends a new pod's ADDED; the bytes SSE frames it in.
    fn append(&mut self) -> Vec<u8> {
        self.rv += 1;
        append(&self.hub, self.rv)
    }

    fn parked_now(&self) -> i64 {
        self.metrics.batched().get()
    }

    /// `kubefan_streams_unparked_total{reason}`, `why` as it is
    /// labelled.
    fn unparked(&self, why: &str) -> u64 {
        let text = self.metrics.encode();
        let label = format!("{{reason=\"{why}\"}}");
        text.lines()
            .filter(|l| l.starts_with("kubefan_streams_unparked_total"))
            .find(|l| l.to_ascii_lowercase().contains(&label.to_ascii_lowercase()))
            .map_or(0, |l| l.rsplit(' ').next().unwrap().parse().unwrap())
    }

    /// Times the writers were polled so far.
    fn writer_polls(&self) -> u64 {
        self.metrics.batch_writer_polls().get()
    }

    fn unparked_total(&self) -> u64 {
        let text = self.metrics.encode();
        text.lines()
            .filter(|l| l.starts_with("kubefan_streams_unparked_total"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum()
    }
}

/// Appends a new pod's ADDED at `rv` to `hub`; the bytes SSE frames it in.
fn append(hub: &Arc<Hub>, rv: u64) -> Vec<u8> {
    let cursor = hub.head();
    let name = format!("p{rv}");
    let json = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default","resourceVersion":"{rv}"}}}}"#
    );
    hub.apply(
        EventType::Added,
        Obj::new(Some("default"), &name, rv, json.as_bytes()),
    );
    let view = hub.view(ViewSpec::new(Filter::default()));
    let step = Step::read(hub, &view, cursor).unwrap();
    assert_eq!(step.deliveries.len(), 1);
    step.deliveries[0].frame().sse().to_vec()
}

/// Lets the writer (and tasks it spawned) run until `done`, within a
/// bounded number of turns.
async fn run_until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("never happened: {what}");
}

/// Every socket was written `expected`: each event once, in order.
fn each_wrote_once_in_order(sockets: &[Arc<Socket>], expected: &[u8]) {
    for (i, socket) in sockets.iter().enumerate() {
        assert!(
            socket.wrote() == expected,
            "stream {i}: not the events once in order"
        );
    }
}

/// Lets everything runnable run a while (for what must not happen).
async fn run_a_while() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// Lets the writers run until one has been polled since `before`
/// ([`Setup::writer_polls`]), then a while more: the witness that what
/// must not happen had the writer's chance to.
async fn writer_ran(s: &Setup, before: u64) {
    run_until("the writer ran", || s.writer_polls() > before).await;
    run_a_while().await;
}

#[tokio::test(start_paused = true)]
async fn a_partial_write_unparks_with_the_rest() {
    let mut s = Setup::new(LogLimits::default());
    let (a, b, c) = (s.parked().await, s.parked().await, s.parked().await);
    run_until("all parked", || s.parked_now() == 3).await;
    lock(&a.script).push_back(Write::Part(5));
    let event = s.append();
    run_until("a unparked", || a.unparked().is_some()).await;
    let (bytes, went) = a.unparked().unwrap().expect("a rest to write");
    assert_eq!(went, 5);
    assert_eq!(&bytes[..], &event[..], "the whole step, of which 5 went");
    assert_eq!(a.wrote(), &event[..5]);
    assert_eq!([a.wrote(), bytes[went..].to_vec()].concat(), event);
    run_until("b and c written", || {
        b.wrote() == event && c.wrote() == event
    })
    .await;
    assert_eq!(s.parked_now(), 2, "b and c stay parked");
    assert_eq!(s.unparked("Write"), 1);
    assert_eq!(s.unparked_total(), 1);
    // The others go on being written; a is not.
    let next = s.append();
    run_until("b and c written again", || {
        b.wrote() == [&event[..], &next].concat() && c.wrote() == [&event[..], &next].concat()
    })
    .await;
    assert_eq!(a.wrote(), &event[..5]);
}

#[tokio::test(start_paused = true)]
async fn a_tls_session_left_holding_records_unparks_its_stream_to_flush_them() {
    let mut s = Setup::new(LogLimits::default());
    let (a, b) = (s.parked().await, s.parked().await);
    run_until("all parked", || s.parked_now() == 2).await;
    *lock(&a.holds_records) = true;
    let event = s.append();
    run_until("a unparked", || a.unparked().is_some()).await;
    // All of it went into the session: its task is handed the write, all
    // of it gone, which makes it send what the session holds.
    let (bytes, went) = a.unparked().unwrap().expect("the write, to flush");
    assert_eq!((&bytes[..], went), (&event[..], event.len()));
    assert_eq!(a.wrote(), event);
    run_until("b written", || b.wrote() == event).await;
    assert_eq!(s.unparked("Flush"), 1);
    assert_eq!(s.unparked("Write"), 0);
    assert_eq!(s.unparked_total(), 1);
    assert_eq!(s.parked_now(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_socket_that_would_block_unparks_with_all_of_it() {
    let mut s = Setup::new(LogLimits::default());
    let (a, b) = (s.parked().await, s.parked().await);
    run_until("all parked", || s.parked_now() == 2).await;
    lock(&a.script).push_back(Write::WouldBlock);
    let event = s.append();
    run_until("a unparked", || a.unparked().is_some()).await;
    let (bytes, went) = a.unparked().unwrap().expect("a rest to write");
    assert_eq!((&bytes[..], went), (&event[..], 0));
    assert!(a.wrote().is_empty());
    run_until("b written", || b.wrote() == event).await;
    assert_eq!(s.unparked("Write"), 1);
    assert_eq!(s.unparked_total(), 1);
    assert_eq!(s.parked_now(), 1);
    // Its task got it back, with its subscription where the writer
    // left it: past nothing (the event is in `rest`).
    run_until("a's task ran", || lock(&a.returned).is_some()).await;
}

#[tokio::test(start_paused = true)]
async fn a_cursor_lapped_inside_a_batch_is_reset_by_its_task() {
    let mut s = Setup::new(LogLimits {
        max_events: 3,
        max_bytes: 1 << 20,
    });
    let a = s.parked().await;
    run_until("a parked", || s.parked_now() == 1).await;
    // The writer does not run between these: a's cursor falls off.
    for _ in 0..6 {
        s.append();
    }
    // b joins at the head, in the same pass.
    let b = s.parked().await;
    run_until("a unparked", || a.unparked().is_some()).await;
    assert_eq!(a.unparked(), Some(None), "nothing of its own to write");
    assert!(a.wrote().is_empty(), "none of the events after the gap");
    assert_eq!(s.unparked("Lapped"), 1);
    assert_eq!(s.unparked_total(), 1);
    run_until("a's task ran", || lock(&a.returned).is_some()).await;
    let mut framed = lock(&a.returned).take().unwrap();
    let sub = framed.subscription_mut();
    let item = tokio::time::timeout(Duration::from_secs(5), sub.next()).await;
    assert!(
        matches!(item, Ok(Some(Item::Reset(ResetReason::Lapped)))),
        "its task resets it first"
    );
    // Then a fresh snapshot of every object.
    let item = tokio::time::timeout(Duration::from_secs(5), sub.next()).await;
    assert!(matches!(item, Ok(Some(Item::Snapshot(objects))) if objects.len() == 6));
    // b stays, and is written what comes next.
    run_until("b parked", || s.parked_now() == 1).await;
    let next = s.append();
    run_until("b written", || b.wrote() == next).await;
}

#[tokio::test(start_paused = true)]
async fn a_stale_input_wake_does_not_unpark_the_slots_next_stream() {
    let mut s = Setup::new(LogLimits::default());
    // c keeps the writer (and its slots) alive.
    let c = s.parked().await;
    let a = s.parked().await;
    run_until("c and a parked", || s.parked_now() == 2).await;
    let stale = lock(&a.input_waker).clone().expect("a's input waker");
    lock(&a.script).push_back(Write::Fail);
    let first = s.append();
    run_until("a ended", || *lock(&a.dropped)).await;
    assert_eq!(a.unparked(), None, "a failed write ends it");
    assert_eq!(s.parked_now(), 1);
    // b takes the slot a left.
    let b = s.parked().await;
    run_until("b parked", || s.parked_now() == 2).await;
    let mine = lock(&b.input_waker).clone().expect("b's input waker");
    assert!(!stale.will_wake(&mine));
    let polls = s.writer_polls();
    stale.wake_by_ref();
    writer_ran(&s, polls).await;
    assert_eq!(s.parked_now(), 2, "b stays parked");
    assert_eq!(b.unparked(), None);
    assert_eq!(s.unparked_total(), 0);
    let next = s.append();
    run_until("b and c written", || {
        b.wrote() == next && c.wrote() == [&first[..], &next].concat()
    })
    .await;
    // b's own input does unpark it.
    *lock(&b.input) = true;
    mine.wake_by_ref();
    run_until("b unparked", || b.unparked().is_some()).await;
    assert_eq!(s.unparked("Input"), 1);
}

#[tokio::test(start_paused = true)]
async fn every_stream_gets_each_event_once_in_order_across_yields() {
    let mut s = Setup::new(LogLimits::default());
    let n = SENDS_PER_POLL + SENDS_PER_POLL / 2;
    let mut sockets = Vec::with_capacity(n);
    for _ in 0..n {
        sockets.push(s.parked().await);
    }
    run_until("all parked", || s.parked_now() == n as i64).await;
    // The second change comes just after the last write before the
    // writer's first yield, the third in the middle of the poll after it:
    // both in the middle of a pass (a hook on the write, since a test
    // task's `yield_now` lets the writer run its whole pass first).
    let (tx, rx) = std::sync::mpsc::channel();
    for (at, rv) in [
        (SENDS_PER_POLL - 1, s.rv + 2),
        (SENDS_PER_POLL + 10, s.rv + 3),
    ] {
        let (hub, tx) = (s.hub.clone(), tx.clone());
        *lock(&sockets[at].after_write) = Some(Box::new(move || {
            tx.send(append(&hub, rv)).unwrap();
        }));
    }
    let mut expected = s.append();
    s.rv += 2;
    run_until("both changes made", || {
        sockets[SENDS_PER_POLL + 10].wrote().len() > expected.len()
    })
    .await;
    expected.extend(rx.try_recv().expect("the second change"));
    expected.extend(rx.try_recv().expect("the third change"));
    run_until("every stream written", || {
        sockets.iter().all(|s| s.wrote().len() >= expected.len())
    })
    .await;
    run_a_while().await;
    each_wrote_once_in_order(&sockets, &expected);
    assert_eq!(s.unparked_total(), 0);
    assert_eq!(s.parked_now(), n as i64);
}

#[tokio::test(start_paused = true)]
async fn a_change_during_a_pass_reaches_the_streams_it_has_yet_to_visit_in_that_pass() {
    let mut s = Setup::new(LogLimits::default());
    let sockets = [s.parked().await, s.parked().await, s.parked().await];
    run_until("all parked", || s.parked_now() == 3).await;
    // The second change comes just after the pass wrote the first stream.
    let (hub, second) = (s.hub.clone(), s.rv + 2);
    let (tx, rx) = std::sync::mpsc::channel();
    *lock(&sockets[0].after_write) = Some(Box::new(move || {
        tx.send(append(&hub, second)).unwrap();
    }));
    let mut expected = s.append();
    s.rv += 1;
    run_until("every stream written", || {
        sockets.iter().all(|s| s.wrote().len() > expected.len())
    })
    .await;
    expected.extend(rx.try_recv().unwrap());
    run_a_while().await;
    for (i, socket) in sockets.iter().enumerate() {
        assert!(
            socket.wrote() == expected,
            "stream {i}: not both, once, in order"
        );
    }
    // Visited before the second change: a write for each. Not visited
    // yet: both in one write, in the same pass, as its own task would.
    assert_eq!(*lock(&sockets[0].writes), 2);
    for socket in &sockets[1..] {
        assert_eq!(
            *lock(&socket.writes),
            1,
            "the second change waited for a pass of its own"
        );
    }
    assert_eq!(s.unparked_total(), 0);
}

/// A pass of thousands of writes takes tens of milliseconds: a stream
/// whose credentials end during the pass is not written when the pass
/// comes to it, an event (`deliver`) or a keep-alive (`tick`), but goes to
/// its task, which ends it. Real time (not paused): the first stream's
/// write takes until past the second's deadline.
#[tokio::test]
async fn a_deadline_that_passes_during_a_pass_is_kept_for_the_streams_after() {
    for tick in [false, true] {
        let mut s = Setup::new(LogLimits::default());
        let a = s.parked().await;
        let deadline = Instant::now() + Duration::from_millis(500);
        let (fake, b) = s.stream_until(Some(deadline)).await;
        s.batches.park(fake);
        // Taken in by the writer (which then watches their input), the
        // first before the second.
        run_until("both taken in", || {
            lock(&a.input_waker).is_some() && lock(&b.input_waker).is_some()
        })
        .await;
        *lock(&a.after_write) = Some(Box::new(move || {
            std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            std::thread::sleep(Duration::from_millis(10));
        }));
        if tick {
            // The first tick owes nothing (the snapshots told a position).
            let polls = s.writer_polls();
            s.lifecycle.tick();
            writer_ran(&s, polls).await;
            s.lifecycle.tick();
        } else {
            s.append();
        }
        run_until("the first stream written", || !a.wrote().is_empty()).await;
        run_until("the second stream unparked", || b.unparked().is_some()).await;
        assert!(Instant::now() >= deadline);
        assert!(
            b.wrote().is_empty(),
            "nothing written past the deadline (tick: {tick}): {:?}",
            String::from_utf8_lossy(&b.wrote())
        );
        assert_eq!(s.unparked("deadline"), 1, "tick: {tick}");
        assert_eq!(a.unparked(), None);
    }
}

#[tokio::test(start_paused = true)]
async fn a_tick_is_written_without_unparking() {
    let s = Setup::new(LogLimits::default());
    let sockets = [s.parked().await, s.parked().await, s.parked().await];
    run_until("all parked", || s.parked_now() == 3).await;
    // Their snapshots told them a position since the last tick: this one
    // owes them nothing.
    let polls = s.writer_polls();
    s.lifecycle.tick();
    writer_ran(&s, polls).await;
    assert!(sockets.iter().all(|s| s.wrote().is_empty()));
    s.lifecycle.tick();
    run_until("keep-alives written", || {
        sockets.iter().all(|s| !s.wrote().is_empty())
    })
    .await;
    run_a_while().await;
    for socket in &sockets {
        assert_eq!(socket.wrote(), b": keep-alive\n\n");
        assert_eq!(socket.unparked(), None);
    }
    assert_eq!(s.unparked_total(), 0);
    assert_eq!(s.parked_now(), 3);
}

/// Keep-alive ticks are spread over the interval by phase: a beat writes
/// only to the streams of its phase, and over an interval every stream
/// has one, each without leaving the writer.
#[tokio::test(start_paused = true)]
async fn a_beat_writes_keep_alives_only_to_the_streams_of_its_phase() {
    let s = Setup::new(LogLimits::default());
    let mut sockets = Vec::new();
    for _ in 0..PHASES {
        sockets.push(s.parked().await);
    }
    run_until("all parked", || s.parked_now() == PHASES as i64).await;
    // Past the snapshot (the first tick owes nothing), then one whole
    // interval: a keep-alive each.
    s.lifecycle.tick();
    run_a_while().await;
    s.lifecycle.tick();
    run_until("keep-alives written", || {
        sockets.iter().all(|s| *lock(&s.writes) == 1)
    })
    .await;
    // One phase at a time: consecutive streams have consecutive phases, so
    // each beat reaches exactly one stream, and each stream once.
    for beat in 1..=PHASES {
        s.lifecycle.beat();
        run_until("the beat's keep-alive written", || {
            sockets.iter().map(|s| *lock(&s.writes)).sum::<usize>() == PHASES + beat
        })
        .await;
        run_a_while().await;
        assert_eq!(
            sockets.iter().map(|s| *lock(&s.writes)).sum::<usize>(),
            PHASES + beat,
            "beat {beat} wrote to more than its phase's stream"
        );
        assert_eq!(
            s.parked_now(),
            PHASES as i64,
            "kubefan_streams_batched across beats"
        );
    }
    for socket in &sockets {
        assert_eq!(*lock(&socket.writes), 2, "one keep-alive per interval");
        assert_eq!(socket.wrote(), b": keep-alive\n\n: keep-alive\n\n");
    }
    assert_eq!(s.unparked_total(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_stream_is_parked_only_once_its_transport_has_nothing_under_way() {
    let mut s = Setup::new(LogLimits::default());
    let (fake, socket) = s.stream().await;
    *lock(&socket.waiting) = true;
    *lock(&socket.busy) = true;
    let mut task = Task(Some(fake));
    let waker = Waker::noop();
    let mut cx = Context::from_waker(waker);
    // Caught up, but its transport is busy (a write under way, a ping to
    // answer): it stays in its task.
    assert!(Pin::new(&mut task).poll(&mut cx).is_pending());
    assert_eq!(s.parked_now(), 0);
    // Idle: its task hands it to its hub's writer and ends.
    *lock(&socket.busy) = false;
    assert!(Pin::new(&mut task).poll(&mut cx).is_ready());
    run_until("the writer took it", || s.parked_now() == 1).await;
    let frame = s.append();
    run_until("the writer wrote the change", || socket.wrote() == frame).await;
}

/// Waits for `done` on a runtime of several threads, whose writers run
/// on the others (where [`run_until`]'s turns are not theirs to take).
async fn within_10s(what: &str, done: impl Fn() -> bool) {
    let wait = async {
        while !done() {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("never happened: {what}"));
}

/// On a runtime of several threads, one view's streams are dealt to one
/// writer per thread, so a change's pass over them runs on every core
/// (`Registry::shards`); each stream still gets every event once, in
/// order, and none leaves its writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_views_streams_are_dealt_to_a_writer_per_thread_and_each_gets_every_event() {
    let mut s = Setup::new(LogLimits::default());
    let n = 16;
    let mut sockets = Vec::with_capacity(n);
    for _ in 0..n {
        sockets.push(s.parked().await);
    }
    within_10s("all parked", || s.parked_now() == n as i64).await;
    assert_eq!(lock(&s.batches.0.writers).len(), 2, "a writer per thread");
    let mut expected = Vec::new();
    for _ in 0..3 {
        expected.extend(s.append());
    }
    within_10s("every stream written", || {
        sockets.iter().all(|s| s.wrote().len() >= expected.len())
    })
    .await;
    each_wrote_once_in_order(&sockets, &expected);
    assert_eq!(s.unparked_total(), 0);
    assert_eq!(s.parked_now(), n as i64);
}

mod pinned;
