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
pub mod discovery;
pub mod informer;
pub mod ingest;
mod policy;
pub mod positions;
pub mod reflector;
mod registry;
pub mod warning;

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use kube::Client;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::hub::{Hub, LogLimits, SubscriptionError};
use crate::metrics::Metrics;
pub use discovery::{Catalog, ResourceInfo};
pub use informer::InformerConfig;
pub use ingest::IngestOptions;
pub use positions::PositionsConfig;
use registry::Registry;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown resource {0:?}")]
    UnknownResource(String),
    #[error("resource {0} is not served by this gateway{1}")]
    Forbidden(String, &'static str),
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
        }
    }
}

/// Readiness of one boot-time resource.
#[derive(Debug, Clone)]
pub struct Readiness {
    pub resource: String,
    pub ready: bool,
    pub reason: Option<String>,
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

/// The first and the longest wait before a boot resource kubefan may not
/// read is tried again (unless RBAC changes first).
const REFUSED_RETRY_MIN: Duration = Duration::from_secs(30);
const REFUSED_RETRY_MAX: Duration = Duration::from_secs(300);

/// A boot resource: its name, whether kubefan reads it for itself
/// (exempt from the policy), and its hub or why it has none yet.
struct BootResource {
    name: String,
    internal: bool,
    state: Result<Arc<Hub>, String>,
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

    /// Starts the boot-time informers in the background, and checks the
    /// allow/deny names against discovery (unknown names are logged, not
    /// fatal: a CRD may be installed later). Discovery failures are
    /// retried with back-off; unknown or refused boot names stay not-ready
    /// in `/readyz` with the reason.
    pub fn start_boot(self: &Arc<Self>) {
        if let Some(positions) = self.positions.clone() {
            let this = self.clone();
            self.spawn(async move {
                positions
                    .keep_saving(|| this.hubs(), this.shutdown.clone())
                    .await
            });
        }
        let this = self.clone();
        self.spawn(async move {
            let mut delay = this.cfg.informer.backoff_min;
            let mut refused_delay = REFUSED_RETRY_MIN;
            loop {
                let wake = this.boot_wake.current();
                let mut pending = !this.check_policy_names().await;
                let mut refused = false;
                let names: Vec<(String, bool)> = this
                    .lock_boot()
                    .iter()
                    .map(|b| (b.name.clone(), b.internal))
                    .collect();
                for (i, (name, internal)) in names.iter().enumerate() {
                    let running = matches!(&this.lock_boot()[i].state, Ok(hub) if hub.closed().is_none());
                    if running {
                        continue;
                    }
                    match this.start(name, true, !internal).await {
                        Ok(hub) => {
                            this.lock_boot()[i].state = Ok(hub);
                            this.boot_changes.advance();
                        }
                        Err(err) => {
                            pending |= matches!(err, Error::Discovery(_));
                            refused |= matches!(err, Error::Unreadable(_));
                            tracing::error!(resource = %name, error = %err, "boot-time resource not started");
                            // A closed hub's reason (removed upstream, kubefan
                            // may not read it) says more than a failed restart.
                            let state = &mut this.lock_boot()[i].state;
                            if state.is_err() {
                                *state = Err(err.to_string());
                                this.boot_changes.advance();
                            }
                        }
                    }
                }
                // Discovery failing: retry soon. Refused: in minutes, or as
                // soon as RBAC changes. Otherwise only when woken.
                let sleep = if pending {
                    let d = delay;
                    delay = (delay * 2).min(this.cfg.informer.backoff_max);
                    Some(d)
                } else if refused {
                    let d = refused_delay;
                    refused_delay = (refused_delay * 2).min(REFUSED_RETRY_MAX);
                    Some(d)
                } else {
                    None
                };
                let woken = this.boot_wake.until(|| this.boot_wake.current() != wake);
                tokio::select! {
                    _ = this.shutdown.cancelled() => return,
                    _ = woken => {}
                    _ = tokio::time::sleep(sleep.unwrap_or(Duration::MAX / 4)), if sleep.is_some() => {}
                }
            }
        });
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

    fn lock_boot(&self) -> MutexGuard<'_, Vec<BootResource>> {
        self.boot.lock().unwrap_or_else(PoisonError::into_inner)
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
                Err(Error::Discovery(err.to_string()))
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

    /// Per boot-time resource: synced or not, and why not.
    pub fn readiness(&self) -> Vec<Readiness> {
        self.lock_boot()
            .iter()
            .map(|boot| match &boot.state {
                Ok(hub) => match hub.closed() {
                    Some(reason) => Readiness {
                        resource: hub.name().to_string(),
                        ready: false,
                        reason: Some(reason),
                    },
                    None if hub.is_synced() => Readiness {
                        resource: hub.name().to_string(),
                        ready: true,
                        reason: None,
                    },
                    None => Readiness {
                        resource: hub.name().to_string(),
                        ready: false,
                        reason: Some("waiting for the first list from the API server".into()),
                    },
                },
                Err(reason) => Readiness {
                    resource: boot.name.clone(),
                    ready: false,
                    reason: Some(reason.clone()),
                },
            })
            .collect()
    }

    /// Resolves once every boot resource is ready (what `/readyz` says).
    pub async fn ready(&self) {
        loop {
            let seen = self.boot_changes.current();
            let waiting: Vec<Arc<Hub>> = {
                let boot = self.lock_boot();
                let mut waiting = Vec::new();
                let mut unstarted = false;
                for b in boot.iter() {
                    match &b.state {
                        Ok(hub) if hub.closed().is_none() && hub.is_synced() => {}
                        Ok(hub) if hub.closed().is_none() => waiting.push(hub.clone()),
                        _ => unstarted = true,
                    }
                }
                if waiting.is_empty() && !unstarted {
                    return;
                }
                waiting
            };
            let started = self
                .boot_changes
                .until(|| self.boot_changes.current() != seen);
            let synced = futures::future::join_all(
                waiting
                    .iter()
                    .map(|hub| hub.wait_synced(Duration::from_secs(3600))),
            );
            tokio::select! {
                _ = started => {}
                _ = synced => {}
            }
        }
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
