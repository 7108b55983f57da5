//! What a subscription yields: [`Item`]s, changes as this subscriber must
//! see them ([`Delivery`]), why a stream starts over ([`ResetReason`]) or
//! ends ([`Denial`]).

use std::sync::Arc;

use bytes::Bytes;

use super::super::{Event, EventType, Frame};

/// Why a subscriber's state is being replaced by a fresh snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    /// The client asked to resume from a position the log no longer holds
    /// (or one this replica has not reached).
    Expired,
    /// The client's cursor fell off the log: it read too slowly, or the
    /// upstream's resourceVersion went backwards and every cursor was lapped.
    Lapped,
    /// The client asked to resume a stream whose namespaces its access
    /// has changed since (see `hub::scope`).
    AccessChanged,
}

impl ResetReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ResetReason::Expired => "Expired",
            ResetReason::Lapped => "Lapped",
            ResetReason::AccessChanged => "AccessChanged",
        }
    }
}

/// One step of a subscription.
#[derive(Debug)]
pub enum Item {
    /// Drop your state: a snapshot that replaces it follows.
    Reset(ResetReason),
    /// Objects of the current snapshot, as the subscription shows them
    /// (each one JSON value); transports send each as an id-less ADDED
    /// (`encode::added_sse`, `encode::added_line`).
    Snapshot(Vec<Bytes>),
    /// The snapshot is complete and reflects `rv`.
    SnapshotEnd { rv: u64 },
    /// Deltas, in log order, already filtered.
    Events(Vec<Delivery>),
    /// No event for this client, but its position advanced to `rv`.
    Progress { rv: u64 },
    /// Nothing happened for a keep-alive interval.
    KeepAlive,
    /// The server is shutting down; the stream ends after this.
    Shutdown,
    /// The resource's hub was closed (see `Hub::close`); the stream ends
    /// after this. A client may subscribe again.
    Closed(String),
    /// The subscriber may no longer see the stream (its token expired);
    /// the stream ends after this.
    Denied(Denial),
}

/// Why a subscriber may no longer see its stream, as an HTTP status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// 401: the credentials ended; 403: the access did.
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl Denial {
    /// The credentials expired (a JWT's `exp`).
    pub fn expired() -> Denial {
        Denial {
            code: 401,
            reason: "Unauthorized",
            message: "token expired; reconnect with a fresh token (Last-Event-ID resumes)".into(),
        }
    }
}

/// One change as this subscription must see it: usually the hub's shared
/// event; re-typed when the subscription's filter turns it into another
/// kind (an object that starts matching is ADDED, one that stops is
/// DELETED), encoded for this subscriber alone.
#[derive(Debug, Clone)]
pub enum Delivery {
    Shared(Arc<Event>),
    Retyped {
        kind: EventType,
        rv: u64,
        has_id: bool,
        frame: Frame,
    },
}

impl Delivery {
    pub fn frame(&self) -> &Frame {
        match self {
            Delivery::Shared(ev) => &ev.frame,
            Delivery::Retyped { frame, .. } => frame,
        }
    }

    pub fn kind(&self) -> EventType {
        match self {
            Delivery::Shared(ev) => ev.kind,
            Delivery::Retyped { kind, .. } => *kind,
        }
    }

    pub fn rv(&self) -> u64 {
        match self {
            Delivery::Shared(ev) => ev.rv,
            Delivery::Retyped { rv, .. } => *rv,
        }
    }

    pub fn has_id(&self) -> bool {
        match self {
            Delivery::Shared(ev) => ev.has_id,
            Delivery::Retyped { has_id, .. } => *has_id,
        }
    }
}
