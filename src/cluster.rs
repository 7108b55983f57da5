//! The clusters a gateway serves: what one cluster has ([`Cluster`]), the
//! set of them ([`Clusters`]), and the one place a request's cluster is
//! chosen ([`Clusters::route`], called by the middleware before actix
//! routes the request).
//!
//! Without `--cluster` a gateway serves one unnamed cluster at the root
//! paths, exactly as before there were several. With it, each named
//! cluster is served under `/clusters/NAME/` (every route: streams,
//! `/ws`, the Kubernetes face and its discovery), and `--default-cluster`
//! is served at the root paths too. Nothing below the transports knows
//! there are several: a handler takes its request's cluster
//! ([`ClusterOf`]) where it would take the one cluster.

use std::future::{Ready, ready};
use std::sync::Arc;

use actix_web::{FromRequest, HttpMessage, HttpRequest};
use serde_json::{Value, json};

use crate::auth::{Access, Auth, Authorizer, Principal};
pub use crate::config::{ClustersConfig, ReadyWhen};
use crate::status::ApiError;
use crate::transport::kube::{KubePrinters, Pages, Probes};
use crate::upstream::Informers;

/// The prefix of a named cluster's paths: `/clusters/NAME/...`.
pub const PREFIX: &str = "/clusters/";

/// One cluster: its informers and hubs, its authorization, and the
/// Kubernetes face's caches (a `continue` token is held by the cluster
/// that listed it, so it cannot be spent on another).
pub struct Cluster {
    /// `None` for the one cluster of a gateway run without `--cluster`.
    name: Option<String>,
    informers: Arc<Informers>,
    authorizer: Arc<Authorizer>,
    pages: Pages,
    printers: Arc<KubePrinters>,
    probes: Arc<Probes>,
}

impl Cluster {
    pub fn new(
        name: Option<String>,
        informers: Arc<Informers>,
        authorizer: Arc<Authorizer>,
    ) -> Cluster {
        Cluster {
            name,
            informers,
            authorizer,
            pages: Pages::default(),
            printers: Arc::new(KubePrinters::default()),
            probes: Arc::default(),
        }
    }

    /// The cluster's name; `None` for the unnamed cluster.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    pub fn informers(&self) -> &Arc<Informers> {
        &self.informers
    }

    /// What principals may see here.
    pub fn authorizer(&self) -> &Arc<Authorizer> {
        &self.authorizer
    }

    /// The snapshots behind this cluster's `continue` tokens.
    pub fn pages(&self) -> &Pages {
        &self.pages
    }

    /// This cluster's table printers (its CRDs' columns).
    pub fn printers(&self) -> &Arc<KubePrinters> {
        &self.printers
    }

    /// This cluster's consistent-read probes.
    pub fn probes(&self) -> &Arc<Probes> {
        &self.probes
    }

    /// Whether every boot-time resource is synced.
    pub fn ready(&self) -> bool {
        self.informers.readiness().iter().all(|r| r.ready)
    }

    /// The readiness report of this cluster, as `/readyz` and `/clusters`
    /// give it.
    pub fn report(&self) -> Value {
        let report = self.informers.readiness();
        json!({
            "ready": report.iter().all(|r| r.ready),
            "resources": report.iter().map(|r| json!({
                "resource": r.resource, "ready": r.ready, "reason": r.reason,
            })).collect::<Vec<_>>(),
        })
    }
}

/// The clusters of one gateway, and the default one served at the root
/// paths.
pub struct Clusters {
    all: Vec<Arc<Cluster>>,
    default: Option<Arc<Cluster>>,
    ready_when: ReadyWhen,
}

impl Clusters {
    /// `all` in the order given; `default` names one of them (checked by
    /// `Config::validate`). One unnamed cluster is its own default.
    pub fn new(all: Vec<Arc<Cluster>>, default: Option<&str>, ready_when: ReadyWhen) -> Clusters {
        let default = match all.as_slice() {
            [only] if only.name.is_none() => Some(only.clone()),
            _ => default.and_then(|d| all.iter().find(|c| c.name() == Some(d)).cloned()),
        };
        Clusters {
            all,
            default,
            ready_when,
        }
    }

    /// Whether the gateway serves named clusters (`--cluster`).
    pub fn named(&self) -> bool {
        self.all.iter().any(|c| c.name.is_some())
    }

    pub fn all(&self) -> &[Arc<Cluster>] {
        &self.all
    }

    /// The cluster served at the root paths, if any.
    pub fn default_cluster(&self) -> Option<&Arc<Cluster>> {
        self.default.as_ref()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Cluster>> {
        self.all.iter().find(|c| c.name() == Some(name))
    }

    /// The cluster `path` is for: `/clusters/NAME/rest` names one (404 with
    /// a `Status` when it is unknown; `/clusters` alone is the gateway's
    /// list of them), any other path the default cluster. `/clusters/NAME`
    /// itself is routed as `/` (the middleware sends browsers on to
    /// `/clusters/NAME/`, where the dashboard's relative links work).
    pub fn route<'p>(
        &self,
        path: &'p str,
    ) -> Result<(Option<Arc<Cluster>>, Option<&'p str>), ApiError> {
        let Some(after) = path.strip_prefix(PREFIX).filter(|_| self.named()) else {
            return Ok((self.default.clone(), None));
        };
        let (name, rest) = match after.find('/') {
            Some(i) => (&after[..i], &after[i..]),
            None => (after, "/"),
        };
        match self.get(name) {
            Some(cluster) => Ok((Some(cluster.clone()), Some(rest))),
            None => Err(ApiError::NotFound(format!(
                "no cluster {name:?} is served here (GET /clusters lists them)"
            ))),
        }
    }

