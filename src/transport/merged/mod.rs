//! One stream across clusters: `GET /stream/{resource}?clusters=a,b` (or
//! `*`, every cluster that accepts the caller) as SSE ([`sse`]), and a
//! `/ws` subscription with `clusters` ([`ws`]).
//!
//! A merged stream is one subscription per cluster, each on that
//! cluster's hub and view and authorized by that cluster as a
//! single-cluster stream would be ([`open`], [`super::subscribe`]),
//! framed as its transport frames a single stream and then marked with
//! its cluster: every message's JSON gains `"cluster":"NAME"` as its
//! first field, and every id becomes the stream's compound id,
//! `a=123,b=456~TAG`: each part's last position, in the order the
//! clusters were named ([`Ids`]). A resume splits it and resumes each
//! part by the usual rules, so a part whose position is gone gets its own
//! `RESET` and snapshot and the others go on. The parts are polled in turn
//! by the stream's one task ([`Parts`]), so ids always describe what the
//! client has received.
//!
//! A part that ends (its `ERROR`, which names the cluster) leaves the
//! others streaming. A part's API server lost or found again is announced
//! (`CLUSTER`, [`Parts::poll_reach`]). Merged streams are written by their
//! own task, not parked with a hub's batch writer (`takeover::batch`):
//! their frames are the shared ones with the cluster put in, a copy per
//! delivery. Making them batch is the outbox-based design in
//! ARCHITECTURE.md ("Several clusters").

mod parts;
mod sse;
pub(crate) mod ws;

pub use sse::{Plan, stream};

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use actix_web::web;
use serde_json::Value;

use super::{StreamParams, authorize, join, parse_position};
use crate::auth::Principal;
use crate::cluster::{Cluster, Clusters};
use crate::hub::Subscription;
use crate::hub::scope::Position;
use crate::metrics::Transport;
use crate::status::ApiError;
use crate::transport::state::AppState;
use parts::Parts;

/// The clusters a `clusters=` value names: every one for `*`, otherwise
/// each named once, in order (404 naming one that is not served).
pub fn named(clusters: &Clusters, value: &str) -> Result<(Vec<Arc<Cluster>>, bool), ApiError> {
    if !clusters.named() {
        return Err(ApiError::BadRequest(
            "clusters= needs a gateway serving several clusters (--cluster)".into(),
        ));
    }
    let value = value.trim();
    if value == "*" {
        return Ok((clusters.all().to_vec(), true));
    }
    let mut chosen: Vec<Arc<Cluster>> = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let cluster = clusters.get(name).ok_or_else(|| {
            ApiError::NotFound(format!(
                "no cluster {name:?} is served here (GET /clusters lists them)"
            ))
        })?;
        if !chosen.iter().any(|c| Arc::ptr_eq(c, cluster)) {
            chosen.push(cluster.clone());
        }
    }
    if chosen.is_empty() {
        return Err(ApiError::BadRequest(
            "clusters= names no cluster (a,b or *)".into(),
        ));
    }
    Ok((chosen, false))
}

/// A compound id (`a=123,b=456~TAG`) as each named cluster's position:
/// 400 for one that does not parse or names a cluster not asked for.
pub fn parse_compound(
    what: &str,
    value: &str,
    clusters: &[&str],
) -> Result<Vec<Option<Position>>, ApiError> {
    let mut positions = vec![None; clusters.len()];
    // Named already: a position of none ("" or 0) is a naming too.
    let mut named = vec![false; clusters.len()];
    let value = value.trim();
    if value.is_empty() {
        return Ok(positions);
    }
    for part in value.split(',') {
        let Some((name, id)) = part.split_once('=') else {
            return Err(ApiError::BadRequest(format!(
                "{what} {value:?} is not a merged stream's id (NAME=ID,...)"
            )));
        };
        let Some(i) = clusters.iter().position(|c| *c == name.trim()) else {
            return Err(ApiError::BadRequest(format!(
                "{what} {value:?} names cluster {name:?}, which this stream does not ask for"
            )));
        };
        if std::mem::replace(&mut named[i], true) {
            return Err(ApiError::BadRequest(format!(
                "{what} {value:?} names cluster {name:?} twice"
            )));
        }
        positions[i] = parse_position(what, id.trim())?;
    }
    Ok(positions)
}

/// `err`, saying which cluster answered it.
fn in_cluster(err: ApiError, name: &str) -> ApiError {
    let say = |msg: String| format!("cluster {name:?}: {msg}");
    match err {
        ApiError::BadRequest(m) => ApiError::BadRequest(say(m)),
        ApiError::NotFound(m) => ApiError::NotFound(say(m)),
        ApiError::Forbidden(m) => ApiError::Forbidden(say(m)),
        ApiError::Unavailable(m) => ApiError::Unavailable(say(m)),
        ApiError::Unauthorized(m) => ApiError::Unauthorized(say(m)),
        ApiError::TooManyRequests(m, s) => ApiError::TooManyRequests(say(m), s),
        ApiError::Status(code, reason, m) => ApiError::Status(code, reason, say(m)),
    }
}

