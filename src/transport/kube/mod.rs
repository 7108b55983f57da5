//! The Kubernetes-compatible, read-only face: `/api`, `/apis`, `/version`.
//!
//! Ordinary Kubernetes clients (client-go, kube-rs, kubectl, another
//! kubefan) list and watch through it and get the shared cache. It speaks
//! kube-apiserver's protocol: `...List` objects with `limit`/`continue`,
//! newline-delimited watch events with `resourceVersion`,
//! `allowWatchBookmarks`, `sendInitialEvents`, selectors and
//! `timeoutSeconds`, 410 Expired for positions the log no longer holds, and
//! `Status` bodies for every error. Writes are refused with 405. Deviations
//! from kube-apiserver are listed in `proto/PROTOCOL.md`.

mod consistent;
pub use consistent::Probes;
mod discovery;
mod list;
pub use list::{PageOwner, Pages};
pub(crate) mod params;
mod printers;
pub use printers::KubePrinters;
mod watch;

use actix_web::{HttpRequest, HttpResponse, web};

use crate::auth::{self, AcrossNamespaces, Principal, Verb};
use crate::cluster::{Cluster, ClusterOf};
use crate::hub::{Filter, Shape};
use crate::status::ApiError;
use crate::table::{self, IncludeObject, Output, TableView};
use crate::transport::state::AppState;
use crate::upstream::{self, ResourceInfo};
use params::KubeQuery;

/// Registers the Kubernetes face's routes (each request's cluster holds
/// the face's caches: `Cluster::pages`, `printers`, `probes`).
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/version", web::get().to(discovery::version))
        .route("/api", web::get().to(discovery::api_versions))
        .route("/api/", web::get().to(discovery::api_versions))
        .route("/apis", web::get().to(discovery::api_groups))
        .route("/apis/", web::get().to(discovery::api_groups))
        .route("/api/{version}", web::get().to(discovery::core_resources))
        .route("/apis/{group}", web::get().to(discovery::api_group))
        .route(
            "/apis/{group}/{version}",
            web::get().to(discovery::group_resources),
        )
        .route("/api/{version}/{tail:.*}", web::get().to(core_request))
        .route(
            "/apis/{group}/{version}/{tail:.*}",
            web::get().to(group_request),
        )
        .route("/api/{tail:.*}", web::route().to(read_only))
        .route("/apis/{tail:.*}", web::route().to(read_only));
}

/// Any write: kubefan is a read-only cache.
async fn read_only(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    Err(ApiError::Status(
        405,
        "MethodNotAllowed",
        format!(
            "kubefan is a read-only cache of the Kubernetes API: {} is not allowed on {}; send writes to the API server itself",
            req.method(),
            req.path()
        ),
    ))
}

/// What a resource path names.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    plural: String,
    namespace: Option<String>,
    name: Option<String>,
    /// The path began with `watch/` (kube-apiserver's deprecated watch
    /// paths, `/api/v1/watch/namespaces/NS/pods[/NAME]`): a watch whatever
    /// the query says, of one object when it names one.
    watch: bool,
}

/// Parses what follows `/api/v1/` or `/apis/{g}/{v}/`.
fn parse_tail(tail: &str) -> Result<Target, ApiError> {
    let (watch, rest) = match tail.strip_prefix("watch/") {
        Some(rest) => (true, rest),
        None => (false, tail),
    };
    let segs: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    let target = |plural: &str, namespace: Option<&str>, name: Option<&str>| Target {
        plural: plural.to_string(),
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
        watch,
    };
    match segs.as_slice() {
        [plural] if !plural.is_empty() => Ok(target(plural, None, None)),
        ["namespaces", ns, plural] => Ok(target(plural, Some(ns), None)),
        ["namespaces", ns, plural, name] => Ok(target(plural, Some(ns), Some(name))),
        [plural, name] => Ok(target(plural, None, Some(name))),
        _ => Err(ApiError::NotFound(format!(
            "the server could not find the requested resource: {tail:?} (subresources are not served by kubefan)"
        ))),
    }
}

async fn core_request(
    req: HttpRequest,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
    cluster: ClusterOf,
    principal: Principal,
) -> Result<HttpResponse, ApiError> {
    let (version, tail) = path.into_inner();
    let target = Request {
        group: String::new(),
        version,
        tail,
    };
    serve(req, target, state, cluster, principal).await
}

async fn group_request(
    req: HttpRequest,
    path: web::Path<(String, String, String)>,
    state: web::Data<AppState>,
    cluster: ClusterOf,
    principal: Principal,
) -> Result<HttpResponse, ApiError> {
    let (group, version, tail) = path.into_inner();
    let target = Request {
        group,
        version,
        tail,
    };
    serve(req, target, state, cluster, principal).await
}

/// A resource path as routed: `/api/{version}/{tail}` (core group) or
/// `/apis/{group}/{version}/{tail}`.
struct Request {
    group: String,
    version: String,
    tail: String,
}

