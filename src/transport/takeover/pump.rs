//! One driver for every stream, whatever it sends and whatever carries
//! it: [`Pump`] moves a [`Source`]'s items onto a [`Wire`], in its own
//! task while it owes anything only it can do, and leaves the rest to its
//! hub's batch writer (`batch`) while it is caught up.
//!
//! - An SSE response or a Kubernetes watch is a [`Chunks`] source on a
//!   taken-over HTTP/1.1 socket, plain or TLS (`http`), or on an HTTP/2
//!   stream (`h2_stream`).
//! - A single-stream WebSocket is its framed subscription's messages on
//!   the socket (`ws::single`), a wire that also answers the client's
//!   frames, pings on every keep-alive tick and lingers after its Close.
//! - A subscription of a `/ws` socket is its messages, once started, on
//!   the socket's shared outbox (`ws::mux::sub`).
//!
//! The driver decides the order (what is framed goes out first, whole;
//! then what the client said or the wire owes of its own; then the next
//! item), the end, and what the batch writer needs; the source says what
//! is sent and counts it (`stream::Framed`); the wire frames and writes.
//! Whether a stream may be parked is [`Parkable::parkable`]'s, from what
//! the wire and the subscription owe.
//!
//! Written by hand rather than as an `async fn`, for memory: an `async fn`
//! keeps each of its arguments twice (as passed, and as moved into its
//! body) and the states of the futures it awaits beside its own, which
//! cost an SSE stream ~1.2 KB in two allocations (`-Zprint-type-sizes`,
//! heaptrack: `loadtest/RESULTS.md`). This is the stream's whole state, in
//! one allocation: the source is polled, never awaited.

use std::io;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use tokio::time::Instant;

use super::batch::{Batches, Parkable, Tick};
use super::io::WriteDeadline;
use crate::lifecycle::Lifecycle;
use crate::transport::stream::BatchSource;
use crate::transport::stream::ChunkSource;

/// What a stream sends: items, then its end.
pub(crate) trait Source: Send + 'static {
    type Item: Send;
    /// What the wire needs to know of the end (a WebSocket's Close code).
    type End: Send;

    /// The next item, or the end (once); `Pending`, with `cx` registered,
    /// while there is neither. What it returns is counted as sent.
    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Next<Self::Item, Self::End>>;

    /// Its framed subscription, once it sends nothing but that
    /// subscription's events ([`ChunkSource::batch`]).
    fn batch(&mut self) -> Option<&mut dyn BatchSource>;
}

pub(crate) enum Next<I, E> {
    Item(I),
    End(E),
}

/// A chunk source (an SSE body, a watch) as a stream's source: its
/// chunks, empty ones skipped, then an end that says nothing.
pub(super) struct Chunks<S>(pub(super) S);

impl<S: ChunkSource> Source for Chunks<S> {
    type Item = Bytes;
    type End = ();

    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Next<Bytes, ()>> {
        loop {
            return Poll::Ready(match ready!(self.0.poll_chunk(cx)) {
                Some(chunk) if chunk.is_empty() => continue,
                Some(chunk) => Next::Item(chunk),
                None => Next::End(()),
            });
        }
    }

    fn batch(&mut self) -> Option<&mut dyn BatchSource> {
        self.0.batch()
    }
}

/// What a wire heard from its client, or owes it of its own, between
/// items.
pub(crate) enum Heard {
    Nothing,
    /// It framed something of its own (a pong, a ping): written next.
    Answer,
    /// It framed the end of the stream (a Close): written next, and the
    /// stream is over.
    End,
    /// The client has gone: the stream is over, nothing more is written.
    Gone,
}