/// What a merged stream asks for, whatever carries it.
pub struct Asked<'a> {
    pub resource: &'a str,
    /// Every part's options (its resume position aside).
    pub params: StreamParams,
    /// The clusters, in the order named, and whether they were asked as
    /// `*` (a cluster that refuses is then left out and announced instead
    /// of failing the request).
    pub chosen: (Vec<Arc<Cluster>>, bool),
    /// Each cluster's position to resume from.
    pub resume: Vec<Option<Position>>,
}

/// How a part of a merged stream starts: now (its hub had synced), or
/// once its hub has (its resource's first list from that cluster), so
/// that a cluster not yet listed (its API server unreachable since
/// kubefan started, say) holds up none of the others.
pub enum Start {
    Now(Subscription),
    Later(Pin<Box<dyn Future<Output = Result<Subscription, ApiError>> + Send>>),
}

/// A part's start, later: `starting`, unless the gateway stops first.
fn later(
    state: web::Data<AppState>,
    starting: impl Future<Output = Result<Subscription, ApiError>> + Send + 'static,
) -> Pin<Box<dyn Future<Output = Result<Subscription, ApiError>> + Send>> {
    Box::pin(async move {
        tokio::select! {
            biased;
            _ = state.lifecycle.shutting_down() => Err(ApiError::Unavailable(
                "kubefan is shutting down; reconnect".into(),
            )),
            started = starting => started,
        }
    })
}

/// A merged stream's parts as they started: each accepting cluster's
/// (with the position it resumes from, its part of the compound id until
/// it sends one), and the `Status` of each cluster that refused (asked as
/// `*`).
pub struct Opened {
    pub parts: Vec<(Arc<str>, Start, Option<String>)>,
    pub refused: Vec<(Arc<str>, Value)>,
    /// The namespaces the parts stream, each once (for the access log).
    pub namespaces: Vec<String>,
}

/// Opens a merged stream's parts. First every cluster asked for
/// authorizes `principal` as it knows it (under `--auth kubernetes` each
/// cluster reviews the token itself: an identity is its cluster's own,
/// `Auth::principal_in`), all at once: a named cluster that refuses fails
/// it all, its answer naming the cluster; under `*` it is left out; 403
/// when no cluster is left. Then each part joins its hub: at once if the
/// hub has synced (a refusal then is as above), else later, in the stream
/// ([`Start::Later`]). A cluster whose RBAC objects are not loaded yet
/// authorizes later too, rather than hold up the others (its refusal is
/// then a `CLUSTER` message).
pub async fn open(
    state: &web::Data<AppState>,
    principal: &Principal,
    asked: Asked<'_>,
    transport: Transport,
) -> Result<Opened, ApiError> {
    let Asked {
        resource,
        params,
        chosen: (chosen, every),
        resume,
    } = asked;
    let resumed: Vec<Option<String>> = resume
        .iter()
        .map(|p| p.as_ref().map(ToString::to_string))
        .collect();
    let authorizations = chosen.iter().zip(resume).map(|(cluster, resume)| {
        let mut params = params.clone();
        params.resume = resume;
        // `Ok(Err(params))`: to authorize later, in the stream (its RBAC
        // objects are not loaded yet).
        async move {
            if !cluster.authorizer().loaded() {
                return Ok(Err(params));
            }
            let there = state
                .auth
                .principal_in(principal, cluster.authorizer())
                .await?;
            authorize(cluster, &there, resource, &params, transport)
                .await
                .map(Ok)
        }
    });
    let authorized = futures::future::join_all(authorizations).await;
    let mut opened = Opened {
        parts: Vec::with_capacity(chosen.len()),
        refused: Vec::new(),
        namespaces: Vec::new(),
    };
    for ((cluster, authorized), resumed) in chosen.iter().zip(authorized).zip(resumed) {
        let name: Arc<str> = Arc::from(cluster.name().unwrap_or(""));
        let started = match authorized {
            Ok(Err(params)) => {
                let (state, cluster) = (state.clone(), cluster.clone());
                let (principal, resource) = (principal.clone(), resource.to_string());
                Ok(Start::Later(later(state.clone(), async move {
                    let there = state
                        .auth
                        .principal_in(&principal, cluster.authorizer())
                        .await?;
                    let request =
                        authorize(&cluster, &there, &resource, &params, transport).await?;
                    join(&state, &cluster, &resource, request).await
                })))
            }
            Ok(Ok(request)) => {
                opened
                    .namespaces
                    .extend(request.spec.filter.namespaces.iter().cloned());
                let synced = match cluster.informers().hub(resource).await {
                    Ok(hub) => hub.is_synced(),
                    // Joining says what is wrong.
                    Err(_) => true,
                };
                if synced {
                    join(state, cluster, resource, request)
                        .await
                        .map(Start::Now)
                } else {
                    let (state, cluster) = (state.clone(), cluster.clone());
                    let resource = resource.to_string();
                    Ok(Start::Later(later(state.clone(), async move {
                        join(&state, &cluster, &resource, request).await
                    })))
                }
            }
            Err(err) => Err(err),
        };
        match started {
            Ok(start) => opened.parts.push((name, start, resumed)),
            Err(err) if every => opened.refused.push((name, err.status())),
            Err(err) => return Err(in_cluster(err, &name)),
        }
    }
    if opened.parts.is_empty() {
        return Err(ApiError::Forbidden(format!(
            "no cluster serves {resource} to {}",
            principal.name()
        )));
    }
    opened.namespaces.sort();
    opened.namespaces.dedup();
    Ok(opened)
}

