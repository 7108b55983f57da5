//! `--auth oidc`: id-tokens of an OpenID Connect issuer, checked as
//! kube-apiserver checks them (its `--oidc-*` flags, with their names and
//! meanings; `k8s.io/apiserver/plugin/pkg/authenticator/token/oidc` and
//! go-oidc's `IDTokenVerifier`):
//!
//! 1. the token is this issuer's when its unverified `iss` is
//!    `--oidc-issuer-url` (else the next authenticator is asked);
//! 2. its `alg` must be one of `--oidc-signing-algs` (RS256 by default;
//!    never `none`, never HMAC), checked before any key is touched, so a
//!    token signed with HS256 and the issuer's public key as the secret
//!    (algorithm confusion) is refused for its `alg`;
//! 3. the signature, by the key its `kid` names (fetched again if unknown,
//!    [`keys`]), or any key of its algorithm when it names none;
//! 4. `iss` exactly, `aud` containing `--oidc-client-id`, `exp` required
//!    and not past (no leeway, as go-oidc), `nbf` not more than five
//!    minutes ahead (go-oidc's leeway);
//! 5. the user its claims name ([`claims`]).
//!
//! Streams end at the token's `exp`, with a 401, as a JWT's do.
//!
//! The JWS and claims checks are jsonwebtoken's (the JWT crate already in
//! the tree, with one crypto backend); the `openidconnect` crate's
//! verifier was not used for bearer tokens because its rules are not
//! kube-apiserver's (it requires `iat` and `sub`, and checks `azp`).

mod claims;
pub mod keys;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::authenticate::Verdict;
use super::jwt::{decode_with, unverified_claims, unverified_header};
use super::{Access, Error, Principal};
use crate::config::{OidcConfig, SignInConfig};
use crate::lifecycle::Lifecycle;
use secrecy::SecretString;

/// How far ahead of the clock a token's `nbf` may be (go-oidc's leeway).
const NBF_LEEWAY: Duration = Duration::from_secs(300);

pub struct Issuer {
    cfg: OidcConfig,
    username_prefix: String,
    algs: Vec<Algorithm>,
    keys: Arc<keys::Keys>,
    http: reqwest::Client,
    /// kubefan as the issuer's client, for sign-in (`crate::signin`).
    sign_in: SignInConfig,
    client_secret: Option<SecretString>,
}

