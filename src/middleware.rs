//! The middleware every request passes before a handler (`/healthz`,
//! `/readyz`, the dashboard page and the client library excepted), in this
//! order:
//!
//! 0. the cluster (every request, before routing): a `/clusters/NAME`
//!    prefix is taken off the path, so that actix routes what follows, and
//!    the cluster goes into the request's extensions
//!    ([`crate::cluster::ClusterOf`]); an unknown name is 404, once the
//!    request is authenticated (step 5: existence is not told to whoever
//!    has no credentials). Any other path is the default cluster's, if
//!    there is one;
//! 1. size bounds: request target (414) and headers (431);
//! 2. CORS preflights, answered here for allowed origins;
//! 3. WebSocket upgrades from a foreign, unlisted `Origin`: 403
//!    (cross-site WebSocket hijacking);
//! 4. new requests per second per client address (429);
//! 5. authentication ([`crate::auth`]) from the request's headers, query
//!    and its connection's TLS client certificate
//!    (`transport::takeover::peer_certificates`): 401; the [`Principal`]
//!    goes into the request's extensions for handlers, and a front
//!    proxy's identity headers are removed;
//! 6. connection limits ([`crate::limits`]): 503 when full, 429 per
//!    principal or address; the permit is held by the response body (or
//!    by a stream that takes its connection over), so a stream holds its
//!    place until it ends;
//! 7. CORS headers on responses to allowed origins.
//!
//! Around all of them, a request body (no route reads one) is held unread
//! until the answer is written, so that its connection ends after the
//! answer ([`check_request`]).
//!
//! Refusals are `Status` bodies like every other error.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use actix_web::body::{BodySize, BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::http::header::{self, HeaderMap, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpResponse, ResponseError, web};
use bytes::Bytes;

use crate::auth::Principal;
use crate::cluster::ClusterOf;
use crate::limits::Permit;
use crate::status::ApiError;
use crate::transport::access_log::AccessNote;
use crate::transport::state::AppState;
use crate::transport::takeover::CorsHeaders;

/// Paths that are never gated: probes must work without credentials; the
/// dashboard page and the client library (`crate::web::is_public`) carry
/// no data (the page asks for a token when its streams are refused).
const OPEN: &[&str] = &["/healthz", "/readyz"];

pub async fn check_request(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    // No route reads a request body. One sent anyway is held, unread,
    // until its response is written, so that actix-http closes the
    // connection after the answer instead of draining what follows: it
    // drains a dropped chunked body with no byte cap (actix-http 3.20
    // `h1/dispatcher.rs`, `payload_drainable`), where a `Content-Length`
    // body that is not read already ends the connection. Unread, the body
    // costs at most actix-http's 32 KiB payload buffer (back-pressure
    // beyond).
    let unread = has_body(req.headers()).then(|| req.take_payload());
    let res = route_and_check(req, next).await?;
    Ok(match unread {
        Some(payload) => res.map_body(|_, body| {
            BoxBody::new(Holding {
                body,
                _held: payload,
            })
        }),
        None => res,
    })
}

/// Whether a request says it carries a body (`Transfer-Encoding`, or a
/// `Content-Length` other than 0: RFC 9112 section 6.3).
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0")
}

