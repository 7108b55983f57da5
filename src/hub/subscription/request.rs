//! What a subscription is started with ([`Subscribe`], the
//! [`SubscriptionContext`] every one shares) and why it may be refused.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Denial;
use crate::auth::lease::Lease;
use crate::hub::ViewSpec;
use crate::hub::scope::{Position, Scoping};
use crate::lifecycle::Lifecycle;
use crate::metrics::{Metrics, Transport};

/// What a subscriber asks for.
#[derive(Debug, Clone)]
pub struct Subscribe {
    /// The view; with `access`, its namespaces are replaced by those the
    /// scope shows.
    pub spec: ViewSpec,
    /// A position the client has seen; `None` asks for a snapshot.
    pub resume: Option<Position>,
    pub transport: Transport,
    /// When the subscriber's credentials expire: the subscription ends
    /// then with [`super::Item::Denied`], unless `lease` has moved by then.
    pub expires: Option<Instant>,
    /// A signed-in session's lease, which its refreshes move.
    pub lease: Option<Arc<Lease>>,
    /// Where the namespaces it may see come from, when they can change or
    /// narrow what it asked for.
    pub access: Option<Scoping>,
}

impl Subscribe {
    /// kubefan reading a resource for itself (RBAC objects, CRDs): every
    /// object, from a snapshot, never expiring.
    pub fn internal() -> Subscribe {
        Subscribe {
            spec: ViewSpec::default(),
            resume: None,
            transport: Transport::Internal,
            expires: None,
            lease: None,
            access: None,
        }
    }
}

/// What every subscription needs of the gateway around it; one, cloned.
#[derive(Clone)]
pub struct SubscriptionContext {
    /// How long a new subscriber waits for a resource's first list.
    pub sync_timeout: Duration,
    /// Keep-alive ticks and shutdown.
    pub lifecycle: Arc<Lifecycle>,
    pub metrics: Arc<Metrics>,
}

#[derive(Debug, thiserror::Error)]
pub enum SubscriptionError {
    #[error("resource {0} is not synced yet; retry shortly")]
    NotSynced(String),
    #[error("resource {0} is no longer served: {1}")]
    Closed(String, String),
    /// The scope shows nothing (the request named no namespace it may see).
    #[error("{}", .0.message)]
    Denied(Denial),
}
