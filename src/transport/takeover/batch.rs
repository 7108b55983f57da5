//! Caught-up streams of one view, written together by one task.
//!
//! With a task per stream, every change wakes every subscriber's task:
//! tokio schedules it, it polls its subscription, reads the hub's log
//! under its lock, frames the event and writes it, then registers its
//! waker again. Profiled at 10,000 SSE subscribers, that was 710 ns of a
//! delivery's 6.2 µs beyond the one `sendmsg` a minimal server makes
//! (`loadtest/RESULTS.md`, "Where the CPU floor ratio still goes").
//!
//! So a stream that is caught up, on a plain HTTP/1.1 socket, with nothing
//! owed but its subscription's next events
//! ([`crate::transport::stream::BatchSource::batchable`]),
//! leaves its task and is *parked* with its view's [`Writer`]: one task per
//! view, registered once with the hub and the lifecycle. On a change it
//! reads the log once per cursor its streams are at (usually one), frames
//! the events once, and writes them to each stream's socket in one loop: a
//! `sendmsg` per stream and nothing else, as the floor server does.
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
//! [`Step::read`], the step a subscription's `poll_next` makes, keeps each
//! stream's cursor and the steps' [`Advance`] beside it, and moves the
//! stream's subscription by them (`BatchSource::took`, as `poll_next`
//! does) when the stream leaves. So a stream's sequence is the same
//! whichever path wrote each part of it.
//!
//! Measured (`loadtest/RESULTS.md`, 2026-11-26, "Caught-up streams written
//! together"): at 10,000 subscribers a delivery costs within the goal of
//! the floor server's, for SSE and WebSocket alike.

use std::any::{Any, TypeId};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use slab::Slab;
use tokio::time::{Instant, Sleep};
use tokio_util::task::TaskTracker;

use crate::epoch::Registration;
use crate::hub::{Advance, Hub, Lapped, Step, View};
use crate::lifecycle::Lifecycle;
use crate::metrics::{Metrics, Unparked};
use crate::transport::stream::{BatchSource, Batched};

