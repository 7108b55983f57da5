//! Transports: how subscribers are framed on the wire. Each one only frames
//! what the hub already encoded; none keeps state of its own.

pub mod access_log;
pub mod kube;
pub mod merged;
pub mod message;
pub mod sse;
pub mod state;
pub mod stream;
pub mod takeover;
pub mod ws;

use actix_web::web;

use crate::auth::Principal;
use crate::cluster::Cluster;
use crate::hub::projection::Projection;
use crate::hub::scope::Position;
use crate::hub::{Delta, Filter, ViewSpec};
use crate::hub::{Subscribe, Subscription};
use crate::metrics::Transport;
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use state::AppState;

/// Authorizes, then subscribes ([`authorize`], [`join`]).
pub(crate) async fn subscribe(
    state: &AppState,
    cluster: &Cluster,
    principal: &Principal,
    resource: &str,
    params: &StreamParams,
    transport: Transport,
) -> Result<Subscription, ApiError> {
    let request = authorize(cluster, principal, resource, params, transport).await?;
    join(state, cluster, resource, request).await
}

/// Authorizes a stream in `cluster`: what to subscribe with, the
/// principal's grant narrowing the namespaces asked for.
pub(crate) async fn authorize(
    cluster: &Cluster,
    principal: &Principal,
    resource: &str,
    params: &StreamParams,
    transport: Transport,
) -> Result<Subscribe, ApiError> {
    let mut params = params.clone();
    let (namespaces, access) = cluster
        .authorizer()
        .authorize_stream(principal, cluster.informers(), resource, &params.namespaces)
        .await?;
    params.namespaces = namespaces;
    Ok(Subscribe {
        access,
        spec: params.view_spec(),
        resume: params.resume,
        transport,
        expires: principal.deadline(),
        lease: principal.lease().cloned(),
    })
}

/// Subscribes as `request` says to `resource`'s hub, once it has synced
/// (at most `--sync-timeout-secs`). Retried once on a fresh hub if the hub
/// was stopped for idleness just now (`Informers::with_hub`).
pub(crate) async fn join(
    state: &AppState,
    cluster: &Cluster,
    resource: &str,
    request: Subscribe,
) -> Result<Subscription, ApiError> {
    let request = &request;
    cluster
        .informers()
        .with_hub::<_, ApiError, _, _>(resource, |hub| {
            Subscription::start(hub, request.clone(), &state.subscriptions)
        })
        .await
}

/// Options common to every streaming transport.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamParams {
    pub namespaces: Vec<String>,
    /// A position the client has seen (`RV`, or `RV~TAG` on a narrowed
    /// stream); `None` asks for a snapshot.
    pub resume: Option<Position>,
    pub labels: LabelSelector,
    /// Any dotted path (not only the fields Kubernetes makes selectable).
    pub fields: FieldSelector,
    pub projection: Option<Projection>,
    pub delta: Delta,
}

impl StreamParams {
    pub fn filter(&self) -> Filter {
        Filter {
            namespaces: self.namespaces.clone(),
            labels: self.labels.clone(),
            fields: self.fields.clone(),
        }
    }

    /// These options as the key/value pairs [`parse_stream_params`]
    /// reads, spelled so that they parse back to these options.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if !self.namespaces.is_empty() {
            pairs.push(("namespace", self.namespaces.join(",")));
        }
        if let Some(position) = &self.resume {
            pairs.push(("resourceVersion", position.to_string()));
        }
        if !self.labels.is_empty() {
            pairs.push(("labelSelector", self.labels.to_string()));
        }
        if !self.fields.is_empty() {
            pairs.push(("fieldSelector", self.fields.to_string()));
        }
        if let Some(projection) = &self.projection {
            pairs.push(("fields", projection.to_string()));
        }
        if self.delta == Delta::MergePatch {
            pairs.push(("delta", "merge-patch".to_string()));
        }
        pairs
    }

    /// The view these options ask for.
    pub fn view_spec(&self) -> ViewSpec {
        ViewSpec {
            filter: self.filter(),
            projection: self.projection.clone(),
            delta: self.delta,
            shape: crate::hub::Shape::Object,
        }
    }
}

const KNOWN_PARAMS: &str =
    "namespace, resourceVersion, labelSelector, fieldSelector, fields, delta";

/// Parses `?namespace=a,b&resourceVersion=N`. Unknown parameters are
/// refused, so a typo is an error rather than a silently broader stream.
pub fn parse_stream_query(query: &str) -> Result<StreamParams, ApiError> {
    let pairs = web::Query::<Vec<(String, String)>>::from_query(query)
        .map_err(|e| ApiError::BadRequest(format!("malformed query string: {e}")))?
        .into_inner();
    parse_stream_params(pairs, "query parameter")
}