/// The positions of a merged stream's parts, in the order named; what
/// every part's next id is made of.
#[derive(Default)]
struct Ids {
    parts: Mutex<Vec<(Arc<str>, Option<String>)>>,
    /// The keep-alive interval the stream last had a comment in (SSE).
    commented: AtomicU64,
}

impl Ids {
    /// Whether a part idle at its keep-alive tick in interval `interval`
    /// ([`crate::lifecycle::Lifecycle::intervals`]) is the first to be: the
    /// stream gets one comment per interval, from whichever part is idle,
    /// so that it gets them while any part streams (the first named may
    /// not have joined, or may have ended).
    fn comment(&self, interval: u64) -> bool {
        self.commented.swap(interval, Ordering::Relaxed) != interval
    }

    fn push(&self, cluster: Arc<str>, position: Option<String>) -> usize {
        let mut parts = self.parts.lock().unwrap_or_else(PoisonError::into_inner);
        parts.push((cluster, position));
        parts.len() - 1
    }

    /// Part `index` is now at `position` (`None`: it has none, as during
    /// a snapshot after a reset): the stream's compound id.
    fn set(&self, index: usize, position: Option<&str>) -> String {
        let mut parts = self.parts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(part) = parts.get_mut(index) {
            part.1 = position.map(str::to_string);
        }
        let mut id = String::new();
        for (cluster, position) in parts.iter() {
            if let Some(position) = position {
                if !id.is_empty() {
                    id.push(',');
                }
                id.push_str(cluster);
                id.push('=');
                id.push_str(position);
            }
        }
        id
    }
}

/// `{"cluster":NAME,"type":TYPE,FIELD:VALUE}`: a message about a cluster
/// rather than of its part's stream, on SSE and `/ws` alike (a cluster's
/// name is a DNS label: nothing to escape).
fn about_json(cluster: &str, kind: &str, field: &str, value: &Value) -> String {
    format!(r#"{{"cluster":"{cluster}","type":"{kind}","{field}":{value}}}"#)
}

/// An API server's `Warning` header as a `WARNING` message's `message`.
fn warning_text(header: &str) -> Value {
    Value::from(crate::upstream::warning::text(header))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compound_id_names_only_the_clusters_asked_for_once_each() {
        let names = ["a", "b", "c"];
        let got = parse_compound("Last-Event-ID", "b=41~0a0b0c0d, a=7", &names).unwrap();
        let got: Vec<Option<String>> = got
            .iter()
            .map(|p| p.as_ref().map(|p| p.to_string()))
            .collect();
        assert_eq!(got, [Some("7".into()), Some("41~0a0b0c0d".into()), None]);
        assert_eq!(
            parse_compound("Last-Event-ID", "", &names).unwrap(),
            [None, None, None]
        );
        for (bad, why) in [
            ("7", "not a merged stream's id"),
            ("a=7,d=1", "which this stream does not ask for"),
            ("a=7,a=8", "twice"),
            ("a=0,a=7", "twice"),
            ("a=,a=7", "twice"),
            ("a=seven", "not a resourceVersion"),
        ] {
            let err = parse_compound("Last-Event-ID", bad, &names).unwrap_err();
            assert!(err.to_string().contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn a_compound_id_lists_the_parts_with_a_position_in_the_order_named() {
        let ids = Ids::default();
        let a = ids.push("a".into(), None);
        let b = ids.push("b".into(), Some("40".into()));
        assert_eq!(ids.set(a, Some("7")), "a=7,b=40");
        assert_eq!(ids.set(b, Some("41~0a0b0c0d")), "a=7,b=41~0a0b0c0d");
        assert_eq!(ids.set(a, None), "b=41~0a0b0c0d");
    }
}
