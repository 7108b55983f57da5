//! The labels of kubefan's metrics: each a bounded set of words (never a
//! client or an object name), and the label sets the families use.

use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, EncodeLabelValue, LabelSetEncoder};

/// How a subscriber is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
pub enum Transport {
    Sse,
    WebSocket,
    KubeWatch,
    /// kubefan's own readers (the RBAC objects it evaluates).
    Internal,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ResourceLabel {
    pub(super) resource: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct TransportLabels {
    pub(super) resource: String,
    pub(super) transport: Transport,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct TypeLabels {
    pub(super) resource: String,
    pub(super) r#type: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ReasonLabels {
    pub(super) resource: String,
    pub(super) reason: String,
}

/// A list of a resource, by kind (`streaming`, `paged`, `cached`, `exact`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ListLabels {
    pub(super) resource: String,
    pub(super) kind: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ReasonLabel {
    pub(super) reason: Unparked,
}

/// Why a caught-up stream left its hub's batch writer for a task of its
/// own (`transport::takeover::batch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
pub enum Unparked {
    /// Its socket took only part of a write, or none.
    Write,
    /// All of a write went into its TLS session, but the socket did not
    /// take all of the session's records.
    Flush,
    /// Input on its socket that needs an answer, or a hang-up.
    Input,
    /// Its credentials' deadline came.
    Deadline,
    /// The access it follows moved.
    Access,
    /// A keep-alive tick found it past its idle timeout.
    Idle,
    /// Its cursor fell off the log.
    Lapped,
    /// Shutdown.
    Shutdown,
    /// Its resource is no longer served.
    Closed,
    /// It owed something of its own by the time its writer took it.
    Refused,
}

/// A step of signing in (`signin`): `/login`, the issuer's callback,
/// `/session/refresh`, `/logout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
pub enum SignInStep {
    Login,
    Callback,
    Refresh,
    Logout,
}

/// How a sign-in step ended, from its answer's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
pub enum SignInResult {
    /// Done (a redirect, or the answer asked for).
    Ok,
    /// The request did not add up (a 4xx other than 401: a stale or
    /// forged sign-in, a refused code, sign-in not configured).
    Refused,
    /// The session is over (401): sign in again.
    Ended,
    /// The issuer could not be reached or answered wrongly (5xx).
    Failed,
}

impl SignInResult {
    pub(super) fn of_status(status: u16) -> SignInResult {
        match status {
            401 => SignInResult::Ended,
            400..=499 => SignInResult::Refused,
            500.. => SignInResult::Failed,
            _ => SignInResult::Ok,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct SignInLabels {
    pub(super) step: SignInStep,
    pub(super) result: SignInResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ProtocolLabel {
    pub(super) protocol: Protocol,
}

/// What a client connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
pub enum Protocol {
    /// HTTP/1.x over plain TCP.
    Http1,
    /// HTTP/1.1 over TLS.
    Https1,
    /// HTTP/2 over TLS (ALPN `h2`).
    H2,
    /// A TLS handshake that failed or timed out.
    TlsFailed,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct IssuerLabel {
    pub(super) issuer: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct KindLabel {
    pub(super) kind: String,
}

/// A resource's labels, with its cluster's name (`--cluster`) first.
/// The unnamed cluster of a gateway run without `--cluster` has no
/// `cluster` label at all, so such a gateway exports exactly what it did
/// before there were several.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Clustered<L> {
    pub(super) cluster: Option<Arc<str>>,
    pub(super) labels: L,
}

impl<L: EncodeLabelSet> EncodeLabelSet for Clustered<L> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        if let Some(cluster) = &self.cluster {
            ("cluster", &**cluster).encode(encoder.encode_label())?;
        }
        self.labels.encode(encoder)
    }
}

fn clustered<L>(cluster: &Option<Arc<str>>, labels: L) -> Clustered<L> {
    Clustered {
        cluster: cluster.clone(),
        labels,
    }
}

pub(super) fn res(cluster: &Option<Arc<str>>, resource: &str) -> Clustered<ResourceLabel> {
    clustered(
        cluster,
        ResourceLabel {
            resource: resource.to_string(),
        },
    )
}

pub(super) fn tl(
    cluster: &Option<Arc<str>>,
    resource: &str,
    transport: Transport,
) -> Clustered<TransportLabels> {
    clustered(
        cluster,
        TransportLabels {
            resource: resource.to_string(),
            transport,
        },
    )
}

pub(super) fn ll(
    cluster: &Option<Arc<str>>,
    resource: &str,
    kind: &'static str,
) -> Clustered<ListLabels> {
    clustered(
        cluster,
        ListLabels {
            resource: resource.to_string(),
            kind,
        },
    )
}

pub(super) fn rl(
    cluster: &Option<Arc<str>>,
    resource: &str,
    reason: &str,
) -> Clustered<ReasonLabels> {
    clustered(
        cluster,
        ReasonLabels {
            resource: resource.to_string(),
            reason: reason.to_string(),
        },
    )
}

pub(super) fn tyl(cluster: &Option<Arc<str>>, resource: &str, kind: &str) -> Clustered<TypeLabels> {
    clustered(
        cluster,
        TypeLabels {
            resource: resource.to_string(),
            r#type: kind.to_string(),
        },
    )
}
