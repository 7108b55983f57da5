//! The authentication and authorization section of the configuration
//! (`crate::auth` reads it).

use std::path::PathBuf;
use std::time::Duration;

use super::Error;

/// One way clients prove who they are (see `crate::auth`). `--auth` takes
/// one or more, comma-separated; `none` only alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum AuthMethod {
    /// Everyone may see everything the gateway serves: loopback only,
    /// unless `allow_unauthenticated`.
    None,
    /// Signed JWTs whose claims grant namespaces and resources.
    Jwt,
    /// OpenID Connect id-tokens from `--oidc-issuer-url`, checked as
    /// kube-apiserver checks them; the user and groups they name are
    /// authorized by the cluster's RBAC.
    Oidc,
    /// Kubernetes bearer tokens, reviewed by the API server (TokenReview).
    Kubernetes,
    /// A front proxy's identity headers (`X-Remote-User`, `X-Remote-Group`),
    /// trusted only from a client certificate of
    /// `--requestheader-client-ca-file`, as kube-apiserver trusts them; the
    /// user and groups they name are authorized by the cluster's RBAC.
    RequestHeader,
}

impl AuthMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::None => "none",
            AuthMethod::Jwt => "jwt",
            AuthMethod::Oidc => "oidc",
            AuthMethod::Kubernetes => "kubernetes",
            AuthMethod::RequestHeader => "request-header",
        }
    }
}

/// How a user's rights are decided (users come from `oidc`, `kubernetes`
/// and `request-header`; `jwt` tokens carry their grants in claims).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthorizationMode {
    /// Locally, from the cluster's Roles, RoleBindings, ClusterRoles and
    /// ClusterRoleBindings (one shared informer each): all-namespace
    /// streams are narrowed to what the user may see, and follow RBAC
    /// changes while open. Sees only RBAC.
    #[default]
    Rbac,
    /// A SubjectAccessReview per decision (cached): what the API server's
    /// whole authorizer chain answers (webhooks, Node, ABAC too).
    Review,
}

/// JWT verification settings.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// A file holding the HS256/384/512 shared secret (surrounding
    /// whitespace is trimmed).
    pub secret_file: Option<PathBuf>,
    /// PEM public keys (RSA, EC or Ed25519), tried in turn.
    pub public_key_files: Vec<PathBuf>,
    /// A JWKS file; keys are chosen by `kid`, and the file is re-read when
    /// its modification time changes.
    pub jwks_file: Option<PathBuf>,
    /// Accepted issuers (`iss`); empty: not checked.
    pub issuers: Vec<String>,
    /// Accepted audiences (`aud`); empty: not checked.
    pub audiences: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// The claim listing granted namespaces (`"*"`: all).
    pub namespaces_claim: String,
    /// The claim listing granted resources (`"*"`: all).
    pub resources_claim: String,
}

impl Default for JwtConfig {
    fn default() -> Self {
        JwtConfig {
            secret_file: None,
            public_key_files: Vec::new(),
            jwks_file: None,
            issuers: Vec::new(),
            audiences: Vec::new(),
            leeway: Duration::from_secs(30),
            namespaces_claim: "kubefan/namespaces".into(),
            resources_claim: "kubefan/resources".into(),
        }
    }
}

/// The JOSE algorithms `--oidc-signing-algs` may name: kube-apiserver's
/// list (asymmetric only; an HMAC key would be a secret shared with
/// every relying party).
pub const OIDC_SIGNING_ALGS: &[&str] = &[
    "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512",
];

