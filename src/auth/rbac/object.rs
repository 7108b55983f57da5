//! RBAC objects as the index keeps them: the parts of Roles, ClusterRoles,
//! RoleBindings and ClusterRoleBindings that authorization reads, parsed
//! from the JSON the informers deliver through k8s-openapi's types.
//!
//! Parsing resolves what depends only on the object: a ServiceAccount
//! subject becomes the user name its tokens carry (its namespace defaulting
//! to a RoleBinding's own, `appliesToUser` in
//! `pkg/registry/rbac/validation/rule.go`), subjects of other kinds are
//! dropped (they match nobody), and rules that name no resources
//! (`nonResourceURLs`) are dropped (they never allow a resource request).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::rbac::v1 as api;
use serde::Deserialize;
use serde_json::Value;

use super::aggregation::Selector;
use super::identity::service_account_user;
use super::{Error, Kind};

/// Where an object lives: its namespace (empty for the cluster-scoped
/// kinds) and name. A binding's key says which kind it is: RoleBindings
/// always have a namespace, ClusterRoleBindings never.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(kind: Kind, namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            namespace: if kind.namespaced() {
                namespace.to_string()
            } else {
                String::new()
            },
            name: name.to_string(),
        }
    }

    pub fn is_cluster(&self) -> bool {
        self.namespace.is_empty()
    }
}

/// A `PolicyRule` that names resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    /// Empty: every name.
    pub resource_names: Vec<String>,
}

impl Rule {
    fn from_api(rule: api::PolicyRule) -> Option<Rule> {
        let resources = rule.resources.unwrap_or_default();
        if resources.is_empty() {
            return None;
        }
        Some(Rule {
            verbs: rule.verbs,
            api_groups: rule.api_groups.unwrap_or_default(),
            resources,
            resource_names: rule.resource_names.unwrap_or_default(),
        })
    }
}

fn rules(rules: Option<Vec<api::PolicyRule>>) -> Arc<Vec<Rule>> {
    Arc::new(
        rules
            .unwrap_or_default()
            .into_iter()
            .filter_map(Rule::from_api)
            .collect(),
    )
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClusterRole {
    pub labels: BTreeMap<String, String>,
    /// The rules written in the object.
    pub rules: Arc<Vec<Rule>>,
    /// `aggregationRule.clusterRoleSelectors`; empty when the role is not
    /// aggregated, or when a selector is invalid (the aggregation
    /// controller then leaves the role as written).
    pub selectors: Vec<Selector>,
}

/// Who a binding applies to. A ServiceAccount is the user its tokens carry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Subject {
    User(String),
    Group(String),
}

/// The role a binding grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleRef {
    Role(String),
    ClusterRole(String),
    /// Another kind: grants nothing (`GetRoleReferenceRules` refuses it).
    Unsupported,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub role_ref: RoleRef,
    pub subjects: Vec<Subject>,
}

impl Binding {
    fn from_api(
        role_ref: api::RoleRef,
        subjects: Option<Vec<api::Subject>>,
        namespace: &str,
    ) -> Binding {
        let role_ref = match role_ref.kind.as_str() {
            "Role" => RoleRef::Role(role_ref.name),
            "ClusterRole" => RoleRef::ClusterRole(role_ref.name),
            _ => RoleRef::Unsupported,
        };
        let subjects = subjects
            .unwrap_or_default()
            .into_iter()
            .filter_map(|s| match s.kind.as_str() {
                "User" => Some(Subject::User(s.name)),
                "Group" => Some(Subject::Group(s.name)),
                "ServiceAccount" => {
                    let ns = s.namespace.filter(|ns| !ns.is_empty());
                    let ns = ns.as_deref().unwrap_or(namespace);
                    (!ns.is_empty()).then(|| Subject::User(service_account_user(ns, &s.name)))
                }
                _ => None,
            })
            .collect();
        Binding { role_ref, subjects }
    }
}

/// One parsed object.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    Role(Arc<Vec<Rule>>),
    ClusterRole(ClusterRole),
    Binding(Binding),
}

