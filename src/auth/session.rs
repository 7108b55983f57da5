//! Signed-in sessions (`--auth oidc`): who signed in, until when, and how
//! to refresh it, kept in the browser's cookie, encrypted and
//! authenticated (AES-256-GCM, the `cookie` crate's private jar) with a key
//! every replica shares (`--session-secret-file`), so a session made on
//! one replica works on any other without sticky sessions or a shared
//! store. Nothing of a session is kept server-side but the [`Lease`] its
//! open streams on this replica share.
//!
//! A session holds the user and groups the issuer's id-token named
//! (verified by `auth::oidc` when the session was made or refreshed), the
//! id-token's expiry, and the refresh token, if the issuer gave one. It
//! authenticates requests until that expiry; `crate::signin` refreshes it
//! before then, moving the lease of its streams here. The id-token itself
//! is not kept: the cookie stays small, and a request costs one
//! decryption, not a signature check.
//!
//! The sign-in in progress (state, nonce, PKCE verifier, where to go
//! after) is sealed the same way into a second, short-lived cookie.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix_web::http::header::{self, HeaderMap};
use cookie::{Cookie, CookieJar, Key};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::lease::Lease;
use super::{Access, Error, Principal, User};
use crate::config::SignInConfig;

/// The session cookie.
pub const SESSION_COOKIE: &str = "kubefan_session";
/// The sign-in in progress.
pub const SIGNIN_COOKIE: &str = "kubefan_signin";
/// What a refresh's renewal is sealed under ([`Renewal`]): never a
/// cookie, and no session opens under it (the name is authenticated).
pub const RENEWAL: &str = "kubefan_renewal";
/// The longest a sealed cookie may be: browsers keep 4096 bytes of a
/// cookie, its name and attributes included.
pub const MAX_SEALED: usize = 3800;
/// Leases held at most (dead ones are dropped first).
const MAX_LEASES: usize = 100_000;

/// What a session cookie holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SessionData {
    /// A random id: this session's streams on a replica share one lease
    /// while it names the same user and groups ([`LeaseKey`]).
    pub sid: String,
    /// The issuer's subject (a refresh must name the same one).
    pub sub: String,
    pub user: String,
    pub groups: Vec<String>,
    /// When the id-token behind it was issued and expires (Unix seconds).
    pub iat: u64,
    pub exp: u64,
    /// When the user signed in (Unix seconds): the session ends
    /// `--session-max-age-hours` later, refreshes or not.
    pub signed_in: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh: Option<String>,
}

impl SessionData {
    /// Whether less than half of the id-token's lifetime is left (time to
    /// refresh).
    pub fn due(&self, now: u64) -> bool {
        let lifetime = self.exp.saturating_sub(self.iat);
        self.exp.saturating_sub(now) < lifetime / 2 + 1
    }
}

/// A sign-in in progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PendingSignIn {
    pub state: String,
    pub nonce: String,
    pub verifier: String,
    /// The redirect URI sent (the code exchange must send it again).
    pub redirect_uri: String,
    /// Where to go once signed in: a path of this gateway.
    pub then: String,
}

pub struct Sessions {
    key: Key,
    /// Whether the key came from `--session-secret-file` (shared by the
    /// replicas) rather than made up at start.
    shared_key: bool,
    max_age: Duration,
    leases: Mutex<HashMap<LeaseKey, Weak<Lease>>>,
    /// Refreshes under way, one at a time per session ([`Sessions::refreshing`]).
    refreshing: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
    /// Sessions refreshed lately, by the digest of the refresh token they
    /// spent ([`Sessions::rotated`]).
    rotated: Mutex<HashMap<[u8; 32], (std::time::Instant, SessionData)>>,
}

/// How long a refresh's result answers a request that still carries the
/// refresh token it spent.
const ROTATED_FOR: Duration = Duration::from_secs(60);
/// Rotations remembered at most (a session each, ~1-4 KB): past it, a
/// refresh is not remembered, and only the per-session lock guards it.
const MAX_ROTATED: usize = 10_000;

/// What `POST /session/refresh` answers besides the cookie, for the page
/// to hand to its streams on other replicas (`/ws` `renew`): which
/// session's streams may now run until when. It authenticates nothing
/// (it is no session, and opens under no other name); it only moves the
/// end of streams that a session cookie opened, to an expiry the issuer
/// granted, so a copy of it is worth nothing without the cookie.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Renewal {
    pub sid: String,
    pub user: String,
    pub groups: Vec<String>,
    pub exp: u64,
}