    /// Whether the gateway is ready (`--ready-when`).
    pub fn ready(&self) -> bool {
        match self.ready_when {
            ReadyWhen::Any => self.all.iter().any(|c| c.ready()),
            ReadyWhen::All => self.all.iter().all(|c| c.ready()),
        }
    }

    /// The clusters `principal` may see: a cluster is listed when the
    /// principal, as that cluster knows it (`Auth::principal_in`), may
    /// read something there. Asked of every cluster at once, none waited
    /// for: a cluster whose RBAC objects are not loaded yet is listed (its
    /// name is no secret, `/readyz` says it; what it holds is refused
    /// until they are).
    pub async fn visible(&self, auth: &Auth, principal: &Principal) -> Vec<&Arc<Cluster>> {
        let asks = self.all.iter().map(|cluster| async move {
            match principal.access() {
                Access::Everything | Access::Claims { .. } => true,
                Access::User(_) if !cluster.authorizer.loaded() => true,
                Access::User(_) => match auth.principal_in(principal, &cluster.authorizer).await {
                    Ok(there) => cluster.authorizer.sees_anything(&there).await,
                    Err(_) => false,
                },
            }
        });
        let sees = futures::future::join_all(asks).await;
        self.all
            .iter()
            .zip(sees)
            .filter_map(|(cluster, sees)| sees.then_some(cluster))
            .collect()
    }
}

/// The cluster a DNS label may name: what `--cluster NAME=...` accepts,
/// since the name is a path segment, a metric label and a part of
/// compound event ids (`a=123,b=456`).
pub fn check_name(name: &str) -> Result<(), String> {
    check_label(name)
        .map_err(|why| format!("cluster name {name:?} is not a DNS label (RFC 1123): {why}"))
}

/// Why `name` is not a DNS label (RFC 1123: at most 63 lowercase letters,
/// digits and '-', starting and ending with a letter or a digit).
pub fn check_label(name: &str) -> Result<(), &'static str> {
    let why = if name.is_empty() {
        "it is empty"
    } else if name.len() > 63 {
        "it is longer than 63 characters"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        "it may hold only lowercase letters, digits and '-'"
    } else if name.starts_with('-') || name.ends_with('-') {
        "it must start and end with a letter or a digit"
    } else {
        return Ok(());
    };
    Err(why)
}

/// Refuses a set of clusters that cannot be served, saying why: one
/// unnamed cluster, or one or more named ones, each name a DNS label,
/// none twice; `default` must name one of them.
pub fn check_names(names: &[Option<&str>], default: Option<&str>) -> Result<(), String> {
    match names {
        [] => return Err("no cluster to serve".into()),
        [None] => {
            return match default {
                Some(d) => Err(format!(
                    "--default-cluster {d:?} names no cluster: give the clusters with --cluster NAME=KUBECONFIG"
                )),
                None => Ok(()),
            };
        }
        _ => {}
    }
    let mut seen = std::collections::BTreeSet::new();
    for name in names {
        let Some(name) = name else {
            return Err(
                "with several clusters, every cluster has a name (--cluster NAME=KUBECONFIG)"
                    .into(),
            );
        };
        check_name(name)?;
        if !seen.insert(*name) {
            return Err(format!("cluster {name:?} is given twice"));
        }
    }
    match default {
        Some(d) if !seen.contains(d) => Err(format!(
            "--default-cluster {d:?} is not one of the clusters ({})",
            seen.into_iter().collect::<Vec<_>>().join(", ")
        )),
        _ => Ok(()),
    }
}

/// The request's cluster, as the middleware chose it: a handler's
/// extractor. A root path of a gateway with named clusters and no
/// `--default-cluster` has none: 404 saying where the clusters are.
pub struct ClusterOf(pub Arc<Cluster>);

impl std::ops::Deref for ClusterOf {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        &self.0
    }
}

impl ClusterOf {
    /// The cluster the middleware chose for `req`.
    pub fn of(req: &HttpRequest) -> Result<ClusterOf, ApiError> {
        req.extensions()
            .get::<ClusterOf>()
            .map(|c| ClusterOf(c.0.clone()))
            .ok_or_else(|| {
                ApiError::NotFound(format!(
                    "{} names no cluster and this gateway has no --default-cluster: use /clusters/NAME{} (GET /clusters lists them)",
                    req.path(),
                    req.path()
                ))
            })
    }
}

/// In a request's extensions when its path named its cluster
/// (`/clusters/NAME/...`), rather than defaulting to one.
#[derive(Clone, Copy)]
pub struct Prefixed;

/// In a request's extensions when the middleware took it for a request
/// across clusters (`/clusters`, a stream naming `clusters`, `/ws` at the
/// root of a gateway of several clusters): its token was reviewed by
/// whichever cluster knew it, so what it reads of any one cluster, the
/// default too, is that cluster's to review again
/// (`Auth::principal_in`).
#[derive(Clone, Copy)]
pub struct Across;

impl FromRequest for ClusterOf {
    type Error = ApiError;
    type Future = Ready<Result<ClusterOf, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        ready(ClusterOf::of(req))
    }
}

impl Clone for ClusterOf {
    fn clone(&self) -> ClusterOf {
        ClusterOf(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::check_name;

    #[test]
    fn a_cluster_name_is_a_dns_label() {
        for good in ["a", "prod", "eu-west-1", "0", "a".repeat(63).as_str()] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("Prod", "lowercase"),
            ("a.b", "lowercase"),
            ("a=b", "lowercase"),
            ("a,b", "lowercase"),
            ("-a", "start and end"),
            ("a-", "start and end"),
            (&"a".repeat(64), "longer than 63"),
        ] {
            let err = check_name(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }
}
