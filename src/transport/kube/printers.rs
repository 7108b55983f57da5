//! What prints a resource's table rows on the Kubernetes face: a built-in
//! printer (`crate::table`), a CustomResourceDefinition's
//! `additionalPrinterColumns`, or the default `Name`/`Created At`.
//!
//! CRD printers are read from the cluster's `customresourcedefinitions`
//! through one internal informer (one upstream watch, however many
//! clients ask for tables), started by the first table request for a
//! resource with no built-in printer, and kept current from its events. A
//! kubefan that may not read CRDs logs it and prints such resources with
//! the default columns, as kube-apiserver does for a CRD without printer
//! columns.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use crate::hub::{EventType, Item, Subscribe, Subscription};
use crate::table::{Printer, Printers};
use crate::transport::state::AppState;

/// The CRD resource, as kubefan names resources.
const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";
/// The longest a table request waits for the CRDs' first list.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(5);

pub struct KubePrinters {
    printers: Printers,
    started: AtomicBool,
    /// True once the CRDs were listed (or could not be).
    synced: watch::Sender<bool>,
}

impl Default for KubePrinters {
    fn default() -> KubePrinters {
        KubePrinters {
            printers: Printers::new(),
            started: AtomicBool::new(false),
            synced: watch::Sender::new(false),
        }
    }
}

impl KubePrinters {
    /// The printer of `plural` in `group`/`version`.
    pub async fn printer(
        self: &Arc<Self>,
        state: &AppState,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Printer {
        if let Some(printer) = Printer::builtin(group, plural) {
            return printer;
        }
        if !self.started.swap(true, Ordering::AcqRel) {
            let feed = FeedState {
                informers: state.informers.clone(),
                subscriptions: state.subscriptions.clone(),
            };
            tokio::spawn(self.clone().feed(feed));
        }
        let mut synced = self.synced.subscribe();
        let _ = tokio::time::timeout(FIRST_LIST_WAIT, synced.wait_for(|s| *s)).await;
        self.printers.printer(group, version, plural)
    }

    /// Applies the CRDs' list and changes until shutdown, starting again
    /// (with a growing pause) when the informer cannot be read.
    async fn feed(self: Arc<Self>, state: FeedState) {
        let mut pause = Duration::from_secs(1);
        loop {
            if state.subscriptions.lifecycle.is_shutting_down() {
                return;
            }
            match self.follow(&state).await {
                Ok(()) => pause = Duration::from_secs(1),
                Err(err) => {
                    tracing::warn!(error = %err, "cannot read CustomResourceDefinitions for table columns; custom resources print Name and Created At (grant kubefan get, list, watch on them)");
                    // Nobody waits for a list that is not coming.
                    self.synced.send_replace(true);
                }
            }
            tokio::select! {
                _ = state.subscriptions.lifecycle.shutting_down() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(Duration::from_secs(300));
        }
    }

    async fn follow(&self, state: &FeedState) -> Result<(), String> {
        let hub = state
            .informers
            .internal_hub(CRDS)
            .await
            .map_err(|e| e.to_string())?;
        let mut sub = Subscription::start(hub, Subscribe::internal(), &state.subscriptions)
            .await
            .map_err(|e| e.to_string())?;
        while let Some(item) = sub.next().await {
            match item {
                Item::Snapshot(frames) => {
                    for object in frames.iter() {
                        if let Ok(crd) = serde_json::from_slice::<Value>(object) {
                            self.printers.apply_crd(&crd);
                        }
                    }
                }
                Item::SnapshotEnd { .. } => {
                    self.synced.send_replace(true);
                }
                Item::Events(events) => {
                    for event in &events {
                        let Ok(crd) = serde_json::from_slice::<Value>(&event.frame().object())
                        else {
                            continue;
                        };
                        if event.kind() == EventType::Deleted {
                            self.printers.remove_crd(&crd);
                        } else {
                            self.printers.apply_crd(&crd);
                        }
                    }
                }
                // The fresh snapshot that follows is applied over what is
                // known (a CRD deleted meanwhile keeps its printer, which
                // then prints nothing).
                Item::Reset(_) | Item::Progress { .. } | Item::KeepAlive => {}
                Item::Closed(reason) => return Err(reason),
                Item::Shutdown | Item::Denied(_) => return Ok(()),
            }
        }
        Ok(())
    }
}

/// What the feed needs of the app.
struct FeedState {
    informers: Arc<crate::upstream::Informers>,
    subscriptions: crate::hub::SubscriptionContext,
}
