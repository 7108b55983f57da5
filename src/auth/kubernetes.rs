//! `--auth kubernetes`: the API server decides. A bearer token is checked
//! with a TokenReview; each subscription with a SubjectAccessReview
//! (`watch`, `list` or `get` on the resource, in a namespace or
//! cluster-wide). Both answers are cached for `cache_ttl`, so a dashboard
//! reconnecting or opening many streams costs one review per TTL, and the
//! team's RBAC governs what each person sees.
//!
//! Tokens are cache keys only as SHA-256 digests; they are never logged.
//! Caches are bounded: when full, expired entries go, then everything.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use sha2::{Digest, Sha256};

use super::{Access, Error, Principal, Verb};

/// Entries one cache holds at most.
const CACHE_ENTRIES: usize = 10_000;

/// A user as the API server authenticated it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserInfo {
    pub username: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
}

/// What a SubjectAccessReview asks about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub verb: Verb,
    pub group: String,
    pub resource: String,
    /// Empty: cluster-wide (every namespace).
    pub namespace: String,
}

pub struct Reviewer {
    client: Client,
    ttl: Duration,
    /// Sent in every TokenReview; the answer must name one of them.
    audiences: Vec<String>,
    tokens: Cache<[u8; 32], Result<UserInfo, String>>,
    decisions: Cache<(UserInfo, Attributes), bool>,
}

impl Reviewer {
    pub fn new(client: Client, ttl: Duration, audiences: Vec<String>) -> Reviewer {
        Reviewer {
            client,
            ttl,
            audiences,
            tokens: Cache::default(),
            decisions: Cache::default(),
        }
    }

    /// Who `token` belongs to (TokenReview, cached).
    pub async fn authenticate(&self, token: &str) -> Result<Principal, Error> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let answer = match self.tokens.get(&key) {
            Some(answer) => answer,
            None => {
                let answer = self.review_token(token).await?;
                self.tokens.put(key, answer.clone(), self.ttl);
                answer
            }
        };
        match answer {
            Ok(user) => Ok(Principal::new(
                user.username.clone(),
                None,
                Access::Kubernetes(user),
            )),
            Err(reason) => Err(Error::Invalid(reason)),
        }
    }

    async fn review_token(&self, token: &str) -> Result<Result<UserInfo, String>, Error> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: Some(self.audiences.clone()).filter(|a| !a.is_empty()),
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let done = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| Error::Review(e.to_string()))?;
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
            (Some(true), Some(username)) => Ok(UserInfo {
                username,
                uid: user.uid,
                groups: user.groups.unwrap_or_default(),
            }),
            _ => Err("token not accepted by the Kubernetes API server".to_string()),
        })
    }

    /// Whether `user` may do `attrs` (SubjectAccessReview, cached).
    pub async fn allowed(&self, user: &UserInfo, attrs: Attributes) -> Result<bool, Error> {
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
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let done = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| Error::Review(e.to_string()))?;
        let allowed = done.status.is_some_and(|s| s.allowed);
        self.decisions.put(key, allowed, self.ttl);
        Ok(allowed)
    }
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
}
