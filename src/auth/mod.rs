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

pub mod jwt;
pub mod kubernetes;
pub mod rbac;
mod token;

pub use token::{TOKEN_PARAM, bearer_token, query_token, strip_token, token_from};

use std::future::{Ready, ready};
use std::sync::Arc;
use std::time::SystemTime;

use actix_web::dev::Payload;
use actix_web::http::header::HeaderMap;
use actix_web::{FromRequest, HttpMessage, HttpRequest};

use crate::config::{AuthConfig, AuthMode};
use crate::hub::scope::{FixedScope, Scope, Scoping};
use crate::status::ApiError;
use crate::upstream::{self, Informers, ResourceInfo};

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

    /// [`Principal::expires`] on tokio's clock, for `sleep_until`.
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        let expires = self.0.expires?;
        let left = expires
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        Some(tokio::time::Instant::now() + left)
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
    kube: Option<kubernetes::Reviewer>,
}

impl Auth {
    /// Loads keys (JWT) or sets up the review client (Kubernetes).
    pub fn new(cfg: &AuthConfig, client: kube::Client) -> Result<Auth, Error> {
        let jwt = match cfg.mode {
            AuthMode::Jwt => Some(jwt::Verifier::new(&cfg.jwt)?),
            _ => None,
        };
        let kube = match cfg.mode {
            AuthMode::Kubernetes => Some(kubernetes::Reviewer::new(
                client,
                cfg.cache_ttl,
                cfg.token_audiences.clone(),
            )),
            _ => None,
        };
        Ok(Auth {
            mode: cfg.mode,
            cookie: cfg.cookie.clone(),
            jwt,
            kube,
        })
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

    /// Resolves `name` and authorizes `verb` on it: the namespaces to
    /// serve (empty: all) for a request naming `requested` (empty: all).
    /// Refusals never tell an unauthorized principal whether the resource
    /// exists.
    pub async fn authorize_name(
        &self,
        principal: &Principal,
        informers: &Informers,
        name: &str,
        verb: Verb,
        requested: &[String],
    ) -> Result<Vec<String>, ApiError> {
        if matches!(principal.access(), Access::Everything) {
            return Ok(requested.to_vec());
        }
        match informers.resolve(name).await {
            Ok(info) => {
                self.authorize(principal, informers, &info, verb, requested)
                    .await
            }
            Err(err @ upstream::Error::UnknownResource(_)) => {
                let (plural, group) = name.split_once('.').unwrap_or((name, ""));
                Err(self
                    .unknown(principal, group, plural, verb, requested, err.into())
                    .await)
            }
            Err(err) => Err(err.into()),
        }
    }

    /// [`Auth::authorize_name`] for a resolved resource.
    pub async fn authorize(
        &self,
        principal: &Principal,
        informers: &Informers,
        info: &ResourceInfo,
        verb: Verb,
        requested: &[String],
    ) -> Result<Vec<String>, ApiError> {
        let resource = info.canonical_name();
        match principal.access() {
            Access::Everything => Ok(requested.to_vec()),
            Access::Claims {
                namespaces,
                resources,
            } => {
                let granted = match resources {
                    Grant::All => true,
                    Grant::Only(names) => {
                        let catalog = informers.catalog().await.unwrap_or_default();
                        names.iter().any(|n| {
                            let n = n.trim().to_ascii_lowercase();
                            n == resource
                                || catalog
                                    .resolve(&n)
                                    .is_some_and(|r| r.canonical_name() == resource)
                        })
                    }
                };
                if !granted {
                    return Err(forbidden(principal, verb, &resource, None));
                }
                narrow(principal, verb, info, &resource, namespaces, requested)
            }
            Access::Kubernetes(user) => {
                let Some(kube) = &self.kube else {
                    return Err(forbidden(principal, verb, &resource, None));
                };
                let attrs = |namespace: &str| kubernetes::Attributes {
                    verb,
                    group: info.api.group.clone(),
                    resource: info.api.plural.clone(),
                    namespace: namespace.to_string(),
                };
                if requested.is_empty() || !info.namespaced {
                    if kube.allowed(user, attrs("")).await? {
                        return Ok(requested.to_vec());
                    }
                    let hint = info
                        .namespaced
                        .then_some("; name the namespaces you may see with ?namespace=");
                    return Err(forbidden(principal, verb, &resource, hint));
                }
                for ns in requested {
                    if !kube.allowed(user, attrs(ns)).await? {
                        return Err(forbidden_in(principal, verb, &resource, ns));
                    }
                }
                Ok(requested.to_vec())
            }
        }
    }

    /// What a stream asking for `requested` namespaces (empty: all) follows
    /// while it is open, when its principal's access narrows it: the
    /// namespaces of its grant (see `hub::scope`). `None` when access does
    /// not narrow it.
    pub fn stream_access(&self, principal: &Principal, requested: &[String]) -> Option<Scoping> {
        match principal.access() {
            Access::Claims {
                namespaces: Grant::Only(names),
                ..
            } => Some(Scoping {
                source: Arc::new(FixedScope::new(Scope::Only(names.clone()))),
                requested: requested.to_vec(),
            }),
            _ => None,
        }
    }

    /// The answer for a resource that does not exist: `not_found` only
    /// for a principal who would be allowed to see it if it did.
    pub async fn unknown(
        &self,
        principal: &Principal,
        group: &str,
        plural: &str,
        verb: Verb,
        requested: &[String],
        not_found: ApiError,
    ) -> ApiError {
        let name = if group.is_empty() {
            plural.to_string()
        } else {
            format!("{plural}.{group}")
        };
        let may_know = match principal.access() {
            Access::Everything => true,
            Access::Claims { resources, .. } => *resources == Grant::All,
            Access::Kubernetes(user) => match &self.kube {
                Some(kube) => {
                    let ns = requested.first().cloned().unwrap_or_default();
                    let attrs = kubernetes::Attributes {
                        verb,
                        group: group.to_string(),
                        resource: plural.to_string(),
                        namespace: ns,
                    };
                    kube.allowed(user, attrs).await.unwrap_or(false)
                }
                None => false,
            },
        };
        if may_know {
            not_found
        } else {
            forbidden(principal, verb, &name, None)
        }
    }
}

/// The namespaces a claim grant lets `requested` see.
fn narrow(
    principal: &Principal,
    verb: Verb,
    info: &ResourceInfo,
    resource: &str,
    granted: &Grant,
    requested: &[String],
) -> Result<Vec<String>, ApiError> {
    match granted {
        Grant::All => Ok(requested.to_vec()),
        Grant::Only(_) if !info.namespaced => Err(forbidden(
            principal,
            verb,
            resource,
            Some(" (a cluster-scoped resource needs a grant of every namespace)"),
        )),
        Grant::Only(names) if requested.is_empty() => {
            if names.is_empty() {
                Err(forbidden(principal, verb, resource, None))
            } else {
                Ok(names.clone())
            }
        }
        Grant::Only(names) => match requested.iter().find(|ns| !names.contains(ns)) {
            Some(ns) => Err(forbidden_in(principal, verb, resource, ns)),
            None => Ok(requested.to_vec()),
        },
    }
}

fn forbidden(principal: &Principal, verb: Verb, resource: &str, hint: Option<&str>) -> ApiError {
    ApiError::Forbidden(format!(
        "{} may not {} {resource}{}",
        principal.name(),
        verb.as_str(),
        hint.unwrap_or("")
    ))
}

fn forbidden_in(principal: &Principal, verb: Verb, resource: &str, ns: &str) -> ApiError {
    ApiError::Forbidden(format!(
        "{} may not {} {resource} in namespace {ns:?}",
        principal.name(),
        verb.as_str()
    ))
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
