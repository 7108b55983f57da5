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
//! [`Step::read`] and moves each stream with `BatchSource::took`, the
//! same two steps a subscription's `poll_next` makes, so a stream's
//! sequence is the same whichever path wrote each part of it.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use prometheus_client::metrics::gauge::Gauge;
use slab::Slab;
use tokio_util::task::TaskTracker;

use super::http::{Out, Pump, PumpTask};
use super::io::InputWatch;
use crate::epoch::Registration;
use crate::hub::{Hub, Lapped, Step, View};
use crate::lifecycle::Lifecycle;
use crate::transport::ChunkSource;

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
    pub(super) fn park<S: ChunkSource>(&self, mut pump: Box<Pump<S>>) {
        let Some(source) = pump.source.batch() else {
            self.unpark(*pump);
            return;
        };
        // The writer watches the hub and the lifecycle for it now.
        source.subscription_mut().stop_waiting();
        let sub = source.subscription();
        let (hub, view) = (sub.hub().clone(), sub.view().clone());
        let key = (Arc::as_ptr(&view) as usize, TypeId::of::<S>());
        let mut writers = lock(&self.0.writers);
        if let Some(mailbox) = writers
            .get(&key)
            .and_then(|m| m.clone().downcast::<Mailbox<S>>().ok())
        {
            let mut inbox = lock(&mailbox.inbox);
            if !inbox.closed {
                inbox.incoming.push(pump);
                let waker = inbox.waker.take();
                drop(inbox);
                drop(writers);
                if let Some(waker) = waker {
                    waker.wake();
                }
                return;
            }
        }
        let lifecycle = pump.deadline.lifecycle.clone();
        let mailbox = Arc::new(Mailbox {
            inbox: Mutex::new(Inbox {
                incoming: vec![pump],
                readable: Vec::new(),
                waker: None,
                closed: false,
            }),
        });
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
            hub_seen: 0,
            hub_wait: Registration::default(),
            life_wait: Registration::default(),
        };
        self.0.runtime.spawn(self.0.tracker.track_future(writer));
    }

    /// Gives a stream a task of its own again.
    fn unpark<S: ChunkSource>(&self, mut pump: Pump<S>) {
        // Its task watches the socket itself (with its own waker).
        pump.hang_up = InputWatch::default();
        self.0
            .runtime
            .spawn(self.0.tracker.track_future(PumpTask(Some(pump))));
    }

    /// A writer with no stream left is gone, unless another took its place.
    fn forget(&self, key: (usize, TypeId), mailbox: &Arc<dyn Any + Send + Sync>) {
        let mut writers = lock(&self.0.writers);
        if writers.get(&key).is_some_and(|m| Arc::ptr_eq(m, mailbox)) {
            writers.remove(&key);
        }
    }
}

/// What reaches a writer from outside its task.
struct Mailbox<S> {
    inbox: Mutex<Inbox<S>>,
}

struct Inbox<S> {
    /// Streams handed over since the writer last looked.
    incoming: Vec<Box<Pump<S>>>,
    /// Parked streams whose socket has input (key and generation).
    readable: Vec<(usize, u64)>,
    /// The writer's task, while it waits.
    waker: Option<Waker>,
    /// The writer ended: a stream parked now needs a new one.
    closed: bool,
}

/// A parked stream's waker for its socket's input: tells its writer.
struct Input<S> {
    mailbox: Weak<Mailbox<S>>,
    key: usize,
    generation: u64,
}

impl<S: Send + 'static> Wake for Input<S> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let Some(mailbox) = self.mailbox.upgrade() else {
            return;
        };
        let mut inbox = lock(&mailbox.inbox);
        inbox.readable.push((self.key, self.generation));
        let waker = inbox.waker.take();
        drop(inbox);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

struct Parked<S> {
    pump: Box<Pump<S>>,
    /// Tells this stream from a later one in the same slot.
    generation: u64,
}

/// One view's caught-up streams, and the task that writes them.
struct Writer<S> {
    key: (usize, TypeId),
    batches: Batches,
    mailbox: Arc<Mailbox<S>>,
    hub: Arc<Hub>,
    view: Arc<View>,
    lifecycle: Arc<Lifecycle>,
    streams: Slab<Parked<S>>,
    generation: u64,
    hub_seen: u64,
    hub_wait: Registration,
    life_seen: u64,
    life_wait: Registration,
}

/// A step read once for every stream at its cursor, and its bytes.
struct Framed {
    step: Step,
    bytes: Option<Bytes>,
    messages: u64,
}