/// What a session's streams share a lease by: the session and whom it
/// names. A refresh whose id-token names other groups (the issuer took
/// the user out of one, say) is a new identity: its lease is a new one,
/// so the streams opened under the old groups are not kept open by it.
/// They end at the old id-token's expiry, as a session the issuer stopped
/// refreshing does, and the client reconnects under the new groups, which
/// RBAC then answers for.
#[derive(PartialEq, Eq, Hash)]
struct LeaseKey {
    sid: String,
    user: String,
    groups: Vec<String>,
}

impl LeaseKey {
    fn of(session: &SessionData) -> LeaseKey {
        LeaseKey {
            sid: session.sid.clone(),
            user: session.user.clone(),
            groups: session.groups.clone(),
        }
    }
}

impl Sessions {
    /// The key from `--session-secret-file` (at least 32 bytes; HKDF
    /// expands it), else a random one for this process, with a warning.
    pub fn new(cfg: &SignInConfig) -> Result<Sessions, Error> {
        let (key, shared_key) = match &cfg.session_secret_file {
            Some(path) => {
                let named = || format!("--session-secret-file {}", path.display());
                let secret = std::fs::read(path).map_err(|e| Error::Key(named(), e.to_string()))?;
                let secret = secret.trim_ascii();
                if secret.len() < 32 {
                    return Err(Error::Key(
                        named(),
                        format!(
                            "a session secret needs at least 32 bytes, this one has {} (make one with: head -c 48 /dev/urandom | base64)",
                            secret.len()
                        ),
                    ));
                }
                (Key::derive_from(secret), true)
            }
            None => {
                tracing::warn!(
                    "no --session-secret-file: sessions are sealed with a key of this process; they end when it restarts and do not reach other replicas"
                );
                (Key::generate(), false)
            }
        };
        Ok(Sessions {
            key,
            shared_key,
            max_age: cfg.session_max_age,
            leases: Mutex::new(HashMap::new()),
            refreshing: Mutex::new(HashMap::new()),
            rotated: Mutex::new(HashMap::new()),
        })
    }

    /// Whether every replica with the same secret opens these sessions.
    pub fn shared_key(&self) -> bool {
        self.shared_key
    }

    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// `value`, encrypted and authenticated for the cookie `name` (the
    /// name is authenticated too: one cookie's value is not another's).
    pub fn seal<T: Serialize>(&self, name: &str, value: &T) -> String {
        let json = serde_json::to_string(value).expect("session data serializes");
        let mut jar = CookieJar::new();
        jar.private_mut(&self.key)
            .add(Cookie::new(name.to_string(), json));
        jar.get(name)
            .map(|c| c.value().to_string())
            .unwrap_or_default()
    }

    /// What [`Sessions::seal`] sealed for `name`; `None` for anything
    /// else (another key, tampered, truncated).
    pub fn open<T: DeserializeOwned>(&self, name: &str, sealed: &str) -> Option<T> {
        let mut jar = CookieJar::new();
        jar.add_original(Cookie::new(name.to_string(), sealed.to_string()));
        let opened = jar.private(&self.key).get(name)?;
        serde_json::from_str(opened.value()).ok()
    }

    /// The session cookie of `headers`, opened: `None` without one.
    pub fn session_of(&self, headers: &HeaderMap) -> Option<Result<SessionData, Error>> {
        let sealed = cookie_of(headers, SESSION_COOKIE)?;
        Some(self.open(SESSION_COOKIE, &sealed).ok_or_else(|| {
            Error::Invalid(
                "the session cookie is not one this gateway made (sealed with another --session-secret-file?); sign in again at /login".into(),
            )
        }))
    }

    /// The principal of a request's session: `None` without a session
    /// cookie; a 401 for an expired or foreign one.
    pub fn authenticate(&self, headers: &HeaderMap) -> Option<Result<Principal, Error>> {
        let session = match self.session_of(headers)? {
            Ok(session) => session,
            Err(err) => return Some(Err(err)),
        };
        let now = unix_now();
        if now >= session.signed_in.saturating_add(self.max_age.as_secs()) {
            return Some(Err(Error::Invalid(
                "the session is older than --session-max-age-hours; sign in again at /login".into(),
            )));
        }
        if now >= session.exp {
            return Some(Err(Error::Invalid(
                "the session expired; refresh it (POST /session/refresh) or sign in again at /login".into(),
            )));
        }
        let lease = self.lease(&session);
        let user = User {
            username: session.user.clone(),
            uid: None,
            groups: session.groups.clone(),
        };
        Some(Ok(Principal::with_lease(
            session.user,
            Access::User(user),
            lease,
        )))
    }

