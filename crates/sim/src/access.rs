//! The simulator's own clients: who a request comes from, what it asks in
//! the authorizer's terms, and (with `SimConfig::authorization` set to
//! `Rbac`) whether RBAC lets it, answered 401 or 403 as kube-apiserver
//! answers them.
//!
//! - Authentication: a `Authorization: Bearer TOKEN` header names a
//!   configured user whose token is valid for the API server's own
//!   audiences (`SimConfig::api_audiences`); any other token is 401
//!   `Unauthorized`. A request without one is `system:anonymous` in group
//!   `system:unauthenticated`, as with kube-apiserver's default anonymous
//!   authentication. Every authenticated user is also in
//!   `system:authenticated` (k8s.io/apiserver's `AuthenticatedGroupAdder`).
//! - Request attributes follow k8s.io/apiserver's `RequestInfoFactory`
//!   (pkg/endpoints/request/requestinfo.go): `/api/v1/...` and
//!   `/apis/GROUP/VERSION/...` with a resource are resource requests (verb
//!   get, list, watch, create, update, patch, delete or deletecollection;
//!   `namespaces/NS` sets the namespace, and a namespace object is in its
//!   own namespace); everything else (discovery, `/version`) is a
//!   non-resource request whose verb is the lowercase HTTP method.
//! - A denial is 403 `Forbidden` with the message of k8s.io/apiserver's
//!   `responsewriters.Forbidden` and details naming the group and resource.
//!
//! `/debug/` (faults and counters) is the simulator's own back door and is
//! never authenticated or authorized.

use super::SimError;
use super::auth::SimUser;
use super::rbac::authorizer::{Attributes, Decision, ResourceAttributes, UserInfo};

pub(crate) const ANONYMOUS: &str = "system:anonymous";
pub(crate) const UNAUTHENTICATED: &str = "system:unauthenticated";
pub(crate) const AUTHENTICATED: &str = "system:authenticated";

/// The groups an authenticated user has: its own and `system:authenticated`.
pub(crate) fn authenticated_groups(user: &SimUser) -> Vec<String> {
    let mut groups = user.groups.clone();
    if !groups.iter().any(|g| g == AUTHENTICATED) {
        groups.push(AUTHENTICATED.to_owned());
    }
    groups
}

/// The anonymous user.
pub(crate) fn anonymous() -> UserInfo {
    UserInfo {
        name: ANONYMOUS.to_owned(),
        groups: vec![UNAUTHENTICATED.to_owned()],
    }
}

/// The bearer token of an `Authorization` header value, if it is one.
pub(crate) fn bearer(header: Option<&str>) -> Option<&str> {
    let value = header?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// What a request asks, in the authorizer's terms. `segs` are the path's
/// non-empty segments; `watch` is the request's `watch` parameter.
pub(crate) fn request_attributes(
    user: UserInfo,
    method: &str,
    path: &str,
    segs: &[&str],
    watch: bool,
) -> Attributes {
    let non_resource = || Attributes {
        user: user.clone(),
        verb: method.to_ascii_lowercase(),
        resource: None,
        path: path.to_owned(),
    };
    let (group, rest) = match segs {
        ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
        ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest),
        _ => return non_resource(),
    };
    let mut namespace = "";
    let mut parts = rest;
    if let ["namespaces", ns, tail @ ..] = rest {
        namespace = ns;
        // A namespace's own subresources stay with the namespace.
        if !tail.is_empty() && tail[0] != "status" && tail[0] != "finalize" {
            parts = tail;
        }
    }
    let resource = parts[0];
    let name = parts.get(1).copied().unwrap_or("");
    let subresource = parts.get(2).copied().unwrap_or("");
    let verb = match (method, name.is_empty()) {
        ("GET" | "HEAD", _) if watch => "watch",
        ("GET" | "HEAD", true) => "list",
        ("GET" | "HEAD", false) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "deletecollection",
        ("DELETE", false) => "delete",
        (other, _) => {
            return Attributes {
                verb: other.to_ascii_lowercase(),
                ..non_resource()
            };
        }
    };
    Attributes {
        user,
        verb: verb.to_owned(),
        resource: Some(ResourceAttributes {
            namespace: namespace.to_owned(),
            group: group.to_owned(),
            resource: resource.to_owned(),
            subresource: subresource.to_owned(),
            name: name.to_owned(),
        }),
        path: path.to_owned(),
    }
}

