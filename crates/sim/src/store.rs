//! The simulator's state: objects, the global resourceVersion, per-resource
//! event history, open watchers, list snapshots for `continue`, and counters.
//!
//! Invariants, all kept under the one `Mutex<Store>` that every write takes:
//! - `rv` strictly increases; every write takes the next value and stamps it
//!   on the object and its event.
//! - A resource's `history` holds every event with rv > `floor`, oldest first;
//!   a watch from rv N >= `floor` can be served from it exactly, a watch from
//!   N < `floor` is answered with 410 Expired.
//! - A watcher is registered under the same lock that appends events, after
//!   its replay has been collected: no gap, no duplicate.
//! - Writers never wait on a watcher: events are `try_send` into a bounded
//!   queue, and a watcher whose queue is full is dropped and marked
//!   overflowed (its stream then ends with 410).
//!
//! HTTP parsing lives in `http.rs`, stream timing in `watch.rs`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use rand::RngExt;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::SimError;
use super::patch::merge_patch;
use super::resource::ResourceDef;
use super::watch::{bookmark_line, event_line};
use crate::selector::{FieldSelector, LabelSelector};

/// Counters for one resource.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ResourceStats {
    /// Watch streams open right now.
    pub open_watches: u64,
    /// Watch requests received, including failed ones.
    pub watch_requests: u64,
    /// List requests received (each page counts), including failed ones.
    pub list_requests: u64,
}

/// Counters for every resource, keyed like the Rust API ("pods", "deployments.apps").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub resource_version: u64,
    pub resources: BTreeMap<String, ResourceStats>,
}

impl Stats {
    /// Counters of one resource; zeros for an unknown key.
    pub fn resource(&self, key: &str) -> ResourceStats {
        self.resources.get(key).copied().unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    Added,
    Modified,
    Deleted,
}

struct Event {
    rv: u64,
    kind: EventKind,
    object: Arc<Value>,
    /// The object before a modification, to turn selector transitions into
    /// ADDED/DELETED like the real watch cache.
    prev: Option<Arc<Value>>,
    /// `object` encoded once for all watchers.
    encoded: Bytes,
}

/// What a list or watch selects within one resource.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub ns: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        self.ns
            .as_deref()
            .is_none_or(|ns| obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns))
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }

    /// The event type this filter's watcher sees for `ev`, if any.
    fn view(&self, ev: &Event) -> Option<&'static str> {
        let now = self.matches(&ev.object);
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
    objects: BTreeMap<(String, String), Arc<Value>>,
    history: VecDeque<Event>,
    floor: u64,
    watchers: Vec<Watcher>,
    stats: ResourceStats,
    /// Watcher ids below this belong to an earlier registration of the key.
    first_id: u64,
}

struct Snapshot {
    id: u64,
    key: String,
    rv: u64,
    items: Arc<Vec<Arc<Value>>>,
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

/// One page of a list.
pub(crate) struct ListPage {
    pub def: Arc<ResourceDef>,
    pub items: Vec<Arc<Value>>,
    pub rv: u64,
    pub cont: Option<String>,
    pub remaining: Option<usize>,
}

/// Bounds of the store, from `SimConfig`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub history: usize,
    pub watch_queue: usize,
    pub list_snapshots: usize,
}

pub(crate) struct Store {
    rv: u64,
    resources: BTreeMap<String, Resource>,
    snapshots: VecDeque<Snapshot>,
    next_id: u64,
    limits: Limits,
}

fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.replace_nanosecond(0)
        .unwrap_or(now)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn str_at<'a>(obj: &'a Value, ptr: &str) -> Option<&'a str> {
    obj.pointer(ptr)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn valid_name(name: &str) -> bool {
    name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The 5-character suffix of `generateName`, from the apiserver's alphabet.
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

impl Store {
    pub fn new(limits: Limits) -> Self {
        Store {
            rv: 1,
            resources: BTreeMap::new(),
            snapshots: VecDeque::new(),
            next_id: 1,
            limits,
        }
    }

    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// Adds a resource type, or replaces the definition of one with the same key
    /// (its objects are kept).
    pub fn register(&mut self, def: ResourceDef) {
        let def = Arc::new(def);
        match self.resources.get_mut(&def.key()) {
            Some(r) => r.def = def,
            None => {
                self.resources.insert(
                    def.key(),
                    Resource {
                        def,
                        objects: BTreeMap::new(),
                        history: VecDeque::new(),
                        floor: 0,
                        watchers: Vec::new(),
                        stats: ResourceStats::default(),
                        first_id: self.next_id,
                    },
                );
            }
        }
    }

    /// Removes a resource type with its objects, history, counters and list
    /// snapshots, as deleting a CRD does. Its watchers are dropped, so their
    /// streams end. False if no such resource was registered.
    pub fn unregister(&mut self, key: &str) -> bool {
        self.snapshots.retain(|s| s.key != key);
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

    pub fn get(&self, key: &str, ns: Option<&str>, name: &str) -> Result<Arc<Value>, SimError> {
        let r = self.resource(key)?;
        r.objects
            .get(&Self::object_key(&r.def, ns, name))
            .cloned()
            .ok_or_else(|| SimError::NotFound {
                resource: r.def.key(),
                name: name.to_owned(),
            })
    }

    /// Checks the type fields and shape of a body, fills in apiVersion/kind and
    /// the namespace, and returns its (namespace, name) with the name possibly
    /// still missing.
    fn normalize(def: &ResourceDef, obj: &mut Value) -> Result<(String, Option<String>), SimError> {
        let Value::Object(map) = obj else {
            return Err(SimError::BadRequest(
                "the body must be a JSON object".into(),
            ));
        };
        let api_version = def.api_version();
        match map.get("kind") {
            None | Some(Value::Null) => {}
            Some(Value::String(k)) if *k == def.kind || k.is_empty() => {}
            Some(k) => {
                return Err(SimError::BadRequest(format!(
                    "wrong kind {k}, expected {}",
                    def.kind
                )));
            }
        }
        match map.get("apiVersion") {
            None | Some(Value::Null) => {}
            Some(Value::String(v)) if *v == api_version || v.is_empty() => {}
            Some(v) => {
                return Err(SimError::BadRequest(format!(
                    "wrong apiVersion {v}, expected {api_version}"
                )));
            }
        }
        map.insert("apiVersion".into(), Value::String(api_version));
        map.insert("kind".into(), Value::String(def.kind.clone()));
        let meta = map.entry("metadata").or_insert_with(|| json!({}));
        let Value::Object(meta) = meta else {
            return Err(SimError::BadRequest("metadata must be an object".into()));
        };
        let ns = if def.namespaced {
            let ns = match meta.get("namespace") {
                Some(Value::String(ns)) if !ns.is_empty() => ns.clone(),
                None | Some(Value::Null) | Some(Value::String(_)) => "default".to_owned(),
                Some(_) => {
                    return Err(SimError::BadRequest(
                        "metadata.namespace must be a string".into(),
                    ));
                }
            };
            if !valid_name(&ns) {
                return Err(SimError::Invalid(format!("invalid namespace {ns:?}")));
            }
            meta.insert("namespace".into(), Value::String(ns.clone()));
            ns
        } else {
            meta.remove("namespace");
            String::new()
        };
        let name = match meta.get("name") {
            Some(Value::String(n)) if !n.is_empty() => Some(n.clone()),
            None | Some(Value::Null) | Some(Value::String(_)) => None,
            Some(_) => {
                return Err(SimError::BadRequest(
                    "metadata.name must be a string".into(),
                ));
            }
        };
        if let Some(n) = &name
            && !valid_name(n)
        {
            return Err(SimError::Invalid(format!(
                "metadata.name: Invalid value: {n:?}: must be a lowercase RFC 1123 subdomain"
            )));
        }
        for field in ["labels", "annotations"] {
            if let Some(v) = meta.get(field)
                && !v.is_null()
                && !v
                    .as_object()
                    .is_some_and(|m| m.values().all(Value::is_string))
            {
                return Err(SimError::BadRequest(format!(
                    "metadata.{field} must map strings to strings"
                )));
            }
        }
        Ok((ns, name))
    }

    fn set_meta(obj: &mut Value, field: &str, value: Value) {
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert(field.to_owned(), value);
        }
    }

    pub fn create(&mut self, key: &str, mut obj: Value) -> Result<Arc<Value>, SimError> {
        let def = self.def(key)?;
        let (ns, name) = Self::normalize(&def, &mut obj)?;
        let name = match name {
            Some(n) => n,
            None => match str_at(&obj, "/metadata/generateName") {
                Some(prefix) => {
                    let name = format!("{prefix}{}", random_suffix());
                    if !valid_name(&name) {
                        return Err(SimError::Invalid(format!(
                            "invalid generateName {prefix:?}"
                        )));
                    }
                    Self::set_meta(&mut obj, "name", json!(name));
                    name
                }
                None => {
                    return Err(SimError::Invalid(
                        "metadata.name: Required value: name or generateName is required".into(),
                    ));
                }
            },
        };
        let r = self.resource(key)?;
        if r.objects.contains_key(&(ns.clone(), name.clone())) {
            return Err(SimError::AlreadyExists {
                resource: def.key(),
                name,
            });
        }
        Self::set_meta(&mut obj, "uid", json!(uuid::Uuid::new_v4().to_string()));
        Self::set_meta(&mut obj, "creationTimestamp", json!(now_rfc3339()));
        Self::set_meta(&mut obj, "generation", json!(1));
        Ok(self.commit(key, EventKind::Added, obj, None))
    }

    /// Replaces an object, keeping its server-owned metadata. A non-empty
    /// `metadata.resourceVersion` in the body must equal the stored one.
    pub fn update(&mut self, key: &str, mut obj: Value) -> Result<Arc<Value>, SimError> {
        let def = self.def(key)?;
        let (ns, name) = Self::normalize(&def, &mut obj)?;
        let name = name.ok_or_else(|| SimError::Invalid("metadata.name: Required value".into()))?;
        let prev = self.get(key, Some(&ns), &name)?;
        if let Some(rv) = str_at(&obj, "/metadata/resourceVersion")
            && Some(rv) != str_at(&prev, "/metadata/resourceVersion")
        {
            return Err(SimError::Conflict {
                resource: def.key(),
                name,
            });
        }
        for field in ["uid", "creationTimestamp"] {
            if let Some(v) = prev.pointer(&format!("/metadata/{field}")) {
                Self::set_meta(&mut obj, field, v.clone());
            }
        }
        let generation = prev
            .pointer("/metadata/generation")
            .and_then(Value::as_u64)
            .unwrap_or(1);
        let bump = u64::from(obj.get("spec") != prev.get("spec"));
        Self::set_meta(&mut obj, "generation", json!(generation + bump));
        Ok(self.commit(key, EventKind::Modified, obj, Some(prev)))
    }

    pub fn merge_patch(
        &mut self,
        key: &str,
        ns: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<Arc<Value>, SimError> {
        if !patch.is_object() {
            return Err(SimError::BadRequest(
                "a merge patch must be a JSON object".into(),
            ));
        }
        let prev = self.get(key, ns, name)?;
        let mut obj = (*prev).clone();
        merge_patch(&mut obj, patch);
        if !obj.get("metadata").is_some_and(Value::is_object) {
            return Err(SimError::BadRequest("metadata must be an object".into()));
        }
        // Identity is not patchable; an rv in the patch stays as a precondition
        // that `update` checks.
        for field in ["name", "namespace", "uid", "creationTimestamp"] {
            if let Some(v) = prev.pointer(&format!("/metadata/{field}")) {
                Self::set_meta(&mut obj, field, v.clone());
            }
        }
        for field in ["apiVersion", "kind"] {
            if let Some(v) = prev.get(field) {
                obj[field] = v.clone();
            }
        }
        self.update(key, obj)
    }

    pub fn delete(
        &mut self,
        key: &str,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, SimError> {
        let prev = self.get(key, ns, name)?;
        let r = self.resource_mut(key)?;
        let okey = Self::object_key(&r.def, ns, name);
        r.objects.remove(&okey);
        Ok(self.commit(key, EventKind::Deleted, (*prev).clone(), None))
    }

    /// Stamps the next rv on `obj`, stores (or removes) it, records the event
    /// and hands it to every matching watcher without waiting.
    fn commit(
        &mut self,
        key: &str,
        kind: EventKind,
        mut obj: Value,
        prev: Option<Arc<Value>>,
    ) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        let history_cap = self.limits.history;
        Self::set_meta(&mut obj, "resourceVersion", json!(rv.to_string()));
        // Serialising a `Value` cannot fail: its map keys are strings.
        let encoded = Bytes::from(serde_json::to_vec(&obj).unwrap_or_default());
        let object = Arc::new(obj);
        let Some(r) = self.resources.get_mut(key) else {
            return object;
        };
        let okey = (
            str_at(&object, "/metadata/namespace")
                .unwrap_or("")
                .to_owned(),
            str_at(&object, "/metadata/name").unwrap_or("").to_owned(),
        );
        if kind != EventKind::Deleted {
            r.objects.insert(okey, object.clone());
        }
        let event = Event {
            rv,
            kind,
            object: object.clone(),
            prev,
            encoded,
        };
        r.watchers.retain(|w| {
            let Some(ty) = w.filter.view(&event) else {
                return true;
            };
            match w.tx.try_send(event_line(ty, &event.encoded)) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    w.overflowed.store(true, Ordering::SeqCst);
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        r.history.push_back(event);
        while r.history.len() > history_cap {
            if let Some(old) = r.history.pop_front() {
                r.floor = r.floor.max(old.rv);
            }
        }
        object
    }

    /// Drops every resource's event history and every list snapshot, like an
    /// etcd compaction at the current revision.
    pub fn compact(&mut self) {
        let rv = self.rv;
        for r in self.resources.values_mut() {
            r.history.clear();
            r.floor = rv;
        }
        self.snapshots.clear();
    }

    pub fn objects(&self, key: &str) -> Result<Vec<Arc<Value>>, SimError> {
        Ok(self.resource(key)?.objects.values().cloned().collect())
    }

    /// A list page. Without `cont`, takes a snapshot of every matching object
    /// (sorted by namespace/name) and, if it exceeds `limit`, keeps it for the
    /// following pages.
    pub fn list(
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
                let items: Vec<Arc<Value>> = self
                    .resource(key)?
                    .objects
                    .values()
                    .filter(|o| filter.matches(o))
                    .cloned()
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
                for obj in r.objects.values().filter(|o| filter.matches(o)) {
                    let encoded = serde_json::to_vec(&**obj).unwrap_or_default();
                    initial.push_back(event_line("ADDED", &encoded));
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
