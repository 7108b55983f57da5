//! Authentication and authorization: who a request comes from
//! ([`Principal`]) and what it may see ([`Auth::authorize`]).
//!
//! The middleware (`crate::middleware`) authenticates every request except the probes
//! once and stores the [`Principal`] in the request's extensions; handlers
//! take it as an extractor and, before they subscribe, ask
//! [`Auth::authorize`] which namespaces of a resource to serve. Hubs and
//! informers know nothing of principals: one upstream watch serves
//! everyone, and a principal's grant narrows its subscription's namespace
//! filter.
//!
//! # Rules
//! - Authorization is decided before existence is revealed: a principal
//!   that may not see a resource gets 403 whether or not it exists; only
//!   a principal granted every resource learns that a name is unknown
//!   (404).
//! - Asking for every namespace narrows to the granted ones; naming one not
//!   granted is 403; a cluster-scoped resource needs a cluster-wide grant.
//! - Tokens are never logged, and never kept except hashed (SHA-256) as
//!   cache keys.
//!
//! # Modes
//! - `none`: one anonymous principal that may see everything.
//! - `jwt` ([`jwt`]): signed tokens; claims grant namespaces and resources;
//!   streams end at `exp`.
//! - `kubernetes` ([`kubernetes`]): TokenReview for the token,
//!   SubjectAccessReview per subscription, both cached briefly.

mod authorize;
pub mod feed;
pub mod jwt;
pub mod kubernetes;
pub mod rbac;
mod scope;
mod token;

pub use authorize::AcrossNamespaces;
pub use token::{TOKEN_PARAM, bearer_token, query_token, strip_token, token_from};

use std::future::{Ready, ready};
use std::sync::Arc;
use std::time::SystemTime;

use actix_web::dev::Payload;
use actix_web::http::header::HeaderMap;
use actix_web::{FromRequest, HttpMessage, HttpRequest};

use crate::config::{AuthConfig, AuthMode, AuthorizationMode};
use crate::epoch::Epoch;
use crate::hub::SubscriptionContext;
use crate::status::ApiError;
use crate::upstream::Informers;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "no token: send Authorization: Bearer, the access_token query parameter or the {0} cookie"
    )]
    NoToken(String),
    #[error("malformed token")]
    Malformed,
    #[error("invalid token signature")]
    BadSignature,
    #[error("unknown key id {0:?}")]
    UnknownKey(String),
    #[error("token expired")]
    Expired,
    #[error("token not yet valid")]
    NotYetValid,
    #[error("token issuer not accepted")]
    Issuer,
    #[error("token audience not accepted")]
    Audience,
    #[error("invalid token: {0}")]
    Invalid(String),
    #[error("token review failed: {0}")]
    Review(String),
    #[error("cannot load key {0}: {1}")]
    Key(String, String),
}

impl Error {
    /// A bounded word for metrics (`kubefan_auth_failures_total{reason}`).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::NoToken(_) => "no_token",
            Error::Malformed => "malformed",
            Error::BadSignature => "bad_signature",
            Error::UnknownKey(_) => "unknown_key",
            Error::Expired => "expired",
            Error::NotYetValid => "not_yet_valid",
            Error::Issuer => "issuer",
            Error::Audience => "audience",
            Error::Invalid(_) => "invalid",
            Error::Review(_) => "review",
            Error::Key(..) => "key",
        }
    }
}

impl From<Error> for ApiError {
    fn from(err: Error) -> ApiError {
        match err {
            Error::Review(_) => ApiError::Unavailable(err.to_string()),
            Error::Key(..) => ApiError::Unavailable("authentication is misconfigured".into()),
            _ => ApiError::Unauthorized(err.to_string()),
        }
    }
}

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
    /// A Kubernetes user, checked with SubjectAccessReview.
    Kubernetes(kubernetes::UserInfo),
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
}

impl Principal {
    pub fn new(name: String, expires: Option<SystemTime>, access: Access) -> Principal {
        Principal(Arc::new(PrincipalInner {
            name,
            expires,
            access,
            credential: None,
        }))
    }