async fn route_and_check(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    // Logged as the client sent it, before the cluster's prefix goes.
    let path = req.path().to_string();
    if let Some(state) = req.app_data::<web::Data<AppState>>().cloned() {
        match state.clusters.route(req.path()) {
            // `/clusters/NAME`: the cluster's page is `/clusters/NAME/`.
            Ok((Some(_), Some("/"))) if !req.path().ends_with('/') => {
                let location = match req.query_string() {
                    "" => format!("{}/", req.path()),
                    query => format!("{}/?{query}", req.path()),
                };
                let resp = HttpResponse::PermanentRedirect()
                    .insert_header((header::LOCATION, location))
                    .finish();
                return Ok(req.into_response(resp));
            }
            Ok((cluster, rest)) => {
                if let Some(rest) = rest.map(str::to_string) {
                    route_to(&mut req, &rest);
                    req.extensions_mut().insert(crate::cluster::Prefixed);
                }
                if let Some(cluster) = cluster {
                    req.extensions_mut().insert(ClusterOf(cluster));
                }
            }
            // Answered once the request is authenticated: which clusters
            // exist is not told to whoever has no credentials.
            Err(err) => {
                req.extensions_mut().insert(UnknownCluster(err));
            }
        }
    }
    // Ending a token cookie needs no credentials (they may have expired);
    // nor does asking who is signed in. Signing in is not authenticated
    // either, but is bounded like any request (`checks`).
    let logout =
        req.path() == "/session" && (req.method() == Method::DELETE || req.method() == Method::GET);
    if OPEN.contains(&req.path()) || crate::web::is_public(req.path()) || logout {
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    let Some(state) = req.app_data::<web::Data<AppState>>().cloned() else {
        return Ok(next.call(req).await?.map_into_boxed_body());
    };
    let started = Instant::now();
    let method = req.method().clone();
    // Never the token: the query without `access_token`.
    let query = crate::auth::strip_token(req.query_string()).into_owned();
    let res = checks(req, next, state).await?;
    let extensions = res.request().extensions();
    let note = extensions.get::<AccessNote>();
    let principal = extensions.get::<Principal>().map(Principal::name);
    let cluster = extensions.get::<ClusterOf>().and_then(|c| c.name());
    let peer = extensions.get::<ClientAddress>().and_then(|a| a.0);
    tracing::info!(
        target: "kubefan::access",
        %method,
        path,
        query,
        principal = principal.unwrap_or("-"),
        cluster = cluster.unwrap_or("-"),
        peer = peer.map(|p| p.to_string()).unwrap_or_default(),
        verb = note.map_or("-", |n| n.verb.as_str()),
        resource = note.map_or("-", |n| n.resource.as_str()),
        namespaces = note.map(|n| n.namespaces.join(",")).unwrap_or_default(),
        status = res.status().as_u16(),
        duration_ms = started.elapsed().as_millis() as u64,
        "request"
    );
    drop(extensions);
    Ok(res)
}

/// A `/clusters/NAME/` path naming no cluster served: its 404, answered
/// after authentication.
struct UnknownCluster(ApiError);

/// The client address the limits counted (for the access log).
#[derive(Clone, Copy)]
struct ClientAddress(Option<std::net::IpAddr>);

async fn checks(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
    state: web::Data<AppState>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let refuse = |req: ServiceRequest, err: ApiError| Ok(req.into_response(err.error_response()));

    let limits = state.limits.config();
    let uri_len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
    if uri_len > limits.max_uri_bytes {
        let msg = format!(
            "the request target is {uri_len} bytes, more than {}",
            limits.max_uri_bytes
        );
        return refuse(req, ApiError::Status(414, "RequestURITooLong", msg));
    }
    let header_len: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    if header_len > limits.max_header_bytes {
        let msg = format!(
            "the request headers are {header_len} bytes, more than {}",
            limits.max_header_bytes
        );
        return refuse(
            req,
            ApiError::Status(431, "RequestHeaderFieldsTooLarge", msg),
        );
    }

    if let Some(allowed) = &state.allowed_hosts
        && let Some(host) = request_host(&req)
        && !host_allowed(&host, allowed)
    {
        tracing::debug!(%host, "a request for another host refused on a loopback listener");
        return refuse(
            req,
            ApiError::Forbidden(format!(
                "kubefan serves without authentication on loopback, and only to loopback host names: {host:?} is not one (a page whose name points at this machine, DNS rebinding, is refused so); list it in --allowed-hosts if it is yours"
            )),
        );
    }

    let origin = origin(req.headers());
    let listed = origin
        .as_deref()
        .is_some_and(|o| state.allowed_origins.iter().any(|a| a == o));
    if req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        if !listed {
            return refuse(
                req,
                ApiError::Forbidden("this origin is not allowed (--allowed-origins)".into()),
            );
        }
        let mut resp = HttpResponse::NoContent().finish();
        cors(resp.headers_mut(), origin.as_deref());
        let h = resp.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("Authorization, Last-Event-ID"),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        return Ok(req.into_response(resp));
    }
    if req.head().upgrade()
        && let Some(o) = origin.as_deref()
        && !listed
        && !same_origin(o, req.headers())
    {
        tracing::debug!(origin = %o, "cross-origin WebSocket upgrade refused");
        return refuse(
            req,
            ApiError::Forbidden(format!(
                "WebSocket upgrades from origin {o:?} are not allowed (--allowed-origins)"
            )),
        );
    }

    let forwarded: Vec<&str> = req
        .headers()
        .get_all("x-forwarded-for")
        .filter_map(|v| v.to_str().ok())
        .collect();
    let peer = crate::limits::client_address(
        req.peer_addr().map(|a| a.ip()),
        &forwarded,
        &state.limits.config().trusted_proxies,
    );
    req.extensions_mut().insert(ClientAddress(peer));
    if let Err(err) = state.limits.rate(peer) {
        state.metrics.limit_hit("requests_per_second");
        return refuse(req, err);
    }
    // Signing in is how a request gets credentials: bounded, not
    // authenticated, and no principal reaches its handlers.
    let principal: Option<Principal> = if crate::signin::is_open(req.path()) {
        None
    } else {
        let client = crate::transport::takeover::peer_certificates(req.request());
        // A Kubernetes token is reviewed by the cluster the request is for.
        // A request for no cluster (`/clusters`, a stream across clusters,
        // root `/ws` of several) by every cluster at once, the first that
        // accepts it naming the principal (`first_accepted`); whatever it
        // then reads of any cluster is that cluster's to review again
        // (`Auth::principal_in`, `cluster::Across`).
        // A request across clusters at the root is for no cluster, even
        // where the root also serves a default one: which clusters accept
        // its token is theirs to say (the default first, so that a token
        // every cluster accepts names the default's user), and the default
        // down takes none of the others away.
        let across = across_clusters(&req, state.clusters.named());
        if across {
            req.extensions_mut().insert(crate::cluster::Across);
        }
        let chosen = req
            .extensions()
            .get::<ClusterOf>()
            .filter(|_| !across)
            .map(|c| c.authorizer().clone());
        let reviewers: Vec<_> = match (chosen, state.auth.reviews_tokens()) {
            (Some(one), _) => vec![one],
            (None, true) => {
                let default = req
                    .extensions()
                    .get::<ClusterOf>()
                    .map(|c| c.authorizer().clone());
                default
                    .iter()
                    .cloned()
                    .chain(
                        state
                            .clusters
                            .all()
                            .iter()
                            .map(|c| c.authorizer().clone())
                            .filter(|a| {
                                !default
                                    .as_ref()
                                    .is_some_and(|d| std::sync::Arc::ptr_eq(d, a))
                            }),
                    )
                    .collect()
            }
            (None, false) => vec![state.clusters.all()[0].authorizer().clone()],
        };
        let reviews = reviewers.iter().map(|reviews| {
            state
                .auth
                .authenticate(req.headers(), req.query_string(), client.as_ref(), reviews)
        });
        match first_accepted(reviews).await {
            Ok(p) => Some(p),
            Err(err) => {
                tracing::debug!(path = %req.path(), reason = %err, "request not authenticated");
                state.metrics.auth_failure(err.kind());
                return refuse(req, err.into());
            }
        }
    };
    let name = principal.as_ref().map_or("-", Principal::name);
    let permit = match state.limits.admit(name, peer) {
        Ok(permit) => permit,
        Err(err) => {
            tracing::debug!(principal = %name, reason = %err, "request refused by a limit");
            state.metrics.limit_hit("connections");
            return refuse(req, err);
        }
    };
    // Believed or not, a front proxy's identity headers go no further.
    state.auth.clear_identity_headers(req.headers_mut());
    let unknown = req.extensions_mut().remove::<UnknownCluster>();
    if let Some(UnknownCluster(err)) = unknown {
        return refuse(req, err);
    }
    if let Some(principal) = principal {
        req.extensions_mut().insert(principal);
    }
    // The permit and the CORS headers ride in the request: a stream that
    // takes its connection over (`transport::takeover`) takes both along.
    req.extensions_mut().insert(permit);
    let mut cors_headers = HeaderMap::new();
    if listed {
        cors(&mut cors_headers, origin.as_deref());
        req.extensions_mut()
            .insert(CorsHeaders(cors_headers.clone()));
    }
    let res = next.call(req).await?;
    let permit = res.request().extensions_mut().remove::<Permit>();
    let mut res = res.map_body(|_, body| Holding {
        body: body.boxed(),
        _held: permit,
    });
    for (name, value) in cors_headers {
        res.headers_mut().append(name, value);
    }
    Ok(res.map_into_boxed_body())
}

