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
mod splice;
mod sub;
mod writer;

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
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
use super::ops::{At, Op, OpError, parse_op};
use crate::auth::Principal;
use crate::cluster::Cluster;
use crate::hub::scope::Position;
use crate::metrics::Transport;
use crate::status::{ApiError, status_json};
use crate::transport::merged::{self, Asked, ws::MergedWs};
use crate::transport::message::shutdown_status;
use crate::transport::state::AppState;
use crate::transport::takeover::ration::{Ration, WS_SUBSCRIBES};
use crate::transport::takeover::{Messages, Taken, Upgraded};
use crate::transport::{StreamParams, subscribe};
use control::{Control, Stop};
use outbox::{Frame, Outbox};
use sub::{Outboxed, Starting, Subscribing};
use writer::{SocketWriter, Wrote};

/// Time a Close frame gets to be queued behind a stuck socket, and
/// subscriptions to send their last message.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Starts a `/ws` socket's task on the streams' runtime; it opens the
/// connection there.
pub(super) fn spawn(
    state: web::Data<AppState>,
    cluster: (Option<Arc<Cluster>>, bool),
    taken: Box<Taken>,
    principal: Principal,
) {
    let streams = state.streams.clone();
    let task = SocketTask::Opening(Some((state, cluster, taken, principal)));
    streams.spawn(task);
}

/// A `/ws` socket's one task: it opens the connection on the current
/// runtime (the streams'), runs the socket's control loop ([`Control`])
/// until the socket is to end, and ends it.
///
/// One task for all of it, not a control loop and a writer task: a writer
/// task was a second task header and future (576 bytes) per socket. The
/// control loop reads the client only while the outbox has room, so what
/// it queues for a client message (a pong, a reply) stays within the
/// outbox's bound without waiting for room in a handler, which only the
/// writing it would block could make.
///
/// Written by hand, not an `async fn`: that kept its arguments and its
/// awaits' state beside the control loop's for the socket's whole life,
/// 48 bytes more than the control loop's own, enough to put the task in
/// the next larger block (`tokio` rounds a task to 128 bytes).
#[expect(
    clippy::large_enum_variant,
    reason = "the control loop is the task's state for the socket's life; boxing it would add an allocation"
)]
enum SocketTask {
    Opening(Option<Opening>),
    Running(Control),
    /// Boxed: made only when the loop stops.
    Ending(Pin<Box<dyn Future<Output = ()> + Send>>),
    Done,
}

/// What a socket's task opens the connection with: the gateway, the
/// socket's cluster (none at `/ws` on a gateway of several clusters and
/// no default one), the connection, and who opened it.
type Opening = (
    web::Data<AppState>,
    (Option<Arc<Cluster>>, bool),
    Box<Taken>,
    Principal,
);

impl Future for SocketTask {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let task = self.get_mut();
        loop {
            match task {
                SocketTask::Opening(args) => {
                    let Some((state, cluster, taken, principal)) = args.take() else {
                        return Poll::Ready(());
                    };
                    *task = match (*taken).open(Messages::Taken) {
                        Ok(Upgraded { writer, inbox }) => SocketTask::Running(Control::new(
                            Socket::new(state, cluster, principal),
                            SocketWriter::new(writer),
                            inbox,
                        )),
                        Err(err) => {
                            // Logged; the 101 is not sent, and the
                            // connection closes.
                            let _ = super::lost(err);
                            SocketTask::Done
                        }
                    };
                }
                SocketTask::Running(control) => {
                    let stop = ready!(control.poll(cx));
                    if let SocketTask::Running(control) = std::mem::replace(task, SocketTask::Done)
                    {
                        *task = SocketTask::Ending(Box::pin(end(control, stop)));
                    }
                }
                SocketTask::Ending(ending) => {
                    ready!(ending.as_mut().poll(cx));
                    *task = SocketTask::Done;
                }
                SocketTask::Done => return Poll::Ready(()),
            }
        }
    }
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

/// Subscribes `principal` to `resource` in `cluster` as `params` say,
/// unless the gateway is stopping: the subscription framed for a socket,
/// or the `Status` that refused it. Where the socket's principal may not
/// be `cluster`'s (`elsewhere`: the subscription named a cluster, or the
/// socket is across clusters and any of them named it), the principal is
/// that cluster's own (`Auth::principal_in`: a Kubernetes token is
/// reviewed by the cluster it reads, not the one that accepted it first).
fn starting(
    state: web::Data<AppState>,
    (cluster, elsewhere): (Arc<Cluster>, bool),
    principal: Principal,
    resource: String,
    params: StreamParams,
) -> Starting {
    Box::pin(async move {
        let sub = tokio::select! {
            biased;
            _ = state.lifecycle.shutting_down() => Err(shutdown_status()),
            started = async {
                let there = match elsewhere {
                    true => state.auth.principal_in(&principal, cluster.authorizer()).await?,
                    false => principal.clone(),
                };
                subscribe(&state, &cluster, &there, &resource, &params, Transport::WebSocket).await
            } => started.map_err(|e: ApiError| e.status()),
        }?;
        let warnings = sub.hub().warnings();
        Ok((super::framed(sub, principal.name()), warnings))
    })
}

