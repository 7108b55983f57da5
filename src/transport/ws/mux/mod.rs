//! A `/ws` socket: many subscriptions on one connection, opened and closed
//! by client messages ([`super::ops`]). One control loop ([`Control`], a
//! task of its own) reads the client while the socket's [`outbox`] has
//! room (queueing at most a pong or a reply per message), pings and keeps
//! the idle timeout, and writes what the outbox queues; each subscription
//! is a stream of its own ([`sub`]), in a task or parked with its hub's
//! batch writer, and writes through the outbox.
//!
//! All of them are streams (`takeover::Streams`): they run on the streams'
//! runtime, where the connection is opened (so its readiness and the hubs'
//! wake-ups cross no thread), and `Streams::stop` waits for each, so every
//! subscription's last message goes out before the gateway stops.

mod outbox;
mod sub;

use std::collections::HashMap;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use actix_web::web;
use actix_ws::{CloseCode, CloseReason};
use bytes::Bytes;
use bytestring::ByteString;
use futures::StreamExt;
use tokio::time::{Instant, Sleep};

use super::message::{
    CLOSE_UNAUTHORIZED, GOING_AWAY, IDLE, Id, NOT_READING, NULL_PREFIX, Outgoing, close_reason,
    error_message, message, sub_prefix,
};
use super::ops::{Op, OpError, parse_op};
use super::{ClientFrame, Ending};
use crate::auth::Principal;
use crate::epoch::Registration;
use crate::lifecycle::Lifecycle;
use crate::metrics::Transport;
use crate::status::status_json;
use crate::transport::message::shutdown_status;
use crate::transport::state::AppState;
use crate::transport::takeover::ration::{Ration, WS_SUBSCRIBES};
use crate::transport::takeover::{Inbox, Messages, Opcode, Taken, Task, Upgraded, WsWriter};
use crate::transport::{StreamParams, subscribe};
use outbox::{Frame, Outbox};
use sub::{Starting, Sub};

/// Time a Close frame gets to be queued behind a stuck socket, and
/// subscriptions to send their last message.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Starts a `/ws` socket's control loop on the streams' runtime; it opens
/// the connection there.
pub(super) fn spawn(state: web::Data<AppState>, taken: Box<Taken>, principal: Principal) {
    let streams = state.streams.clone();
    streams.spawn(run(state, taken, principal));
}

/// Opens the connection on the current runtime (the streams'), then runs
/// the socket's control loop ([`Control`]) until the socket ends, and
/// closes it.
///
/// One task for all of it, not a control loop and a writer task: a writer
/// task was a second task header and future (576 bytes) per socket. The
/// control loop reads the client only while the outbox has room, so what
/// it queues for a client message (a pong, a reply) stays within the
/// outbox's bound without waiting for room in a handler, which only the
/// writing it would block could make.
///
/// Its arguments are small: an `async fn` keeps its arguments beside its
/// locals for its whole life, so the socket's state is made here.
async fn run(state: web::Data<AppState>, taken: Box<Taken>, principal: Principal) {
    let Upgraded { writer, inbox } = match (*taken).open(Messages::Taken) {
        Ok(upgraded) => upgraded,
        Err(err) => {
            // Logged; the 101 is not sent, and the connection closes.
            let _ = super::lost(err);
            return;
        }
    };
    let max = state.stream.max_subscriptions_per_socket.max(1);
    let mut control = Control::new(
        Socket::new(state, max, principal),
        Writer::new(writer),
        inbox,
    );
    let stop = poll_fn(|cx| control.poll(cx)).await;
    // Boxed: the socket's task keeps only the state of its waiting.
    Box::pin(end(control, stop)).await;
}

/// Ends the socket as its control loop stopped.
async fn end(control: Control, stop: Stop) {
    let Control {
        mut socket,
        mut writer,
        life,
        ..
    } = control;
    drop(life);
    let ending = match stop {
        Stop::End(ending) => ending,
        Stop::Expired => socket.expire(&mut writer).await,
    };
    socket.finish(ending, writer).await;
}

