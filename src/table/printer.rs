//! Printers: for one resource, its column definitions and how an object
//! becomes a row.
//!
//! Three kinds, as in kube-apiserver:
//! - built-in printers, ported from kubernetes
//!   `pkg/printers/internalversion/printers.go` (`AddHandlers` and the
//!   `print*` functions, v1.36) for the resources kubefan knows;
//! - CRD printers from `additionalPrinterColumns` (see [`super::crd`]);
//! - the default convertor for everything else: `Name` and `Created At`,
//!   as apiserver `pkg/registry/rest/table.go` (`defaultTableConvertor`)
//!   prints any resource without a printer (`kubectl get roles` shows
//!   `NAME  CREATED AT`).
//!
//! [`Printers`] keeps one printer per resource, CRD printers recompiled
//! only when their CRD changes.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use bytes::Bytes;
use serde_json::Value;
use time::UtcOffset;

use super::cell::Cell;
use super::column::{Column, NAME, columns_json};
use super::crd::{self, CustomColumns};
use super::format::Clock;
use super::read::{str_at, time_at};
use super::{apps, batch, cluster, core, events, network, pod, swagger};

/// A row's `Completed` condition (`metav1.RowCompleted`, status `True`):
/// kubectl greys such rows out. Only pods set it upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completed {
    pub reason: &'static str,
    pub message: &'static str,
}

/// What a printer makes of one object: one cell per column, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Printed {
    pub cells: Vec<Cell>,
    pub completed: Option<Completed>,
}

impl Printed {
    pub(super) fn cells(cells: Vec<Cell>) -> Printed {
        Printed {
            cells,
            completed: None,
        }
    }
}

type PrintFn = fn(&Value, &Clock) -> Printed;

/// A built-in printer: a resource, its columns, its row function.
pub(super) struct Builtin {
    pub group: &'static str,
    pub resource: &'static str,
    pub columns: &'static [Column],
    pub print: PrintFn,
}

