//! LIST and GET on the Kubernetes face, served from the hub's cache.
//!
//! A paginated list is consistent: its first page snapshots the matching
//! objects (sorted by namespace/name) at one resourceVersion and later
//! pages read that snapshot, as etcd's MVCC does for kube-apiserver. A
//! bounded number of snapshots is kept for a bounded time; an unknown or
//! expired `continue` token is answered with 410 Expired, on which clients
//! restart the list.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use actix_web::HttpResponse;
use bytes::{BufMut, BytesMut};

use super::KubeQuery;
use crate::app::AppState;
use crate::hub::{Filter, Hub, Joined, Obj};
use crate::transport::error::ApiError;
use crate::upstream::ResourceInfo;

/// Paginated list snapshots kept at once.
const MAX_PAGES: usize = 64;
/// How long a `continue` token stays valid.
const PAGE_TTL: Duration = Duration::from_secs(300);

struct Snapshot {
    id: u64,
    created: Instant,
    rv: u64,
    items: Arc<[Arc<Obj>]>,
}

/// Snapshots behind outstanding `continue` tokens.
#[derive(Default)]
pub struct Pages {
    snapshots: Mutex<VecDeque<Snapshot>>,
    next_id: AtomicU64,
}

impl Pages {
    fn store(&self, rv: u64, items: Arc<[Arc<Obj>]>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut snaps = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        snaps.retain(|s| s.created.elapsed() < PAGE_TTL);
        if snaps.len() >= MAX_PAGES {
            snaps.pop_front();
        }
        snaps.push_back(Snapshot {
            id,
            created: Instant::now(),
            rv,
            items,
        });
        id
    }

    fn find(&self, id: u64) -> Option<(u64, Arc<[Arc<Obj>]>)> {
        let snaps = self
            .snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        snaps
            .iter()
            .find(|s| s.id == id && s.created.elapsed() < PAGE_TTL)
            .map(|s| (s.rv, s.items.clone()))
    }
}

fn expired_token() -> ApiError {
    ApiError::Status(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
    )
}

fn parse_token(token: &str) -> Option<(u64, usize)> {
    let (id, offset) = token.split_once(':')?;
    Some((id.parse().ok()?, offset.parse().ok()?))
}

async fn synced(state: &AppState, hub: &Hub) -> Result<(), ApiError> {
    if !hub.wait_synced(state.stream.sync_timeout).await {
        return Err(ApiError::Unavailable(format!(
            "resource {} is not synced yet; retry shortly",
            hub.name()
        )));
    }
    if let Some(reason) = hub.closed() {
        return Err(ApiError::Unavailable(format!(
            "resource {} is no longer served: {reason}",
            hub.name()
        )));
    }
    Ok(())
}

/// `GET .../{resource}`: a `{Kind}List`.
pub async fn list(
    state: &AppState,
    hub: &Arc<Hub>,
    filter: Filter,
    q: &KubeQuery,
    info: &ResourceInfo,
) -> Result<HttpResponse, ApiError> {
    synced(state, hub).await?;
    let (rv, items, offset) = match &q.continue_token {
        Some(token) => {
            let (id, offset) = parse_token(token).ok_or_else(expired_token)?;
            let (rv, items) = state.kube_pages.find(id).ok_or_else(expired_token)?;
            (rv, items, offset)
        }
        None => {
            match (
                q.resource_version_number()?,
                q.resource_version_match.as_deref(),
            ) {
                (Some(r), Some("Exact")) if r != hub.resource_version() => {
                    return Err(ApiError::Status(
                        410,
                        "Expired",
                        format!(
                            "too old resource version: {r} ({}): kubefan serves lists only at its current resourceVersion",
                            hub.resource_version()
                        ),
                    ));
                }
                (Some(r), _) => super::reached(state, hub, r).await?,
                (None, Some("Exact")) => {
                    return Err(ApiError::Status(
                        422,
                        "Invalid",
                        "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"".into(),
                    ));
                }
                (None, _) => {}
            }
            let Joined::Snapshot {
                mut objects, rv, ..
            } = hub.join(None, &|o| filter.matches(o))
            else {
                unreachable!("a join without a resume position is a snapshot");
            };
            objects.sort_by_cached_key(|o| o.key());
            (rv, Arc::from(objects), 0)
        }
    };
    let end = match q.limit {
        Some(limit) => items.len().min(offset.saturating_add(limit)),
        None => items.len(),
    };
    let page = items.get(offset..end).unwrap_or(&[]);
    let more = end < items.len();
    let token = more.then(|| {
        let id = match &q.continue_token {
            Some(t) => parse_token(t).map(|(id, _)| id).unwrap_or_default(),
            None => state.kube_pages.store(rv, items.clone()),
        };
        format!("{id}:{end}")
    });

    let mut body =
        BytesMut::with_capacity(page.iter().map(|o| o.json().len() + 1).sum::<usize>() + 256);
    body.put_slice(
        format!(
            r#"{{"kind":"{}List","apiVersion":"{}","metadata":{{"resourceVersion":"{rv}""#,
            info.api.kind, info.api.api_version
        )
        .as_bytes(),
    );
    if let Some(token) = &token {
        body.put_slice(
            format!(
                r#","continue":"{token}","remainingItemCount":{}"#,
                items.len() - end
            )
            .as_bytes(),
        );
    }
    body.put_slice(br#"},"items":["#);
    for (i, obj) in page.iter().enumerate() {
        if i > 0 {
            body.put_u8(b',');
        }
        body.put_slice(&obj.json());
    }
    body.put_slice(b"]}");
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(body.freeze()))
}

/// `GET .../{resource}/{name}`: one object.
pub async fn get(
    state: &AppState,
    hub: &Arc<Hub>,
    namespace: Option<&str>,
    name: &str,
    info: &ResourceInfo,
) -> Result<HttpResponse, ApiError> {
    synced(state, hub).await?;
    match hub.get(namespace, name) {
        Some(obj) => Ok(HttpResponse::Ok()
            .content_type("application/json")
            .body(obj.json())),
        None => Err(ApiError::NotFound(format!(
            "{} {name:?} not found",
            info.api.plural
        ))),
    }
}