    /// The lease this replica's streams of `session` share ([`LeaseKey`]),
    /// moved to its expiry if that is later.
    pub fn lease(&self, session: &SessionData) -> Arc<Lease> {
        let until = at(session.exp);
        let key = LeaseKey::of(session);
        let mut leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lease) = leases.get(&key).and_then(Weak::upgrade) {
            lease.extend(until);
            return lease;
        }
        if leases.len() >= MAX_LEASES {
            leases.retain(|_, l| l.strong_count() > 0);
        }
        let lease = Arc::new(Lease::new(until));
        leases.insert(key, Arc::downgrade(&lease));
        lease
    }

    /// Moves the lease of `session`'s streams ([`LeaseKey`]) to its
    /// expiry, if it has any.
    pub fn extend(&self, session: &SessionData) {
        self.extend_key(&LeaseKey::of(session), session.exp);
    }

    fn extend_key(&self, key: &LeaseKey, exp: u64) {
        let leases = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lease) = leases.get(key).and_then(Weak::upgrade) {
            lease.extend(at(exp));
        }
    }

    /// Held while `sid`'s session is refreshed at the issuer: a second
    /// request of the same session on this replica waits, then finds the
    /// first one's result ([`Sessions::rotated`]) instead of spending the
    /// same refresh token again, which an issuer that rotates refresh
    /// tokens takes as a stolen one (revoking the session).
    pub async fn refreshing(&self, sid: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self
                .refreshing
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match locks.get(sid).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    if locks.len() >= MAX_LEASES {
                        locks.retain(|_, l| l.strong_count() > 0);
                    }
                    let lock = Arc::new(tokio::sync::Mutex::new(()));
                    locks.insert(sid.to_string(), Arc::downgrade(&lock));
                    lock
                }
            }
        };
        lock.lock_owned().await
    }

    /// The session a refresh made from one that held `refresh_token`, in
    /// the last [`ROTATED_FOR`] on this replica.
    pub fn rotated(&self, refresh_token: &str) -> Option<SessionData> {
        let rotated = self.rotated.lock().unwrap_or_else(PoisonError::into_inner);
        rotated
            .get(&digest(refresh_token))
            .filter(|(at, _)| at.elapsed() < ROTATED_FOR)
            .map(|(_, fresh)| fresh.clone())
    }

    /// Remembers that spending `refresh_token` made `fresh`.
    pub fn remember_rotation(&self, refresh_token: &str, fresh: &SessionData) {
        let mut rotated = self.rotated.lock().unwrap_or_else(PoisonError::into_inner);
        rotated.retain(|_, (at, _)| at.elapsed() < ROTATED_FOR);
        if rotated.len() < MAX_ROTATED {
            rotated.insert(
                digest(refresh_token),
                (std::time::Instant::now(), fresh.clone()),
            );
        }
    }

    /// The renewal of a refreshed `session` ([`Renewal`]), sealed.
    pub fn renewal(&self, session: &SessionData) -> String {
        self.seal(
            RENEWAL,
            &Renewal {
                sid: session.sid.clone(),
                user: session.user.clone(),
                groups: session.groups.clone(),
                exp: session.exp,
            },
        )
    }

    /// Opens a sealed [`Renewal`] and moves the end of its session's
    /// streams here (if it has any) to its expiry: the seconds left. A
    /// renewal not sealed by this key as one, or past its expiry, is
    /// refused.
    pub fn renew(&self, sealed: &str) -> Result<u64, Error> {
        let renewal: Renewal = self.open(RENEWAL, sealed).ok_or_else(|| {
            Error::Invalid(
                "the renewal is not one this gateway sealed (another --session-secret-file?)"
                    .into(),
            )
        })?;
        let now = unix_now();
        if renewal.exp <= now {
            return Err(Error::Invalid("the renewal has expired".into()));
        }
        let key = LeaseKey {
            sid: renewal.sid,
            user: renewal.user,
            groups: renewal.groups,
        };
        self.extend_key(&key, renewal.exp);
        Ok(renewal.exp - now)
    }
}

/// A refresh token's SHA-256: what [`Sessions`] remembers of it.
fn digest(token: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// The value of the cookie `name` in `headers`.
pub fn cookie_of(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| super::token::cookie_value(v, name))
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Unix seconds as an instant (saturating far in the future).
pub fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH
        .checked_add(Duration::from_secs(secs))
        .unwrap_or(UNIX_EPOCH + Duration::from_secs(u32::MAX as u64))
}