/// The first of `reviews` (one per cluster, in order of preference) to
/// accept, run at once: a cluster that hangs or is down delays no other's
/// answer, and a bad token costs one review per cluster, concurrently.
/// Of those accepted by the time one is, the most preferred names the
/// principal (reviews the clusters hold within their TTL answer at once,
/// so a token every cluster knows is the default's user); when none
/// accepts, the most preferred's refusal is the answer.
async fn first_accepted<F>(
    reviews: impl Iterator<Item = F>,
) -> Result<Principal, crate::auth::Error>
where
    F: Future<Output = Result<Principal, crate::auth::Error>>,
{
    let mut pending: Vec<Option<Pin<Box<F>>>> = reviews.map(|f| Some(Box::pin(f))).collect();
    let mut answers: Vec<Option<Result<Principal, crate::auth::Error>>> =
        pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (review, answer) in pending.iter_mut().zip(answers.iter_mut()) {
            if let Some(fut) = review
                && let Poll::Ready(verdict) = fut.as_mut().poll(cx)
            {
                *answer = Some(verdict);
                *review = None;
            }
        }
        if let Some(at) = answers.iter().position(|a| matches!(a, Some(Ok(_)))) {
            return Poll::Ready(answers[at].take());
        }
        if pending.iter().all(Option::is_none) {
            return Poll::Ready(answers.iter_mut().find_map(Option::take));
        }
        Poll::Pending
    })
    .await
    .unwrap_or_else(|| Err(crate::auth::Error::Setup("no cluster".into())))
}

