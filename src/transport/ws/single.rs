//! A single-stream socket (`GET /stream/{resource}` upgraded): its
//! subscription's messages on the socket, driven as every stream is
//! (`takeover::Pump`), in one task on the streams' runtime or, while
//! caught up (plain or over TLS), written by its hub's batch writer
//! (`takeover::batch`).
//!
//! [`Single`] is the stream's wire: besides writing the messages as text
//! frames, it answers the client's frames, pings on every keep-alive tick,
//! closes on the idle timeout or when its stream ends (with the Close code
//! of that ending), and lingers for the client's side of the close. No
//! outbox, no second task.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use actix_ws::{CloseCode, CloseReason};
use bytes::Bytes;
use futures::Stream as _;
use tokio::time::{Instant, Sleep};

use super::keepalive::{Beat, KeepAlive};
use super::message::{IDLE, Outgoing, TAIL, WsFraming, close_for, close_reason, parts};
use super::{ClientFrame, lost, poll_messages};
use crate::lifecycle::{Lifecycle, Phase};
use crate::transport::stream::{BatchSource, Framed};
use crate::transport::takeover::{
    Heard, LINGER, Linger, Messages, Next, Opcode, Source, Taken, Tick, Upgraded, Wire,
    WriteDeadline, WsWriter,
};

/// A single-stream socket sends its subscription's messages, then a Close
/// with the code of how the stream ended.
impl Source for Framed<WsFraming> {
    type Item = Vec<Outgoing>;
    type End = CloseReason;

    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Next<Vec<Outgoing>, CloseReason>> {
        Poll::Ready(match ready!(poll_messages(self, cx, 0)) {
            Some(messages) => Next::Item(messages),
            None => Next::End(close_for(self.framing().ending.as_deref())),
        })
    }

    fn batch(&mut self) -> Option<&mut dyn BatchSource> {
        Some(self)
    }
}

/// A single-stream socket's wire. Caught up, the socket is written by its
/// hub's batch writer until it has anything of its own to do: a client
/// frame other than a pong or text, the idle timeout, its stream's end.
/// The writer sends the tick's ping itself ([`Wire::tick`]).
pub(super) struct Single {
    /// Until the first poll: opened on the task's runtime.
    taken: Option<Box<Taken>>,
    conn: Option<Upgraded>,
    /// Pings and the idle timeout, in its subscription's phase (its pings
    /// go with that one's ticks), in its task and parked alike.
    keepalive: KeepAlive,
    idle_timeout: Duration,
    /// Once the Close went, the end of the linger.
    linger: Option<Pin<Box<Sleep>>>,
    /// A client frame its batch writer read and could not absorb: acted on
    /// first, back in the socket's task.
    held: Option<Box<ClientFrame>>,
    /// The messages of the stream's last item, and how many went.
    out: Vec<Outgoing>,
    sent: usize,
    /// The frame being written (after the handshake response, which the
    /// writer sends first), and how many of its bytes went.
    sending: Sending,
    written: usize,
}

/// A frame on its way to the socket.
#[derive(Default)]
enum Sending {
    #[default]
    Nothing,
    /// `out[sent]`.
    Message,
    Ping,
    Pong(Bytes),
    /// Whole frames of events, framed once for every stream of the view
    /// at one position by its batch writer, which wrote part of them.
    Frames(Bytes),
    /// Then the end of the connection.
    Close(Vec<u8>),
    /// The Close went: the client has `takeover::LINGER` to close its
    /// side (the idle timer holds the time).
    Lingering(Linger),
}

impl Single {
    pub(super) fn new(
        taken: Box<Taken>,
        idle_timeout: Duration,
        lifecycle: &Lifecycle,
        phase: Phase,
    ) -> Single {
        Single {
            taken: Some(taken),
            conn: None,
            keepalive: KeepAlive::new(lifecycle, phase),
            idle_timeout,
            linger: None,
            held: None,
            out: Vec::new(),
            sent: 0,
            sending: Sending::Nothing,
            written: 0,
        }
    }

    fn send(&mut self, frame: Sending) {
        self.sending = frame;
        self.written = 0;
    }

    fn close(&mut self, reason: &CloseReason) {
        let payload = WsWriter::close_payload(
            u16::from(reason.code),
            reason.description.as_deref().unwrap_or(""),
        );
        self.send(Sending::Close(payload));
    }

