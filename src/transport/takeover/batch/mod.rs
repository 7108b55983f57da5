//! Caught-up streams of one hub, written together by one task.
//!
//! With a task per stream, every change wakes every subscriber's task:
//! tokio schedules it, it polls its subscription, reads the hub's log
//! under its lock, frames the event and writes it, then registers its
//! waker again. Profiled at 10,000 SSE subscribers, that was 710 ns of a
//! delivery's 6.2 µs beyond the one `sendmsg` a minimal server makes
//! (`loadtest/RESULTS.md`, "Where the CPU floor ratio still goes").
//!
//! So a stream that is caught up (HTTP/1.1, plain or over TLS, where its
//! bytes are encrypted into its own session and the records leave in one
//! write; HTTP/2; a `/ws` subscription), with nothing owed but its
//! subscription's next events, leaves its task and is *parked* with its hub's [`BatchWriter`]: one task per
//! hub (and kind of stream), registered once with the hub and the
//! lifecycle. On a change it reads the log once per view and cursor its
//! streams are at (usually one cursor per view), frames the events once
//! for each, and writes them to each stream's socket in one loop: a
//! `sendmsg` per stream and nothing else, as the floor server does. (A
//! `/ws` subscription's socket is shared with its other subscriptions: its
//! outbox splices the subscription's prefix into the frames as it writes
//! them, `transport::ws::mux::outbox`.)
//!
//! Whether a stream may be parked is decided in one place for every
//! transport, when its task finds it waiting ([`Parkable::parkable`]): its
//! transport has nothing of its own under way ([`Parkable::idle`]) and its
//! subscription owes nothing but its events
//! ([`crate::transport::stream::BatchSource::batchable`]).
//!
//! A parked stream's obligations stay with the writer, in one structure
//! each, not a task or a timer per stream:
//! - keep-alive ticks: the writer asks each stream what the tick owes its
//!   client ([`Parkable::tick`]: a keep-alive, a progress mark, a
//!   WebSocket's ping) and writes it, the same bytes for every stream
//!   that owes the same;
//! - input on its socket, noticed through a waker of the stream's own that
//!   the writer is given: a WebSocket's pong, or a text frame that needs
//!   no answer, is read and absorbed there ([`Parkable::absorb`]);
//! - the expiry of its credentials: one heap of deadlines per writer, one
//!   timer for the earliest;
//! - a change of the access it follows (`hub::scope`): its own waker on the
//!   access's epoch, so a change wakes only the streams it concerns.
//!
//! Whatever a parked stream must do for itself sends it back to a task of
//! its own (*unparked*), where the ordinary path ([`super::http`]) does it:
//! - a socket that takes only part of a write, or none (the rest is
//!   written by the task, under the write timeout);
//! - input it cannot absorb (a hang-up, a WebSocket ping to answer, a
//!   Close);
//! - its credentials' deadline (the task ends the stream, or follows a
//!   refreshed session's new end), or its access moving (the task reads
//!   it and changes what the stream shows);
//! - a WebSocket's idle timeout, looked at on each tick;
//! - shutdown, the hub's closing;
//! - a cursor that fell off the log (the task resets it).
//!
//! A writer with many streams does a few thousand writes per poll
//! ([`SENDS_PER_POLL`]), then yields to the other tasks of its thread and
//! goes on where it stopped.
//!
//! The consistency rule is the subscription's own: the writer reads with
//! [`Step::read`](crate::hub::Step::read), the step a
//! subscription's `poll_next` makes, keeps each stream's cursor and the
//! steps' [`Advance`](crate::hub::Advance) beside it, and moves the
//! stream's subscription by them (`BatchSource::took`, as `poll_next`
//! does) when the stream leaves. So a stream's sequence is the same
//! whichever path wrote each part of it.
//!
//! Measured (`loadtest/RESULTS.md`, 2026-11-26, "Caught-up streams written
//! together"): at 10,000 subscribers a delivery costs within the goal of
//! the floor server's, for SSE and WebSocket alike.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;
use crate::transport::stream::BatchSource;

mod writer;

use writer::BatchWriter;

