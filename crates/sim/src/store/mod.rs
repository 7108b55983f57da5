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
//!   overflowed (its stream then ends after what it had queued, with no
//!   error, as kube-apiserver ends a watcher that does not keep up).
//! - Objects and events are kept as their JSON encoding plus their
//!   selectable attributes (`attrs.rs`), never as parsed values; what a
//!   caller needs as a `Value` is parsed from the bytes on demand.
//!
//! Object writes (validation, server-set metadata, the controllers that
//! react to them) live in `write.rs`, LIST pages and `continue` snapshots
//! in `list.rs`, watcher registration in `watchers.rs`, the event history
//! and its bounds in `history.rs`; HTTP parsing in
//! `http.rs`, stream timing in `watch.rs`; the counters in `stats.rs`.

mod history;
mod list;
mod stats;
mod watchers;
mod write;

use history::Event;
pub(crate) use list::ListAt;
use list::Snapshot;
pub use stats::{ListStats, ResourceStats, Stats, StorageStats};
pub(crate) use watchers::{WatchFrom, WatchStart};
pub(crate) use write::now_rfc3339;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use super::SimError;
use super::attrs::Attrs;
use super::rbac;
use super::rbac::authorizer::Policy;
use super::resource::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};

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
        let before = ev.old.as_ref().is_some_and(|o| self.matches(&o.attrs));
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
    pub history_window: std::time::Duration,
    pub watch_queue: usize,
    pub list_snapshots: usize,
}

