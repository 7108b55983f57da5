//! What a principal may see of a resource: the namespaces to serve for a
//! request, refusals that never reveal whether a resource exists, and
//! what an open stream follows while its access changes.
//!
//! # Rules
//! - Decided before existence is revealed: a principal that may not see a
//!   resource gets 403 whether or not it exists; only one that would be
//!   allowed learns that a name is unknown (404).
//! - Naming a namespace not granted is 403; a cluster-scoped resource
//!   needs a cluster-wide grant.
//! - Asking for every namespace with access to only some: a **stream**
//!   (SSE, WebSocket) is narrowed to them, and follows them while open
//!   (`hub::scope`); the **Kubernetes face** answers 403, as kube-apiserver
//!   does (its clients assume a list across namespaces holds everything).

use std::sync::Arc;

use super::rbac::Rbac;
use super::rbac::access::{AccessSet, Namespaces, Request, request_namespace};
use super::scope::{CredentialScope, RbacScope, qualified};
use super::{Access, Authorizer, Grant, Principal, User, UserAuthorizer, Verb, kubernetes};
use crate::hub::scope::{FixedScope, Scope, Scoping};
use crate::status::ApiError;
use crate::upstream::{self, Informers, ResourceInfo};

/// How a request across every namespace is answered when the principal
/// may see only some.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcrossNamespaces {
    /// Serve the namespaces it may see (streams).
    Narrow,
    /// 403, as kube-apiserver answers (the Kubernetes face).
    Refuse,
}

impl Authorizer {
    /// Authorizes a stream of `name` (watch): the namespaces to serve now
    /// (empty: all), and what the stream follows while open, when its
    /// access can narrow or end it.
    pub async fn authorize_stream(
        &self,
        principal: &Principal,
        informers: &Informers,
        name: &str,
        requested: &[String],
    ) -> Result<(Vec<String>, Option<Scoping>), ApiError> {
        if matches!(principal.access(), Access::Everything) {
            return Ok((requested.to_vec(), None));
        }
        let info = match informers.resolve(name).await {
            Ok(info) => info,
            Err(err @ upstream::Error::UnknownResource(_)) => {
                let (plural, group) = name.split_once('.').unwrap_or((name, ""));
                return Err(self
                    .unknown(principal, group, plural, Verb::Watch, requested, err.into())
                    .await);
            }
            Err(err) => return Err(err.into()),
        };
        let namespaces = self
            .authorize(
                principal,
                informers,
                &info,
                Verb::Watch,
                requested,
                AcrossNamespaces::Narrow,
            )
            .await?;
        let scoping = self.scoping(principal, &info, requested);
        Ok((namespaces, scoping))
    }

    /// What an open watch of the Kubernetes face follows: its Kubernetes
    /// token's reviews alone (revoked: the watch ends with a 401, as a
    /// stream's does). Not RBAC: a watch there is authorized once, as
    /// kube-apiserver authorizes one (a stream's narrowing would make it
    /// a watch kube-apiserver never serves: all namespaces but some).
    pub fn watch_scoping(principal: &Principal, requested: &[String]) -> Option<Scoping> {
        let credential = principal.credential()?;
        Some(Scoping {
            source: Arc::new(CredentialScope {
                credential: credential.clone(),
            }),
            requested: requested.to_vec(),
        })
    }

