//! Boot-time resources: started at start-up and kept running until
//! shutdown (`--resources`, and kubefan's own RBAC reads), tried again
//! while unknown or refused, and what `/readyz` reports of them.

use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::Duration;

use super::{Error, Hub, Informers};

/// Readiness of one boot-time resource.
#[derive(Debug, Clone)]
pub struct Readiness {
    pub resource: String,
    pub ready: bool,
    pub reason: Option<String>,
}

/// The first and the longest wait before a boot resource kubefan may not
/// read is tried again (unless RBAC changes first).
const REFUSED_RETRY_MIN: Duration = Duration::from_secs(30);
const REFUSED_RETRY_MAX: Duration = Duration::from_secs(300);

/// A boot resource: its name, whether kubefan reads it for itself
/// (exempt from the policy), and its hub or why it has none yet.
pub(super) struct BootResource {
    pub(super) name: String,
    pub(super) internal: bool,
    pub(super) state: Result<Arc<Hub>, String>,
}

impl Informers {
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
                            // A closed hub's reason (removed upstream, kubefan
                            // may not read it) says more than a failed restart.
                            let state = &mut this.lock_boot()[i].state;
                            if state.is_err() {
                                *state = Err(err.to_string());
                                this.boot_changes.advance();
                            }
                            // Logged once `/readyz` says it.
                            tracing::error!(resource = %name, error = %err, "boot-time resource not started");
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

    pub(super) fn lock_boot(&self) -> MutexGuard<'_, Vec<BootResource>> {
        self.boot.lock().unwrap_or_else(PoisonError::into_inner)
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
}