    /// The client's next frame: one its batch writer held, or one read now
    /// (which restarts the idle timeout).
    fn next_frame(&mut self, cx: &mut Context<'_>) -> Option<ClientFrame> {
        if let Some(frame) = self.held.take() {
            return Some(*frame);
        }
        let conn = self.conn.as_mut()?;
        let msg = ready_or_none(Pin::new(&mut conn.inbox).poll_next(cx))?;
        self.keepalive.heard();
        Some(ClientFrame::of(msg))
    }
}

fn ready_or_none<T>(poll: Poll<T>) -> Option<T> {
    match poll {
        Poll::Ready(value) => Some(value),
        Poll::Pending => None,
    }
}

impl Wire for Single {
    type Item = Vec<Outgoing>;
    type End = CloseReason;

    /// Opens the connection on the task's runtime, then sends the
    /// handshake response before any frame.
    fn poll_open(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        if self.conn.is_none() {
            let Some(taken) = self.taken.take() else {
                return Poll::Ready(false);
            };
            match (*taken).open(Messages::Ignored) {
                Ok(upgraded) => self.conn = Some(upgraded),
                Err(err) => {
                    // Logged; the 101 is not sent, and the connection closes.
                    let _ = lost(err);
                    return Poll::Ready(false);
                }
            }
            // Heard from: its handshake.
            self.keepalive.heard();
        }
        match &mut self.conn {
            Some(conn) => conn.writer.poll_open(cx).map(|opened| opened.is_ok()),
            None => Poll::Ready(false),
        }
    }

    fn start(&mut self, messages: Vec<Outgoing>) {
        self.out = messages;
        self.sent = 0;
    }

    fn finish(&mut self, reason: CloseReason) {
        self.close(&reason);
    }

    fn busy(&self) -> bool {
        !matches!(self.sending, Sending::Nothing | Sending::Lingering(_))
            || self.sent < self.out.len()
    }

    /// The frame in progress, then the item's messages in order; the
    /// writer keeps its own write deadline.
    fn poll_write(
        &mut self,
        _deadline: &WriteDeadline,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ()>> {
        let Some(conn) = &mut self.conn else {
            return Poll::Ready(Err(()));
        };
        let writer = &mut conn.writer;
        loop {
            let written = &mut self.written;
            let wrote = match &self.sending {
                Sending::Nothing | Sending::Lingering(_) => {
                    if self.sent < self.out.len() {
                        self.sending = Sending::Message;
                        self.written = 0;
                        continue;
                    }
                    // Not kept at a snapshot chunk's size for the socket's
                    // whole life.
                    self.out = Vec::new();
                    self.sent = 0;
                    return Poll::Ready(Ok(()));
                }
                Sending::Message => {
                    let mut tail = [0u8; TAIL];
                    let parts = parts(None, &self.out[self.sent], &mut tail);
                    writer.poll_send_parts(cx, Opcode::Text, &parts, written)
                }
                Sending::Frames(frames) => writer.poll_write_frames(cx, frames, written),
                Sending::Ping => writer.poll_send_parts(cx, Opcode::Ping, &[], written),
                Sending::Pong(payload) => {
                    writer.poll_send_parts(cx, Opcode::Pong, &[payload], written)
                }
                Sending::Close(payload) => {
                    writer.poll_send_parts(cx, Opcode::Close, &[payload], written)
                }
            };
            if ready!(wrote).is_err() {
                return Poll::Ready(Err(()));
            }
            if matches!(std::mem::take(&mut self.sending), Sending::Message) {
                self.sent += 1;
            }
        }
    }

    /// The Close went: the socket is shut down for writing, and the
    /// client has [`LINGER`] to close its side.
    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(conn) = &mut self.conn else {
            return Poll::Ready(());
        };
        if !matches!(self.sending, Sending::Lingering(_)) {
            conn.writer.shutdown();
            self.linger = Some(Box::pin(tokio::time::sleep(LINGER)));
            self.sending = Sending::Lingering(Linger::default());
        }
        let Sending::Lingering(linger) = &mut self.sending else {
            return Poll::Ready(());
        };
        let timer = self.linger.as_mut().map(|until| until.as_mut().poll(cx));
        if conn.writer.poll_linger(linger, cx).is_ready() || !matches!(timer, Some(Poll::Pending)) {
            return Poll::Ready(());
        }
        Poll::Pending
    }

