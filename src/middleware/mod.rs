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

mod origin;
mod reviewers;

use origin::{cors, host_allowed, origin, request_host, same_origin};

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
        let reviewers = reviewers::of(&req, &state);
        let reviews = reviewers.iter().map(|reviews| {
            state
                .auth
                .authenticate(req.headers(), req.query_string(), client.as_ref(), reviews)
        });
        match reviewers::first_accepted(reviews).await {
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