/// `--auth oidc`: kube-apiserver's `--oidc-*` flags, with their names
/// and meanings (`k8s.io/apiserver/plugin/pkg/authenticator/token/oidc`).
#[derive(Debug, Clone)]
pub struct OidcConfig {
    /// The issuer (`iss`), https; its discovery document is at
    /// `/.well-known/openid-configuration` under it.
    pub issuer_url: String,
    /// The audience tokens must name (`aud`).
    pub client_id: String,
    /// PEM CA certificates the issuer's certificate is checked against;
    /// none: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The claim naming the user.
    pub username_claim: String,
    /// Put before every user name; `None`: kube-apiserver's default rule
    /// (the issuer URL and `#`, unless the claim is `email`); `-`: none.
    pub username_prefix: Option<String>,
    /// The claim listing the user's groups (a string or a list of them).
    pub groups_claim: Option<String>,
    /// Put before every group name.
    pub groups_prefix: String,
    /// Claims a token must carry with exactly these (string) values.
    pub required_claims: Vec<(String, String)>,
    /// Accepted `alg`s (from [`OIDC_SIGNING_ALGS`]).
    pub signing_algs: Vec<String>,
}

impl Default for OidcConfig {
    fn default() -> Self {
        OidcConfig {
            issuer_url: String::new(),
            client_id: String::new(),
            ca_file: None,
            username_claim: "sub".into(),
            username_prefix: None,
            groups_claim: None,
            groups_prefix: String::new(),
            required_claims: Vec::new(),
            signing_algs: vec!["RS256".into()],
        }
    }
}

