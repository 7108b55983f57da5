//! One driver for every chunk stream (an SSE response, a Kubernetes
//! watch), whatever carries it: [`Pump`] moves the source's chunks onto a
//! [`Wire`] (a taken-over HTTP/1.1 socket, plain or TLS, in `http`; an
//! HTTP/2 stream in `h2_stream`), in its own task while it owes anything
//! only it can do, and leaves the rest to its hub's batch writer
//! (`batch`) while it is caught up. The wire supplies the framing and the
//! writes; the driver decides the order (the chunk in progress, then the
//! client's hang-up, then the next chunk), the end, and what the writer
//! needs.
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

use super::batch::{Batches, Parkable};
use super::io::{Blocked, WriteDeadline};
use crate::lifecycle::Lifecycle;
use crate::limits::Permit;
use crate::transport::ChunkSource;
use crate::transport::stream::BatchSource;

/// What carries a chunk stream's bytes to its client: the framing of a
/// chunk and of the end, the writes, and how the client's going is seen.
pub(super) trait Wire: Send + 'static {
    /// Made ready on the stream's first poll, on its task's runtime; false
    /// if it cannot be (the connection is lost).
    fn open(&mut self) -> bool {
        true
    }

    /// Frames `chunk` (not empty) as what is written next.
    fn start(&mut self, chunk: Bytes);

    /// Frames the end of the response as what is written next.
    fn finish(&mut self);

    /// Whether something framed is still to be written.
    fn busy(&self) -> bool;

    /// Writes what is framed: ready once all of it went, or with an error
    /// once the client is gone or took nothing for the write timeout
    /// (`blocked` holds that wait, `deadline` its length).
    fn poll_write(
        &mut self,
        deadline: &WriteDeadline,
        blocked: &mut Blocked,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ()>>;

    /// The end went: the connection's part after it (a socket's shutdown).
    fn close(&mut self) {}

    /// Whether the client has gone (hung up, reset the stream); registers
    /// `cx` to hear of it.
    fn gone(&mut self, cx: &mut Context<'_>) -> bool;

    /// Whether the batch writer can write this wire's chunks (an HTTP/1.0
    /// response, unframed, cannot: its end is the connection's).
    fn batchable(&self) -> bool {
        true
    }

    /// [`Parkable::poll_input`].
    fn poll_input(&mut self, cx: &mut Context<'_>) -> Poll<()>;

    /// [`Parkable::send_now`]: one try at writing `bytes` as one chunk.
    fn send_now(&mut self, bytes: &Bytes) -> io::Result<(usize, usize)>;

    /// [`Parkable::flushed`].
    fn flushed(&self) -> bool {
        true
    }

    /// [`Parkable::absorb`]: by default, input is the client hanging up.
    fn absorb(&mut self, _cx: &mut Context<'_>) -> bool {
        false
    }

    /// [`Parkable::unparked`]: `rest` (a chunk, and how many of the bytes
    /// [`Wire::send_now`] counted went) is what is written next.
    fn unparked(&mut self, rest: Option<(Bytes, usize)>);
}

/// A chunk stream: every chunk of its source, then the end, until the
/// source ends, the client goes, or a write fails. Polled by its own task
/// (`batch::Task`) or, while caught up, written by its hub's batch writer.
pub(super) struct Pump<S, W> {
    /// Where the stream goes while it is caught up.
    batches: Batches,
    source: S,
    wire: W,
    deadline: WriteDeadline,
    /// Held for as long as the stream lasts (the connection limits).
    _permit: Option<Permit>,
    /// How a write waits for a client that takes nothing.
    blocked: Blocked,
    /// Whether the wire was opened (on the first poll).
    opened: bool,
    /// The source ended: once the end is written, the stream is over.
    ending: bool,
}

impl<S: ChunkSource, W: Wire> Pump<S, W> {
    pub(super) fn new(
        batches: Batches,
        source: S,
        wire: W,
        deadline: WriteDeadline,
        permit: Option<Permit>,
    ) -> Self {
        Pump {
            batches,
            source,
            wire,
            deadline,
            _permit: permit,
            blocked: Blocked::default(),
            opened: false,
            ending: false,
        }
    }
}

impl<S: ChunkSource, W: Wire> Parkable for Pump<S, W> {
    fn poll_stream(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.opened {
            if !self.wire.open() {
                return Poll::Ready(());
            }
            self.opened = true;
        }
        loop {
            // What is framed first: chunks go out whole and in order.
            if self.wire.busy() || self.ending {
                let written = ready!(self.wire.poll_write(&self.deadline, &mut self.blocked, cx));
                if written.is_err() {
                    return Poll::Ready(());
                }
                if self.ending {
                    self.wire.close();
                    return Poll::Ready(());
                }
            }
            if self.wire.gone(cx) {
                return Poll::Ready(());
            }
            match ready!(self.source.poll_chunk(cx)) {
                Some(chunk) if chunk.is_empty() => {}
                Some(chunk) => self.wire.start(chunk),
                None => {
                    self.ending = true;
                    self.wire.finish();
                }
            }
        }
    }

    /// Open, nothing framed being written, the end not begun.
    fn idle(&self) -> bool {
        self.opened && !self.wire.busy() && !self.ending && self.wire.batchable()
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

    fn absorb(&mut self, cx: &mut Context<'_>) -> bool {
        self.wire.absorb(cx)
    }

    fn unparked(&mut self, rest: Option<(Bytes, usize)>) {
        self.wire.unparked(rest);
    }
}
