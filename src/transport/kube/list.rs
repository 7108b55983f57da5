//! LIST and GET on the Kubernetes face, served from the hub's cache.
//!
//! A paginated list is consistent: its first page snapshots the matching
//! objects (sorted by namespace/name) at one resourceVersion and later
//! pages read that snapshot, as etcd's MVCC does for kube-apiserver. A
//! bounded number of snapshots is kept for a bounded time; an unknown or
//! expired `continue` token is answered with 410 Expired, on which clients
//! restart the list.
//!
//! # Continue tokens are bound to their list
//! A snapshot holds one caller's view of a resource (Secrets included,
//! where served), so a token must not open it to anyone else. A token is
//! `<128 random bits, hex>.<offset>`: unguessable, and looked up together
//! with what it was made for (the caller, the resource, the filter with
//! its authorized namespaces and selectors). Presented by another caller,
//! for another resource, namespace or selector, it is answered exactly as
//! an unknown token (410 Expired), so it reveals nothing; a token that is
//! not of this shape is a 400. The offset only moves within the caller's
//! own snapshot.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::time::SystemTime;

use actix_web::HttpResponse;
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::Value;

use super::params::Plan;
use crate::auth::Principal;
use crate::cluster::Cluster;
use crate::hub::{Filter, Hub, Joined, Obj, Shape};
use crate::status::ApiError;
use crate::table::{Clock, ListMeta, Row, partial_list, partial_object};
use crate::transport::state::AppState;
use crate::upstream::ResourceInfo;

/// Paginated list snapshots kept at once.
const MAX_PAGES: usize = 64;
/// How long a `continue` token stays valid.
const PAGE_TTL: Duration = Duration::from_secs(300);

/// What a snapshot was made for; a token is served only to the same.
pub struct PageOwner {
    pub principal: Principal,
    /// The resource's canonical name (`pods`, `deployments.apps`).
    pub resource: String,
    /// The authorized namespaces and the selectors.
    pub filter: Filter,
}

impl PageOwner {
    fn same(&self, other: &PageOwner) -> bool {
        self.resource == other.resource
            && self.filter == other.filter
            && self.principal.same_caller(&other.principal)
    }
}

struct Snapshot {
    id: [u8; 16],
    created: Instant,
    owner: PageOwner,
    rv: u64,
    items: Arc<[Arc<Obj>]>,
}

/// Snapshots behind outstanding `continue` tokens.
#[derive(Default)]
pub struct Pages {
    snapshots: Mutex<VecDeque<Snapshot>>,
}

/// A parsed `continue` token.
#[derive(Debug, PartialEq, Eq)]
pub struct Token {
    id: [u8; 16],
    offset: usize,
}

impl Token {
    /// `<32 hex digits>.<decimal offset>`; anything else is 400.
    pub fn parse(token: &str) -> Result<Token, ApiError> {
        let malformed = || {
            ApiError::BadRequest(format!(
                "invalid continue token {token:?}: not a token kubefan issued; start a new list without the continue parameter"
            ))
        };
        let (id, offset) = token.split_once('.').ok_or_else(malformed)?;
        // ASCII hex digits only, checked before slicing `id` by bytes: a
        // multi-byte character would not split at a char boundary.
        if id.len() != 32
            || !id.bytes().all(|b| b.is_ascii_hexdigit())
            || !offset.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(malformed());
        }
        let mut bytes = [0u8; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::from_str_radix(&id[2 * i..2 * i + 2], 16).map_err(|_| malformed())?;
        }
        Ok(Token {
            id: bytes,
            offset: offset.parse().map_err(|_| malformed())?,
        })
    }

    pub fn encode(&self) -> String {
        let mut s = String::with_capacity(40);
        for b in self.id {
            s.push_str(&format!("{b:02x}"));
        }
        s.push('.');
        s.push_str(&self.offset.to_string());
        s
    }
}

impl Pages {
    /// Keeps `items` for later pages; the id a token names it by.
    fn store(
        &self,
        owner: PageOwner,
        rv: u64,
        items: Arc<[Arc<Obj>]>,
    ) -> Result<[u8; 16], ApiError> {
        let mut id = [0u8; 16];
        getrandom::fill(&mut id).map_err(|e| {
            ApiError::Unavailable(format!("no randomness for a continue token: {e}"))
        })?;
        let mut snaps = self.lock();
        snaps.retain(|s| s.created.elapsed() < PAGE_TTL);
        if snaps.len() >= MAX_PAGES {
            snaps.pop_front();
        }
        snaps.push_back(Snapshot {
            id,
            created: Instant::now(),
            owner,
            rv,
            items,
        });
        Ok(id)
    }