/// Subscribes `principal` to `resource` as `params` say, unless the
/// gateway is stopping: the subscription framed for a socket, or the
/// `Status` that refused it.
fn starting(
    state: web::Data<AppState>,
    principal: Principal,
    resource: String,
    params: StreamParams,
) -> Starting {
    Box::pin(async move {
        let sub = tokio::select! {
            biased;
            _ = state.lifecycle.shutting_down() => Err(shutdown_status()),
            started = subscribe(&state, &principal, &resource, &params, Transport::WebSocket) => started.map_err(|e| e.status()),
        }?;
        Ok(super::framed(sub, &state, principal.name()))
    })
}

/// A `/ws` socket's subscriptions, as its control loop keeps them.
struct Socket {
    state: web::Data<AppState>,
    outbox: Arc<Outbox>,
    /// Each active subscription's generation: which of its id's uses it
    /// is.
    subs: HashMap<String, u64>,
    max_subs: usize,
    /// Subscriptions it may start now ([`StreamConfig::subscribes_per_minute`]).
    ///
    /// [`StreamConfig::subscribes_per_minute`]: crate::config::StreamConfig::subscribes_per_minute
    subscribes: Ration,
    generation: u64,
    idle_timeout: Duration,
    /// Who opened the socket; `/ws` subscriptions are authorized as it.
    principal: Principal,
}

impl Socket {
    fn new(state: web::Data<AppState>, max_subs: usize, principal: Principal) -> Socket {
        let idle_timeout = state.stream.effective_ws_idle_timeout();
        Socket {
            subscribes: Ration::per_minute(state.stream.subscribes_per_minute),
            state,
            outbox: Arc::new(Outbox::new()),
            subs: HashMap::new(),
            max_subs,
            generation: 0,
            idle_timeout,
            principal,
        }
    }

    /// A subscription's end notice: its id is free again (unless a later
    /// subscription holds it already).
    fn ended(&mut self, (id, generation): (Box<str>, u64)) {
        if self
            .subs
            .get(&*id)
            .is_some_and(|active| *active == generation)
        {
            self.subs.remove(&*id);
        }
    }

    /// Ends every subscription, queues the Close frame behind what is
    /// queued, and writes them.
    async fn finish(self, ending: Ending, mut writer: Writer) {
        self.outbox.remove_all();
        if let Some(reason) = ending {
            self.outbox.push(Frame::Close(Some(reason)));
        }
        self.outbox.close();
        // Each write is held to the write timeout (and ends at the hard
        // stop); without a Close (the peer is gone) the socket is closed
        // once what is queued went.
        loop {
            match poll_fn(|cx| writer.poll(&self.outbox, cx)).await {
                Wrote::Frame => {}
                Wrote::Close(reason) => {
                    let (code, text) = reason.map_or((1000, String::new()), |r| {
                        (u16::from(r.code), r.description.unwrap_or_default())
                    });
                    writer.raw.close(code, &text).await;
                    self.outbox.failed();
                    return;
                }
                Wrote::Drained => {
                    writer.raw.close(1000, "").await;
                    return;
                }
                Wrote::Failed => return,
            }
        }
    }