async fn serve(
    req: HttpRequest,
    Request {
        group,
        version,
        tail,
    }: Request,
    state: web::Data<AppState>,
    cluster: ClusterOf,
    principal: Principal,
) -> Result<HttpResponse, ApiError> {
    let authorizer = cluster.authorizer();
    let target = parse_tail(&tail)?;
    let mut query = KubeQuery::parse(&auth::strip_token(req.query_string()))?;
    if target.watch {
        query.watch = true;
    } else if target.name.is_some() {
        // One object by its path is a GET, whose options have no `watch`:
        // kube-apiserver answers `.../pods/NAME?watch=1` with the object
        // (`installer.go` routes the item path to `GetResource`); a watch
        // of one object is `?fieldSelector=metadata.name=NAME&watch=1`, or
        // the deprecated `/watch/` path.
        query.watch = false;
    }
    // What the response carries, decided first as kube-apiserver does: an
    // Accept it cannot serve is 406 before anything else.
    let accept = req
        .headers()
        .get(actix_web::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let negotiated = table::negotiate(accept).map_err(table_error)?;
    let verb = match (&target.name, query.watch) {
        (Some(_), false) => Verb::Get,
        (_, true) => Verb::Watch,
        (None, false) => Verb::List,
    };
    let requested: Vec<String> = target.namespace.iter().cloned().collect();
    // Authorized before existence is revealed: a principal that may not
    // see the resource gets 403 whether or not it exists.
    let info = match resolve(&cluster, &group, &version, &target.plural).await {
        Ok(info) => info,
        Err(err @ ApiError::NotFound(_)) => {
            return Err(authorizer
                .unknown(&principal, &group, &target.plural, verb, &requested, err)
                .await);
        }
        Err(err) => return Err(err),
    };
    // One object, named by its path or by a field selector that requires
    // `metadata.name=NAME` (a list or watch; not on a `/watch/` path):
    // authorized with its name, so `resourceNames` grants count, as
    // kube-apiserver's `RequestInfo` reads the request; anything else as
    // the collection.
    let fields = crate::selector::selectable_fields(&info.api.group, &info.api.plural);
    let named = match &target.name {
        Some(name) => Some(name.clone()),
        None if target.watch => None,
        None => query.selected_name(fields),
    };
    let namespaces = match &named {
        Some(name) => {
            authorizer
                .authorize_named(
                    &principal,
                    cluster.informers(),
                    &info,
                    verb,
                    target.namespace.as_deref(),
                    name,
                )
                .await?;
            requested.clone()
        }
        None => {
            authorizer
                .authorize(
                    &principal,
                    cluster.informers(),
                    &info,
                    verb,
                    &requested,
                    AcrossNamespaces::Refuse,
                )
                .await?
        }
    };
    if target.namespace.is_some() && !info.namespaced {
        return Err(not_found(&group, &version, &target.plural));
    }
    super::access_log::note(&req, verb, &info.canonical_name(), &namespaces);
    // `/watch/.../pods/NAME` watches the collection narrowed to that name,
    // as kube-apiserver turns it into `fieldSelector=metadata.name=NAME`
    // (apiserver `handlers/get.go`, `ListResource` with a name).
    let plan = query.plan(target.name.as_deref(), fields)?;
    let query = &plan.query;
    let filter = Filter {
        namespaces,
        labels: plan.labels.clone(),
        fields: plan.fields.clone(),
    };
    let shape = shape(
        &state,
        &cluster,
        &info,
        query,
        negotiated.output,
        target.name.is_none() && !query.watch,
    )
    .await?;
    // Counted as a user of the hub while serving, so an on-demand informer
    // is not stopped mid-request; retried once if it was stopped just now.
    let (hub, _in_use) = cluster
        .informers()
        .with_hub::<_, ApiError, _, _>(&info.canonical_name(), |hub| async move {
            let guard = hub.enter()?;
            Ok((hub, guard))
        })
        .await?;
    let read = list::Read {
        state: &state,
        hub: &hub,
        info: &info,
        shape: &shape,
        cluster: &cluster,
    };
    let answer = if let (Some(name), false) = (&target.name, query.watch) {
        // Without a resourceVersion, a GET is consistent too.
        let consistent = query.resource_version.is_none();
        list::get(read, target.namespace.as_deref(), name, consistent).await
    } else if query.watch {
        // A watch list (sendInitialEvents=true) with no resourceVersion
        // is a consistent read, as a LIST without one: its initial events
        // are at least as new as the upstream is now, as kube-apiserver's
        // cache serves one (KEP-3157, "watch-list": the cacher waits until
        // it is fresh before sending them).
        // Waited for in the stream's task, not here (`Subscription::start_after`).
        let consistent = (query.send_initial_events == Some(true)
            && query.resource_version.is_none())
        .then(|| {
            let (probes, client) = (
                cluster.probes().clone(),
                cluster.informers().client().clone(),
            );
            let (info, hub) = (info.clone(), hub.clone());
            futures::FutureExt::boxed(async move { probes.catch_up(&client, &info, &hub).await })
        });
        let watch = watch::Watch {
            hub: hub.clone(),
            filter,
            shape,
            plan: &plan,
            principal: &principal,
            consistent,
        };
        watch::watch(&req, &state, watch).await
    } else {
        let owner = PageOwner {
            principal,
            resource: info.canonical_name(),
            filter,
        };
        list::list(read, cluster.pages(), owner, &plan).await
    };
    // The API server's warnings for the resource (a deprecated API's),
    // on whatever kubefan answers from here on, errors too, as
    // kube-apiserver adds them once a request reached the resource. Read
    // after the answer: a request that started the informer waited for
    // its first list, which brought them.
    Ok(with_warnings(answer, &hub.warnings()))
}

/// `answer` (an error as its `Status` response) with the API server's
/// `warnings` as `Warning` headers. (A watch's response was written by
/// its stream, with them: `watch::watch`.)
fn with_warnings(
    answer: Result<HttpResponse, ApiError>,
    warnings: &[&'static str],
) -> HttpResponse {
    use actix_web::ResponseError;
    let mut response = answer.unwrap_or_else(|e| e.error_response());
    crate::transport::append_warnings(response.headers_mut(), warnings);
    response
}

/// How objects are encoded for `output` (`Accept`): as themselves, as
/// `Table` rows printed by the resource's printer, or as
/// `PartialObjectMetadata`.
async fn shape(
    state: &AppState,
    cluster: &Cluster,
    info: &ResourceInfo,
    query: &KubeQuery,
    output: Output,
    is_list: bool,
) -> Result<Shape, ApiError> {
    let output = if query.watch {
        output.for_watch_events()
    } else {
        output.check(is_list).map_err(table_error)?
    };
    Ok(match output {
        Output::Json => Shape::Object,
        Output::Table(version) => {
            // Read only for tables, as kube-apiserver reads it.
            let include =
                IncludeObject::parse(query.include_object.as_deref()).map_err(table_error)?;
            let printer = cluster
                .printers()
                .printer(
                    cluster,
                    &state.subscriptions,
                    &info.api.group,
                    &info.api.version,
                    &info.api.plural,
                )
                .await;
            Shape::Table(TableView::new(printer, version, include))
        }
        Output::PartialObjectMetadata(version) | Output::PartialObjectMetadataList(version) => {
            Shape::PartialMetadata(version)
        }
    })
}

fn table_error(err: table::Error) -> ApiError {
    ApiError::Status(err.code(), err.reason(), err.to_string())
}

/// Finds the resource a `group/version/plural` path names, exactly.
async fn resolve(
    cluster: &Cluster,
    group: &str,
    version: &str,
    plural: &str,
) -> Result<ResourceInfo, ApiError> {
    let name = if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{version}.{group}")
    };
    match cluster.informers().resolve(&name).await {
        Ok(info)
            if info.api.group == group
                && info.api.version == version
                && info.api.plural == plural =>
        {
            Ok(info)
        }
        Ok(_) | Err(upstream::Error::UnknownResource(_)) => Err(not_found(group, version, plural)),
        Err(err) => Err(err.into()),
    }
}

/// Waits until the hub has reached resourceVersion `rv` (at most the sync
/// timeout); otherwise answers as kube-apiserver does: 504 "Too large
/// resource version".
async fn reached(state: &AppState, hub: &crate::hub::Hub, rv: u64) -> Result<(), ApiError> {
    if hub.wait_for_rv(rv, state.stream.sync_timeout).await {
        return Ok(());
    }
    Err(ApiError::Status(
        504,
        "Timeout",
        format!(
            "Too large resource version: {rv}, current: {}",
            hub.resource_version()
        ),
    ))
}

fn not_found(group: &str, version: &str, plural: &str) -> ApiError {
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    ApiError::NotFound(format!(
        "the server could not find the requested resource: {plural} in {gv} (not served by the upstream, or not its preferred version)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_paths_parse_like_kube_apiserver() {
        let t = |p: &str, ns: Option<&str>, name: Option<&str>| Target {
            plural: p.into(),
            namespace: ns.map(Into::into),
            name: name.map(Into::into),
            watch: false,
        };
        let watched = |target: Target| Target {
            watch: true,
            ..target
        };
        assert_eq!(parse_tail("pods").unwrap(), t("pods", None, None));
        assert_eq!(
            parse_tail("namespaces/web/pods").unwrap(),
            t("pods", Some("web"), None)
        );
        assert_eq!(
            parse_tail("namespaces/web/pods/a").unwrap(),
            t("pods", Some("web"), Some("a"))
        );
        assert_eq!(
            parse_tail("nodes/n1").unwrap(),
            t("nodes", None, Some("n1"))
        );
        assert_eq!(
            parse_tail("namespaces/web").unwrap(),
            t("namespaces", None, Some("web"))
        );
        assert!(parse_tail("namespaces/web/pods/a/status").is_err());
        assert!(parse_tail("").is_err());
        // The deprecated watch paths.
        assert_eq!(
            parse_tail("watch/namespaces/web/pods/a").unwrap(),
            watched(t("pods", Some("web"), Some("a")))
        );
        assert_eq!(
            parse_tail("watch/pods").unwrap(),
            watched(t("pods", None, None))
        );
        assert!(parse_tail("watch/").is_err());
    }
}
