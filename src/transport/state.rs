//! What every request handler can reach: the gateway's shared parts, built
//! once by `app::App::build`. It sits below the middleware and the
//! transports that read it, so imports point down.

use std::sync::Arc;

use crate::auth::Auth;
use crate::cluster::Clusters;
use crate::config::StreamConfig;
use crate::hub::SubscriptionContext;
use crate::lifecycle::Lifecycle;
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::transport::takeover::Streams;

/// What every request handler can reach.
pub struct AppState {
    /// The clusters served; a request's own is chosen by the middleware
    /// (`crate::cluster::ClusterOf`).
    pub clusters: Arc<Clusters>,
    pub metrics: Arc<Metrics>,
    pub stream: StreamConfig,
    /// Keep-alive ticks (one timer for all subscribers), shutdown and the
    /// hard stop.
    pub lifecycle: Arc<Lifecycle>,
    /// What every subscription is started with.
    pub subscriptions: SubscriptionContext,
    /// Streams that took their connection over (`transport::takeover`).
    pub streams: Arc<Streams>,
    /// Who a request comes from (authorization is each cluster's).
    pub auth: Arc<Auth>,
    pub limits: Arc<Limits>,
    /// Whether the listener serves TLS (cookies are `Secure` then).
    pub tls: bool,
    /// Origins allowed cross-origin (lowercase, no trailing slash).
    pub allowed_origins: Vec<String>,
    /// On a loopback listener serving without authentication, the host
    /// names it answers besides loopback ones (lowercase): `None` where
    /// any `Host` is answered (`--allowed-hosts`).
    pub allowed_hosts: Option<Vec<String>>,
}
