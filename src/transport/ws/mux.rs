//! A `/ws` socket: many subscriptions on one connection, opened and closed
//! by client messages ([`super::ops`]). One control loop reads the client
//! (answering each of its pings before reading on), pings and keeps the
//! idle timeout; each subscription is a task that
//! queues its messages in the socket's outbox; one writer task drains it.
//!
//! All of them are streams (`takeover::Streams`): they run on the streams'
//! runtime, where the connection is opened (so its readiness and the hubs'
//! wake-ups cross no thread), and `Streams::stop` waits for each, so every
//! subscription's last message goes out before the gateway stops.

use std::collections::HashMap;
use std::time::Duration;

use actix_web::web;
use actix_ws::{CloseCode, Message};
use bytes::Bytes;
use bytestring::ByteString;
use futures::StreamExt;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
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
use crate::transport::takeover::{Messages, Opcode, Taken, Upgraded, WsWriter};
use crate::transport::{StreamParams, subscribe};

/// Messages a socket's subscriptions may have queued for its writer.
const OUTBOX: usize = 64;
/// Time a Close frame gets to be queued behind a stuck socket, and
/// subscriptions to send their last message.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Starts a `/ws` socket's control loop on the streams' runtime; it opens
/// the connection there and starts the writer.
pub(super) fn spawn(state: web::Data<AppState>, taken: Box<Taken>, principal: Principal) {
    let max = state.stream.max_subscriptions_per_socket.max(1);
    let streams = state.streams.clone();
    let (socket, out_rx, done_rx) = Socket::new(state, max, principal);
    streams.spawn(socket.run(taken, out_rx, done_rx));
}

/// A subscription task's view of its socket.
struct Outbox {
    out_tx: mpsc::Sender<Message>,
    prefix: Bytes,
    done_tx: mpsc::Sender<(String, u64)>,
    key: (String, u64),
}

impl Outbox {
    /// Queues a message; waits while the socket is slow. False once the
    /// socket is gone.
    async fn send(&self, msg: ByteString, bytes_sent: Option<&Counter>) -> bool {
        if let Some(bytes) = bytes_sent {
            bytes.inc_by(msg.len() as u64);
        }
        self.out_tx.send(Message::Text(msg)).await.is_ok()
    }
}

/// One subscription: frames its messages into the socket's outbox until
/// the stream ends (hub closed, shutdown, credentials ended) or the socket
/// goes away.
async fn run_subscription(
    state: web::Data<AppState>,
    principal: Principal,
    outbox: Outbox,
    start: Box<(String, StreamParams)>,
) {
    let (resource, params) = *start;
    // Boxed: the task then holds the subscription, not the larger state of
    // starting it, for as long as it streams.
    let started = Box::pin(async {
        tokio::select! {
            biased;
            _ = state.lifecycle.shutting_down() => Err(shutdown_status()),
            started = subscribe(&state, &principal, &resource, &params, Transport::WebSocket) => started.map_err(|e| e.status()),
        }
    })
    .await;
    let sub = match started {
        Ok(sub) => sub,
        Err(status) => {
            if outbox
                .send(error_message(Some(&outbox.prefix), &status), None)
                .await
            {
                let _ = outbox.done_tx.send(outbox.key).await;
            }
            return;
        }
    };
    let (mut framed, bytes_sent) = super::framed(sub, &state, principal.name());
    let mut out = Vec::new();
    while framed.next_into(&mut out).await {
        for msg in out.drain(..) {
            let text = message(Some(&outbox.prefix), &msg);
            framed.wrote(text.len() as u64);
            if !outbox.send(text, Some(&bytes_sent)).await {
                return;
            }
        }
        out.shrink_to(4);
    }
    let _ = outbox.done_tx.send(outbox.key).await;
}

/// A subscription task and which of the id's uses it is.
struct Active {
    generation: u64,
    task: JoinHandle<()>,
}

/// A `/ws` socket: its writer, its subscriptions, its control loop.
struct Socket {
    state: web::Data<AppState>,
    out_tx: mpsc::Sender<Message>,
    subs: HashMap<String, Active>,
    max_subs: usize,
    done_tx: mpsc::Sender<(String, u64)>,
    generation: u64,
    idle_timeout: Duration,
    /// Who opened the socket; `/ws` subscriptions are authorized as it.
    principal: Principal,
}

impl Socket {
    /// The socket, the receiving end of its outbox (the writer's) and the
    /// receiver of its subscriptions' end notices.
    fn new(
        state: web::Data<AppState>,
        max_subs: usize,
        principal: Principal,
    ) -> (
        Socket,
        mpsc::Receiver<Message>,
        mpsc::Receiver<(String, u64)>,
    ) {
        let (out_tx, out_rx) = mpsc::channel(OUTBOX);
        // Each task sends one notice, at its end; the loop reads them first
        // of all, so this hardly ever holds more than a few (and a full
        // one only delays a task that has already finished).
        let (done_tx, done_rx) = mpsc::channel(max_subs);
        let idle_timeout = state.stream.effective_ws_idle_timeout();
        let socket = Socket {
            state,
            out_tx,
            subs: HashMap::new(),
            max_subs,
            done_tx,
            generation: 0,
            idle_timeout,
            principal,
        };
        (socket, out_rx, done_rx)
    }

