//! kubefan following a resource for itself (the RBAC kinds under
//! `--authorization rbac`, CRDs for table columns): one internal
//! reflector, modelled on kube-runtime's `reflector` + `Store`.
//!
//! A [`Reflector`] reads its resource as an internal subscription of the
//! resource's hub ([`Informers::internal_hub`]: the one upstream watch
//! serves kubefan and its clients alike) and hands its [`Consumer`] a
//! clean sequence of two things:
//! - [`Consumer::replace`]: the whole resource as it is now, after the
//!   first list, after any RESET (a lapped cursor) and after every new
//!   subscription. What the consumer held and this lacks was deleted
//!   meanwhile.
//! - [`Consumer::apply`]: changes, in order, between two of those.
//!
//! # The RESET rule
//! Snapshot items are gathered until the snapshot's end and only then
//! handed over, whole; a RESET drops what was gathered. A consumer never
//! sees part of a snapshot, nor a snapshot laid over an older state.
//!
//! # Backoff
//! When the resource cannot be followed (kubefan may not read it,
//! discovery fails, its first list does not come within the sync timeout,
//! its hub is closed), the reflector logs why with its consumer's advice
//! ([`Consumer::UNREADABLE`]), tells the consumer ([`Consumer::failed`])
//! and tries again after the informers' own backoff: exponential with
//! jitter from `InformerConfig::backoff_min` to `backoff_max`, started
//! again once a snapshot arrives. A reflector fails only when the
//! informer beneath it does, so retrying faster finds nothing new, and
//! one setting (which tests shrink) paces both.
//!
//! # Tasks
//! A reflector runs on the informers' `TaskTracker`, so
//! [`Informers::stopped`] (the last step of `App::stop`) waits for it; it
//! ends at shutdown whatever it is waiting on.

use std::sync::Arc;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use serde_json::Value;

use super::{InformerConfig, Informers};
use crate::hub::{Delivery, EventType, Item, Subscribe, Subscription, SubscriptionContext};

/// What kubefan keeps of a resource it follows for itself.
pub trait Consumer: Send + 'static {
    /// What it means that the resource cannot be read, and what to grant:
    /// logged with the error at each failed attempt.
    const UNREADABLE: &'static str;

    /// Replace everything held with `objects`, the whole resource now.
    fn replace(&mut self, objects: Vec<Value>);

    /// Apply `changes`, in order.
    fn apply(&mut self, changes: Vec<Change>);

    /// The resource could not be followed (logged); the reflector tries
    /// again after its backoff. What was held is kept.
    fn failed(&mut self) {}
}

/// One change to a followed resource.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Added or modified: the object as it is now.
    Applied(Value),
    /// Deleted: the object as it was last.
    Deleted(Value),
}

/// Follows one resource for kubefan itself; see the module.
pub struct Reflector<C> {
    resource: String,
    consumer: C,
}

/// Why [`Reflector::follow`] returned.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    Shutdown,
    /// The subscription ended: its hub was closed (`reason`). `synced`:
    /// it delivered a snapshot first.
    Over {
        synced: bool,
        reason: Option<String>,
    },
}

impl<C: Consumer> Reflector<C> {
    /// `resource` as kubefan names resources (`roles.rbac.authorization.k8s.io`).
    pub fn new(resource: impl Into<String>, consumer: C) -> Reflector<C> {
        Reflector {
            resource: resource.into(),
            consumer,
        }
    }

    /// Runs until shutdown on the informers' task tracker.
    pub fn spawn(self, informers: &Arc<Informers>, cx: SubscriptionContext) {
        informers.spawn(self.run(informers.clone(), cx));
    }