/// Routes `req` as if it had been sent to `path` (its query kept), as
/// actix's own `NormalizePath` rewrites a path before routing.
fn route_to(req: &mut ServiceRequest, path: &str) {
    let target = match req.uri().query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_string(),
    };
    let mut parts = req.head().uri.clone().into_parts();
    // The target is a suffix of one that parsed, so it parses.
    let Ok(target) = target.parse() else {
        return;
    };
    parts.path_and_query = Some(target);
    if let Ok(uri) = actix_web::http::Uri::from_parts(parts) {
        req.match_info_mut().get_mut().update(&uri);
        req.head_mut().uri = uri;
    }
}

/// The `Origin` header, unless absent. `null` (a sandboxed frame, a
/// `file:` page, some redirects) is an origin like any other: never the
/// gateway's own, and never listed (`config::Error::NullOrigin`).
fn origin(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .filter(|o| !o.is_empty())
        .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
}

/// Whether a request is for several clusters at once: `/clusters`, a
/// stream across clusters (`/stream/R?clusters=...`), or, on a gateway of
/// several clusters (`several`), `/ws`, whose subscriptions may each name
/// theirs; at the root.
fn across_clusters(req: &ServiceRequest, several: bool) -> bool {
    if req.extensions().contains::<crate::cluster::Prefixed>() {
        return false;
    }
    req.path() == "/clusters"
        || (several && req.path() == "/ws")
        || (req.path().starts_with("/stream/") && names_clusters(req.query_string()))
}

