//! What prints a resource's table rows on the Kubernetes face: a built-in
//! printer (`crate::table`), a CustomResourceDefinition's
//! `additionalPrinterColumns`, or the default `Name`/`Created At`.
//!
//! CRD printers are read from the cluster's `customresourcedefinitions`
//! through an internal reflector (`upstream::reflector`: one upstream
//! watch, however many clients ask for tables), started by the first
//! table request for a resource with no built-in printer. Its snapshots
//! replace the printer set (a CRD deleted while the feed was reset loses
//! its printer) and its changes update it. A kubefan that may not read
//! CRDs logs it and prints such resources with the default columns, as
//! kube-apiserver does for a CRD without printer columns.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use crate::cluster::Cluster;
use crate::hub::SubscriptionContext;
use crate::table::{Printer, Printers};
use crate::upstream::reflector::{Change, Consumer, Reflector};

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
        cluster: &Cluster,
        subscriptions: &SubscriptionContext,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Printer {
        if let Some(printer) = Printer::builtin(group, plural) {
            return printer;
        }
        if !self.started.swap(true, Ordering::AcqRel) {
            Reflector::new(CRDS, CrdFeed(self.clone()))
                .spawn(cluster.informers(), subscriptions.clone());
        }
        let mut synced = self.synced.subscribe();
        let _ = tokio::time::timeout(FIRST_LIST_WAIT, synced.wait_for(|s| *s)).await;
        self.printers.printer(group, version, plural)
    }
}

/// The CRDs' snapshots and changes into the printers.
struct CrdFeed(Arc<KubePrinters>);

impl Consumer for CrdFeed {
    const UNREADABLE: &'static str = "cannot read CustomResourceDefinitions for table columns; custom resources print Name and Created At (grant kubefan get, list, watch on them)";

    fn replace(&mut self, crds: Vec<Value>) {
        self.0.printers.replace_crds(&crds);
        self.0.synced.send_replace(true);
    }

    fn apply(&mut self, changes: Vec<Change>) {
        for change in &changes {
            match change {
                Change::Applied(crd) => self.0.printers.apply_crd(crd),
                Change::Deleted(crd) => self.0.printers.remove_crd(crd),
            }
        }
    }

    fn failed(&mut self) {
        // Nobody waits for a list that is not coming.
        self.0.synced.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use tokio::sync::mpsc;

    use super::*;
    use crate::hub::{EventType, SubscriptionContext};
    use crate::hub::{Hub, LogLimits, Obj, ResourceMeta, Subscribe, Subscription};
    use crate::lifecycle::Lifecycle;
    use crate::metrics::Metrics;

    const WAIT: Duration = Duration::from_secs(5);

    /// The printers' feed, saying when it was handed something.
    struct Told(CrdFeed, mpsc::UnboundedSender<()>);

    impl Consumer for Told {
        const UNREADABLE: &'static str = CrdFeed::UNREADABLE;

        fn replace(&mut self, crds: Vec<Value>) {
            self.0.replace(crds);
            let _ = self.1.send(());
        }

        fn apply(&mut self, changes: Vec<Change>) {
            self.0.apply(changes);
            let _ = self.1.send(());
        }
    }

    fn crd(plural: &str, rv: u64, columns: Value) -> Obj {
        let name = format!("{plural}.example.com");
        let object = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name, "resourceVersion": rv.to_string()},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": plural, "kind": plural},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "additionalPrinterColumns": columns}]}
        });
        Obj::new(None, &name, rv, &serde_json::to_vec(&object).unwrap())
    }

    fn columns(printers: &KubePrinters, plural: &str) -> Vec<String> {
        let printer = printers.printers.printer("example.com", "v1", plural);
        printer
            .columns()
            .iter()
            .map(|c| c.name.to_string())
            .collect()
    }

    /// The CRDs' hub lapping the printers' subscription (its log holds one
    /// event; a relist appends two at once) stands for any RESET: what
    /// follows it is the whole set, and a CRD not in it has no printer.
    #[tokio::test]
    async fn a_crd_deleted_while_the_feed_was_reset_loses_its_printer() {
        let meta = ResourceMeta {
            name: CRDS.into(),
            api_version: "apiextensions.k8s.io/v1".into(),
            kind: "CustomResourceDefinition".into(),
        };
        let limits = LogLimits {
            max_events: 1,
            ..LogLimits::default()
        };
        let hub = Hub::new(meta, limits, Arc::new(Metrics::new()));
        let gears = json!([{"name": "Gears", "type": "integer", "jsonPath": ".spec.gears"}]);
        let size = json!([{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]);
        hub.relist(
            vec![crd("gadgets", 1, gears), crd("widgets", 2, size.clone())],
            2,
        );
        let cx = SubscriptionContext {
            sync_timeout: WAIT,
            lifecycle: Lifecycle::new(),
            metrics: Arc::new(Metrics::new()),
        };
        let mut sub = Subscription::start(hub.clone(), Subscribe::internal(), &cx)
            .await
            .unwrap();
        let printers = Arc::new(KubePrinters::default());
        let (told_tx, mut told_rx) = mpsc::unbounded_channel();
        let mut reflector = Reflector::new(CRDS, Told(CrdFeed(printers.clone()), told_tx));
        let _task = tokio::spawn(async move { reflector.follow(&mut sub).await });
        let mut told = async || {
            tokio::time::timeout(WAIT, told_rx.recv())
                .await
                .expect("the feed is handed something in time")
                .expect("the feed runs");
        };
        told().await;
        assert_eq!(columns(&printers, "gadgets"), ["Name", "Gears"]);

        // gadgets deleted and widgets changed, seen only as a relist while
        // the feed's task waits (one thread): its cursor is lapped, and
        // a RESET and a fresh snapshot follow.
        hub.relist(vec![crd("widgets", 4, size)], 5);
        told().await;
        assert_eq!(
            columns(&printers, "gadgets"),
            ["Name", "Created At"],
            "a deleted CRD's resource prints with the default columns"
        );
        assert_eq!(columns(&printers, "widgets"), ["Name", "Size"]);

        // Changes after it still apply.
        hub.apply(EventType::Deleted, crd("widgets", 6, json!([])));
        told().await;
        assert_eq!(columns(&printers, "widgets"), ["Name", "Created At"]);
    }
}