    /// The credentials the socket was opened with ended: its
    /// subscriptions send their ERROR (401) and end (at most
    /// [`CLOSE_WAIT`]), then the socket closes with [`CLOSE_UNAUTHORIZED`].
    async fn expire(&mut self, writer: &mut Writer) -> Ending {
        let outbox = self.outbox.clone();
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            while !self.subs.is_empty() {
                tokio::select! {
                    biased;
                    wrote = poll_fn(|cx| writer.poll(&outbox, cx)) => {
                        if !matches!(wrote, Wrote::Frame) {
                            break;
                        }
                    }
                    notice = poll_fn(|cx| outbox.poll_ended(cx)) => self.ended(notice),
                }
            }
        })
        .await;
        Some(close_reason(
            CloseCode::Other(CLOSE_UNAUTHORIZED),
            "token expired",
        ))
    }

    /// Starts subscription `id`: a stream of its own, on the streams'
    /// runtime, like every other.
    fn spawn(&mut self, id: String, resource: String, params: StreamParams) {
        self.generation += 1;
        let sub = Sub::new(
            self.state.clone(),
            self.outbox.clone(),
            self.generation,
            &id,
            sub_prefix(&id),
            starting(self.state.clone(), self.principal.clone(), resource, params),
        );
        self.state.streams.spawn(Task::new(sub));
        self.subs.insert(id, self.generation);
    }

    /// Queues a reply from the control loop.
    fn reply(&self, msg: ByteString) {
        self.outbox.push(Frame::Text(msg));
    }

    /// Acts on one client message of a `/ws` socket: queues at most one
    /// frame (its reply), or starts a subscription.
    fn handle(&mut self, text: &str) {
        let op = match parse_op(text) {
            Ok(op) => op,
            Err(OpError::Socket(msg)) => {
                let status = status_json(400, "BadRequest", &msg);
                return self.reply(error_message(Some(NULL_PREFIX), &status));
            }
            Err(OpError::Sub(id, err)) => {
                return self.reply(error_message(Some(&sub_prefix(&id)), &err.status()));
            }
        };
        match op {
            Op::Subscribe {
                id,
                resource,
                params,
            } => {
                let refusal = if self.subs.contains_key(&id) {
                    Some(status_json(
                        409,
                        "AlreadyExists",
                        &format!("subscription {id:?} is already active on this socket"),
                    ))
                } else if self.subs.len() >= self.max_subs {
                    Some(status_json(
                        429,
                        "TooManyRequests",
                        &format!(
                            "this socket already holds {} subscriptions, the most allowed",
                            self.max_subs
                        ),
                    ))
                } else if !self.subscribes.spend(Instant::now()) {
                    self.state.metrics.limit_hit(WS_SUBSCRIBES);
                    Some(status_json(
                        429,
                        "TooManyRequests",
                        &format!(
                            "this socket started {} subscriptions within the last minute, the most allowed; subscribe again later",
                            self.state.stream.subscribes_per_minute
                        ),
                    ))
                } else {
                    None
                };
                match refusal {
                    Some(status) => self.reply(error_message(Some(&sub_prefix(&id)), &status)),
                    None => self.spawn(id, resource, params),
                }
            }
            Op::Unsubscribe { id } => {
                let prefix = sub_prefix(&id);
                match self.subs.remove(&id) {
                    Some(generation) => {
                        // Whatever it queued is ahead of the reply; nothing
                        // of it can follow (it ends once woken).
                        self.outbox.remove(generation);
                        let json = Bytes::from_static(br#"{"type":"UNSUBSCRIBED"}"#);
                        self.reply(message(Some(&prefix), &Outgoing::event(json, Id::None)));
                    }
                    None => {
                        let status = status_json(
                            404,
                            "NotFound",
                            &format!("no active subscription {id:?} on this socket"),
                        );
                        self.reply(error_message(Some(&prefix), &status));
                    }
                }
            }
        }
    }
}

