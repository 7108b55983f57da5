//! TokenReview and SubjectAccessReview, from a configured set of users
//! (token → name, groups) and rules (user or group → verbs, resources,
//! namespaces), counted so tests can prove a client caches them.
//!
//! Rules are RoleBindings in miniature: a rule listing namespaces allows
//! requests in those namespaces; a rule whose namespaces are `["*"]` is a
//! ClusterRoleBinding and also allows cluster-wide requests (no
//! namespace). Nothing else of RBAC (aggregation, resource names,
//! subresources) is simulated. Requests without a token are not
//! authenticated by the simulator itself.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde_json::{Value, json};

use super::SimError;

/// A user the simulated API server knows by its bearer token.
#[derive(Debug, Clone)]
pub struct SimUser {
    pub token: String,
    pub username: String,
    pub groups: Vec<String>,
}

impl SimUser {
    pub fn new(token: &str, username: &str, groups: &[&str]) -> SimUser {
        SimUser {
            token: token.into(),
            username: username.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }
}

/// Who a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    User(String),
    Group(String),
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

    fn allows(&self, user: &str, groups: &[String], req: &Request) -> bool {
        let subject = match &self.subject {
            Subject::User(u) => u == user,
            Subject::Group(g) => groups.contains(g),
        };
        let any = |list: &[String], value: &str| list.iter().any(|x| x == "*" || x == value);
        let resource = if req.group.is_empty() {
            req.resource.clone()
        } else {
            format!("{}.{}", req.resource, req.group)
        };
        let cluster = self.namespaces.iter().any(|n| n == "*");
        let namespace = if req.namespace.is_empty() {
            cluster
        } else {
            any(&self.namespaces, &req.namespace)
        };
        subject && any(&self.verbs, &req.verb) && any(&self.resources, &resource) && namespace
    }
}

/// Reviews answered so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AuthStats {
    pub token_reviews: u64,
    pub access_reviews: u64,
}

#[derive(Default)]
pub(super) struct Authz {
    config: Mutex<(Vec<SimUser>, Vec<SimRule>)>,
    token_reviews: AtomicU64,
    access_reviews: AtomicU64,
}

struct Request {
    verb: String,
    group: String,
    resource: String,
    namespace: String,
}

impl Authz {
    pub(super) fn set_users(&self, users: Vec<SimUser>) {
        self.config.lock().unwrap_or_else(|e| e.into_inner()).0 = users;
    }

    pub(super) fn set_rules(&self, rules: Vec<SimRule>) {
        self.config.lock().unwrap_or_else(|e| e.into_inner()).1 = rules;
    }

    pub(super) fn stats(&self) -> AuthStats {
        AuthStats {
            token_reviews: self.token_reviews.load(Ordering::Relaxed),
            access_reviews: self.access_reviews.load(Ordering::Relaxed),
        }
    }

    /// `POST /apis/authentication.k8s.io/v1/tokenreviews`.
    pub(super) fn token_review(&self, body: &[u8]) -> Result<Value, SimError> {
        self.token_reviews.fetch_add(1, Ordering::Relaxed);
        let review: Value = serde_json::from_slice(body)
            .map_err(|e| SimError::BadRequest(format!("invalid TokenReview: {e}")))?;
        let token = review["spec"]["token"].as_str().unwrap_or("");
        let config = self.config.lock().unwrap_or_else(|e| e.into_inner());
        let status = match config
            .0
            .iter()
            .find(|u| !token.is_empty() && u.token == token)
        {
            Some(user) => json!({
                "authenticated": true,
                "user": {"username": user.username, "groups": user.groups},
            }),
            None => json!({"authenticated": false, "error": "invalid bearer token"}),
        };
        Ok(json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "metadata": {},
            "spec": review["spec"],
            "status": status,
        }))
    }

    /// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`.
    pub(super) fn access_review(&self, body: &[u8]) -> Result<Value, SimError> {
        self.access_reviews.fetch_add(1, Ordering::Relaxed);
        let review: Value = serde_json::from_slice(body)
            .map_err(|e| SimError::BadRequest(format!("invalid SubjectAccessReview: {e}")))?;
        let spec = &review["spec"];
        let attrs = &spec["resourceAttributes"];
        let text = |v: &Value| v.as_str().unwrap_or("").to_string();
        let req = Request {
            verb: text(&attrs["verb"]),
            group: text(&attrs["group"]),
            resource: text(&attrs["resource"]),
            namespace: text(&attrs["namespace"]),
        };
        let user = text(&spec["user"]);
        let groups: Vec<String> = spec["groups"]
            .as_array()
            .map(|g| {
                g.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let config = self.config.lock().unwrap_or_else(|e| e.into_inner());
        let allowed = config.1.iter().any(|r| r.allows(&user, &groups, &req));
        Ok(json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "metadata": {},
            "spec": spec,
            "status": {"allowed": allowed},
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_allow_by_user_group_namespace_and_cluster() {
        let authz = Authz::default();
        authz.set_users(vec![SimUser::new("t", "alice", &["devs"])]);
        authz.set_rules(vec![
            SimRule::read(Subject::User("alice".into()), &["pods"], &["web"]),
            SimRule::read(Subject::Group("ops".into()), &["*"], &["*"]),
        ]);
        let review = authz.token_review(br#"{"spec":{"token":"t"}}"#).unwrap();
        assert_eq!(review["status"]["user"]["username"], "alice");
        let bad = authz.token_review(br#"{"spec":{"token":"x"}}"#).unwrap();
        assert_eq!(bad["status"]["authenticated"], false);
        let sar = |user: &str, groups: &str, ns: &str, resource: &str| {
            let body = format!(
                r#"{{"spec":{{"user":"{user}","groups":{groups},"resourceAttributes":{{"verb":"watch","resource":"{resource}","namespace":"{ns}"}}}}}}"#
            );
            authz.access_review(body.as_bytes()).unwrap()["status"]["allowed"]
                .as_bool()
                .unwrap()
        };
        assert!(sar("alice", "[]", "web", "pods"));
        assert!(!sar("alice", "[]", "db", "pods"));
        assert!(!sar("alice", "[]", "", "pods"));
        assert!(!sar("alice", "[]", "web", "nodes"));
        assert!(sar("bob", r#"["ops"]"#, "", "nodes"));
        assert_eq!(
            authz.stats(),
            AuthStats {
                token_reviews: 2,
                access_reviews: 5
            }
        );
    }
}
