//! LIST: pages of a consistent snapshot, and the snapshots kept for
//! `continue` tokens.

use std::sync::Arc;

use bytes::Bytes;

use super::{Filter, Store};
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
    /// a `limit=1` LIST is a cheap way to learn it.
    pub fn list(
        &mut self,
        key: &str,
        filter: &Filter,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> Result<ListPage, SimError> {
        let page = self.page(key, filter, limit, cont)?;
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
                let items: Vec<Bytes> = self
                    .resource(key)?
                    .objects
                    .values()
                    .filter(|o| filter.matches(&o.attrs))
                    .map(|o| o.encoded.clone())
                    .collect();
                let limited = limit.is_some_and(|l| l > 0 && items.len() > l);
                if !limited {
                    return Ok(ListPage {
                        def,
                        items,
                        rv: self.rv,
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
                    rv: self.rv,
                    items: items.clone(),
                });
                while self.snapshots.len() > self.limits.list_snapshots {
                    self.snapshots.pop_front();
                }
                (id, self.rv, items)
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