/// Validates stream options given as key/value pairs: the query string's,
/// or the fields of a WebSocket `subscribe` message (see [`ws`]). `noun`
/// names a key in errors ("query parameter", "field").
pub fn parse_stream_params(
    pairs: Vec<(String, String)>,
    noun: &str,
) -> Result<StreamParams, ApiError> {
    let mut params = StreamParams::default();
    for (key, value) in pairs {
        match key.as_str() {
            "namespace" => {
                for ns in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if !is_dns_label(ns) {
                        return Err(ApiError::BadRequest(format!(
                            "namespace {ns:?} is not a valid namespace name"
                        )));
                    }
                    if !params.namespaces.iter().any(|n| n == ns) {
                        params.namespaces.push(ns.to_string());
                    }
                }
            }
            "resourceVersion" => {
                params.resume = parse_position("resourceVersion", value.trim())?;
            }
            "labelSelector" => {
                params.labels = LabelSelector::parse(&value)
                    .map_err(|e| ApiError::BadRequest(format!("labelSelector: {}", e.0)))?;
            }
            "fieldSelector" => {
                params.fields = FieldSelector::parse_any(&value)
                    .map_err(|e| ApiError::BadRequest(format!("fieldSelector: {}", e.0)))?;
            }
            "fields" => {
                params.projection = Some(Projection::parse(&value).map_err(ApiError::BadRequest)?);
            }
            "delta" => {
                params.delta = match value.trim() {
                    "" | "full" => Delta::Full,
                    "merge-patch" => Delta::MergePatch,
                    other => {
                        return Err(ApiError::BadRequest(format!(
                            "delta {other:?} is not supported (use merge-patch, or full)"
                        )));
                    }
                }
            }
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown {noun} {other:?} (known: {KNOWN_PARAMS})"
                )));
            }
        }
    }
    Ok(params)
}

/// A resume position as a client sends it (`resourceVersion`, an SSE
/// `Last-Event-ID`, a `/ws` field): `RV` or `RV~TAG`; empty and 0 (in any
/// spelling: `00` too) without a tag ask for a snapshot.
pub fn parse_position(what: &str, value: &str) -> Result<Option<Position>, ApiError> {
    if value.is_empty() {
        return Ok(None);
    }
    match Position::parse(value) {
        Some(Position { rv: 0, tag: None }) => Ok(None),
        Some(position) => Ok(Some(position)),
        None => Err(ApiError::BadRequest(format!(
            "{what} {value:?} is not a resourceVersion (a decimal number, with a ~TAG on narrowed streams)"
        ))),
    }
}

/// A Kubernetes namespace name: an RFC 1123 label.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The API server's warnings for a resource (`upstream::warning`), as the
/// `Warning` headers of a response kubefan answers about it: appended to
/// an actix response's `headers`.
pub(crate) fn append_warnings(
    headers: &mut actix_web::http::header::HeaderMap,
    warnings: &[&'static str],
) {
    use actix_web::http::header::{HeaderValue, WARNING};
    for warning in warnings {
        headers.append(WARNING, HeaderValue::from_static(warning));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parses_selectors_projection_and_delta() {
        let p = parse_stream_query(
            "labelSelector=app%20in%20(web,db),!canary&fieldSelector=status.phase%3DRunning,spec.x.y!%3Dz&fields=spec.nodeName&delta=merge-patch",
        )
        .unwrap();
        assert!(!p.labels.is_empty());
        assert_eq!(
            p.fields.fields().collect::<Vec<_>>(),
            ["status.phase", "spec.x.y"]
        );
        assert!(p.projection.is_some());
        assert_eq!(p.delta, Delta::MergePatch);
        for bad in [
            "labelSelector=a%20b",
            "fieldSelector=spec..x%3D1",
            "fields=",
            "fields=a%20b",
            "delta=json-patch",
        ] {
            let err = parse_stream_query(bad).unwrap_err();
            assert!(matches!(err, ApiError::BadRequest(_)), "{bad}: {err}");
        }
        let long = format!("labelSelector={}", "a,".repeat(3000));
        assert!(
            parse_stream_query(&long)
                .unwrap_err()
                .to_string()
                .contains("limit")
        );
    }

    #[test]
    fn query_parses_namespaces_and_resume() {
        let p = parse_stream_query("namespace=a,b&namespace=b&resourceVersion=12").unwrap();
        assert_eq!(p.namespaces, vec!["a", "b"]);
        assert_eq!(p.resume, Some(Position { rv: 12, tag: None }));
        assert_eq!(
            parse_stream_query("resourceVersion=0").unwrap().resume,
            None
        );
        assert_eq!(
            parse_stream_query("resourceVersion=7~0a0b0c0d")
                .unwrap()
                .resume,
            Some(Position {
                rv: 7,
                tag: Some("0a0b0c0d".into())
            })
        );
        assert_eq!(parse_stream_query("").unwrap(), StreamParams::default());
    }

    #[test]
    fn zero_in_any_spelling_asks_for_a_snapshot_and_a_sign_is_refused() {
        for snapshot in ["", "0", "00", "000"] {
            assert_eq!(parse_position("resourceVersion", snapshot).unwrap(), None);
        }
        for bad in ["+5", "-0", "5 ", "18446744073709551616"] {
            assert!(parse_position("resourceVersion", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_token_in_the_query_never_reaches_the_stream_parser() {
        // The parser refuses unknown parameters: `access_token` must go first.
        assert!(parse_stream_query("access_token=x&namespace=a").is_err());
        let stripped = crate::auth::strip_token("access_token=x&namespace=a");
        assert_eq!(parse_stream_query(&stripped).unwrap().namespaces, ["a"]);
    }

    #[test]
    fn bad_queries_are_refused_with_the_reason() {
        for q in [
            "namespace=Bad_NS",
            "resourceVersion=abc",
            "nmespace=a",
            "namespace=-a",
        ] {
            let err = parse_stream_query(q).unwrap_err();
            assert!(matches!(err, ApiError::BadRequest(_)), "{q}: {err}");
        }
        assert!(
            parse_stream_query("nmespace=a")
                .unwrap_err()
                .to_string()
                .contains("nmespace")
        );
    }
}
