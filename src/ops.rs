//! Operations: metrics, `/healthz`, `/readyz`, `/metrics`.
//!
//! Metrics live in one [`Metrics`] value handed to whoever records (no global
//! statics). Labels are bounded: resource, transport, event type, reason —
//! never a client or an object name.

use std::sync::Arc;

use actix_web::{HttpResponse, web};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;

use crate::hub::{EventType, HubStats, ResetReason};
use crate::upstream::Informers;

/// How a subscriber is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
pub enum Transport {
    Sse,
    WebSocket,
    KubeWatch,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ResourceLabel {
    resource: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TransportLabels {
    resource: String,
    transport: Transport,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TypeLabels {
    resource: String,
    r#type: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabels {
    resource: String,
    reason: String,
}

/// Every metric kubefan exports.
pub struct Metrics {
    registry: Registry,
    subscribers: Family<TransportLabels, Gauge>,
    events_received: Family<TypeLabels, Counter>,
    events_sent: Family<TransportLabels, Counter>,
    snapshots: Family<TransportLabels, Counter>,
    resets: Family<ReasonLabels, Counter>,
    lapped: Family<ResourceLabel, Counter>,
    upstream_lists: Family<ResourceLabel, Counter>,
    upstream_watches: Family<ResourceLabel, Counter>,
    upstream_errors: Family<ReasonLabels, Counter>,
    upstream_relists: Family<ReasonLabels, Counter>,
    cache_objects: Family<ResourceLabel, Gauge>,
    log_events: Family<ResourceLabel, Gauge>,
    log_bytes: Family<ResourceLabel, Gauge>,
    synced: Family<ResourceLabel, Gauge>,
    informers_running: Family<ResourceLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("kubefan");
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
            registry: Registry::default(),
        };
        registry.register("subscribers", "Open subscriptions", m.subscribers.clone());
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
            "Upstream LIST cycles started",
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
        Metrics { registry, ..m }
    }

    pub fn subscriber_joined(&self, resource: &str, transport: Transport) {
        self.subscribers
            .get_or_create(&tl(resource, transport))
            .inc();
    }

    pub fn subscriber_left(&self, resource: &str, transport: Transport) {
        self.subscribers
            .get_or_create(&tl(resource, transport))
            .dec();
    }

    /// The counter of events sent on one resource and transport; callers
    /// keep it to avoid a lookup per delivery.
    pub fn events_sent(&self, resource: &str, transport: Transport) -> Counter {
        self.events_sent
            .get_or_create(&tl(resource, transport))
            .clone()
    }

    pub fn snapshot_served(&self, resource: &str, transport: Transport) {
        self.snapshots.get_or_create(&tl(resource, transport)).inc();
    }

    pub fn reset(&self, resource: &str, reason: ResetReason) {
        self.resets
            .get_or_create(&rl(resource, reason.as_str()))
            .inc();
    }

    pub fn lapped(&self, resource: &str) {
        self.lapped.get_or_create(&res(resource)).inc();
    }

    /// The metrics one hub records on every append, resolved once so an
    /// append does no label lookup.
    pub fn hub_metrics(&self, resource: &str) -> HubMetrics {
        let received = |kind: EventType| {
            self.events_received
                .get_or_create(&TypeLabels {
                    resource: resource.to_string(),
                    r#type: kind.as_str().to_string(),
                })
                .clone()
        };
        let r = res(resource);
        HubMetrics {
            added: received(EventType::Added),
            modified: received(EventType::Modified),
            deleted: received(EventType::Deleted),
            objects: self.cache_objects.get_or_create(&r).clone(),
            log_events: self.log_events.get_or_create(&r).clone(),
            log_bytes: self.log_bytes.get_or_create(&r).clone(),
            synced: self.synced.get_or_create(&r).clone(),
        }
    }

    pub fn informer_running(&self, resource: &str, running: bool) {
        self.informers_running
            .get_or_create(&res(resource))
            .set(i64::from(running));
    }

    pub fn upstream_list(&self, resource: &str) {
        self.upstream_lists.get_or_create(&res(resource)).inc();
    }

    pub fn upstream_watch(&self, resource: &str) {
        self.upstream_watches.get_or_create(&res(resource)).inc();
    }

    /// `reason`: a bounded word (`list`, `watch`, `expired`, `decode`).
    pub fn upstream_error(&self, resource: &str, reason: &str) {
        self.upstream_errors
            .get_or_create(&rl(resource, reason))
            .inc();
    }

    pub fn upstream_relist(&self, resource: &str, reason: &str) {
        self.upstream_relists
            .get_or_create(&rl(resource, reason))
            .inc();
    }

    pub fn hub_state(&self, resource: &str, stats: &HubStats) {
        let r = res(resource);
        self.cache_objects
            .get_or_create(&r)
            .set(stats.objects as i64);
        self.log_events
            .get_or_create(&r)
            .set(stats.log_events as i64);
        self.log_bytes.get_or_create(&r).set(stats.log_bytes as i64);
        self.synced.get_or_create(&r).set(i64::from(stats.synced));
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
}

impl HubMetrics {
    pub fn event(&self, kind: EventType) {
        match kind {
            EventType::Added => self.added.inc(),
            EventType::Modified => self.modified.inc(),
            EventType::Deleted => self.deleted.inc(),
        };
    }

    pub fn state(&self, stats: &HubStats) {
        self.objects.set(stats.objects as i64);
        self.log_events.set(stats.log_events as i64);
        self.log_bytes.set(stats.log_bytes as i64);
        self.synced.set(i64::from(stats.synced));
    }
}

fn res(resource: &str) -> ResourceLabel {
    ResourceLabel {
        resource: resource.to_string(),
    }
}

fn tl(resource: &str, transport: Transport) -> TransportLabels {
    TransportLabels {
        resource: resource.to_string(),
        transport,
    }
}

fn rl(resource: &str, reason: &str) -> ReasonLabels {
    ReasonLabels {
        resource: resource.to_string(),
        reason: reason.to_string(),
    }
}

/// `GET /healthz`: the process serves HTTP.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// `GET /readyz`: 200 once every boot-time resource is synced; 503 naming
/// the ones that are not, and why.
pub async fn readyz(informers: web::Data<Arc<Informers>>) -> HttpResponse {
    let report = informers.readiness();
    let waiting: Vec<_> = report.iter().filter(|r| !r.ready).collect();
    let body = json!({
        "status": if waiting.is_empty() { "ready" } else { "not ready" },
        "resources": report.iter().map(|r| json!({
            "resource": r.resource, "ready": r.ready, "reason": r.reason,
        })).collect::<Vec<_>>(),
    });
    if waiting.is_empty() {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(metrics: web::Data<Arc<Metrics>>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(metrics.encode())
}
