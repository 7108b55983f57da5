//! The RBAC authorizer: whether a user may do something, and which rules
//! apply to a user in a namespace, from the stored RBAC objects.
//!
//! Written from kube-apiserver's plugin/pkg/auth/authorizer/rbac/rbac.go,
//! pkg/registry/rbac/validation/rule.go (`VisitRulesFor`, `appliesTo`) and
//! pkg/apis/rbac/v1/evaluation_helpers.go (`VerbMatches`, `ResourceMatches`,
//! ...):
//! - ClusterRoleBindings apply everywhere; RoleBindings of the request's
//!   namespace apply in that namespace only, including those that refer to
//!   a ClusterRole (its rules then count in that namespace alone). A
//!   request without a namespace (cluster-scoped, or across namespaces)
//!   sees ClusterRoleBindings only.
//! - A subject applies by User name, by Group membership, or as a
//!   ServiceAccount (user `system:serviceaccount:NS:NAME`, NS defaulting to
//!   the binding's namespace).
//! - `*` matches any verb, API group or resource; `*/sub` any resource's
//!   subresource `sub`; a resource request names `resource/subresource`;
//!   `resourceNames` restrict a rule to those names (a list or watch has no
//!   name, so such a rule never allows it); a non-resource URL matches
//!   exactly or by a trailing `*` prefix.
//! - Members of `system:masters` are allowed everything before RBAC is
//!   consulted (the privileged-group authorizer kube-apiserver puts first,
//!   pkg/kubeapiserver/authorizer/config.go).
//! - A binding whose role cannot be found contributes nothing and is named
//!   in the denial's reason, never more access.

use std::collections::BTreeMap;

use super::{
    CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, PolicyRule, ROLE_BINDINGS, ROLES, RoleRef, Subject,
    binding_of, rules_of,
};
use crate::store::Store;

/// The group whose members every request is allowed to.
pub(crate) const PRIVILEGED_GROUP: &str = "system:masters";

/// Who a decision is about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

/// What a resource request names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ResourceAttributes {
    pub namespace: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
}

/// A request as the authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attributes {
    pub user: UserInfo,
    pub verb: String,
    /// `None` for a non-resource request (discovery, /version, ...).
    pub resource: Option<ResourceAttributes>,
    /// The URL path of a non-resource request.
    pub path: String,
}

impl Attributes {
    fn namespace(&self) -> &str {
        self.resource.as_ref().map_or("", |r| &r.namespace)
    }
}

/// The authorizer's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Decision {
    pub allowed: bool,
    /// Which binding allowed it, or why nothing could (unresolvable roles).
    pub reason: String,
}

struct Binding {
    /// "" for a ClusterRoleBinding.
    namespace: String,
    name: String,
    role_ref: RoleRef,
    subjects: Vec<Subject>,
}

/// The RBAC objects of a store, decoded once for every decision until one
/// of them changes (`Store::policy`).
#[derive(Default)]
pub(crate) struct Policy {
    roles: BTreeMap<(String, String), Vec<PolicyRule>>,
    cluster_roles: BTreeMap<String, Vec<PolicyRule>>,
    role_bindings: BTreeMap<String, Vec<Binding>>,
    cluster_role_bindings: Vec<Binding>,
}

/// Where a rule came from, in the words of the API server's reasons.
struct Source<'a> {
    binding: &'a Binding,
    subject: &'a Subject,
}

impl Source<'_> {
    fn describe(&self) -> String {
        let b = self.binding;
        let subject = match self.subject.kind.as_str() {
            "ServiceAccount" => {
                let ns = if self.subject.namespace.is_empty() {
                    &b.namespace
                } else {
                    &self.subject.namespace
                };
                format!("ServiceAccount \"{}/{ns}\"", self.subject.name)
            }
            kind => format!("{kind} \"{}\"", self.subject.name),
        };
        if b.namespace.is_empty() {
            format!(
                "ClusterRoleBinding \"{}\" of {} \"{}\" to {subject}",
                b.name, b.role_ref.kind, b.role_ref.name
            )
        } else {
            format!(
                "RoleBinding \"{}/{}\" of {} \"{}\" to {subject}",
                b.name, b.namespace, b.role_ref.kind, b.role_ref.name
            )
        }
    }
}

