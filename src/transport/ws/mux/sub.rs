//! One subscription of a `/ws` socket, written by hand as a single-stream
//! socket is (`ws::single`): one struct in one allocation, polled by its
//! own task, or parked with its hub's batch writer (`takeover::batch`)
//! while it is caught up.
//!
//! Its task subscribes, then frames the subscription's messages with the
//! subscription's `{"sub":ID,` prefix into the socket's outbox
//! ([`super::outbox`]), waiting for room there. Parked, it takes the
//! frames its hub's writer made once for every stream at its cursor
//! (framed as a single-stream socket's, `{` first) and the outbox splices
//! its prefix into each as it writes them ([`Outbox::send_direct`]).
//!
//! It ends when its stream does (after the stream's last message), when
//! it is unsubscribed or its socket ends ([`Outbox::remove`], which wakes
//! it wherever it is), or with its runtime; whichever way, the socket's
//! control loop is told (its id is free again).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use actix_web::web;
use bytes::Bytes;
use serde_json::Value;
use tokio::time::Instant;

use super::outbox::{Direct, Frame, Outbox};
use super::splice::{spliced, spliced_payloads};
use crate::lifecycle::Lifecycle;
use crate::transport::state::AppState;
use crate::transport::stream::{BatchSource, Framed};
use crate::transport::takeover::{Batches, Parkable, Tick};
use crate::transport::ws::message::{Id, Outgoing, WsFraming, error_message, message};

/// Starting a subscription: its authorization and its hub's sync; then the
/// subscription framed, and the counter of the bytes sent on its
/// resource; or the `Status` that refused it.
pub(super) type Starting = Pin<Box<dyn Future<Output = Result<Started, Value>> + Send>>;

/// A subscription started: framed, and the API server's warnings for its
/// resource (`upstream::warning`), sent first as WARNING messages.
pub(super) type Started = (Framed<WsFraming>, Arc<[&'static str]>);

pub(super) struct Sub {
    state: web::Data<AppState>,
    outbox: Arc<Outbox>,
    /// Tells this subscription from an earlier one of the same id.
    generation: u64,
    /// `{"sub":ID,`.
    prefix: Bytes,
    phase: Phase,
    /// The bytes sent on its resource (once subscribed).
    /// A frame waiting for room in the outbox.
    next: Option<Frame>,
    /// Frames its hub's writer made and could not queue: queued first.
    rest: Option<Bytes>,
    /// Messages framed from the stream's last item, and how many are
    /// queued.
    out: Vec<Outgoing>,
    sent: usize,
    /// Whether the stream goes on after those messages.
    more: bool,
}

enum Phase {
    Starting(Starting),
    Streaming(Box<Framed<WsFraming>>),
    /// Refused: its ERROR is its last message.
    Refused,
}

impl Sub {
    pub(super) fn new(
        state: web::Data<AppState>,
        outbox: Arc<Outbox>,
        generation: u64,
        id: &str,
        prefix: Bytes,
        starting: Starting,
    ) -> Sub {
        outbox.admit(id, generation);
        Sub {
            state,
            outbox,
            generation,
            prefix,
            phase: Phase::Starting(starting),
            next: None,
            rest: None,
            out: Vec::new(),
            sent: 0,
            more: true,
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

impl Parkable for Sub {
    fn poll_stream(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            // Unsubscribed, or the socket ended: nothing more is written.
            if self.outbox.poll_live(self.generation, cx).is_ready() {
                return Poll::Ready(());
            }
            if self.next.is_some() {
                match self.outbox.poll_push(cx, &mut self.next, self.generation) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(false) => return Poll::Ready(()),
                    Poll::Ready(true) => continue,
                }
            }
            if let Some(rest) = self.rest.take() {
                // Counted as sent by the writer that framed them.
                self.next = Some(Frame::Raw(rest));
                continue;
            }
            if let Some(msg) = self.out.get(self.sent) {
                let text = message(Some(&self.prefix), msg);
                if let Phase::Streaming(framed) = &mut self.phase {
                    framed.wrote(text.len() as u64);
                }
                self.next = Some(Frame::Text(text));
                self.sent += 1;
                continue;
            }
            if !self.out.is_empty() {
                self.out.clear();
                self.sent = 0;
                // Kept for the next item, but not at a snapshot chunk's
                // size for the subscription's whole life.
                self.out.shrink_to(4);
            }
            if !self.more {
                return Poll::Ready(());
            }
            match &mut self.phase {
                Phase::Starting(starting) => match starting.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok((framed, warnings))) => {
                        // Before its first event: a `/ws` subscription has
                        // no response of its own to carry them as headers.
                        self.out.extend(warnings.iter().map(|w| warning_message(w)));
                        self.phase = Phase::Streaming(Box::new(framed));
                    }
                    Poll::Ready(Err(status)) => {
                        self.next = Some(Frame::Text(error_message(Some(&self.prefix), &status)));
                        self.more = false;
                        self.phase = Phase::Refused;
                    }
                },
                Phase::Streaming(framed) => {
                    self.more = ready!(framed.poll_next_into(cx, &mut self.out));
                }
                Phase::Refused => self.more = false,
            }
        }
    }

    /// Nothing of its own under way, its socket open. (Its subscription
    /// is its [`Parkable::source`] only once started.)
    fn idle(&self) -> bool {
        self.next.is_none()
            && self.rest.is_none()
            && self.out.is_empty()
            && self.more
            && self.outbox.direct()
    }

    /// Its messages' buffer, kept at four for its task's next item: a
    /// parked stream's writer frames for it.
    fn shed(&mut self) {
        self.out = Vec::new();
    }

    fn batches(&self) -> &Batches {
        self.state.streams.batches()
    }

    fn lifecycle(&self) -> &Arc<Lifecycle> {
        &self.state.lifecycle
    }

    fn source(&mut self) -> Option<&mut dyn BatchSource> {
        match &mut self.phase {
            Phase::Streaming(framed) => Some(&mut **framed),
            _ => None,
        }
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

    fn unparked(&mut self, rest: Option<(Bytes, usize)>) {
        // Nothing of them went (`send_now` queues what a short write
        // leaves): all of them are queued by the task.
        if let Some((frames, _)) = rest {
            self.rest = Some(spliced(&self.prefix, &frames));
        }
    }

    /// What the subscription owes a tick (a progress mark): the socket's
    /// control loop pings for all its subscriptions.
    fn tick(&mut self, _now: Instant) -> Tick {
        let Phase::Streaming(framed) = &mut self.phase else {
            return Tick::Unpark;
        };
        match framed.frame_tick() {
            Some((bytes, counted)) => {
                // Counted as the shared frames' messages: and the prefixes.
                let spliced = spliced_payloads(&self.prefix, &bytes);
                framed.wrote_batched(spliced.saturating_sub(counted));
                Tick::Send(bytes, spliced)
            }
            None => Tick::Nothing,
        }
    }

    /// Woken only to end: it stays parked while it may write.
    fn absorb(&mut self, cx: &mut Context<'_>) -> bool {
        self.outbox.poll_live(self.generation, cx).is_pending()
    }
}

impl Drop for Sub {
    fn drop(&mut self) {
        self.outbox.ended(self.generation);
    }
}
