//! Authentication and authorization: who a request comes from
//! ([`Principal`]) and what it may see ([`Authorizer::authorize`]).
//!
//! The middleware (`crate::middleware`) authenticates every request except the probes
//! once and stores the [`Principal`] in the request's extensions; handlers
//! take it as an extractor and, before they subscribe, ask
//! [`Authorizer::authorize`] which namespaces of a resource to serve. Hubs and
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
//! # Shape (kube-apiserver's)
//! Authenticators ([`authenticate`]) each turn a request (its token, or
//! its headers and its connection's client certificate) into a
//! [`Principal`], refuse it, or leave it to the next; `--auth` names one or
//! more, tried in a fixed order:
//! - `jwt` ([`jwt`]): signed tokens whose claims grant namespaces and
//!   resources ([`Access::Claims`]); streams end at `exp`.
//! - `oidc` ([`oidc`]): id-tokens of an OpenID Connect issuer, checked as
//!   kube-apiserver checks them; they name a [`User`]; streams end at
//!   `exp`.
//! - `request-header` ([`request_header`]): a front proxy's identity
//!   headers name a [`User`], believed only from a client certificate of
//!   `--requestheader-client-ca-file` with an allowed common name. First,
//!   as it reads no token: a request through the proxy carries none.
//! - `kubernetes` ([`kubernetes`]): TokenReview names a [`User`]; the token
//!   is reviewed again while its streams are open. Last, as it takes any
//!   token.
//! - `none`: alone; one anonymous principal that may see everything.
//!
//! Authorizers ([`authorize`]) are separate and take the principal's
//! access: claims grant by themselves; a [`User`] is authorized by the
//! cluster's RBAC, evaluated locally (`--authorization rbac`) or asked
//! with SubjectAccessReview (`review`), whichever authenticator named it.

mod authenticate;
mod authorize;
pub mod feed;
pub mod jwt;
pub mod kubernetes;
pub mod lease;
pub mod oidc;
mod principal;
pub mod rbac;
pub mod request_header;
mod scope;
pub mod session;
mod token;
mod user;

pub use authorize::AcrossNamespaces;
pub use principal::{Access, Grant, Principal};
pub use token::{TOKEN_PARAM, bearer_token, query_token, strip_token, token_from};
pub use user::{ALL_AUTHENTICATED, User};

use std::sync::Arc;

use crate::config::{AuthConfig, AuthMethod, AuthorizationMode};
use crate::epoch::Epoch;
use crate::hub::SubscriptionContext;
use crate::status::ApiError;
use crate::upstream::Informers;

/// A claim that is a number of seconds since the epoch (`exp`, `iat`),
/// whole or not: RFC 7519 makes a NumericDate any JSON number, and
/// jsonwebtoken validates `exp` from a fractional one (as go-oidc, which
/// kube-apiserver uses, accepts it), so what it validated must be read
/// here too, or a fractional `exp` would be read as no expiry at all. A
/// fraction is dropped: the instant it names is not yet reached at the
/// second before it. `None` for no claim, a claim that is not a
/// non-negative number, or one past what `u64` holds.
pub(crate) fn claim_seconds(
    claims: &serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Option<u64> {
    let value = claims.get(name)?;
    value.as_u64().or_else(|| {
        let secs = value.as_f64()?;
        // 2^64 as f64: anything from it up does not fit (nor does NaN).
        (0.0..18_446_744_073_709_551_616.0)
            .contains(&secs)
            .then(|| secs.floor() as u64)
    })
}

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
    #[error("{0}")]
    IssuerUnreachable(String),
    #[error("token not accepted: it is not one that --auth {0} takes")]
    NotAccepted(String),
    #[error(
        "not signed in: sign in at /login, or send a token as Authorization: Bearer, the access_token query parameter or the {0} cookie"
    )]
    NotSignedIn(String),
    #[error("cannot load key {0}: {1}")]
    Key(String, String),
    #[error("no front-proxy identity: {0}")]
    RequestHeader(String),
    /// Set-up only (`Auth::new`): a file or setting that cannot be used.
    #[error("{0}")]
    Setup(String),
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
            Error::IssuerUnreachable(_) => "issuer_unreachable",
            Error::NotAccepted(_) => "not_accepted",
            Error::NotSignedIn(_) => "no_token",
            Error::Key(..) => "key",
            Error::RequestHeader(_) => "request_header",
            Error::Setup(_) => "setup",
        }
    }
}