/// Whether a query has a `clusters` key, decoded as the stream's handler
/// decodes it (`transport::sse`'s `web::Query`), so `%63lusters=` is the
/// same request here as there. A query that does not decode is refused
/// by the handler (400) before anything streams.
fn names_clusters(query: &str) -> bool {
    actix_web::web::Query::<Vec<(String, String)>>::from_query(query)
        .is_ok_and(|pairs| pairs.iter().any(|(key, _)| key == "clusters"))
}

/// The host name a request was sent to, its port aside (the `Host`
/// header, else HTTP/2's `:authority`): lowercase, without a trailing
/// dot, an IPv6 address without its brackets. `None` for a request that
/// names none (an HTTP/1.0 client's; a browser always does).
fn request_host(req: &ServiceRequest) -> Option<String> {
    let authority = match req.headers().get(header::HOST) {
        Some(host) => host.to_str().unwrap_or("?").to_string(),
        None => req.uri().authority()?.as_str().to_string(),
    };
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => match authority.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => &authority,
        },
    };
    Some(host.trim_end_matches('.').to_ascii_lowercase())
}

/// Whether `host` ([`request_host`]) is a loopback name or address
/// (`localhost` and its subdomains, RFC 6761, which browsers resolve to
/// loopback themselves), or one of `allowed`.
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
        || allowed.iter().any(|a| a == host)
}

/// Whether `origin` (`scheme://host[:port]`) names the host the request
/// was sent to (its `Host` header).
fn same_origin(origin: &str, headers: &HeaderMap) -> bool {
    let Some(authority) = origin.split_once("://").map(|(_, a)| a) else {
        return false;
    };
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|host| host.eq_ignore_ascii_case(authority))
}

/// CORS headers for a listed origin: that origin, with credentials.
fn cors(headers: &mut HeaderMap, origin: Option<&str>) {
    let Some(value) = origin.and_then(|o| HeaderValue::from_str(o).ok()) else {
        return;
    };
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("Retry-After, WWW-Authenticate"),
    );
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
}

/// A response body that holds something until it is dropped: the
/// connection's permit, or the request's unread body.
struct Holding<T> {
    body: BoxBody,
    _held: T,
}

impl<T: Unpin> MessageBody for Holding<T> {
    type Error = Box<dyn std::error::Error>;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_next(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_origin_compares_the_host_header() {
        let mut h = HeaderMap::new();
        h.insert(
            header::HOST,
            HeaderValue::from_static("kubefan.example:8080"),
        );
        assert!(same_origin("http://kubefan.example:8080", &h));
        assert!(same_origin("https://KUBEFAN.example:8080", &h));
        assert!(!same_origin("http://evil.example", &h));
        assert!(!same_origin("kubefan.example:8080", &h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert_eq!(origin(&h).as_deref(), Some("null"));
        assert!(!same_origin("null", &h));
    }

    #[test]
    fn loopback_hosts_and_the_listed_ones_are_allowed() {
        let host = |value: &'static str| {
            let req = actix_web::test::TestRequest::default()
                .insert_header((header::HOST, value))
                .to_srv_request();
            request_host(&req).unwrap()
        };
        let allowed = ["dash.internal".to_string()];
        for yes in [
            "localhost:8080",
            "LOCALHOST",
            "app.localhost:8080",
            "localhost.",
            "127.0.0.1:8080",
            "127.1.2.3",
            "[::1]:8080",
            "dash.internal:9000",
        ] {
            assert!(host_allowed(&host(yes), &allowed), "{yes}");
        }
        for no in [
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "10.0.0.1:8080",
            "[::2]:8080",
            "dash.internal.evil",
            "",
        ] {
            assert!(!host_allowed(&host(no), &allowed), "{no}");
        }
    }
}
