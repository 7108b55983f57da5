//! JWT verification: HS* from a secret file, RS*/PS*/ES*/EdDSA from PEM
//! public keys or a JWKS file (keys chosen by `kid`, the file re-read when
//! its modification time changes, checked at most once a second).
//!
//! A key only verifies tokens of its own algorithm family (an HMAC secret
//! never verifies an `RS256` token, and the reverse), which rules out
//! algorithm confusion. The signature is checked before any claim; then
//! `exp` (required), `nbf`, `iss` and `aud`, with the configured leeway.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header};
use serde_json::{Map, Value};

use super::authenticate::Verdict;
use super::{Access, Error, Grant, Principal};
use crate::config::JwtConfig;

/// The JWKS file is checked for changes at most this often.
const JWKS_CHECK: Duration = Duration::from_secs(1);

/// A key and the `kid` it answers to, if any.
pub(super) struct Key {
    pub kid: Option<String>,
    /// The JWK's own `alg`, when it names one.
    pub alg: Option<Algorithm>,
    pub key: DecodingKey,
}

impl Key {
    /// Whether this key may verify a token signed with `alg`: the same
    /// family (an HMAC secret never verifies an RSA token, nor the
    /// reverse: no algorithm confusion), and the JWK's own `alg` if it
    /// names one.
    pub fn fits(&self, alg: Algorithm) -> bool {
        self.key.family() == alg.family() && self.alg.is_none_or(|a| a == alg)
    }
}

pub struct Verifier {
    cfg: JwtConfig,
    /// The secret and PEM keys, loaded once.
    fixed: Vec<Key>,
    jwks: Option<Jwks>,
}

struct Jwks {
    path: PathBuf,
    state: Mutex<JwksState>,
}

struct JwksState {
    keys: std::sync::Arc<Vec<Key>>,
    modified: Option<SystemTime>,
    checked: Instant,
}

impl Verifier {
    pub fn new(cfg: &JwtConfig) -> Result<Verifier, Error> {
        let mut fixed = Vec::new();
        if let Some(path) = &cfg.secret_file {
            let secret = read("--jwt-secret-file", path)?;
            let secret = secret.trim_ascii();
            if secret.is_empty() {
                return Err(Error::Key(
                    named("--jwt-secret-file", path),
                    "empty secret".into(),
                ));
            }
            fixed.push(Key {
                kid: None,
                alg: None,
                key: DecodingKey::from_secret(secret),
            });
        }
        for path in &cfg.public_key_files {
            let pem = read("--jwt-public-key-file", path)?;
            let key = DecodingKey::from_rsa_pem(&pem)
                .or_else(|_| DecodingKey::from_ec_pem(&pem))
                .or_else(|_| DecodingKey::from_ed_pem(&pem))
                .map_err(|_| {
                    Error::Key(
                        named("--jwt-public-key-file", path),
                        "not a PEM RSA, EC or Ed25519 public key".into(),
                    )
                })?;
            fixed.push(Key {
                kid: None,
                alg: None,
                key,
            });
        }
        let jwks = match &cfg.jwks_file {
            Some(path) => {
                let (keys, modified) = load_jwks(path)?;
                Some(Jwks {
                    path: path.clone(),
                    state: Mutex::new(JwksState {
                        keys: std::sync::Arc::new(keys),
                        modified,
                        checked: Instant::now(),
                    }),
                })
            }
            None => None,
        };
        Ok(Verifier {
            cfg: cfg.clone(),
            fixed,
            jwks,
        })
    }

    /// [`Verifier::verify`], for tokens that are this verifier's: JWTs,
    /// and with `--jwt-issuer` set, those whose (unverified) `iss` is one
    /// of them (kube-apiserver's `hasCorrectIssuer`). Others go on to the
    /// next authenticator.
    pub(super) fn authenticate(&self, token: &str) -> Verdict {
        let Some(claims) = unverified_claims(token) else {
            return Verdict::Pass(Error::Malformed);
        };
        let iss = claims.get("iss").and_then(Value::as_str);
        if !self.cfg.issuers.is_empty()
            && !iss.is_some_and(|i| self.cfg.issuers.iter().any(|c| c == i))
        {
            return Verdict::Pass(Error::Issuer);
        }
        match self.verify(token) {
            Ok(principal) => Verdict::Accepted(principal),
            Err(err) => Verdict::Refused(err),
        }
    }