/// What carries a stream's items to its client: their framing and the
/// end's, the writes, and what the client says.
pub(crate) trait Wire: Send + 'static {
    type Item;
    type End;

    /// Made ready on the stream's first polls, on its task's runtime:
    /// false if it cannot be (the connection is lost).
    fn poll_open(&mut self, _cx: &mut Context<'_>) -> Poll<bool> {
        Poll::Ready(true)
    }

    /// Frames `item` as what is written next.
    fn start(&mut self, item: Self::Item);

    /// Frames the end of the stream as what is written next.
    fn finish(&mut self, end: Self::End);

    /// Whether something framed is still to be written.
    fn busy(&self) -> bool;

    /// Writes what is framed: ready once all of it went, or with an error
    /// once the client is gone or took nothing for the write timeout
    /// (`deadline`).
    fn poll_write(
        &mut self,
        deadline: &WriteDeadline,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ()>>;

    /// The end went: the connection's part after it (a socket's shutdown,
    /// a WebSocket's wait for the client's side to close).
    fn poll_close(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
        Poll::Ready(())
    }

    /// What the client said, or the wire owes of its own, now; registers
    /// `cx` to hear of the next.
    fn heard(&mut self, lifecycle: &Lifecycle, cx: &mut Context<'_>) -> Heard;

    /// Nothing of the wire's own is owed or half done (besides what
    /// [`Wire::busy`] says): the batch writer can write its items.
    fn idle(&self) -> bool {
        true
    }

    /// [`Parkable::shed`].
    fn shed(&mut self) {}

    /// [`Parkable::poll_input`].
    fn poll_input(&mut self, cx: &mut Context<'_>) -> Poll<()>;

    /// [`Parkable::send_now`]: one try at writing the batch writer's
    /// `bytes`.
    fn send_now(&mut self, bytes: &Bytes) -> io::Result<(usize, usize)>;

    /// [`Parkable::flushed`].
    fn flushed(&self) -> bool {
        true
    }

    /// [`Parkable::extra_per_message`].
    fn extra_per_message(&self) -> u64 {
        0
    }

    /// [`Parkable::absorb`]: by default, input is the client hanging up.
    fn absorb(&mut self, _cx: &mut Context<'_>) -> bool {
        false
    }

    /// [`Parkable::unparked`]: `rest` (the writer's bytes, and how many of
    /// them [`Wire::send_now`] counted went) is what is written next.
    fn unparked(&mut self, rest: Option<(Bytes, usize)>);

    /// [`Parkable::tick`]: by default, what the subscription owes.
    fn tick(
        &mut self,
        _now: Instant,
        _lifecycle: &Lifecycle,
        source: Option<&mut dyn BatchSource>,
    ) -> Tick {
        owed(source)
    }
}

/// What a subscription owes a keep-alive tick, as a parked stream's
/// writer sends it; to its task if it is not streaming yet.
pub(super) fn owed(source: Option<&mut dyn BatchSource>) -> Tick {
    match source {
        Some(source) => match source.frame_tick() {
            Some((bytes, counted)) => Tick::Send(bytes, counted),
            None => Tick::Nothing,
        },
        None => Tick::Unpark,
    }
}

/// A stream: every item of its source, then the end, until the source
/// ends, the client goes, or a write fails. Polled by its own task
/// (`batch::Task`) or, while caught up, written by its hub's batch writer.
pub(crate) struct Pump<S, W> {
    /// Where the stream goes while it is caught up.
    batches: Batches,
    source: S,
    wire: W,
    deadline: WriteDeadline,
    /// Whether the wire was opened (on the first polls).
    opened: bool,
    /// The end is framed: once it is written, the stream is over.
    ending: bool,
}

impl<S, W> Pump<S, W>
where
    S: Source,
    W: Wire<Item = S::Item, End = S::End>,
{
    pub(super) fn new(batches: Batches, source: S, wire: W, deadline: WriteDeadline) -> Self {
        Pump {
            batches,
            source,
            wire,
            deadline,
            opened: false,
            ending: false,
        }
    }
}

impl<S, W> Parkable for Pump<S, W>
where
    S: Source,
    W: Wire<Item = S::Item, End = S::End>,
{
    fn poll_stream(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.opened {
            if !ready!(self.wire.poll_open(cx)) {
                return Poll::Ready(());
            }
            self.opened = true;
        }
        loop {
            // What is framed first: items go out whole and in order.
            if self.wire.busy() || self.ending {
                let written = ready!(self.wire.poll_write(&self.deadline, cx));
                if written.is_err() {
                    return Poll::Ready(());
                }
                if self.ending {
                    ready!(self.wire.poll_close(cx));
                    return Poll::Ready(());
                }
            }
            // Then the client: its frames are rare, and looking costs a
            // load of the socket's readiness.
            match self.wire.heard(&self.deadline.lifecycle, cx) {
                Heard::Nothing => {}
                Heard::Answer => continue,
                Heard::End => {
                    self.ending = true;
                    continue;
                }
                Heard::Gone => return Poll::Ready(()),
            }
            match ready!(self.source.poll_item(cx)) {
                Next::Item(item) => self.wire.start(item),
                Next::End(end) => {
                    self.ending = true;
                    self.wire.finish(end);
                }
            }
        }
    }

    /// Open, nothing framed being written, the end not begun, nothing of
    /// the wire's own owed.
    fn idle(&self) -> bool {
        self.opened && !self.wire.busy() && !self.ending && self.wire.idle()
    }

    fn shed(&mut self) {
        self.wire.shed();
    }

    fn batches(&self) -> &Batches {
        &self.batches
    }

    fn lifecycle(&self) -> &Arc<Lifecycle> {
        &self.deadline.lifecycle
    }

    fn source(&mut self) -> Option<&mut dyn BatchSource> {
        self.source.batch()
    }

    fn poll_input(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.wire.poll_input(cx)
    }

    fn send_now(&mut self, bytes: &Bytes) -> io::Result<(usize, usize)> {
        self.wire.send_now(bytes)
    }

    fn flushed(&self) -> bool {
        self.wire.flushed()
    }

    fn extra_per_message(&self) -> u64 {
        self.wire.extra_per_message()
    }

    fn absorb(&mut self, cx: &mut Context<'_>) -> bool {
        self.wire.absorb(cx)
    }

    fn unparked(&mut self, rest: Option<(Bytes, usize)>) {
        self.wire.unparked(rest);
    }

    fn tick(&mut self, now: Instant) -> Tick {
        self.wire
            .tick(now, &self.deadline.lifecycle, self.source.batch())
    }
}

#[cfg(test)]
mod tests {
    //! The driver's order, against a scripted source and a wire that logs
    //! what it is asked to do.

    use std::collections::VecDeque;
    use std::time::Duration;

    use tokio_util::task::TaskTracker;

    use super::*;
    use crate::metrics::Metrics;

    /// Items, then (once they are out) an end; `Pending` while empty.
    struct Script(VecDeque<Next<&'static str, &'static str>>);

    impl Source for Script {
        type Item = &'static str;
        type End = &'static str;

        fn poll_item(&mut self, _cx: &mut Context<'_>) -> Poll<Next<&'static str, &'static str>> {
            self.0.pop_front().map_or(Poll::Pending, Poll::Ready)
        }

        fn batch(&mut self) -> Option<&mut dyn BatchSource> {
            None
        }
    }

    /// Logs each call; a write goes once it was polled `pending` times;
    /// `heard` answers from its script, then `Nothing`.
    #[derive(Default)]
    struct Logged {
        log: Vec<String>,
        framed: Option<String>,
        pending: usize,
        heard: VecDeque<Heard>,
    }

    impl Wire for Logged {
        type Item = &'static str;
        type End = &'static str;

        fn start(&mut self, item: &'static str) {
            self.framed = Some(item.to_string());
        }

        fn finish(&mut self, end: &'static str) {
            self.framed = Some(format!("end {end}"));
        }

        fn busy(&self) -> bool {
            self.framed.is_some()
        }

        fn poll_write(
            &mut self,
            _deadline: &WriteDeadline,
            _cx: &mut Context<'_>,
        ) -> Poll<Result<(), ()>> {
            if self.pending > 0 {
                self.pending -= 1;
                return Poll::Pending;
            }
            if let Some(framed) = self.framed.take() {
                self.log.push(framed);
            }
            Poll::Ready(Ok(()))
        }

        fn poll_close(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
            self.log.push("close".into());
            Poll::Ready(())
        }

        fn heard(&mut self, _lifecycle: &Lifecycle, _cx: &mut Context<'_>) -> Heard {
            match self.heard.pop_front() {
                Some(Heard::Answer) => {
                    self.framed = Some("pong".into());
                    Heard::Answer
                }
                Some(Heard::End) => {
                    self.framed = Some("client's close".into());
                    Heard::End
                }
                Some(heard) => heard,
                None => Heard::Nothing,
            }
        }

        fn poll_input(&mut self, _cx: &mut Context<'_>) -> Poll<()> {
            Poll::Pending
        }

        fn send_now(&mut self, bytes: &Bytes) -> io::Result<(usize, usize)> {
            Ok((bytes.len(), bytes.len()))
        }

        fn unparked(&mut self, _rest: Option<(Bytes, usize)>) {}
    }

    fn pump(items: Vec<Next<&'static str, &'static str>>, wire: Logged) -> Pump<Script, Logged> {
        let metrics = Arc::new(Metrics::new());
        let batches = Batches::new(
            tokio::runtime::Handle::current(),
            TaskTracker::new(),
            metrics.clone(),
        );
        let deadline = WriteDeadline::new(Lifecycle::new(), Duration::from_secs(1), metrics);
        Pump::new(batches, Script(items.into()), wire, deadline)
    }

    fn poll(pump: &mut Pump<Script, Logged>) -> Poll<()> {
        pump.poll_stream(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[tokio::test]
    async fn items_go_whole_and_in_order_then_the_end_then_the_close() {
        let wire = Logged {
            pending: 1,
            heard: [Heard::Nothing, Heard::Answer].into(),
            ..Logged::default()
        };
        let mut pump = pump(
            vec![Next::Item("a"), Next::Item("b"), Next::End("done")],
            wire,
        );
        assert!(!pump.idle(), "not open before its first poll");
        // "a" is framed, and its write waits once: nothing else is looked
        // at, and the stream is not idle.
        assert!(poll(&mut pump).is_pending());
        assert!(pump.wire.log.is_empty());
        assert!(!pump.idle());
        assert!(poll(&mut pump).is_ready());
        // The wire's answer (a pong) goes between two items, never inside
        // one; after the end, nothing but the close.
        assert_eq!(pump.wire.log, ["a", "pong", "b", "end done", "close"]);
    }

    #[tokio::test]
    async fn a_caught_up_stream_is_idle_and_its_end_is_not() {
        let mut pump = pump(vec![Next::Item("a")], Logged::default());
        assert!(poll(&mut pump).is_pending());
        assert_eq!(pump.wire.log, ["a"]);
        assert!(pump.idle(), "caught up: its writer may take it");
        pump.source.0.push_back(Next::End("x"));
        pump.wire.pending = 1;
        assert!(poll(&mut pump).is_pending());
        assert!(!pump.idle(), "its end is under way");
    }

    #[tokio::test]
    async fn the_wire_may_end_the_stream_and_the_source_is_not_polled_again() {
        let wire = Logged {
            heard: [Heard::End].into(),
            ..Logged::default()
        };
        let mut pump = pump(vec![Next::Item("a")], wire);
        assert!(poll(&mut pump).is_ready());
        assert_eq!(pump.wire.log, ["client's close", "close"]);
        assert_eq!(pump.source.0.len(), 1, "the item was never taken");
    }

    #[tokio::test]
    async fn a_client_gone_ends_it_with_nothing_more_written() {
        let wire = Logged {
            heard: [Heard::Nothing, Heard::Gone].into(),
            ..Logged::default()
        };
        let mut pump = pump(vec![Next::Item("a"), Next::Item("b")], wire);
        assert!(poll(&mut pump).is_ready());
        assert_eq!(pump.wire.log, ["a"], "no close: nobody to send it to");
    }
}
