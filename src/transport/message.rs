//! The messages every streaming transport sends, before framing: what a
//! subscription's items become, and the `Status` objects and BOOKMARKs
//! built per subscriber. SSE, the Kubernetes watch and WebSocket frame
//! these (`transport::stream`), each in its own way; none decides anew what
//! an item means.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::hub::{Delivery, Denial, Item, ResetReason, ResourceMeta};
use crate::status::status_json;

/// One message of a stream.
#[derive(Debug)]
pub enum Message<'a> {
    /// An object of a snapshot, sent as an id-less ADDED.
    Object(&'a Bytes),
    /// A change; it carries its id when it has one.
    Event(&'a Delivery),
    /// A BOOKMARK at `rv`. `initial_end` marks the end of a snapshot (the
    /// annotation `k8s.io/initial-events-end`, as Kubernetes marks the end
    /// of `sendInitialEvents`); otherwise a progress mark.
    Bookmark { rv: u64, initial_end: bool },
    /// Nothing happened for a keep-alive interval.
    KeepAlive,
    /// The client drops its state: a fresh snapshot follows.
    Reset(ResetReason),
    /// The last message: the stream ends after it.
    End(Ending),
}

/// Why a stream ends.
#[derive(Debug)]
pub enum Ending {
    /// The resource is no longer served (its hub closed).
    Closed(String),
    /// kubefan is shutting down.
    Shutdown,
    /// The subscriber may no longer see the stream.
    Denied(Denial),
}

impl Ending {
    /// The `Status` object an ERROR message carries for this ending.
    pub fn status(&self, meta: &ResourceMeta) -> Value {
        match self {
            Ending::Closed(reason) => status_json(
                404,
                "NotFound",
                &format!("{} is no longer served: {reason}", meta.name),
            ),
            Ending::Shutdown => shutdown_status(),
            Ending::Denied(denial) => denial_status(denial),
        }
    }
}

/// The `Status` of the ERROR every stream ends with at shutdown.
pub fn shutdown_status() -> Value {
    status_json(
        503,
        "ServiceUnavailable",
        "kubefan is shutting down; reconnect",
    )
}

/// A denial as a `Status`.
pub fn denial_status(denial: &Denial) -> Value {
    status_json(denial.code, denial.reason, &denial.message)
}

/// Calls `each` with the messages of `item`, in order. Returns how many of
/// them are deliveries (snapshot objects and changes), for
/// `kubefan_events_sent_total`.
pub fn messages_of(item: &Item, mut each: impl FnMut(Message<'_>)) -> u64 {
    match item {
        Item::Snapshot(objects) => {
            objects.iter().for_each(|o| each(Message::Object(o)));
            objects.len() as u64
        }
        Item::Events(events) => {
            events.iter().for_each(|e| each(Message::Event(e)));
            events.len() as u64
        }
        Item::SnapshotEnd { rv } => {
            each(Message::Bookmark {
                rv: *rv,
                initial_end: true,
            });
            0
        }
        Item::Progress { rv } => {
            each(Message::Bookmark {
                rv: *rv,
                initial_end: false,
            });
            0
        }
        Item::KeepAlive => {
            each(Message::KeepAlive);
            0
        }
        Item::Reset(reason) => {
            each(Message::Reset(*reason));
            0
        }
        Item::Closed(reason) => {
            each(Message::End(Ending::Closed(reason.clone())));
            0
        }
        Item::Shutdown => {
            each(Message::End(Ending::Shutdown));
            0
        }
        Item::Denied(denial) => {
            each(Message::End(Ending::Denied(denial.clone())));
            0
        }
    }
}

/// The `object` of a RESET message.
pub fn reset_status(reason: ResetReason) -> Value {
    status_json(
        410,
        reason.as_str(),
        &format!(
            "{}: your position is gone; a fresh snapshot follows and replaces your state",
            reason.as_str()
        ),
    )
}

/// The `object` of a BOOKMARK.
pub fn bookmark_object(meta: &ResourceMeta, rv: u64, initial_end: bool) -> String {
    let annotations = if initial_end {
        r#","annotations":{"k8s.io/initial-events-end":"true"}"#
    } else {
        ""
    };
    format!(
        r#"{{"kind":{},"apiVersion":{},"metadata":{{"resourceVersion":"{rv}"{annotations}}}}}"#,
        json!(meta.kind),
        json!(meta.api_version),
    )
}

/// `{"type":TYPE,"object":OBJECT}`, in the key order Kubernetes uses.
pub fn event_json(kind: &str, object: &str) -> String {
    format!(r#"{{"type":"{kind}","object":{object}}}"#)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_becomes_its_messages() {
        let mut seen = Vec::new();
        let n = messages_of(&Item::SnapshotEnd { rv: 7 }, |m| {
            seen.push(format!("{m:?}"))
        });
        assert_eq!(n, 0);
        assert_eq!(seen, ["Bookmark { rv: 7, initial_end: true }"]);
        seen.clear();
        messages_of(&Item::Denied(Denial::expired()), |m| {
            seen.push(format!("{m:?}"))
        });
        assert!(seen[0].starts_with("End(Denied"), "{seen:?}");
        let meta = ResourceMeta::new("pods", "v1", "Pod");
        assert_eq!(
            bookmark_object(&meta, 5, true),
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"5","annotations":{"k8s.io/initial-events-end":"true"}}}"#
        );
        assert_eq!(Ending::Shutdown.status(&meta)["code"], 503);
        assert_eq!(Ending::Denied(Denial::expired()).status(&meta)["code"], 401);
    }
}
