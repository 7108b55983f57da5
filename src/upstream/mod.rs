//! Upstream: one informer per resource, shared by every subscriber.
//!
//! [`Informers`] is the registry. It resolves the names clients use through
//! discovery, applies the resource policy, and runs one informer task per
//! resource, so the API server sees exactly one list+watch per resource.
//!
//! # Policy
//! A resource is served when the upstream serves it (CRDs included) and
//! the policy allows it (`policy`); refusals are [`Error::Forbidden`]
//! naming the flag.
//!
//! # Lifecycle
//! - Boot resources start at start-up and run until shutdown.
//! - Any other resource starts on first use ([`Informers::hub`]) with a
//!   fresh hub, and stops after `idle_grace` without users: a supervisor
//!   task follows the hub's user count ([`Hub::subscribers_rx`]); once it
//!   has stayed at 0, unchanged, for the whole grace period, the hub is
//!   closed ([`Hub::close_if_unused`], atomic with [`Hub::enter`]) and
//!   removed from the registry under its lock, and the informer is
//!   cancelled. The next user starts a new informer and hub.
//! - Users are counted by [`Hub::enter`]: every [`crate::hub::Subscription`]
//!   enters on start; a one-off reader (a LIST served from `hub.objects()`)
//!   holds `hub.enter()?` while it reads. The grace period therefore runs
//!   from the last user leaving, and any entry or exit restarts it: "last
//!   used" time without a clock of its own.
//! - A request that fetched a hub just before it was stopped gets
//!   `SubscriptionError::Closed` from it; [`Informers::with_hub`] retries
//!   such a request once on a fresh hub. A hub is removed from the
//!   registry no later than it is closed, so the retry never sees it.
//! - A LIST or WATCH answered with 404 makes the registry re-read
//!   discovery. If the resource is gone (a deleted CRD), its hub is closed
//!   ("resource removed upstream": subscribers get an error and their
//!   streams end), removed, its informer stopped, and the new catalog no
//!   longer resolves it (404 to new requests). A boot resource removed so
//!   reports not ready with that reason; it starts again, still as a boot
//!   resource, on its next request after it reappears. A resource that
//!   appears later is found by the rate-limited discovery refresh on an
//!   unknown name.
//!
//! # kubefan's own reads
//! What kubefan follows for itself (RBAC kinds, CRDs) it reads through
//! `reflector`, as an internal subscription of the resource's hub; those
//! tasks run on the same tracker as the informers.
//!
//! # Locks
//! `registry` (std mutex, never held across an await) is taken before a
//! hub's state lock, never the other way round.

pub mod access;
mod beside;
mod boot;
pub mod discovery;
pub mod events;
pub mod informer;
pub mod ingest;
pub mod list;
mod policy;
pub mod positions;
pub mod reflector;
mod registry;
pub mod warning;
pub mod watchlist;

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use kube::Client;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::hub::{Hub, LogLimits, SubscriptionError};
use crate::metrics::Metrics;
use boot::BootResource;
pub use boot::Readiness;
pub use discovery::{Catalog, ResourceInfo};
pub use informer::InformerConfig;
pub use ingest::IngestOptions;
pub use list::ListMode;
pub use positions::PositionsConfig;
use registry::Registry;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown resource {0:?}")]
    UnknownResource(String),
    #[error("resource {0} is not served by this gateway{1}")]
    Forbidden(String, &'static str),
    /// Discovery failed: why, after the API server's URL where known.
    #[error("upstream discovery failed: {0}")]
    Discovery(String),
    /// kubefan's own credentials may not read the resource: what to grant.
    #[error("{0}")]
    Unreadable(String),
}

/// Resource policy and informer settings.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    /// Resources whose informers start at boot; `/readyz` waits for them.
    /// They never stop for lack of subscribers.
    pub boot_resources: Vec<String>,
    /// Resources kubefan reads for itself (the RBAC kinds under
    /// `--authorization rbac`): started at boot like `boot_resources` and
    /// waited for by `/readyz`, but exempt from the policy, which is about
    /// what clients may use.
    pub internal_resources: Vec<String>,
    /// Resources served (names as clients use them); empty: everything the
    /// upstream serves.
    pub allow_resources: Vec<String>,
    /// Resources refused even when allowed.
    pub deny_resources: Vec<String>,
    /// Serve Secrets at all (values are still blanked unless
    /// `informer.ingest.reveal_secret_data`).
    pub allow_secrets: bool,
    /// How long an on-demand informer runs on without users.
    pub idle_grace: Duration,
    /// Discovery is refreshed at most this often when a name is not
    /// found, so CRDs installed after start are found without a
    /// discovery storm.
    pub discovery_refresh: Duration,
    pub informer: InformerConfig,
    pub log_limits: LogLimits,
    /// Where hubs' positions are kept across a restart (`--state-dir`).
    pub positions: Option<PositionsConfig>,
    /// The cluster's name (`--cluster`), on every log line of its
    /// informers; `None` for the unnamed cluster.
    pub cluster: Option<String>,
    /// The API server's URL, named by errors that say it could not be
    /// reached; `None` where the client was built without one at hand.
    pub server: Option<String>,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            boot_resources: Vec::new(),
            internal_resources: Vec::new(),
            allow_resources: Vec::new(),
            deny_resources: Vec::new(),
            allow_secrets: false,
            idle_grace: Duration::from_secs(300),
            discovery_refresh: Duration::from_secs(5),
            informer: InformerConfig::default(),
            log_limits: LogLimits::default(),
            positions: None,
            cluster: None,
            server: None,
        }
    }
}

