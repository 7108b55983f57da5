//! One hub's writer: the streams it holds, what wakes it (the hub, the
//! lifecycle, its streams' input and access, their deadlines), and its
//! task. How it brings its streams to the head of the log and writes a
//! tick is `pass`.

use std::any::Any;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use slab::Slab;
use tokio::time::{Instant, Sleep};

use super::{Batches, Input, Key, Mailbox, Parkable, SENDS_PER_POLL, lock};
use crate::epoch::Registration;
use crate::hub::{Advance, Hub, View};
use crate::lifecycle::Lifecycle;
use crate::metrics::Unparked;

mod dispatch;
mod pass;

use dispatch::Dispatch;
use pass::Pass;

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
    /// Its view, if the view pins a value (`hub::pin`): the writer then
    /// visits it only for the events that reach it (`dispatch`).
    pinned: Option<Arc<View>>,
    /// Pinned, and no event in the log from its cursor to where the
    /// writer's scan reached can reach it.
    clean: bool,
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

/// One hub's caught-up streams (of one kind, with one id tag), and the
/// task that writes them.
pub(super) struct BatchWriter<M: Parkable> {
    key: Key,
    batches: Batches,
    mailbox: Arc<Mutex<Mailbox<M>>>,
    hub: Arc<Hub>,
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
    /// Which streams an event reaches.
    dispatch: Dispatch,
}

impl<M: Parkable> BatchWriter<M> {
    pub(super) fn new(
        key: Key,
        batches: Batches,
        mailbox: Arc<Mutex<Mailbox<M>>>,
        hub: Arc<Hub>,
        lifecycle: Arc<Lifecycle>,
    ) -> BatchWriter<M> {
        let hub_head = hub.head();
        BatchWriter {
            key,
            batches,
            life_seen: lifecycle.epoch().current(),
            mailbox,
            hub,
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
            dispatch: Dispatch::new(hub_head),
        }
    }

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
            self.counters = Some(source.counters());
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
        let pinned = stream
            .source()
            .map(|s| s.subscription().view().clone())
            .filter(|view| view.pin().is_some());
        self.dispatch
            .admit(key, pinned.as_ref().and_then(|view| view.pin()));
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
            pinned,
            clean: false,
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
        let mut parked = self.streams.remove(key);
        self.dispatch.catch_up(&mut parked);
        self.dispatch
            .leave(key, parked.pinned.as_ref().and_then(|view| view.pin()));
        parked.settle()
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
}

impl<M: Parkable> Future for BatchWriter<M> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let w = self.get_mut();
        w.budget = SENDS_PER_POLL;
        w.batches.0.polls.inc();
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

impl<M: Parkable> Drop for BatchWriter<M> {
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
