//! The issuer's signing keys: its discovery document, then the JWKS at
//! its `jwks_uri`, kept current without a restart.
//!
//! # When keys are fetched
//! - At start, in the background: an issuer unreachable then does not stop
//!   kubefan; tokens are refused (401, saying so) until it answers, and
//!   discovery is retried with backoff (1 s doubling to a minute).
//! - Every [`REFRESH`], so keys an issuer retired stop verifying.
//! - When a token names a `kid` not among the keys (the issuer rotated),
//!   at most once per [`MIN_REFETCH`] however many such tokens arrive:
//!   requests wait for the window's end and share its one fetch, so a
//!   flood of made-up `kid`s costs the issuer one request per window, and
//!   a token of a key published a moment ago waits at most the window.
//!   (go-oidc, kube-apiserver's verifier, fetches on every unknown `kid`,
//!   de-duplicating only fetches in flight.)
//!
//! A failed refresh keeps the keys it had. Documents are read up to
//! [`MAX_DOCUMENT`] bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use prometheus_client::metrics::gauge::Gauge;
use serde::Deserialize;
use tokio::time::Instant;

use super::super::Error;
use super::super::jwt::{Key, keys_of};
use crate::epoch::Epoch;
use crate::lifecycle::Lifecycle;

/// Keys are re-fetched this often.
pub const REFRESH: Duration = Duration::from_secs(600);
/// An unknown `kid` re-fetches the keys at most this often.
pub const MIN_REFETCH: Duration = Duration::from_secs(5);
/// The longest discovery document or JWKS read.
const MAX_DOCUMENT: usize = 1 << 20;
/// How long one fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the issuer could not be read, and what would fix it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problem {
    /// What failed: the request and the issuer's answer (or its absence).
    pub reason: String,
    /// What to change, naming the flag; `None` when the issuer did not
    /// answer (down, starting, overloaded): kubefan retries, and waiting
    /// can help. A mistake in the set-up (an issuer URL that differs from
    /// the one the issuer names, a certificate kubefan does not trust, a
    /// document that is not a discovery document) is retried too, but no
    /// retry fixes it.
    pub fix: Option<String>,
}

impl Problem {
    fn waiting(reason: String) -> Problem {
        Problem { reason, fix: None }
    }

    fn fix(reason: String, fix: impl Into<String>) -> Problem {
        Problem {
            reason,
            fix: Some(fix.into()),
        }
    }

    /// Whether waiting can help: the issuer did not answer.
    pub fn waiting_helps(&self) -> bool {
        self.fix.is_none()
    }