/// A stream that can leave its task for its hub's writer: an SSE
/// response or a Kubernetes watch over HTTP/1.1 or HTTP/2 (`pump::Pump`), a single-stream
/// WebSocket (`transport::ws::single`) or a `/ws` subscription
/// (`transport::ws::mux`).
pub(crate) trait Parkable: Send + Sized + 'static {
    /// Polls the stream in its own task: ready once it is over, pending
    /// while it waits (its task then parks it if it may be,
    /// [`Parkable::parkable`]).
    fn poll_stream(&mut self, cx: &mut Context<'_>) -> Poll<()>;

    /// Whether nothing of the transport's own is under way: no bytes half
    /// written, no frame half read, nothing owed the client but its
    /// subscription's next events (a pong to send, a Close, the handshake
    /// response), its socket open. Transport state only; what the
    /// subscription owes is [`BatchSource::batchable`]'s.
    fn idle(&self) -> bool;

    /// Whether the stream may leave its task for its hub's writer: the one
    /// place that decides, for every transport. Its transport is idle, its
    /// subscription owes nothing but its events, and its deadline (if it
    /// has one) has not come: past it the stream waits in its task for its
    /// own timer, which fires only at the timer wheel's next millisecond.
    /// Parked, its writer would find the deadline past and hand it straight
    /// back, again and again until then.
    fn parkable(&mut self) -> bool {
        self.idle()
            && self
                .source()
                .and_then(|s| s.batchable())
                .is_some_and(|b| b.deadline.is_none_or(|at| Instant::now() < at))
    }

    /// Frees what only its task uses (buffers kept for its next item): it
    /// is being parked, and a parked stream keeps no more than its state.
    fn shed(&mut self) {}

    fn batches(&self) -> &Batches;

    fn lifecycle(&self) -> &Arc<Lifecycle>;

    /// Its framed subscription, if nothing but its events is owed now.
    fn source(&mut self) -> Option<&mut dyn BatchSource>;

    /// Registers `cx` for input on the socket: ready if there is some.
    fn poll_input(&mut self, cx: &mut Context<'_>) -> Poll<()>;

    /// One try at writing `bytes` (events framed by
    /// [`BatchSource::frame_step`]) as this stream's writer sends them:
    /// how many bytes went, of how many. A plain `sendmsg`, past tokio's
    /// idea of the socket's readiness (`Socket::send_now`).
    fn send_now(&mut self, bytes: &Bytes) -> io::Result<(usize, usize)>;

    /// Whether everything [`Parkable::send_now`] took has left too: false
    /// while a TLS session holds records the socket did not take (the
    /// stream's task sends them, under its write timeout).
    fn flushed(&self) -> bool {
        true
    }

    /// Bytes each message this stream is sent counts beyond the shared
    /// frames' own ([`BatchSource::frame_step`]'s `message_bytes`): a
    /// `/ws` subscription's prefix, spliced in as it is written.
    fn extra_per_message(&self) -> u64 {
        0
    }

    /// Back in a task of its own: it writes `rest` first (a step's bytes,
    /// and how many of them, as [`Parkable::send_now`] sends them, went),
    /// and watches its socket with its own waker again.
    fn unparked(&mut self, rest: Option<(Bytes, usize)>);

    /// A keep-alive tick came (at `now`): what it owes the client, as
    /// [`Parkable::send_now`] sends it. By default what the subscription
    /// owes ([`BatchSource::frame_tick`]).
    fn tick(&mut self, _now: Instant) -> Tick {
        super::pump::owed(self.source())
    }

    /// The socket has input: reads what it can with `cx` (the waker its
    /// writer watches it with). True if all of it needed no answer (the
    /// stream stays parked); false if its task must act on it (it then
    /// finds what was read). By default nothing is absorbed: input on a
    /// stream that takes none is its client hanging up.
    fn absorb(&mut self, _cx: &mut Context<'_>) -> bool {
        false
    }
}

/// What a keep-alive tick owes a parked stream's client.
pub(crate) enum Tick {
    /// These bytes (of which this many count as sent).
    Send(Bytes, u64),
    /// Nothing (it had this tick already).
    Nothing,
    /// Something only its task can do (a WebSocket past its idle timeout).
    Unpark,
}

/// Writes a writer makes per poll before it lets the other tasks of its
/// thread run: at ~2 µs a `sendmsg`, a few milliseconds.
pub(crate) const SENDS_PER_POLL: usize = 2048;

/// A stream's task: the stream, until it is handed to its hub's writer
/// (which starts a task again for it once it has anything of its own to
/// do). The stream's state is boxed, and stays in that one place for the
/// stream's life: parking and unparking move a pointer, and a task is a
/// small allocation of its own that comes and goes. (Moving the state
/// between a task and a box on every tick left both kinds of block
/// behind in the allocator: 0.9 KB more per WebSocket subscriber.)
pub(crate) struct Task<M>(Option<Box<M>>);

impl<M> Task<M> {
    pub(crate) fn new(stream: M) -> Task<M> {
        Task(Some(Box::new(stream)))
    }
}

impl<M: Parkable> Future for Task<M> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let task = self.get_mut();
        let Some(stream) = &mut task.0 else {
            return Poll::Ready(());
        };
        match stream.poll_stream(cx) {
            Poll::Ready(()) => {}
            Poll::Pending if stream.parkable() => {
                if let Some(stream) = task.0.take() {
                    stream.batches().clone().park(stream);
                }
            }
            Poll::Pending => return Poll::Pending,
        }
        task.0 = None;
        Poll::Ready(())
    }
}

/// The writers of every view, and where unparked streams run.
#[derive(Clone)]
pub struct Batches(Arc<Registry>);