    /// This principal, holding `credential` (reviewed again while held).
    pub fn with_credential(self, credential: Arc<kubernetes::Credential>) -> Principal {
        let inner = Arc::try_unwrap(self.0).unwrap_or_else(|shared| PrincipalInner {
            name: shared.name.clone(),
            expires: shared.expires,
            access: shared.access.clone(),
            credential: None,
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

    pub fn anonymous() -> Principal {
        Principal::new("anonymous".into(), None, Access::Everything)
    }

    /// The subject or user name: for logs and per-principal limits.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// When the credentials expire; streams end then.
    pub fn expires(&self) -> Option<SystemTime> {
        self.0.expires
    }

    /// [`Principal::expires`] on tokio's clock, for `sleep_until`; `None`
    /// also for an expiry too far away for that clock (a token's `exp`
    /// can be any number).
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        let expires = self.0.expires?;
        let left = expires
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        tokio::time::Instant::now().checked_add(left)
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

/// The Kubernetes verb a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    Get,
    List,
    Watch,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
        }
    }
}

/// The authenticator of one gateway.
pub struct Auth {
    mode: AuthMode,
    cookie: String,
    jwt: Option<jwt::Verifier>,
    kube: Option<Arc<kubernetes::Reviewer>>,
    authorization: AuthorizationMode,
    /// `--authorization rbac`: the cluster's RBAC, evaluated locally.
    rbac: Option<Arc<rbac::Rbac>>,
    /// Moves whenever the RBAC index changed (what requests waiting for
    /// the first load wait on).
    rbac_changes: Epoch,
    /// How long a request waits for the RBAC objects' first load.
    sync_timeout: std::time::Duration,
}

impl Auth {
    /// Loads keys (JWT) or sets up the review client (Kubernetes);
    /// requests wait at most `sync_timeout` for what authorization needs
    /// loaded first.
    pub fn new(
        cfg: &AuthConfig,
        client: kube::Client,
        sync_timeout: std::time::Duration,
    ) -> Result<Auth, Error> {
        let jwt = match cfg.mode {
            AuthMode::Jwt => Some(jwt::Verifier::new(&cfg.jwt)?),
            _ => None,
        };
        let kube = match cfg.mode {
            AuthMode::Kubernetes => Some(Arc::new(kubernetes::Reviewer::new(
                client,
                cfg.cache_ttl,
                cfg.token_audiences.clone(),
            ))),
            _ => None,
        };
        let rbac = (cfg.mode == AuthMode::Kubernetes
            && cfg.authorization == AuthorizationMode::Rbac)
            .then(|| Arc::new(rbac::Rbac::new()));
        if let (Some(kube), Some(rbac)) = (&kube, &rbac) {
            // A revoked credential's streams wait on their user's access.
            let rbac = rbac.clone();
            kube.on_revoked(Box::new(move |user| rbac.hold(user).changes().advance()));
        }
        Ok(Auth {
            mode: cfg.mode,
            cookie: cfg.cookie.clone(),
            jwt,
            kube,
            authorization: cfg.authorization,
            rbac,
            rbac_changes: Epoch::default(),
            sync_timeout,
        })
    }

    /// Starts what authorization runs in the background: the RBAC feed
    /// (`--authorization rbac`) and the review of held tokens.
    pub fn start(self: &Arc<Self>, informers: Arc<Informers>, cx: SubscriptionContext) {
        if let Some(kube) = &self.kube {
            kube.spawn_rereview(cx.lifecycle.clone());
        }
        if self.rbac.is_some() {
            feed::spawn(self.clone(), informers, cx);
        }
    }

    /// The local RBAC evaluator, under `--authorization rbac`.
    pub fn rbac(&self) -> Option<&Arc<rbac::Rbac>> {
        self.rbac.as_ref()
    }

    /// Resolves once the RBAC index has changed after this call (for tests
    /// and for whoever waits on RBAC).
    pub fn rbac_changed(&self) -> impl Future<Output = ()> + '_ {
        let seen = self.rbac_changes.current();
        self.rbac_changes
            .until(move || self.rbac_changes.current() != seen)
    }

    /// TokenReviews sent so far (Kubernetes mode).
    pub fn token_reviews(&self) -> u64 {
        self.kube.as_ref().map_or(0, |k| k.reviews())
    }

    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// The cookie a token may be read from (`--auth-cookie`).
    pub fn cookie_name(&self) -> &str {
        &self.cookie
    }

    /// Who sent `headers` and `query`: 401-class errors for a missing or
    /// invalid token.
    pub async fn authenticate(&self, headers: &HeaderMap, query: &str) -> Result<Principal, Error> {
        if self.mode == AuthMode::None {
            return Ok(Principal::anonymous());
        }
        let token = token_from(headers, query, &self.cookie)
            .ok_or_else(|| Error::NoToken(self.cookie.clone()))?;
        if let Some(jwt) = &self.jwt {
            return jwt.verify(&token);
        }
        match &self.kube {
            Some(kube) => kube.authenticate(&token).await,
            None => Err(Error::Invalid("no authenticator configured".into())),
        }
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
