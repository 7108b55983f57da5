//! A `/ws` socket: many subscriptions on one connection, opened and closed
//! by client messages ([`super::ops`]). One control loop reads the client
//! (answering each of its pings before reading on), pings and keeps the
//! idle timeout; each subscription is a stream of its own ([`sub`]), in a
//! task or parked with its hub's batch writer; all write through the
//! socket's [`outbox`], whose writer task writes what is queued.
//!
//! All of them are streams (`takeover::Streams`): they run on the streams'
//! runtime, where the connection is opened (so its readiness and the hubs'
//! wake-ups cross no thread), and `Streams::stop` waits for each, so every
//! subscription's last message goes out before the gateway stops.

mod outbox;
mod sub;

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use actix_web::web;
use actix_ws::CloseCode;
use bytes::Bytes;
use bytestring::ByteString;
use futures::StreamExt;
use tokio::time::Instant;

use super::message::{
    CLOSE_UNAUTHORIZED, GOING_AWAY, IDLE, Id, NULL_PREFIX, Outgoing, close_reason, error_message,
    message, sub_prefix,
};
use super::ops::{Op, OpError, parse_op};
use super::{ClientFrame, Ending};
use crate::auth::Principal;
use crate::metrics::Transport;
use crate::status::status_json;
use crate::transport::message::shutdown_status;
use crate::transport::state::AppState;
use crate::transport::takeover::{Messages, Opcode, Taken, Task, Upgraded, WsWriter};
use crate::transport::{StreamParams, subscribe};
use outbox::{Frame, Outbox};
use sub::{Starting, Sub};