/// Where a subscription streams from.
enum Target {
    /// One cluster, and whether the subscription named it (its messages
    /// then say it).
    One(Arc<Cluster>, bool),
    /// Several, merged; each one's position to resume from.
    Merged((Vec<Arc<Cluster>>, bool), Vec<Option<Position>>),
}

impl Target {
    /// The streams it starts, each with its snapshot: what it spends of
    /// the socket's ration of subscriptions.
    fn streams(&self) -> u32 {
        match self {
            Target::One(..) => 1,
            Target::Merged((chosen, _), _) => u32::try_from(chosen.len()).unwrap_or(u32::MAX),
        }
    }
}

/// A `/ws` socket's subscriptions, as its control loop keeps them.
struct Socket {
    state: web::Data<AppState>,
    /// The cluster the socket was opened on (`/clusters/NAME/ws`): its
    /// subscriptions are that cluster's unless they name theirs. None at
    /// `/ws` on a gateway of several clusters and no default one: each
    /// subscription names its cluster or clusters.
    cluster: Option<Arc<Cluster>>,
    /// Opened across clusters (`/ws` at the root of a gateway of several,
    /// `cluster::Across`): its principal is whichever cluster's accepted
    /// the token, so every subscription, the default cluster's too, is
    /// authorized as its own cluster's principal.
    across: bool,
    /// Its subscriptions are listed in the outbox (`Outbox::holds`).
    outbox: Arc<Outbox>,
    /// Subscriptions it may start now ([`StreamConfig::subscribes_per_minute`]).
    ///
    /// [`StreamConfig::subscribes_per_minute`]: crate::config::StreamConfig::subscribes_per_minute
    subscribes: Ration,
    /// The last subscription's: which of its id's uses it is.
    generation: u64,
    /// Who opened the socket; `/ws` subscriptions are authorized as it.
    principal: Principal,
}

impl Socket {
    fn new(
        state: web::Data<AppState>,
        (cluster, across): (Option<Arc<Cluster>>, bool),
        principal: Principal,
    ) -> Socket {
        Socket {
            cluster,
            across,
            subscribes: Ration::per_minute(state.stream.subscribes_per_minute),
            state,
            outbox: Arc::new(Outbox::new()),
            generation: 0,
            principal,
        }
    }

    /// The most subscriptions it may hold at once.
    fn max_subs(&self) -> usize {
        self.state.stream.max_subscriptions_per_socket.max(1)
    }

