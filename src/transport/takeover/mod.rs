//! Streams that leave actix: once the middleware and a stream's handler
//! have accepted a request, the handler takes the connection's socket away
//! from actix ([`server::Takeover`]) and kubefan writes the response on it
//! from a small task of its own. actix lets the emptied connection go, so a
//! stream keeps neither actix's read and write buffers nor its connection
//! task (loadtest/RESULTS.md has the numbers).
//!
//! One file per concept: [`server`] (the HTTP server whose connections can
//! be taken: plain, or TLS with ALPN), `socket` (a taken-over connection,
//! plain or TLS), `pump` (one driver for every stream: SSE, a watch, a
//! WebSocket or a `/ws` subscription, on any wire), `http` (a chunked response written by kubefan),
//! `ws_read` and `ws_write` (a WebSocket's two halves), `ration` (what a
//! connection may send that does nothing), `io` (bounded writes and
//! watching for client input), [`h2`] (HTTP/2 connections,
//! which actix never sees), `h2_guard` (its frames that do nothing,
//! rationed) and `h2_stream` (a stream's response on its HTTP/2 stream,
//! with the same write deadline).
//!
//! No stream waits for its client forever: one that cannot write a single
//! byte for the write timeout gives up and closes the connection, and at
//! shutdown every stream still blocked after the grace period is ended
//! (the lifecycle's hard stop).

mod batch;
pub mod h2;
mod h2_guard;
mod h2_stream;
mod http;
mod io;
mod pump;
pub(crate) mod ration;
pub mod server;
mod socket;
mod watchdog;
mod ws_read;
mod ws_write;

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header::HeaderMap;
use actix_web::{HttpMessage, HttpRequest};
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

pub(crate) use batch::{Task, Tick};
pub use http::respond;
pub(crate) use io::WriteDeadline;
pub use io::{LINGER, Linger};
use pump::Pump;
pub(crate) use pump::{Heard, Next, Source, Wire};
pub use ws_read::{Frames, Inbox, InboxError, InboxLimits, Messages, Refusal};
pub use ws_write::{DirectSocket, Opcode, Taken, Upgraded, WsWriter, frame_header, upgrade};

use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;
use crate::status::ApiError;
use crate::tls::PeerCertificates;
use server::Takeover;

/// Where taken-over streams run, and how they are stopped.
pub struct Streams {
    runtime: tokio::runtime::Handle,
    tracker: TaskTracker,
    deadline: WriteDeadline,
    /// Where caught-up streams are written together.
    batches: batch::Batches,
}

impl Streams {
    /// Streams run on the runtime current when this is called. A stream
    /// whose client takes no byte for `write_timeout` is closed (and
    /// counted in `kubefan_limits_hit_total{kind="write_timeout"}`).
    pub fn on_current_runtime(
        write_timeout: Duration,
        lifecycle: Arc<Lifecycle>,
        metrics: Arc<Metrics>,
    ) -> Streams {
        let (runtime, tracker) = (tokio::runtime::Handle::current(), TaskTracker::new());
        Streams {
            batches: batch::Batches::new(runtime.clone(), tracker.clone(), metrics.clone()),
            runtime,
            tracker,
            deadline: WriteDeadline::new(lifecycle, write_timeout, metrics),
        }
    }

    /// Runs `fut` as a stream: on the streams' runtime (the informer's,
    /// whose wake-ups then cross no thread), counted among the streams
    /// [`Streams::stop`] waits for. The handle aborts it, or waits for its
    /// end (an aborted stream is no longer counted once that wait is over).
    pub fn spawn<F: Future<Output = ()> + Send + 'static>(&self, fut: F) -> JoinHandle<()> {
        self.runtime.spawn(self.tracker.track_future(fut))
    }

    /// Runs a stream, `source`'s items on `wire` (`pump`): in a task of
    /// its own on the streams' runtime, parked with its hub's batch writer
    /// while it is caught up.
    pub(crate) fn drive<S, W>(&self, source: S, wire: W)
    where
        S: Source,
        W: Wire<Item = S::Item, End = S::End>,
    {
        let pump = Pump::new(self.batches.clone(), source, wire, self.deadline.clone());
        self.spawn(Task::new(pump));
    }

    /// How many streams' tasks [`Streams::stop`] would wait for now.
    pub fn running(&self) -> usize {
        self.tracker.len()
    }

    /// Waits up to `grace` for the streams to end (they end by themselves
    /// on shutdown, after their ERROR message), then ends the rest.
    pub async fn stop(&self, grace: Duration) {
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            tracing::info!(
                streams = self.tracker.len(),
                "ending streams still writing after the grace period"
            );
            self.deadline.lifecycle.hard_stop();
            self.tracker.wait().await;
        }
    }
}

/// What a stream answers if its connection cannot be taken over: every
/// connection of `crate::server` can be, so this is a bug, not a client's
/// mistake.
pub fn not_taken_over() -> ApiError {
    tracing::error!("a stream's connection could not be taken over from actix");
    ApiError::Status(
        500,
        "InternalError",
        "this connection cannot carry a stream".into(),
    )
}

/// The CORS headers the middleware decided a response gets (set for listed
/// origins; a taken-over response writes them itself).
#[derive(Clone)]
pub struct CorsHeaders(pub HeaderMap);

/// The certificate chain `req`'s TLS client presented, whichever way its
/// connection is served (`server`'s documentation says where each puts
/// it); `None` without one, or over plain HTTP.
pub fn peer_certificates(req: &HttpRequest) -> Option<PeerCertificates> {
    req.conn_data::<PeerCertificates>()
        .cloned()
        .or_else(|| req.extensions().get::<PeerCertificates>().cloned())
}

/// `req`'s connection, taken from actix and out of its reactor (which
/// drops actix's waker for it, and through it actix's whole connection
/// task); `None` if the connection cannot be taken over.
fn socket_of(req: &HttpRequest) -> Option<std::io::Result<socket::Detached>> {
    let front = req.conn_data::<Takeover>()?.take_socket()?;
    Some(front.detach())
}