impl<S: ChunkSource> Writer<S> {
    /// Takes a stream in, or gives it its task back if it cannot be
    /// parked after all: something became owed since it left its task, or
    /// its socket has input already.
    fn admit(&mut self, mut pump: Box<Pump<S>>) {
        let batchable = pump
            .source
            .batch()
            .is_some_and(|source| source.batchable().is_some());
        if !batchable {
            return self.batches.unpark(*pump);
        }
        self.generation += 1;
        let generation = self.generation;
        let slot = self.streams.vacant_entry();
        let input = Waker::from(Arc::new(Input {
            mailbox: Arc::downgrade(&self.mailbox),
            key: slot.key(),
            generation,
        }));
        let ready = match &pump.socket {
            Some(socket) => socket
                .tcp()
                .poll_read_ready(&mut Context::from_waker(&input))
                .is_ready(),
            None => true,
        };
        if ready {
            return self.batches.unpark(*pump);
        }
        slot.insert(Parked { pump, generation });
        self.batches.0.parked.inc();
    }

    /// Gives the stream in `key` its task back, with `out` to write first.
    fn unpark(&mut self, key: usize, out: Option<Out>) {
        let Parked { mut pump, .. } = self.streams.remove(key);
        self.batches.0.parked.dec();
        if let Some(out) = out {
            pump.out = out;
        }
        self.batches.unpark(*pump);
    }

    fn unpark_all(&mut self) {
        let keys: Vec<usize> = self.streams.iter().map(|(key, _)| key).collect();
        keys.into_iter().for_each(|key| self.unpark(key, None));
    }

    /// Brings every parked stream to the head of the log.
    fn deliver(&mut self) {
        loop {
            // Usually one cursor: every stream took the last step.
            let mut steps: Vec<(u64, Result<Framed, Lapped>)> = Vec::new();
            let mut unpark: Vec<(usize, Option<Out>)> = Vec::new();
            let mut ended: Vec<usize> = Vec::new();
            let mut again = false;
            for (key, parked) in &mut self.streams {
                let pump = &mut *parked.pump;
                let Some(source) = pump.source.batch() else {
                    unpark.push((key, None));
                    continue;
                };
                let Some(cursor) = source.batchable() else {
                    unpark.push((key, None));
                    continue;
                };
                let at = match steps.iter().position(|(from, _)| *from == cursor) {
                    Some(at) => at,
                    None => {
                        let framed = Step::read(&self.hub, &self.view, cursor).map(|step| {
                            let (bytes, messages) = source.frame_step(&step);
                            Framed {
                                step,
                                bytes,
                                messages,
                            }
                        });
                        steps.push((cursor, framed));
                        steps.len() - 1
                    }
                };
                let framed = match &steps[at].1 {
                    Ok(framed) => framed,
                    // Its task finds it lapped and starts it over.
                    Err(Lapped) => {
                        unpark.push((key, None));
                        continue;
                    }
                };
                again |= framed.step.caught_up.is_none();
                let Some(bytes) = &framed.bytes else {
                    // Nothing this view shows: only the position moves.
                    source.took(&framed.step, 0, 0);
                    continue;
                };
                source.took(&framed.step, framed.messages, bytes.len());
                pump.bytes_sent.inc_by(bytes.len() as u64);
                let mut out = Out::chunk(bytes.clone());
                match write(pump, &out) {
                    Ok(n) if n == out.len() => {}
                    Ok(n) => {
                        out.written = n;
                        unpark.push((key, Some(out)));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        unpark.push((key, Some(out)));
                    }
                    Err(_) => ended.push(key),
                }
            }
            for (key, out) in unpark {
                self.unpark(key, out);
            }
            for key in ended {
                // The connection failed: the stream ends (its access-log
                // line says so), as a task's failed write ends it.
                drop(self.streams.remove(key));
                self.batches.0.parked.dec();
            }
            if !again {
                return;
            }
        }
    }
}

/// One try at writing all of `out`: a `sendmsg` of the chunk-size line,
/// the shared bytes and the CRLF.
fn write<S>(pump: &Pump<S>, out: &Out) -> io::Result<usize> {
    let Some(socket) = &pump.socket else {
        return Err(io::ErrorKind::NotConnected.into());
    };
    let [line, body, tail] = out.parts();
    socket.try_write_vectored(&[IoSlice::new(line), IoSlice::new(body), IoSlice::new(tail)])
}

impl<S: ChunkSource> Future for Writer<S> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let w = self.get_mut();
        loop {
            let (incoming, readable) = {
                let mut inbox = lock(&w.mailbox.inbox);
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
            for pump in incoming {
                w.admit(pump);
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
                let mut inbox = lock(&w.mailbox.inbox);
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

impl<S> Drop for Writer<S> {
    fn drop(&mut self) {
        self.hub.changes().deregister(&mut self.hub_wait);
        self.lifecycle.epoch().deregister(&mut self.life_wait);
        // Streams are left only at a runtime's end (a writer returns once
        // it has none): they end with it.
        for _ in self.streams.drain() {
            self.batches.0.parked.dec();
        }
    }
}