    /// Verifies `token` and turns its claims into a principal.
    pub fn verify(&self, token: &str) -> Result<Principal, Error> {
        let header = decode_header(token).map_err(|_| Error::Malformed)?;
        let jwks = self.jwks.as_ref().map(Jwks::current).unwrap_or_default();
        let mut candidates: Vec<&Key> = Vec::new();
        match &header.kid {
            Some(kid) if self.jwks.is_some() => {
                candidates.extend(jwks.iter().filter(|k| k.kid.as_deref() == Some(kid)));
                if candidates.is_empty() && self.fixed.is_empty() {
                    return Err(Error::UnknownKey(kid.clone()));
                }
            }
            _ => candidates.extend(jwks.iter()),
        }
        candidates.extend(self.fixed.iter());
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.cfg.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp"]);
        if self.cfg.issuers.is_empty() {
            validation.iss = None;
        } else {
            validation.set_issuer(&self.cfg.issuers);
            validation.required_spec_claims.insert("iss".into());
        }
        if self.cfg.audiences.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&self.cfg.audiences);
            validation.required_spec_claims.insert("aud".into());
        }
        let candidates = candidates.into_iter().filter(|k| k.fits(header.alg));
        decode_with(token, candidates, &validation).map(|claims| self.principal(&claims))
    }

    fn principal(&self, claims: &Map<String, Value>) -> Principal {
        let name = claims
            .get("sub")
            .and_then(Value::as_str)
            .unwrap_or("unnamed")
            .to_string();
        // `exp` is any number an issuer signed: an instant the clock cannot
        // represent (past the year 292 billion) is no expiry at all rather
        // than an overflow.
        let expires = super::claim_seconds(claims, "exp")
            .and_then(|exp| UNIX_EPOCH.checked_add(Duration::from_secs(exp)))
            .and_then(|at| at.checked_add(self.cfg.leeway));
        Principal::new(
            name,
            expires,
            Access::Claims {
                namespaces: Grant::from_claim(claims.get(&self.cfg.namespaces_claim)),
                resources: Grant::from_claim(claims.get(&self.cfg.resources_claim)),
            },
        )
    }
}

impl Jwks {
    /// The keys, re-read first if the file changed (checked at most every
    /// [`JWKS_CHECK`]). A file that cannot be read or parsed keeps the
    /// previous keys, with a warning.
    fn current(&self) -> std::sync::Arc<Vec<Key>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.checked.elapsed() >= JWKS_CHECK {
            state.checked = Instant::now();
            let modified = std::fs::metadata(&self.path)
                .and_then(|m| m.modified())
                .ok();
            if modified != state.modified {
                match load_jwks(&self.path) {
                    Ok((keys, modified)) => {
                        tracing::info!(path = %self.path.display(), keys = keys.len(), "JWKS reloaded");
                        state.keys = std::sync::Arc::new(keys);
                        state.modified = modified;
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "JWKS not reloaded; keeping the previous keys")
                    }
                }
            }
        }
        state.keys.clone()
    }
}

/// The claims of a JWT, not verified: only to tell whose token it is.
/// `None` for anything that is not three base64url parts with a JSON
/// object in the middle.
pub(super) fn unverified_claims(token: &str) -> Option<Map<String, Value>> {
    unverified_part(token, 1)
}

/// The JOSE header of a JWT, not verified.
pub(super) fn unverified_header(token: &str) -> Option<Map<String, Value>> {
    unverified_part(token, 0)
}

