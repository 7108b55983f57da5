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
//! Whatever a parked stream must do for itself sends it back to a task of
//! its own (*unparked*), where the ordinary path ([`super::http`]) does it:
//! - a socket that takes only part of a write, or none (the rest is
//!   written by the task, under the write timeout);
//! - input on the socket (a hang-up), noticed through a waker of the
//!   stream's own that the writer is given;
//! - a keep-alive tick, shutdown, the hub's closing;
//! - a cursor that fell off the log (the task resets it).
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
use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use slab::Slab;
use tokio_util::task::TaskTracker;

use crate::epoch::Registration;
use crate::hub::{Advance, Hub, Lapped, Step, View};
use crate::lifecycle::Lifecycle;
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
}

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
    /// Per view and source type: its writer's mailbox.
    writers: Mutex<HashMap<(usize, TypeId), Arc<dyn Any + Send + Sync>>>,
    runtime: tokio::runtime::Handle,
    tracker: TaskTracker,
    /// Streams parked now.
    parked: Gauge,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Batches {
    pub fn new(runtime: tokio::runtime::Handle, tracker: TaskTracker, parked: Gauge) -> Batches {
        Batches(Arc::new(Registry {
            writers: Mutex::default(),
            runtime,
            tracker,
            parked,
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
        let key = (Arc::as_ptr(&view) as usize, TypeId::of::<M>());
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
        writers.insert(key, mailbox.clone());
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
    fn forget(&self, key: (usize, TypeId), mailbox: &Arc<dyn Any + Send + Sync>) {
        let mut writers = lock(&self.0.writers);
        if writers.get(&key).is_some_and(|m| Arc::ptr_eq(m, mailbox)) {
            writers.remove(&key);
        }
    }
}

/// What reaches a writer from outside its task (behind a mutex).
struct Mailbox<M> {
    /// Streams handed over since the writer last looked.
    incoming: Vec<Box<M>>,
    /// Parked streams whose socket has input (key and generation).
    readable: Vec<(usize, u64)>,
    /// The writer's task, while it waits.
    waker: Option<Waker>,
    /// The writer ended: a stream parked now needs a new one.
    closed: bool,
}

/// A parked stream's waker for its socket's input: tells its writer.
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
}

impl<M: Parkable> Parked<M> {
    /// Moves the stream's subscription to where the writer brought it, and
    /// counts what it sent in the stream's own record.
    fn settle(mut self) -> Box<M> {
        if let (Some(advance), Some(source)) = (self.taken.take(), self.stream.source()) {
            source.took(&advance, self.events, self.bytes);
        }
        self.stream
    }
}

/// One view's caught-up streams, and the task that writes them.
struct Writer<M: Parkable> {
    key: (usize, TypeId),
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
            return self.batches.unpark(stream, None);
        };
        let Some(cursor) = source.batchable() else {
            return self.batches.unpark(stream, None);
        };
        if self.counters.is_none() {
            self.counters = Some((source.events_counter(), stream.bytes_counter()));
        }
        self.generation += 1;
        let generation = self.generation;
        let slot = self.streams.vacant_entry();
        let input = Waker::from(Arc::new(Input {
            mailbox: Arc::downgrade(&self.mailbox),
            key: slot.key(),
            generation,
        }));
        if stream
            .poll_input(&mut Context::from_waker(&input))
            .is_ready()
        {
            return self.batches.unpark(stream, None);
        }
        slot.insert(Parked {
            stream,
            generation,
            cursor,
            taken: None,
            events: 0,
            bytes: 0,
        });
        self.batches.0.parked.inc();
    }

    /// Takes the stream in `key` out, its subscription moved to where the
    /// writer brought it.
    fn leave(&mut self, key: usize) -> Box<M> {
        self.batches.0.parked.dec();
        self.streams.remove(key).settle()
    }

    /// Gives the stream in `key` its task back, with `rest` to write first.
    fn unpark(&mut self, key: usize, rest: Option<(Bytes, usize)>) {
        let stream = self.leave(key);
        self.batches.unpark(stream, rest);
    }

    fn unpark_all(&mut self) {
        let keys: Vec<usize> = self.streams.iter().map(|(key, _)| key).collect();
        keys.into_iter().for_each(|key| self.unpark(key, None));
    }

    /// Brings every parked stream to the head of the log.
    fn deliver(&mut self) {
        loop {
            // Usually one cursor: every stream took the last step.
            let mut steps: Vec<Prepared> = Vec::new();
            let mut unpark: Vec<(usize, Option<(Bytes, usize)>)> = Vec::new();
            let mut ended: Vec<usize> = Vec::new();
            let mut again = false;
            for (key, parked) in &mut self.streams {
                let at = match steps.iter().position(|f| f.from == parked.cursor) {
                    Some(at) => at,
                    None => {
                        let Some(source) = parked.stream.source() else {
                            unpark.push((key, None));
                            continue;
                        };
                        let step = Step::read(&self.hub, &self.view, parked.cursor).map(|step| {
                            let batched = source.frame_step(&step);
                            (step, batched)
                        });
                        steps.push(Prepared {
                            from: parked.cursor,
                            step,
                            took: 0,
                        });
                        steps.len() - 1
                    }
                };
                let prepared = &mut steps[at];
                let (step, batched) = match &prepared.step {
                    Ok(step) => step,
                    // Its task finds it lapped and starts it over.
                    Err(Lapped) => {
                        unpark.push((key, None));
                        continue;
                    }
                };
                if step.advance.cursor == parked.cursor {
                    // Nothing new in the log.
                    continue;
                }
                again |= step.advance.caught_up.is_none();
                parked.cursor = step.advance.cursor;
                match &mut parked.taken {
                    Some(taken) => taken.then(&step.advance),
                    None => parked.taken = Some(step.advance),
                }
                let Some(batched) = batched else {
                    // Nothing this view shows: only the position moves.
                    continue;
                };
                parked.events += batched.messages;
                parked.bytes += batched.message_bytes;
                prepared.took += 1;
                let bytes = &batched.bytes;
                match parked.stream.send_now(bytes) {
                    Ok((went, all)) if went == all => {}
                    Ok((went, _)) => unpark.push((key, Some((bytes.clone(), went)))),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        unpark.push((key, Some((bytes.clone(), 0))));
                    }
                    Err(_) => ended.push(key),
                }
            }
            if let Some((events, sent)) = &self.counters {
                for prepared in &steps {
                    if let Ok((_, Some(batched))) = &prepared.step {
                        events.inc_by(prepared.took * batched.messages);
                        sent.inc_by(prepared.took * batched.message_bytes);
                    }
                }
            }
            for (key, rest) in unpark {
                self.unpark(key, rest);
            }
            for key in ended {
                // The connection failed: the stream ends (its access-log
                // line says so), as a task's failed write ends it.
                drop(self.leave(key));
            }
            if !again {
                return;
            }
        }
    }
}

impl<M: Parkable> Future for Writer<M> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let w = self.get_mut();
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
                if w.streams
                    .get(key)
                    .is_some_and(|p| p.generation == generation)
                {
                    w.unpark(key, None);
                }
            }
            // A tick or shutdown: each stream's task sends its keep-alive,
            // progress mark or last message, then comes back. So does a
            // closed hub's (its last message).
            let life = w.lifecycle.epoch().current();
            if life != w.life_seen || w.hub.closed().is_some() {
                w.life_seen = life;
                w.unpark_all();
            }
            // Seen before reading: a change after this point wakes us.
            w.hub_seen = w.hub.changes().current();
            w.deliver();
            if w.streams.is_empty() {
                let mut inbox = lock(&w.mailbox);
                if inbox.incoming.is_empty() {
                    inbox.closed = true;
                    drop(inbox);
                    let mailbox: Arc<dyn Any + Send + Sync> = w.mailbox.clone();
                    w.batches.forget(w.key, &mailbox);
                    return Poll::Ready(());
                }
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
