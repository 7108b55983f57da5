//! The part of kube-apiserver's bootstrap RBAC policy
//! (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go) that every
//! client of an RBAC cluster relies on. The aggregated `admin`, `edit` and
//! `view` roles and the controllers' roles are left out.

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