impl From<Error> for ApiError {
    fn from(err: Error) -> ApiError {
        match err {
            Error::Review(_) => ApiError::Unavailable(err.to_string()),
            Error::Key(..) | Error::Setup(_) => {
                ApiError::Unavailable("authentication is misconfigured".into())
            }
            _ => ApiError::Unauthorized(err.to_string()),
        }
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

/// How users' rights are decided: the cluster's RBAC, locally or by the
/// API server.
enum UserAuthorizer {
    /// `--authorization rbac`.
    Rbac(Arc<rbac::Rbac>),
    /// `--authorization review`.
    Review(Arc<kubernetes::Reviewer>),
}

/// The authenticators of one gateway: who a request comes from. What a
/// principal may see is each cluster's [`Authorizer`]'s to say.
pub struct Auth {
    methods: String,
    cookie: String,
    authenticators: Vec<authenticate::Authenticator>,
    oidc: Option<Arc<oidc::Issuer>>,
    /// Signed-in sessions (`--auth oidc`).
    sessions: Option<Arc<session::Sessions>>,
    /// How each cluster's [`Authorizer`] is made.
    authorizers: AuthorizerConfig,
}

/// What every cluster's [`Authorizer`] is made from.
struct AuthorizerConfig {
    /// Some authenticator names users (they need RBAC or reviews).
    names_users: bool,
    /// `--auth kubernetes`: tokens are reviewed by the cluster they are
    /// used on.
    reviews_tokens: bool,
    mode: AuthorizationMode,
    cache_ttl: std::time::Duration,
    token_audiences: Vec<String>,
    /// How long a request waits for what authorization needs loaded first.
    sync_timeout: std::time::Duration,
}

/// What a principal may see in one cluster: that cluster's RBAC,
/// evaluated locally and fed by the cluster's own RBAC objects, or its
/// SubjectAccessReviews; and, under `--auth kubernetes`, the cluster's
/// TokenReviews, since a token is the cluster's to accept.
pub struct Authorizer {
    /// TokenReview and SubjectAccessReview (`--auth kubernetes`, or
    /// `--authorization review`).
    kube: Option<Arc<kubernetes::Reviewer>>,
    /// Whether `kube` reviews tokens (`--auth kubernetes`).
    reviews_tokens: bool,
    /// Present when some authenticator names users.
    users: Option<UserAuthorizer>,
    /// Moves whenever the RBAC index changed (what requests waiting for
    /// the first load wait on).
    rbac_changes: Epoch,
    /// How long a request waits for the RBAC objects' first load.
    sync_timeout: std::time::Duration,
}

impl Auth {
    /// Loads keys (JWT) and sets up the issuer's client (OIDC); each
    /// cluster's authorizer is made by [`Auth::authorizer`].
    pub fn new(cfg: &AuthConfig, sync_timeout: std::time::Duration) -> Result<Auth, Error> {
        let names_users = cfg.uses(AuthMethod::Kubernetes)
            || cfg.uses(AuthMethod::Oidc)
            || cfg.uses(AuthMethod::RequestHeader);
        let oidc = match cfg.uses(AuthMethod::Oidc) {
            true => Some(Arc::new(oidc::Issuer::new(&cfg.oidc, &cfg.sign_in)?)),
            false => None,
        };
        let sessions = match cfg.uses(AuthMethod::Oidc) {
            true => Some(Arc::new(session::Sessions::new(&cfg.sign_in)?)),
            false => None,
        };
        let mut authenticators = Vec::new();
        if cfg.uses(AuthMethod::RequestHeader) {
            let proxy = request_header::RequestHeader::new(&cfg.request_header)?;
            authenticators.push(authenticate::Authenticator::RequestHeader(Box::new(proxy)));
        }
        if cfg.uses(AuthMethod::Jwt) {
            let verifier = jwt::Verifier::new(&cfg.jwt)?;
            authenticators.push(authenticate::Authenticator::Jwt(Box::new(verifier)));
        }
        if let Some(oidc) = &oidc {
            authenticators.push(authenticate::Authenticator::Oidc(oidc.clone()));
        }
        if cfg.uses(AuthMethod::Kubernetes) {
            authenticators.push(authenticate::Authenticator::Kubernetes);
        }
        Ok(Auth {
            methods: cfg.describe(),
            cookie: cfg.cookie.clone(),
            authenticators,
            oidc,
            sessions,
            authorizers: AuthorizerConfig {
                names_users,
                reviews_tokens: cfg.uses(AuthMethod::Kubernetes),
                mode: cfg.authorization,
                cache_ttl: cfg.cache_ttl,
                token_audiences: cfg.token_audiences.clone(),
                sync_timeout,
            },
        })
    }

    /// The authorizer of one cluster, whose API server `client` reviews
    /// tokens and access (`--auth kubernetes`, `--authorization review`).
    pub fn authorizer(&self, client: kube::Client) -> Arc<Authorizer> {
        let cfg = &self.authorizers;
        let kube = (cfg.reviews_tokens
            || (cfg.names_users && cfg.mode == AuthorizationMode::Review))
            .then(|| {
                Arc::new(kubernetes::Reviewer::new(
                    client,
                    cfg.cache_ttl,
                    cfg.token_audiences.clone(),
                ))
            });
        // `kube` is there whenever users are reviewed (above).
        let users = match (cfg.names_users, cfg.mode) {
            (false, _) => None,
            (true, AuthorizationMode::Rbac) => {
                Some(UserAuthorizer::Rbac(Arc::new(rbac::Rbac::new())))
            }
            (true, AuthorizationMode::Review) => kube.clone().map(UserAuthorizer::Review),
        };
        if let (Some(kube), Some(UserAuthorizer::Rbac(rbac))) = (&kube, &users) {
            // A revoked credential's streams wait on their user's access.
            let rbac = rbac.clone();
            kube.on_revoked(Box::new(move |user| rbac.hold(user).changes().advance()));
        }
        Arc::new(Authorizer {
            kube,
            reviews_tokens: cfg.reviews_tokens,
            users,
            rbac_changes: Epoch::default(),
            sync_timeout: cfg.sync_timeout,
        })
    }

    /// Starts what authentication runs in the background: the issuer's
    /// discovery and keys.
    pub fn start(
        &self,
        lifecycle: &Arc<crate::lifecycle::Lifecycle>,
        metrics: &crate::metrics::Metrics,
    ) {
        if let Some(oidc) = &self.oidc {
            let ready = metrics.oidc_issuer_ready(&oidc.config().issuer_url);
            oidc.spawn_keys(lifecycle.clone(), ready);
        }
    }

    /// Whether tokens are reviewed by the API servers (`--auth
    /// kubernetes`): each cluster's, for what is read of it.
    pub fn reviews_tokens(&self) -> bool {
        self.authorizers.reviews_tokens
    }

    /// `principal` as `cluster` knows it, for a request that reads a
    /// cluster other than the one that named it (a stream across
    /// clusters, `/clusters`, a `/ws` subscription naming its cluster): a
    /// principal named by TokenReview (`--auth kubernetes`) is its token
    /// reviewed again by `cluster`, as identities are each cluster's own
    /// (a review it holds within the TTL answers at once); any other
    /// identity (a JWT, an OIDC id-token, a session, a front proxy's) is
    /// the gateway's, and the same in every cluster.
    pub async fn principal_in(
        &self,
        principal: &Principal,
        cluster: &Authorizer,
    ) -> Result<Principal, Error> {
        let Some(credential) = principal.credential() else {
            return Ok(principal.clone());
        };
        match cluster.token_reviewer() {
            Some(reviewer) => reviewer.authenticate(credential.token()).await,
            None => Err(Error::NoToken(self.cookie.clone())),
        }
    }

    /// Whether users are authorized by RBAC objects kubefan reads itself
    /// (`--authorization rbac`): each cluster's informers then read them.
    pub fn reads_rbac(&self) -> bool {
        self.authorizers.names_users && self.authorizers.mode == AuthorizationMode::Rbac
    }

    /// The OpenID Connect issuer, under `--auth oidc`.
    pub fn oidc(&self) -> Option<&Arc<oidc::Issuer>> {
        self.oidc.as_ref()
    }

    /// Signed-in sessions, under `--auth oidc`.
    pub fn sessions(&self) -> Option<&Arc<session::Sessions>> {
        self.sessions.as_ref()
    }

    /// Whether everyone is anonymous (`--auth none`).
    pub fn anonymous(&self) -> bool {
        self.authenticators.is_empty()
    }

    /// The front-proxy authenticator, under `--auth request-header`.
    pub fn request_header(&self) -> Option<&request_header::RequestHeader> {
        self.authenticators.iter().find_map(|a| match a {
            authenticate::Authenticator::RequestHeader(proxy) => Some(&**proxy),
            _ => None,
        })
    }

    /// The cookie a token may be read from (`--auth-cookie`).
    pub fn cookie_name(&self) -> &str {
        &self.cookie
    }
}

impl Authorizer {
    /// Starts what this cluster's authorization runs in the background:
    /// the RBAC feed from the cluster's own informers (`--authorization
    /// rbac`) and the review of held tokens.
    pub fn start(self: &Arc<Self>, informers: Arc<Informers>, cx: SubscriptionContext) {
        if let (Some(kube), true) = (&self.kube, self.reviews_tokens) {
            kube.spawn_rereview(cx.lifecycle.clone());
        }
        if self.rbac().is_some() {
            feed::spawn(self.clone(), informers, cx);
        }
    }

    /// The reviewer of this cluster's tokens, under `--auth kubernetes`.
    pub(crate) fn token_reviewer(&self) -> Option<&Arc<kubernetes::Reviewer>> {
        self.kube.as_ref().filter(|_| self.reviews_tokens)
    }

    /// Whether it can authorize without waiting: its cluster's RBAC
    /// objects are loaded (or it does not read them). Until then a request
    /// it authorizes waits for them, at most the sync timeout.
    pub fn loaded(&self) -> bool {
        self.rbac().is_none_or(|rbac| rbac.synced())
    }

    /// The local RBAC evaluator, under `--authorization rbac`.
    pub fn rbac(&self) -> Option<&Arc<rbac::Rbac>> {
        match &self.users {
            Some(UserAuthorizer::Rbac(rbac)) => Some(rbac),
            _ => None,
        }
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
}