/// Part `index` of a three-part JWT, decoded (base64url) as a JSON object.
fn unverified_part(token: &str, index: usize) -> Option<Map<String, Value>> {
    use base64::Engine;
    let parts: Vec<&str> = token.splitn(4, '.').collect();
    if parts.len() != 3 {
        return None;
    }
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(parts[index].trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A key file as errors name it: its flag and its path.
fn named(flag: &str, path: &Path) -> String {
    format!("{flag} {}", path.display())
}

fn read(flag: &str, path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error::Key(named(flag, path), e.to_string()))
}

fn load_jwks(path: &Path) -> Result<(Vec<Key>, Option<SystemTime>), Error> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let text = read("--jwks-file", path)?;
    let set: JwkSet = serde_json::from_slice(&text)
        .map_err(|e| Error::Key(named("--jwks-file", path), format!("not a JWKS: {e}")))?;
    Ok((keys_of(&set, &path.display().to_string()), modified))
}

/// The keys of a JWKS that can verify signatures; others (encryption
/// keys, unknown types) are skipped with a warning naming `source`.
pub(super) fn keys_of(set: &JwkSet, source: &str) -> Vec<Key> {
    let mut keys = Vec::new();
    for jwk in &set.keys {
        let kid = jwk.common.key_id.clone();
        match DecodingKey::from_jwk(jwk) {
            Ok(key) => keys.push(Key {
                alg: jwk
                    .common
                    .key_algorithm
                    .and_then(|a| a.to_string().parse::<Algorithm>().ok()),
                kid,
                key,
            }),
            Err(err) => {
                tracing::warn!(source, kid = ?kid, error = %err, "JWKS key skipped")
            }
        }
    }
    keys
}