/// A stream that can leave its task for its view's writer: an SSE
/// response (`http::Pump`) or a single-stream WebSocket
/// (`transport::ws::single`).
pub(crate) trait Parkable: Send + Sized + 'static {
    /// Polls the stream in its own task, until it ends or can be parked.
    fn poll_stream(&mut self, cx: &mut Context<'_>) -> Poll<Flow>;

    fn batches(&self) -> &Batches;

    fn lifecycle(&self) -> &Arc<Lifecycle>;

    /// Its framed subscription, if nothing but its events is owed now.
    fn source(&mut self) -> Option<&mut dyn BatchSource>;

    /// Registers `cx` for input on the socket: ready if there is some.
    fn poll_input(&self, cx: &mut Context<'_>) -> Poll<()>;

    /// One try at writing `bytes` (events framed by
    /// [`BatchSource::frame_step`]) as this stream's writer sends them:
    /// how many bytes went, of how many. A plain `sendmsg`, past tokio's
    /// idea of the socket's readiness (`Socket::send_now`).
    fn send_now(&self, bytes: &Bytes) -> io::Result<(usize, usize)>;

    /// The counter of bytes sent on this stream's resource and transport.
    fn bytes_counter(&self) -> Counter;

    /// Back in a task of its own: it writes `rest` first (a step's bytes,
    /// and how many of them, as [`Parkable::send_now`] sends them, went),
    /// and watches its socket with its own waker again.
    fn unparked(&mut self, rest: Option<(Bytes, usize)>);

    /// A keep-alive tick came (at `now`): what it owes the client, as
    /// [`Parkable::send_now`] sends it. By default what the subscription
    /// owes ([`BatchSource::frame_tick`]).
    fn tick(&mut self, _now: Instant) -> Tick {
        match self.source() {
            Some(source) => match source.frame_tick() {
                Some((bytes, counted)) => Tick::Send(bytes, counted),
                None => Tick::Nothing,
            },
            None => Tick::Unpark,
        }
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

/// How a stream's task stops polling it.
pub(crate) enum Flow {
    /// The stream is over.
    Ended,
    /// The stream is caught up: its view's writer takes it.
    Batch,
}

/// A stream's task: the stream, until it is handed to its view's writer
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
        let flow = std::task::ready!(stream.poll_stream(cx));
        if let (Flow::Batch, Some(stream)) = (flow, task.0.take()) {
            stream.batches().clone().park(stream);
        }
        task.0 = None;
        Poll::Ready(())
    }
}

/// The writers of every view, and where unparked streams run.
#[derive(Clone)]
pub struct Batches(Arc<Registry>);

struct Registry {
    /// Per view, source type and id tag: its writer's mailbox.
    writers: Mutex<HashMap<Key, Arc<dyn Any + Send + Sync>>>,
    runtime: tokio::runtime::Handle,
    tracker: TaskTracker,
    /// Streams parked now.
    parked: Gauge,
    metrics: Arc<Metrics>,
}

/// What a writer's streams share: their view (by address), their type,
/// and the tag their ids carry (`hub::scope`), which is in the bytes
/// framed for them.
type Key = (usize, TypeId, Option<Box<str>>);

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
            runtime,
            tracker,
            parked: metrics.batched(),
            metrics,
        }))
    }

    /// Hands a caught-up stream to its view's writer (started if there is
    /// none). The stream's task ends after this.
    fn park<M: Parkable>(&self, mut stream: Box<M>) {
        let Some(source) = stream.source() else {
            self.unpark(stream, None);
            return;
        };
        // The writer watches the hub and the lifecycle for it now.
        source.subscription_mut().stop_waiting();
        let sub = source.subscription();
        let (hub, view) = (sub.hub().clone(), sub.view().clone());
        let key = (
            Arc::as_ptr(&view) as usize,
            TypeId::of::<M>(),
            sub.id_tag().map(Box::from),
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
        let writer = Writer {
            key,
            batches: self.clone(),
            life_seen: lifecycle.epoch().current(),
            mailbox,
            hub,
            view,
            lifecycle,
            streams: Slab::new(),
            generation: 0,
            counters: None,
            hub_seen: 0,
            hub_wait: Registration::default(),
            life_wait: Registration::default(),
            deadlines: BinaryHeap::new(),
            timer: None,
            pass: None,
            ticking: None,
            budget: 0,
        };
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

struct Parked<M> {
    stream: Box<M>,
    /// Tells this stream from a later one in the same slot.
    generation: u64,
    /// Where its subscription is in the log: the writer moves it, and
    /// keeps what it sent here (`taken`, `events`, `bytes`) until the
    /// stream leaves ([`Parked::settle`]). Each delivery then touches this
    /// slot and the socket, and nothing else of the stream's state.
    cursor: u64,
    taken: Option<Advance>,
    events: u64,
    bytes: u64,
    /// What its socket's input and its access's changes wake.
    input: Waker,
    /// When its credentials expire (also in the writer's heap).
    deadline: Option<Instant>,
    /// It follows an access that can change.
    scoped: bool,
}

impl<M: Parkable> Parked<M> {
    /// Moves the stream's subscription to where the writer brought it, and
    /// counts what it sent in the stream's own record.
    fn settle(mut self) -> Box<M> {
        self.settle_here();
        self.stream
    }

    /// Moves the stream's subscription to where the writer brought it,
    /// keeping the stream parked (before a tick asks it what it owes).
    fn settle_here(&mut self) {
        if let (Some(advance), Some(source)) = (self.taken.take(), self.stream.source()) {
            source.took(&advance, self.events, self.bytes);
        }
        (self.events, self.bytes) = (0, 0);
    }
}

/// A stream a pass sends back to its task: its slot, what it has to
/// write first, and why.
type Leaving = (usize, Option<(Bytes, usize)>, Unparked);

/// One try at writing `bytes` to the stream in slot `key`: true if they
/// went, or the stream's task is to write the rest (it joins `unpark`);
/// false if the connection failed (it joins `ended`).
fn send<M: Parkable>(
    key: usize,
    stream: &M,
    bytes: &Bytes,
    unpark: &mut Vec<Leaving>,
    ended: &mut Vec<usize>,
) -> bool {
    let rest = match stream.send_now(bytes) {
        Ok((went, all)) if went == all => return true,
        Ok((went, _)) => went,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
        Err(_) => {
            ended.push(key);
            return false;
        }
    };
    // Its task writes the rest: sent all the same.
    unpark.push((key, Some((bytes.clone(), rest)), Unparked::Write));
    true
}

/// A pass over a writer's streams that brings each to the head of the
/// log, kept across the writer's yields.
struct Pass {
    /// The steps read so far, one per cursor the streams were at.
    steps: Vec<Prepared>,
    /// The next slot to visit.
    next: usize,
    /// A step stopped short of the head, or a stream came in meanwhile:
    /// another pass follows.
    again: bool,
}

/// One view's caught-up streams, and the task that writes them.
struct Writer<M: Parkable> {
    key: Key,
    batches: Batches,
    mailbox: Arc<Mutex<Mailbox<M>>>,
    hub: Arc<Hub>,
    view: Arc<View>,
    lifecycle: Arc<Lifecycle>,
    streams: Slab<Parked<M>>,
    generation: u64,
    /// The events and bytes sent on the view's resource and transport
    /// (the same counters every stream of the writer holds).
    counters: Option<(Counter, Counter)>,
    hub_seen: u64,
    hub_wait: Registration,
    life_seen: u64,
    life_wait: Registration,
    /// The streams' deadlines (and slot and generation), earliest first;
    /// entries of streams gone are dropped as they come up.
    deadlines: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    /// Set for the earliest deadline.
    timer: Option<Pin<Box<Sleep>>>,
    /// The delivery under way, if it yielded.
    pass: Option<Pass>,
    /// The keep-alive tick under way: the next slot to visit.
    ticking: Option<usize>,
    /// Writes left before this poll yields.
    budget: usize,
}

/// A step read and framed once for every stream at one cursor, and how
/// many streams took it.
struct Prepared {
    from: u64,
    step: Result<(Step, Option<Batched>), Lapped>,
    took: u64,
}

impl<M: Parkable> Writer<M> {
    /// Takes a stream in, or gives it its task back if it cannot be
    /// parked after all: something became owed since it left its task, or
    /// its socket has input already.
    fn admit(&mut self, mut stream: Box<M>) {
        let Some(source) = stream.source() else {
            return self.refuse(stream);
        };
        let Some(batchable) = source.batchable() else {
            return self.refuse(stream);
        };
        if self.counters.is_none() {
            self.counters = Some((source.events_counter(), stream.bytes_counter()));
        }
        self.generation += 1;
        let generation = self.generation;
        let slot = self.streams.vacant_entry();
        let key = slot.key();
        let input = Waker::from(Arc::new(Input {
            mailbox: Arc::downgrade(&self.mailbox),
            key,
            generation,
        }));
        let mut cx = Context::from_waker(&input);
        if stream.poll_input(&mut cx).is_ready() {
            return self.refuse(stream);
        }
        if batchable.scoped
            && stream
                .source()
                .is_none_or(|s| s.subscription_mut().poll_scope(&mut cx).is_ready())
        {
            return self.refuse(stream);
        }
        if let Some(at) = batchable.deadline {
            self.deadlines.push(Reverse((at, key, generation)));
        }
        slot.insert(Parked {
            stream,
            generation,
            cursor: batchable.cursor,
            taken: None,
            events: 0,
            bytes: 0,
            input,
            deadline: batchable.deadline,
            scoped: batchable.scoped,
        });
        self.batches.0.parked.inc();
        // A stream that came in during a pass may be behind its head.
        if let Some(pass) = &mut self.pass {
            pass.again = true;
        }
    }

    /// Gives a stream its task back before it was parked here: something
    /// became owed since it left its task.
    fn refuse(&self, stream: Box<M>) {
        self.batches.0.metrics.stream_unparked(Unparked::Refused);
        self.batches.unpark(stream, None);
    }

    /// The stream in `key` (of `generation`) has input, or its access
    /// moved: it stays if it can absorb what came.
    fn input(&mut self, key: usize, generation: u64) {
        let Some(parked) = self.streams.get_mut(key) else {
            return;
        };
        if parked.generation != generation {
            return;
        }
        let moved = parked.scoped
            && parked
                .stream
                .source()
                .is_none_or(|s| s.subscription().scope_moved());
        if moved {
            self.unpark(key, None, Unparked::Access);
        } else if !parked
            .stream
            .absorb(&mut Context::from_waker(&parked.input))
        {
            self.unpark(key, None, Unparked::Input);
        }
    }

    /// Gives the streams whose credentials expired their tasks back; sets
    /// the timer for the next deadline. Ready if it fired already.
    fn poll_deadlines(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(&Reverse((first, _, _))) = self.deadlines.peek() else {
            self.timer = None;
            return Poll::Pending;
        };
        let now = Instant::now();
        if first <= now {
            while let Some(&Reverse((at, key, generation))) = self.deadlines.peek() {
                if at > now {
                    break;
                }
                self.deadlines.pop();
                if self
                    .streams
                    .get(key)
                    .is_some_and(|p| p.generation == generation && p.deadline == Some(at))
                {
                    self.unpark(key, None, Unparked::Deadline);
                }
            }
            return Poll::Ready(());
        }
        // Entries of streams that left: dropped when they outnumber the
        // streams held.
        if self.deadlines.len() > 2 * self.streams.len() + 64 {
            let streams = &self.streams;
            self.deadlines.retain(|Reverse((at, key, generation))| {
                streams
                    .get(*key)
                    .is_some_and(|p| p.generation == *generation && p.deadline == Some(*at))
            });
        }
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(first)));
        if timer.deadline() != first {
            timer.as_mut().reset(first);
        }
        timer.as_mut().poll(cx)
    }

    /// Takes the stream in `key` out, its subscription moved to where the
    /// writer brought it.
    fn leave(&mut self, key: usize) -> Box<M> {
        self.batches.0.parked.dec();
        self.streams.remove(key).settle()
    }

    /// Gives the stream in `key` its task back, with `rest` to write first.
    fn unpark(&mut self, key: usize, rest: Option<(Bytes, usize)>, why: Unparked) {
        self.batches.0.metrics.stream_unparked(why);
        let stream = self.leave(key);
        self.batches.unpark(stream, rest);
    }

    fn unpark_all(&mut self, why: Unparked) {
        let keys: Vec<usize> = self.streams.iter().map(|(key, _)| key).collect();
        keys.into_iter().for_each(|key| self.unpark(key, None, why));
    }

    /// Brings every parked stream to the head of the log, within the
    /// poll's budget of writes: false if it stopped short (the pass goes
    /// on at the next poll).
    fn deliver(&mut self) -> bool {
        loop {
            let mut pass = match self.pass.take() {
                Some(pass) => pass,
                None => {
                    // Seen before reading: a change after this point
                    // wakes the writer.
                    self.hub_seen = self.hub.changes().current();
                    Pass {
                        steps: Vec::new(),
                        next: 0,
                        again: false,
                    }
                }
            };
            let now = Instant::now();
            let mut unpark: Vec<Leaving> = Vec::new();
            let mut ended: Vec<usize> = Vec::new();
            let mut stopped = false;
            for (key, parked) in &mut self.streams {
                if key < pass.next {
                    continue;
                }
                if self.budget == 0 {
                    pass.next = key;
                    stopped = true;
                    break;
                }
                // Owed something of its own since it came: its task acts.
                let expired = parked.deadline.is_some_and(|at| at <= now);
                let Some(source) = parked.stream.source() else {
                    unpark.push((key, None, Unparked::Refused));
                    continue;
                };
                if expired {
                    unpark.push((key, None, Unparked::Deadline));
                    continue;
                }
                if parked.scoped && source.subscription().scope_moved() {
                    unpark.push((key, None, Unparked::Access));
                    continue;
                }
                // Usually one cursor: every stream took the last step.
                let at = match pass.steps.iter().position(|f| f.from == parked.cursor) {
                    Some(at) => at,
                    None => {
                        let step = Step::read(&self.hub, &self.view, parked.cursor).map(|step| {
                            let batched = source.frame_step(&step);
                            (step, batched)
                        });
                        pass.steps.push(Prepared {
                            from: parked.cursor,
                            step,
                            took: 0,
                        });
                        pass.steps.len() - 1
                    }
                };
                let prepared = &mut pass.steps[at];
                let (step, batched) = match &prepared.step {
                    Ok(step) => step,
                    // Its task finds it lapped and starts it over.
                    Err(Lapped) => {
                        unpark.push((key, None, Unparked::Lapped));
                        continue;
                    }
                };
                if step.advance.cursor == parked.cursor {
                    // Nothing new in the log; but the hub's position may
                    // have moved past its last event (an upstream
                    // bookmark): the stream's moves with it, as its task's
                    // read would move it, so that a tick tells the client.
                    if step.advance.caught_up.is_some() {
                        match &mut parked.taken {
                            Some(taken) => taken.then(&step.advance),
                            None => parked.taken = Some(step.advance),
                        }
                    }
                    continue;
                }
                pass.again |= step.advance.caught_up.is_none();
                parked.cursor = step.advance.cursor;
                match &mut parked.taken {
                    Some(taken) => taken.then(&step.advance),
                    None => parked.taken = Some(step.advance),
                }
                let Some(batched) = batched else {
                    // Nothing this view shows: only the position moves.
                    continue;
                };
                self.budget -= 1;
                if !send(
                    key,
                    &*parked.stream,
                    &batched.bytes,
                    &mut unpark,
                    &mut ended,
                ) {
                    continue;
                }
                parked.events += batched.messages;
                parked.bytes += batched.message_bytes;
                prepared.took += 1;
            }
            self.settle_all(unpark, ended);
            if stopped {
                self.pass = Some(pass);
                return false;
            }
            if let Some((events, sent)) = &self.counters {
                for prepared in &pass.steps {
                    if let Ok((_, Some(batched))) = &prepared.step {
                        events.inc_by(prepared.took * batched.messages);
                        sent.inc_by(prepared.took * batched.message_bytes);
                    }
                }
            }
            if !pass.again {
                return true;
            }
        }
    }

    /// Writes what the keep-alive tick under way owes each stream, within
    /// the poll's budget of writes: false if it stopped short.
    fn tick(&mut self) -> bool {
        let Some(from) = self.ticking else {
            return true;
        };
        let now = Instant::now();
        let mut unpark: Vec<Leaving> = Vec::new();
        let mut ended: Vec<usize> = Vec::new();
        let mut stopped = None;
        for (key, parked) in &mut self.streams {
            if key < from {
                continue;
            }
            if self.budget == 0 {
                stopped = Some(key);
                break;
            }
            // What the tick owes depends on where the writer brought it.
            parked.settle_here();
            match parked.stream.tick(now) {
                Tick::Nothing => {}
                Tick::Unpark => unpark.push((key, None, Unparked::Idle)),
                Tick::Send(bytes, counted) => {
                    self.budget -= 1;
                    if !send(key, &*parked.stream, &bytes, &mut unpark, &mut ended) {
                        continue;
                    }
                    if let Some((_, sent)) = &self.counters {
                        sent.inc_by(counted);
                    }
                }
            }
        }
        self.settle_all(unpark, ended);
        self.ticking = stopped;
        stopped.is_none()
    }

    /// Gives streams their tasks back (`rest` to write first), and ends
    /// those whose connection failed (their access-log line says so, as a
    /// task's failed write ends it).
    fn settle_all(&mut self, unpark: Vec<Leaving>, ended: Vec<usize>) {
        for (key, rest, why) in unpark {
            self.unpark(key, rest, why);
        }
        for key in ended {
            drop(self.leave(key));
        }
    }
}

