//! A single-stream socket (`GET /stream/{resource}` upgraded), in one task
//! on the streams' runtime, as an SSE stream is: it writes the
//! subscription's messages straight onto the socket, answers the client's
//! frames, pings on every keep-alive tick, and closes on the idle timeout
//! or when its stream ends (with the Close code of that ending). No
//! outbox, no second task.
//!
//! The stream is written by hand, as an SSE stream's is
//! (`takeover::pump::Pump`): its state is this one struct in one
//! allocation, with no `async` state beside it, polled by its own task or,
//! while caught up (plain or over TLS), written by its hub's batch writer
//! (`takeover::batch`).

use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use actix_web::web;
use actix_ws::{CloseCode, CloseReason};
use bytes::Bytes;
use futures::Stream as _;
use tokio::time::{Instant, Sleep};

use super::message::{IDLE, Outgoing, TAIL, WsFraming, close_for, close_reason, parts};
use super::{ClientFrame, lost};
use crate::lifecycle::Lifecycle;
use crate::transport::state::AppState;
use crate::transport::stream::{BatchSource, Framed};
use crate::transport::takeover::{
    Batches, LINGER, Linger, Messages, Opcode, Parkable, Taken, Tick, Upgraded, WsWriter,
};

/// A single-stream socket's task.
pub(super) struct Serve {
    /// Until the first poll: opened on the task's runtime.
    taken: Option<Box<Taken>>,
    conn: Option<Upgraded>,
    framed: Framed<WsFraming>,
    state: web::Data<AppState>,
    /// The idle timeout, reset by every client frame (made on the first
    /// poll, on the task's runtime).
    idle: Option<Pin<Box<Sleep>>>,
    idle_timeout: Duration,
    /// The keep-alive tick last pinged at.
    pinged: u64,
    /// A client frame its batch writer read and could not absorb: acted on
    /// first, back in the socket's task.
    held: Option<Box<ClientFrame>>,
    /// Messages framed from the stream's last item, and how many went.
    out: Vec<Outgoing>,
    sent: usize,
    /// `out` holds an item's messages: once they went, the stream's end and
    /// the keep-alive ping are looked at.
    item: bool,
    /// Whether the stream goes on after that item.
    more: bool,
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

impl Serve {
    pub(super) fn new(
        taken: Box<Taken>,
        framed: Framed<WsFraming>,
        state: web::Data<AppState>,
    ) -> Serve {
        Serve {
            taken: Some(taken),
            conn: None,
            framed,
            idle_timeout: state.stream.effective_ws_idle_timeout(),
            pinged: state.lifecycle.ticks(),
            held: None,
            state,
            idle: None,
            out: Vec::new(),
            sent: 0,
            item: false,
            more: true,
            sending: Sending::Nothing,
            written: 0,
        }
    }