    /// Ends every subscription, queues the Close frame behind what is
    /// queued, and writes them.
    async fn finish(self, ending: Ending, mut writer: SocketWriter) {
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
    async fn expire(&mut self, writer: &mut SocketWriter) -> Ending {
        let outbox = self.outbox.clone();
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            while outbox.subscriptions() > 0 {
                tokio::select! {
                    biased;
                    wrote = poll_fn(|cx| writer.poll(&outbox, cx)) => {
                        if !matches!(wrote, Wrote::Frame) {
                            break;
                        }
                    }
                    () = poll_fn(|cx| outbox.poll_ended(cx)) => {}
                }
            }
        })
        .await;
        Some(close_reason(
            CloseCode::Other(CLOSE_UNAUTHORIZED),
            "token expired",
        ))
    }

    /// Starts subscription `id` where `target` says: a stream of its own,
    /// on the streams' runtime, like every other. A subscription that
    /// names its cluster has it in every message, after its `sub`; a
    /// merged one has each message's (`transport::merged::ws`).
    fn spawn(&mut self, id: String, resource: String, params: StreamParams, target: Target) {
        self.generation += 1;
        let wire = |prefix: &[u8]| Outboxed::new(self.outbox.clone(), self.generation, &id, prefix);
        match target {
            Target::One(cluster, named) => {
                let prefix = match cluster.name().filter(|_| named) {
                    Some(name) => {
                        let mut prefix = sub_prefix(&id).to_vec();
                        prefix.extend_from_slice(format!(r#""cluster":"{name}","#).as_bytes());
                        Bytes::from(prefix)
                    }
                    None => sub_prefix(&id),
                };
                let starting = starting(
                    self.state.clone(),
                    (cluster, named || self.across),
                    self.principal.clone(),
                    resource,
                    params,
                );
                let source = Subscribing::new(starting, &prefix);
                self.state.streams.drive(source, wire(&prefix));
            }
            Target::Merged(chosen, resume) => {
                let prefix = sub_prefix(&id);
                let source = MergedWs::start(
                    self.state.clone(),
                    self.principal.clone(),
                    resource,
                    move |resource| Asked {
                        resource,
                        params,
                        chosen,
                        resume,
                    },
                    &prefix,
                );
                self.state.streams.drive(source, wire(&prefix));
            }
        }
    }

    /// Where a subscribe message's subscription streams from, or the
    /// `Status` refusing it.
    fn target(&self, at: At) -> Result<Target, serde_json::Value> {
        match at {
            At::Socket => self.cluster.clone().map(|c| Target::One(c, false)).ok_or_else(|| {
                status_json(
                    400,
                    "BadRequest",
                    "this socket has no cluster of its own (/ws, and no --default-cluster): name one with \"cluster\", several with \"clusters\", or open /clusters/NAME/ws",
                )
            }),
            At::Cluster(name) => self.cluster_named(&name).map(|c| Target::One(c, true)),
            At::Clusters { names, resume } => {
                let chosen = merged::named(&self.state.clusters, &names).map_err(|e| e.status())?;
                let named: Vec<&str> = chosen.0.iter().map(|c| c.name().unwrap_or("")).collect();
                let resume = merged::parse_compound(
                    "resourceVersion",
                    resume.as_deref().unwrap_or(""),
                    &named,
                )
                .map_err(|e| e.status())?;
                Ok(Target::Merged(chosen, resume))
            }
        }
    }

    /// The cluster a subscribe message names (`"cluster"`), or the
    /// `Status` refusing it.
    fn cluster_named(&self, name: &str) -> Result<Arc<Cluster>, serde_json::Value> {
        let clusters = &self.state.clusters;
        if !clusters.named() {
            return Err(status_json(
                400,
                "BadRequest",
                "\"cluster\" needs a gateway serving several clusters (--cluster)",
            ));
        }
        clusters.get(name).cloned().ok_or_else(|| {
            status_json(
                404,
                "NotFound",
                &format!("no cluster {name:?} is served here (GET /clusters lists them)"),
            )
        })
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
                at,
            } => {
                let target = match self.target(at) {
                    Ok(target) => target,
                    Err(status) => {
                        return self.reply(error_message(Some(&sub_prefix(&id)), &status));
                    }
                };
                let refusal = if self.outbox.holds(&id) {
                    Some(status_json(
                        409,
                        "AlreadyExists",
                        &format!("subscription {id:?} is already active on this socket"),
                    ))
                } else if self.outbox.subscriptions() >= self.max_subs() {
                    Some(status_json(
                        429,
                        "TooManyRequests",
                        &format!(
                            "this socket already holds {} subscriptions, the most allowed",
                            self.max_subs()
                        ),
                    ))
                } else if !self.subscribes.spend_many(Instant::now(), target.streams()) {
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
                    None => self.spawn(id, resource, params, target),
                }
            }
            Op::Renew { renewal } => {
                let renewed = match self.state.auth.sessions() {
                    None => Err(status_json(
                        400,
                        "BadRequest",
                        "this gateway has no sign-in sessions to renew (--auth oidc)",
                    )),
                    Some(sessions) => sessions
                        .renew(&renewal)
                        .map_err(|e| status_json(400, "BadRequest", &e.to_string())),
                };
                match renewed {
                    Ok(seconds) => {
                        let json = Bytes::from(format!(
                            r#"{{"type":"RENEWED","expiresInSeconds":{seconds}}}"#
                        ));
                        self.reply(message(Some(NULL_PREFIX), &Outgoing::event(json, Id::None)));
                    }
                    Err(status) => self.reply(error_message(Some(NULL_PREFIX), &status)),
                }
            }
            Op::Unsubscribe { id } => {
                let prefix = sub_prefix(&id);
                // Whatever it queued is ahead of the reply; nothing of it
                // can follow (it ends once woken).
                match self.outbox.remove(&id) {
                    true => {
                        let json = Bytes::from_static(br#"{"type":"UNSUBSCRIBED"}"#);
                        self.reply(message(Some(&prefix), &Outgoing::event(json, Id::None)));
                    }
                    false => {
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