    async fn run(mut self, informers: Arc<Informers>, cx: SubscriptionContext) {
        let cfg = informers.cfg.informer;
        let mut backoff = new_backoff(&cfg);
        loop {
            if cx.lifecycle.is_shutting_down() {
                return;
            }
            let started = tokio::select! {
                _ = cx.lifecycle.shutting_down() => return,
                started = subscribe(&informers, &self.resource, &cx) => started,
            };
            let failure = match started {
                Err(err) => Some(err),
                Ok(mut sub) => match self.follow(&mut sub).await {
                    Ended::Shutdown => return,
                    Ended::Over { synced, reason } => {
                        if synced {
                            backoff = new_backoff(&cfg);
                        }
                        reason
                    }
                },
            };
            let delay = backoff.next().unwrap_or(cfg.backoff_max);
            if let Some(error) = failure {
                tracing::warn!(resource = %self.resource, %error, retry_in = ?delay, "{}", C::UNREADABLE);
                self.consumer.failed();
            }
            tokio::select! {
                _ = cx.lifecycle.shutting_down() => return,
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Hands `sub`'s items to the consumer until it ends: one
    /// subscription's worth of [`Reflector::spawn`]'s loop.
    pub(crate) async fn follow(&mut self, sub: &mut Subscription) -> Ended {
        let mut synced = false;
        let mut snapshot: Vec<Value> = Vec::new();
        while let Some(item) = sub.next().await {
            match item {
                Item::Snapshot(frames) => snapshot.extend(
                    frames
                        .iter()
                        .filter_map(|object| serde_json::from_slice(object).ok()),
                ),
                Item::SnapshotEnd { .. } => {
                    self.consumer.replace(std::mem::take(&mut snapshot));
                    synced = true;
                }
                Item::Events(events) => {
                    let changes: Vec<Change> = events.iter().filter_map(change).collect();
                    if !changes.is_empty() {
                        self.consumer.apply(changes);
                    }
                }
                Item::Reset(reason) => {
                    tracing::info!(resource = %self.resource, reason = reason.as_str(),
                        "internal subscription reset; its next snapshot replaces what was known");
                    snapshot.clear();
                }
                Item::Progress { .. } | Item::KeepAlive => {}
                Item::Shutdown => return Ended::Shutdown,
                Item::Closed(reason) => {
                    return Ended::Over {
                        synced,
                        reason: Some(reason),
                    };
                }
                // Internal subscriptions neither expire nor follow an
                // access; if one were denied, it is a failure like any.
                Item::Denied(denial) => {
                    return Ended::Over {
                        synced,
                        reason: Some(denial.message),
                    };
                }
            }
        }
        Ended::Over {
            synced,
            reason: None,
        }
    }
}

async fn subscribe(
    informers: &Informers,
    resource: &str,
    cx: &SubscriptionContext,
) -> Result<Subscription, String> {
    let hub = informers
        .internal_hub(resource)
        .await
        .map_err(|e| e.to_string())?;
    Subscription::start(hub, Subscribe::internal(), cx)
        .await
        .map_err(|e| e.to_string())
}

fn change(delivery: &Delivery) -> Option<Change> {
    let object = serde_json::from_slice(&delivery.frame().object()).ok()?;
    Some(match delivery.kind() {
        EventType::Deleted => Change::Deleted(object),
        EventType::Added | EventType::Modified => Change::Applied(object),
    })
}

fn new_backoff(cfg: &InformerConfig) -> ExponentialBackoff {
    ExponentialBuilder::new()
        .with_min_delay(cfg.backoff_min)
        .with_max_delay(cfg.backoff_max)
        .with_jitter()
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use tokio::sync::mpsc;

    use super::*;
    use crate::hub::{Hub, LogLimits, Obj, ResourceMeta};
    use crate::lifecycle::Lifecycle;
    use crate::metrics::Metrics;

    const WAIT: Duration = Duration::from_secs(5);

    /// What a consumer was handed: names replaced with, or changes as
    /// `+name` / `-name`.
    #[derive(Debug, PartialEq)]
    enum Call {
        Replace(Vec<String>),
        Apply(Vec<String>),
    }

    struct Recorder(mpsc::UnboundedSender<Call>);

    fn name(object: &Value) -> String {
        object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    impl Consumer for Recorder {
        const UNREADABLE: &'static str = "cannot read widgets";

        fn replace(&mut self, objects: Vec<Value>) {
            let mut names: Vec<String> = objects.iter().map(name).collect();
            names.sort();
            let _ = self.0.send(Call::Replace(names));
        }

        fn apply(&mut self, changes: Vec<Change>) {
            let changes = changes
                .iter()
                .map(|c| match c {
                    Change::Applied(o) => format!("+{}", name(o)),
                    Change::Deleted(o) => format!("-{}", name(o)),
                })
                .collect();
            let _ = self.0.send(Call::Apply(changes));
        }
    }

    fn widget(name: &str, rv: u64) -> Obj {
        let object = json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": name, "resourceVersion": rv.to_string()}});
        Obj::new(None, name, rv, &serde_json::to_vec(&object).unwrap())
    }

    /// A hub whose log holds one event: two changes at once lap every
    /// cursor still before them.
    fn hub() -> Arc<Hub> {
        let meta = ResourceMeta {
            name: "widgets.example.com".into(),
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
        };
        let limits = LogLimits {
            max_events: 1,
            ..LogLimits::default()
        };
        Hub::new(meta, limits, Arc::new(Metrics::new()))
    }

    fn context() -> SubscriptionContext {
        SubscriptionContext {
            sync_timeout: WAIT,
            lifecycle: Lifecycle::new(),
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// Follows `hub` on a task of its own; calls arrive on the receiver.
    async fn follow(
        hub: &Arc<Hub>,
        cx: &SubscriptionContext,
    ) -> (
        mpsc::UnboundedReceiver<Call>,
        tokio::task::JoinHandle<Ended>,
    ) {
        let (calls_tx, calls_rx) = mpsc::unbounded_channel();
        let mut sub = Subscription::start(hub.clone(), Subscribe::internal(), cx)
            .await
            .unwrap();
        let mut reflector = Reflector::new("widgets.example.com", Recorder(calls_tx));
        let task = tokio::spawn(async move { reflector.follow(&mut sub).await });
        (calls_rx, task)
    }

    async fn next(calls: &mut mpsc::UnboundedReceiver<Call>) -> Call {
        tokio::time::timeout(WAIT, calls.recv())
            .await
            .expect("a call in time")
            .expect("the reflector is running")
    }

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[tokio::test]
    async fn a_reset_replaces_everything_so_objects_deleted_meanwhile_go() {
        let hub = hub();
        hub.relist(vec![widget("a", 1), widget("b", 2)], 2);
        let cx = context();
        let (mut calls, _task) = follow(&hub, &cx).await;
        assert_eq!(next(&mut calls).await, Call::Replace(names(&["a", "b"])));

        hub.apply(EventType::Added, widget("c", 3));
        assert_eq!(next(&mut calls).await, Call::Apply(names(&["+c"])));

        // One relist, two changes, while the reflector's task waits (this
        // runtime has one thread): its cursor is lapped.
        hub.relist(vec![widget("a", 1), widget("c", 3), widget("d", 4)], 5);
        assert_eq!(
            next(&mut calls).await,
            Call::Replace(names(&["a", "c", "d"])),
            "b, deleted while the reflector was lapped, is gone"
        );
        hub.apply(EventType::Deleted, widget("a", 6));
        assert_eq!(next(&mut calls).await, Call::Apply(names(&["-a"])));
    }

    #[tokio::test]
    async fn an_empty_resource_is_an_empty_replace() {
        let hub = hub();
        hub.relist(Vec::new(), 1);
        let cx = context();
        let (mut calls, _task) = follow(&hub, &cx).await;
        assert_eq!(next(&mut calls).await, Call::Replace(Vec::new()));
    }

    #[tokio::test]
    async fn shutdown_and_a_closed_hub_end_the_follow() {
        let hub = hub();
        hub.relist(vec![widget("a", 1)], 1);
        let cx = context();
        let (mut calls, task) = follow(&hub, &cx).await;
        next(&mut calls).await;
        cx.lifecycle.shut_down();
        let ended = tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
        assert_eq!(ended, Ended::Shutdown);

        let hub = self::hub();
        hub.relist(vec![widget("a", 1)], 1);
        let cx = context();
        let (mut calls, task) = follow(&hub, &cx).await;
        next(&mut calls).await;
        hub.close("resource removed upstream");
        let ended = tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
        assert_eq!(
            ended,
            Ended::Over {
                synced: true,
                reason: Some("resource removed upstream".into())
            }
        );
    }
}
