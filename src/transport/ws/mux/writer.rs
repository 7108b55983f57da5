//! A `/ws` socket's write half ([`SocketWriter`]), driven by its control loop:
//! the handshake response, then what the outbox queues, in order.

use std::task::{Context, Poll, ready};

use actix_ws::CloseReason;

use super::outbox::{Frame, Outbox};
use crate::transport::takeover::{Opcode, WsWriter};

/// What the socket's writing did ([`SocketWriter::poll`]).
pub(super) enum Wrote {
    /// A frame went whole.
    Frame,
    /// The next frame is the Close (with this reason): the caller sends
    /// it and ends the connection.
    Close(Option<CloseReason>),
    /// The outbox is closed and everything in it went.
    Drained,
    /// The socket failed (or never opened): nothing more is written.
    Failed,
}

/// The socket's write half, driven by its control loop: the handshake
/// response, then the outbox's frames in order, each under the write
/// timeout (`takeover::io`). Until the handshake response went, nothing
/// is written past it.
pub(super) struct SocketWriter {
    pub(super) raw: WsWriter,
    /// The frame under way, and how many of its bytes went.
    sending: Option<(Frame, usize)>,
    /// Frames written since the socket last made the task wait.
    streak: usize,
    opened: bool,
    failed: bool,
}

/// Frames the control loop writes in a row before it lets the other tasks
/// of its thread run (a queue its subscriptions keep full, to a socket
/// that takes all).
const WRITES_PER_POLL: usize = 32;

impl SocketWriter {
    pub(super) fn new(raw: WsWriter) -> SocketWriter {
        SocketWriter {
            raw,
            sending: None,
            streak: 0,
            opened: false,
            failed: false,
        }
    }

    /// Writes on: ready when a frame went, or with how the writing ended;
    /// pending while the socket takes no more or nothing is queued.
    pub(super) fn poll(&mut self, outbox: &Outbox, cx: &mut Context<'_>) -> Poll<Wrote> {
        if self.failed {
            return Poll::Ready(Wrote::Failed);
        }
        if !self.opened {
            if ready!(self.raw.poll_open(cx)).is_err() {
                return Poll::Ready(self.fail(outbox));
            }
            outbox.opened(self.raw.direct());
            self.opened = true;
        }
        let (frame, written) = match &mut self.sending {
            Some(sending) => sending,
            None => {
                if self.streak >= WRITES_PER_POLL {
                    self.streak = 0;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                let Poll::Ready(next) = outbox.poll_next(cx) else {
                    self.streak = 0;
                    return Poll::Pending;
                };
                match next {
                    None => return Poll::Ready(Wrote::Drained),
                    Some(Frame::Close(reason)) => return Poll::Ready(Wrote::Close(reason)),
                    Some(frame) => self.sending.insert((frame, 0)),
                }
            }
        };
        let raw = &mut self.raw;
        let sent = match frame {
            Frame::Text(text) => raw.poll_send_parts(cx, Opcode::Text, &[text.as_bytes()], written),
            Frame::Raw(frames) => raw.poll_write_frames(cx, frames, written),
            Frame::Ping => raw.poll_send_parts(cx, Opcode::Ping, &[], written),
            Frame::Pong(payload) => raw.poll_send_parts(cx, Opcode::Pong, &[payload], written),
            // Never under way: handed to the caller when it comes next.
            Frame::Close(_) => Poll::Ready(Ok(())),
        };
        let Poll::Ready(sent) = sent else {
            self.streak = 0;
            return Poll::Pending;
        };
        if sent.is_err() {
            return Poll::Ready(self.fail(outbox));
        }
        self.sending = None;
        self.streak += 1;
        outbox.wrote();
        Poll::Ready(Wrote::Frame)
    }

    fn fail(&mut self, outbox: &Outbox) -> Wrote {
        self.failed = true;
        self.sending = None;
        outbox.failed();
        Wrote::Failed
    }
}
