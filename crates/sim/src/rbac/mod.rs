//! RBAC as the simulated API server keeps it: Roles, RoleBindings,
//! ClusterRoles and ClusterRoleBindings (rbac.authorization.k8s.io/v1) are
//! ordinary stored resources; this module owns their typed form, what the
//! server does to them on every write (defaults, validation), the
//! clusterrole-aggregation controller (`aggregate.rs`) and the authorizer
//! that answers access reviews from them (`authorizer.rs`).
//!
//! Written from <https://kubernetes.io/docs/reference/access-authn-authz/rbac/>
//! and kube-apiserver's code, cited where each rule is kept; it shares
//! nothing with the gateway's own evaluator, so the two check each other.

pub(crate) mod aggregate;
pub(crate) mod authorizer;
pub(crate) mod bootstrap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::SimError;
use crate::selector::LabelSelector;

pub(crate) const GROUP: &str = "rbac.authorization.k8s.io";
pub(crate) const ROLES: &str = "roles.rbac.authorization.k8s.io";
pub(crate) const ROLE_BINDINGS: &str = "rolebindings.rbac.authorization.k8s.io";
pub(crate) const CLUSTER_ROLES: &str = "clusterroles.rbac.authorization.k8s.io";
pub(crate) const CLUSTER_ROLE_BINDINGS: &str = "clusterrolebindings.rbac.authorization.k8s.io";

/// True for the four RBAC resource keys.
pub(crate) fn is_rbac(key: &str) -> bool {
    matches!(
        key,
        ROLES | ROLE_BINDINGS | CLUSTER_ROLES | CLUSTER_ROLE_BINDINGS
    )
}

/// `rbacv1.PolicyRule`, serialised as the API server does (`verbs` always,
/// the other lists only when non-empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PolicyRule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    #[serde(
        default,
        rename = "nonResourceURLs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub non_resource_urls: Vec<String>,
}

/// `rbacv1.RoleRef`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RoleRef {
    #[serde(default)]
    pub api_group: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

/// `rbacv1.Subject`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Subject {
    #[serde(default)]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

/// Decodes the field `name` of `obj` as `T`, absent or null as the default;
/// a body of the wrong shape is refused as the API server's decoder refuses it.
fn decode<T: serde::de::DeserializeOwned + Default>(
    obj: &Value,
    name: &str,
) -> Result<T, SimError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(T::default()),
        Some(v) => T::deserialize(v)
            .map_err(|e| SimError::BadRequest(format!("unable to decode {name}: {e}"))),
    }
}

fn put<T: Serialize>(obj: &mut Value, name: &str, value: &T) {
    if let (Some(map), Ok(v)) = (obj.as_object_mut(), serde_json::to_value(value)) {
        map.insert(name.to_owned(), v);
    }
}

/// The rules of a Role or ClusterRole object.
pub(crate) fn rules_of(obj: &Value) -> Result<Vec<PolicyRule>, SimError> {
    decode(obj, "rules")
}

/// The roleRef and subjects of a binding object.
pub(crate) fn binding_of(obj: &Value) -> Result<(RoleRef, Vec<Subject>), SimError> {
    Ok((decode(obj, "roleRef")?, decode(obj, "subjects")?))
}

/// The label selectors of a ClusterRole's `aggregationRule`, if it has one.
pub(crate) fn aggregation_of(obj: &Value) -> Option<Vec<LabelSelector>> {
    let rule = obj.get("aggregationRule").filter(|v| !v.is_null())?;
    rule.get("clusterRoleSelectors")
        .and_then(Value::as_array)
        .map(|sels| {
            sels.iter()
                .filter_map(|s| LabelSelector::from_object(s).ok())
                .collect()
        })
}

/// A 422 in `apierrors.NewInvalid`'s words: one field error as it is,
/// several as a bracketed list.
fn invalid(kind: &str, name: &str, errors: &[String]) -> SimError {
    let errs = match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    SimError::Invalid(format!("{kind}.{GROUP} \"{name}\" is invalid: {errs}"))
}