impl Issuer {
    /// Sets up the client that reads the issuer (its CA from
    /// `--oidc-ca-file`, else the system's roots); nothing is fetched
    /// until [`Issuer::spawn_keys`].
    pub fn new(cfg: &OidcConfig, sign_in: &SignInConfig) -> Result<Issuer, Error> {
        let client_secret = match &sign_in.client_secret_file {
            Some(path) => {
                let secret = std::fs::read_to_string(path)
                    .map_err(|e| Error::Key(path.display().to_string(), e.to_string()))?;
                let secret = secret.trim();
                if secret.is_empty() {
                    return Err(Error::Key(path.display().to_string(), "empty".into()));
                }
                Some(SecretString::from(secret))
            }
            None => None,
        };
        let algs = cfg
            .signing_algs
            .iter()
            .map(|a| {
                a.parse::<Algorithm>()
                    .map_err(|_| Error::Key("--oidc-signing-algs".into(), format!("{a:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            // No redirects: the code exchange must not be sent anywhere
            // but the token endpoint (oauth2's advice against SSRF).
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("kubefan/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &cfg.ca_file {
            let pem = std::fs::read(path)
                .map_err(|e| Error::Key(path.display().to_string(), e.to_string()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| Error::Key(path.display().to_string(), e.to_string()))?;
            if certs.is_empty() {
                return Err(Error::Key(
                    path.display().to_string(),
                    "no PEM certificate in it".into(),
                ));
            }
            http = http.tls_built_in_root_certs(false);
            for cert in certs {
                http = http.add_root_certificate(cert);
            }
        }
        let http = http
            .build()
            .map_err(|e| Error::Key("--oidc-issuer-url".into(), e.to_string()))?;
        Ok(Issuer {
            username_prefix: cfg.username_prefix(),
            keys: Arc::new(keys::Keys::new(cfg.issuer_url.clone(), http.clone())),
            cfg: cfg.clone(),
            algs,
            http,
            sign_in: sign_in.clone(),
            client_secret,
        })
    }

    /// Discovers the issuer and follows its keys in the background.
    pub fn spawn_keys(
        &self,
        lifecycle: Arc<Lifecycle>,
        ready: prometheus_client::metrics::gauge::Gauge,
    ) {
        tokio::spawn(self.keys.clone().run(lifecycle, ready));
    }

    /// The issuer's keys (for tests and metrics: how often they were
    /// fetched).
    pub fn keys(&self) -> &keys::Keys {
        &self.keys
    }

    /// A token whose `iss` is this issuer's is verified; others are left
    /// to the next authenticator.
    pub(super) async fn authenticate(&self, token: &str) -> Verdict {
        let Some(claims) = unverified_claims(token) else {
            return Verdict::Pass(Error::Malformed);
        };
        if claims.get("iss").and_then(Value::as_str) != Some(self.cfg.issuer_url.as_str()) {
            return Verdict::Pass(Error::Issuer);
        }
        match self.verify(token).await {
            Ok(principal) => Verdict::Accepted(principal),
            Err(err) => Verdict::Refused(err),
        }
    }

    /// Verifies `token` (see the module doc) and names its user.
    pub async fn verify(&self, token: &str) -> Result<Principal, Error> {
        let verified = self.verify_claims(token).await?;
        Ok(Principal::new(
            verified.user.username.clone(),
            verified.expires,
            Access::User(verified.user),
        ))
    }

    /// [`Issuer::verify`], with the token's claims.
    pub async fn verify_claims(&self, token: &str) -> Result<Verified, Error> {
        let header = unverified_header(token).ok_or(Error::Malformed)?;
        let alg_name = header
            .get("alg")
            .and_then(Value::as_str)
            .ok_or(Error::Malformed)?;
        let alg = match alg_name.parse::<Algorithm>() {
            Ok(alg) if self.algs.contains(&alg) => alg,
            _ => {
                return Err(Error::Invalid(format!(
                    "the token is signed with {alg_name:?}; --oidc-signing-algs accepts {}",
                    self.cfg.signing_algs.join(", ")
                )));
            }
        };
        let kid = header.get("kid").and_then(Value::as_str);
        let mut keys = self.keys.current()?;
        if let Some(kid) = kid
            && !keys.iter().any(|k| k.kid.as_deref() == Some(kid))
        {
            keys = self.keys.refetch().await?;
            if !keys.iter().any(|k| k.kid.as_deref() == Some(kid)) {
                return Err(Error::UnknownKey(kid.chars().take(64).collect()));
            }
        }
        let candidates = keys
            .iter()
            .filter(|k| kid.is_none() || k.kid.as_deref() == kid)
            .filter(|k| k.fits(alg));
        let mut validation = Validation::new(alg);
        validation.leeway = 0;
        validation.validate_nbf = false;
        validation.set_issuer(&[&self.cfg.issuer_url]);
        validation.set_audience(&[&self.cfg.client_id]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims = decode_with(token, candidates, &validation)?;
        not_before(&claims)?;
        let user = claims::user(&self.cfg, &self.username_prefix, &claims)?;
        let expires = crate::auth::claim_seconds(&claims, "exp")
            .and_then(|exp| UNIX_EPOCH.checked_add(Duration::from_secs(exp)));
        Ok(Verified {
            user,
            expires,
            claims,
        })
    }

    /// The settings of `--auth oidc`.
    pub fn config(&self) -> &OidcConfig {
        &self.cfg
    }

    /// The settings of sign-in.
    pub fn sign_in(&self) -> &SignInConfig {
        &self.sign_in
    }

    /// The client that reads the issuer (its CA, no redirects).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// `--oidc-client-secret-file`'s secret: a confidential client.
    pub fn client_secret(&self) -> Option<&SecretString> {
        self.client_secret.as_ref()
    }
}

/// A verified id-token: its user, expiry and claims.
pub struct Verified {
    pub user: super::User,
    pub expires: Option<SystemTime>,
    pub claims: Map<String, Value>,
}

impl Verified {
    /// A claim that is a string.
    pub fn claim(&self, name: &str) -> Option<&str> {
        self.claims.get(name).and_then(Value::as_str)
    }

    /// A claim that is a number of seconds ([`crate::auth::claim_seconds`]).
    pub fn seconds(&self, name: &str) -> Option<u64> {
        crate::auth::claim_seconds(&self.claims, name)
    }
}

/// go-oidc's `nbf` check: refused only when more than [`NBF_LEEWAY`] ahead.
fn not_before(claims: &Map<String, Value>) -> Result<(), Error> {
    let Some(nbf) = claims.get("nbf") else {
        return Ok(());
    };
    let nbf = nbf.as_f64().ok_or(Error::Malformed)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    if now + NBF_LEEWAY.as_secs_f64() < nbf {
        return Err(Error::NotYetValid);
    }
    Ok(())
}