/// The 403 for a denied request (`responsewriters.Forbidden` and
/// `apierrors.NewForbidden`).
pub(crate) fn forbidden(attrs: &Attributes, decision: &Decision) -> SimError {
    let user = &attrs.user.name;
    let (what, group, resource, name) = match &attrs.resource {
        None => (
            format!("User {user:?} cannot {} path {:?}", attrs.verb, attrs.path),
            String::new(),
            String::new(),
            String::new(),
        ),
        Some(r) => {
            let resource = if r.subresource.is_empty() {
                r.resource.clone()
            } else {
                format!("{}/{}", r.resource, r.subresource)
            };
            let scope = if r.namespace.is_empty() {
                "at the cluster scope".to_owned()
            } else {
                format!("in the namespace {:?}", r.namespace)
            };
            (
                format!(
                    "User {user:?} cannot {} resource {resource:?} in API group {:?} {scope}",
                    attrs.verb, r.group
                ),
                r.group.clone(),
                r.resource.clone(),
                r.name.clone(),
            )
        }
    };
    let what = if decision.reason.is_empty() {
        what
    } else {
        format!("{what}: {}", decision.reason)
    };
    let qualified = if group.is_empty() {
        resource.clone()
    } else {
        format!("{resource}.{group}")
    };
    let message = match (qualified.is_empty(), name.is_empty()) {
        (true, _) => format!("forbidden: {what}"),
        (false, true) => format!("{qualified} is forbidden: {what}"),
        (false, false) => format!("{qualified} {name:?} is forbidden: {what}"),
    };
    SimError::Forbidden {
        message,
        group,
        resource,
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::{bearer, forbidden, request_attributes};
    use crate::rbac::authorizer::{Decision, UserInfo};

    fn attrs(method: &str, path: &str, watch: bool) -> super::Attributes {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let user = UserInfo {
            name: "X".into(),
            groups: vec![],
        };
        request_attributes(user, method, path, &segs, watch)
    }

    #[test]
    fn requests_read_as_request_info_reads_them() {
        let a = attrs("GET", "/api/v1/pods", false);
        let r = a.resource.clone().unwrap();
        assert_eq!(
            (a.verb.as_str(), r.namespace.as_str(), r.resource.as_str()),
            ("list", "", "pods")
        );
        let a = attrs("GET", "/api/v1/namespaces/web/pods", true);
        assert_eq!(a.verb, "watch");
        assert_eq!(a.resource.unwrap().namespace, "web");
        let a = attrs(
            "GET",
            "/apis/apps/v1/namespaces/web/deployments/d/scale",
            false,
        );
        let r = a.resource.unwrap();
        assert_eq!(
            (
                a.verb.as_str(),
                r.group.as_str(),
                r.name.as_str(),
                r.subresource.as_str()
            ),
            ("get", "apps", "d", "scale")
        );
        let a = attrs("GET", "/api/v1/namespaces/web", false);
        let r = a.resource.unwrap();
        assert_eq!(
            (r.resource.as_str(), r.name.as_str(), r.namespace.as_str()),
            ("namespaces", "web", "web"),
            "a namespace is in its own namespace"
        );
        assert_eq!(
            attrs("DELETE", "/api/v1/namespaces/web/pods", false).verb,
            "deletecollection"
        );
        assert_eq!(
            attrs("POST", "/apis/batch/v1/namespaces/x/jobs", false).verb,
            "create"
        );
        let a = attrs("GET", "/apis/apps/v1", false);
        assert!(a.resource.is_none());
        assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", "/apis/apps/v1"));
        assert!(attrs("GET", "/version", false).resource.is_none());
    }

    #[test]
    fn denials_read_as_kube_apiserver_words_them() {
        let no = Decision::default();
        let e = forbidden(&attrs("GET", "/api/v1/pods", false), &no);
        assert_eq!(
            e.to_string(),
            "pods is forbidden: User \"X\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
        );
        let status = e.status();
        assert_eq!(
            (status["code"].as_u64(), status["reason"].as_str()),
            (Some(403), Some("Forbidden"))
        );
        assert_eq!(
            status["details"],
            serde_json::json!({"group": "", "kind": "pods"})
        );
        let e = forbidden(
            &attrs("GET", "/apis/apps/v1/namespaces/web/deployments/d", false),
            &no,
        );
        assert_eq!(
            e.to_string(),
            "deployments.apps \"d\" is forbidden: User \"X\" cannot get resource \"deployments\" in API group \"apps\" in the namespace \"web\""
        );
        assert_eq!(e.status()["details"]["name"], "d");
        let why = Decision {
            allowed: false,
            reason: "RBAC: role.rbac.authorization.k8s.io \"r\" not found".into(),
        };
        let e = forbidden(&attrs("GET", "/apis", false), &why);
        assert_eq!(
            e.to_string(),
            "forbidden: User \"X\" cannot get path \"/apis\": RBAC: role.rbac.authorization.k8s.io \"r\" not found"
        );
    }

    #[test]
    fn only_bearer_tokens_are_read() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer ")), None);
        assert_eq!(bearer(None), None);
    }
}
