//! A simulated Kubernetes API server for tests, `kubefan demo` and load tests.
//!
//! It serves the real wire protocol over plain HTTP on loopback (discovery,
//! get/list/watch/create/update/patch/delete, `Status` errors, chunked
//! JSON-lines watches with bookmarks and 410 Expired), so the unmodified
//! kube-rs client talks to it as to a cluster. Faults (ended watches, 5xx,
//! compaction, stalled streams, slow lists) are injected from Rust or over
//! HTTP under `/debug/faults/`, and per-resource counters are exposed for
//! assertions.
//!
//! It is the oracle the gateway is tested against, so where it does what
//! kube-apiserver does, it does it as kube-apiserver does, and the module
//! that does it cites where (kubernetes/kubernetes paths, or the
//! kubernetes.io page): field selectors per kind (`builtins.rs`), RBAC
//! objects, aggregation and evaluation (`rbac/`), request authentication,
//! attributes and 403s (`access.rs`), TokenReview audiences and the review
//! endpoints (`auth.rs`), CRDs (`crd.rs`). It shares no code with the
//! gateway.
//!
//! # Layout
//! - `resource.rs`: resource definitions and discovery documents;
//!   `builtins.rs`: the resources every simulator serves
//! - `store/`: objects, resourceVersions, history, watchers, list snapshots
//!   (`mod.rs`), and the checks of object writes (`write.rs`);
//!   `attrs.rs`: what selectors read of a stored object
//! - `watch.rs`: the body of one watch stream
//! - `http.rs`: routing, query parsing, `Status` responses, `SimServer`
//! - `selector.rs`, `patch.rs`: label/field selectors, JSON merge patch,
//!   written apart from the gateway's so the two check each other
//! - `churn/`: a seeded cluster, a background workload (random or
//!   rollouts) and the pods it is made of (`pod.rs`)
//! - `cli.rs`: `kubefan sim`; `error.rs`: `SimError` and its `Status`
//! - `rbac/`: the RBAC kinds' typed form, defaults and validation, the
//!   clusterrole-aggregation controller, the authorizer, the bootstrap policy
//! - `crd.rs`: CustomResourceDefinition objects and what they serve
//! - `auth.rs`: the simulator's users and its review endpoints (TokenReview,
//!   SubjectAccessReview, SelfSubjectAccessReview, SelfSubjectRulesReview,
//!   SelfSubjectReview); `access.rs`: authentication and authorization of
//!   the simulator's own clients
//!
//! Not simulated: admission (RBAC escalation checks included), namespace
//! existence checks, finalizers, subresources, protobuf, server-side apply,
//! several versions of one resource (and conversion between them), the
//! events API's shared storage (v1 and events.k8s.io events are stored
//! apart), discovery of the review resources, Tables (`as=Table`).

#![deny(unsafe_code)]

mod access;
mod attrs;
mod auth;
mod builtins;
mod churn;
mod cli;
mod crd;
mod error;
mod http;
mod patch;
mod rbac;
mod resource;
mod selector;
mod server;
mod store;
mod tls;
mod watch;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use auth::{AuthStats, SimRule, SimUser, Subject};
pub use churn::{ChurnConfig, ChurnStyle, PodBuilder, pod, seed_cluster, spawn_churn};
pub use cli::{SimArgs, run};
pub use error::SimError;
pub use patch::merge_patch;
pub use resource::{NameRule, ResourceDef, SelectableField, UnknownField};
pub use server::SimServer;
pub use store::{ListStats, ResourceStats, Stats, StorageStats};

use store::{Limits, Store};

/// The most events a resource's history keeps to cover
/// `SimConfig::history_window`: kube-apiserver's watch cache grows to
/// `defaultUpperBoundCapacity` (100 * 1024) and no further
/// (staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go).
pub const HISTORY_WINDOW_CAP: usize = 100 * 1024;

/// Bounds and timings of a simulator.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Events retained per resource for watches from an old rv; older → 410.
    pub history: usize,
    /// Bytes those events may hold per resource (their JSON and selectable
    /// attributes); the oldest go first when either bound is reached.
    pub history_bytes: usize,
    /// Events younger than this are kept even past `history` and
    /// `history_bytes`, up to [`HISTORY_WINDOW_CAP`] events: the time
    /// window kube-apiserver's watch cache keeps (its
    /// `eventFreshDuration`, 75 s). Zero (the default here; `kubefan sim`
    /// defaults to 75 s) bounds the history by count and bytes alone.
    pub history_window: Duration,
    /// Period of BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// How long a watch without `timeoutSeconds` stays open.
    pub watch_timeout: Duration,
    /// Events queued per watch before the watch is ended with 410.
    pub watch_queue: usize,
    /// Paginated list snapshots kept for `continue`; older tokens get 410.
    pub list_snapshots: usize,
    /// Whether the simulator authenticates and authorizes its own clients.
    pub authorization: AuthorizationMode,
    /// The API server's own audiences (kube-apiserver `--api-audiences`):
    /// a token must be valid for one of them to authenticate a request, and
    /// a TokenReview without `spec.audiences` asks for them.
    pub api_audiences: Vec<String>,
}