impl OidcConfig {
    /// The prefix put before user names, by kube-apiserver's rule
    /// (`pkg/kubeapiserver/options/authentication.go`): unset, the issuer
    /// URL and `#` unless the claim is `email` (kubernetes/kubernetes#31380);
    /// `-`, none.
    pub fn username_prefix(&self) -> String {
        match self.username_prefix.as_deref() {
            Some("-") => String::new(),
            Some(prefix) if !prefix.is_empty() => prefix.to_string(),
            _ if self.username_claim == "email" => String::new(),
            _ => format!("{}#", self.issuer_url),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        let bad = |why: String| Err(Error::Oidc(why));
        if self.issuer_url.is_empty() {
            return bad("--auth oidc needs --oidc-issuer-url".into());
        }
        let Some(rest) = self.issuer_url.strip_prefix("https://") else {
            return bad(format!(
                "--oidc-issuer-url {:?} must be https:// (tokens are verified with keys fetched from it)",
                self.issuer_url
            ));
        };
        if rest.is_empty() || self.issuer_url.contains(['?', '#']) {
            return bad(format!(
                "--oidc-issuer-url {:?} must be a URL without query or fragment",
                self.issuer_url
            ));
        }
        if self.client_id.is_empty() {
            return bad("--auth oidc needs --oidc-client-id (the audience its tokens name)".into());
        }
        if self.username_claim.is_empty() {
            return bad("--oidc-username-claim must not be empty".into());
        }
        if self.signing_algs.is_empty() {
            return bad("--oidc-signing-algs must name at least one algorithm".into());
        }
        if let Some(alg) = self
            .signing_algs
            .iter()
            .find(|a| !OIDC_SIGNING_ALGS.contains(&a.as_str()))
        {
            return bad(format!(
                "--oidc-signing-algs: {alg:?} is not one of {}",
                OIDC_SIGNING_ALGS.join(", ")
            ));
        }
        Ok(())
    }
}

/// Sign-in in the browser (`--auth oidc`): the authorization-code flow
/// with PKCE, and sessions kept in an encrypted cookie.
#[derive(Debug, Clone)]
pub struct SignInConfig {
    /// Scopes asked for (`openid` is always asked).
    pub scopes: Vec<String>,
    /// Where the issuer sends the browser back; `None`: `/oauth2/callback`
    /// on the host the sign-in started on.
    pub redirect_url: Option<String>,
    /// The client secret (a confidential client); none: a public client,
    /// PKCE alone.
    pub client_secret_file: Option<PathBuf>,
    /// The key sessions are sealed with, shared by every replica (at least
    /// 32 bytes); none: a random key of this process (sessions end with it
    /// and do not reach other replicas).
    pub session_secret_file: Option<PathBuf>,
    /// The longest a session lasts, refreshes included.
    pub session_max_age: Duration,
}

impl Default for SignInConfig {
    fn default() -> Self {
        SignInConfig {
            scopes: vec!["openid".into(), "email".into(), "profile".into()],
            redirect_url: None,
            client_secret_file: None,
            session_secret_file: None,
            session_max_age: Duration::from_secs(12 * 3600),
        }
    }
}

/// `--auth request-header`: kube-apiserver's `--requestheader-*` flags,
/// with their names, defaults and meanings
/// (`k8s.io/apiserver/pkg/server/options/authentication.go`,
/// `RequestHeaderAuthenticationOptions`), and two of kubefan's own.
#[derive(Debug, Clone)]
pub struct RequestHeaderConfig {
    /// PEM CA certificates: only a client certificate they sign may
    /// send identity headers.
    pub client_ca_file: Option<PathBuf>,
    /// Common names such a certificate may have; empty: any it signs.
    pub allowed_names: Vec<String>,
    /// Headers naming the user, tried in order: the first non-empty wins.
    pub username_headers: Vec<String>,
    /// Headers naming groups: every value of every one of them.
    pub group_headers: Vec<String>,
    /// Prefixes of headers carrying extras (`X-Remote-Extra-Scopes`):
    /// cleared from the request, not used (see `auth::request_header`).
    pub extra_headers_prefix: Vec<String>,
    /// kubefan's own: also split each group header value at this
    /// character (oauth2-proxy joins groups with `,` into one value).
    /// `None`: kube-apiserver's rule, one value is one group.
    pub group_separator: Option<char>,
    /// kubefan's own: a request naming more groups is refused.
    pub max_groups: usize,
}

impl Default for RequestHeaderConfig {
    fn default() -> Self {
        RequestHeaderConfig {
            client_ca_file: None,
            allowed_names: Vec::new(),
            username_headers: vec!["X-Remote-User".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_headers_prefix: vec!["X-Remote-Extra-".into()],
            group_separator: None,
            max_groups: 512,
        }
    }
}

impl RequestHeaderConfig {
    fn validate(&self) -> Result<(), Error> {
        let bad = |why: String| Err(Error::RequestHeader(why));
        if self.client_ca_file.is_none() {
            return bad("--auth request-header needs --requestheader-client-ca-file: identity headers are trusted only from a client (the front proxy) whose TLS client certificate that CA signed; from anyone else they would let any caller name any user".into());
        }
        if self.username_headers.is_empty() {
            return bad("--requestheader-username-headers must name at least one header".into());
        }
        for (flag, names) in [
            ("--requestheader-username-headers", &self.username_headers),
            ("--requestheader-group-headers", &self.group_headers),
            (
                "--requestheader-extra-headers-prefix",
                &self.extra_headers_prefix,
            ),
        ] {
            // kube-apiserver's `trimHeaders`: an empty name is an error.
            if let Some(name) = names.iter().find(|n| {
                n.trim().is_empty()
                    || actix_web::http::header::HeaderName::from_bytes(n.trim().as_bytes()).is_err()
            }) {
                return bad(format!("{flag}: {name:?} is not a header name"));
            }
        }
        if self.max_groups == 0 {
            return bad("--requestheader-max-groups must be at least 1".into());
        }
        Ok(())
    }
}

/// Parses one `--oidc-required-claim` value, `key=value`.
pub fn parse_required_claim(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => Err(format!("{text:?} is not key=value")),
    }
}

/// Authentication and authorization.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// The authenticators, tried in a fixed order (see `crate::auth`).
    pub methods: Vec<AuthMethod>,
    pub jwt: JwtConfig,
    pub oidc: OidcConfig,
    pub sign_in: SignInConfig,
    pub request_header: RequestHeaderConfig,
    /// The cookie a token may be read from.
    pub cookie: String,
    /// How long TokenReview / SubjectAccessReview answers are reused; a
    /// token with open streams is reviewed again after this long.
    pub cache_ttl: Duration,
    /// Allow no authentication on a non-loopback address.
    pub allow_unauthenticated: bool,
    /// Audiences sent in TokenReviews (`spec.audiences`): tokens must be
    /// minted for one of them. Empty: the API server's own audience.
    pub token_audiences: Vec<String>,
    /// How users (from `oidc`, `kubernetes` and `request-header`) are
    /// authorized.
    pub authorization: AuthorizationMode,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            methods: vec![AuthMethod::None],
            jwt: JwtConfig::default(),
            oidc: OidcConfig::default(),
            sign_in: SignInConfig::default(),
            request_header: RequestHeaderConfig::default(),
            cookie: "kubefan_token".into(),
            cache_ttl: Duration::from_secs(10),
            allow_unauthenticated: false,
            token_audiences: Vec::new(),
            authorization: AuthorizationMode::Rbac,
        }
    }
}

