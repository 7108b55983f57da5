//! The simulator's HTTP face: routing of Kubernetes API paths, query
//! parsing, `Status` error bodies, the `/debug/` endpoints and the review
//! endpoints (`server` binds it).
//!
//! All state changes go through `Sim`/`Store`; this file only translates.
//! Every request but `/debug/` passes `admit` first (authentication and
//! RBAC, in `AuthorizationMode::Rbac` only; `access.rs` says how). Errors
//! are mapped to HTTP in one place, `status_response`. Collection reads
//! (LIST and WATCH, with their query rules) are in `collection`.

use std::collections::HashMap;
use std::time::Duration;

use actix_web::http::{Method, StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

mod collection;

use collection::{list_endpoint, watch_endpoint};

use super::rbac::authorizer::UserInfo;
use super::resource::{self, ResourceDef};
use super::store::Written;
use super::{AuthorizationMode, access, auth};
use super::{Sim, SimError};

const JSON: &str = "application/json";
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

fn status_response(e: &SimError) -> HttpResponse {
    let code = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    HttpResponse::build(code)
        .content_type(JSON)
        .body(e.status().to_string())
}

fn json_response(v: &Value) -> HttpResponse {
    HttpResponse::Ok().content_type(JSON).body(v.to_string())
}

fn created(v: &Value) -> HttpResponse {
    HttpResponse::Created()
        .content_type(JSON)
        .body(v.to_string())
}

pub(crate) async fn dispatch(
    req: HttpRequest,
    body: web::Bytes,
    sim: web::Data<Sim>,
) -> HttpResponse {
    match route(&req, &body, sim.get_ref()).await {
        Ok(resp) => resp,
        Err(e) => status_response(&e),
    }
}

type Query = HashMap<String, String>;

fn query(req: &HttpRequest) -> Result<Query, SimError> {
    web::Query::<Query>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| SimError::BadRequest(format!("invalid query: {e}")))
}

/// Kubernetes boolean query parameters ("true", "1", ...).
fn flag(q: &Query, name: &str) -> Result<bool, SimError> {
    match q.get(name).map(String::as_str) {
        None | Some("") => Ok(false),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(v) => Err(SimError::BadRequest(format!(
            "invalid value for {name}: {v:?}"
        ))),
    }
}

fn number(q: &Query, name: &str) -> Result<Option<u64>, SimError> {
    q.get(name)
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse::<u64>()
                .map_err(|_| SimError::BadRequest(format!("invalid value for {name}: {v:?}")))
        })
        .transpose()
}

fn wants_aggregated(req: &HttpRequest) -> bool {
    req.headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=APIGroupDiscoveryList"))
}

/// The caller of a request: authenticated and its request authorized when
/// the simulator checks its clients (`AuthorizationMode::Rbac`), else
/// `None`. Refusals are counted in `AuthStats`.
fn admit(req: &HttpRequest, sim: &Sim, segs: &[&str]) -> Result<Option<UserInfo>, SimError> {
    if sim.config().authorization != AuthorizationMode::Rbac || segs.first() == Some(&"debug") {
        return Ok(None);
    }
    let checked = (|| {
        let user = sim.authenticate(authorization_header(req))?;
        let watch = query(req).is_ok_and(|q| flag(&q, "watch").unwrap_or(false));
        let attrs = access::request_attributes(
            user.clone(),
            req.method().as_str(),
            req.path(),
            segs,
            watch,
        );
        let decision = sim.store().policy().authorize(&attrs);
        if decision.allowed {
            Ok(user)
        } else {
            Err(access::forbidden(&attrs, &decision))
        }
    })();
    if let Err(e) = &checked {
        sim.inner.authz.count_refusal(e);
    }
    checked.map(Some)
}

