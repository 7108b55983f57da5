//! Who the simulated API server's users are, and its review endpoints:
//! TokenReview from the configured users (token → name, groups);
//! SubjectAccessReview, SelfSubjectAccessReview and SelfSubjectRulesReview
//! answered by the RBAC authorizer (`rbac/authorizer.rs`) from the stored
//! RBAC objects, whatever `SimConfig::authorization` is; SelfSubjectReview
//! (`kubectl auth whoami`). Reviews are counted so tests can prove a
//! client caches them.
//!
//! `SimRule` is the tests' shorthand for RBAC: `Sim::set_rules` writes each
//! rule as a ClusterRole bound by a ClusterRoleBinding (namespaces `["*"]`)
//! or by a RoleBinding in each listed namespace, labelled
//! `kubefan-sim/rule`, so a test can change or delete them later like any
//! RBAC object.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde_json::{Value, json};

use super::SimError;
use super::access::authenticated_groups;
use super::rbac::authorizer::{Attributes, Policy, ResourceAttributes, UserInfo};
use super::rbac::{self, PolicyRule};

/// The label on the RBAC objects `Sim::set_rules` writes.
pub(crate) const RULE_LABEL: &str = "kubefan-sim/rule";

/// A user the simulated API server knows by its bearer token.
#[derive(Debug, Clone)]
pub struct SimUser {
    pub token: String,
    pub username: String,
    pub groups: Vec<String>,
    /// The audiences the token is valid for, as a bound service account
    /// token carries them; empty is the API server's own audiences
    /// (`SimConfig::api_audiences`), as a legacy or static token.
    pub audiences: Vec<String>,
}

impl SimUser {
    pub fn new(token: &str, username: &str, groups: &[&str]) -> SimUser {
        SimUser {
            token: token.into(),
            username: username.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            audiences: Vec::new(),
        }
    }

    /// A service account's token: user `system:serviceaccount:NS:NAME` in
    /// groups `system:serviceaccounts` and `system:serviceaccounts:NS`.
    pub fn service_account(token: &str, namespace: &str, name: &str) -> SimUser {
        SimUser::new(
            token,
            &format!("system:serviceaccount:{namespace}:{name}"),
            &[
                "system:serviceaccounts",
                &format!("system:serviceaccounts:{namespace}"),
            ],
        )
    }

    /// The token is valid for `audiences` only (a token minted for them).
    pub fn with_audiences(mut self, audiences: &[&str]) -> SimUser {
        self.audiences = audiences.iter().map(|a| a.to_string()).collect();
        self
    }

    /// The audiences of `requested` (the API server's own when empty) the
    /// token is valid for, in the order asked; an error in
    /// kube-apiserver's words when there are none (pkg/serviceaccount/jwt.go:
    /// "token audiences %q is invalid for the target audiences %q").
    fn audiences_for(&self, requested: &[String], api: &[String]) -> Result<Vec<String>, String> {
        let token = if self.audiences.is_empty() {
            api
        } else {
            &self.audiences
        };
        let requested = if requested.is_empty() { api } else { requested };
        let both: Vec<String> = requested
            .iter()
            .filter(|a| token.contains(a))
            .cloned()
            .collect();
        if both.is_empty() {
            return Err(format!(
                "token audiences {} is invalid for the target audiences {}",
                go_quoted(token),
                go_quoted(requested)
            ));
        }
        Ok(both)
    }
}

/// A string list as Go's `%q` prints a `[]string`: `["a" "b"]`.
fn go_quoted(list: &[String]) -> String {
    let items: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(" "))
}

/// Who a rule applies to: an RBAC subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    User(String),
    Group(String),
    /// A service account (`system:serviceaccount:NAMESPACE:NAME`).
    ServiceAccount {
        namespace: String,
        name: String,
    },
}

impl Subject {
    fn to_json(&self) -> Value {
        match self {
            Subject::User(name) => json!({"kind": "User", "name": name}),
            Subject::Group(name) => json!({"kind": "Group", "name": name}),
            Subject::ServiceAccount { namespace, name } => {
                json!({"kind": "ServiceAccount", "name": name, "namespace": namespace})
            }
        }
    }
}

/// An allow rule. `"*"` matches any verb, resource or namespace; resources
/// are `plural` (core) or `plural.group`.
#[derive(Debug, Clone)]
pub struct SimRule {
    pub subject: Subject,
    pub verbs: Vec<String>,
    pub resources: Vec<String>,
    pub namespaces: Vec<String>,
}

impl SimRule {
    /// Allows `subject` to get, list and watch `resources` in `namespaces`.
    pub fn read(subject: Subject, resources: &[&str], namespaces: &[&str]) -> SimRule {
        SimRule {
            subject,
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            resources: resources.iter().map(|r| r.to_string()).collect(),
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        }
    }