    /// What it means for `issuer`, in a sentence for a refusal.
    pub fn of_issuer(&self, issuer: &str) -> String {
        match self.fix {
            Some(_) => {
                format!("the OIDC issuer {issuer} cannot be used as kubefan is configured: {self}")
            }
            None => format!(
                "the OIDC issuer {issuer} is not reachable yet ({self}); kubefan keeps trying"
            ),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.fix {
            None => f.write_str(&self.reason),
            Some(fix) => write!(f, "{}: {fix}", self.reason),
        }
    }
}

/// The parts of the discovery document (OpenID Connect Discovery 1.0,
/// section 3) kubefan uses.
#[derive(Debug, Clone, Deserialize)]
pub struct Provider {
    pub issuer: String,
    pub jwks_uri: String,
    #[serde(default)]
    pub authorization_endpoint: Option<String>,
    #[serde(default)]
    pub token_endpoint: Option<String>,
    #[serde(default)]
    pub end_session_endpoint: Option<String>,
}

pub struct Keys {
    issuer: String,
    http: reqwest::Client,
    state: Mutex<State>,
    /// Held while fetching: one fetch at a time.
    fetching: tokio::sync::Mutex<()>,
    /// JWKS fetches sent (tests; the issuer's log).
    fetches: AtomicU64,
    /// Moves after every discovery or fetch, done or failed.
    changes: Epoch,
}

#[derive(Default)]
struct State {
    provider: Option<Arc<Provider>>,
    keys: Arc<Vec<Key>>,
    /// When the keys were last fetched (or tried).
    fetched: Option<Instant>,
    /// Whether a fetch has brought keys.
    loaded: bool,
    /// Why the issuer could not be read, last time it could not.
    error: Option<Problem>,
    /// `kubefan_oidc_issuer_ready`, once [`Keys::run`] was given it: set
    /// with `loaded`, under this lock.
    ready: Option<Gauge>,
}

impl State {
    fn set_loaded(&mut self, loaded: bool) {
        self.loaded = loaded;
        if let Some(ready) = &self.ready {
            ready.set(i64::from(loaded));
        }
    }
}

impl Keys {
    pub fn new(issuer: String, http: reqwest::Client) -> Keys {
        Keys {
            issuer,
            http,
            state: Mutex::new(State::default()),
            fetching: tokio::sync::Mutex::new(()),
            fetches: AtomicU64::new(0),
            changes: Epoch::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// JWKS fetches sent so far.
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// Moves after every discovery or fetch, done or failed.
    pub fn changes(&self) -> &Epoch {
        &self.changes
    }

    /// Whether the issuer was discovered and its keys fetched.
    pub fn loaded(&self) -> bool {
        let state = self.state();
        state.loaded
    }

    /// Why the issuer could not be read, the last time it could not.
    pub fn last_error(&self) -> Option<String> {
        self.problem().map(|p| p.to_string())
    }

    /// Why the issuer could not be read and what would fix it, the last
    /// time it could not.
    pub fn problem(&self) -> Option<Problem> {
        self.state().error.clone()
    }

    /// Why the issuer cannot be used now: `None` once its keys are
    /// loaded; before, the last attempt's [`Problem`], or, while the first
    /// is under way, that none has ended (waiting helps).
    pub fn blocker(&self) -> Option<Problem> {
        blocker(&self.state())
    }

    /// The issuer's URL (`--oidc-issuer-url`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The discovery document, once read.
    pub fn provider(&self) -> Option<Arc<Provider>> {
        self.state().provider.clone()
    }

    /// The keys, or a 401 saying the issuer has not been reached yet.
    pub(in crate::auth) fn current(&self) -> Result<Arc<Vec<Key>>, Error> {
        let state = self.state();
        if !state.loaded {
            return Err(self.unreachable(&state));
        }
        Ok(state.keys.clone())
    }

    fn unreachable(&self, state: &State) -> Error {
        let problem = blocker(state).unwrap_or_else(not_yet);
        Error::IssuerUnreachable(problem.of_issuer(&self.issuer))
    }

    /// The keys after fetching them again (for a `kid` not among them):
    /// at once if the last fetch is [`MIN_REFETCH`] old, else once that
    /// window has passed, by one fetch that every request waiting for the
    /// window shares. A token signed with a key published moments ago waits
    /// at most the window; made-up `kid`s cost one fetch per window.
    pub(in crate::auth) async fn refetch(&self) -> Result<Arc<Vec<Key>>, Error> {
        let asked = Instant::now();
        let last = self.state().fetched;
        if let Some(last) = last {
            tokio::time::sleep_until(last + MIN_REFETCH).await;
        }
        let _one = self.fetching.lock().await;
        let fetched_since = self.state().fetched.is_some_and(|at| at >= asked);
        if !fetched_since {
            // A failure is logged and recorded; the keys it had stay.
            let _ = self.fetch_keys().await;
        }
        self.current()
    }

    /// Discovers the issuer and follows its keys until shutdown; `ready`
    /// says after each try whether keys are loaded.
    pub async fn run(self: Arc<Self>, lifecycle: Arc<Lifecycle>, ready: Gauge) {
        {
            let mut state = self.state();
            ready.set(i64::from(state.loaded));
            state.ready = Some(ready);
        }
        let mut backoff = Duration::from_secs(1);
        loop {
            let done = {
                let _one = self.fetching.lock().await;
                match self.provider() {
                    None => match self.discover().await {
                        Ok(()) => self.fetch_keys().await,
                        Err(err) => Err(err),
                    },
                    Some(_) => self.fetch_keys().await,
                }
            };
            let wait = match done {
                Ok(()) => {
                    backoff = Duration::from_secs(1);
                    REFRESH
                }
                Err(_) => {
                    let wait = backoff;
                    backoff = (backoff * 2).min(Duration::from_secs(60));
                    wait
                }
            };
            tokio::select! {
                _ = lifecycle.shutting_down() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    async fn discover(&self) -> Result<(), Problem> {
        let url = format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        );
        let result = self.get(&url, "--oidc-issuer-url").await.and_then(|body| {
            let provider: Provider = serde_json::from_slice(&body).map_err(|e| {
                Problem::fix(
                    format!("{url} is not a discovery document: {e}"),
                    "check --oidc-issuer-url: it must be the issuer's URL, under which /.well-known/openid-configuration is its discovery document",
                )
            })?;
            // OpenID Connect Discovery 1.0, section 4.3.
            if provider.issuer != self.issuer {
                return Err(Problem::fix(
                    format!(
                        "{url} names the issuer {:?}, not {:?}",
                        provider.issuer, self.issuer
                    ),
                    format!(
                        "set --oidc-issuer-url to exactly {:?} (OIDC Discovery compares them character by character)",
                        provider.issuer
                    ),
                ));
            }
            Ok(provider)
        });
        let mut state = self.state();
        let done = match result {
            Ok(provider) => {
                tracing::info!(issuer = %self.issuer, jwks_uri = %provider.jwks_uri, "OIDC issuer discovered");
                state.provider = Some(Arc::new(provider));
                Ok(())
            }
            Err(err) => {
                match &err.fix {
                    None => {
                        tracing::warn!(issuer = %self.issuer, error = %err.reason, "OIDC issuer not reachable; retrying")
                    }
                    Some(fix) => {
                        tracing::warn!(issuer = %self.issuer, error = %err.reason, fix = %fix, "OIDC issuer cannot be used as configured; sign-in and id-tokens are refused until it is fixed")
                    }
                }
                state.error = Some(err.clone());
                Err(err)
            }
        };
        drop(state);
        self.changes.advance();
        done
    }

    /// Fetches the JWKS; the caller holds `fetching`.
    async fn fetch_keys(&self) -> Result<(), Problem> {
        let Some(provider) = self.provider() else {
            return Err(Problem::waiting("not discovered yet".into()));
        };
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let url = &provider.jwks_uri;
        let set_up = "the issuer's set-up (its discovery document's jwks_uri)";
        let result = self.get(url, set_up).await.and_then(|body| {
            serde_json::from_slice::<JwkSet>(&body).map_err(|e| {
                Problem::fix(
                    format!("{url} is not a JWKS: {e}"),
                    format!("check {set_up}"),
                )
            })
        });
        let mut state = self.state();
        state.fetched = Some(Instant::now());
        let done = match result {
            Ok(set) => {
                let keys = keys_of(&set, url);
                tracing::debug!(issuer = %self.issuer, keys = keys.len(), "OIDC keys fetched");
                state.keys = Arc::new(keys);
                state.set_loaded(true);
                state.error = None;
                Ok(())
            }
            Err(err) => {
                tracing::warn!(issuer = %self.issuer, error = %err, "OIDC keys not fetched; keeping the previous ones");
                state.error = Some(err.clone());
                Err(err)
            }
        };
        drop(state);
        self.changes.advance();
        done
    }

    /// GET `url`, its body read up to [`MAX_DOCUMENT`]. A 4xx answer is
    /// fixed in `fixed_by` (the flag or set-up that gave the URL).
    async fn get(&self, url: &str, fixed_by: &str) -> Result<Vec<u8>, Problem> {
        let failed = |e: &reqwest::Error| {
            let reason = format!("GET {url}: {}", error_chain(e));
            if untrusted_certificate(e) {
                Problem::fix(
                    reason,
                    "kubefan does not trust the issuer's certificate: give the CA that signed it with --oidc-ca-file",
                )
            } else {
                Problem::waiting(reason)
            }
        };
        let fetch = async {
            let mut resp = self
                .http
                .get(url)
                .header("accept", "application/json")
                .send()
                .await
                .map_err(|e| failed(&e))?;
            let status = resp.status();
            if status.is_client_error() && status != reqwest::StatusCode::TOO_MANY_REQUESTS {
                return Err(Problem::fix(
                    format!("GET {url}: {status}"),
                    format!("nothing is served there: check {fixed_by}"),
                ));
            }
            if !status.is_success() {
                return Err(Problem::waiting(format!("GET {url}: {status}")));
            }
            let mut body = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(|e| failed(&e))? {
                if body.len() + chunk.len() > MAX_DOCUMENT {
                    return Err(Problem::fix(
                        format!("GET {url}: more than {MAX_DOCUMENT} bytes"),
                        format!("check {fixed_by}"),
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(body)
        };
        tokio::time::timeout(FETCH_TIMEOUT, fetch)
            .await
            .unwrap_or_else(|_| {
                Err(Problem::waiting(format!(
                    "GET {url}: no answer in {FETCH_TIMEOUT:?}"
                )))
            })
    }
}

/// [`Keys::blocker`] of `state`.
fn blocker(state: &State) -> Option<Problem> {
    (!state.loaded).then(|| state.error.clone().unwrap_or_else(not_yet))
}

/// Before any attempt to read the issuer has ended.
fn not_yet() -> Problem {
    Problem::waiting("no attempt to reach it has ended yet".into())
}

/// Whether `err` failed on the server's certificate (rustls refused it:
/// an unknown authority, a name it is not for, expired). rustls's error
/// reaches reqwest inside `io::Error`s (two, nested, with hyper-rustls
/// 0.27), whose `source()` skips what they hold, so each error of the
/// chain is opened down to what it wraps.
fn untrusted_certificate(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        let mut held = Some(e);
        while let Some(h) = held {
            if let Some(tls) = h.downcast_ref::<rustls::Error>() {
                return matches!(
                    tls,
                    rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
                );
            }
            held = h
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|inner| inner as &(dyn std::error::Error + 'static));
        }
        next = e.source();
    }
    false
}

/// An error and its causes, which say what actually failed (a refused
/// connection, an unknown certificate authority).
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