/// How the control loop stopped.
enum Stop {
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
struct Control {
    socket: Socket,
    writer: Writer,
    msgs: Inbox,
    outbox: Arc<Outbox>,
    /// One wait on the lifecycle, whose epoch moves on each tick, at
    /// shutdown and at the hard stop.
    life: LifeWait,
    life_seen: u64,
    ticks: u64,
    /// When the client was last read: its idle timeout is looked at on
    /// each tick, as a parked single-stream socket's is (no timer per
    /// socket; the timeout is at least 2.5 ticks, `StreamConfig`).
    heard: Instant,
    /// Boxed, and only for credentials that end: an anonymous socket keeps
    /// no timer for it.
    expiry: Option<Pin<Box<Sleep>>>,
}

impl Control {
    fn new(socket: Socket, writer: Writer, msgs: Inbox) -> Control {
        let lifecycle = socket.state.lifecycle.clone();
        let expiry = socket
            .principal
            .deadline()
            .map(|at| Box::pin(tokio::time::sleep_until(at)));
        Control {
            outbox: socket.outbox.clone(),
            writer,
            msgs,
            life_seen: lifecycle.epoch().current(),
            ticks: lifecycle.ticks(),
            life: LifeWait {
                lifecycle,
                reg: Registration::default(),
            },
            heard: Instant::now(),
            expiry,
            socket,
        }
    }

    /// Ready once the socket is to end. Each step in order (what is
    /// written makes room first, and an ended subscription frees its id
    /// before the next client message is read); after any that did
    /// something, from the top again.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Stop> {
        let lifecycle = self.life.lifecycle.clone();
        loop {
            if lifecycle.is_shutting_down() && self.socket.subs.is_empty() {
                return Poll::Ready(Stop::End(Some(close_reason(CloseCode::Away, GOING_AWAY))));
            }
            // Past the grace period nothing more is waited for.
            if lifecycle.is_hard_stopped() {
                return Poll::Ready(Stop::End(None));
            }
            let room = self.outbox.has_room();
            if let Poll::Ready(wrote) = self.writer.poll(&self.outbox, cx) {
                if !matches!(wrote, Wrote::Frame) {
                    // The socket failed (only `finish` queues a Close or
                    // closes the outbox).
                    return Poll::Ready(Stop::End(None));
                }
                continue;
            }
            let epoch = lifecycle.epoch();
            if epoch
                .poll_moved(self.life_seen, &mut self.life.reg, cx)
                .is_ready()
            {
                self.life_seen = epoch.current();
                let ticked = lifecycle.ticks();
                if ticked != self.ticks {
                    self.ticks = ticked;
                    if self.heard.elapsed() >= self.socket.idle_timeout {
                        // Not read for the idle timeout because it did not
                        // take what it was sent is "not reading"; otherwise
                        // it was quiet.
                        let why = if room { IDLE } else { NOT_READING };
                        return Poll::Ready(Stop::End(Some(close_reason(CloseCode::Policy, why))));
                    }
                    if !lifecycle.is_shutting_down() {
                        self.outbox.try_push(Frame::Ping);
                    }
                }
                continue;
            }
            if let Poll::Ready(notice) = self.outbox.poll_ended(cx) {
                self.socket.ended(notice);
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
                self.heard = Instant::now();
                match ClientFrame::of(msg) {
                    ClientFrame::End(ending) => return Poll::Ready(Stop::End(ending)),
                    ClientFrame::Ping(payload) => {
                        self.outbox.push(Frame::Pong(payload));
                    }
                    ClientFrame::Pong => {}
                    ClientFrame::Text(text) => self.socket.handle(&text),
                }
                continue;
            }
            return Poll::Pending;
        }
    }
}

/// The control loop's registration with the lifecycle's epoch, taken out
/// when the loop ends.
struct LifeWait {
    lifecycle: Arc<Lifecycle>,
    reg: Registration,
}

impl Drop for LifeWait {
    fn drop(&mut self) {
        self.lifecycle.epoch().deregister(&mut self.reg);
    }
}

/// What the socket's writing did ([`Writer::poll`]).
enum Wrote {
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
struct Writer {
    raw: WsWriter,
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

impl Writer {
    fn new(raw: WsWriter) -> Writer {
        Writer {
            raw,
            sending: None,
            streak: 0,
            opened: false,
            failed: false,
        }
    }

    /// Writes on: ready when a frame went, or with how the writing ended;
    /// pending while the socket takes no more or nothing is queued.
    fn poll(&mut self, outbox: &Outbox, cx: &mut Context<'_>) -> Poll<Wrote> {
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
