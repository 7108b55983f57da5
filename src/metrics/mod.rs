//! Metrics: one [`Metrics`] value handed to whoever records (no global
//! statics), encoded by `ops` at `/metrics`. Labels are bounded: resource,
//! transport, event type, reason — never a client or an object name.
//!
//! This module sits below everything that records (hub, upstream,
//! transports): it knows their labels as plain words, not their types.

mod labels;
mod process;

use std::sync::Arc;

use labels::{
    Clustered, IssuerLabel, KindLabel, ListLabels, ProtocolLabel, ReasonLabel, ReasonLabels,
    ResourceLabel, SignInLabels, TransportLabels, TypeLabels, ll, res, rl, tl, tyl,
};
pub use labels::{Protocol, SignInResult, SignInStep, Transport, Unparked};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Every metric kubefan exports; a handle to record them as one cluster
/// ([`Metrics::for_cluster`]) shares the same families.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// The cluster the resource-labelled metrics recorded through this
    /// handle belong to (`None`: the unnamed cluster, no label).
    cluster: Option<Arc<str>>,
    subscribers: Family<Clustered<TransportLabels>, Gauge>,
    events_received: Family<Clustered<TypeLabels>, Counter>,
    events_sent: Family<Clustered<TransportLabels>, Counter>,
    snapshots: Family<Clustered<TransportLabels>, Counter>,
    resets: Family<Clustered<ReasonLabels>, Counter>,
    lapped: Family<Clustered<ResourceLabel>, Counter>,
    upstream_lists: Family<Clustered<ListLabels>, Counter>,
    upstream_watches: Family<Clustered<ResourceLabel>, Counter>,
    upstream_errors: Family<Clustered<ReasonLabels>, Counter>,
    upstream_relists: Family<Clustered<ReasonLabels>, Counter>,
    cache_objects: Family<Clustered<ResourceLabel>, Gauge>,
    log_events: Family<Clustered<ResourceLabel>, Gauge>,
    log_bytes: Family<Clustered<ResourceLabel>, Gauge>,
    synced: Family<Clustered<ResourceLabel>, Gauge>,
    informers_running: Family<Clustered<ResourceLabel>, Gauge>,
    view_encodings: Family<Clustered<ResourceLabel>, Counter>,
    views: Family<Clustered<ResourceLabel>, Gauge>,
    bytes_sent: Family<Clustered<TransportLabels>, Counter>,
    snapshot_objects: Family<Clustered<ResourceLabel>, Histogram, fn() -> Histogram>,
    snapshot_bytes: Family<Clustered<ResourceLabel>, Histogram, fn() -> Histogram>,
    last_sync: Family<Clustered<ResourceLabel>, Gauge>,
    auth_failures: Family<KindLabel, Counter>,
    limits_hit: Family<KindLabel, Counter>,
    connections: Family<ProtocolLabel, Counter>,
    batched: Gauge,
    visited: Counter,
    writer_polls: Counter,
    unparked: Family<ReasonLabel, Counter>,
    signins: Family<SignInLabels, Counter>,
    oidc_issuer_ready: Family<IssuerLabel, Gauge>,
}

fn object_buckets() -> Histogram {
    // 1 to ~1M objects.
    Histogram::new(exponential_buckets(1.0, 4.0, 11))
}

fn byte_buckets() -> Histogram {
    // 256 B to ~1 GiB.
    Histogram::new(exponential_buckets(256.0, 4.0, 12))
}