/// 128 random bits, hex: session ids, states, nonces.
pub fn random_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS has randomness");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> Sessions {
        Sessions {
            key: Key::generate(),
            shared_key: false,
            max_age: Duration::from_secs(3600),
            leases: Mutex::new(HashMap::new()),
            refreshing: Mutex::new(HashMap::new()),
            rotated: Mutex::new(HashMap::new()),
        }
    }

    #[test]
    fn a_session_secret_file_that_is_missing_or_short_is_named_with_its_flag() {
        let mut cfg = SignInConfig {
            session_secret_file: Some("/nonexistent/session-secret".into()),
            ..SignInConfig::default()
        };
        let err = Sessions::new(&cfg).err().unwrap().to_string();
        assert!(
            err.starts_with("cannot load key --session-secret-file /nonexistent/session-secret: "),
            "{err}"
        );
        let short =
            std::env::temp_dir().join(format!("kubefan-short-secret-{}", std::process::id()));
        std::fs::write(&short, "too short").unwrap();
        cfg.session_secret_file = Some(short.clone());
        let err = Sessions::new(&cfg).err().unwrap().to_string();
        std::fs::remove_file(&short).unwrap();
        assert!(
            err.contains("--session-secret-file") && err.contains("at least 32 bytes"),
            "{err}"
        );
    }

    fn data(exp: u64) -> SessionData {
        SessionData {
            sid: random_id(),
            sub: "s".into(),
            user: "alice@example.com".into(),
            groups: vec!["oidc:team".into(), "system:authenticated".into()],
            iat: unix_now(),
            exp,
            signed_in: unix_now(),
            refresh: Some("r".into()),
        }
    }

    #[test]
    fn sealed_sessions_open_only_with_their_key_and_name() {
        let s = sessions();
        let d = data(unix_now() + 60);
        let sealed = s.seal(SESSION_COOKIE, &d);
        assert!(!sealed.contains("alice"), "encrypted");
        assert_eq!(s.open::<SessionData>(SESSION_COOKIE, &sealed), Some(d));
        assert_eq!(s.open::<SessionData>(SIGNIN_COOKIE, &sealed), None);
        assert_eq!(
            sessions().open::<SessionData>(SESSION_COOKIE, &sealed),
            None
        );
        let mut tampered = sealed.into_bytes();
        let last = tampered.len() - 3;
        tampered[last] ^= 1;
        let tampered = String::from_utf8(tampered).unwrap();
        assert_eq!(s.open::<SessionData>(SESSION_COOKIE, &tampered), None);
        assert_eq!(s.open::<SessionData>(SESSION_COOKIE, "garbage"), None);
    }

    #[test]
    fn a_session_authenticates_until_its_expiry_and_shares_one_lease() {
        let s = sessions();
        let d = data(unix_now() + 60);
        let mut headers = HeaderMap::new();
        let cookie = format!("{SESSION_COOKIE}={}", s.seal(SESSION_COOKIE, &d));
        headers.insert(header::COOKIE, cookie.parse().unwrap());
        let a = s.authenticate(&headers).unwrap().unwrap();
        let b = s.authenticate(&headers).unwrap().unwrap();
        assert_eq!(a.name(), "alice@example.com");
        assert!(Arc::ptr_eq(a.lease().unwrap(), b.lease().unwrap()));
        let refreshed = SessionData {
            exp: unix_now() + 600,
            ..d.clone()
        };
        s.extend(&refreshed);
        assert!(a.expires().unwrap() >= at(unix_now() + 599));
        // Refreshed into other groups: the streams of the old ones keep
        // their expiry, and the new identity has a lease of its own.
        let regrouped = SessionData {
            groups: vec!["system:authenticated".into()],
            exp: unix_now() + 1200,
            ..d.clone()
        };
        s.extend(&regrouped);
        assert!(a.expires().unwrap() < at(unix_now() + 1199));
        let c = s.lease(&regrouped);
        assert!(!Arc::ptr_eq(a.lease().unwrap(), &c));

        let expired = data(unix_now() - 1);
        let cookie = format!("{SESSION_COOKIE}={}", s.seal(SESSION_COOKIE, &expired));
        headers.insert(header::COOKIE, cookie.parse().unwrap());
        let err = s.authenticate(&headers).unwrap().unwrap_err().to_string();
        assert!(err.contains("expired"), "{err}");
        assert!(s.authenticate(&HeaderMap::new()).is_none());
    }

    #[test]
    fn refresh_is_due_in_the_second_half_of_a_lifetime() {
        let now = unix_now();
        let d = SessionData {
            iat: now - 10,
            exp: now + 90,
            ..data(0)
        };
        assert!(!d.due(now));
        assert!(d.due(now + 50));
    }
}