struct Registry {
    /// Per hub, source type, id tag and shard: its writer's mailbox.
    writers: Mutex<HashMap<Key, Arc<dyn Any + Send + Sync>>>,
    /// Writers per hub, type and tag: one per worker thread of the
    /// runtime. One writer's pass is a `sendmsg` per stream on one
    /// thread, and a change's last delivery waits for all of them: that
    /// pass is most of a change's latency (`loadtest/RESULTS.md`, "a
    /// writer per runtime thread"). Streams are dealt to the shards in turn
    /// as they park, so a change's pass can run on every core at once (a
    /// woken writer goes to an idle worker thread if there is one).
    shards: usize,
    next_shard: AtomicUsize,
    runtime: tokio::runtime::Handle,
    tracker: TaskTracker,
    /// Streams parked now.
    parked: Gauge,
    /// Streams the writers' passes visited.
    visited: Counter,
    /// Times the writers were polled.
    polls: Counter,
    metrics: Arc<Metrics>,
}

/// What a writer's streams share: their hub (by address), their type,
/// and the tag their ids carry (`hub::scope`), which is in the bytes
/// framed for them; and the shard ([`Registry::shards`]). Streams of
/// several views share a writer: its passes read and frame a step per
/// view and cursor.
type Key = (usize, TypeId, Option<Box<str>>, usize);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Batches {
    pub fn new(
        runtime: tokio::runtime::Handle,
        tracker: TaskTracker,
        metrics: Arc<Metrics>,
    ) -> Batches {
        Batches(Arc::new(Registry {
            writers: Mutex::default(),
            shards: runtime.metrics().num_workers().max(1),
            next_shard: AtomicUsize::new(0),
            runtime,
            tracker,
            parked: metrics.batched(),
            visited: metrics.streams_visited(),
            polls: metrics.batch_writer_polls(),
            metrics,
        }))
    }

    /// Hands a caught-up stream to its hub's writer (started if there is
    /// none). The stream's task ends after this.
    fn park<M: Parkable>(&self, mut stream: Box<M>) {
        stream.shed();
        let Some(source) = stream.source() else {
            self.unpark(stream, None);
            return;
        };
        // The writer watches the hub and the lifecycle for it now.
        source.subscription_mut().stop_waiting();
        let sub = source.subscription();
        let hub = sub.hub().clone();
        let key = (
            Arc::as_ptr(&hub) as usize,
            TypeId::of::<M>(),
            sub.id_tag().map(Box::from),
            self.0.next_shard.fetch_add(1, Ordering::Relaxed) % self.0.shards,
        );
        let mut writers = lock(&self.0.writers);
        if let Some(mailbox) = writers
            .get(&key)
            .and_then(|m| m.clone().downcast::<Mutex<Mailbox<M>>>().ok())
        {
            let mut inbox = lock(&mailbox);
            if !inbox.closed {
                inbox.incoming.push(stream);
                let waker = inbox.waker.take();
                drop(inbox);
                drop(writers);
                if let Some(waker) = waker {
                    waker.wake();
                }
                return;
            }
        }
        let lifecycle = stream.lifecycle().clone();
        let mailbox = Arc::new(Mutex::new(Mailbox {
            incoming: vec![stream],
            readable: Vec::new(),
            waker: None,
            closed: false,
        }));
        writers.insert(key.clone(), mailbox.clone());
        drop(writers);
        let writer = BatchWriter::new(key, self.clone(), mailbox, hub, lifecycle);
        self.0.runtime.spawn(self.0.tracker.track_future(writer));
    }

    /// Gives a stream a task of its own again, `rest` to write first.
    fn unpark<M: Parkable>(&self, mut stream: Box<M>, rest: Option<(Bytes, usize)>) {
        stream.unparked(rest);
        self.0
            .runtime
            .spawn(self.0.tracker.track_future(Task(Some(stream))));
    }

    /// A writer with no stream left is gone, unless another took its place.
    fn forget(&self, key: &Key, mailbox: &Arc<dyn Any + Send + Sync>) {
        let mut writers = lock(&self.0.writers);
        if writers.get(key).is_some_and(|m| Arc::ptr_eq(m, mailbox)) {
            writers.remove(key);
        }
    }
}

/// What reaches a writer from outside its task (behind a mutex).
struct Mailbox<M> {
    /// Streams handed over since the writer last looked.
    incoming: Vec<Box<M>>,
    /// Parked streams whose socket has input, or whose access moved (key
    /// and generation).
    readable: Vec<(usize, u64)>,
    /// The writer's task, while it waits.
    waker: Option<Waker>,
    /// The writer ended: a stream parked now needs a new one.
    closed: bool,
}

/// A parked stream's waker for its socket's input and its access's
/// changes: tells its writer.
struct Input<M> {
    mailbox: Weak<Mutex<Mailbox<M>>>,
    key: usize,
    generation: u64,
}

impl<M: Send + 'static> Wake for Input<M> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(mailbox) = self.mailbox.upgrade() else {
            return;
        };
        let mut inbox = lock(&mailbox);
        inbox.readable.push((self.key, self.generation));
        let waker = inbox.waker.take();
        drop(inbox);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests;
