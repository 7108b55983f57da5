//! The cluster's RBAC objects, fed into `auth::rbac`: one internal
//! reflector per kind (`upstream::reflector`), so the hub's relists,
//! resets and lapping keep the index exactly in step, and one upstream
//! watch per kind serves kubefan and any client that streams it.

use std::sync::Arc;

use serde_json::Value;

use super::Authorizer;
use super::rbac::{GROUP, Kind, Rbac};
use crate::hub::SubscriptionContext;
use crate::upstream::Informers;
use crate::upstream::reflector::{Change, Consumer, Reflector};

/// The canonical names of the four RBAC resources.
pub fn resources() -> Vec<String> {
    Kind::ALL
        .iter()
        .map(|k| format!("{}.{GROUP}", k.plural()))
        .collect()
}

/// Feeds every kind until shutdown (under `--authorization rbac`).
pub fn spawn(auth: Arc<Authorizer>, informers: Arc<Informers>, cx: SubscriptionContext) {
    let Some(rbac) = auth.rbac().cloned() else {
        return;
    };
    for kind in Kind::ALL {
        let feed = Feed {
            kind,
            rbac: rbac.clone(),
            auth: auth.clone(),
            informers: informers.clone(),
        };
        Reflector::new(format!("{}.{GROUP}", kind.plural()), feed).spawn(&informers, cx.clone());
    }
}

/// One kind's objects into the index.
struct Feed {
    kind: Kind,
    rbac: Arc<Rbac>,
    auth: Arc<Authorizer>,
    informers: Arc<Informers>,
}

impl Feed {
    /// The index changed: waiters are woken, and what kubefan may read
    /// itself is asked again.
    fn changed(&self) {
        self.auth.rbac_changes.advance();
        self.informers.rbac_changed();
    }
}

impl Consumer for Feed {
    const UNREADABLE: &'static str = "cannot read RBAC objects for --authorization rbac; retrying (grant kubefan get, list, watch on them, or use --authorization review)";

    fn replace(&mut self, objects: Vec<Value>) {
        self.rbac.replace(self.kind, objects.iter());
        self.changed();
    }

    fn apply(&mut self, changes: Vec<Change>) {
        for change in &changes {
            match change {
                Change::Applied(object) => {
                    self.rbac.apply(self.kind, object);
                }
                Change::Deleted(object) => {
                    let meta = &object["metadata"];
                    let namespace = meta["namespace"].as_str().unwrap_or("");
                    let name = meta["name"].as_str().unwrap_or("");
                    self.rbac.delete(self.kind, namespace, name);
                }
            }
        }
        self.changed();
    }
}
