//! Consistent LISTs: a LIST without `resourceVersion` answers a state at
//! least as new as the upstream's when the request arrived, as
//! kube-apiserver's consistent reads from cache do (KEP-2340,
//! "Consistent Reads from Cache": the watch cache learns the current
//! revision, then waits until it has caught up). So `kubectl apply`
//! against the API server, then `kubectl get` through kubefan, shows the
//! change.
//!
//! kubefan learns the upstream's current resourceVersion with a LIST of
//! `limit=1` and no `resourceVersion` (one item and a list's metadata),
//! then waits until the resource's hub has reached it. Probes are shared:
//! a LIST joins a probe that starts after it arrived (one started before
//! could miss a write that completed just before the request), and a new
//! probe of a resource starts at most once per [`PROBE_PERIOD`], so any
//! number of LISTs arriving together cost at most one small upstream
//! request per resource per period.
//!
//! # A bounded wait
//! The upstream's resourceVersion is global (etcd's revision), so it also
//! moves with writes to other resources; a hub learns that nothing of its
//! resource happened up to it only from the upstream's bookmarks, which
//! kube-apiserver sends about once a minute. kubefan therefore waits at
//! most [`CATCH_UP`] for its hub to reach the probed version: changes to
//! the resource itself arrive on its watch within that (they are in
//! flight), and past it the LIST is answered from the cache, its
//! `resourceVersion` saying which state it is. A probe that fails (the
//! upstream unreachable) answers the LIST from the cache too, as it was:
//! the cache is what kubefan is for when the upstream is down.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use kube::api::{Api, DynamicObject, ListParams};
use tokio::time::Instant;

use crate::hub::Hub;
use crate::upstream::ResourceInfo;

/// The least time between two probes of one resource.
pub const PROBE_PERIOD: Duration = Duration::from_millis(100);
/// The longest a LIST waits for its hub to reach the probed version. A
/// change written before the LIST reaches kubefan's watch within tens of
/// milliseconds; a quiet resource in a busy cluster (its hub behind the
/// global resourceVersion until the next bookmark) waits this long on
/// every LIST, so it is kept short.
pub const CATCH_UP: Duration = Duration::from_millis(250);

type Probe = Shared<BoxFuture<'static, Option<u64>>>;

/// The probes of every resource.
#[derive(Default)]
pub struct Probes {
    resources: Mutex<HashMap<String, ProbeState>>,
}

#[derive(Default)]
struct ProbeState {
    /// When the latest probe started (or will start), and its answer.
    latest: Option<(Instant, Probe)>,
}

impl Probes {
    /// Waits until `hub` holds a state at least as new as the upstream's
    /// now (or `CATCH_UP` has passed, see the module docs).
    pub async fn catch_up(&self, client: &kube::Client, info: &ResourceInfo, hub: &Hub) {
        let Some(rv) = self.current(client, info).await else {
            return;
        };
        hub.wait_for_rv(rv, CATCH_UP).await;
    }

    /// The upstream's resourceVersion of `info`, read after this call
    /// began; `None` if it could not be read.
    async fn current(&self, client: &kube::Client, info: &ResourceInfo) -> Option<u64> {
        let arrived = Instant::now();
        loop {
            let probe = {
                let mut resources = self
                    .resources
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let state = resources.entry(info.canonical_name()).or_default();
                match &state.latest {
                    // Started (or starts) after this request arrived: join it.
                    Some((start, probe)) if *start >= arrived => Ok(probe.clone()),
                    // Still running, but started before: wait for its end,
                    // then start the next one.
                    Some((_, probe)) if probe.peek().is_none() => Err(probe.clone()),
                    previous => {
                        let start = previous
                            .as_ref()
                            .map_or(arrived, |(s, _)| (*s + PROBE_PERIOD).max(Instant::now()));
                        let probe = probe(client.clone(), info.clone(), start);
                        state.latest = Some((start, probe.clone()));
                        Ok(probe)
                    }
                }
            };
            match probe {
                Ok(probe) => return probe.await,
                Err(running) => {
                    running.await;
                }
            }
        }
    }
}

/// A LIST of one item at `start`: the upstream's current resourceVersion.
fn probe(client: kube::Client, info: ResourceInfo, start: Instant) -> Probe {
    async move {
        tokio::time::sleep_until(start).await;
        let api: Api<DynamicObject> = Api::all_with(client, &info.api);
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(list) => list
                .metadata
                .resource_version
                .as_deref()
                .and_then(|rv| rv.parse().ok()),
            Err(err) => {
                tracing::debug!(resource = %info.canonical_name(), error = %err, "resourceVersion probe failed; listing from the cache as it is");
                None
            }
        }
    }
    .boxed()
    .shared()
}