pub struct Informers {
    /// `Informers` is only built by [`Informers::new`], inside an `Arc`;
    /// tasks it spawns hold a strong reference taken from this.
    me: Weak<Informers>,
    client: Client,
    cfg: UpstreamConfig,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    catalog: std::sync::RwLock<Option<Arc<Catalog>>>,
    /// Serialises refreshes and remembers when the last one started.
    /// Lookups of known names never wait for it.
    refreshed: tokio::sync::Mutex<Option<Instant>>,
    registry: Mutex<Registry>,
    boot: Mutex<Vec<BootResource>>,
    /// The allow/deny names were checked against discovery.
    policy_checked: AtomicBool,
    /// What kubefan's own credentials may read.
    self_access: access::SelfAccess,
    /// Moves when a boot resource may need starting again (its hub was
    /// retired, or what kubefan may read was forgotten).
    boot_wake: crate::epoch::Epoch,
    /// Moves when a boot resource's state changed.
    boot_changes: crate::epoch::Epoch,
    /// Positions saved before a restart, and where they are saved now.
    positions: Option<Arc<positions::Positions>>,
    /// Its tasks run in it: their logs name the cluster (`--cluster`).
    span: tracing::Span,
}

impl Informers {
    /// Fails only if `cfg.positions` names a directory that cannot be
    /// created.
    pub fn new(
        client: Client,
        cfg: UpstreamConfig,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> std::io::Result<Arc<Informers>> {
        let positions = match &cfg.positions {
            Some(p) => Some(Arc::new(positions::Positions::open(p).map_err(|e| {
                std::io::Error::new(e.kind(), format!("--state-dir {}: {e}", p.dir.display()))
            })?)),
            None => None,
        };
        let boot = cfg
            .boot_resources
            .iter()
            .map(|r| (r, false))
            .chain(cfg.internal_resources.iter().map(|r| (r, true)))
            .map(|(name, internal)| BootResource {
                name: name.clone(),
                internal,
                state: Err("not started".to_string()),
            })
            .collect();
        let client_for_access = client.clone();
        let span = match &cfg.cluster {
            Some(name) => tracing::info_span!("cluster", cluster = %name),
            None => tracing::Span::none(),
        };
        Ok(Arc::new_cyclic(|me| Informers {
            span,
            me: me.clone(),
            client,
            cfg,
            metrics,
            shutdown,
            tasks: TaskTracker::new(),
            catalog: std::sync::RwLock::new(None),
            refreshed: tokio::sync::Mutex::new(None),
            registry: Mutex::new(Registry::default()),
            boot: Mutex::new(boot),
            policy_checked: AtomicBool::new(false),
            self_access: access::SelfAccess::new(client_for_access),
            boot_wake: crate::epoch::Epoch::default(),
            boot_changes: crate::epoch::Epoch::default(),
            positions,
        }))
    }

    /// Runs `task` on the informers' tracker, in their cluster's span.
    fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        use tracing::Instrument as _;
        self.tasks.spawn(task.instrument(self.span.clone()));
    }

    fn arc(&self) -> Arc<Informers> {
        // See `me`: whoever holds `&self` holds the `Arc` it lives in.
        self.me.upgrade().expect("Informers lives in an Arc")
    }

    /// What kubefan's own credentials may read.
    pub fn self_access(&self) -> &access::SelfAccess {
        &self.self_access
    }

    /// RBAC changed: what kubefan may read is asked again, and refused boot
    /// resources are tried again.
    pub fn rbac_changed(&self) {
        self.self_access.forget();
        self.boot_wake.advance();
    }

    /// The hub for a resource name, starting its informer on first use.
    /// The hub returned may be closed at any moment after (stopped while
    /// idle, or removed upstream): use [`Informers::with_hub`] to join it.
    pub async fn hub(&self, name: &str) -> Result<Arc<Hub>, Error> {
        self.start(name, false, true).await
    }

