//! Who a request comes from: a [`Principal`], and what it may see
//! ([`Access`]): everything, what a JWT's claims grant, or what the
//! cluster's authorizer grants a [`User`].

use std::future::{Ready, ready};
use std::sync::{Arc, LazyLock};
use std::time::SystemTime;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpMessage, HttpRequest};

use super::lease::{Lease, deadline_of};
use super::{User, kubernetes};
use crate::status::ApiError;

/// Names granted by a token claim: everything (`"*"`) or these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    All,
    Only(Vec<String>),
}

impl Grant {
    /// A claim value: `"*"`, a name, or a list of names (one `"*"` in it
    /// grants all). Anything else, or no claim, grants nothing.
    pub fn from_claim(value: Option<&serde_json::Value>) -> Grant {
        let names: Vec<String> = match value {
            Some(serde_json::Value::String(s)) => vec![s.clone()],
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        if names.iter().any(|n| n == "*") {
            Grant::All
        } else {
            Grant::Only(names)
        }
    }
}

/// What a principal may see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// `--auth none`.
    Everything,
    /// JWT claims.
    Claims { namespaces: Grant, resources: Grant },
    /// A user (from TokenReview or an OpenID Connect issuer), authorized
    /// by the cluster's RBAC, locally or with SubjectAccessReview.
    User(User),
}

/// Who a request comes from. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Principal(Arc<PrincipalInner>);

#[derive(Debug)]
struct PrincipalInner {
    name: String,
    expires: Option<SystemTime>,
    access: Access,
    /// A Kubernetes token, held to be reviewed again while streams live.
    credential: Option<Arc<kubernetes::Credential>>,
    /// A signed-in session's expiry, which its refreshes move.
    lease: Option<Arc<Lease>>,
}

impl Principal {
    pub fn new(name: String, expires: Option<SystemTime>, access: Access) -> Principal {
        Principal(Arc::new(PrincipalInner {
            name,
            expires,
            access,
            credential: None,
            lease: None,
        }))
    }

    /// A signed-in session's principal: it expires with `lease`, which
    /// the session's refreshes move.
    pub fn with_lease(name: String, access: Access, lease: Arc<Lease>) -> Principal {
        Principal(Arc::new(PrincipalInner {
            name,
            expires: Some(lease.until()),
            access,
            credential: None,
            lease: Some(lease),
        }))
    }

    /// The lease a session's principal expires with.
    pub fn lease(&self) -> Option<&Arc<Lease>> {
        self.0.lease.as_ref()
    }

    /// This principal, holding `credential` (reviewed again while held).
    pub fn with_credential(self, credential: Arc<kubernetes::Credential>) -> Principal {
        let inner = Arc::try_unwrap(self.0).unwrap_or_else(|shared| PrincipalInner {
            name: shared.name.clone(),
            expires: shared.expires,
            access: shared.access.clone(),
            credential: None,
            lease: shared.lease.clone(),
        });
        Principal(Arc::new(PrincipalInner {
            credential: Some(credential),
            ..inner
        }))
    }

    /// The Kubernetes credential behind this principal, if any.
    pub fn credential(&self) -> Option<&Arc<kubernetes::Credential>> {
        self.0.credential.as_ref()
    }

    /// The one anonymous principal, shared: each anonymous stream holds a
    /// handle on it, not a copy (136 bytes per stream, heaptrack at 4,000
    /// `/ws` sockets).
    pub fn anonymous() -> Principal {
        static ANONYMOUS: LazyLock<Principal> =
            LazyLock::new(|| Principal::new("anonymous".into(), None, Access::Everything));
        ANONYMOUS.clone()
    }

    /// The subject or user name: for logs and per-principal limits.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// When the credentials expire; streams end then (a session's lease
    /// may move it later).
    pub fn expires(&self) -> Option<SystemTime> {
        match &self.0.lease {
            Some(lease) => Some(lease.until()),
            None => self.0.expires,
        }
    }

    /// [`Principal::expires`] on tokio's clock, for `sleep_until`; `None`
    /// also for an expiry too far away for that clock (a token's `exp`
    /// can be any number).
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        deadline_of(self.expires()?)
    }

    pub fn access(&self) -> &Access {
        &self.0.access
    }

    /// Whether `other` is the same caller with the same rights: the same
    /// name and access (a refreshed token of the same user qualifies; its
    /// expiry does not matter). What one caller holds for later (a
    /// `continue` token) is served only to the same caller.
    pub fn same_caller(&self, other: &Principal) -> bool {
        self.0.name == other.0.name && self.0.access == other.0.access
    }
}

/// Handlers take the principal the middleware stored; a request that
/// reached a handler without one (a route it does not cover) is refused.
impl FromRequest for Principal {
    type Error = ApiError;
    type Future = Ready<Result<Principal, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(
            req.extensions()
                .get::<Principal>()
                .cloned()
                .ok_or_else(|| ApiError::Unauthorized("not authenticated".into())),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_grant_all_some_or_nothing() {
        use serde_json::json;
        assert_eq!(Grant::from_claim(Some(&json!("*"))), Grant::All);
        assert_eq!(Grant::from_claim(Some(&json!(["a", "*"]))), Grant::All);
        assert_eq!(
            Grant::from_claim(Some(&json!(["a", 1, "b"]))),
            Grant::Only(vec!["a".into(), "b".into()])
        );
        assert_eq!(Grant::from_claim(None), Grant::Only(vec![]));
        assert_eq!(
            Grant::from_claim(Some(&json!({"a": 1}))),
            Grant::Only(vec![])
        );
    }
}