/// Every built-in printer kubefan ports.
pub(super) const BUILTINS: &[Builtin] = &[
    Builtin {
        group: "",
        resource: "pods",
        columns: pod::COLUMNS,
        print: pod::print,
    },
    Builtin {
        group: "",
        resource: "nodes",
        columns: core::NODE_COLUMNS,
        print: core::print_node,
    },
    Builtin {
        group: "",
        resource: "namespaces",
        columns: core::NAMESPACE_COLUMNS,
        print: core::print_namespace,
    },
    Builtin {
        group: "",
        resource: "services",
        columns: core::SERVICE_COLUMNS,
        print: core::print_service,
    },
    Builtin {
        group: "",
        resource: "endpoints",
        columns: core::ENDPOINTS_COLUMNS,
        print: core::print_endpoints,
    },
    Builtin {
        group: "",
        resource: "configmaps",
        columns: core::CONFIG_MAP_COLUMNS,
        print: core::print_config_map,
    },
    Builtin {
        group: "",
        resource: "secrets",
        columns: core::SECRET_COLUMNS,
        print: core::print_secret,
    },
    Builtin {
        group: "",
        resource: "serviceaccounts",
        columns: core::SERVICE_ACCOUNT_COLUMNS,
        print: core::print_service_account,
    },
    Builtin {
        group: "",
        resource: "persistentvolumes",
        columns: core::PERSISTENT_VOLUME_COLUMNS,
        print: core::print_persistent_volume,
    },
    Builtin {
        group: "",
        resource: "persistentvolumeclaims",
        columns: core::PERSISTENT_VOLUME_CLAIM_COLUMNS,
        print: core::print_persistent_volume_claim,
    },
    Builtin {
        group: "",
        resource: "events",
        columns: events::COLUMNS,
        print: events::print_core,
    },
    Builtin {
        group: "events.k8s.io",
        resource: "events",
        columns: events::COLUMNS,
        print: events::print_events_k8s_io,
    },
    Builtin {
        group: "apps",
        resource: "deployments",
        columns: apps::DEPLOYMENT_COLUMNS,
        print: apps::print_deployment,
    },
    Builtin {
        group: "apps",
        resource: "replicasets",
        columns: apps::REPLICA_SET_COLUMNS,
        print: apps::print_replica_set,
    },
    Builtin {
        group: "apps",
        resource: "statefulsets",
        columns: apps::STATEFUL_SET_COLUMNS,
        print: apps::print_stateful_set,
    },
    Builtin {
        group: "apps",
        resource: "daemonsets",
        columns: apps::DAEMON_SET_COLUMNS,
        print: apps::print_daemon_set,
    },
    Builtin {
        group: "batch",
        resource: "jobs",
        columns: batch::JOB_COLUMNS,
        print: batch::print_job,
    },
    Builtin {
        group: "batch",
        resource: "cronjobs",
        columns: batch::CRON_JOB_COLUMNS,
        print: batch::print_cron_job,
    },
    Builtin {
        group: "networking.k8s.io",
        resource: "ingresses",
        columns: network::INGRESS_COLUMNS,
        print: network::print_ingress,
    },
    Builtin {
        group: "discovery.k8s.io",
        resource: "endpointslices",
        columns: network::ENDPOINT_SLICE_COLUMNS,
        print: network::print_endpoint_slice,
    },
    Builtin {
        group: "",
        resource: "replicationcontrollers",
        columns: apps::REPLICATION_CONTROLLER_COLUMNS,
        print: apps::print_replication_controller,
    },
    Builtin {
        group: "policy",
        resource: "poddisruptionbudgets",
        columns: cluster::POD_DISRUPTION_BUDGET_COLUMNS,
        print: cluster::print_pod_disruption_budget,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        resource: "rolebindings",
        columns: cluster::ROLE_BINDING_COLUMNS,
        print: cluster::print_binding,
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        resource: "clusterrolebindings",
        columns: cluster::CLUSTER_ROLE_BINDING_COLUMNS,
        print: cluster::print_binding,
    },
    Builtin {
        group: "storage.k8s.io",
        resource: "storageclasses",
        columns: cluster::STORAGE_CLASS_COLUMNS,
        print: cluster::print_storage_class,
    },
    Builtin {
        group: "scheduling.k8s.io",
        resource: "priorityclasses",
        columns: cluster::PRIORITY_CLASS_COLUMNS,
        print: cluster::print_priority_class,
    },
    Builtin {
        group: "networking.k8s.io",
        resource: "ingressclasses",
        columns: cluster::INGRESS_CLASS_COLUMNS,
        print: cluster::print_ingress_class,
    },
    Builtin {
        group: "networking.k8s.io",
        resource: "networkpolicies",
        columns: cluster::NETWORK_POLICY_COLUMNS,
        print: cluster::print_network_policy,
    },
    Builtin {
        group: "coordination.k8s.io",
        resource: "leases",
        columns: cluster::LEASE_COLUMNS,
        print: cluster::print_lease,
    },
];

/// The default convertor's columns (apiserver `pkg/registry/rest/table.go`).
pub(super) const DEFAULT_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Created At",
        "date",
        swagger::OBJECT_META_CREATION_TIMESTAMP,
    ),
];

/// `defaultTableConvertor`: the name, and the creation time as
/// `Time.UTC().Format(time.RFC3339)` (Go's zero time when unset).
fn print_default(obj: &Value, _clock: &Clock) -> Printed {
    let created = match time_at(obj, &["metadata", "creationTimestamp"]) {
        None => "0001-01-01T00:00:00Z".to_string(),
        Some(t) => {
            let t = t.to_offset(UtcOffset::UTC);
            format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second()
            )
        }
    };
    Printed::cells(vec![
        Cell::from(str_at(obj, &["metadata", "name"])),
        Cell::Str(created),
    ])
}

#[derive(Clone)]
enum Rows {
    Builtin(PrintFn),
    Custom(Arc<CustomColumns>),
}

/// How one resource prints: its columns and its rows. Cheap to clone.
#[derive(Clone)]
pub struct Printer {
    /// Names what decides the rows: equal ids print equal rows.
    id: Arc<str>,
    columns: Arc<[Column]>,
    /// `columnDefinitions`, encoded once.
    columns_json: Bytes,
    rows: Rows,
}