    /// Opens the connection on the current runtime (the streams'), starts
    /// the writer, then runs the socket's control loop: client messages,
    /// pings, the idle timeout, the end of the credentials the socket was
    /// opened with, and the hard stop.
    async fn run(
        mut self,
        taken: Box<Taken>,
        out_rx: mpsc::Receiver<Message>,
        mut done_rx: mpsc::Receiver<(String, u64)>,
    ) {
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
        self.state.streams.spawn(write(writer, out_rx));
        let lifecycle = self.state.lifecycle.clone();
        // Past the grace period nothing more is waited for: a subscription
        // whose last message found the writer gone sent no end notice.
        let hard_stop = lifecycle.hard_stopped();
        tokio::pin!(hard_stop);
        let mut ticks = lifecycle.ticks();
        let idle = tokio::time::sleep(self.idle_timeout);
        tokio::pin!(idle);
        let deadline = self.principal.deadline();
        let expiry = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now));
        tokio::pin!(expiry);
        let ending: Ending = loop {
            tokio::select! {
                // Ordered: an ended subscription frees its id before the
                // next client message is read.
                biased;
                _ = lifecycle.shutting_down(), if self.subs.is_empty() => {
                    break Some(close_reason(CloseCode::Away, GOING_AWAY));
                }
                () = &mut hard_stop => break None,
                Some((id, generation)) = done_rx.recv() => {
                    if self.subs.get(&id).is_some_and(|r| r.generation == generation) {
                        self.subs.remove(&id);
                    }
                }
                ticked = lifecycle.next_tick(ticks), if !lifecycle.is_shutting_down() => {
                    ticks = ticked;
                    let _ = self.out_tx.try_send(Message::Ping(Bytes::new()));
                }
                _ = &mut idle => break Some(close_reason(CloseCode::Policy, IDLE)),
                // The socket's own credentials: its subscriptions end
                // themselves at the same moment, each with its ERROR (401).
                _ = &mut expiry, if deadline.is_some() => {
                    // A refreshed session moved its end: wait for that.
                    match self.principal.lease().and_then(|lease| lease.later()) {
                        Some(later) => expiry.as_mut().reset(later),
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
                            if !self.queue(Message::Pong(payload)).await {
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
        Box::pin(self.finish(ending)).await;
    }

    /// Stops every subscription, then queues the Close frame (at most
    /// [`CLOSE_WAIT`] behind a stuck socket) and lets the writer drain.
    async fn finish(self, ending: Ending) {
        for active in self.subs.values() {
            active.task.abort();
        }
        if let Some(reason) = ending {
            let _ =
                tokio::time::timeout(CLOSE_WAIT, self.out_tx.send(Message::Close(Some(reason))))
                    .await;
        }
        // Without a Close (the peer is gone) the writer ends once the
        // aborted tasks have dropped their senders.
    }

    /// The credentials the socket was opened with ended: its
    /// subscriptions send their ERROR (401) and end (at most
    /// [`CLOSE_WAIT`]), then the socket closes with [`CLOSE_UNAUTHORIZED`].
    async fn expire(&mut self) -> Ending {
        let tasks: Vec<_> = self.subs.drain().map(|(_, active)| active.task).collect();
        let _ = tokio::time::timeout(CLOSE_WAIT, futures::future::join_all(tasks)).await;
        Some(close_reason(
            CloseCode::Other(CLOSE_UNAUTHORIZED),
            "token expired",
        ))
    }

    fn spawn(&mut self, id: String, start: Box<(String, StreamParams)>) {
        self.generation += 1;
        let outbox = Outbox {
            out_tx: self.out_tx.clone(),
            prefix: sub_prefix(&id),
            done_tx: self.done_tx.clone(),
            key: (id.clone(), self.generation),
        };
        let task = self.state.streams.spawn(run_subscription(
            self.state.clone(),
            self.principal.clone(),
            outbox,
            start,
        ));
        self.subs.insert(
            id,
            Active {
                generation: self.generation,
                task,
            },
        );
    }

    /// Queues a reply from the control loop; false if the socket accepted
    /// nothing for the idle timeout.
    async fn reply(&self, msg: ByteString) -> bool {
        self.queue(Message::Text(msg)).await
    }

    /// Queues a frame from the control loop, waiting while the socket is
    /// backed up; false if it accepted nothing for the idle timeout.
    async fn queue(&self, msg: Message) -> bool {
        tokio::time::timeout(self.idle_timeout, self.out_tx.send(msg))
            .await
            .is_ok_and(|sent| sent.is_ok())
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
                        self.spawn(id, Box::new((resource, params)));
                        true
                    }
                }
            }
            Op::Unsubscribe { id } => {
                let prefix = sub_prefix(&id);
                match self.subs.remove(&id) {
                    Some(active) => {
                        // Whatever it queued is ahead of the reply; nothing
                        // of it can follow.
                        stop(active.task).await;
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

/// The socket's one writer: outbox → socket, until a Close or the peer is
/// gone.
async fn write(mut raw: WsWriter, mut out_rx: mpsc::Receiver<Message>) {
    if raw.open().await.is_err() {
        return;
    }
    while let Some(msg) = out_rx.recv().await {
        let sent = match msg {
            Message::Close(reason) => {
                let (code, text) = reason.map_or((1000, String::new()), |r| {
                    (u16::from(r.code), r.description.unwrap_or_default())
                });
                raw.close(code, &text).await;
                return;
            }
            Message::Text(text) => raw.send(Opcode::Text, text.as_bytes()).await,
            Message::Ping(payload) => raw.send(Opcode::Ping, &payload).await,
            Message::Pong(payload) => raw.send(Opcode::Pong, &payload).await,
            // Never queued.
            Message::Binary(_) | Message::Continuation(_) | Message::Nop => Ok(()),
        };
        if sent.is_err() {
            return;
        }
    }
    raw.close(1000, "").await;
}

/// Stops a subscription's task: nothing it sends can follow what is
/// queued next.
async fn stop(task: JoinHandle<()>) {
    task.abort();
    let _ = task.await;
}