/// What the API server does to an RBAC object on create and update: decode
/// it into its typed form (which drops what the type does not have),
/// default it (pkg/apis/rbac/v1/defaults.go: roleRef.apiGroup, and a
/// subject's apiGroup by its kind) and validate it
/// (pkg/apis/rbac/validation/validation.go). `old` is the stored object on
/// an update: a binding's roleRef cannot change.
pub(crate) fn admit(key: &str, obj: &mut Value, old: Option<&Value>) -> Result<(), SimError> {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mut errors = Vec::new();
    match key {
        ROLES | CLUSTER_ROLES => {
            let namespaced = key == ROLES;
            let rules = rules_of(obj)?;
            for (i, rule) in rules.iter().enumerate() {
                validate_rule(rule, namespaced, i, &mut errors);
            }
            put(obj, "rules", &rules);
            if key == CLUSTER_ROLES
                && let Some(rule) = obj.get("aggregationRule").filter(|v| !v.is_null())
            {
                match rule.get("clusterRoleSelectors").and_then(Value::as_array) {
                    Some(sels) if !sels.is_empty() => {
                        for (i, sel) in sels.iter().enumerate() {
                            if let Err(e) = LabelSelector::from_object(sel) {
                                errors.push(format!(
                                    "aggregationRule.clusterRoleSelectors[{i}]: Invalid value: {e}"
                                ));
                            }
                        }
                    }
                    _ => errors.push(
                        "aggregationRule.clusterRoleSelectors: Required value: at least one clusterRoleSelector required if aggregationRule is non-nil"
                            .into(),
                    ),
                }
            }
        }
        ROLE_BINDINGS | CLUSTER_ROLE_BINDINGS => {
            let namespaced = key == ROLE_BINDINGS;
            let (mut role_ref, mut subjects) = binding_of(obj)?;
            if role_ref.api_group.is_empty() {
                role_ref.api_group = GROUP.into();
            }
            for s in &mut subjects {
                if s.api_group.is_empty() && (s.kind == "User" || s.kind == "Group") {
                    s.api_group = GROUP.into();
                }
            }
            if role_ref.api_group != GROUP {
                errors.push(format!(
                    "roleRef.apiGroup: Unsupported value: {:?}: supported values: \"{GROUP}\"",
                    role_ref.api_group
                ));
            }
            let kinds: &[&str] = if namespaced {
                &["Role", "ClusterRole"]
            } else {
                &["ClusterRole"]
            };
            if !kinds.contains(&role_ref.kind.as_str()) {
                errors.push(format!(
                    "roleRef.kind: Unsupported value: {:?}: supported values: {}",
                    role_ref.kind,
                    kinds
                        .iter()
                        .map(|k| format!("{k:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            if role_ref.name.is_empty() {
                errors.push("roleRef.name: Required value".into());
            }
            for (i, s) in subjects.iter().enumerate() {
                validate_subject(s, namespaced, i, &mut errors);
            }
            if let Some(old) = old {
                let (old_ref, _) = binding_of(old)?;
                if old_ref != role_ref {
                    errors.push("roleRef: Invalid value: cannot change roleRef".into());
                }
            }
            put(obj, "roleRef", &role_ref);
            // `subjects` is omitempty in rbacv1.
            if subjects.is_empty() {
                if let Some(map) = obj.as_object_mut() {
                    map.remove("subjects");
                }
            } else {
                put(obj, "subjects", &subjects);
            }
        }
        _ => {}
    }
    if errors.is_empty() {
        return Ok(());
    }
    let kind = match key {
        ROLES => "Role",
        ROLE_BINDINGS => "RoleBinding",
        CLUSTER_ROLES => "ClusterRole",
        _ => "ClusterRoleBinding",
    };
    Err(invalid(kind, &name, &errors))
}

/// `ValidatePolicyRule`.
fn validate_rule(rule: &PolicyRule, namespaced: bool, i: usize, errors: &mut Vec<String>) {
    let at = format!("rules[{i}]");
    if rule.verbs.is_empty() {
        errors.push(format!(
            "{at}.verbs: Required value: verbs must contain at least one value"
        ));
    }
    if !rule.non_resource_urls.is_empty() {
        if namespaced {
            errors.push(format!(
                "{at}.nonResourceURLs: Invalid value: namespaced rules cannot apply to non-resource URLs"
            ));
        }
        if !rule.api_groups.is_empty()
            || !rule.resources.is_empty()
            || !rule.resource_names.is_empty()
        {
            errors.push(format!(
                "{at}.nonResourceURLs: Invalid value: rules cannot apply to both regular resources and non-resource URLs"
            ));
        }
        return;
    }
    if rule.api_groups.is_empty() {
        errors.push(format!(
            "{at}.apiGroups: Required value: resource rules must supply at least one api group"
        ));
    }
    if rule.resources.is_empty() {
        errors.push(format!(
            "{at}.resources: Required value: resource rules must supply at least one resource"
        ));
    }
}

/// `ValidateRoleBindingSubject`.
fn validate_subject(s: &Subject, namespaced: bool, i: usize, errors: &mut Vec<String>) {
    let at = format!("subjects[{i}]");
    if s.name.is_empty() {
        errors.push(format!("{at}.name: Required value"));
    }
    match s.kind.as_str() {
        "ServiceAccount" => {
            if !s.api_group.is_empty() {
                errors.push(format!(
                    "{at}.apiGroup: Unsupported value: {:?}: supported values: \"\"",
                    s.api_group
                ));
            }
            if !namespaced && s.namespace.is_empty() {
                errors.push(format!("{at}.namespace: Required value"));
            }
        }
        "User" | "Group" => {
            if s.api_group != GROUP {
                errors.push(format!(
                    "{at}.apiGroup: Unsupported value: {:?}: supported values: \"{GROUP}\"",
                    s.api_group
                ));
            }
        }
        other => errors.push(format!(
            "{at}.kind: Unsupported value: {other:?}: supported values: \"ServiceAccount\", \"User\", \"Group\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, ROLE_BINDINGS, ROLES, admit};

    #[test]
    fn bindings_are_defaulted_and_their_role_ref_is_fixed() {
        let mut rb = json!({"metadata": {"name": "b"},
            "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "User", "name": "alice"},
                         {"kind": "ServiceAccount", "name": "sa"}]});
        admit(ROLE_BINDINGS, &mut rb, None).unwrap();
        assert_eq!(rb["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
        assert_eq!(rb["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
        assert!(rb["subjects"][1].get("apiGroup").is_none());
        let old = rb.clone();
        let mut changed = rb.clone();
        changed["roleRef"]["name"] = json!("other");
        let err = admit(ROLE_BINDINGS, &mut changed, Some(&old)).unwrap_err();
        assert!(err.to_string().contains("cannot change roleRef"), "{err}");
        let mut crb = json!({"metadata": {"name": "c"},
            "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa"}, {"kind": "Robot", "name": "x"}]});
        let err = admit(CLUSTER_ROLE_BINDINGS, &mut crb, None)
            .unwrap_err()
            .to_string();
        for want in [
            "roleRef.kind: Unsupported value: \"Role\"",
            "subjects[0].namespace: Required value",
            "subjects[1].kind: Unsupported value: \"Robot\"",
        ] {
            assert!(err.contains(want), "{err} lacks {want}");
        }
    }

    #[test]
    fn roles_are_validated_and_decoded_into_their_type() {
        let mut role = json!({"metadata": {"name": "r"},
            "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "extra": 1}]});
        admit(ROLES, &mut role, None).unwrap();
        assert_eq!(
            role["rules"][0],
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]})
        );
        let mut bad = json!({"metadata": {"name": "r"},
            "rules": [{"verbs": [], "nonResourceURLs": ["/x"], "resources": ["pods"]}]});
        let err = admit(ROLES, &mut bad, None).unwrap_err();
        assert_eq!(err.code(), 422);
        let err = err.to_string();
        assert!(
            err.starts_with("Role.rbac.authorization.k8s.io \"r\" is invalid: ["),
            "{err}"
        );
        assert!(err.contains("namespaced rules cannot apply to non-resource URLs"));
        assert!(err.contains("both regular resources and non-resource URLs"));
        let mut shapeless = json!({"metadata": {"name": "r"}, "rules": "all"});
        assert_eq!(admit(ROLES, &mut shapeless, None).unwrap_err().code(), 400);
        let mut agg =
            json!({"metadata": {"name": "a"}, "aggregationRule": {"clusterRoleSelectors": []}});
        let err = admit(CLUSTER_ROLES, &mut agg, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("at least one clusterRoleSelector"), "{err}");
    }
}