/// Seconds since the Unix epoch, for timestamp gauges.
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut root = Registry::default();
        root.register_collector(Box::new(process::ProcessCollector {
            start_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        }));
        let registry = root.sub_registry_with_prefix("kubefan");
        let m = Metrics {
            subscribers: Family::default(),
            events_received: Family::default(),
            events_sent: Family::default(),
            snapshots: Family::default(),
            resets: Family::default(),
            lapped: Family::default(),
            upstream_lists: Family::default(),
            upstream_watches: Family::default(),
            upstream_errors: Family::default(),
            upstream_relists: Family::default(),
            cache_objects: Family::default(),
            log_events: Family::default(),
            log_bytes: Family::default(),
            synced: Family::default(),
            informers_running: Family::default(),
            view_encodings: Family::default(),
            views: Family::default(),
            auth_failures: Family::default(),
            limits_hit: Family::default(),
            connections: Family::default(),
            bytes_sent: Family::default(),
            snapshot_objects: Family::new_with_constructor(object_buckets),
            snapshot_bytes: Family::new_with_constructor(byte_buckets),
            last_sync: Family::default(),
            batched: Gauge::default(),
            visited: Counter::default(),
            writer_polls: Counter::default(),
            unparked: Family::default(),
            signins: Family::default(),
            oidc_issuer_ready: Family::default(),
            registry: Arc::new(Registry::default()),
            cluster: None,
        };
        registry.register("subscribers", "Open subscriptions", m.subscribers.clone());
        registry.register(
            "streams_batched",
            "Caught-up streams written together with their view's others, by one task per view",
            m.batched.clone(),
        );
        registry.register(
            "streams_visited",
            "Batched streams a writer's passes read the log for: those whose views pin nothing, and those the events reached (a node agent's, for its node's)",
            m.visited.clone(),
        );
        registry.register(
            "batch_writer_polls",
            "Times the batch writers ran: each takes in streams, reads their input, and brings them to the head of the log or writes a tick",
            m.writer_polls.clone(),
        );
        registry.register(
            "streams_unparked",
            "Batched streams sent back to a task of their own, by why",
            m.unparked.clone(),
        );
        registry.register(
            "oidc_issuer_ready",
            "1 once the OIDC issuer (--oidc-issuer-url) was discovered and its keys fetched; 0 while id-tokens and sign-in are refused for it (the log and GET /session say why)",
            m.oidc_issuer_ready.clone(),
        );
        registry.register(
            "signins",
            "Sign-in steps (login, callback, refresh, logout) by result: Ok, Refused, Ended, Failed",
            m.signins.clone(),
        );
        registry.register(
            "events_received",
            "Events appended to a hub (from upstream watches and relist diffs)",
            m.events_received.clone(),
        );
        registry.register(
            "events_sent",
            "Events delivered to subscribers",
            m.events_sent.clone(),
        );
        registry.register(
            "snapshots_served",
            "Snapshots delivered to subscribers",
            m.snapshots.clone(),
        );
        registry.register(
            "resets",
            "Subscribers whose state was replaced by a fresh snapshot",
            m.resets.clone(),
        );
        registry.register(
            "cursors_lapped",
            "Subscribers that fell off the event log",
            m.lapped.clone(),
        );
        registry.register(
            "upstream_lists",
            "Upstream lists started, by kind: a streaming list (a watch), a paged LIST, a resourceVersion=0 LIST (cached), one at a saved position (exact)",
            m.upstream_lists.clone(),
        );
        registry.register(
            "upstream_watches",
            "Upstream WATCH requests started",
            m.upstream_watches.clone(),
        );
        registry.register(
            "upstream_errors",
            "Upstream list/watch errors",
            m.upstream_errors.clone(),
        );
        registry.register(
            "upstream_relists",
            "Relists after the first, by cause",
            m.upstream_relists.clone(),
        );
        registry.register(
            "hub_cache_objects",
            "Objects in a hub's cache",
            m.cache_objects.clone(),
        );
        registry.register(
            "hub_log_events",
            "Events held in a hub's log",
            m.log_events.clone(),
        );
        registry.register(
            "hub_log_bytes",
            "Bytes held by a hub's log",
            m.log_bytes.clone(),
        );
        registry.register(
            "informer_synced",
            "1 once a resource's first list is loaded",
            m.synced.clone(),
        );
        registry.register(
            "informers_running",
            "1 while a resource's informer runs (lazily started ones stop when idle or removed upstream)",
            m.informers_running.clone(),
        );
        registry.register(
            "view_encodings",
            "Events and snapshot objects encoded for a filtered or projected view (once per view, shared by its subscribers)",
            m.view_encodings.clone(),
        );
        registry.register(
            "views",
            "Distinct views (filter, projection, delta) in use",
            m.views.clone(),
        );
        registry.register(
            "auth_failures",
            "Requests refused as unauthenticated, by kind (no_token, expired, bad_signature, ...)",
            m.auth_failures.clone(),
        );
        registry.register(
            "limits_hit",
            "Requests and connections refused or cut off by a limit (connections, requests_per_second, write_timeout, ws_message_size, idle_frames, ws_subscribes)",
            m.limits_hit.clone(),
        );
        registry.register(
            "connections",
            "Client connections accepted, by protocol (Http1, Https1, H2; TlsFailed: a failed TLS handshake)",
            m.connections.clone(),
        );
        registry.register(
            "bytes_sent",
            "Message bytes written to subscribers, every transport",
            m.bytes_sent.clone(),
        );
        registry.register(
            "snapshot_objects",
            "Objects per snapshot served (after filters)",
            m.snapshot_objects.clone(),
        );
        registry.register(
            "snapshot_bytes",
            "Bytes of the objects' JSON per snapshot served (after filters and projection; each transport adds its framing)",
            m.snapshot_bytes.clone(),
        );
        registry.register(
            "upstream_last_sync_timestamp_seconds",
            "When a resource's hub last heard from upstream (list, event or bookmark); age: time() minus this",
            m.last_sync.clone(),
        );
        Metrics {
            registry: Arc::new(root),
            ..m
        }
    }

    /// A handle recording into the same metrics as this one, labelling
    /// every resource's with `cluster` (`--cluster`'s name; `None`: the
    /// unnamed cluster, no label).
    pub fn for_cluster(&self, cluster: Option<&str>) -> Arc<Metrics> {
        Arc::new(Metrics {
            cluster: cluster.map(Arc::from),
            ..self.clone()
        })
    }

    /// The counter of bytes written on one resource and transport; callers
    /// keep it to avoid a lookup per write.
    pub fn bytes_sent(&self, resource: &str, transport: Transport) -> Counter {
        self.bytes_sent
            .get_or_create(&tl(&self.cluster, resource, transport))
            .clone()
    }

    /// A snapshot was served: how many objects, how many encoded bytes.
    pub fn snapshot_size(&self, resource: &str, objects: u64, bytes: u64) {
        let r = res(&self.cluster, resource);
        self.snapshot_objects
            .get_or_create(&r)
            .observe(objects as f64);
        self.snapshot_bytes.get_or_create(&r).observe(bytes as f64);
    }

    /// `kind`: a bounded word (see `auth::Error::kind`).
    pub fn auth_failure(&self, kind: &str) {
        self.auth_failures
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// `kind`: `requests_per_second` or `connections`.
    pub fn limit_hit(&self, kind: &str) {
        self.limits_hit
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// A client connection was accepted (and, over TLS, its handshake
    /// chose `protocol`).
    pub fn connection(&self, protocol: Protocol) {
        self.connections
            .get_or_create(&ProtocolLabel { protocol })
            .inc();
    }

    /// Streams written by their hub's batch writer now.
    pub fn batched(&self) -> Gauge {
        self.batched.clone()
    }

    /// Batched streams visited by their writers' passes.
    pub fn streams_visited(&self) -> Counter {
        self.visited.clone()
    }

    /// Times the batch writers were polled.
    pub fn batch_writer_polls(&self) -> Counter {
        self.writer_polls.clone()
    }

    /// A sign-in step answered with `status`.
    /// The `kubefan_oidc_issuer_ready` gauge of `issuer`, 0 until set.
    pub fn oidc_issuer_ready(&self, issuer: &str) -> Gauge {
        self.oidc_issuer_ready
            .get_or_create(&IssuerLabel {
                issuer: issuer.to_string(),
            })
            .clone()
    }

    pub fn signin(&self, step: SignInStep, status: u16) {
        let result = SignInResult::of_status(status);
        self.signins
            .get_or_create(&SignInLabels { step, result })
            .inc();
    }

    /// A batched stream went back to a task of its own.
    pub fn stream_unparked(&self, reason: Unparked) {
        self.unparked.get_or_create(&ReasonLabel { reason }).inc();
    }

    pub fn subscriber_joined(&self, resource: &str, transport: Transport) {
        self.subscribers
            .get_or_create(&tl(&self.cluster, resource, transport))
            .inc();
    }

    pub fn subscriber_left(&self, resource: &str, transport: Transport) {
        self.subscribers
            .get_or_create(&tl(&self.cluster, resource, transport))
            .dec();
    }

    /// The counter of events sent on one resource and transport; callers
    /// keep it to avoid a lookup per delivery.
    pub fn events_sent(&self, resource: &str, transport: Transport) -> Counter {
        self.events_sent
            .get_or_create(&tl(&self.cluster, resource, transport))
            .clone()
    }

    pub fn snapshot_served(&self, resource: &str, transport: Transport) {
        self.snapshots
            .get_or_create(&tl(&self.cluster, resource, transport))
            .inc();
    }

    /// `reason`: `Expired` or `Lapped` (see `hub::ResetReason`).
    pub fn reset(&self, resource: &str, reason: &str) {
        self.resets
            .get_or_create(&rl(&self.cluster, resource, reason))
            .inc();
    }

    pub fn lapped(&self, resource: &str) {
        self.lapped
            .get_or_create(&res(&self.cluster, resource))
            .inc();
    }

    /// The metrics one hub records on every append, resolved once so an
    /// append does no label lookup.
    pub fn hub_metrics(&self, resource: &str) -> HubMetrics {
        let received = |kind: &str| {
            self.events_received
                .get_or_create(&tyl(&self.cluster, resource, kind))
                .clone()
        };
        let r = res(&self.cluster, resource);
        HubMetrics {
            added: received("ADDED"),
            modified: received("MODIFIED"),
            deleted: received("DELETED"),
            objects: self.cache_objects.get_or_create(&r).clone(),
            log_events: self.log_events.get_or_create(&r).clone(),
            log_bytes: self.log_bytes.get_or_create(&r).clone(),
            synced: self.synced.get_or_create(&r).clone(),
            view_encodings: self.view_encodings.get_or_create(&r).clone(),
            views: self.views.get_or_create(&r).clone(),
            last_sync: self.last_sync.get_or_create(&r).clone(),
        }
    }

    pub fn informer_running(&self, resource: &str, running: bool) {
        self.informers_running
            .get_or_create(&res(&self.cluster, resource))
            .set(i64::from(running));
    }

    /// `kind`: how the list was made (`streaming`, `paged`, `cached`,
    /// `exact`).
    pub fn upstream_list(&self, resource: &str, kind: &'static str) {
        self.upstream_lists
            .get_or_create(&ll(&self.cluster, resource, kind))
            .inc();
    }

    pub fn upstream_watch(&self, resource: &str) {
        self.upstream_watches
            .get_or_create(&res(&self.cluster, resource))
            .inc();
    }

    /// `reason`: a bounded word (`list`, `watch`, `expired`, `decode`).
    pub fn upstream_error(&self, resource: &str, reason: &str) {
        self.upstream_errors
            .get_or_create(&rl(&self.cluster, resource, reason))
            .inc();
    }

    pub fn upstream_relist(&self, resource: &str, reason: &str) {
        self.upstream_relists
            .get_or_create(&rl(&self.cluster, resource, reason))
            .inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// One hub's metric handles (see [`Metrics::hub_metrics`]).
#[derive(Clone)]
pub struct HubMetrics {
    added: Counter,
    modified: Counter,
    deleted: Counter,
    objects: Gauge,
    log_events: Gauge,
    log_bytes: Gauge,
    synced: Gauge,
    view_encodings: Counter,
    views: Gauge,
    last_sync: Gauge,
}

impl HubMetrics {
    /// The upstream spoke (a list, an event or a bookmark).
    pub fn heard_from_upstream(&self) {
        self.last_sync.set(unix_now());
    }

    pub fn view_encodings(&self) -> Counter {
        self.view_encodings.clone()
    }

    pub fn views(&self) -> Gauge {
        self.views.clone()
    }

    /// An ADDED, MODIFIED or DELETED event was appended.
    pub fn added(&self) {
        self.added.inc();
    }

    pub fn modified(&self) {
        self.modified.inc();
    }

    pub fn deleted(&self) {
        self.deleted.inc();
    }

    /// The hub's sizes after a change; a synced hub has just heard from
    /// the upstream.
    pub fn state(&self, objects: usize, log_events: usize, log_bytes: usize, synced: bool) {
        if synced {
            self.heard_from_upstream();
        }
        self.objects.set(objects as i64);
        self.log_events.set(log_events as i64);
        self.log_bytes.set(log_bytes as i64);
        self.synced.set(i64::from(synced));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sign_in_steps_result_follows_its_status() {
        assert_eq!(SignInResult::of_status(302), SignInResult::Ok);
        assert_eq!(SignInResult::of_status(200), SignInResult::Ok);
        assert_eq!(SignInResult::of_status(401), SignInResult::Ended);
        assert_eq!(SignInResult::of_status(400), SignInResult::Refused);
        assert_eq!(SignInResult::of_status(404), SignInResult::Refused);
        assert_eq!(SignInResult::of_status(502), SignInResult::Failed);
        assert_eq!(SignInResult::of_status(503), SignInResult::Failed);
        let metrics = Metrics::new();
        metrics.signin(SignInStep::Callback, 502);
        let text = metrics.encode();
        assert!(
            text.contains("kubefan_signins_total{step=\"Callback\",result=\"Failed\"} 1"),
            "{text}"
        );
    }
}
