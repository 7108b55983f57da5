//! `--auth kubernetes`: the API server says who a token belongs to
//! (TokenReview, with `--token-audiences`), and, with `--authorization
//! review`, what they may do (SubjectAccessReview: `watch`, `list` or
//! `get` on the resource, in a namespace or cluster-wide). Answers are
//! cached for `cache_ttl`, so a dashboard reconnecting or opening many
//! streams costs one review per TTL. (`--authorization rbac`, the default,
//! decides rights locally: `auth::rbac`.)
//!
//! # Credentials of open streams
//! A token that authenticated a request is held as a [`Credential`] for as
//! long as a request or stream holds its principal: in memory only, never
//! logged, dropped with the last stream. [`Reviewer::spawn_rereview`]
//! reviews every held credential again once its review is `cache_ttl`
//! old; one that no longer reviews (revoked, expired, deleted service
//! account) is marked revoked and its streams end with a 401. A failed
//! review call (the API server unreachable) keeps it until the next try.
//!
//! Tokens are otherwise cache keys only as SHA-256 digests. Caches are
//! bounded: when full, expired entries go, then everything.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

use super::{Access, Error, Principal, User, Verb};
use crate::epoch::Epoch;
use crate::lifecycle::Lifecycle;

/// Entries one cache holds at most.
const CACHE_ENTRIES: usize = 10_000;
/// The longest a TokenReview or SubjectAccessReview is waited for. kube's
/// client has no read timeout (its watches are long reads), so an API
/// server that takes the request and never answers would hold every
/// request it authenticates, and their permits, for ever; past this the
/// review failed (503 to the request, a stream keeps going and asks again).
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

/// What a SubjectAccessReview asks about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub verb: Verb,
    pub group: String,
    pub resource: String,
    /// Empty: cluster-wide (every namespace).
    pub namespace: String,
    /// The object a request names (a `get`, or a `list`/`watch` narrowed
    /// to one name); empty for a collection.
    pub name: String,
}

/// A token that authenticated requests, held while they or their streams
/// live, so it can be reviewed again (see the module doc).
pub struct Credential {
    token: SecretString,
    user: User,
    reviewed: Mutex<Instant>,
    revoked: AtomicBool,
    /// Moves when the credential is revoked.
    changes: Epoch,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("user", &self.user.username)
            .field("revoked", &self.is_revoked())
            .finish_non_exhaustive()
    }
}

impl Credential {
    pub fn user(&self) -> &User {
        &self.user
    }

    /// Whether a later review refused the token.
    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    /// Moves when the credential is revoked.
    pub fn changes(&self) -> &Epoch {
        &self.changes
    }

    /// The token itself: what another cluster reviews to know who it
    /// names there (`Auth::principal_in`).
    pub(crate) fn token(&self) -> &str {
        self.token.expose_secret()
    }

