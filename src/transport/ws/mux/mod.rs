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

mod control;
mod outbox;
mod sub;
mod writer;

use std::collections::HashMap;
use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

use actix_web::web;
use actix_ws::CloseCode;
use bytes::Bytes;
use bytestring::ByteString;
use tokio::time::Instant;

use super::Ending;
use super::message::{
    CLOSE_UNAUTHORIZED, Id, NULL_PREFIX, Outgoing, close_reason, error_message, message, sub_prefix,
};
use super::ops::{Op, OpError, parse_op};
use crate::auth::Principal;
use crate::metrics::Transport;
use crate::status::status_json;
use crate::transport::message::shutdown_status;
use crate::transport::state::AppState;
use crate::transport::takeover::ration::{Ration, WS_SUBSCRIBES};
use crate::transport::takeover::{Messages, Taken, Task, Upgraded};
use crate::transport::{StreamParams, subscribe};
use control::{Control, Stop};
use outbox::{Frame, Outbox};
use sub::{Starting, Sub};
use writer::{Writer, Wrote};

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