impl std::fmt::Debug for Printer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Printer")
            .field(
                "columns",
                &self.columns.iter().map(|c| &c.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Printer {
    fn new(id: String, columns: Arc<[Column]>, rows: Rows) -> Printer {
        let columns_json = Bytes::from(columns_json(&columns));
        Printer {
            id: id.into(),
            columns,
            columns_json,
            rows,
        }
    }

    /// The built-in printer of `resource` (plural) in `group` (`""` for
    /// the core group), if kubefan ports one.
    pub fn builtin(group: &str, resource: &str) -> Option<Printer> {
        // Built once: their column definitions are encoded a single time.
        static PRINTERS: LazyLock<Vec<Printer>> = LazyLock::new(|| {
            BUILTINS
                .iter()
                .map(|b| {
                    Printer::new(
                        format!("builtin:{}.{}", b.resource, b.group),
                        b.columns.into(),
                        Rows::Builtin(b.print),
                    )
                })
                .collect()
        });
        BUILTINS
            .iter()
            .position(|b| b.group == group && b.resource == resource)
            .map(|i| PRINTERS[i].clone())
    }

    /// The default convertor: `Name`, `Created At`.
    pub fn default_columns() -> Printer {
        static DEFAULT: LazyLock<Printer> = LazyLock::new(|| {
            Printer::new(
                "default".to_string(),
                DEFAULT_COLUMNS.into(),
                Rows::Builtin(print_default),
            )
        });
        DEFAULT.clone()
    }

    /// The printer a CRD's `additionalPrinterColumns` define for `version`
    /// (`Age` alone when it defines none); `None` if the CRD does not serve
    /// that version. A column whose JSONPath does not parse stays, with
    /// empty cells, and is logged once here.
    pub fn for_crd(crd: &Value, version: &str) -> Option<Printer> {
        let custom = CustomColumns::from_crd(crd, version)?;
        Some(Printer::new(
            format!(
                "crd:{}@{}/{version}",
                str_at(crd, &["metadata", "name"]),
                str_at(crd, &["metadata", "resourceVersion"])
            ),
            custom.columns().into(),
            Rows::Custom(Arc::new(custom)),
        ))
    }

    /// What decides this printer's rows: `builtin:pods.`, `default`, or
    /// `crd:<name>@<resourceVersion>/<version>`. Views whose printers have
    /// equal ids (and equal version and `includeObject`) share rows.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// `columnDefinitions` as JSON.
    pub fn columns_json(&self) -> &Bytes {
        &self.columns_json
    }

    /// The cells of `object`'s row, printed at `clock`.
    pub fn print(&self, object: &Value, clock: &Clock) -> Printed {
        match &self.rows {
            Rows::Builtin(print) => print(object, clock),
            Rows::Custom(custom) => custom.print(object, clock),
        }
    }
}

/// One compiled CRD: its resourceVersion, and a printer per served version.
struct CrdPrinters {
    resource_version: String,
    versions: HashMap<String, Printer>,
}

impl CrdPrinters {
    /// `crd`'s printers: `held` (what was compiled before) if its
    /// resourceVersion is the same, compiled afresh otherwise.
    fn compile(crd: &Value, held: Option<CrdPrinters>) -> CrdPrinters {
        let rv = str_at(crd, &["metadata", "resourceVersion"]);
        if let Some(held) = held.filter(|c| !rv.is_empty() && c.resource_version == rv) {
            return held;
        }
        CrdPrinters {
            resource_version: rv.to_string(),
            versions: crd::served_versions(crd)
                .filter_map(|v| Printer::for_crd(crd, v).map(|p| (v.to_string(), p)))
                .collect(),
        }
    }
}

/// The printer of every resource: built-in, from CRDs, or the default.
///
/// Feed it the `customresourcedefinitions` informer's objects
/// ([`Printers::apply_crd`], [`Printers::remove_crd`]); a CRD is compiled
/// when its resourceVersion changes, so a bad JSONPath is logged once per
/// CRD change, not per request.
#[derive(Default)]
pub struct Printers {
    /// `(group, plural)` → compiled CRD.
    crds: Mutex<HashMap<(String, String), CrdPrinters>>,
}

impl Printers {
    pub fn new() -> Printers {
        Printers::default()
    }

    /// Adds or updates a CRD (a `CustomResourceDefinition` as JSON).
    /// Objects that are not CRDs are ignored.
    pub fn apply_crd(&self, crd: &Value) {
        let Some(key) = crd::names(crd) else {
            return;
        };
        let mut crds = self.crds.lock().unwrap_or_else(PoisonError::into_inner);
        let kept = crds.remove(&key);
        crds.insert(key, CrdPrinters::compile(crd, kept));
    }

    /// Replaces every CRD with `crds`, a fresh list: a CRD not in it was
    /// deleted, and its resource prints with the default columns again.
    /// CRDs whose resourceVersion did not change keep their printers.
    pub fn replace_crds<'a>(&self, crds: impl IntoIterator<Item = &'a Value>) {
        let mut held = self.crds.lock().unwrap_or_else(PoisonError::into_inner);
        let mut old = std::mem::take(&mut *held);
        for crd in crds {
            let Some(key) = crd::names(crd) else {
                continue;
            };
            let kept = old.remove(&key);
            held.insert(key, CrdPrinters::compile(crd, kept));
        }
    }

    /// Forgets a deleted CRD.
    pub fn remove_crd(&self, crd: &Value) {
        if let Some(key) = crd::names(crd) {
            self.crds
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&key);
        }
    }

    /// The printer of `resource` in `group`/`version`: built-in, else the
    /// CRD's, else the default convertor.
    pub fn printer(&self, group: &str, version: &str, resource: &str) -> Printer {
        if let Some(p) = Printer::builtin(group, resource) {
            return p;
        }
        let crds = self.crds.lock().unwrap_or_else(PoisonError::into_inner);
        crds.get(&(group.to_string(), resource.to_string()))
            .and_then(|c| c.versions.get(version).cloned())
            .unwrap_or_else(Printer::default_columns)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use serde_json::json;

    use super::*;

    #[test]
    fn default_convertor_prints_name_and_creation_time() {
        let p = Printer::default_columns();
        let names: Vec<&str> = p.columns().iter().map(|c| &*c.name).collect();
        assert_eq!(names, ["Name", "Created At"]);
        assert_eq!(p.columns()[1].kind, "date");
        let clock = Clock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000));
        let role = json!({"metadata": {"name": "r", "creationTimestamp": "2024-05-06T07:08:09Z"}});
        assert_eq!(
            p.print(&role, &clock).cells,
            [Cell::from("r"), Cell::from("2024-05-06T07:08:09Z")]
        );
        let bare = json!({"metadata": {"name": "r"}});
        assert_eq!(
            p.print(&bare, &clock).cells[1],
            Cell::from("0001-01-01T00:00:00Z")
        );
    }

    #[test]
    fn printers_fall_back_from_builtin_to_crd_to_default() {
        let printers = Printers::new();
        let names = |p: &Printer| {
            p.columns()
                .iter()
                .map(|c| c.name.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&printers.printer("", "v1", "pods"))[2], "Status");
        assert_eq!(
            names(&printers.printer("example.com", "v1", "widgets")),
            ["Name", "Created At"]
        );
        let crd = json!({
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com", "resourceVersion": "1"},
            "spec": {"group": "example.com", "names": {"plural": "widgets"},
                "versions": [{"name": "v1", "served": true, "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]}]}
        });
        printers.apply_crd(&crd);
        assert_eq!(
            names(&printers.printer("example.com", "v1", "widgets")),
            ["Name", "Size"]
        );
        assert_eq!(
            names(&printers.printer("example.com", "v2", "widgets")),
            ["Name", "Created At"]
        );
        printers.remove_crd(&crd);
        assert_eq!(
            names(&printers.printer("example.com", "v1", "widgets")),
            ["Name", "Created At"]
        );
    }

    #[test]
    fn a_replaced_set_forgets_crds_it_lacks_and_keeps_the_rest() {
        let printers = Printers::new();
        let crd = |plural: &str, rv: &str, column: &str| {
            json!({
                "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{plural}.example.com"), "resourceVersion": rv},
                "spec": {"group": "example.com", "names": {"plural": plural},
                    "versions": [{"name": "v1", "served": true, "additionalPrinterColumns": [
                        {"name": column, "type": "integer", "jsonPath": ".spec.size"}]}]}
            })
        };
        let first = |p: &Printer| p.columns()[1].name.to_string();
        printers.apply_crd(&crd("widgets", "1", "Size"));
        printers.apply_crd(&crd("gadgets", "2", "Gears"));
        printers.replace_crds([&crd("widgets", "3", "Width")]);
        assert_eq!(
            first(&printers.printer("example.com", "v1", "widgets")),
            "Width"
        );
        assert_eq!(
            first(&printers.printer("example.com", "v1", "gadgets")),
            "Created At",
            "a CRD missing from the new set prints with the default columns"
        );
    }
}