    /// The rule's policy rules: one per API group of its resources.
    fn policy_rules(&self) -> Vec<PolicyRule> {
        let mut rules: Vec<PolicyRule> = Vec::new();
        for resource in &self.resources {
            let (plural, group) = match resource.as_str() {
                "*" => ("*", "*"),
                r => r.split_once('.').unwrap_or((r, "")),
            };
            match rules.iter_mut().find(|r| r.api_groups == [group]) {
                Some(rule) => rule.resources.push(plural.to_owned()),
                None => rules.push(PolicyRule {
                    verbs: self.verbs.clone(),
                    api_groups: vec![group.to_owned()],
                    resources: vec![plural.to_owned()],
                    ..PolicyRule::default()
                }),
            }
        }
        rules
    }

    /// The RBAC objects expressing rule number `i`, as (resource key, object).
    pub(crate) fn objects(&self, i: usize) -> Vec<(&'static str, Value)> {
        let name = format!("kubefan-sim-rule-{i}");
        let meta = |ns: Option<&str>| {
            let mut m = json!({"name": name, "labels": {RULE_LABEL: "true"}});
            if let Some(ns) = ns {
                m["namespace"] = json!(ns);
            }
            m
        };
        let binding = |ns: Option<&str>| {
            json!({
                "metadata": meta(ns),
                "roleRef": {"apiGroup": rbac::GROUP, "kind": "ClusterRole", "name": name},
                "subjects": [self.subject.to_json()],
            })
        };
        let mut out = vec![(
            rbac::CLUSTER_ROLES,
            json!({"metadata": meta(None), "rules": self.policy_rules()}),
        )];
        if self.namespaces.iter().any(|n| n == "*") {
            out.push((rbac::CLUSTER_ROLE_BINDINGS, binding(None)));
        } else {
            for ns in &self.namespaces {
                out.push((rbac::ROLE_BINDINGS, binding(Some(ns))));
            }
        }
        out
    }
}

/// Reviews answered, and requests refused, so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AuthStats {
    pub token_reviews: u64,
    pub access_reviews: u64,
    pub self_access_reviews: u64,
    pub self_rules_reviews: u64,
    /// Requests answered 401 (`AuthorizationMode::Rbac` only).
    pub unauthorized: u64,
    /// Requests answered 403 (`AuthorizationMode::Rbac` only).
    pub forbidden: u64,
}

#[derive(Default)]
pub(super) struct Authz {
    /// `SimConfig::api_audiences`.
    api_audiences: Vec<String>,
    users: Mutex<Vec<SimUser>>,
    /// TokenReviews per token, so a test can tell its users' apart.
    reviews_by_token: Mutex<HashMap<String, u64>>,
    token_reviews: AtomicU64,
    access_reviews: AtomicU64,
    self_access_reviews: AtomicU64,
    self_rules_reviews: AtomicU64,
    unauthorized: AtomicU64,
    forbidden: AtomicU64,
}

/// A string field of a review's JSON, "" when absent.
fn text(v: &Value) -> String {
    v.as_str().unwrap_or("").to_owned()
}

/// A review body that does not decode.
fn undecodable(kind: &str, e: serde_json::Error) -> SimError {
    SimError::BadRequest(format!("invalid {kind}: {e}"))
}

impl Authz {
    pub(super) fn new(api_audiences: Vec<String>) -> Authz {
        Authz {
            api_audiences,
            ..Authz::default()
        }
    }

    pub(super) fn set_users(&self, users: Vec<SimUser>) {
        *self.users.lock().unwrap_or_else(|e| e.into_inner()) = users;
    }

    /// Forgets `token`: later reviews and requests with it fail. False if
    /// no user had it.
    pub(super) fn revoke(&self, token: &str) -> bool {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        let before = users.len();
        users.retain(|u| u.token != token);
        users.len() != before
    }

    /// TokenReviews of `token` answered so far.
    pub(super) fn reviews_of(&self, token: &str) -> u64 {
        let counts = self
            .reviews_by_token
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        counts.get(token).copied().unwrap_or(0)
    }

    pub(super) fn stats(&self) -> AuthStats {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AuthStats {
            token_reviews: n(&self.token_reviews),
            access_reviews: n(&self.access_reviews),
            self_access_reviews: n(&self.self_access_reviews),
            self_rules_reviews: n(&self.self_rules_reviews),
            unauthorized: n(&self.unauthorized),
            forbidden: n(&self.forbidden),
        }
    }

