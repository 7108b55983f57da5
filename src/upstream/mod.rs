//! Upstream: one informer per resource, shared by every subscriber.
//!
//! [`Informers`] resolves the names clients use through discovery, applies
//! the resource policy (Secrets refused unless allowed), and starts one
//! informer task per resource: at boot for configured resources, on first
//! subscription for the others. The hub it feeds lives as long as the
//! process; the API server sees exactly one list+watch per resource.

pub mod discovery;
pub mod informer;
pub mod ingest;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::Api;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::hub::{Hub, LogLimits, ResourceMeta};
use crate::ops::Metrics;
pub use discovery::{Catalog, ResourceInfo};
pub use informer::InformerConfig;
pub use ingest::IngestOptions;

/// Discovery is refreshed at most this often when a name is not found, so
/// CRDs installed after start are found without a discovery storm.
const DISCOVERY_REFRESH: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown resource {0:?}")]
    UnknownResource(String),
    #[error("resource {0} is not served by this gateway{1}")]
    Forbidden(String, &'static str),
    #[error("upstream discovery failed: {0}")]
    Discovery(String),
}

/// Resource policy and informer settings.
#[derive(Debug, Clone, Default)]
pub struct UpstreamConfig {
    /// Resources whose informers start at boot; `/readyz` waits for them.
    pub boot_resources: Vec<String>,
    /// Serve Secrets at all (values are still blanked unless
    /// `informer.ingest.reveal_secret_data`).
    pub allow_secrets: bool,
    pub informer: InformerConfig,
    pub log_limits: LogLimits,
}

/// Readiness of one boot-time resource.
#[derive(Debug, Clone)]
pub struct Readiness {
    pub resource: String,
    pub ready: bool,
    pub reason: Option<String>,
}

pub struct Informers {
    client: Client,
    cfg: UpstreamConfig,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    catalog: std::sync::RwLock<Option<Arc<Catalog>>>,
    /// Serialises refreshes and remembers the last one. Lookups of known
    /// names never wait for it.
    refreshed: tokio::sync::Mutex<Option<Instant>>,
    hubs: Mutex<HashMap<String, Arc<Hub>>>,
    boot: Mutex<Vec<BootResource>>,
}

/// A boot resource name → its hub, or why it has none yet.
type BootResource = (String, Result<Arc<Hub>, String>);

impl Informers {
    pub fn new(
        client: Client,
        cfg: UpstreamConfig,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Arc<Informers> {
        let boot = cfg
            .boot_resources
            .iter()
            .map(|r| (r.clone(), Err("not started".to_string())))
            .collect();
        Arc::new(Informers {
            client,
            cfg,
            metrics,
            shutdown,
            tasks: TaskTracker::new(),
            catalog: std::sync::RwLock::new(None),
            refreshed: tokio::sync::Mutex::new(None),
            hubs: Mutex::new(HashMap::new()),
            boot: Mutex::new(boot),
        })
    }

    /// Starts the boot-time informers in the background. Discovery
    /// failures are retried with back-off; unknown or refused names stay
    /// not-ready in `/readyz` with the reason.
    pub fn start_boot(self: &Arc<Self>) {
        let this = self.clone();
        self.tasks.spawn(async move {
            let mut delay = this.cfg.informer.backoff_min;
            loop {
                let mut pending = false;
                let names: Vec<String> = this.lock_boot().iter().map(|(n, _)| n.clone()).collect();
                for (i, name) in names.iter().enumerate() {
                    if this.lock_boot()[i].1.is_ok() {
                        continue;
                    }
                    let state = match this.hub(name).await {
                        Ok(hub) => Ok(hub),
                        Err(err) => {
                            pending |= matches!(err, Error::Discovery(_));
                            tracing::error!(resource = %name, error = %err, "boot-time resource not started");
                            Err(err.to_string())
                        }
                    };
                    this.lock_boot()[i].1 = state;
                }
                if !pending {
                    return;
                }
                tokio::select! {
                    _ = this.shutdown.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(this.cfg.informer.backoff_max);
            }
        });
    }

    fn lock_boot(&self) -> std::sync::MutexGuard<'_, Vec<BootResource>> {
        self.boot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The hub for a resource name, starting its informer on first use.
    pub async fn hub(&self, name: &str) -> Result<Arc<Hub>, Error> {
        let info = self.resolve(name).await?;
        if info.api.group.is_empty() && info.api.plural == "secrets" && !self.cfg.allow_secrets {
            return Err(Error::Forbidden(
                info.canonical_name(),
                " (Secrets are refused unless --allow-secrets)",
            ));
        }
        let key = info.canonical_name();
        let mut hubs = self.hubs.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(hub) = hubs.get(&key) {
            return Ok(hub.clone());
        }
        let hub = Hub::new(
            ResourceMeta {
                name: key.clone(),
                api_version: info.api.api_version.clone(),
                kind: info.api.kind.clone(),
            },
            self.cfg.log_limits,
            self.metrics.clone(),
        );
        hubs.insert(key.clone(), hub.clone());
        drop(hubs);
        tracing::info!(resource = %key, "starting informer");
        let informer = informer::Informer {
            hub: hub.clone(),
            api: Api::all_with(self.client.clone(), &info.api),
            resource: info.api.clone(),
            cfg: self.cfg.informer,
            metrics: self.metrics.clone(),
            shutdown: self.shutdown.clone(),
        };
        self.tasks.spawn(informer.run());
        Ok(hub)
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
        if refreshed.is_none_or(|t| t.elapsed() >= DISCOVERY_REFRESH) {
            *refreshed = Some(Instant::now());
            let have_catalog = self.current_catalog().is_some();
            match Catalog::discover(&self.client).await {
                Ok(catalog) => {
                    *self.catalog.write().unwrap_or_else(PoisonError::into_inner) =
                        Some(Arc::new(catalog));
                }
                Err(err) if !have_catalog => {
                    // Let the next request try again right away.
                    *refreshed = None;
                    return Err(Error::Discovery(err.to_string()));
                }
                Err(err) => {
                    tracing::warn!(error = %err, "discovery refresh failed; keeping the previous catalog")
                }
            }
        }
        self.lookup(name)
            .ok_or_else(|| Error::UnknownResource(name.to_string()))
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

    /// Per boot-time resource: synced or not, and why not.
    pub fn readiness(&self) -> Vec<Readiness> {
        self.lock_boot()
            .iter()
            .map(|(name, state)| match state {
                Ok(hub) if hub.is_synced() => Readiness {
                    resource: hub.name().to_string(),
                    ready: true,
                    reason: None,
                },
                Ok(hub) => Readiness {
                    resource: hub.name().to_string(),
                    ready: false,
                    reason: Some("waiting for the first list from the API server".into()),
                },
                Err(reason) => Readiness {
                    resource: name.clone(),
                    ready: false,
                    reason: Some(reason.clone()),
                },
            })
            .collect()
    }

    /// Hubs started so far, by canonical name.
    pub fn hubs(&self) -> Vec<Arc<Hub>> {
        self.hubs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Waits for every informer task to end (after shutdown is cancelled).
    pub async fn stopped(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}