pub(crate) struct Store {
    rv: u64,
    resources: BTreeMap<String, Resource>,
    snapshots: VecDeque<Snapshot>,
    next_id: u64,
    limits: Limits,
    /// False while `seed` writes: no history events are recorded.
    recording: bool,
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
            recording: true,
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
                if r.def.version != def.version {
                    // Served at another version (a CRD's storage version
                    // changed): the old version's storage is torn down,
                    // its watches end and its list snapshots go, as the
                    // apiextensions-apiserver's CRD handler removes a
                    // changed CRD's storage (`customresource_handler.go`,
                    // `removeStorage_locked`).
                    r.watchers.clear();
                    let key = def.key();
                    self.snapshots.retain(|s| s.key != key);
                }
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
    fn commit(&mut self, key: &str, kind: EventKind, mut obj: Value) -> Result<Written, SimError> {
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
        // Serialising a `Value` cannot fail: its map keys are strings. The
        // buffer grew by doubling; kept as it is, up to half of it would be
        // spare capacity held as long as the object or its event is
        // (heaptrack at 10,000 pods: 40 MB allocated for 26.5 MB of JSON).
        let mut json = serde_json::to_vec(&obj).unwrap_or_default();
        json.shrink_to_fit();
        let encoded = Bytes::from(json);
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
        if let Some(old) = &old {
            r.object_bytes -= old.encoded.len();
        }
        if !self.recording {
            // Seeded: no event, and the floor rises past this write.
            r.history.clear();
            r.history_bytes = 0;
            r.floor = rv;
            return Ok(Written {
                object: obj,
                encoded,
            });
        }
        let event = Event {
            rv,
            at: std::time::Instant::now(),
            kind,
            encoded: encoded.clone(),
            attrs,
            old,
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
            let line = lines[slot].get_or_insert_with(|| event.line(ty)).clone();
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

    /// Creates `objs` without recording history events (`Sim::seed`);
    /// ordinary creates when the resource has watchers. Existing objects
    /// are kept.
    pub fn seed(&mut self, key: &str, objs: Vec<Value>) -> Result<(), SimError> {
        self.recording = !self.resource(key)?.watchers.is_empty();
        let mut result = Ok(());
        for obj in objs {
            match self.create(key, obj) {
                Ok(_) | Err(SimError::AlreadyExists { .. }) => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.recording = true;
        result
    }

    /// The (namespace, name) of every object of a resource, sorted; empty
    /// for an unknown resource.
    pub fn names(&self, key: &str) -> Vec<(String, String)> {
        self.resource(key)
            .map(|r| r.objects.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Every object of a resource, sorted by namespace/name.
    pub fn objects(&self, key: &str) -> Result<Vec<Stored>, SimError> {
        Ok(self.resource(key)?.objects.values().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::{Filter, Limits, Store, WatchFrom};
    use crate::selector::FieldSelector;
    use crate::{builtins, pod};

    fn store() -> Store {
        store_with(std::time::Duration::ZERO)
    }

    fn store_with(history_window: std::time::Duration) -> Store {
        let mut store = Store::new(Limits {
            history: 5,
            history_bytes: 1 << 20,
            history_window,
            watch_queue: 16,
            list_snapshots: 4,
        });
        for def in builtins::builtins() {
            store.register(def);
        }
        store
    }

    fn on_node(store: &Store, node: &str) -> Filter {
        let def = store.def("pods").unwrap();
        Filter {
            fields: FieldSelector::parse(&format!("spec.nodeName={node}"), &def).unwrap(),
            ..Filter::default()
        }
    }

    fn parse(line: &[u8]) -> (String, Value) {
        let v: Value = serde_json::from_slice(line).unwrap();
        (v["type"].as_str().unwrap().to_owned(), v["object"].clone())
    }

    #[test]
    fn a_pod_moved_off_a_node_is_deleted_there_with_the_version_that_matched() {
        let mut store = store();
        store.create("pods", pod("a").node("n1").build()).unwrap();
        let mut from = store
            .watch("pods", on_node(&store, "n1"), WatchFrom::After(store.rv()))
            .unwrap();
        let mut to = store
            .watch("pods", on_node(&store, "n2"), WatchFrom::After(store.rv()))
            .unwrap();
        let patch = serde_json::json!({"spec": {"nodeName": "n2"}});
        let moved = store.merge_patch("pods", None, "a", &patch).unwrap();
        let rv = moved.object["metadata"]["resourceVersion"].clone();

        let (ty, obj) = parse(&from.rx.try_recv().unwrap());
        assert_eq!(ty, "DELETED");
        assert_eq!(obj["spec"]["nodeName"], "n1", "the version that matched");
        assert_eq!(obj["metadata"]["resourceVersion"], rv, "the event's rv");
        let (ty, obj) = parse(&to.rx.try_recv().unwrap());
        assert_eq!(ty, "ADDED");
        assert_eq!(obj["spec"]["nodeName"], "n2");

        // A watch replayed from the history sees the same.
        let replay = store
            .watch("pods", on_node(&store, "n1"), WatchFrom::After(1))
            .unwrap();
        let (ty, obj) = parse(&replay.initial.back().unwrap().clone().into_line());
        assert_eq!(
            (ty.as_str(), &obj["spec"]["nodeName"]),
            ("DELETED", &Value::from("n1"))
        );
        assert_eq!(obj["metadata"]["resourceVersion"], rv);
    }

    #[test]
    fn events_younger_than_the_window_outlive_the_count_bound() {
        for (window, kept) in [(0, 5), (3600, 30)] {
            let mut store = store_with(std::time::Duration::from_secs(window));
            let first = store.rv();
            for i in 0..30 {
                store.create("pods", pod(&format!("p{i}")).build()).unwrap();
            }
            let s = store.stats().storage("pods");
            assert_eq!(s.history_events, kept, "window {window}s");
            assert!(
                store
                    .watch("pods", Filter::default(), WatchFrom::After(first))
                    .is_ok()
                    == (kept == 30)
            );
        }
    }

    #[test]
    fn seeded_objects_record_no_history_and_raise_the_floor() {
        let mut store = store_with(std::time::Duration::from_secs(3600));
        let before = store.rv();
        let pods = (0..20).map(|i| pod(&format!("p{i}")).build()).collect();
        store.seed("pods", pods).unwrap();
        let s = store.stats().storage("pods");
        assert_eq!(
            (s.objects, s.history_events, s.history_floor),
            (20, 0, store.rv())
        );
        assert!(
            store
                .watch("pods", Filter::default(), WatchFrom::After(before))
                .is_err()
        );
        // With a watcher open, seeding is ordinary creates: it misses nothing.
        let mut w = store
            .watch("pods", Filter::default(), WatchFrom::After(store.rv()))
            .unwrap();
        store.seed("pods", vec![pod("late").build()]).unwrap();
        assert!(w.rx.try_recv().is_ok());
    }
}
