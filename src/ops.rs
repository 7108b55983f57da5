//! Operations endpoints: `/healthz`, `/readyz`, `/metrics`.

use std::sync::Arc;

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::metrics::Metrics;
use crate::upstream::Informers;

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