impl<M: Parkable> Future for Writer<M> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let w = self.get_mut();
        w.budget = SENDS_PER_POLL;
        loop {
            let (incoming, readable) = {
                let mut inbox = lock(&w.mailbox);
                if !inbox
                    .waker
                    .as_ref()
                    .is_some_and(|k| k.will_wake(cx.waker()))
                {
                    inbox.waker = Some(cx.waker().clone());
                }
                (
                    std::mem::take(&mut inbox.incoming),
                    std::mem::take(&mut inbox.readable),
                )
            };
            for stream in incoming {
                w.admit(stream);
            }
            for (key, generation) in readable {
                w.input(key, generation);
            }
            let life = w.lifecycle.epoch().current();
            if life != w.life_seen {
                w.life_seen = life;
                if w.lifecycle.is_shutting_down() {
                    // Each stream's task sends its last message.
                    w.unpark_all(Unparked::Shutdown);
                } else {
                    // A tick: written here, from the first slot on.
                    w.ticking = Some(0);
                }
            }
            if w.hub.closed().is_some() {
                // Each stream's task sends the closed hub's last message.
                w.unpark_all(Unparked::Closed);
            }
            let expired = w.poll_deadlines(cx).is_ready();
            let done = w.deliver() && w.tick();
            if w.streams.is_empty() {
                w.pass = None;
                w.ticking = None;
                let mut inbox = lock(&w.mailbox);
                if inbox.incoming.is_empty() {
                    inbox.closed = true;
                    drop(inbox);
                    let mailbox: Arc<dyn Any + Send + Sync> = w.mailbox.clone();
                    w.batches.forget(&w.key, &mailbox);
                    return Poll::Ready(());
                }
                continue;
            }
            if !done {
                // The budget is spent: the other tasks of this thread
                // first, then the rest.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if expired {
                continue;
            }
            let hub = w.hub.changes().poll_moved(w.hub_seen, &mut w.hub_wait, cx);
            let life = w
                .lifecycle
                .epoch()
                .poll_moved(w.life_seen, &mut w.life_wait, cx);
            if hub.is_pending() && life.is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl<M: Parkable> Drop for Writer<M> {
    fn drop(&mut self) {
        self.hub.changes().deregister(&mut self.hub_wait);
        self.lifecycle.epoch().deregister(&mut self.life_wait);
        // Streams are left only at a runtime's end (a writer returns once
        // it has none): they end with it.
        let keys: Vec<usize> = self.streams.iter().map(|(key, _)| key).collect();
        for key in keys {
            drop(self.leave(key));
        }
    }
}

#[cfg(test)]
mod tests;