/// `appliesToUser`.
fn applies(subject: &Subject, user: &UserInfo, namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => user.name == subject.name,
        "Group" => user.groups.contains(&subject.name),
        "ServiceAccount" => {
            let ns = if subject.namespace.is_empty() {
                namespace
            } else {
                &subject.namespace
            };
            !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{}", subject.name)
        }
        _ => false,
    }
}

fn any_or_star(list: &[String], value: &str) -> bool {
    list.iter().any(|x| x == "*" || x == value)
}

/// `RuleAllows`.
pub(crate) fn rule_allows(rule: &PolicyRule, attrs: &Attributes) -> bool {
    if !any_or_star(&rule.verbs, &attrs.verb) {
        return false;
    }
    let Some(r) = &attrs.resource else {
        return rule.non_resource_urls.iter().any(|url| {
            url == "*"
                || *url == attrs.path
                || url
                    .strip_suffix('*')
                    .is_some_and(|prefix| attrs.path.starts_with(prefix))
        });
    };
    let combined = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    let resource = rule.resources.iter().any(|x| {
        x == "*"
            || *x == combined
            || (!r.subresource.is_empty() && *x == format!("*/{}", r.subresource))
    });
    any_or_star(&rule.api_groups, &r.group)
        && resource
        && (rule.resource_names.is_empty() || rule.resource_names.contains(&r.name))
}

