//! The simulator's state: objects, the global resourceVersion, per-resource
//! event history, open watchers, list snapshots for `continue`, and counters.
//!
//! Invariants, all kept under the one `Mutex<Store>` that every write takes:
//! - `rv` strictly increases; every write takes the next value and stamps it
//!   on the object and its event.
//! - A resource's `history` holds every event with rv > `floor`, oldest first;
//!   a watch from rv N >= `floor` can be served from it exactly, a watch from
//!   N < `floor` is answered with 410 Expired. It is bounded by events and by
//!   bytes (`SimConfig::history`, `SimConfig::history_bytes`); dropping its
//!   oldest events raises `floor`.
//! - A watcher is registered under the same lock that appends events, after
//!   its replay has been collected: no gap, no duplicate.
//! - Writers never wait on a watcher: events are `try_send` into a bounded
//!   queue, and a watcher whose queue is full is dropped and marked
//!   overflowed (its stream then ends with 410).
//! - Objects and events are kept as their JSON encoding plus their
//!   selectable attributes (`attrs.rs`), never as parsed values; what a
//!   caller needs as a `Value` is parsed from the bytes on demand.
//!
//! Object writes (validation, server-set metadata) live in `write.rs`, HTTP
//! parsing in `http.rs`, stream timing in `watch.rs`.

mod write;

pub(crate) use write::now_rfc3339;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

use super::SimError;
use super::attrs::Attrs;
use super::rbac;
use super::rbac::authorizer::Policy;
use super::resource::ResourceDef;
use super::watch::{bookmark_line, event_line};
use crate::selector::{FieldSelector, LabelSelector};

/// Request counters for one resource.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ResourceStats {
    /// Watch streams open right now.
    pub open_watches: u64,
    /// Watch requests received, including failed ones.
    pub watch_requests: u64,
    /// List requests received (each page counts), including failed ones.
    pub list_requests: u64,
}

/// What one resource holds in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StorageStats {
    pub objects: u64,
    /// JSON bytes of the current objects.
    pub object_bytes: u64,
    /// Events kept for watches from an older resourceVersion.
    pub history_events: u64,
    /// Bytes those events hold (their JSON and selectable attributes).
    pub history_bytes: u64,
    /// Watches from a resourceVersion below this get 410 Expired.
    pub history_floor: u64,
}

/// What the LISTs of one resource asked for and got; with
/// `ResourceStats::list_requests`, enough to prove a client's
/// resourceVersion probes (`limit=1`) are few and small.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ListStats {
    /// LIST pages answered that asked for a `limit`.
    pub limited: u64,
    /// Items all answered LIST pages carried.
    pub items: u64,
}

/// Counters for every resource, keyed like the Rust API ("pods", "deployments.apps").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub resource_version: u64,
    pub resources: BTreeMap<String, ResourceStats>,
    pub lists: BTreeMap<String, ListStats>,
    pub storage: BTreeMap<String, StorageStats>,
    /// The bounds of each resource's history (`SimConfig`).
    pub history_limit_events: u64,
    pub history_limit_bytes: u64,
}

impl Stats {
    /// Counters of one resource; zeros for an unknown key.
    pub fn resource(&self, key: &str) -> ResourceStats {
        self.resources.get(key).copied().unwrap_or_default()
    }

    /// List counters of one resource; zeros for an unknown key.
    pub fn lists(&self, key: &str) -> ListStats {
        self.lists.get(key).copied().unwrap_or_default()
    }

    /// What one resource holds; zeros for an unknown key.
    pub fn storage(&self, key: &str) -> StorageStats {
        self.storage.get(key).copied().unwrap_or_default()
    }