    /// The snapshot `id` names, if it is still kept and was made for
    /// `owner`.
    fn find(&self, id: &[u8; 16], owner: &PageOwner) -> Option<(u64, Arc<[Arc<Obj>]>)> {
        self.lock()
            .iter()
            .find(|s| {
                // Constant-time on the id: how long a guess takes says
                // nothing about how close it was.
                let same_id = s.id.iter().zip(id).fold(0, |d, (a, b)| d | (a ^ b)) == 0;
                same_id && s.created.elapsed() < PAGE_TTL && s.owner.same(owner)
            })
            .map(|s| (s.rv, s.items.clone()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Snapshot>> {
        self.snapshots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

fn expired_token() -> ApiError {
    ApiError::Status(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.".into(),
    )
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

/// What a LIST or GET reads: the resource, its hub, how the answer is
/// shaped, and the probes that make it consistent.
pub struct Read<'a> {
    pub state: &'a AppState,
    pub hub: &'a Arc<Hub>,
    pub info: &'a ResourceInfo,
    pub shape: &'a Shape,
    /// The cluster read: its probes make a read consistent.
    pub cluster: &'a Cluster,
}

/// `GET .../{resource}`: a `{Kind}List`, or in `shape`, a `Table` or a
/// `PartialObjectMetadataList`.
pub async fn list(
    read: Read<'_>,
    pages: &Pages,
    owner: PageOwner,
    plan: &Plan,
) -> Result<HttpResponse, ApiError> {
    let q = &plan.query;
    let Read {
        state,
        hub,
        info,
        shape,
        cluster,
    } = read;
    let probes = cluster.probes();
    synced(state, hub).await?;
    let (id, rv, items, offset) = match &plan.continued {
        Some(token) => {
            let (rv, items) = pages.find(&token.id, &owner).ok_or_else(expired_token)?;
            if token.offset > items.len() {
                return Err(expired_token());
            }
            (Some(token.id), rv, items, token.offset)
        }
        None => {
            // The match is Exact or NotOlderThan, or unset (`KubeQuery::plan`).
            match (plan.resource_version, q.resource_version_match.as_deref()) {
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
                // `00`: the number 0, which `Exact` cannot be served at.
                (None, Some("Exact")) => {
                    return Err(ApiError::Status(
                        422,
                        "Invalid",
                        "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"".into(),
                    ));
                }
                // No resourceVersion at all: consistent (resourceVersion=0
                // serves the cache as it is, as on the API server).
                (None, _) if q.resource_version.is_none() => {
                    probes
                        .catch_up(cluster.informers().client(), info, hub)
                        .await;
                }
                (None, _) => {}
            }
            let Joined::Snapshot { objects, rv, .. } = hub.join(None, &owner.filter) else {
                unreachable!("a join without a resume position is a snapshot");
            };
            // Read under no lock, in key order: sorted as kube-apiserver
            // lists (by etcd key, namespace then name).
            let objects = objects.collect(&|o| owner.filter.matches(o));
            (None, rv, Arc::from(objects), 0)
        }
    };
    let end = match q.limit {
        Some(limit) => items.len().min(offset.saturating_add(limit)),
        None => items.len(),
    };
    let page = items.get(offset..end).unwrap_or(&[]);
    let more = end < items.len();
    let unselected = owner.filter.labels.is_empty() && owner.filter.fields.is_empty();
    let token = if more {
        let id = match id {
            Some(id) => id,
            None => pages.store(owner, rv, items.clone())?,
        };
        Some(Token { id, offset: end }.encode())
    } else {
        None
    };

    // As kube-apiserver: no count with a selector, which it cannot count
    // without reading every object ("instead of returning inaccurate count
    // for non-empty selectors, we return nil": apiserver's
    // `storage/etcd3/store.go`, `GetList`). kubefan could, but a client
    // written against the API server does not expect it.
    let remaining = (token.is_some() && unselected).then_some((items.len() - end) as u64);
    if *shape != Shape::Object {
        let rv = rv.to_string();
        let meta = ListMeta {
            resource_version: &rv,
            continue_token: token.as_deref(),
            remaining_item_count: remaining,
        };
        return Ok(json_response(converted_list(shape, &meta, page)));
    }
    let mut body =
        BytesMut::with_capacity(page.iter().map(|o| o.json_len() + 1).sum::<usize>() + 256);
    body.put_slice(
        format!(
            r#"{{"kind":"{}List","apiVersion":"{}","metadata":{{"resourceVersion":"{rv}""#,
            info.api.kind, info.api.api_version
        )
        .as_bytes(),
    );
    if let Some(token) = &token {
        body.put_slice(format!(r#","continue":"{token}""#).as_bytes());
    }
    if let Some(remaining) = remaining {
        body.put_slice(format!(r#","remainingItemCount":{remaining}"#).as_bytes());
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

/// A list page in a converted shape (kube-apiserver's `transformObject`
/// for `as=Table` and `as=PartialObjectMetadataList`).
fn converted_list(shape: &Shape, meta: &ListMeta, page: &[Arc<Obj>]) -> Bytes {
    let values: Vec<Value> = page
        .iter()
        .map(|o| serde_json::from_slice(&o.json()).unwrap_or(Value::Null))
        .collect();
    match shape {
        Shape::Table(view) => {
            let clock = Clock::new(SystemTime::now());
            let rows: Vec<Row> = values
                .iter()
                .zip(page)
                .map(|(value, obj)| view.row(value, &obj.json(), &clock))
                .collect();
            view.list(meta, &rows)
        }
        Shape::PartialMetadata(version) => partial_list(*version, meta, &values),
        Shape::Object => unreachable!("converted_list is called for converted shapes"),
    }
}

fn json_response(body: Bytes) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(body)
}

/// `GET .../{resource}/{name}`: one object, or in `shape`, a one-row
/// `Table` or its `PartialObjectMetadata`.
pub async fn get(
    read: Read<'_>,
    namespace: Option<&str>,
    name: &str,
    consistent: bool,
) -> Result<HttpResponse, ApiError> {
    let Read {
        state,
        hub,
        info,
        shape,
        cluster,
    } = read;
    let probes = cluster.probes();
    synced(state, hub).await?;
    if consistent {
        probes
            .catch_up(cluster.informers().client(), info, hub)
            .await;
    }
    let Some(obj) = hub.get(namespace, name) else {
        return Err(ApiError::NotFound(format!(
            "{} {name:?} not found",
            info.api.plural
        )));
    };
    let json = obj.json();
    let body = match shape {
        Shape::Object => json.clone(),
        Shape::Table(view) => {
            let value = serde_json::from_slice(&json).unwrap_or(Value::Null);
            let row = view.row(&value, &json, &Clock::new(SystemTime::now()));
            view.single(&row, true)
        }
        Shape::PartialMetadata(version) => partial_object(
            *version,
            &serde_json::from_slice(&json).unwrap_or(Value::Null),
        ),
    };
    Ok(json_response(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Access, Grant};

    fn owner(principal: &Principal, resource: &str, ns: &[&str]) -> PageOwner {
        PageOwner {
            principal: principal.clone(),
            resource: resource.into(),
            filter: Filter {
                namespaces: ns.iter().map(|n| n.to_string()).collect(),
                ..Filter::default()
            },
        }
    }

    #[test]
    fn tokens_round_trip_and_refuse_other_shapes() {
        let t = Token {
            id: [0xab; 16],
            offset: 42,
        };
        assert_eq!(Token::parse(&t.encode()).unwrap(), t);
        for bad in [
            "0:1",
            "",
            "abc",
            &format!("{}.x", "ab".repeat(16)),
            &format!("{}.1", "zz".repeat(16)),
            // Hex digits that from_str_radix would take with a sign.
            &format!("+f{}.1", "ab".repeat(15)),
        ] {
            assert!(
                matches!(Token::parse(bad), Err(ApiError::BadRequest(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_token_with_multibyte_characters_is_refused_not_a_panic() {
        // 32 bytes, but "€" is three: slicing the id two bytes at a time
        // once cut it inside a character.
        for bad in [
            format!("€{}.0", "a".repeat(29)),
            format!("a€{}.0", "a".repeat(28)),
            format!("{}.٣", "ab".repeat(16)),
        ] {
            assert!(
                matches!(Token::parse(&bad), Err(ApiError::BadRequest(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_snapshot_is_found_only_by_its_owner() {
        let pages = Pages::default();
        let alice = Principal::new(
            "alice".into(),
            None,
            Access::Claims {
                namespaces: Grant::Only(vec!["a".into()]),
                resources: Grant::All,
            },
        );
        let bob = Principal::new("bob".into(), None, alice.access().clone());
        let id = pages
            .store(owner(&alice, "pods", &["a"]), 7, Arc::from(Vec::new()))
            .unwrap();
        assert!(pages.find(&id, &owner(&alice, "pods", &["a"])).is_some());
        assert!(pages.find(&id, &owner(&bob, "pods", &["a"])).is_none());
        assert!(pages.find(&id, &owner(&alice, "nodes", &["a"])).is_none());
        assert!(pages.find(&id, &owner(&alice, "pods", &["b"])).is_none());
        let mut other = id;
        other[0] ^= 1;
        assert!(pages.find(&other, &owner(&alice, "pods", &["a"])).is_none());
        let second = pages
            .store(owner(&alice, "pods", &["a"]), 7, Arc::from(Vec::new()))
            .unwrap();
        assert_ne!(id, second, "ids are random, not counted");
    }
}