fn authorization_header(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

async fn route(req: &HttpRequest, body: &[u8], sim: &Sim) -> Result<HttpResponse, SimError> {
    let segs: Vec<&str> = req.path().split('/').filter(|s| !s.is_empty()).collect();
    let admitted = admit(req, sim, &segs)?;
    // Self reviews need the caller even when requests are not checked.
    let caller = || match &admitted {
        Some(user) => Ok(user.clone()),
        None => sim.authenticate(authorization_header(req)),
    };
    let post = req.method() == Method::POST;
    let get = req.method() == Method::GET;
    if post || req.method() == Method::PUT {
        json_only(req)?;
    }
    let discovery =
        |f: &dyn Fn(&[&ResourceDef]) -> Option<Value>| -> Result<HttpResponse, SimError> {
            if !get {
                return Err(SimError::MethodNotAllowed);
            }
            let store = sim.store();
            let doc =
                f(&store.defs()).ok_or_else(|| SimError::UnknownResource(req.path().into()))?;
            Ok(json_response(&doc))
        };
    let aggregated = |core: bool| -> Result<HttpResponse, SimError> {
        let store = sim.store();
        let doc = resource::aggregated(&store.defs(), core);
        Ok(HttpResponse::Ok()
            .content_type(AGGREGATED)
            .body(doc.to_string()))
    };
    match segs.as_slice() {
        ["version"] => discovery(&|_| Some(resource::version_info())),
        ["api"] if get && wants_aggregated(req) => aggregated(true),
        ["apis"] if get && wants_aggregated(req) => aggregated(false),
        ["api"] => discovery(&|_| Some(resource::core_versions())),
        ["apis"] => discovery(&|d| Some(resource::group_list(d))),
        ["apis", g] => discovery(&|d| resource::group(d, g)),
        ["api", v] => discovery(&|d| resource::resource_list(d, "", v)),
        ["apis", g, v] => discovery(&|d| resource::resource_list(d, g, v)),
        ["debug", "stats"] if get => Ok(json_response(&json!(sim.stats()))),
        ["debug", "churn"] if req.method() == Method::POST => churn_endpoint(sim, &query(req)?),
        ["debug", "faults", fault] if req.method() == Method::POST => {
            fault_endpoint(sim, fault, &query(req)?)
        }
        ["apis", "authentication.k8s.io", "v1", "tokenreviews"] if req.method() == Method::POST => {
            Ok(created(&sim.inner.authz.token_review(body)?))
        }
        ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"] if post => {
            let policy = sim.store().policy();
            Ok(created(&sim.inner.authz.access_review(body, &policy)?))
        }
        [
            "apis",
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
        ] if post => {
            let caller = caller()?;
            let policy = sim.store().policy();
            let always = sim.config().authorization == crate::AuthorizationMode::AlwaysAllow;
            Ok(created(
                &sim.inner
                    .authz
                    .self_access_review(body, caller, &policy, always)?,
            ))
        }
        [
            "apis",
            "authorization.k8s.io",
            "v1",
            "selfsubjectrulesreviews",
        ] if post => {
            let caller = caller()?;
            let policy = sim.store().policy();
            Ok(created(
                &sim.inner.authz.self_rules_review(body, caller, &policy)?,
            ))
        }
        ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"] if post => {
            Ok(created(&auth::self_subject_review(&caller()?)))
        }
        ["api", v, rest @ ..] => resource_endpoint(req, body, sim, "", v, rest).await,
        ["apis", g, v, rest @ ..] => resource_endpoint(req, body, sim, g, v, rest).await,
        ["debug", ..] => Err(SimError::MethodNotAllowed),
        _ => Err(SimError::UnknownResource(req.path().into())),
    }
}

/// `POST /debug/churn?rate=N`: churn at N operations a second from now
/// on (0 pauses it).
fn churn_endpoint(sim: &Sim, q: &Query) -> Result<HttpResponse, SimError> {
    let rate = q
        .get("rate")
        .ok_or_else(|| SimError::BadRequest("rate: missing (operations a second)".into()))?;
    let rate: f64 = rate
        .parse()
        .ok()
        .filter(|r: &f64| r.is_finite() && (0.0..=100_000.0).contains(r))
        .ok_or_else(|| {
            SimError::BadRequest(format!("rate: {rate:?} is not a number from 0 to 100000"))
        })?;
    sim.set_churn_rate(rate);
    Ok(json_response(
        &json!({"ok": true, "rate": rate, "resourceVersion": sim.resource_version().to_string()}),
    ))
}

/// `POST /debug/faults/{fault}`: end_watches, fail_next?n=, compact,
/// stall_watches?on=, delay_lists?ms= (hyphens accepted too).
fn fault_endpoint(sim: &Sim, fault: &str, q: &Query) -> Result<HttpResponse, SimError> {
    match fault.replace('-', "_").as_str() {
        "end_watches" => sim.end_watches(),
        "fail_next" => sim.fail_next(number(q, "n")?.unwrap_or(1) as usize),
        "compact" => sim.compact(),
        "stall_watches" => sim.stall_watches(q.get("on").is_none() || flag(q, "on")?),
        "delay_lists" => sim.delay_lists(Duration::from_millis(number(q, "ms")?.unwrap_or(0))),
        _ => return Err(SimError::UnknownResource(format!("/debug/faults/{fault}"))),
    }
    Ok(json_response(
        &json!({"ok": true, "resourceVersion": sim.resource_version().to_string()}),
    ))
}

/// A request's `Content-Type` as sent, and its media type (no parameters).
fn content_type(req: &HttpRequest) -> (&str, &str) {
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    (ct, ct.split(';').next().unwrap_or("").trim())
}

/// A POST's or PUT's body (a create, an update, a review) must be JSON:
/// kube-apiserver takes protobuf too (kubectl's typed commands, `kubectl
/// create rolebinding`, send it), the simulator does not, and says so
/// with a 415 rather than failing to parse it.
fn json_only(req: &HttpRequest) -> Result<(), SimError> {
    let (ct, media) = content_type(req);
    if media.is_empty() || media == "application/json" || media.ends_with("+json") {
        return Ok(());
    }
    Err(SimError::UnsupportedMediaType(format!(
        "{ct} (the simulator takes JSON bodies only: kubectl apply -f or create -f send JSON)"
    )))
}