    /// The client's frames; then, at a tick, a ping or the idle timeout's
    /// close (the pong the ping asks for is what keeps the socket from its
    /// idle timeout).
    fn heard(&mut self, lifecycle: &Lifecycle, cx: &mut Context<'_>) -> Heard {
        while let Some(frame) = self.next_frame(cx) {
            match frame {
                ClientFrame::End(None) => return Heard::Gone,
                ClientFrame::End(Some(reason)) => {
                    self.close(&reason);
                    return Heard::End;
                }
                ClientFrame::Ping(payload) => {
                    self.send(Sending::Pong(payload));
                    return Heard::Answer;
                }
                // A single stream takes no messages: text only proves the
                // peer alive (and spends the socket's ration of frames
                // that do nothing, `takeover::ws_read`).
                ClientFrame::Pong | ClientFrame::Text(_) => {}
            }
        }
        match self.keepalive.beat(lifecycle, self.idle_timeout) {
            Beat::Quiet => Heard::Nothing,
            Beat::Ping => {
                self.send(Sending::Ping);
                Heard::Answer
            }
            Beat::Idle => {
                self.close(&close_reason(CloseCode::Policy, IDLE));
                Heard::End
            }
        }
    }

    /// Its handshake response sent, no client frame held or half read.
    /// Over TLS too: the inbox reads until the socket has nothing, so the
    /// session then holds no plaintext that the socket's readiness would
    /// not announce.
    fn idle(&self) -> bool {
        self.conn
            .as_ref()
            .is_some_and(|conn| conn.writer.opened() && !conn.inbox.holds_input())
            && self.held.is_none()
    }

    fn poll_input(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match &self.conn {
            Some(conn) => conn.inbox.poll_input(cx),
            None => Poll::Ready(()),
        }
    }

    fn send_now(&mut self, frames: &Bytes) -> std::io::Result<(usize, usize)> {
        let Some(conn) = &self.conn else {
            return Err(std::io::ErrorKind::NotConnected.into());
        };
        Ok((conn.writer.send_frames_now(frames)?, frames.len()))
    }

    fn flushed(&self) -> bool {
        self.conn.as_ref().is_none_or(|c| !c.writer.holds_records())
    }

    /// Pongs and text (which a single stream takes as a sign of life
    /// only) are read here, and reset the idle timeout, as its task does;
    /// anything else (a ping to answer, a Close, a refusal) is held for
    /// the task.
    fn absorb(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(conn) = &mut self.conn else {
            return false;
        };
        loop {
            let Poll::Ready(msg) = Pin::new(&mut conn.inbox).poll_next(cx) else {
                return true;
            };
            self.keepalive.heard();
            match ClientFrame::of(msg) {
                ClientFrame::Pong | ClientFrame::Text(_) => {}
                frame => {
                    self.held = Some(Box::new(frame));
                    return false;
                }
            }
        }
    }

    fn unparked(&mut self, rest: Option<(Bytes, usize)>) {
        if let Some((frames, written)) = rest {
            self.sending = Sending::Frames(frames);
            self.written = written;
        }
        if let Some(conn) = &mut self.conn {
            conn.inbox.rearm();
        }
    }

    /// A tick's ping (after what the subscription owes, a progress mark),
    /// unless the idle timeout passed: then the task closes the socket.
    fn tick(
        &mut self,
        _now: Instant,
        lifecycle: &Lifecycle,
        source: Option<&mut dyn BatchSource>,
    ) -> Tick {
        let Some(source) = source else {
            return Tick::Unpark;
        };
        let beat = self.keepalive.beat(lifecycle, self.idle_timeout);
        if beat == Beat::Idle {
            // Its task closes it (its keep-alive says so again there).
            return Tick::Unpark;
        }
        let owed = source.frame_tick();
        if beat == Beat::Quiet {
            return match owed {
                Some((bytes, counted)) => Tick::Send(bytes, counted),
                None => Tick::Nothing,
            };
        }
        match owed {
            // The same bytes for every socket.
            None => Tick::Send(Bytes::from_static(PING), 0),
            Some((bytes, counted)) => {
                let mut both = bytes::BytesMut::with_capacity(bytes.len() + PING.len());
                both.extend_from_slice(&bytes);
                both.extend_from_slice(PING);
                Tick::Send(both.freeze(), counted)
            }
        }
    }
}

/// An unmasked Ping frame with no payload, as a server sends it.
const PING: &[u8] = &[0x89, 0x00];