impl Policy {
    /// Decodes the store's RBAC objects. Stored objects were decoded and
    /// validated when written, so none fails here.
    pub fn from_store(store: &Store) -> Policy {
        let mut policy = Policy::default();
        let values = |key: &str| {
            store
                .objects(key)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|s| Some((s.attrs.clone(), s.value().ok()?)))
                .collect::<Vec<_>>()
        };
        for (attrs, obj) in values(ROLES) {
            let rules = rules_of(&obj).unwrap_or_default();
            policy
                .roles
                .insert((attrs.ns.to_string(), attrs.name.to_string()), rules);
        }
        for (attrs, obj) in values(CLUSTER_ROLES) {
            let rules = rules_of(&obj).unwrap_or_default();
            policy.cluster_roles.insert(attrs.name.to_string(), rules);
        }
        for key in [ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS] {
            for (attrs, obj) in values(key) {
                let Ok((role_ref, subjects)) = binding_of(&obj) else {
                    continue;
                };
                let binding = Binding {
                    namespace: attrs.ns.to_string(),
                    name: attrs.name.to_string(),
                    role_ref,
                    subjects,
                };
                if key == ROLE_BINDINGS {
                    policy
                        .role_bindings
                        .entry(binding.namespace.clone())
                        .or_default()
                        .push(binding);
                } else {
                    policy.cluster_role_bindings.push(binding);
                }
            }
        }
        policy
    }

    /// `GetRoleReferenceRules`.
    fn role_rules(&self, role_ref: &RoleRef, namespace: &str) -> Result<&[PolicyRule], String> {
        match role_ref.kind.as_str() {
            "Role" => self
                .roles
                .get(&(namespace.to_owned(), role_ref.name.clone()))
                .map(Vec::as_slice)
                .ok_or_else(|| {
                    format!(
                        "role.rbac.authorization.k8s.io \"{}\" not found",
                        role_ref.name
                    )
                }),
            "ClusterRole" => self
                .cluster_roles
                .get(&role_ref.name)
                .map(Vec::as_slice)
                .ok_or_else(|| {
                    format!(
                        "clusterrole.rbac.authorization.k8s.io \"{}\" not found",
                        role_ref.name
                    )
                }),
            other => Err(format!("unsupported role reference kind: {other:?}")),
        }
    }

    /// `VisitRulesFor`: every rule that applies to `user` in `namespace`,
    /// with its source, and every role that could not be resolved. The
    /// visitor returns false to stop.
    fn visit(
        &self,
        user: &UserInfo,
        namespace: &str,
        mut visitor: impl FnMut(Option<&Source<'_>>, Option<&PolicyRule>, Option<String>) -> bool,
    ) {
        let namespaced = if namespace.is_empty() {
            None
        } else {
            self.role_bindings.get(namespace)
        };
        let bindings = self
            .cluster_role_bindings
            .iter()
            .chain(namespaced.into_iter().flatten());
        for binding in bindings {
            let Some(subject) = binding
                .subjects
                .iter()
                .find(|s| applies(s, user, &binding.namespace))
            else {
                continue;
            };
            match self.role_rules(&binding.role_ref, &binding.namespace) {
                Err(e) => {
                    if !visitor(None, None, Some(e)) {
                        return;
                    }
                }
                Ok(rules) => {
                    let source = Source { binding, subject };
                    for rule in rules {
                        if !visitor(Some(&source), Some(rule), None) {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Whether `attrs` is allowed, and why.
    pub fn authorize(&self, attrs: &Attributes) -> Decision {
        if attrs.user.groups.iter().any(|g| g == PRIVILEGED_GROUP) {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let mut allowed_by = None;
        let mut errors = Vec::new();
        self.visit(&attrs.user, attrs.namespace(), |source, rule, err| {
            if let (Some(source), Some(rule)) = (source, rule)
                && rule_allows(rule, attrs)
            {
                allowed_by = Some(source.describe());
                return false;
            }
            errors.extend(err);
            true
        });
        match allowed_by {
            Some(by) => Decision {
                allowed: true,
                reason: format!("RBAC: allowed by {by}"),
            },
            None => Decision {
                allowed: false,
                reason: if errors.is_empty() {
                    String::new()
                } else {
                    format!("RBAC: {}", aggregate(&errors))
                },
            },
        }
    }

    /// `RulesFor`: every rule that applies to `user` in `namespace`, and the
    /// roles that could not be resolved (then the rules may be incomplete).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Option<String>) {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        self.visit(user, namespace, |_, rule, err| {
            rules.extend(rule.cloned());
            errors.extend(err);
            true
        });
        (rules, (!errors.is_empty()).then(|| aggregate(&errors)))
    }
}

/// `utilerrors.NewAggregate(...).Error()`: one error as it is, several bracketed.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::{Attributes, PolicyRule, ResourceAttributes, UserInfo, rule_allows};

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
        let v = |x: &[&str]| x.iter().map(|s| (*s).to_owned()).collect();
        PolicyRule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            resource_names: v(names),
            non_resource_urls: Vec::new(),
        }
    }

    fn ask(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            user: UserInfo::default(),
            verb: verb.into(),
            resource: Some(ResourceAttributes {
                namespace: "web".into(),
                group: group.into(),
                resource: resource.into(),
                subresource: sub.into(),
                name: name.into(),
            }),
            path: String::new(),
        }
    }

    #[test]
    fn rules_match_verbs_groups_resources_subresources_and_names() {
        let pods = rule(&["get", "list"], &[""], &["pods"], &[]);
        assert!(rule_allows(&pods, &ask("list", "", "pods", "", "")));
        assert!(!rule_allows(&pods, &ask("watch", "", "pods", "", "")));
        assert!(!rule_allows(&pods, &ask("get", "apps", "pods", "", "")));
        assert!(!rule_allows(&pods, &ask("get", "", "pods", "log", "a")));
        let logs = rule(&["get"], &[""], &["*/log"], &[]);
        assert!(rule_allows(&logs, &ask("get", "", "pods", "log", "a")));
        assert!(!rule_allows(&logs, &ask("get", "", "pods", "", "a")));
        let all = rule(&["*"], &["*"], &["*"], &[]);
        assert!(rule_allows(
            &all,
            &ask("delete", "apps", "deployments", "scale", "x")
        ));
        let one = rule(&["get", "watch"], &[""], &["configmaps"], &["cfg"]);
        assert!(rule_allows(&one, &ask("get", "", "configmaps", "", "cfg")));
        assert!(!rule_allows(
            &one,
            &ask("get", "", "configmaps", "", "other")
        ));
        assert!(
            !rule_allows(&one, &ask("watch", "", "configmaps", "", "")),
            "a named rule never allows an unnamed watch"
        );
        let urls = PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/apis/*".into(), "/version".into()],
            ..PolicyRule::default()
        };
        let path = |p: &str| Attributes {
            user: UserInfo::default(),
            verb: "get".into(),
            resource: None,
            path: p.into(),
        };
        assert!(rule_allows(&urls, &path("/apis/apps/v1")));
        assert!(rule_allows(&urls, &path("/version")));
        assert!(!rule_allows(&urls, &path("/version/x")));
        assert!(!rule_allows(&urls, &ask("get", "", "pods", "", "")));
    }
}