/// The key of `object` and what it says: `None` for an object that does
/// not parse (logged here), so that it grants nothing; no key at all when
/// it has no name (or no namespace, for a namespaced kind), also logged.
pub fn read(kind: Kind, object: &Value) -> Option<(ObjectKey, Option<Parsed>)> {
    let text = |field: &str| {
        object
            .get("metadata")
            .and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let (namespace, name) = (text("namespace"), text("name"));
    let unkeyed = if name.is_empty() {
        Some(Error::NoName)
    } else if kind.namespaced() && namespace.is_empty() {
        Some(Error::NoNamespace(kind))
    } else {
        None
    };
    if let Some(error) = unkeyed {
        tracing::warn!(%kind, namespace, name, %error, "RBAC object ignored: it grants nothing");
        return None;
    }
    let key = ObjectKey::new(kind, namespace, name);
    match parse(kind, &key, object) {
        Ok(parsed) => Some((key, Some(parsed))),
        Err(error) => {
            tracing::warn!(
                %kind,
                namespace = key.namespace,
                name = key.name,
                %error,
                "RBAC object ignored: it grants nothing, and what its previous version granted is withdrawn"
            );
            Some((key, None))
        }
    }
}

fn parse(kind: Kind, key: &ObjectKey, object: &Value) -> Result<Parsed, Error> {
    let invalid = |source| Error::Invalid { kind, source };
    Ok(match kind {
        Kind::Role => Parsed::Role(rules(
            api::Role::deserialize(object).map_err(invalid)?.rules,
        )),
        Kind::ClusterRole => {
            let role = api::ClusterRole::deserialize(object).map_err(invalid)?;
            let selectors = role
                .aggregation_rule
                .and_then(|rule| rule.cluster_role_selectors)
                .unwrap_or_default();
            let selectors = match selectors.iter().map(Selector::from_api).collect() {
                Ok(selectors) => selectors,
                Err(error) => {
                    tracing::warn!(
                        %kind,
                        name = key.name,
                        %error,
                        "aggregationRule ignored: the role grants only the rules written in it"
                    );
                    Vec::new()
                }
            };
            Parsed::ClusterRole(ClusterRole {
                labels: role.metadata.labels.unwrap_or_default(),
                rules: rules(role.rules),
                selectors,
            })
        }
        Kind::RoleBinding => {
            let binding = api::RoleBinding::deserialize(object).map_err(invalid)?;
            Parsed::Binding(Binding::from_api(
                binding.role_ref,
                binding.subjects,
                &key.namespace,
            ))
        }
        Kind::ClusterRoleBinding => {
            let binding = api::ClusterRoleBinding::deserialize(object).map_err(invalid)?;
            Parsed::Binding(Binding::from_api(binding.role_ref, binding.subjects, ""))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn service_accounts_are_the_users_their_tokens_carry() {
        let (_, parsed) = read(
            Kind::RoleBinding,
            &json!({
                "metadata": {"name": "b", "namespace": "team"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
                "subjects": [
                    {"kind": "ServiceAccount", "name": "own"},
                    {"kind": "ServiceAccount", "name": "other", "namespace": "ops"},
                    {"kind": "Robot", "name": "r2d2"},
                ],
            }),
        )
        .unwrap();
        let Some(Parsed::Binding(binding)) = parsed else {
            panic!("a binding: {parsed:?}");
        };
        assert_eq!(
            binding.subjects,
            [
                Subject::User("system:serviceaccount:team:own".into()),
                Subject::User("system:serviceaccount:ops:other".into()),
            ]
        );
    }

    #[test]
    fn an_object_claiming_another_kind_does_not_parse() {
        let role = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "r", "namespace": "a"},
            "rules": [],
        });
        let (key, parsed) = read(Kind::Role, &role).unwrap();
        assert_eq!(key, ObjectKey::new(Kind::Role, "a", "r"));
        assert_eq!(parsed, None);
        assert!(read(Kind::Role, &json!({"metadata": {"name": "r"}})).is_none());
        assert!(read(Kind::ClusterRole, &json!({"metadata": {}})).is_none());
    }
}