    /// The hub of a resource kubefan reads for itself (see
    /// `UpstreamConfig::internal_resources`): started if need be, never
    /// stopped, exempt from the policy.
    pub async fn internal_hub(&self, name: &str) -> Result<Arc<Hub>, Error> {
        self.start(name, true, false).await
    }

    /// Runs `join` (a subscription start, or a read under `hub.enter()`)
    /// on the resource's hub. If that hub was closed in between (stopped
    /// for idleness just as this request fetched it), runs it once more on
    /// a fresh hub; a resource removed upstream then answers
    /// [`Error::UnknownResource`].
    pub async fn with_hub<T, E, F, Fut>(&self, name: &str, mut join: F) -> Result<T, E>
    where
        F: FnMut(Arc<Hub>) -> Fut,
        Fut: Future<Output = Result<T, SubscriptionError>>,
        E: From<Error> + From<SubscriptionError>,
    {
        let hub = self.hub(name).await?;
        match join(hub).await {
            Err(SubscriptionError::Closed(..)) => {
                let hub = self.hub(name).await?;
                Ok(join(hub).await?)
            }
            other => Ok(other?),
        }
    }

    /// Resolves a name through discovery, refreshing it (rate-limited) when
    /// the name is not found, so new CRDs appear.
    pub async fn resolve(&self, name: &str) -> Result<ResourceInfo, Error> {
        if let Some(info) = self.lookup(name) {
            return Ok(info);
        }
        let mut refreshed = self.refreshed.lock().await;
        // A refresh that finished while we waited may have found it.
        if let Some(info) = self.lookup(name) {
            return Ok(info);
        }
        if refreshed.is_none_or(|t| t.elapsed() >= self.cfg.discovery_refresh) {
            let have_catalog = self.current_catalog().is_some();
            match self.discover(&mut refreshed).await {
                Ok(_) => {}
                Err(err) if !have_catalog => return Err(err),
                Err(err) => {
                    tracing::warn!(error = %err, "discovery refresh failed; keeping the previous catalog")
                }
            }
        }
        self.lookup(name)
            .ok_or_else(|| Error::UnknownResource(name.to_string()))
    }

    /// A catalog read no earlier than `since`: the current one if a
    /// refresh started since, otherwise a fresh one.
    async fn refresh(&self, since: Instant) -> Result<Arc<Catalog>, Error> {
        let mut refreshed = self.refreshed.lock().await;
        if let (Some(last), Some(catalog)) = (*refreshed, self.current_catalog())
            && last >= since
        {
            return Ok(catalog);
        }
        self.discover(&mut refreshed).await
    }

    /// Reads discovery and installs the catalog; the caller holds the
    /// refresh lock (`refreshed`). A failure keeps the previous catalog;
    /// without one, the next lookup retries at once.
    async fn discover(&self, refreshed: &mut Option<Instant>) -> Result<Arc<Catalog>, Error> {
        let have_catalog = self.current_catalog().is_some();
        *refreshed = Some(Instant::now());
        match Catalog::discover(&self.client).await {
            Ok(catalog) => {
                let catalog = Arc::new(catalog);
                *self.catalog.write().unwrap_or_else(PoisonError::into_inner) =
                    Some(catalog.clone());
                Ok(catalog)
            }
            Err(err) => {
                if !have_catalog {
                    *refreshed = None;
                }
                Err(Error::Discovery(match &self.cfg.server {
                    Some(server) => format!("{server}: {err}"),
                    None => err.to_string(),
                }))
            }
        }
    }

    fn current_catalog(&self) -> Option<Arc<Catalog>> {
        self.catalog
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn lookup(&self, name: &str) -> Option<ResourceInfo> {
        self.current_catalog()?.resolve(name).cloned()
    }

    /// The upstream's discovery catalog, discovering it on first use.
    pub async fn catalog(&self) -> Result<Arc<Catalog>, Error> {
        if let Some(catalog) = self.current_catalog() {
            return Ok(catalog);
        }
        // Resolving any name fills the catalog (or reports why it cannot).
        match self.resolve("pods").await {
            Ok(_) | Err(Error::UnknownResource(_)) => {}
            Err(err) => return Err(err),
        }
        self.current_catalog()
            .ok_or_else(|| Error::Discovery("no discovery information".into()))
    }

    /// The Kubernetes client kubefan uses upstream.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Hubs running now, in no order.
    pub fn hubs(&self) -> Vec<Arc<Hub>> {
        self.lock_registry()
            .running
            .values()
            .map(|active| active.hub.clone())
            .collect()
    }

    /// Waits for every informer and reflector task to end (after shutdown
    /// is cancelled).
    pub async fn stopped(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}