impl AuthConfig {
    /// `--auth none` (or nothing): everyone is anonymous.
    pub fn anonymous(&self) -> bool {
        self.methods.iter().all(|m| *m == AuthMethod::None)
    }

    pub fn uses(&self, method: AuthMethod) -> bool {
        self.methods.contains(&method)
    }

    /// Only `method`: what tests and the simplest set-ups configure.
    pub fn set(&mut self, method: AuthMethod) {
        self.methods = vec![method];
    }

    /// The methods as `--auth` spells them, for logs.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.methods.iter().map(|m| m.as_str()).collect();
        names.join(",")
    }

    pub(super) fn validate(&self) -> Result<(), Error> {
        if self.methods.len() > 1 && self.uses(AuthMethod::None) {
            return Err(Error::NoneWithOthers);
        }
        if self.uses(AuthMethod::Jwt)
            && self.jwt.secret_file.is_none()
            && self.jwt.public_key_files.is_empty()
            && self.jwt.jwks_file.is_none()
        {
            return Err(Error::NoJwtKeys);
        }
        // Authenticators are tried in a fixed order, jwt first; with no
        // issuer named it takes every JWT, and ServiceAccount tokens and
        // id-tokens are JWTs: the later method would never see one.
        if self.uses(AuthMethod::Jwt) && self.jwt.issuers.is_empty() {
            let shadowed: Vec<&str> = [AuthMethod::Oidc, AuthMethod::Kubernetes]
                .into_iter()
                .filter(|m| self.uses(*m))
                .map(AuthMethod::as_str)
                .collect();
            if !shadowed.is_empty() {
                return Err(Error::JwtTakesEveryToken(shadowed.join(" and ")));
            }
        }
        if self.uses(AuthMethod::Oidc) {
            self.oidc.validate()?;
            if let Some(url) = &self.sign_in.redirect_url
                && !(url.starts_with("https://")
                    || url.starts_with("http://")
                    || url.starts_with('/'))
            {
                return Err(Error::Oidc(format!(
                    "--oidc-redirect-url {url:?} must be an absolute URL or a path"
                )));
            }
        }
        if self.uses(AuthMethod::RequestHeader) {
            self.request_header.validate()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_username_prefix_follows_kube_apiservers_rule() {
        let mut cfg = OidcConfig {
            issuer_url: "https://idp.example".into(),
            ..OidcConfig::default()
        };
        assert_eq!(cfg.username_prefix(), "https://idp.example#");
        cfg.username_claim = "email".into();
        assert_eq!(cfg.username_prefix(), "");
        cfg.username_prefix = Some("oidc:".into());
        assert_eq!(cfg.username_prefix(), "oidc:");
        cfg.username_claim = "sub".into();
        cfg.username_prefix = Some("-".into());
        assert_eq!(cfg.username_prefix(), "");
    }

    #[test]
    fn oidc_settings_are_checked_at_start_with_the_reason() {
        let mut cfg = AuthConfig::default();
        cfg.set(AuthMethod::Oidc);
        let err = |cfg: &AuthConfig| cfg.validate().unwrap_err().to_string();
        assert!(err(&cfg).contains("--oidc-issuer-url"), "{}", err(&cfg));
        cfg.oidc.issuer_url = "http://idp.example".into();
        assert!(err(&cfg).contains("https://"), "{}", err(&cfg));
        cfg.oidc.issuer_url = "https://idp.example".into();
        assert!(err(&cfg).contains("--oidc-client-id"), "{}", err(&cfg));
        cfg.oidc.client_id = "kubefan".into();
        cfg.oidc.signing_algs = vec!["HS256".into()];
        assert!(
            err(&cfg).contains("\"HS256\" is not one of"),
            "{}",
            err(&cfg)
        );
        cfg.oidc.signing_algs = vec!["RS256".into(), "ES256".into()];
        cfg.validate().unwrap();
        cfg.methods = vec![AuthMethod::None, AuthMethod::Oidc];
        assert!(matches!(cfg.validate(), Err(Error::NoneWithOthers)));
        assert_eq!(
            parse_required_claim("hd=example.com").unwrap().1,
            "example.com"
        );
        assert!(parse_required_claim("=x").is_err());
        assert!(parse_required_claim("novalue").is_err());
    }

    #[test]
    fn jwt_without_an_issuer_beside_oidc_or_kubernetes_is_refused_naming_the_flag() {
        for (methods, shadowed) in [
            (vec![AuthMethod::Jwt, AuthMethod::Kubernetes], "kubernetes"),
            (vec![AuthMethod::Kubernetes, AuthMethod::Jwt], "kubernetes"),
            (
                vec![AuthMethod::Jwt, AuthMethod::Oidc, AuthMethod::Kubernetes],
                "oidc and kubernetes",
            ),
        ] {
            let mut cfg = AuthConfig {
                methods,
                ..AuthConfig::default()
            };
            cfg.jwt.secret_file = Some("/s".into());
            cfg.oidc.issuer_url = "https://idp.example".into();
            cfg.oidc.client_id = "kubefan".into();
            let err = cfg.validate().unwrap_err().to_string();
            assert!(
                err.contains("--jwt-issuer") && err.contains(&format!("{shadowed} would never")),
                "{err}"
            );
            cfg.jwt.issuers = vec!["https://tokens.example".into()];
            cfg.validate().unwrap();
        }
        // Alone, jwt may take any JWT.
        let mut cfg = AuthConfig::default();
        cfg.set(AuthMethod::Jwt);
        cfg.jwt.secret_file = Some("/s".into());
        cfg.validate().unwrap();
    }

    #[test]
    fn request_header_settings_are_checked_at_start_with_the_reason() {
        let mut cfg = AuthConfig {
            methods: vec![AuthMethod::RequestHeader, AuthMethod::Kubernetes],
            ..AuthConfig::default()
        };
        let err = |cfg: &AuthConfig| cfg.validate().unwrap_err().to_string();
        assert!(
            err(&cfg).contains("needs --requestheader-client-ca-file"),
            "{}",
            err(&cfg)
        );
        cfg.request_header.client_ca_file = Some("/ca.crt".into());
        cfg.validate().unwrap();
        cfg.request_header.group_headers = vec!["X-Remote-Group".into(), " ".into()];
        assert!(
            err(&cfg).contains("--requestheader-group-headers: \" \""),
            "{}",
            err(&cfg)
        );
        cfg.request_header.group_headers = vec!["bad header".into()];
        assert!(err(&cfg).contains("is not a header name"), "{}", err(&cfg));
        cfg.request_header.group_headers = Vec::new();
        cfg.request_header.username_headers = Vec::new();
        assert!(err(&cfg).contains("at least one header"), "{}", err(&cfg));
    }
}