fn parse_body(body: &[u8]) -> Result<Value, SimError> {
    serde_json::from_slice(body)
        .map_err(|e| SimError::BadRequest(format!("invalid JSON body: {e}")))
}

/// Checks a body's namespace against the URL's and fills it in.
fn place(
    def: &ResourceDef,
    obj: &mut Value,
    ns: Option<&str>,
    name: Option<&str>,
) -> Result<(), SimError> {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return if obj.is_object() && obj.get("metadata").is_none() {
            obj["metadata"] = json!({});
            place(def, obj, ns, name)
        } else {
            Err(SimError::BadRequest(
                "the body must be an object with metadata".into(),
            ))
        };
    };
    if let (Some(ns), true) = (ns, def.namespaced) {
        match meta.get("namespace").and_then(Value::as_str) {
            Some(body_ns) if !body_ns.is_empty() && body_ns != ns => {
                return Err(SimError::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ));
            }
            _ => {
                meta.insert("namespace".into(), json!(ns));
            }
        }
    }
    if let Some(name) = name {
        match meta.get("name").and_then(Value::as_str) {
            Some(n) if n == name => {}
            Some(n) => {
                return Err(SimError::BadRequest(format!(
                    "the name of the object ({n}) does not match the name on the URL ({name})"
                )));
            }
            None => {
                meta.insert("name".into(), json!(name));
            }
        }
    }
    Ok(())
}

async fn resource_endpoint(
    req: &HttpRequest,
    body: &[u8],
    sim: &Sim,
    group: &str,
    version: &str,
    rest: &[&str],
) -> Result<HttpResponse, SimError> {
    let (ns, plural, name) = match rest {
        [plural] => (None, *plural, None),
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        [plural, name] => (None, *plural, Some(*name)),
        _ => return Err(SimError::UnknownResource(req.path().into())),
    };
    let def = sim
        .store()
        .find(group, version, plural)
        .ok_or_else(|| SimError::UnknownResource(req.path().into()))?;
    // Namespaced objects live under namespaces/{ns}; cluster-scoped ones never do.
    if (ns.is_some() && !def.namespaced) || (name.is_some() && ns.is_none() && def.namespaced) {
        return Err(SimError::UnknownResource(req.path().into()));
    }
    let answer = resource_request(req, body, sim, &def, ns, name).await;
    // Every answer for a deprecated resource, errors too (a GET of a name
    // that is not there), once it is authorized, as kube-apiserver's
    // deprecation filter adds it (`endpoints/deprecation`,
    // `warning.AddWarning`).
    let Some(warning) = deprecation_warning(group, version, plural) else {
        return answer;
    };
    let mut response = answer.unwrap_or_else(|e| status_response(&e));
    response
        .headers_mut()
        .append(header::WARNING, header::HeaderValue::from_static(warning));
    Ok(response)
}

/// The `Warning` kube-apiserver v1.36 attaches to every request for a
/// deprecated resource the simulator serves.
fn deprecation_warning(group: &str, version: &str, plural: &str) -> Option<&'static str> {
    match (group, version, plural) {
        ("", "v1", "endpoints") => Some(
            r#"299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice""#,
        ),
        _ => None,
    }
}

/// A request for `def`'s objects (in `ns`, or `name`).
async fn resource_request(
    req: &HttpRequest,
    body: &[u8],
    sim: &Sim,
    def: &ResourceDef,
    ns: Option<&str>,
    name: Option<&str>,
) -> Result<HttpResponse, SimError> {
    let def = def.clone();
    let key = def.key();
    let ok = |w: Written| HttpResponse::Ok().content_type(JSON).body(w.encoded);
    let created = |w: Written| HttpResponse::Created().content_type(JSON).body(w.encoded);
    let q = query(req)?;
    match (req.method().clone(), name) {
        (Method::GET, None) if flag(&q, "watch")? => watch_endpoint(sim, &def, ns, &q),
        (Method::GET, None) => list_endpoint(sim, &def, ns, &q).await,
        (Method::GET, Some(name)) => {
            let encoded = sim.store().get(&key, ns, name)?.encoded.clone();
            Ok(HttpResponse::Ok().content_type(JSON).body(encoded))
        }
        (Method::POST, None) if ns.is_some() || !def.namespaced => {
            let mut obj = parse_body(body)?;
            place(&def, &mut obj, ns, None)?;
            sim.store().create(&key, obj).map(created)
        }
        (Method::PUT, Some(name)) => {
            let mut obj = parse_body(body)?;
            place(&def, &mut obj, ns, Some(name))?;
            sim.store().update(&key, obj).map(ok)
        }
        (Method::PATCH, Some(name)) => {
            let (ct, media) = content_type(req);
            if media != "application/merge-patch+json"
                && media != "application/strategic-merge-patch+json"
            {
                return Err(SimError::UnsupportedMediaType(ct.to_owned()));
            }
            let patch = parse_body(body)?;
            sim.store().merge_patch(&key, ns, name, &patch).map(ok)
        }
        (Method::DELETE, Some(name)) => sim.store().delete(&key, ns, name).map(ok),
        _ => Err(SimError::MethodNotAllowed),
    }
}
