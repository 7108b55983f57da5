//! The resources every `Sim` starts with: what each is called, which fields
//! a `fieldSelector` may name and what their values are, and the defaults
//! the API server writes into a new object.
//!
//! Field selectors, from kube-apiserver's own code rather than its
//! documentation where the two disagree:
//! - which labels a kind accepts is its field label conversion function
//!   (`AddFieldLabelConversionFunc` in `pkg/apis/<group>/<version>/conversion.go`);
//!   a kind without one accepts only `metadata.name` and
//!   `metadata.namespace` (`runtime.DefaultMetaV1FieldSelectorConversion`
//!   in k8s.io/apimachinery). The error for any other label follows the
//!   same split (`UnknownField`).
//! - the value of each is the kind's field set
//!   (`ToSelectableFields`/`GetAttrs` in `pkg/registry/<group>/<kind>/strategy.go`):
//!   Go values printed, so an absent integer is "0" and an absent boolean
//!   "false".
//!
//! The list is also at
//! <https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/#list-of-supported-fields>.
//! It names `status.replicas` for ReplicaSets, but apps/v1 registers no
//! conversion for it and the server refuses it
//! (<https://github.com/kubernetes/kubernetes/issues/135136>, KIND v1.34):
//! the simulator refuses it too.
//!
//! Not simulated: the events API's shared storage. `events` (v1) and
//! `events.events.k8s.io` (v1) are stored apart here; in a cluster they are
//! two views of the same objects.

use serde_json::{Value, json};

use super::resource::{NameRule, ResourceDef, SelectableField, UnknownField};

/// A field read at the JSON pointer `path`, else `default`.
fn field(name: &str, path: &str, default: &str) -> SelectableField {
    SelectableField::from_paths(name, &[path], default)
}

/// A kind with its own field label conversion accepting exactly `fields`
/// (each read at its own dotted path unless given by `extra`).
fn converted(mut def: ResourceDef, names: &[&str], extra: Vec<SelectableField>) -> ResourceDef {
    def.selectable_fields = names.iter().map(|n| SelectableField::path(n)).collect();
    def.selectable_fields.extend(extra);
    def.unknown_field = UnknownField::NotSupported;
    def
}

/// A kind without a field label conversion: `metadata.name` and
/// `metadata.namespace` (accepted for cluster-scoped kinds too; their
/// field set has no namespace, so it reads as "").
fn meta_only(mut def: ResourceDef) -> ResourceDef {
    def.selectable_fields = vec![
        SelectableField::path("metadata.name"),
        SelectableField::path("metadata.namespace"),
    ];
    def.unknown_field = UnknownField::NotKnown;
    def
}

/// An RBAC kind (no field label conversion; names are path segments).
fn rbac(plural: &str, kind: &str, namespaced: bool) -> ResourceDef {
    meta_only(ResourceDef::new(
        "rbac.authorization.k8s.io",
        "v1",
        plural,
        kind,
        namespaced,
    ))
    .with_names(NameRule::PathSegment)
}