    /// Counts a request refused with `err`.
    pub(super) fn count_refusal(&self, err: &SimError) {
        match err {
            SimError::Unauthorized => self.unauthorized.fetch_add(1, Ordering::Relaxed),
            SimError::Forbidden { .. } => self.forbidden.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }

    /// The user holding `token`, with `system:authenticated`, if the token
    /// is valid for the API server itself (its own audiences).
    pub(super) fn user(&self, token: &str) -> Option<UserInfo> {
        let users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        let user = users.iter().find(|u| u.token == token)?;
        user.audiences_for(&[], &self.api_audiences).ok()?;
        Some(UserInfo {
            name: user.username.clone(),
            groups: authenticated_groups(user),
        })
    }

    /// `POST /apis/authentication.k8s.io/v1/tokenreviews`
    /// (pkg/registry/authentication/tokenreview): the token is checked for
    /// `spec.audiences`, or the API server's own audiences when none are
    /// asked; `status.audiences` are those it is valid for, and the user's
    /// groups include `system:authenticated`.
    pub(super) fn token_review(&self, body: &[u8]) -> Result<Value, SimError> {
        self.token_reviews.fetch_add(1, Ordering::Relaxed);
        let review: Value =
            serde_json::from_slice(body).map_err(|e| undecodable("TokenReview", e))?;
        let token = review["spec"]["token"].as_str().unwrap_or("");
        let requested: Vec<String> = match review["spec"].get("audiences") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => {
                serde_json::from_value(v.clone()).map_err(|e| undecodable("TokenReview", e))?
            }
        };
        *self
            .reviews_by_token
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(token.to_owned())
            .or_default() += 1;
        let users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        let refused = |error: String| json!({"authenticated": false, "user": {}, "error": error});
        let status = match users.iter().find(|u| !token.is_empty() && u.token == token) {
            None => refused("invalid bearer token".into()),
            Some(user) => match user.audiences_for(&requested, &self.api_audiences) {
                Err(e) => refused(e),
                Ok(audiences) => json!({
                    "authenticated": true,
                    "user": {"username": user.username, "groups": authenticated_groups(user)},
                    "audiences": audiences,
                }),
            },
        };
        Ok(json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "metadata": {},
            "spec": review["spec"],
            "status": status,
        }))
    }

    /// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`, answered
    /// by the RBAC authorizer (pkg/registry/authorization/subjectaccessreview
    /// and its validation: exactly one of resourceAttributes and
    /// nonResourceAttributes, a user or a group).
    pub(super) fn access_review(&self, body: &[u8], policy: &Policy) -> Result<Value, SimError> {
        self.access_reviews.fetch_add(1, Ordering::Relaxed);
        let review: Value =
            serde_json::from_slice(body).map_err(|e| undecodable("SubjectAccessReview", e))?;
        let spec = &review["spec"];
        let user = UserInfo {
            name: text(&spec["user"]),
            groups: spec["groups"]
                .as_array()
                .map(|g| {
                    g.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
        };
        let mut errors = Vec::new();
        if user.name.is_empty() && user.groups.is_empty() {
            errors.push(
                "spec.user: Invalid value: \"\": at least one of user or group must be specified",
            );
        }
        let attrs = match review_attributes(spec, user) {
            Ok(attrs) => Some(attrs),
            Err(e) => {
                errors.push(e);
                None
            }
        };
        let Some(attrs) = attrs.filter(|_| errors.is_empty()) else {
            return Err(SimError::Invalid(format!(
                "SubjectAccessReview.authorization.k8s.io \"\" is invalid: {}",
                errors.join(", ")
            )));
        };
        Ok(review_response(
            "SubjectAccessReview",
            spec,
            &policy.authorize(&attrs),
        ))
    }
}

impl Authz {
    /// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`: the
    /// caller's own access (pkg/registry/authorization/selfsubjectaccessreview),
    /// as the server's authorizer decides it: with `always_allow` (the
    /// AlwaysAllow mode, k8s.io/apiserver/pkg/authorization/authorizerfactory
    /// alwaysAllowAuthorizer) everything is allowed, as every request is.
    pub(super) fn self_access_review(
        &self,
        body: &[u8],
        caller: UserInfo,
        policy: &Policy,
        always_allow: bool,
    ) -> Result<Value, SimError> {
        self.self_access_reviews.fetch_add(1, Ordering::Relaxed);
        let review: Value =
            serde_json::from_slice(body).map_err(|e| undecodable("SelfSubjectAccessReview", e))?;
        let spec = &review["spec"];
        let attrs = review_attributes(spec, caller).map_err(|e| {
            SimError::Invalid(format!(
                "SelfSubjectAccessReview.authorization.k8s.io \"\" is invalid: {e}"
            ))
        })?;
        let decision = if always_allow {
            crate::rbac::authorizer::Decision {
                allowed: true,
                reason: String::new(),
            }
        } else {
            policy.authorize(&attrs)
        };
        Ok(review_response("SelfSubjectAccessReview", spec, &decision))
    }

    /// `POST /apis/authorization.k8s.io/v1/selfsubjectrulesreviews`: every
    /// rule that applies to the caller in `spec.namespace`
    /// (pkg/registry/authorization/selfsubjectrulesreview: the namespace is
    /// required; a role that cannot be resolved is the evaluationError).
    pub(super) fn self_rules_review(
        &self,
        body: &[u8],
        caller: UserInfo,
        policy: &Policy,
    ) -> Result<Value, SimError> {
        self.self_rules_reviews.fetch_add(1, Ordering::Relaxed);
        let review: Value =
            serde_json::from_slice(body).map_err(|e| undecodable("SelfSubjectRulesReview", e))?;
        let namespace = text(&review["spec"]["namespace"]);
        if namespace.is_empty() {
            return Err(SimError::BadRequest("no namespace on request".into()));
        }
        let (rules, error) = policy.rules_for(&caller, &namespace);
        let resource_rules: Vec<Value> = rules
            .iter()
            .filter(|r| !r.resources.is_empty())
            .map(|r| {
                let mut rule = json!({"verbs": r.verbs});
                for (field, list) in [
                    ("apiGroups", &r.api_groups),
                    ("resources", &r.resources),
                    ("resourceNames", &r.resource_names),
                ] {
                    if !list.is_empty() {
                        rule[field] = json!(list);
                    }
                }
                rule
            })
            .collect();
        let non_resource_rules: Vec<Value> = rules
            .iter()
            .filter(|r| !r.non_resource_urls.is_empty())
            .map(|r| json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}))
            .collect();
        let mut status = json!({
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": false,
        });
        if let Some(e) = error {
            status["evaluationError"] = json!(e);
        }
        Ok(json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectRulesReview",
            "metadata": {},
            "spec": review["spec"],
            "status": status,
        }))
    }
}

