//! The part of kube-apiserver's bootstrap RBAC policy
//! (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go, v1.36) that
//! every client of an RBAC cluster relies on: `cluster-admin`, discovery,
//! and the user-facing `admin`, `edit` and `view`, aggregated (by
//! `rbac::aggregate`, as kube-controller-manager's clusterrole-aggregation
//! controller does) from `system:aggregate-to-*` with the rules of that
//! file's `viewRules` and `editRules` (with DynamicResourceAllocation, on
//! by default since v1.34; without the alpha GenericWorkload's). The
//! controllers' and nodes' roles are left out.

use serde_json::{Value, json};

use super::{CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, GROUP};

const BOOTSTRAP_LABEL: (&str, &str) = ("kubernetes.io/bootstrapping", "rbac-defaults");

fn role(name: &str, rules: Value) -> Value {
    json!({
        "metadata": {"name": name, "labels": {BOOTSTRAP_LABEL.0: BOOTSTRAP_LABEL.1},
                     "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "rules": rules,
    })
}

fn binding(name: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"kind": "Group", "apiGroup": GROUP, "name": g}))
        .collect();
    json!({
        "metadata": {"name": name, "labels": {BOOTSTRAP_LABEL.0: BOOTSTRAP_LABEL.1},
                     "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
        "subjects": subjects,
    })
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];
const READ_WRITE: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": groups, "resources": resources})
}

/// An aggregated role (`admin`, `edit`, `view`): its rules are those of
/// the roles labelled `aggregate-to-NAME`; `labels` put it into another.
fn aggregated(name: &str, into: Option<&str>) -> Value {
    let mut role = role(name, json!([]));
    if let Some(into) = into {
        role["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{into}")] =
            json!("true");
    }
    role["aggregationRule"] = json!({"clusterRoleSelectors": [
        {"matchLabels": {format!("rbac.authorization.k8s.io/aggregate-to-{name}"): "true"}}
    ]});
    role
}

/// `system:aggregate-to-NAME`, with `rules`.
fn aggregate_to(name: &str, rules: Value) -> Value {
    let mut role = role(&format!("system:aggregate-to-{name}"), rules);
    role["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{name}")] =
        json!("true");
    role
}

/// policy.go's `viewRules`.
fn view_rules() -> Value {
    json!([
        rule(
            READ,
            &[""],
            &[
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "configmaps"
            ]
        ),
        rule(
            READ,
            &[""],
            &[
                "limitranges",
                "resourcequotas",
                "bindings",
                "pods/status",
                "resourcequotas/status",
                "namespaces/status",
                "replicationcontrollers/status",
                "pods/log"
            ]
        ),
        rule(READ, &[""], &["namespaces"]),
        rule(READ, &["", "events.k8s.io"], &["events"]),
        rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
        rule(
            READ,
            &["apps"],
            &[
                "controllerrevisions",
                "statefulsets",
                "statefulsets/status",
                "statefulsets/scale",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/status",
                "deployments/scale",
                "replicasets",
                "replicasets/status",
                "replicasets/scale"
            ]
        ),
        rule(
            READ,
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status"
            ]
        ),
        rule(
            READ,
            &["batch"],
            &["jobs", "cronjobs", "cronjobs/status", "jobs/status"]
        ),
        rule(
            READ,
            &["extensions"],
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
                "networkpolicies"
            ]
        ),
        rule(
            READ,
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"]
        ),
        rule(
            READ,
            &["networking.k8s.io"],
            &["networkpolicies", "ingresses", "ingresses/status"]
        ),
        rule(
            READ,
            &["resource.k8s.io"],
            &[
                "resourceclaims",
                "resourceclaims/status",
                "resourceclaimtemplates"
            ]
        ),
    ])
}