/// Resources every `Sim` starts with.
pub(crate) fn builtins() -> Vec<ResourceDef> {
    let core = |plural: &str, kind: &str, namespaced: bool| {
        ResourceDef::new("", "v1", plural, kind, namespaced)
    };
    vec![
        // pkg/registry/core/pod/strategy.go ToSelectableFields: spec.hostNetwork
        // defaults to "false", status.podIP is the first of status.podIPs, and
        // status.podIPs is accepted by the conversion but not in the field
        // set, so it always reads "".
        converted(
            core("pods", "Pod", true),
            &[
                "metadata.name",
                "metadata.namespace",
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "status.phase",
                "status.nominatedNodeName",
            ],
            vec![
                field("spec.hostNetwork", "/spec/hostNetwork", "false"),
                SelectableField::from_paths(
                    "status.podIP",
                    &["/status/podIPs/0/ip", "/status/podIP"],
                    "",
                ),
                SelectableField::from_paths("status.podIPs", &[], ""),
            ],
        )
        .with_short_names(&["po"])
        // SetDefaults_PodSpec (pkg/apis/core/v1/defaults.go).
        .with_default("/spec/restartPolicy", json!("Always"))
        .with_default("/spec/schedulerName", json!("default-scheduler")),
        // Nodes do not accept metadata.namespace: their conversion lists
        // only metadata.name and spec.unschedulable.
        converted(
            core("nodes", "Node", false),
            &["metadata.name"],
            vec![field("spec.unschedulable", "/spec/unschedulable", "false")],
        )
        .with_short_names(&["no"]),
        converted(
            core("namespaces", "Namespace", false),
            &["metadata.name", "status.phase"],
            vec![],
        )
        .with_short_names(&["ns"])
        // The namespace strategy's PrepareForCreate.
        .with_default("/status/phase", json!("Active")),
        converted(
            core("services", "Service", true),
            &[
                "metadata.name",
                "metadata.namespace",
                "spec.clusterIP",
                "spec.type",
            ],
            vec![],
        )
        .with_short_names(&["svc"])
        .with_default("/spec/type", json!("ClusterIP")),
        meta_only(core("configmaps", "ConfigMap", true)).with_short_names(&["cm"]),
        converted(
            core("secrets", "Secret", true),
            &["metadata.name", "metadata.namespace", "type"],
            vec![],
        )
        .with_default("/type", json!("Opaque")),
        // pkg/registry/core/event/strategy.go: "source" is source.component,
        // else reportingComponent.
        converted(
            core("events", "Event", true),
            &[
                "metadata.name",
                "metadata.namespace",
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "type",
            ],
            vec![SelectableField::from_paths(
                "source",
                &["/source/component", "/reportingComponent"],
                "",
            )],
        )
        .with_short_names(&["ev"]),
        meta_only(core("endpoints", "Endpoints", true)).with_short_names(&["ep"]),
        meta_only(core("persistentvolumes", "PersistentVolume", false)).with_short_names(&["pv"]),
        meta_only(core(
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
        ))
        .with_short_names(&["pvc"]),
        meta_only(core("serviceaccounts", "ServiceAccount", true)).with_short_names(&["sa"]),
        // pkg/apis/core/v1/conversion.go; the value is
        // pkg/registry/core/replicationcontroller/strategy.go's
        // ControllerToSelectableFields.
        converted(
            core("replicationcontrollers", "ReplicationController", true),
            &["metadata.name", "metadata.namespace"],
            vec![field("status.replicas", "/status/replicas", "0")],
        )
        .with_short_names(&["rc"]),
        meta_only(ResourceDef::new(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            true,
        ))
        .with_short_names(&["deploy"]),
        meta_only(ResourceDef::new(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            true,
        ))
        .with_short_names(&["rs"]),
        meta_only(ResourceDef::new(
            "apps",
            "v1",
            "statefulsets",
            "StatefulSet",
            true,
        ))
        .with_short_names(&["sts"]),
        meta_only(ResourceDef::new(
            "apps",
            "v1",
            "daemonsets",
            "DaemonSet",
            true,
        ))
        .with_short_names(&["ds"]),
        // pkg/apis/batch/v1/conversion.go accepts status.successful, and
        // pkg/registry/batch/job/strategy.go gives it status.succeeded.
        converted(
            ResourceDef::new("batch", "v1", "jobs", "Job", true),
            &["metadata.name", "metadata.namespace"],
            vec![field("status.successful", "/status/succeeded", "0")],
        )
        .with_unknown_field(UnknownField::NotSupportedFor("batchv1.Job".into())),
        meta_only(ResourceDef::new("batch", "v1", "cronjobs", "CronJob", true))
            .with_short_names(&["cj"]),
        meta_only(ResourceDef::new(
            "networking.k8s.io",
            "v1",
            "ingresses",
            "Ingress",
            true,
        ))
        .with_short_names(&["ing"]),
        meta_only(ResourceDef::new(
            "networking.k8s.io",
            "v1",
            "ingressclasses",
            "IngressClass",
            false,
        )),
        meta_only(ResourceDef::new(
            "networking.k8s.io",
            "v1",
            "networkpolicies",
            "NetworkPolicy",
            true,
        ))
        .with_short_names(&["netpol"]),
        meta_only(ResourceDef::new(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
        ))
        .with_short_names(&["pdb"]),
        meta_only(ResourceDef::new(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            "PriorityClass",
            false,
        ))
        .with_short_names(&["pc"]),
        meta_only(ResourceDef::new(
            "storage.k8s.io",
            "v1",
            "storageclasses",
            "StorageClass",
            false,
        ))
        .with_short_names(&["sc"]),
        meta_only(ResourceDef::new(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
        )),
        meta_only(ResourceDef::new(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            true,
        )),
        // pkg/apis/events/v1/conversion.go maps regarding.* and
        // reportingController onto the core field set; "source" reads
        // deprecatedSource.component, else reportingController.
        converted(
            ResourceDef::new("events.k8s.io", "v1", "events", "Event", true),
            &["metadata.name", "metadata.namespace"],
            vec![
                field("regarding.kind", "/regarding/kind", ""),
                field("regarding.namespace", "/regarding/namespace", ""),
                field("regarding.name", "/regarding/name", ""),
                field("regarding.uid", "/regarding/uid", ""),
                field("regarding.apiVersion", "/regarding/apiVersion", ""),
                field(
                    "regarding.resourceVersion",
                    "/regarding/resourceVersion",
                    "",
                ),
                field("regarding.fieldPath", "/regarding/fieldPath", ""),
                field("reason", "/reason", ""),
                field("reportingController", "/reportingController", ""),
                field("type", "/type", ""),
                SelectableField::from_paths(
                    "source",
                    &["/deprecatedSource/component", "/reportingController"],
                    "",
                ),
            ],
        )
        .with_short_names(&["ev"]),
        meta_only(ResourceDef::new(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
        ))
        .with_short_names(&["crd", "crds"]),
        rbac("roles", "Role", true),
        rbac("rolebindings", "RoleBinding", true),
        rbac("clusterroles", "ClusterRole", false),
        rbac("clusterrolebindings", "ClusterRoleBinding", false),
    ]
}