/// Time a Close frame gets to be queued behind a stuck socket, and
/// subscriptions to send their last message.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Starts a `/ws` socket's control loop on the streams' runtime; it opens
/// the connection there and starts the writer.
pub(super) fn spawn(state: web::Data<AppState>, taken: Box<Taken>, principal: Principal) {
    let max = state.stream.max_subscriptions_per_socket.max(1);
    let streams = state.streams.clone();
    streams.spawn(Socket::new(state, max, principal).run(taken));
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

/// A `/ws` socket: its writer, its subscriptions, its control loop.
struct Socket {
    state: web::Data<AppState>,
    outbox: Arc<Outbox>,
    /// Each active subscription's generation: which of its id's uses it
    /// is.
    subs: HashMap<String, u64>,
    max_subs: usize,
    generation: u64,
    idle_timeout: Duration,
    /// Who opened the socket; `/ws` subscriptions are authorized as it.
    principal: Principal,
}

impl Socket {
    fn new(state: web::Data<AppState>, max_subs: usize, principal: Principal) -> Socket {
        let idle_timeout = state.stream.effective_ws_idle_timeout();
        Socket {
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

    /// Opens the connection on the current runtime (the streams'), starts
    /// the writer, then runs the socket's control loop: client messages,
    /// pings, the idle timeout, the end of the credentials the socket was
    /// opened with, and the hard stop.
    async fn run(mut self, taken: Box<Taken>) {
        let Upgraded {
            writer,
            inbox: mut msgs,
        } = match (*taken).open(Messages::Taken) {
            Ok(upgraded) => upgraded,
            Err(err) => {
                // Logged; the 101 is not sent, and the connection closes.
                let _ = super::lost(err);
                return;
            }
        };
        let outbox = self.outbox.clone();
        self.state.streams.spawn(write(writer, outbox.clone()));
        let lifecycle = self.state.lifecycle.clone();
        // One wait on the lifecycle, whose epoch moves on each tick, at
        // shutdown and at the hard stop (not three futures in the
        // socket's state).
        let mut life = lifecycle.epoch().waiting();
        let mut life_seen = lifecycle.epoch().current();
        let mut ticks = lifecycle.ticks();
        let idle = tokio::time::sleep(self.idle_timeout);
        tokio::pin!(idle);
        let deadline = self.principal.deadline();
        // Boxed, and only for credentials that end: an anonymous socket
        // keeps no timer for it.
        let mut expiry = deadline.map(|at| Box::pin(tokio::time::sleep_until(at)));
        let ending: Ending = loop {
            if lifecycle.is_shutting_down() && self.subs.is_empty() {
                break Some(close_reason(CloseCode::Away, GOING_AWAY));
            }
            // Past the grace period nothing more is waited for.
            if lifecycle.is_hard_stopped() {
                break None;
            }
            tokio::select! {
                // Ordered: an ended subscription frees its id before the
                // next client message is read.
                biased;
                () = poll_fn(|cx| life.poll_moved(life_seen, cx)) => {
                    life_seen = lifecycle.epoch().current();
                    let ticked = lifecycle.ticks();
                    if ticked != ticks && !lifecycle.is_shutting_down() {
                        ticks = ticked;
                        self.outbox.try_push(Frame::Ping);
                    }
                }
                notice = poll_fn(|cx| outbox.poll_ended(cx)) => self.ended(notice),
                _ = &mut idle => break Some(close_reason(CloseCode::Policy, IDLE)),
                // The socket's own credentials: its subscriptions end
                // themselves at the same moment, each with its ERROR (401).
                () = poll_fn(|cx| expiry.as_mut().map_or(Poll::Pending, |e| e.as_mut().poll(cx))) => {
                    // A refreshed session moved its end: wait for that.
                    match self.principal.lease().and_then(|lease| lease.later()) {
                        Some(later) => {
                            if let Some(expiry) = &mut expiry {
                                expiry.as_mut().reset(later);
                            }
                        }
                        _ => break Box::pin(self.expire()).await,
                    }
                }
                msg = msgs.next() => {
                    idle.as_mut().reset(Instant::now() + self.idle_timeout);
                    match ClientFrame::of(msg) {
                        ClientFrame::End(ending) => break ending,
                        ClientFrame::Ping(payload) => {
                            // Each ping is answered before the next frame is
                            // read: a client that pings faster than it reads
                            // pongs is not read either (and its pings spend
                            // the socket's ration, `takeover::ws_read`).
                            if !Box::pin(self.queue(Frame::Pong(payload))).await {
                                break Some(close_reason(CloseCode::Policy, "not reading"));
                            }
                        }
                        ClientFrame::Pong => {}
                        ClientFrame::Text(text) => {
                            // Boxed, as the other rare steps: the socket's
                            // task keeps only the state of its waiting.
                            if !Box::pin(self.handle(&text)).await {
                                break Some(close_reason(CloseCode::Policy, "not reading"));
                            }
                        }
                    }
                }
            }
        };
        drop(life);
        Box::pin(self.finish(ending)).await;
    }

    /// Ends every subscription, then queues the Close frame (at most
    /// [`CLOSE_WAIT`] behind a stuck socket) and lets the writer drain.
    async fn finish(self, ending: Ending) {
        self.outbox.remove_all();
        if let Some(reason) = ending {
            let _ = tokio::time::timeout(CLOSE_WAIT, self.queue(Frame::Close(Some(reason)))).await;
        }
        // Without a Close (the peer is gone) the writer ends once it wrote
        // what is queued.
        self.outbox.close();
    }

    /// The credentials the socket was opened with ended: its
    /// subscriptions send their ERROR (401) and end (at most
    /// [`CLOSE_WAIT`]), then the socket closes with [`CLOSE_UNAUTHORIZED`].
    async fn expire(&mut self) -> Ending {
        let outbox = self.outbox.clone();
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            while !self.subs.is_empty() {
                let notice = poll_fn(|cx| outbox.poll_ended(cx)).await;
                self.ended(notice);
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

    /// Queues a reply from the control loop; false if the socket accepted
    /// nothing for the idle timeout.
    async fn reply(&self, msg: ByteString) -> bool {
        self.queue(Frame::Text(msg)).await
    }

    /// Queues a frame from the control loop, waiting while the socket is
    /// backed up; false if it accepted nothing for the idle timeout.
    async fn queue(&self, frame: Frame) -> bool {
        let mut frame = Some(frame);
        tokio::time::timeout(
            self.idle_timeout,
            poll_fn(|cx| self.outbox.poll_push(cx, &mut frame, None)),
        )
        .await
        .unwrap_or(false)
    }

    /// Acts on one client message of a `/ws` socket.
    async fn handle(&mut self, text: &str) -> bool {
        let op = match parse_op(text) {
            Ok(op) => op,
            Err(OpError::Socket(msg)) => {
                let status = status_json(400, "BadRequest", &msg);
                return self.reply(error_message(Some(NULL_PREFIX), &status)).await;
            }
            Err(OpError::Sub(id, err)) => {
                return self
                    .reply(error_message(Some(&sub_prefix(&id)), &err.status()))
                    .await;
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
                } else {
                    None
                };
                match refusal {
                    Some(status) => {
                        self.reply(error_message(Some(&sub_prefix(&id)), &status))
                            .await
                    }
                    None => {
                        self.spawn(id, resource, params);
                        true
                    }
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
                        self.reply(message(Some(&prefix), &Outgoing::event(json, Id::None)))
                            .await
                    }
                    None => {
                        let status = status_json(
                            404,
                            "NotFound",
                            &format!("no active subscription {id:?} on this socket"),
                        );
                        self.reply(error_message(Some(&prefix), &status)).await
                    }
                }
            }
        }
    }
}

/// The socket's one writer task: the outbox, in order, until a Close or
/// the peer is gone. Until the handshake response went, nothing is written
/// past it.
async fn write(mut raw: WsWriter, outbox: Arc<Outbox>) {
    if raw.open().await.is_err() {
        outbox.failed();
        return;
    }
    outbox.opened(raw.direct());
    while let Some(frame) = poll_fn(|cx| outbox.poll_next(cx)).await {
        let sent = match frame {
            Frame::Close(reason) => {
                let (code, text) = reason.map_or((1000, String::new()), |r| {
                    (u16::from(r.code), r.description.unwrap_or_default())
                });
                Box::pin(raw.close(code, &text)).await;
                outbox.failed();
                return;
            }
            Frame::Text(text) => raw.send(Opcode::Text, text.as_bytes()).await,
            Frame::Raw(frames) => raw.write_frames(&frames).await,
            Frame::Ping => raw.send(Opcode::Ping, &[]).await,
            Frame::Pong(payload) => raw.send(Opcode::Pong, &payload).await,
        };
        if sent.is_err() {
            outbox.failed();
            return;
        }
        outbox.wrote();
    }
    Box::pin(raw.close(1000, "")).await;
}
