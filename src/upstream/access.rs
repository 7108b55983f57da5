//! kubefan's own rights: whether its credentials (its ServiceAccount, or
//! its kubeconfig's user) may `list` and `watch` a resource across all
//! namespaces — what one informer needs.
//!
//! Asked of the API server with SelfSubjectAccessReviews when a resource is
//! first needed, and remembered: an allowed resource until RBAC changes
//! ([`SelfAccess::forget`], called when kubefan sees RBAC objects change),
//! a refused one until then or for [`RECHECK`]. An upstream 403 on a LIST
//! or WATCH is remembered the same way. A resource kubefan may not read is
//! refused at once with what to grant, instead of an informer retrying a
//! forbidden LIST, and discovery does not advertise it.
//!
//! A review that cannot be made (the API server does not answer it) counts
//! as allowed: the informer's own 403 then tells.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use super::ResourceInfo;
use crate::epoch::Epoch;

/// How long a refusal is believed without an RBAC change seen.
pub const RECHECK: Duration = Duration::from_secs(60);

/// The verbs an informer needs.
const NEEDED: [&str; 2] = ["list", "watch"];

#[derive(Debug, Clone)]
enum Known {
    Allowed,
    Refused {
        missing: Vec<&'static str>,
        at: Instant,
    },
}

pub struct SelfAccess {
    client: Client,
    known: Mutex<HashMap<String, Known>>,
    /// Moves when what is known is forgotten (RBAC changed).
    changes: Epoch,
}

impl SelfAccess {
    pub fn new(client: Client) -> SelfAccess {
        SelfAccess {
            client,
            known: Mutex::new(HashMap::new()),
            changes: Epoch::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Known>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether kubefan may read `info` (reviews if not known); the message
    /// saying what to grant when not.
    pub async fn check(&self, info: &ResourceInfo) -> Result<(), String> {
        let key = info.canonical_name();
        match self.lock().get(&key) {
            Some(Known::Allowed) => return Ok(()),
            Some(Known::Refused { missing, at }) if at.elapsed() < RECHECK => {
                return Err(what_to_grant(info, missing));
            }
            _ => {}
        }
        let mut missing = Vec::new();
        for verb in NEEDED {
            if !self.review(info, verb).await {
                missing.push(verb);
            }
        }
        let known = if missing.is_empty() {
            Known::Allowed
        } else {
            Known::Refused {
                missing: missing.clone(),
                at: Instant::now(),
            }
        };
        self.lock().insert(key, known);
        if missing.is_empty() {
            Ok(())
        } else {
            Err(what_to_grant(info, &missing))
        }
    }

    /// Reviews every resource not known yet (at most eight at once).
    pub async fn check_all(&self, infos: &[ResourceInfo]) {
        use futures::StreamExt;
        let unknown: Vec<&ResourceInfo> = {
            let known = self.lock();
            infos
                .iter()
                .filter(|i| !known.contains_key(&i.canonical_name()))
                .collect()
        };
        futures::stream::iter(unknown)
            .for_each_concurrent(8, |info| async move {
                let _ = self.check(info).await;
            })
            .await;
    }

    /// Whether `info` is known to be refused.
    pub fn refused(&self, info: &ResourceInfo) -> Option<String> {
        match self.lock().get(&info.canonical_name()) {
            Some(Known::Refused { missing, at }) if at.elapsed() < RECHECK => {
                Some(what_to_grant(info, missing))
            }
            _ => None,
        }
    }

    /// The upstream answered `verb` with 403: remembered as a refusal.
    pub fn forbidden(&self, info: &ResourceInfo, verb: &'static str) -> String {
        let missing = vec![verb];
        self.lock().insert(
            info.canonical_name(),
            Known::Refused {
                missing: missing.clone(),
                at: Instant::now(),
            },
        );
        what_to_grant(info, &missing)
    }

    /// RBAC changed: ask again.
    pub fn forget(&self) {
        self.lock().clear();
        self.changes.advance();
    }

    /// Moves when what is known was forgotten.
    pub fn changes(&self) -> &Epoch {
        &self.changes
    }

    async fn review(&self, info: &ResourceInfo, verb: &str) -> bool {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    group: Some(info.api.group.clone()),
                    resource: Some(info.api.plural.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), &review).await {
            Ok(done) => done.status.is_some_and(|s| s.allowed),
            Err(err) => {
                tracing::debug!(resource = %info.canonical_name(), verb, error = %err,
                    "cannot review kubefan's own access; assuming it may");
                true
            }
        }
    }
}

/// What the operator must grant kubefan to serve `info`.
fn what_to_grant(info: &ResourceInfo, missing: &[&str]) -> String {
    format!(
        "kubefan's own credentials may not {} {} across all namespaces: grant its ClusterRole get, list and watch on {:?} in API group {:?} (see deploy/rbac.yaml)",
        missing.join(", "),
        info.canonical_name(),
        info.api.plural,
        info.api.group,
    )
}
