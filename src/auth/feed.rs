//! The cluster's RBAC objects, fed into `auth::rbac` from kubefan's own
//! informers (one upstream watch per kind, shared with any client that
//! streams them): each kind is read as an internal subscription, so the
//! hub's relists, resets and lapping keep the index exactly in step.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::Auth;
use super::rbac::{GROUP, Kind};
use crate::hub::{EventType, Item, Subscribe, Subscription, SubscriptionContext};
use crate::upstream::Informers;

/// The canonical names of the four RBAC resources.
pub fn resources() -> Vec<String> {
    Kind::ALL
        .iter()
        .map(|k| format!("{}.{GROUP}", k.plural()))
        .collect()
}

/// Feeds every kind until shutdown.
pub fn spawn(auth: Arc<Auth>, informers: Arc<Informers>, cx: SubscriptionContext) {
    for kind in Kind::ALL {
        let (auth, informers, cx) = (auth.clone(), informers.clone(), cx.clone());
        tokio::spawn(async move { feed(kind, &auth, &informers, &cx).await });
    }
}

async fn feed(kind: Kind, auth: &Auth, informers: &Informers, cx: &SubscriptionContext) {
    let name = format!("{}.{GROUP}", kind.plural());
    let Some(rbac) = auth.rbac() else { return };
    let mut delay = Duration::from_millis(200);
    loop {
        if cx.lifecycle.is_shutting_down() {
            return;
        }
        let started = match informers.internal_hub(&name).await {
            Ok(hub) => Subscription::start(hub, Subscribe::internal(), cx)
                .await
                .map_err(|e| e.to_string()),
            Err(err) => Err(err.to_string()),
        };
        match started {
            Ok(mut sub) => {
                delay = Duration::from_millis(200);
                let mut snapshot: Vec<Value> = Vec::new();
                while let Some(item) = sub.next().await {
                    match item {
                        Item::Snapshot(frames) => snapshot.extend(
                            frames
                                .iter()
                                .filter_map(|object| serde_json::from_slice(object).ok()),
                        ),
                        Item::SnapshotEnd { .. } => {
                            rbac.replace(kind, snapshot.iter());
                            snapshot.clear();
                            auth.rbac_changes.advance();
                            informers.rbac_changed();
                        }
                        Item::Events(events) => {
                            for event in &events {
                                let Ok(object) =
                                    serde_json::from_slice::<Value>(&event.frame().object())
                                else {
                                    continue;
                                };
                                if event.kind() == EventType::Deleted {
                                    let meta = &object["metadata"];
                                    let ns = meta["namespace"].as_str().unwrap_or("");
                                    let obj_name = meta["name"].as_str().unwrap_or("");
                                    rbac.delete(kind, ns, obj_name);
                                } else {
                                    rbac.apply(kind, &object);
                                }
                            }
                            auth.rbac_changes.advance();
                            informers.rbac_changed();
                        }
                        // A fresh snapshot follows and replaces the index.
                        Item::Reset(_) => snapshot.clear(),
                        Item::Progress { .. } | Item::KeepAlive => {}
                        Item::Closed(_) | Item::Shutdown | Item::Denied(_) => break,
                    }
                }
            }
            Err(err) => {
                tracing::warn!(resource = %name, error = %err, "cannot read RBAC objects for --authorization rbac; retrying (grant kubefan get, list, watch on them, or use --authorization review)");
            }
        }
        tokio::select! {
            _ = cx.lifecycle.shutting_down() => return,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(60));
    }
}
