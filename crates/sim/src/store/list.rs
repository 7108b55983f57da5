//! LIST: pages of a consistent snapshot, and the snapshots kept for
//! `continue` tokens. A snapshot is of the current state or, for
//! `resourceVersionMatch=Exact`, of a past one: the current objects with
//! the retained history undone down to that resourceVersion, which is what
//! etcd's MVCC read at a revision gives kube-apiserver until compaction.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use super::{Filter, Resource, Store, Stored};
use crate::SimError;
use crate::resource::ResourceDef;

/// A LIST's matching objects at one resourceVersion, kept for the pages
/// its `continue` tokens ask for.
pub(crate) struct Snapshot {
    id: u64,
    pub key: String,
    rv: u64,
    items: Arc<Vec<Bytes>>,
}

/// Which state a LIST without `continue` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListAt {
    /// The current state (`resourceVersion` unset or "0").
    Latest,
    /// The current state, which must be at least this resourceVersion
    /// (a `resourceVersion` without `resourceVersionMatch=Exact`).
    NotOlderThan(u64),
    /// The state at exactly this resourceVersion
    /// (`resourceVersionMatch=Exact`).
    Exact(u64),
}

/// One page of a list: the items as encoded JSON.
pub(crate) struct ListPage {
    pub def: Arc<ResourceDef>,
    pub items: Vec<Bytes>,
    pub rv: u64,
    pub cont: Option<String>,
    pub remaining: Option<usize>,
}

impl Store {
    /// A list page. Without `cont`, takes a snapshot of every matching object
    /// (sorted by namespace/name) and, if it exceeds `limit`, keeps it for the
    /// following pages. Every page, the first included, carries the
    /// resourceVersion the snapshot was taken at: without `cont`, the
    /// store's current one (the latest write to any resource), as
    /// kube-apiserver's consistent LIST gives the current etcd revision, so
    /// a `limit=1` LIST is a cheap way to learn it. With
    /// [`ListAt::Exact`], the state and resourceVersion asked for: 410
    /// Expired below the retained history, as etcd answers a compacted
    /// revision, and 504 for a resourceVersion the store has not reached.
    pub fn list(
        &mut self,
        key: &str,
        filter: &Filter,
        limit: Option<usize>,
        cont: Option<&str>,
        at: ListAt,
    ) -> Result<ListPage, SimError> {
        let page = self.page(key, filter, limit, cont, at)?;
        if let Some(r) = self.resources.get_mut(key) {
            r.lists.limited += u64::from(limit.is_some_and(|l| l > 0));
            r.lists.probes += u64::from(limit == Some(1));
            r.lists.items += page.items.len() as u64;
        }
        Ok(page)
    }

    fn page(
        &mut self,
        key: &str,
        filter: &Filter,
        limit: Option<usize>,
        cont: Option<&str>,
        at: ListAt,
    ) -> Result<ListPage, SimError> {
        let def = self.def(key)?;
        let (snapshot, offset) = match cont {
            Some(token) => {
                let (id, offset) = token
                    .split_once('.')
                    .and_then(|(id, off)| {
                        Some((id.parse::<u64>().ok()?, off.parse::<usize>().ok()?))
                    })
                    .ok_or_else(|| {
                        SimError::BadRequest(format!("invalid continue token {token:?}"))
                    })?;
                let snap = self
                    .snapshots
                    .iter()
                    .find(|s| s.id == id)
                    .ok_or_else(|| {
                        SimError::Expired(
                            "The provided continue parameter is too old to display a consistent list result. \
                             You can start a new list without the continue parameter."
                                .into(),
                        )
                    })?;
                if snap.key != key {
                    return Err(SimError::BadRequest(
                        "continue token belongs to another resource".into(),
                    ));
                }
                (Some((snap.id, snap.rv, snap.items.clone())), offset)
            }
            None => (None, 0),
        };
        let (id, rv, items) = match snapshot {
            Some(s) => s,
            None => {
                let r = self.resource(key)?;
                let (items, rv) = match at {
                    ListAt::NotOlderThan(rv) if rv > self.rv => {
                        return Err(too_large(rv, self.rv));
                    }
                    ListAt::Latest | ListAt::NotOlderThan(_) => {
                        let items = r
                            .objects
                            .values()
                            .filter(|o| filter.matches(&o.attrs))
                            .map(|o| o.encoded.clone())
                            .collect();
                        (items, self.rv)
                    }
                    ListAt::Exact(rv) => (exact(r, filter, rv, self.rv)?, rv),
                };
                let limited = limit.is_some_and(|l| l > 0 && items.len() > l);
                if !limited {
                    return Ok(ListPage {
                        def,
                        items,
                        rv,
                        cont: None,
                        remaining: None,
                    });
                }
                let id = self.next_id;
                self.next_id += 1;
                let items = Arc::new(items);
                self.snapshots.push_back(Snapshot {
                    id,
                    key: key.to_owned(),
                    rv,
                    items: items.clone(),
                });
                while self.snapshots.len() > self.limits.list_snapshots {
                    self.snapshots.pop_front();
                }
                (id, rv, items)
            }
        };
        let start = offset.min(items.len());
        let end = match limit {
            Some(l) if l > 0 => (start + l).min(items.len()),
            _ => items.len(),
        };
        let more = end < items.len();
        Ok(ListPage {
            def,
            items: items[start..end].to_vec(),
            rv,
            cont: more.then(|| format!("{id}.{end}")),
            remaining: more.then(|| items.len() - end),
        })
    }
}

/// The matching objects of `r` as they were at resourceVersion `at`
/// (sorted by namespace/name): every retained event after `at` undone,
/// newest first, so that each object ends at the version the oldest of
/// them replaced. `current` is the store's resourceVersion.
fn exact(r: &Resource, filter: &Filter, at: u64, current: u64) -> Result<Vec<Bytes>, SimError> {
    if at > current {
        return Err(too_large(at, current));
    }
    // The history holds every event after `floor`; older ones are gone, as
    // etcd's revisions before a compaction are.
    if at < r.floor {
        return Err(SimError::Expired(format!(
            "The resourceVersion for the provided list is too old: {at} (oldest {})",
            r.floor
        )));
    }
    let mut undone: BTreeMap<(&str, &str), Option<&Stored>> = BTreeMap::new();
    for ev in r.history.iter().rev().take_while(|e| e.rv > at) {
        undone.insert((&ev.attrs.ns, &ev.attrs.name), ev.old.as_ref());
    }
    let mut state: BTreeMap<(&str, &str), &Stored> = r
        .objects
        .iter()
        .map(|((ns, name), o)| ((ns.as_str(), name.as_str()), o))
        .collect();
    for (key, was) in undone {
        match was {
            Some(o) => state.insert(key, o),
            None => state.remove(&key),
        };
    }
    Ok(state
        .into_values()
        .filter(|o| filter.matches(&o.attrs))
        .map(|o| o.encoded.clone())
        .collect())
}

/// kube-apiserver's answer to a read at a resourceVersion it has not
/// reached, after waiting for it (the sim's store is never behind itself,
/// so it does not wait).
fn too_large(rv: u64, current: u64) -> SimError {
    SimError::Timeout(format!(
        "Too large resource version: {rv}, current: {current}"
    ))
}