    fn reviewed_at(&self) -> Instant {
        *self.reviewed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Told when a credential is revoked (what `auth::rbac` streams wait on
/// moves too).
pub type OnRevoked = Box<dyn Fn(&User) + Send + Sync>;

pub struct Reviewer {
    client: Client,
    ttl: Duration,
    /// Sent in every TokenReview; the answer must name one of them.
    audiences: Vec<String>,
    /// Tokens the API server refused lately (not asked again meanwhile).
    rejected: Cache<[u8; 32], String>,
    /// Credentials reviewed within the TTL, held for it even when no
    /// request holds them, so a reconnect does not review again.
    recent: Cache<[u8; 32], Arc<Credential>>,
    /// Credentials held by requests and streams, by token digest.
    live: Mutex<HashMap<[u8; 32], Weak<Credential>>>,
    decisions: Cache<(User, Attributes), bool>,
    on_revoked: Mutex<Option<OnRevoked>>,
    /// TokenReviews sent (for tests and `kubefan_auth_reviews_total`).
    reviews: std::sync::atomic::AtomicU64,
}

impl Reviewer {
    pub fn new(client: Client, ttl: Duration, audiences: Vec<String>) -> Reviewer {
        Reviewer {
            client,
            ttl,
            audiences,
            rejected: Cache::default(),
            recent: Cache::default(),
            live: Mutex::new(HashMap::new()),
            decisions: Cache::default(),
            on_revoked: Mutex::new(None),
            reviews: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Calls `f` with the user of every credential revoked from now on.
    pub fn on_revoked(&self, f: OnRevoked) {
        *self
            .on_revoked
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(f);
    }

    /// TokenReviews sent so far.
    pub fn reviews(&self) -> u64 {
        self.reviews.load(Ordering::Relaxed)
    }

    fn lock_live(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Weak<Credential>>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Who `token` belongs to: a held credential reviewed within the TTL,
    /// else a fresh TokenReview.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, Error> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let held = self.lock_live().get(&key).and_then(Weak::upgrade);
        if let Some(credential) = &held {
            if credential.is_revoked() {
                return Err(Error::Invalid(
                    "token no longer accepted by the Kubernetes API server".into(),
                ));
            }
            if credential.reviewed_at().elapsed() < self.ttl {
                return Ok(principal(credential.clone()));
            }
        }
        if let Some(reason) = self.rejected.get(&key) {
            return Err(Error::Invalid(reason));
        }
        match self.review_token(token).await? {
            Ok(user) => {
                let credential = match held {
                    Some(held) if held.user == user => {
                        *held.reviewed.lock().unwrap_or_else(PoisonError::into_inner) =
                            Instant::now();
                        held
                    }
                    _ => {
                        let credential = Arc::new(Credential {
                            token: SecretString::from(token),
                            user,
                            reviewed: Mutex::new(Instant::now()),
                            revoked: AtomicBool::new(false),
                            changes: Epoch::default(),
                        });
                        let mut live = self.lock_live();
                        if live.len() >= CACHE_ENTRIES {
                            live.retain(|_, c| c.strong_count() > 0);
                        }
                        live.insert(key, Arc::downgrade(&credential));
                        credential
                    }
                };
                self.recent.put(key, credential.clone(), self.ttl);
                Ok(principal(credential))
            }
            Err(reason) => {
                if let Some(held) = held {
                    self.revoke(&held);
                }
                self.rejected.put(key, reason.clone(), self.ttl);
                Err(Error::Invalid(reason))
            }
        }
    }

    fn revoke(&self, credential: &Credential) {
        if !credential.revoked.swap(true, Ordering::AcqRel) {
            tracing::info!(user = %credential.user.username, "a token with open streams no longer reviews: its streams end");
            credential.changes.advance();
            if let Some(f) = &*self
                .on_revoked
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
            {
                f(&credential.user);
            }
        }
    }

    /// Reviews every held credential again once its review is the TTL
    /// old, until shutdown (every second at most).
    pub fn spawn_rereview(self: &Arc<Self>, lifecycle: Arc<Lifecycle>) {
        let this = self.clone();
        let every = self
            .ttl
            .max(Duration::from_secs(1))
            .min(Duration::from_secs(60));
        tokio::spawn(async move {
            let mut timer = tokio::time::interval(every / 2);
            timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = lifecycle.shutting_down() => return,
                    _ = timer.tick() => this.rereview_due().await,
                }
            }
        });
    }

    async fn rereview_due(&self) {
        let due: Vec<Arc<Credential>> = {
            let mut live = self.lock_live();
            live.retain(|_, c| c.strong_count() > 0);
            live.iter()
                .filter_map(|(key, c)| Some((key, c.upgrade()?)))
                // Held by a request or stream, not only by `recent` (and
                // this upgrade): otherwise it just ages out.
                .filter(|(key, c)| Arc::strong_count(c) > 1 + usize::from(self.recent.holds(key)))
                .map(|(_, c)| c)
                .filter(|c| !c.is_revoked() && c.reviewed_at().elapsed() >= self.ttl)
                .collect()
        };
        for credential in due {
            match self.review_token(credential.token.expose_secret()).await {
                Ok(Ok(user)) if user == credential.user => {
                    *credential
                        .reviewed
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = Instant::now();
                }
                Ok(_) => self.revoke(&credential),
                Err(err) => {
                    tracing::warn!(user = %credential.user.username, error = %err, "could not review a token again; keeping it until the next try")
                }
            }
        }
    }

    async fn review_token(&self, token: &str) -> Result<Result<User, String>, Error> {
        self.reviews.fetch_add(1, Ordering::Relaxed);
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: Some(self.audiences.clone()).filter(|a| !a.is_empty()),
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let done = within(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review)).await?;
        let status = done.status.unwrap_or_default();
        // An audience-aware API server answers the audiences the token and
        // the review share; one that names none did not check them
        // (TokenReviewStatus.audiences, authentication.k8s.io/v1).
        if !self.audiences.is_empty()
            && !status
                .audiences
                .iter()
                .flatten()
                .any(|a| self.audiences.contains(a))
        {
            return Ok(Err(format!(
                "token not accepted by the Kubernetes API server for the audiences {:?}",
                self.audiences
            )));
        }
        let user = status.user.unwrap_or_default();
        Ok(match (status.authenticated, user.username) {
            (Some(true), Some(username)) => Ok(User {
                username,
                uid: user.uid,
                groups: user.groups.unwrap_or_default(),
            }),
            _ => Err("token not accepted by the Kubernetes API server".to_string()),
        })
    }

    /// Whether `user` may do `attrs` (SubjectAccessReview, cached).
    pub async fn allowed(&self, user: &User, attrs: Attributes) -> Result<bool, Error> {
        let key = (user.clone(), attrs);
        if let Some(allowed) = self.decisions.get(&key) {
            return Ok(allowed);
        }
        let (user, attrs) = &key;
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.username.clone()),
                uid: user.uid.clone(),
                groups: Some(user.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(attrs.verb.as_str().into()),
                    group: Some(attrs.group.clone()),
                    resource: Some(attrs.resource.clone()),
                    namespace: Some(attrs.namespace.clone()).filter(|ns| !ns.is_empty()),
                    name: Some(attrs.name.clone()).filter(|n| !n.is_empty()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let done = within(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review)).await?;
        let allowed = done.status.is_some_and(|s| s.allowed);
        self.decisions.put(key, allowed, self.ttl);
        Ok(allowed)
    }
}

/// A review's answer, or [`Error::Review`] if it failed or did not come
/// within `limit`.
async fn within<T>(
    limit: Duration,
    review: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(limit, review).await {
        Ok(done) => done.map_err(|e| Error::Review(e.to_string())),
        Err(_) => Err(Error::Review(format!(
            "the API server did not answer within {} s",
            limit.as_secs()
        ))),
    }
}

/// The principal a reviewed credential stands for.
fn principal(credential: Arc<Credential>) -> Principal {
    Principal::new(
        credential.user.username.clone(),
        None,
        Access::User(credential.user.clone()),
    )
    .with_credential(credential)
}

/// A small TTL map; `std` mutex, nothing awaited under it.
struct Cache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K, V> Default for Cache<K, V> {
    fn default() -> Self {
        Cache {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash, V: Clone> Cache<K, V> {
    fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(key)
            .filter(|(until, _)| Instant::now() < *until)
            .map(|(_, v)| v.clone())
    }

    /// Whether `key` has an entry, expired or not.
    fn holds(&self, key: &K) -> bool {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(key)
    }

    fn put(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= CACHE_ENTRIES {
            let now = Instant::now();
            entries.retain(|_, (until, _)| now < *until);
            if entries.len() >= CACHE_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (Instant::now() + ttl, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_entries_expire_and_the_cache_stays_bounded() {
        let cache: Cache<usize, bool> = Cache::default();
        cache.put(1, true, Duration::from_secs(60));
        assert_eq!(cache.get(&1), Some(true));
        cache.put(2, true, Duration::ZERO);
        assert_eq!(cache.get(&2), None);
        for i in 0..CACHE_ENTRIES + 5 {
            cache.put(i, false, Duration::from_secs(60));
        }
        assert!(cache.entries.lock().unwrap().len() <= CACHE_ENTRIES);
    }

    /// An API server that takes a review and never answers fails it at
    /// the timeout, rather than hold the request for ever.
    #[tokio::test(start_paused = true)]
    async fn a_review_never_answered_fails_at_the_timeout() {
        let started = tokio::time::Instant::now();
        let never = std::future::pending::<Result<(), kube::Error>>();
        let err = within(REVIEW_TIMEOUT, never).await.unwrap_err();
        assert!(matches!(err, Error::Review(_)), "{err}");
        assert!(
            err.to_string().contains("did not answer within 10 s"),
            "{err}"
        );
        assert_eq!(started.elapsed(), REVIEW_TIMEOUT);
        assert_eq!(
            within(REVIEW_TIMEOUT, async { Ok::<_, kube::Error>(7) })
                .await
                .unwrap(),
            7
        );
    }
}
