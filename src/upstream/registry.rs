//! The informers running now: starting one on first use, supervising an
//! on-demand one until it has been idle for the grace period, retiring one
//! whose resource is gone upstream (see the module doc of `upstream` for
//! the lifecycle and the lock order).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use kube::api::Api;
use tokio_util::sync::CancellationToken;

use super::policy::refusal;
use super::{Error, Informers, ResourceInfo, informer};
use crate::hub::{Hub, ResourceMeta};

#[derive(Default)]
pub(super) struct Registry {
    pub(super) running: HashMap<String, Active>,
    /// Canonical names of boot resources, once resolved.
    pub(super) boot: HashSet<String>,
}

/// A started informer. Its tasks (informer, idle supervisor) share a
/// child of the shutdown token, which stopping it cancels.
pub(super) struct Active {
    pub(super) hub: Arc<Hub>,
    pub(super) boot: bool,
}

impl Informers {
    pub(super) fn lock_registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The hub for `name`, starting its informer if need be; `policy`:
    /// whether the client policy applies (not to what kubefan reads for
    /// itself).
    pub(super) async fn start(
        &self,
        name: &str,
        boot: bool,
        policy: bool,
    ) -> Result<Arc<Hub>, Error> {
        let info = self.resolve(name).await?;
        let key = info.canonical_name();
        // `resolve` succeeded, so there is a catalog.
        let catalog = self.current_catalog().unwrap_or_default();
        if policy && let Some(why) = refusal(&self.cfg, &catalog, &info) {
            return Err(Error::Forbidden(key, why));
        }
        if !self.lock_registry().running.contains_key(&key) {
            self.self_access
                .check(&info)
                .await
                .map_err(Error::Unreadable)?;
        }
        let mut reg = self.lock_registry();
        if boot {
            reg.boot.insert(key.clone());
        }
        let boot = reg.boot.contains(&key);
        if let Some(active) = reg.running.get_mut(&key) {
            active.boot |= boot;
            return Ok(active.hub.clone());
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
        let stop = self.shutdown.child_token();
        reg.running.insert(
            key.clone(),
            Active {
                hub: hub.clone(),
                boot,
            },
        );
        drop(reg);
        if boot {
            // A boot resource started again after it was removed upstream.
            for boot in self.lock_boot().iter_mut() {
                if matches!(&boot.state, Ok(old) if old.name() == key) {
                    boot.state = Ok(hub.clone());
                }
            }
        }
        tracing::info!(resource = %key, on_demand = !boot, "starting informer");
        self.metrics.informer_running(&key, true);
        let this = self.arc();
        self.spawn(this.clone().run_informer(info, hub.clone(), stop.clone()));
        if !boot {
            self.spawn(this.stop_when_idle(hub.clone(), stop));
        }
        Ok(hub)
    }

    /// Runs the informer until stopped. On 404 it re-reads discovery: a
    /// resource that is gone is retired, one still listed is retried.
    async fn run_informer(
        self: Arc<Self>,
        info: ResourceInfo,
        hub: Arc<Hub>,
        stop: CancellationToken,
    ) {
        let mut delay = self.cfg.informer.backoff_min;
        let mut start_at = self.positions.as_ref().and_then(|p| p.take(hub.name()));
        loop {
            let informer = informer::Informer {
                hub: hub.clone(),
                api: Api::all_with(self.client.clone(), &info.api),
                resource: info.api.clone(),
                cfg: self.cfg.informer,
                metrics: self.metrics.clone(),
                shutdown: stop.clone(),
                start_at: start_at.take(),
            };
            match informer.run().await {
                informer::Exit::Stopped => return,
                informer::Exit::Forbidden(verb) => {
                    // Retrying cannot help: say what to grant, and let the
                    // next request (or the boot supervisor, on an RBAC
                    // change or in minutes) start it again.
                    let why = self.self_access.forbidden(&info, verb);
                    tracing::error!(resource = %hub.name(), "{why}");
                    self.retire(&hub, &stop, &why);
                    return;
                }
                informer::Exit::NotFound => {}
            }
            let key = hub.name();
            match self.refresh(Instant::now()).await {
                Ok(catalog) => match catalog
                    .resources()
                    .iter()
                    .find(|r| r.canonical_name() == key)
                {
                    None => {
                        self.retire(&hub, &stop, "resource removed upstream");
                        return;
                    }
                    // Served at another version now (a CRD's that stopped
                    // serving this one): the hub's objects are of this
                    // one, so it ends, and the next subscriber starts one
                    // at the version discovery prefers.
                    Some(now) if now.api.version != info.api.version => {
                        let why = format!(
                            "its API server serves version {} now, not {}; subscribe again for it",
                            now.api.version, info.api.version
                        );
                        self.retire(&hub, &stop, &why);
                        return;
                    }
                    Some(_) => {
                        tracing::warn!(resource = %key, "upstream answered 404 but still lists the resource; retrying")
                    }
                },
                Err(err) => {
                    tracing::warn!(resource = %key, error = %err, "upstream answered 404 and discovery failed; retrying")
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(self.cfg.informer.backoff_max);
        }
    }

    /// Closes an on-demand hub once its user count has stayed at 0,
    /// unchanged, for `idle_grace`.
    async fn stop_when_idle(self: Arc<Self>, hub: Arc<Hub>, stop: CancellationToken) {
        let grace = self.cfg.idle_grace;
        let mut users = hub.subscribers_rx();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                idle = users.wait_for(|n| *n == 0) => if idle.is_err() { return },
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                // Anyone entering (even entering and leaving again)
                // restarts the grace period.
                changed = users.changed() => {
                    if changed.is_err() { return }
                    continue;
                }
                _ = tokio::time::sleep(grace) => {}
            }
            if self.stop_if_idle(&hub, &stop, grace) {
                return;
            }
        }
    }

    /// Stops an idle informer; false if a user came in meanwhile. True
    /// also when there is nothing left to supervise (the hub was replaced
    /// or became a boot resource).
    fn stop_if_idle(&self, hub: &Arc<Hub>, stop: &CancellationToken, grace: Duration) -> bool {
        let key = hub.name();
        let mut reg = self.lock_registry();
        match reg.running.get(key) {
            Some(active) if Arc::ptr_eq(&active.hub, hub) && !active.boot => {}
            _ => return true,
        }
        if !hub.close_if_unused(&format!("stopped after {grace:?} without subscribers")) {
            return false;
        }
        reg.running.remove(key);
        drop(reg);
        stop.cancel();
        self.metrics.informer_running(key, false);
        tracing::info!(resource = %key, idle = ?grace, "stopped informer without subscribers");
        true
    }

    /// Closes a hub for good (its resource is gone upstream) and stops its
    /// informer.
    fn retire(&self, hub: &Arc<Hub>, stop: &CancellationToken, reason: &str) {
        let key = hub.name();
        let mut reg = self.lock_registry();
        if reg
            .running
            .get(key)
            .is_some_and(|active| Arc::ptr_eq(&active.hub, hub))
        {
            reg.running.remove(key);
        }
        hub.close(reason);
        drop(reg);
        stop.cancel();
        self.metrics.informer_running(key, false);
        self.boot_wake.advance();
        tracing::info!(resource = %key, reason, "stopped informer");
    }
}