/// How the simulator treats its own clients' requests, named after
/// kube-apiserver's `--authorization-mode` values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthorizationMode {
    /// Every request is served; credentials are not checked (reviews still
    /// answer from the stored RBAC objects).
    #[default]
    #[value(name = "AlwaysAllow")]
    AlwaysAllow,
    /// Bearer tokens are authenticated against the simulator's users (401
    /// otherwise; no token is `system:anonymous`), and every request but
    /// `/debug/` is authorized by RBAC (403 otherwise). The bootstrap
    /// policy that lets any authenticated user discover the API and review
    /// its own access is written at start (`Sim::bootstrap_rbac`).
    #[value(name = "RBAC")]
    Rbac,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            history: 10_000,
            history_bytes: 8 << 20,
            history_window: Duration::ZERO,
            bookmark_interval: Duration::from_secs(10),
            watch_timeout: Duration::from_secs(30 * 60),
            watch_queue: 1024,
            list_snapshots: 64,
            authorization: AuthorizationMode::AlwaysAllow,
            api_audiences: vec!["https://kubernetes.default.svc.cluster.local".into()],
        }
    }
}

struct Inner {
    cfg: SimConfig,
    store: Mutex<Store>,
    /// Cancelled and replaced by `end_watches`.
    end: Mutex<CancellationToken>,
    stall_tx: tokio::sync::watch::Sender<bool>,
    /// The churn rate set by `POST /debug/churn?rate=N`, over the one it
    /// started with.
    churn_rate: tokio::sync::watch::Sender<Option<f64>>,
    fail_next: AtomicUsize,
    list_delay: Mutex<Duration>,
    authz: auth::Authz,
}

/// A simulated API server's state; cheap to clone, shared by its HTTP server.
#[derive(Clone)]
pub struct Sim {
    inner: Arc<Inner>,
}

impl Default for Sim {
    fn default() -> Self {
        Sim::new(SimConfig::default())
    }
}

impl Sim {
    /// A simulator with the built-in resources registered and no objects.
    pub fn new(cfg: SimConfig) -> Sim {
        let mut store = Store::new(Limits {
            history: cfg.history,
            history_bytes: cfg.history_bytes,
            history_window: cfg.history_window,
            watch_queue: cfg.watch_queue,
            list_snapshots: cfg.list_snapshots,
        });
        for def in builtins::builtins() {
            store.register(def);
        }
        let rbac_mode = cfg.authorization == AuthorizationMode::Rbac;
        let authz = auth::Authz::new(cfg.api_audiences.clone());
        let sim = Sim {
            inner: Arc::new(Inner {
                cfg,
                store: Mutex::new(store),
                end: Mutex::new(CancellationToken::new()),
                stall_tx: tokio::sync::watch::Sender::new(false),
                churn_rate: tokio::sync::watch::Sender::new(None),
                fail_next: AtomicUsize::new(0),
                list_delay: Mutex::new(Duration::ZERO),
                authz,
            }),
        };
        if rbac_mode {
            sim.bootstrap_rbac();
        }
        sim
    }

    /// Writes the part of kube-apiserver's bootstrap RBAC policy
    /// (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go) a client
    /// relies on: `cluster-admin` bound to `system:masters`;
    /// `system:discovery` and `system:basic-user` (discovery, and reviewing
    /// one's own access) bound to `system:authenticated`;
    /// `system:public-info-viewer` (/version, /healthz) bound to everyone.
    /// Objects that exist already are kept. Done at start in `Rbac` mode.
    pub fn bootstrap_rbac(&self) {
        let mut store = self.store();
        for (key, obj) in rbac::bootstrap::objects() {
            match store.create(key, obj) {
                Ok(_) | Err(SimError::AlreadyExists { .. }) => {}
                Err(e) => {
                    tracing::warn!(%key, error = %e, "writing the bootstrap RBAC policy failed")
                }
            }
        }
    }