    /// Bytes held by every resource's objects and history.
    pub fn bytes(&self) -> u64 {
        self.storage
            .values()
            .map(|s| s.object_bytes + s.history_bytes)
            .sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    Added,
    Modified,
    Deleted,
}

/// One stored object version.
#[derive(Clone)]
pub(crate) struct Stored {
    pub encoded: Bytes,
    pub attrs: Arc<Attrs>,
}

impl Stored {
    pub fn value(&self) -> Result<Value, SimError> {
        serde_json::from_slice(&self.encoded)
            .map_err(|e| SimError::Internal(format!("stored object does not parse: {e}")))
    }
}

struct Event {
    rv: u64,
    kind: EventKind,
    /// The object encoded once for all watchers.
    encoded: Bytes,
    attrs: Arc<Attrs>,
    /// The object's attributes before a modification, to turn selector
    /// transitions into ADDED/DELETED like the real watch cache.
    prev: Option<Arc<Attrs>>,
}

impl Event {
    /// What the event holds, for the history's byte bound.
    fn cost(&self) -> usize {
        self.encoded.len() + self.attrs.size()
    }
}

/// What a list or watch selects within one resource.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub ns: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    fn matches(&self, attrs: &Attrs) -> bool {
        self.ns.as_deref().is_none_or(|ns| *attrs.ns == *ns)
            && self.labels.matches(attrs)
            && self.fields.matches(attrs)
    }

    /// The event type this filter's watcher sees for `ev`, if any.
    fn view(&self, ev: &Event) -> Option<&'static str> {
        let now = self.matches(&ev.attrs);
        let before = ev.prev.as_deref().is_some_and(|p| self.matches(p));
        match (ev.kind, before, now) {
            (EventKind::Added, _, true) => Some("ADDED"),
            (EventKind::Deleted, _, true) => Some("DELETED"),
            (EventKind::Modified, true, true) => Some("MODIFIED"),
            (EventKind::Modified, false, true) => Some("ADDED"),
            (EventKind::Modified, true, false) => Some("DELETED"),
            _ => None,
        }
    }
}

struct Watcher {
    id: u64,
    filter: Filter,
    tx: mpsc::Sender<Bytes>,
    overflowed: Arc<AtomicBool>,
}

struct Resource {
    def: Arc<ResourceDef>,
    objects: BTreeMap<(String, String), Stored>,
    object_bytes: usize,
    history: VecDeque<Event>,
    history_bytes: usize,
    floor: u64,
    watchers: Vec<Watcher>,
    stats: ResourceStats,
    lists: ListStats,
    /// Watcher ids below this belong to an earlier registration of the key.
    first_id: u64,
}

impl Resource {
    fn new(def: Arc<ResourceDef>, first_id: u64) -> Resource {
        Resource {
            def,
            objects: BTreeMap::new(),
            object_bytes: 0,
            history: VecDeque::new(),
            history_bytes: 0,
            floor: 0,
            watchers: Vec::new(),
            stats: ResourceStats::default(),
            lists: ListStats::default(),
            first_id,
        }
    }

    /// Drops the oldest events until both bounds hold.
    fn trim_history(&mut self, limits: &Limits) {
        while self.history.len() > limits.history || self.history_bytes > limits.history_bytes {
            let Some(old) = self.history.pop_front() else {
                break;
            };
            self.history_bytes -= old.cost();
            self.floor = self.floor.max(old.rv);
        }
    }

    fn storage(&self) -> StorageStats {
        StorageStats {
            objects: self.objects.len() as u64,
            object_bytes: self.object_bytes as u64,
            history_events: self.history.len() as u64,
            history_bytes: self.history_bytes as u64,
            history_floor: self.floor,
        }
    }
}

struct Snapshot {
    id: u64,
    key: String,
    rv: u64,
    items: Arc<Vec<Bytes>>,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchFrom {
    /// Synthetic ADDED for every current object; with `initial_events_end`,
    /// then the annotated BOOKMARK of `sendInitialEvents`.
    Now { initial_events_end: bool },
    /// Every event after this rv.
    After(u64),
}

/// A registered watcher's first lines and its live queue.
pub(crate) struct WatchStart {
    pub id: u64,
    pub def: Arc<ResourceDef>,
    pub initial: VecDeque<Bytes>,
    pub rx: mpsc::Receiver<Bytes>,
    pub overflowed: Arc<AtomicBool>,
}

/// One page of a list: the items as encoded JSON.
pub(crate) struct ListPage {
    pub def: Arc<ResourceDef>,
    pub items: Vec<Bytes>,
    pub rv: u64,
    pub cont: Option<String>,
    pub remaining: Option<usize>,
}

/// An object as a write left it: parsed for the Rust API, encoded for HTTP.
pub(crate) struct Written {
    pub object: Value,
    pub encoded: Bytes,
}

/// Bounds of the store, from `SimConfig`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub history: usize,
    pub history_bytes: usize,
    pub watch_queue: usize,
    pub list_snapshots: usize,
}

pub(crate) struct Store {
    rv: u64,
    resources: BTreeMap<String, Resource>,
    snapshots: VecDeque<Snapshot>,
    next_id: u64,
    limits: Limits,
    /// Set while controllers run after a write, so their own writes do not
    /// start them again.
    reacting: bool,
    /// The RBAC objects decoded for the authorizer; `None` after any of
    /// them changed.
    policy: Option<Arc<Policy>>,
    /// Resources served because a CustomResourceDefinition object says so.
    crd_keys: std::collections::BTreeSet<String>,
}