    /// Writes the frame in progress; ready once it went (or the
    /// connection is gone).
    fn poll_sending(
        &mut self,
        writer: &mut WsWriter,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        let written = &mut self.written;
        match &self.sending {
            Sending::Nothing => Poll::Ready(Ok(())),
            Sending::Message => {
                let mut tail = [0u8; TAIL];
                let parts = parts(None, &self.out[self.sent], &mut tail);
                writer.poll_send_parts(cx, Opcode::Text, &parts, written)
            }
            Sending::Frames(frames) => writer.poll_write_frames(cx, frames, written),
            Sending::Ping => writer.poll_send_parts(cx, Opcode::Ping, &[], written),
            Sending::Pong(payload) => writer.poll_send_parts(cx, Opcode::Pong, &[payload], written),
            Sending::Close(payload) => {
                writer.poll_send_parts(cx, Opcode::Close, &[payload], written)
            }
            Sending::Lingering(_) => Poll::Ready(Ok(())),
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
}

/// A caught-up socket is written by its hub's batch writer
/// (`takeover::batch`) until it has anything of its own to do: a client
/// frame, a tick's ping, the idle timeout (looked at on the next tick, so
/// noticed up to a keep-alive interval late), its stream's end.
impl Parkable for Serve {
    fn poll_stream(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.conn.is_none() {
            let Some(taken) = self.taken.take() else {
                return Poll::Ready(());
            };
            match (*taken).open(Messages::Ignored) {
                Ok(upgraded) => self.conn = Some(upgraded),
                Err(err) => {
                    // Logged; the 101 is not sent, and the connection closes.
                    let _ = lost(err);
                    return Poll::Ready(());
                }
            }
            self.idle = Some(Box::pin(tokio::time::sleep(self.idle_timeout)));
        }
        let Some(mut conn) = self.conn.take() else {
            return Poll::Ready(());
        };
        let flow = self.poll_conn(&mut conn, cx);
        self.conn = Some(conn);
        flow
    }

    /// Open (its handshake response sent), nothing of its own being
    /// written or owed, no frame half read. Over TLS too: the inbox reads
    /// until the socket has nothing, so the session then holds no
    /// plaintext that the socket's readiness would not announce.
    fn idle(&self) -> bool {
        self.conn
            .as_ref()
            .is_some_and(|conn| conn.writer.opened() && !conn.inbox.holds_input())
            && matches!(self.sending, Sending::Nothing)
            && self.out.is_empty()
            && !self.item
            && self.held.is_none()
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
        Some(&mut self.framed)
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
    fn tick(&mut self, now: Instant) -> Tick {
        if self
            .idle
            .as_ref()
            .is_some_and(|idle| idle.deadline() <= now)
        {
            return Tick::Unpark;
        }
        let owed = self.framed.frame_tick();
        let ticks = self.state.lifecycle.ticks();
        if ticks == self.pinged {
            return match owed {
                Some((bytes, counted)) => Tick::Send(bytes, counted),
                None => Tick::Nothing,
            };
        }
        self.pinged = ticks;
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

    /// Pongs and text (which a single stream takes as a sign of life
    /// only) are read here, and reset the idle timeout, as the task does;
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
            if let Some(idle) = &mut self.idle {
                idle.as_mut().reset(Instant::now() + self.idle_timeout);
            }
            match ClientFrame::of(msg) {
                ClientFrame::Pong | ClientFrame::Text(_) => {}
                frame => {
                    self.held = Some(Box::new(frame));
                    return false;
                }
            }
        }
    }
}

/// An unmasked Ping frame with no payload, as a server sends it.
const PING: &[u8] = &[0x89, 0x00];

impl Serve {
    fn poll_conn(&mut self, conn: &mut Upgraded, cx: &mut Context<'_>) -> Poll<()> {
        // The handshake response before any frame (ready at once after it).
        if ready!(conn.writer.poll_open(cx)).is_err() {
            return Poll::Ready(());
        }
        loop {
            if let Sending::Lingering(linger) = &mut self.sending {
                let timer = self.idle.as_mut().map(|idle| idle.as_mut().poll(cx));
                if conn.writer.poll_linger(linger, cx).is_ready()
                    || !matches!(timer, Some(Poll::Pending))
                {
                    return Poll::Ready(());
                }
                return Poll::Pending;
            }
            // The frame in progress first: frames go out whole and in order.
            if !matches!(self.sending, Sending::Nothing) {
                if ready!(self.poll_sending(&mut conn.writer, cx)).is_err() {
                    return Poll::Ready(());
                }
                match mem::take(&mut self.sending) {
                    Sending::Close(_) => {
                        conn.writer.shutdown();
                        let until = Instant::now() + LINGER;
                        match &mut self.idle {
                            Some(idle) => idle.as_mut().reset(until),
                            None => self.idle = Some(Box::pin(tokio::time::sleep_until(until))),
                        }
                        self.sending = Sending::Lingering(Linger::default());
                        continue;
                    }
                    Sending::Message => {
                        let mut tail = [0u8; TAIL];
                        let msg = parts(None, &self.out[self.sent], &mut tail);
                        let n = msg.iter().map(|p| p.len() as u64).sum();
                        self.framed.wrote(n);
                        self.sent += 1;
                    }
                    _ => {}
                }
                continue;
            }
            if self.sent < self.out.len() {
                self.send(Sending::Message);
                continue;
            }
            if mem::take(&mut self.item) {
                self.out.clear();
                self.sent = 0;
                // Kept for the next item, but not at a snapshot chunk's
                // size for the socket's whole life.
                self.out.shrink_to(4);
                if !self.more {
                    let reason = close_for(self.framed.framing().ending.as_deref());
                    self.close(&reason);
                    continue;
                }
                // Pinged on every tick, even while the stream is busy: the
                // pong is what keeps the socket from its idle timeout.
                let ticks = self.state.lifecycle.ticks();
                if ticks != self.pinged {
                    self.pinged = ticks;
                    self.send(Sending::Ping);
                    continue;
                }
            }
            // The client next: its frames are rare, and looking costs a
            // load of the socket's readiness.
            let frame = match self.held.take() {
                Some(frame) => Some(*frame),
                None => match Pin::new(&mut conn.inbox).poll_next(cx) {
                    Poll::Ready(msg) => {
                        if let Some(idle) = &mut self.idle {
                            idle.as_mut().reset(Instant::now() + self.idle_timeout);
                        }
                        Some(ClientFrame::of(msg))
                    }
                    Poll::Pending => None,
                },
            };
            if let Some(frame) = frame {
                match frame {
                    ClientFrame::End(None) => return Poll::Ready(()),
                    ClientFrame::End(Some(reason)) => self.close(&reason),
                    ClientFrame::Ping(payload) => self.send(Sending::Pong(payload)),
                    // A single stream takes no messages: text only proves
                    // the peer alive (and spends the socket's ration of
                    // frames that do nothing, `takeover::ws_read`).
                    ClientFrame::Pong | ClientFrame::Text(_) => {}
                }
                continue;
            }
            if let Some(idle) = &mut self.idle
                && idle.as_mut().poll(cx).is_ready()
            {
                self.idle = None;
                self.close(&close_reason(CloseCode::Policy, IDLE));
                continue;
            }
            self.more = ready!(self.framed.poll_next_into(cx, &mut self.out));
            self.item = true;
        }
    }
}