    /// Who a request with this `Authorization` header is: a configured user
    /// (with `system:authenticated`), or `system:anonymous` without a
    /// bearer token; 401 for a token no user has.
    pub(crate) fn authenticate(
        &self,
        header: Option<&str>,
    ) -> Result<rbac::authorizer::UserInfo, SimError> {
        match access::bearer(header) {
            None => Ok(access::anonymous()),
            Some(token) => self.inner.authz.user(token).ok_or(SimError::Unauthorized),
        }
    }

    pub fn config(&self) -> &SimConfig {
        &self.inner.cfg
    }

    /// The store, recovering from poisoning: every store method leaves the
    /// state consistent before anything that could panic.
    fn store(&self) -> MutexGuard<'_, Store> {
        self.inner.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn end_token(&self) -> CancellationToken {
        self.inner
            .end
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn stall_receiver(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.stall_tx.subscribe()
    }

    /// Adds a resource type, served and discoverable from now on. A
    /// resource in a group with a dot ("example.com") that is not already
    /// served is a CRD: this writes (or updates) its
    /// CustomResourceDefinition object, which serves it, with `def`'s
    /// printer columns and selectable fields. Any other is registered as a
    /// built-in. A CRD that cannot be written is logged.
    pub fn register(&self, def: ResourceDef) {
        let mut store = self.store();
        let key = def.key();
        if !def.group.contains('.') || (store.def(&key).is_ok() && !store.is_crd_key(&key)) {
            store.register(def);
            return;
        }
        let crd = crd::from_def(&def);
        let written = if store.get(crd::CRDS, None, &key).is_ok() {
            store.update(crd::CRDS, crd)
        } else {
            store.create(crd::CRDS, crd)
        };
        if let Err(e) = written {
            tracing::warn!(%key, error = %e, "writing a CRD failed");
        }
    }

    /// Removes a resource type: its lists and watches get 404 from now
    /// on, its open watch streams end, discovery no longer lists it, and
    /// its counters in [`Sim::stats`] are gone. For a CRD this deletes its
    /// CustomResourceDefinition object. `key` is like
    /// "widgets.example.com". False if it was not registered.
    pub fn unregister(&self, key: &str) -> bool {
        let mut store = self.store();
        if store.is_crd_key(key) {
            return store.delete(crd::CRDS, None, key).is_ok();
        }
        store.unregister(key)
    }

    /// Binds `listen` and serves the simulator until `SimServer::stop`.
    pub async fn serve(&self, listen: SocketAddr) -> std::io::Result<SimServer> {
        server::serve(self.clone(), listen).await
    }

    /// Creates an object; `resource` is a key like "pods" or "deployments.apps".
    pub fn create(&self, resource: &str, obj: Value) -> Result<Value, SimError> {
        self.store().create(resource, obj).map(|w| w.object)
    }

    /// Creates objects as a cluster's state at start: each gets its own
    /// resourceVersion, but no watch history is recorded for them (the
    /// history's floor rises past them, so a watch from before them gets
    /// 410). Objects that exist already are kept. A resource with open
    /// watchers gets ordinary creates, so they miss nothing. Seeding
    /// 150,000 pods this way keeps them out of a time-window history
    /// (`SimConfig::history_window`) that would otherwise hold them all.
    pub fn seed(&self, resource: &str, objs: Vec<Value>) -> Result<(), SimError> {
        self.store().seed(resource, objs)
    }

    /// Replaces an object (PUT semantics, including the rv precondition).
    pub fn update(&self, resource: &str, obj: Value) -> Result<Value, SimError> {
        self.store().update(resource, obj).map(|w| w.object)
    }

    /// Applies an RFC 7386 merge patch. `ns` None means "default" for
    /// namespaced resources and is ignored for cluster-scoped ones.
    pub fn merge_patch(
        &self,
        resource: &str,
        ns: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<Value, SimError> {
        self.store()
            .merge_patch(resource, ns, name, patch)
            .map(|w| w.object)
    }

    /// Deletes an object and returns it as last seen, with the deletion's rv.
    pub fn delete(&self, resource: &str, ns: Option<&str>, name: &str) -> Result<Value, SimError> {
        self.store().delete(resource, ns, name).map(|w| w.object)
    }

    pub fn get(&self, resource: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        let stored = self.store().get(resource, ns, name).ok()?.clone();
        stored.value().ok()
    }

    /// Every object of a resource (sorted by namespace/name) and the current rv;
    /// empty for an unknown resource.
    pub fn list(&self, resource: &str) -> (Vec<Value>, u64) {
        let (items, rv) = {
            let store = self.store();
            (store.objects(resource).unwrap_or_default(), store.rv())
        };
        (items.iter().filter_map(|s| s.value().ok()).collect(), rv)
    }

    /// The (namespace, name) of every object of a resource, sorted; empty
    /// for an unknown resource. Unlike [`Sim::list`] it parses nothing: a
    /// parsed pod takes several times its JSON, and the heap a list of
    /// 10,000 of them took stayed with the process.
    pub fn names(&self, resource: &str) -> Vec<(String, String)> {
        self.store().names(resource)
    }

    /// The global resourceVersion: the rv of the latest write.
    pub fn resource_version(&self) -> u64 {
        self.store().rv()
    }

    /// Ends every open watch stream cleanly, as an apiserver restart would.
    pub fn end_watches(&self) {
        let mut end = self.inner.end.lock().unwrap_or_else(|e| e.into_inner());
        end.cancel();
        *end = CancellationToken::new();
    }

    /// Makes the next `n` list or watch requests fail with 500 InternalError.
    pub fn fail_next(&self, n: usize) {
        self.inner.fail_next.store(n, Ordering::SeqCst);
    }

    /// Consumes one pending injected failure, if any.
    fn take_failure(&self) -> bool {
        self.inner
            .fail_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Drops all event history and list snapshots: watches from an rv below
    /// the current one, and old `continue` tokens, get 410 from now on.
    pub fn compact(&self) {
        self.store().compact();
    }

    /// While on, watch streams write nothing (their queues fill up).
    pub fn stall_watches(&self, on: bool) {
        self.inner.stall_tx.send_replace(on);
    }

    /// Sets the churn rate (operations a second; 0 pauses churn), for a
    /// load test that needs a still cluster to compare its clients with.
    pub fn set_churn_rate(&self, rate: f64) {
        self.inner.churn_rate.send_replace(Some(rate));
    }

    /// The churn rate set by [`Sim::set_churn_rate`], if one was.
    pub(crate) fn churn_rate(&self) -> tokio::sync::watch::Receiver<Option<f64>> {
        self.inner.churn_rate.subscribe()
    }

    /// Delays every list response by `delay` (zero to stop).
    pub fn delay_lists(&self, delay: Duration) {
        *self
            .inner
            .list_delay
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = delay;
    }

    fn list_delay(&self) -> Duration {
        *self
            .inner
            .list_delay
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub fn stats(&self) -> Stats {
        self.store().stats()
    }

    /// The users TokenReview knows (token → name and groups).
    pub fn set_users(&self, users: Vec<SimUser>) {
        self.inner.authz.set_users(users);
    }

    /// Replaces the RBAC objects written by an earlier call with those
    /// expressing `rules`: rule `i` is the ClusterRole
    /// `kubefan-sim-rule-{i}`, bound by a ClusterRoleBinding of the same
    /// name (namespaces `["*"]`) or a RoleBinding of that name in each
    /// listed namespace. They are ordinary objects, labelled
    /// `kubefan-sim/rule`, that a test may change or delete; RBAC objects
    /// written otherwise are left alone. An object that cannot be written
    /// (an invalid namespace name) is logged and skipped.
    pub fn set_rules(&self, rules: Vec<SimRule>) {
        let mut store = self.store();
        for key in [
            rbac::ROLE_BINDINGS,
            rbac::CLUSTER_ROLE_BINDINGS,
            rbac::CLUSTER_ROLES,
        ] {
            let managed: Vec<(String, String)> = store
                .objects(key)
                .unwrap_or_default()
                .iter()
                .filter(|s| s.attrs.label(auth::RULE_LABEL).is_some())
                .map(|s| (s.attrs.ns.to_string(), s.attrs.name.to_string()))
                .collect();
            for (ns, name) in managed {
                if let Err(e) = store.delete(key, Some(&ns), &name) {
                    tracing::warn!(%key, %name, error = %e, "removing a rule's object failed");
                }
            }
        }
        for (i, rule) in rules.iter().enumerate() {
            for (key, obj) in rule.objects(i) {
                if let Err(e) = store.create(key, obj) {
                    tracing::warn!(%key, rule = i, error = %e, "writing a rule's object failed");
                }
            }
        }
    }

    /// Reviews answered, and requests refused, so far.
    pub fn auth_stats(&self) -> AuthStats {
        self.inner.authz.stats()
    }

    /// Revokes `token`: TokenReviews of it fail from now on, and so do
    /// requests carrying it. False if no user had it.
    pub fn revoke_token(&self, token: &str) -> bool {
        self.inner.authz.revoke(token)
    }

    /// TokenReviews of `token` answered so far (all of them are counted in
    /// [`AuthStats::token_reviews`]).
    pub fn token_reviews_of(&self, token: &str) -> u64 {
        self.inner.authz.reviews_of(token)
    }
}

#[cfg(test)]
mod tests;