impl Store {
    pub fn new(limits: Limits) -> Self {
        Store {
            rv: 1,
            resources: BTreeMap::new(),
            snapshots: VecDeque::new(),
            next_id: 1,
            limits,
            reacting: false,
            policy: None,
            crd_keys: Default::default(),
        }
    }

    /// Whether `key` is served because of a CustomResourceDefinition object.
    pub fn is_crd_key(&self, key: &str) -> bool {
        self.crd_keys.contains(key)
    }

    /// The RBAC objects as the authorizer reads them, decoded again only
    /// after one of them changed.
    pub fn policy(&mut self) -> Arc<Policy> {
        if let Some(p) = &self.policy {
            return p.clone();
        }
        let p = Arc::new(Policy::from_store(self));
        self.policy = Some(p.clone());
        p
    }

    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// Adds a resource type, or replaces the definition of one with the same key
    /// (its objects are kept, their attributes taken again for the new
    /// definition's selectable fields).
    pub fn register(&mut self, def: ResourceDef) {
        let def = Arc::new(def);
        match self.resources.get_mut(&def.key()) {
            Some(r) => {
                let refresh = r.def.selectable_fields != def.selectable_fields;
                r.def = def;
                if refresh {
                    let def = r.def.clone();
                    for stored in r.objects.values_mut() {
                        if let Ok(v) = stored.value() {
                            stored.attrs = Arc::new(Attrs::of(&def, &v));
                        }
                    }
                }
            }
            None => {
                self.resources
                    .insert(def.key(), Resource::new(def, self.next_id));
            }
        }
    }

    /// Removes a resource type with its objects, history, counters and list
    /// snapshots, as deleting a CRD does. Its watchers are dropped, so their
    /// streams end. False if no such resource was registered.
    pub fn unregister(&mut self, key: &str) -> bool {
        self.snapshots.retain(|s| s.key != key);
        if rbac::is_rbac(key) {
            self.policy = None;
        }
        self.resources.remove(key).is_some()
    }

    pub fn defs(&self) -> Vec<&ResourceDef> {
        self.resources.values().map(|r| &*r.def).collect()
    }