/// Writes the defaults of `def` that `obj` lacks, creating missing parent
/// objects, as the API server's defaulting does on every write.
pub(crate) fn apply_defaults(def: &ResourceDef, obj: &mut Value) {
    for (pointer, value) in &def.defaults {
        let mut at = &mut *obj;
        let mut parts = pointer.split('/').skip(1).peekable();
        while let Some(part) = parts.next() {
            let Value::Object(map) = at else {
                break;
            };
            if parts.peek().is_none() {
                if map.get(part).is_none_or(Value::is_null) {
                    map.insert(part.to_owned(), value.clone());
                }
                break;
            }
            at = map.entry(part.to_owned()).or_insert_with(|| json!({}));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{apply_defaults, builtins};

    #[test]
    fn defaults_fill_what_is_absent_and_keep_what_is_set() {
        let defs = builtins();
        let def = |plural: &str| defs.iter().find(|d| d.plural == plural).unwrap();
        let mut secret = json!({"metadata": {"name": "s"}});
        apply_defaults(def("secrets"), &mut secret);
        assert_eq!(secret["type"], "Opaque");
        let mut tls = json!({"metadata": {"name": "s"}, "type": "kubernetes.io/tls"});
        apply_defaults(def("secrets"), &mut tls);
        assert_eq!(tls["type"], "kubernetes.io/tls");
        let mut ns = json!({"metadata": {"name": "x"}});
        apply_defaults(def("namespaces"), &mut ns);
        assert_eq!(ns["status"]["phase"], "Active");
        let mut svc = json!({"metadata": {"name": "x"}, "spec": "odd"});
        apply_defaults(def("services"), &mut svc);
        assert_eq!(svc["spec"], "odd", "a non-object parent is left alone");
    }

    #[test]
    fn every_builtin_is_selectable_by_name() {
        for def in builtins() {
            assert!(def.field("metadata.name").is_some(), "{}", def.key());
        }
    }
}
