//! Operations endpoints: `/healthz`, `/readyz`, `/metrics`.

use std::sync::Arc;

use actix_web::{HttpMessage, HttpResponse, web};
use serde_json::json;

use crate::auth::Principal;
use crate::cluster::Clusters;
use crate::metrics::Metrics;
use crate::status::ApiError;
use crate::transport::state::AppState;

/// `GET /healthz`: the process serves HTTP.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// `GET /readyz`: 200 once every boot-time resource is synced; 503 naming
/// the ones that are not, and why. With `--cluster`, per cluster, and
/// ready as `--ready-when` says (any cluster ready, or all);
/// `/clusters/NAME/readyz` is that cluster's alone.
pub async fn readyz(req: actix_web::HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let clusters: &Clusters = &state.clusters;
    let one = req
        .extensions()
        .get::<crate::cluster::Prefixed>()
        .and_then(|_| crate::cluster::ClusterOf::of(&req).ok());
    let ready = match &one {
        Some(cluster) => cluster.ready(),
        None => clusters.ready(),
    };
    let status = if ready { "ready" } else { "not ready" };
    let body = if let Some(cluster) = one {
        let mut report = cluster.report();
        report["name"] = json!(cluster.name());
        report["status"] = json!(status);
        if let Some(map) = report.as_object_mut() {
            map.remove("ready");
        }
        report
    } else if clusters.named() {
        json!({
            "status": status,
            "clusters": clusters.all().iter().map(|c| {
                let mut report = c.report();
                report["name"] = json!(c.name());
                report
            }).collect::<Vec<_>>(),
        })
    } else {
        let mut report = clusters.all()[0].report();
        report["status"] = json!(status);
        if let Some(map) = report.as_object_mut() {
            map.remove("ready");
        }
        report
    };
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// `GET /clusters`: the clusters the caller may see (those where it may
/// read something), each with its readiness and whether it is the one
/// served at the root paths. A gateway without `--cluster` has none
/// named: 404.
pub async fn clusters(
    state: web::Data<AppState>,
    principal: Principal,
) -> Result<HttpResponse, ApiError> {
    let clusters: &Clusters = &state.clusters;
    if !clusters.named() {
        return Err(ApiError::NotFound(
            "this gateway serves one cluster, at the root paths (no --cluster)".into(),
        ));
    }
    let default = clusters.default_cluster().and_then(|c| c.name());
    let items: Vec<_> = clusters
        .visible(&state.auth, &principal)
        .await
        .into_iter()
        .map(|c| {
            let mut report = c.report();
            report["name"] = json!(c.name());
            report["default"] = json!(c.name() == default);
            report["path"] = json!(format!(
                "{}{}",
                crate::cluster::PREFIX,
                c.name().unwrap_or("")
            ));
            report
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "clusters": items })))
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(metrics: web::Data<Arc<Metrics>>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(metrics.encode())
}
