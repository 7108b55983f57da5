//! A naive RBAC authorizer, written straight from Kubernetes' code over
//! k8s-openapi's types, that the compiled access sets are tested against.
//! It shares nothing with the index: it walks every binding per request
//! (`VisitRulesFor`, `appliesToUser`, `GetRoleReferenceRules` in
//! `pkg/registry/rbac/validation/rule.go`; `RuleAllows` in
//! `plugin/pkg/auth/authorizer/rbac/rbac.go`; the matchers of
//! `pkg/apis/rbac/v1/evaluation_helpers.go`), and aggregates ClusterRoles
//! by running the aggregation controller's step until nothing changes.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::access::Request;
use super::identity::Identity;

#[derive(Default)]
pub struct World {
    pub roles: Vec<Role>,
    pub role_bindings: Vec<RoleBinding>,
    pub cluster_roles: Vec<ClusterRole>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
}

/// A world with its ClusterRoles aggregated.
pub struct Authorizer<'w> {
    world: &'w World,
    cluster_rules: HashMap<String, Vec<PolicyRule>>,
}

impl<'w> Authorizer<'w> {
    pub fn new(world: &'w World) -> Authorizer<'w> {
        Authorizer {
            world,
            cluster_rules: converge(&world.cluster_roles),
        }
    }

    pub fn allows(&self, user: &Identity, request: &Request<'_>) -> bool {
        for binding in &self.world.cluster_role_bindings {
            if applies_to(user, binding.subjects.as_deref().unwrap_or_default(), "")
                && self
                    .rules(&binding.role_ref, "")
                    .is_some_and(|rules| rules.iter().any(|r| rule_allows(request, r)))
            {
                return true;
            }
        }
        if request.namespace.is_empty() {
            return false;
        }
        for binding in &self.world.role_bindings {
            let ns = binding.metadata.namespace.as_deref().unwrap_or_default();
            if ns == request.namespace
                && applies_to(user, binding.subjects.as_deref().unwrap_or_default(), ns)
                && self
                    .rules(&binding.role_ref, ns)
                    .is_some_and(|rules| rules.iter().any(|r| rule_allows(request, r)))
            {
                return true;
            }
        }
        false
    }

    fn rules(&self, role_ref: &RoleRef, namespace: &str) -> Option<Vec<PolicyRule>> {
        match role_ref.kind.as_str() {
            "Role" => self
                .world
                .roles
                .iter()
                .find(|r| {
                    !namespace.is_empty()
                        && r.metadata.namespace.as_deref() == Some(namespace)
                        && r.metadata.name.as_deref() == Some(role_ref.name.as_str())
                })
                .map(|r| r.rules.clone().unwrap_or_default()),
            "ClusterRole" => self.cluster_rules.get(&role_ref.name).cloned(),
            _ => None,
        }
    }
}

fn applies_to(user: &Identity, subjects: &[Subject], namespace: &str) -> bool {
    subjects.iter().any(|subject| match subject.kind.as_str() {
        "User" => user.user() == subject.name,
        "Group" => user.groups().contains(&subject.name),
        "ServiceAccount" => {
            let sa_namespace = match subject.namespace.as_deref() {
                Some(ns) if !ns.is_empty() => ns,
                _ => namespace,
            };
            !sa_namespace.is_empty()
                && user.user() == format!("system:serviceaccount:{sa_namespace}:{}", subject.name)
        }
        _ => false,
    })
}

fn rule_allows(request: &Request<'_>, rule: &PolicyRule) -> bool {
    let combined = if request.subresource.is_empty() {
        request.resource.to_string()
    } else {
        format!("{}/{}", request.resource, request.subresource)
    };
    let verb = rule
        .verbs
        .iter()
        .any(|v| v == "*" || v == request.verb.as_str());
    let group = rule
        .api_groups
        .iter()
        .flatten()
        .any(|g| g == "*" || g == request.group);
    let resource = rule.resources.iter().flatten().any(|r| {
        r == "*"
            || *r == combined
            || (!request.subresource.is_empty()
                && r.len() == request.subresource.len() + 2
                && r.starts_with("*/")
                && r.ends_with(request.subresource))
    });
    let names = rule.resource_names.as_deref().unwrap_or_default();
    let name = names.is_empty() || names.iter().any(|n| n == request.name);
    verb && group && resource && name
}

/// `None`: `LabelSelectorAsSelector` refuses the selector.
fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Option<bool> {
    let mut all = true;
    for (k, v) in selector.match_labels.iter().flatten() {
        all &= labels.get(k) == Some(v);
    }
    for expr in selector.match_expressions.iter().flatten() {
        let values = expr.values.as_deref().unwrap_or_default();
        let label = labels.get(&expr.key);
        all &= match expr.operator.as_str() {
            "In" if !values.is_empty() => label.is_some_and(|l| values.contains(l)),
            "NotIn" if !values.is_empty() => label.is_none_or(|l| !values.contains(l)),
            "Exists" if values.is_empty() => label.is_some(),
            "DoesNotExist" if values.is_empty() => label.is_none(),
            _ => return None,
        };
    }
    Some(all)
}

/// The rules of each ClusterRole: the written ones, plus, for aggregated
/// roles, those the controller's step gathers from the roles their
/// selectors match, repeated until no role changes.
fn converge(roles: &[ClusterRole]) -> HashMap<String, Vec<PolicyRule>> {
    let name = |r: &ClusterRole| r.metadata.name.clone().unwrap_or_default();
    let written = |r: &ClusterRole| r.rules.clone().unwrap_or_default();
    let mut rules: HashMap<String, Vec<PolicyRule>> =
        roles.iter().map(|r| (name(r), written(r))).collect();
    let mut sorted: Vec<&ClusterRole> = roles.iter().collect();
    sorted.sort_by_key(|r| name(r));
    for _ in 0..=2 * roles.len() + 1 {
        let mut changed = false;
        for role in &sorted {
            let Some(aggregation) = &role.aggregation_rule else {
                continue;
            };
            let selectors = aggregation
                .cluster_role_selectors
                .as_deref()
                .unwrap_or_default();
            let mut gathered = written(role);
            let mut valid = true;
            for selector in selectors {
                for other in &sorted {
                    if name(other) == name(role) {
                        continue;
                    }
                    let labels = other.metadata.labels.clone().unwrap_or_default();
                    match selector_matches(selector, &labels) {
                        None => valid = false,
                        Some(false) => {}
                        Some(true) => {
                            for rule in &rules[&name(other)] {
                                if !gathered.contains(rule) {
                                    gathered.push(rule.clone());
                                }
                            }
                        }
                    }
                }
            }
            // Rules only ever grow, so a longer list is a changed one.
            if valid && rules[&name(role)].len() != gathered.len() {
                rules.insert(name(role), gathered);
                changed = true;
            }
        }
        if !changed {
            return rules;
        }
    }
    panic!("aggregation did not converge");
}