/// policy.go's `editRules`.
fn edit_rules() -> Value {
    json!([
        rule(
            READ,
            &[""],
            &[
                "pods/attach",
                "pods/proxy",
                "pods/exec",
                "pods/portforward",
                "secrets",
                "services/proxy"
            ]
        ),
        rule(&["impersonate"], &[""], &["serviceaccounts"]),
        rule(
            WRITE,
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/proxy",
                "pods/exec",
                "pods/portforward"
            ]
        ),
        rule(&["create"], &[""], &["pods/eviction"]),
        rule(
            WRITE,
            &[""],
            &[
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/proxy",
                "persistentvolumeclaims",
                "configmaps",
                "secrets"
            ]
        ),
        rule(&["create"], &[""], &["serviceaccounts/token"]),
        rule(WRITE, &["", "events.k8s.io"], &["events"]),
        rule(
            WRITE,
            &["apps"],
            &[
                "statefulsets",
                "statefulsets/scale",
                "daemonsets",
                "deployments",
                "deployments/scale",
                "deployments/rollback",
                "replicasets",
                "replicasets/scale"
            ]
        ),
        rule(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
        rule(WRITE, &["batch"], &["jobs", "cronjobs"]),
        rule(
            WRITE,
            &["extensions"],
            &[
                "daemonsets",
                "deployments",
                "deployments/scale",
                "deployments/rollback",
                "ingresses",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
                "networkpolicies"
            ]
        ),
        rule(WRITE, &["policy"], &["poddisruptionbudgets"]),
        rule(
            WRITE,
            &["networking.k8s.io"],
            &["networkpolicies", "ingresses"]
        ),
        rule(READ_WRITE, &["coordination.k8s.io"], &["leases"]),
        rule(
            WRITE,
            &["resource.k8s.io"],
            &["resourceclaims", "resourceclaimtemplates"]
        ),
    ])
}

/// The bootstrap ClusterRoles and ClusterRoleBindings, as (resource key, object).
pub(crate) fn objects() -> Vec<(&'static str, Value)> {
    vec![
        (
            CLUSTER_ROLES,
            role(
                "cluster-admin",
                json!([
                    {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
                    {"verbs": ["*"], "nonResourceURLs": ["*"]},
                ]),
            ),
        ),
        (
            CLUSTER_ROLES,
            role(
                "system:discovery",
                json!([{"verbs": ["get"], "nonResourceURLs": [
                    "/livez", "/readyz", "/healthz", "/version", "/version/",
                    "/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*"]}]),
            ),
        ),
        (
            CLUSTER_ROLES,
            role(
                "system:basic-user",
                json!([
                    {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                     "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
                    {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
                     "resources": ["selfsubjectreviews"]},
                ]),
            ),
        ),
        (
            CLUSTER_ROLES,
            role(
                "system:public-info-viewer",
                json!([{"verbs": ["get"], "nonResourceURLs": [
                    "/livez", "/readyz", "/healthz", "/version", "/version/"]}]),
            ),
        ),
        (CLUSTER_ROLES, aggregated("admin", None)),
        (CLUSTER_ROLES, aggregated("edit", Some("admin"))),
        (CLUSTER_ROLES, aggregated("view", Some("edit"))),
        (
            CLUSTER_ROLES,
            aggregate_to(
                "admin",
                json!([
                    rule(
                        &["create"],
                        &["authorization.k8s.io"],
                        &["localsubjectaccessreviews"]
                    ),
                    rule(READ_WRITE, &[GROUP], &["roles", "rolebindings"]),
                ]),
            ),
        ),
        (CLUSTER_ROLES, aggregate_to("edit", edit_rules())),
        (CLUSTER_ROLES, aggregate_to("view", view_rules())),
        (
            CLUSTER_ROLE_BINDINGS,
            binding("cluster-admin", &["system:masters"]),
        ),
        (
            CLUSTER_ROLE_BINDINGS,
            binding("system:discovery", &["system:authenticated"]),
        ),
        (
            CLUSTER_ROLE_BINDINGS,
            binding("system:basic-user", &["system:authenticated"]),
        ),
        (
            CLUSTER_ROLE_BINDINGS,
            binding(
                "system:public-info-viewer",
                &["system:authenticated", "system:unauthenticated"],
            ),
        ),
    ]
}