    /// What an open stream of `info` follows, when its access can change
    /// what it shows or end it.
    fn scoping(
        &self,
        principal: &Principal,
        info: &ResourceInfo,
        requested: &[String],
    ) -> Option<Scoping> {
        let source: Arc<dyn crate::hub::scope::ScopeSource> = match principal.access() {
            Access::Everything => return None,
            Access::Claims {
                namespaces: Grant::Only(names),
                ..
            } => Arc::new(FixedScope::new(Scope::Only(names.clone()))),
            Access::Claims { .. } => return None,
            Access::User(user) => match (&self.users, principal.credential()) {
                (Some(UserAuthorizer::Rbac(rbac)), credential) => Arc::new(RbacScope {
                    access: rbac.hold(user),
                    credential: credential.cloned(),
                    verb: Verb::Watch,
                    group: info.api.group.clone(),
                    resource: info.api.plural.clone(),
                    namespaced: info.namespaced,
                }),
                (_, Some(credential)) => Arc::new(CredentialScope {
                    credential: credential.clone(),
                }),
                (_, None) => return None,
            },
        };
        Some(Scoping {
            source,
            requested: requested.to_vec(),
        })
    }

    /// Authorizes `verb` on a resolved resource for a request naming
    /// `requested` namespaces (empty: all): the namespaces to serve
    /// (empty: all).
    pub async fn authorize(
        &self,
        principal: &Principal,
        informers: &Informers,
        info: &ResourceInfo,
        verb: Verb,
        requested: &[String],
        across: AcrossNamespaces,
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
                narrow_claims(principal, verb, info, &resource, namespaces, requested)
            }
            Access::User(user) => match &self.users {
                Some(UserAuthorizer::Rbac(rbac)) => {
                    let access = self.rbac_access(rbac, user).await?;
                    rbac_namespaces(principal, &access, verb, info, requested, across)
                }
                Some(UserAuthorizer::Review(kube)) => {
                    review(kube, principal, user, verb, info, requested).await
                }
                None => Err(forbidden(principal, verb, &resource, None)),
            },
        }
    }

    /// Whether `principal` may `verb` the one object `name` of a resolved
    /// resource, in `namespace` (none: cluster-scoped, or every
    /// namespace): `resourceNames` grants count here. A `get` by the
    /// object's path, or a `list`/`watch` whose field selector requires
    /// `metadata.name=NAME`, which kube-apiserver authorizes with that name
    /// (`RequestInfo.Name`, `k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`).
    pub async fn authorize_named(
        &self,
        principal: &Principal,
        informers: &Informers,
        info: &ResourceInfo,
        verb: Verb,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), ApiError> {
        let ns = request_namespace(
            verb,
            &info.api.group,
            &info.api.plural,
            namespace.unwrap_or(""),
            name,
        );
        let allowed = match (principal.access(), &self.users) {
            (Access::User(user), Some(UserAuthorizer::Rbac(rbac))) => {
                let access = self.rbac_access(rbac, user).await?;
                access.allows(&Request {
                    verb,
                    group: &info.api.group,
                    resource: &info.api.plural,
                    subresource: "",
                    namespace: ns,
                    name,
                })
            }
            (Access::User(user), Some(UserAuthorizer::Review(kube))) => {
                let attrs = kubernetes::Attributes {
                    verb,
                    group: info.api.group.clone(),
                    resource: info.api.plural.clone(),
                    namespace: ns.to_string(),
                    name: name.to_string(),
                };
                kube.allowed(user, attrs).await?
            }
            // Claims and everything else name no objects: the collection's
            // rules decide.
            _ => {
                let requested: Vec<String> = namespace.iter().map(|n| n.to_string()).collect();
                return self
                    .authorize(
                        principal,
                        informers,
                        info,
                        verb,
                        &requested,
                        AcrossNamespaces::Refuse,
                    )
                    .await
                    .map(|_| ());
            }
        };
        if allowed {
            return Ok(());
        }
        let resource = info.canonical_name();
        Err(match namespace {
            Some(ns) => forbidden_in(principal, verb, &format!("{resource} {name:?}"), ns),
            None => forbidden(principal, verb, &format!("{resource} {name:?}"), None),
        })
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
        let name = qualified(group, plural);
        let may_know = match principal.access() {
            Access::Everything => true,
            Access::Claims { resources, .. } => *resources == Grant::All,
            Access::User(user) => match &self.users {
                Some(UserAuthorizer::Rbac(rbac)) => match self.rbac_access(rbac, user).await {
                    Ok(access) => access.namespaces(verb, group, plural) != Namespaces::Nothing,
                    Err(_) => false,
                },
                Some(UserAuthorizer::Review(kube)) => {
                    let ns = requested.first().cloned().unwrap_or_default();
                    let attrs = kubernetes::Attributes {
                        verb,
                        group: group.to_string(),
                        resource: plural.to_string(),
                        namespace: ns,
                        name: String::new(),
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

    /// Whether `principal` may get, list or watch anything in this
    /// cluster (what `/clusters` lists a cluster for). Under
    /// `--authorization review` there is no question to ask the API
    /// server for "anything", so a user it names sees the cluster, and
    /// each request is reviewed as it comes.
    pub async fn sees_anything(&self, principal: &Principal) -> bool {
        match principal.access() {
            Access::Everything | Access::Claims { .. } => true,
            Access::User(user) => match &self.users {
                Some(UserAuthorizer::Rbac(rbac)) => self
                    .rbac_access(rbac, user)
                    .await
                    .is_ok_and(|access| !access.is_empty()),
                Some(UserAuthorizer::Review(_)) => true,
                None => false,
            },
        }
    }

    /// The user's access set, once the RBAC objects are loaded (at most the
    /// sync timeout; 503 after).
    async fn rbac_access(&self, rbac: &Rbac, user: &User) -> Result<Arc<AccessSet>, ApiError> {
        if !rbac.synced() {
            let synced = self.rbac_changes.until(|| rbac.synced());
            if tokio::time::timeout(self.sync_timeout, synced)
                .await
                .is_err()
            {
                return Err(ApiError::Unavailable(
                    "the cluster's RBAC objects are not loaded yet; retry shortly".into(),
                ));
            }
        }
        Ok(rbac.access(user))
    }
}

/// `--authorization review`: a SubjectAccessReview per namespace asked
/// for, or one cluster-wide.
async fn review(
    kube: &kubernetes::Reviewer,
    principal: &Principal,
    user: &User,
    verb: Verb,
    info: &ResourceInfo,
    requested: &[String],
) -> Result<Vec<String>, ApiError> {
    let resource = info.canonical_name();
    let attrs = |namespace: &str| kubernetes::Attributes {
        verb,
        group: info.api.group.clone(),
        resource: info.api.plural.clone(),
        namespace: namespace.to_string(),
        name: String::new(),
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

/// The namespaces an RBAC access set lets `requested` see.
fn rbac_namespaces(
    principal: &Principal,
    access: &AccessSet,
    verb: Verb,
    info: &ResourceInfo,
    requested: &[String],
    across: AcrossNamespaces,
) -> Result<Vec<String>, ApiError> {
    let resource = info.canonical_name();
    let (group, plural) = (&info.api.group, &info.api.plural);
    if !info.namespaced {
        return if access.cluster_wide(verb, group, plural) {
            Ok(requested.to_vec())
        } else {
            Err(forbidden(principal, verb, &resource, None))
        };
    }
    match access.namespaces(verb, group, plural) {
        Namespaces::All => Ok(requested.to_vec()),
        Namespaces::Nothing => Err(forbidden(principal, verb, &resource, None)),
        Namespaces::Only(granted) if requested.is_empty() => match across {
            AcrossNamespaces::Narrow => Ok(granted.into_iter().collect()),
            AcrossNamespaces::Refuse => Err(forbidden(
                principal,
                verb,
                &resource,
                Some(" across all namespaces; ask within a namespace you may see"),
            )),
        },
        Namespaces::Only(granted) => match requested.iter().find(|ns| !granted.contains(*ns)) {
            Some(ns) => Err(forbidden_in(principal, verb, &resource, ns)),
            None => Ok(requested.to_vec()),
        },
    }
}

/// The namespaces a claim grant lets `requested` see.
fn narrow_claims(
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
