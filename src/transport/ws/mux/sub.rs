//! One subscription of a `/ws` socket, driven as every stream is
//! (`takeover::Pump`): in its own task, or parked with its hub's batch
//! writer (`takeover::batch`) while it is caught up.
//!
//! Its source ([`Subscribing`]) starts the subscription (its authorization
//! and its hub's sync), then sends the API server's warnings and the
//! subscription's messages, or the `Status` that refused it. Its wire
//! ([`Outboxed`]) writes each item with the subscription's `{"sub":ID,`
//! prefix straight onto the socket while nothing is queued ahead, else
//! frames each message into the socket's outbox ([`super::outbox`]),
//! waiting for room there. Parked, it takes the frames its hub's writer
//! made once for every stream at its cursor (framed as a single-stream
//! socket's, `{` first) and the outbox splices its prefix into each as it
//! writes them ([`Outbox::send_direct`]).
//!
//! It ends when its stream does (after the stream's last message), when
//! it is unsubscribed or its socket ends ([`Outbox::remove`], which wakes
//! it wherever it is), or with its runtime; whichever way, the socket's
//! control loop is told (its id is free again).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use serde_json::Value;
use tokio::time::Instant;

use super::outbox::{Direct, Frame, Outbox};
use super::splice::{spliced, spliced_payloads};
use crate::lifecycle::Lifecycle;
use crate::transport::stream::Framing;
use crate::transport::stream::{BatchSource, Framed};
use crate::transport::takeover::{Heard, Next, Source, Tick, Wire, WriteDeadline};
use crate::transport::ws::message::{Id, Outgoing, WsFraming, error_message, message};
use crate::transport::ws::poll_messages;

/// Starting a subscription: its authorization and its hub's sync; then the
/// subscription framed, and the counter of the bytes sent on its
/// resource; or the `Status` that refused it.
pub(super) type Starting = Pin<Box<dyn Future<Output = Result<Started, Value>> + Send>>;

/// A subscription started: framed, and the API server's warnings for its
/// resource (`upstream::warning`), sent first as WARNING messages.
pub(super) type Started = (Framed<WsFraming>, Arc<[&'static str]>);

/// A subscription's messages: once started, the API server's warnings,
/// then its stream's; or, refused, the `Status` that ends it.
#[expect(
    clippy::large_enum_variant,
    reason = "streaming is its state for its life, in the stream's one allocation; boxing it would add another"
)]
pub(super) enum Subscribing {
    Starting {
        starting: Starting,
        /// Bytes each message counts beyond its own payload: its prefix,
        /// less the `{` it takes the place of.
        extra: u64,
    },
    Streaming {
        framed: Framed<WsFraming>,
        extra: u64,
    },
    /// Refused (its end was sent).
    Over,
}

impl Subscribing {
    pub(super) fn new(starting: Starting, prefix: &[u8]) -> Subscribing {
        Subscribing::Starting {
            starting,
            extra: prefix.len() as u64 - 1,
        }
    }
}

/// The end of a subscription's messages: its refusal's `Status`, or
/// nothing (its stream's last message said why).
impl Source for Subscribing {
    type Item = Vec<Outgoing>;
    type End = Option<Value>;

    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Next<Vec<Outgoing>, Option<Value>>> {
        loop {
            match self {
                Subscribing::Starting { starting, extra } => {
                    let extra = *extra;
                    match ready!(starting.as_mut().poll(cx)) {
                        Ok((mut framed, warnings)) => {
                            // Before its first event: a `/ws` subscription
                            // has no response of its own to carry them as
                            // headers.
                            let messages: Vec<Outgoing> =
                                warnings.iter().map(|w| warning_message(w)).collect();
                            let bytes = messages.iter().map(|m| m.payload_len() + extra).sum();
                            framed.wrote(bytes);
                            *self = Subscribing::Streaming { framed, extra };
                            if !messages.is_empty() {
                                return Poll::Ready(Next::Item(messages));
                            }
                        }
                        Err(status) => {
                            *self = Subscribing::Over;
                            return Poll::Ready(Next::End(Some(status)));
                        }
                    }
                }
                Subscribing::Streaming { framed, extra } => {
                    return Poll::Ready(match ready!(poll_messages(framed, cx, *extra)) {
                        Some(messages) => Next::Item(messages),
                        None => Next::End(None),
                    });
                }
                Subscribing::Over => return Poll::Ready(Next::End(None)),
            }
        }
    }

    /// Its subscription, once started.
    fn batch(&mut self) -> Option<&mut dyn BatchSource> {
        match self {
            Subscribing::Streaming { framed, .. } => Some(framed),
            _ => None,
        }
    }
}

/// A subscription's wire: the socket's outbox, with its prefix.
pub(super) struct Outboxed {
    outbox: Arc<Outbox>,
    /// Tells this subscription from an earlier one of the same id.
    generation: u64,
    /// `{"sub":ID,`.
    prefix: Box<[u8]>,
    /// A frame waiting for room in the outbox: a message, or the frames
    /// its hub's writer made and could not queue (queued first, counted
    /// as sent by that writer).
    next: Option<Frame>,
    /// The messages of the stream's last item, and how many are queued.
    out: Vec<Outgoing>,
    sent: usize,
}

impl Outboxed {
    /// Subscription `id`'s wire; it may write from now on.
    pub(super) fn new(outbox: Arc<Outbox>, generation: u64, id: &str, prefix: &[u8]) -> Outboxed {
        outbox.admit(id, generation);
        Outboxed {
            outbox,
            generation,
            prefix: prefix.into(),
            next: None,
            out: Vec::new(),
            sent: 0,
        }
    }
}