/// `POST /apis/authentication.k8s.io/v1/selfsubjectreviews` (`kubectl auth
/// whoami`): who the caller is.
pub(crate) fn self_subject_review(caller: &UserInfo) -> Value {
    json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "SelfSubjectReview",
        "metadata": {},
        "status": {"userInfo": {"username": caller.name, "groups": caller.groups}},
    })
}

/// The attributes a SubjectAccessReview or SelfSubjectAccessReview spec asks
/// about (pkg/registry/authorization/util: `ResourceAttributesFrom`,
/// `NonResourceAttributesFrom`).
pub(crate) fn review_attributes(spec: &Value, user: UserInfo) -> Result<Attributes, &'static str> {
    let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    match (resource, non_resource) {
        (Some(_), Some(_)) => Err(
            "spec.nonResourceAttributes: Invalid value: cannot be specified in combination with resourceAttributes",
        ),
        (None, None) => Err(
            "spec.resourceAttributes: Invalid value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ),
        (Some(r), None) => Ok(Attributes {
            user,
            verb: text(&r["verb"]),
            resource: Some(ResourceAttributes {
                namespace: text(&r["namespace"]),
                group: text(&r["group"]),
                resource: text(&r["resource"]),
                subresource: text(&r["subresource"]),
                name: text(&r["name"]),
            }),
            path: String::new(),
        }),
        (None, Some(n)) => Ok(Attributes {
            user,
            verb: text(&n["verb"]),
            resource: None,
            path: text(&n["path"]),
        }),
    }
}

/// A review answered: the spec as sent and the decision as its status.
pub(crate) fn review_response(
    kind: &str,
    spec: &Value,
    decision: &crate::rbac::authorizer::Decision,
) -> Value {
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    json!({
        "apiVersion": "authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {},
        "spec": spec,
        "status": status,
    })
}

#[cfg(test)]
mod tests {
    use super::{SimRule, Subject};

    #[test]
    fn a_rule_becomes_a_cluster_role_and_its_bindings() {
        let rule = SimRule::read(
            Subject::Group("devs".into()),
            &["pods", "deployments.apps", "replicasets.apps"],
            &["web", "db"],
        );
        let objects = rule.objects(3);
        let kinds: Vec<&str> = objects.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            kinds,
            [
                "clusterroles.rbac.authorization.k8s.io",
                "rolebindings.rbac.authorization.k8s.io",
                "rolebindings.rbac.authorization.k8s.io"
            ]
        );
        let rules = &objects[0].1["rules"];
        assert_eq!(rules[0]["apiGroups"][0], "");
        assert_eq!(rules[1]["resources"][1], "replicasets");
        assert_eq!(objects[2].1["metadata"]["namespace"], "db");
        assert_eq!(objects[1].1["roleRef"]["name"], "kubefan-sim-rule-3");
        let everywhere = SimRule::read(Subject::User("ops".into()), &["*"], &["*"]).objects(0);
        assert_eq!(everywhere[0].1["rules"][0]["apiGroups"][0], "*");
        assert_eq!(
            everywhere[1].0,
            "clusterrolebindings.rbac.authorization.k8s.io"
        );
    }
}