    /// The definition served at group/version/plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.resources
            .values()
            .find(|r| r.def.group == group && r.def.version == version && r.def.plural == plural)
            .map(|r| r.def.clone())
    }

    fn resource(&self, key: &str) -> Result<&Resource, SimError> {
        self.resources
            .get(key)
            .ok_or_else(|| SimError::UnknownResource(key.to_owned()))
    }

    fn resource_mut(&mut self, key: &str) -> Result<&mut Resource, SimError> {
        self.resources
            .get_mut(key)
            .ok_or_else(|| SimError::UnknownResource(key.to_owned()))
    }

    pub fn def(&self, key: &str) -> Result<Arc<ResourceDef>, SimError> {
        Ok(self.resource(key)?.def.clone())
    }

    pub fn count_list(&mut self, key: &str) {
        if let Some(r) = self.resources.get_mut(key) {
            r.stats.list_requests += 1;
        }
    }

    pub fn count_watch(&mut self, key: &str) {
        if let Some(r) = self.resources.get_mut(key) {
            r.stats.watch_requests += 1;
        }
    }

    pub fn stats(&self) -> Stats {
        Stats {
            resource_version: self.rv,
            resources: self
                .resources
                .iter()
                .map(|(k, r)| (k.clone(), r.stats))
                .collect(),
            lists: self
                .resources
                .iter()
                .map(|(k, r)| (k.clone(), r.lists))
                .collect(),
            storage: self
                .resources
                .iter()
                .map(|(k, r)| (k.clone(), r.storage()))
                .collect(),
            history_limit_events: self.limits.history as u64,
            history_limit_bytes: self.limits.history_bytes as u64,
        }
    }

    /// The map key of an object: namespace ("" when cluster-scoped) and name.
    fn object_key(def: &ResourceDef, ns: Option<&str>, name: &str) -> (String, String) {
        let ns = if def.namespaced {
            ns.unwrap_or("default")
        } else {
            ""
        };
        (ns.to_owned(), name.to_owned())
    }

    /// The stored object `ns`/`name` of resource `key`.
    pub fn get(&self, key: &str, ns: Option<&str>, name: &str) -> Result<&Stored, SimError> {
        let r = self.resource(key)?;
        r.objects
            .get(&Self::object_key(&r.def, ns, name))
            .ok_or_else(|| SimError::NotFound {
                resource: r.def.key(),
                name: name.to_owned(),
            })
    }

    /// Stamps the next rv on `obj`, stores (or removes) it, records the event
    /// and hands it to every matching watcher without waiting.
    fn commit(
        &mut self,
        key: &str,
        kind: EventKind,
        mut obj: Value,
        prev: Option<Arc<Attrs>>,
    ) -> Result<Written, SimError> {
        let limits = self.limits;
        if rbac::is_rbac(key) {
            self.policy = None;
        }
        let r = self
            .resources
            .get_mut(key)
            .ok_or_else(|| SimError::UnknownResource(key.to_owned()))?;
        self.rv += 1;
        let rv = self.rv;
        write::set_meta(&mut obj, "resourceVersion", Value::String(rv.to_string()));
        // Serialising a `Value` cannot fail: its map keys are strings.
        let encoded = Bytes::from(serde_json::to_vec(&obj).unwrap_or_default());
        let attrs = Arc::new(Attrs::of(&r.def, &obj));
        let okey = (attrs.ns.to_string(), attrs.name.to_string());
        let old = if kind == EventKind::Deleted {
            r.objects.remove(&okey)
        } else {
            let stored = Stored {
                encoded: encoded.clone(),
                attrs: attrs.clone(),
            };
            r.object_bytes += encoded.len();
            r.objects.insert(okey, stored)
        };
        if let Some(old) = old {
            r.object_bytes -= old.encoded.len();
        }
        let event = Event {
            rv,
            kind,
            encoded: encoded.clone(),
            attrs,
            prev,
        };
        // One line per event type, built for the first watcher that needs it.
        let mut lines: [Option<Bytes>; 3] = Default::default();
        r.watchers.retain(|w| {
            let Some(ty) = w.filter.view(&event) else {
                return true;
            };
            let slot = match ty {
                "ADDED" => 0,
                "MODIFIED" => 1,
                _ => 2,
            };
            let line = lines[slot]
                .get_or_insert_with(|| event_line(ty, &event.encoded))
                .clone();
            match w.tx.try_send(line) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    w.overflowed.store(true, Ordering::SeqCst);
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        r.history_bytes += event.cost();
        r.history.push_back(event);
        r.trim_history(&limits);
        Ok(Written {
            object: obj,
            encoded,
        })
    }

    /// Drops every resource's event history and every list snapshot, like an
    /// etcd compaction at the current revision.
    pub fn compact(&mut self) {
        let rv = self.rv;
        for r in self.resources.values_mut() {
            r.history.clear();
            r.history_bytes = 0;
            r.floor = rv;
        }
        self.snapshots.clear();
    }

    /// Every object of a resource, sorted by namespace/name.
    pub fn objects(&self, key: &str) -> Result<Vec<Stored>, SimError> {
        Ok(self.resource(key)?.objects.values().cloned().collect())
    }

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

    /// Registers a watcher and collects what it must replay first.
    /// `Err(Expired)` when `from` is older than the retained history.
    pub fn watch(
        &mut self,
        key: &str,
        filter: Filter,
        from: WatchFrom,
    ) -> Result<WatchStart, SimError> {
        let rv = self.rv;
        let id = self.next_id;
        self.next_id += 1;
        let cap = self.limits.watch_queue.max(1);
        let r = self.resource_mut(key)?;
        let mut initial = VecDeque::new();
        match from {
            WatchFrom::After(n) if n < r.floor => {
                return Err(SimError::Expired(format!(
                    "too old resource version: {n} ({})",
                    r.floor
                )));
            }
            WatchFrom::After(n) => {
                for ev in r.history.iter().filter(|e| e.rv > n) {
                    if let Some(ty) = filter.view(ev) {
                        initial.push_back(event_line(ty, &ev.encoded));
                    }
                }
            }
            WatchFrom::Now { initial_events_end } => {
                for obj in r.objects.values().filter(|o| filter.matches(&o.attrs)) {
                    initial.push_back(event_line("ADDED", &obj.encoded));
                }
                if initial_events_end {
                    initial.push_back(bookmark_line(&r.def, rv, true));
                }
            }
        }
        let (tx, rx) = mpsc::channel(cap);
        let overflowed = Arc::new(AtomicBool::new(false));
        r.watchers.push(Watcher {
            id,
            filter,
            tx,
            overflowed: overflowed.clone(),
        });
        r.stats.open_watches += 1;
        Ok(WatchStart {
            id,
            def: r.def.clone(),
            initial,
            rx,
            overflowed,
        })
    }

    /// Forgets a watcher whose stream has ended.
    pub fn unwatch(&mut self, key: &str, id: u64) {
        if let Some(r) = self.resources.get_mut(key) {
            r.watchers.retain(|w| w.id != id);
            // A watcher of a resource unregistered and registered again
            // meanwhile was never counted here.
            if id >= r.first_id {
                r.stats.open_watches = r.stats.open_watches.saturating_sub(1);
            }
        }
    }
}