/// Verifies `token` with the first of `keys` whose signature matches, then
/// its claims by `validation`: the claims, or why the token is refused.
pub(super) fn decode_with<'k>(
    token: &str,
    keys: impl IntoIterator<Item = &'k Key>,
    validation: &Validation,
) -> Result<Map<String, Value>, Error> {
    let mut last = Error::BadSignature;
    for key in keys {
        match decode::<Map<String, Value>>(token, &key.key, validation) {
            Ok(data) => return Ok(data.claims),
            Err(err) => match err.kind() {
                ErrorKind::InvalidSignature => last = Error::BadSignature,
                ErrorKind::ExpiredSignature => return Err(Error::Expired),
                ErrorKind::ImmatureSignature => return Err(Error::NotYetValid),
                ErrorKind::InvalidIssuer => return Err(Error::Issuer),
                ErrorKind::InvalidAudience => return Err(Error::Audience),
                ErrorKind::MissingRequiredClaim(c) => {
                    return Err(Error::Invalid(format!("missing claim {c:?}")));
                }
                ErrorKind::InvalidToken
                | ErrorKind::Base64(_)
                | ErrorKind::Json(_)
                | ErrorKind::Utf8(_) => return Err(Error::Malformed),
                _ => last = Error::BadSignature,
            },
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_that_cannot_be_read_is_named_with_its_flag() {
        let missing = PathBuf::from("/nonexistent/kubefan-key");
        for (cfg, flag) in [
            (
                JwtConfig {
                    secret_file: Some(missing.clone()),
                    ..JwtConfig::default()
                },
                "--jwt-secret-file",
            ),
            (
                JwtConfig {
                    public_key_files: vec![missing.clone()],
                    ..JwtConfig::default()
                },
                "--jwt-public-key-file",
            ),
            (
                JwtConfig {
                    jwks_file: Some(missing.clone()),
                    ..JwtConfig::default()
                },
                "--jwks-file",
            ),
        ] {
            let err = Verifier::new(&cfg).err().unwrap().to_string();
            assert!(
                err.starts_with(&format!(
                    "cannot load key {flag} /nonexistent/kubefan-key: "
                )),
                "{err}"
            );
        }
    }
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    fn verifier(secret: &str) -> (Verifier, tempdir::Dir) {
        let dir = tempdir::Dir::new();
        let path = dir.file("secret", secret.as_bytes());
        let cfg = JwtConfig {
            secret_file: Some(path),
            issuers: vec!["iss".into()],
            audiences: vec!["kubefan".into()],
            leeway: Duration::ZERO,
            ..JwtConfig::default()
        };
        (Verifier::new(&cfg).unwrap(), dir)
    }

    /// `claims` signed with HS256 and the verifier's secret.
    fn hs256(claims: &Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            claims,
            &EncodingKey::from_secret(b"s3cret"),
        )
        .unwrap()
    }

    /// Proves the crypto backend is there: without one, this panics.
    #[test]
    fn hs256_verifies_and_claims_grant() {
        let (v, _dir) = verifier("s3cret\n");
        let claims = json!({"sub": "alice", "iss": "iss", "aud": "kubefan", "exp": now() + 60,
            "kubefan/namespaces": ["a"], "kubefan/resources": "*"});
        let token = hs256(&claims);
        let p = v.verify(&token).unwrap();
        assert_eq!(p.name(), "alice");
        let Access::Claims {
            namespaces,
            resources,
        } = p.access()
        else {
            panic!()
        };
        assert_eq!(*namespaces, Grant::Only(vec!["a".into()]));
        assert_eq!(*resources, Grant::All);

        let wrong = encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(b"other"),
        )
        .unwrap();
        assert!(matches!(v.verify(&wrong), Err(Error::BadSignature)));
        assert!(matches!(v.verify("a.b.c"), Err(Error::Malformed)));
        let mut expired = claims.clone();
        expired["exp"] = json!(now() - 10);
        let expired = hs256(&expired);
        assert!(matches!(v.verify(&expired), Err(Error::Expired)));
    }

    #[test]
    fn an_expiry_beyond_what_the_clock_holds_is_no_expiry_not_a_panic() {
        let (v, _dir) = verifier("s3cret");
        for exp in [u64::MAX, i64::MAX as u64] {
            let claims = json!({"sub": "alice", "iss": "iss", "aud": "kubefan", "exp": exp});
            let token = hs256(&claims);
            let p = v.verify(&token).unwrap();
            // Either no expiry, or one whose deadline is computed safely.
            let _ = p.deadline();
        }
    }

    /// RFC 7519's NumericDate is any JSON number: jsonwebtoken accepts a
    /// fractional `exp`, so the stream must still end at it.
    #[test]
    fn a_fractional_expiry_is_an_expiry() {
        let (v, _dir) = verifier("s3cret");
        let exp = now() + 60;
        let claims =
            json!({"sub": "alice", "iss": "iss", "aud": "kubefan", "exp": exp as f64 + 0.5});
        let token = hs256(&claims);
        let p = v.verify(&token).unwrap();
        assert_eq!(p.expires(), Some(UNIX_EPOCH + Duration::from_secs(exp)));
        let mut past = claims.clone();
        past["exp"] = json!((now() - 10) as f64 + 0.5);
        let past = hs256(&past);
        assert!(matches!(v.verify(&past), Err(Error::Expired)));
        let seconds = |exp: Value| {
            super::super::claim_seconds(json!({"exp": exp}).as_object().unwrap(), "exp")
        };
        assert_eq!(seconds(json!(7.9)), Some(7));
        assert_eq!(seconds(json!(u64::MAX)), Some(u64::MAX));
        for no in [json!(-1.5), json!(1e20), json!("7"), json!(null)] {
            assert_eq!(seconds(no.clone()), None, "{no}");
        }
    }

    /// Minimal temporary directory, removed on drop.
    mod tempdir {
        use std::path::PathBuf;

        pub struct Dir(PathBuf);

        impl Dir {
            pub fn new() -> Dir {
                let path =
                    std::env::temp_dir().join(format!("kubefan-jwt-{}", uuid::Uuid::new_v4()));
                std::fs::create_dir_all(&path).unwrap();
                Dir(path)
            }

            pub fn file(&self, name: &str, contents: &[u8]) -> PathBuf {
                let path = self.0.join(name);
                std::fs::write(&path, contents).unwrap();
                path
            }
        }

        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }
}