/// `{"type":"WARNING","message":TEXT}` for a `Warning` header value.
fn warning_message(warning: &str) -> Outgoing {
    let json = serde_json::json!({
        "type": "WARNING",
        "message": crate::upstream::warning::text(warning),
    });
    Outgoing::event(Bytes::from(json.to_string()), Id::None)
}

impl Wire for Outboxed {
    type Item = Vec<Outgoing>;
    type End = Option<Value>;

    fn start(&mut self, messages: Vec<Outgoing>) {
        self.out = messages;
        self.sent = 0;
    }

    /// A refusal's ERROR is its last message.
    fn finish(&mut self, end: Option<Value>) {
        if let Some(status) = end {
            self.next = Some(Frame::Text(error_message(Some(&self.prefix), &status)));
        }
    }

    fn busy(&self) -> bool {
        self.next.is_some() || self.sent < self.out.len()
    }

    /// Writes the item's messages straight onto the socket while nothing
    /// is queued ahead (one write, from this task: what the socket does
    /// not take is queued first), else queues each frame as the outbox has
    /// room: an error once the subscription may not write any more. The
    /// socket's control loop keeps its write deadline.
    ///
    /// Straight on, because a frame queued per message is a wake of the
    /// socket's control loop and a write each, for every stream its own
    /// task drives (one not parked; a merged stream's never is). Queued
    /// otherwise, so that a socket that does not read holds at most
    /// [`super::outbox::OUTBOX`] frames and one item's rest.
    fn poll_write(
        &mut self,
        _deadline: &WriteDeadline,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ()>> {
        loop {
            if self.next.is_some() {
                if !ready!(self.outbox.poll_push(cx, &mut self.next, self.generation)) {
                    return Poll::Ready(Err(()));
                }
                continue;
            }
            if self.sent == 0 && !self.out.is_empty() && self.outbox.idle() {
                let Some((frames, _)) = WsFraming::batched(std::mem::take(&mut self.out)) else {
                    continue;
                };
                match self
                    .outbox
                    .send_direct(self.generation, &self.prefix, &frames)
                {
                    Ok(Direct::Sent) => {}
                    // Queued since: it waits for room, whole.
                    Ok(Direct::Full) => {
                        self.next = Some(Frame::Raw(spliced(&self.prefix, &frames)))
                    }
                    Ok(Direct::Gone) | Err(_) => return Poll::Ready(Err(())),
                }
                continue;
            }
            if let Some(msg) = self.out.get(self.sent) {
                self.next = Some(Frame::Text(message(Some(&self.prefix), msg)));
                self.sent += 1;
                continue;
            }
            // Not kept at a snapshot chunk's size for the subscription's
            // whole life.
            self.out = Vec::new();
            self.sent = 0;
            return Poll::Ready(Ok(()));
        }
    }

    /// Only whether it was unsubscribed, or its socket ended.
    fn heard(&mut self, _lifecycle: &Lifecycle, cx: &mut Context<'_>) -> Heard {
        match self.outbox.poll_live(self.generation, cx) {
            Poll::Pending => Heard::Nothing,
            Poll::Ready(()) => Heard::Gone,
        }
    }

    /// Its socket open, nothing of the control loop's queued ahead.
    fn idle(&self) -> bool {
        self.outbox.direct()
    }

    /// Ready once it may not write any more: its task ends it.
    fn poll_input(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.outbox.poll_live(self.generation, cx)
    }

    fn send_now(&mut self, frames: &Bytes) -> std::io::Result<(usize, usize)> {
        match self
            .outbox
            .send_direct(self.generation, &self.prefix, frames)?
        {
            Direct::Sent => Ok((frames.len(), frames.len())),
            // Its task queues them once there is room.
            Direct::Full => Ok((0, frames.len())),
            Direct::Gone => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }

    /// Its prefix, beyond the shared frames' `{`.
    fn extra_per_message(&self) -> u64 {
        self.prefix.len() as u64 - 1
    }

    /// Woken only to end: it stays parked while it may write.
    fn absorb(&mut self, cx: &mut Context<'_>) -> bool {
        self.outbox.poll_live(self.generation, cx).is_pending()
    }

    fn unparked(&mut self, rest: Option<(Bytes, usize)>) {
        // Nothing of them went (`send_now` queues what a short write
        // leaves): all of them are queued by the task.
        if let Some((frames, _)) = rest {
            self.next = Some(Frame::Raw(spliced(&self.prefix, &frames)));
        }
    }

    /// What the subscription owes a tick (a progress mark), with its
    /// prefix counted: the socket's control loop pings for all its
    /// subscriptions.
    fn tick(
        &mut self,
        _now: Instant,
        _lifecycle: &Lifecycle,
        source: Option<&mut dyn BatchSource>,
    ) -> Tick {
        // Not started yet: its task owes the start.
        let Some(source) = source else {
            return Tick::Unpark;
        };
        match source.frame_tick() {
            Some((bytes, counted)) => {
                // Counted as the shared frames' messages: and the prefixes.
                let spliced = spliced_payloads(&self.prefix, &bytes);
                source.wrote_batched(spliced.saturating_sub(counted));
                Tick::Send(bytes, spliced)
            }
            None => Tick::Nothing,
        }
    }
}

impl Drop for Outboxed {
    fn drop(&mut self) {
        self.outbox.ended(self.generation);
    }
}
