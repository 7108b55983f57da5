//! A `/ws` socket's control loop ([`Control`]): one struct, polled by hand
//! in the socket's one task, until the socket is to end.

use std::pin::Pin;
use std::task::{Context, Poll};

use actix_ws::CloseCode;
use futures::StreamExt;
use tokio::time::Sleep;

use super::Socket;
use super::outbox::Frame;
use super::writer::{SocketWriter, Wrote};
use crate::lifecycle::PhaseWait;
use crate::transport::takeover::Inbox;
use crate::transport::ws::keepalive::{Beat, KeepAlive};
use crate::transport::ws::message::{GOING_AWAY, IDLE, NOT_READING, close_reason};
use crate::transport::ws::{ClientFrame, Ending};

/// Steps (a frame written, a client message handled, a tick, an ended
/// subscription) one poll of the control loop takes before it yields.
/// Each part bounds its own turn (the writer's `WRITES_PER_POLL`, the
/// inbox's reads), but a part that yields only stops its own turn: a
/// client that sends small requests as fast as it reads the answers kept
/// the loop going from one to the other, and held a runtime thread, as
/// long as it liked.
const STEPS_PER_POLL: usize = 128;

/// How the control loop stopped.
pub(super) enum Stop {
    /// The socket ends, with a Close of this reason (none if the peer is
    /// gone or the hard stop came).
    End(Ending),
    /// The credentials it was opened with ended.
    Expired,
}

/// A `/ws` socket's control loop while it runs: the socket's writing (the
/// handshake response, then what the outbox queues), the ends of its
/// subscriptions, pings and the idle timeout on each tick, the end of the
/// credentials it was opened with, client messages, shutdown and the hard
/// stop. Polled by hand: the `async fn` with a `select!` it replaces kept
/// each branch's future and its arguments beside this state (944 bytes).
pub(super) struct Control {
    pub(super) socket: Socket,
    pub(super) writer: SocketWriter,
    msgs: Inbox,
    /// One wait on the lifecycle, whose epoch of the socket's phase moves
    /// on each of its ticks (one beat per interval), at shutdown and at the
    /// hard stop.
    pub(super) life: PhaseWait,
    /// Pings and the idle timeout, on the socket's ticks, as a
    /// single-stream socket's.
    keepalive: KeepAlive,
    /// Boxed, and only for credentials that end: an anonymous socket keeps
    /// no timer for it.
    expiry: Option<Pin<Box<Sleep>>>,
}

impl Control {
    pub(super) fn new(socket: Socket, writer: SocketWriter, msgs: Inbox) -> Control {
        let lifecycle = socket.state.lifecycle.clone();
        let phase = lifecycle.phase();
        let expiry = socket
            .principal
            .deadline()
            .map(|at| Box::pin(tokio::time::sleep_until(at)));
        Control {
            writer,
            msgs,
            keepalive: KeepAlive::new(&lifecycle, phase),
            life: PhaseWait::new(lifecycle, phase),
            expiry,
            socket,
        }
    }

    /// Ready once the socket is to end. Each step in order (what is
    /// written makes room first, and an ended subscription frees its id
    /// before the next client message is read); after any that did
    /// something, from the top again, up to [`STEPS_PER_POLL`] times.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Stop> {
        for _ in 0..STEPS_PER_POLL {
            let lifecycle = self.life.lifecycle();
            if lifecycle.is_shutting_down() && self.socket.outbox.subscriptions() == 0 {
                return Poll::Ready(Stop::End(Some(close_reason(CloseCode::Away, GOING_AWAY))));
            }
            // Past the grace period nothing more is waited for.
            if lifecycle.is_hard_stopped() {
                return Poll::Ready(Stop::End(None));
            }
            let room = self.socket.outbox.has_room();
            if let Poll::Ready(wrote) = self.writer.poll(&self.socket.outbox, cx) {
                if !matches!(wrote, Wrote::Frame) {
                    // The socket failed (only `finish` queues a Close or
                    // closes the outbox).
                    return Poll::Ready(Stop::End(None));
                }
                continue;
            }
            if self.life.poll_moved(cx).is_ready() {
                // Seen; whether its phase ticked is the keep-alive's to say.
                let _ = self.life.ticked();
                let idle_timeout = self.socket.state.stream.effective_ws_idle_timeout();
                match self.keepalive.beat(self.life.lifecycle(), idle_timeout) {
                    Beat::Quiet => {}
                    Beat::Ping => {
                        if !self.life.lifecycle().is_shutting_down() {
                            self.socket.outbox.try_push(Frame::Ping);
                        }
                    }
                    Beat::Idle => {
                        // Not read for the idle timeout because it did not
                        // take what it was sent is "not reading"; otherwise
                        // it was quiet.
                        let why = if room { IDLE } else { NOT_READING };
                        return Poll::Ready(Stop::End(Some(close_reason(CloseCode::Policy, why))));
                    }
                }
                continue;
            }
            if self.socket.outbox.poll_ended(cx).is_ready() {
                continue;
            }
            // The socket's own credentials: its subscriptions end
            // themselves at the same moment, each with its ERROR (401).
            if let Some(expiry) = &mut self.expiry
                && expiry.as_mut().poll(cx).is_ready()
            {
                // A refreshed session moved its end: wait for that.
                match self.socket.principal.lease().and_then(|l| l.later()) {
                    Some(later) => expiry.as_mut().reset(later),
                    None => return Poll::Ready(Stop::Expired),
                }
                continue;
            }
            // Read only while the outbox has room: a client that pings
            // faster than it reads pongs, or sends requests faster than it
            // reads the replies, is not read either (and its pings spend
            // the socket's ration, `takeover::ws_read`).
            if room && let Poll::Ready(msg) = self.msgs.poll_next_unpin(cx) {
                self.keepalive.heard();
                match ClientFrame::of(msg) {
                    ClientFrame::End(ending) => return Poll::Ready(Stop::End(ending)),
                    ClientFrame::Ping(payload) => {
                        self.socket.outbox.push(Frame::Pong(payload));
                    }
                    ClientFrame::Pong => {}
                    ClientFrame::Text(text) => self.socket.handle(&text),
                }
                continue;
            }
            return Poll::Pending;
        }
        // Its turn is over, with more to do: after the runtime's others.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
