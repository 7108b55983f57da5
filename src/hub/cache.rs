//! The hub's cache: every object by key, in key order, and by the value
//! of each of its resource's indexed fields (`spec.nodeName` for pods).
//!
//! Both are copy-on-write B-trees (imbl's `OrdMap`): cloning one is O(1)
//! and gives a snapshot that later changes do not touch, each change
//! copying only the path it changes while a snapshot shares it. A joiner
//! takes its snapshot that way under the hub's lock and reads it after,
//! under none, however many objects it holds ([`Snapshot`]); a relist
//! diffs against such a clone. kube-apiserver's watch cache keeps its
//! store the same way (a `google/btree` cloned lazily for the snapshots
//! it serves lists from: `storage/cacher/store/store_btree.go`), and
//! indexes pods by `spec.nodeName` (the pod registry's `Indexers`), so a
//! node agent's snapshot costs the objects it gets, not the cache.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;

use imbl::OrdMap;

use super::snapshot::{Segment, Snapshot};
use super::{Filter, Obj, ObjKey};

/// Objects by key, in key order: the cache, or one value's share of it.
pub(super) type Objects = OrdMap<ObjKey, Arc<Obj>>;

/// The fields a resource's cache is indexed by: those its node agents and
/// kubelets select by, as kube-apiserver indexes them
/// (`pkg/registry/core/pod/strategy.go`, `Indexers`: `spec.nodeName`).
/// A namespace needs no index: its objects are one range of keys.
pub fn indexed_fields(resource: &str) -> &'static [&'static str] {
    match resource {
        "pods" => &["spec.nodeName"],
        _ => &[],
    }
}

#[derive(Default)]
pub(super) struct Cache {
    objects: Objects,
    indexes: Vec<Index>,
}

/// One indexed field: the objects by its value ("" when absent, as field
/// selectors read it).
struct Index {
    field: &'static str,
    by_value: HashMap<Box<str>, Objects>,
}

impl Index {
    fn value<'a>(&self, obj: &'a Obj) -> &'a str {
        obj.field(self.field).unwrap_or("")
    }

    fn insert(&mut self, key: &ObjKey, obj: &Arc<Obj>) {
        let value = self.value(obj);
        match self.by_value.get_mut(value) {
            Some(objects) => {
                objects.insert(key.clone(), obj.clone());
            }
            None => {
                self.by_value
                    .insert(value.into(), OrdMap::unit(key.clone(), obj.clone()));
            }
        }
    }

    fn remove(&mut self, key: &ObjKey, obj: &Obj) {
        let value = self.value(obj);
        if let Some(objects) = self.by_value.get_mut(value) {
            objects.remove(key);
            if objects.is_empty() {
                self.by_value.remove(value);
            }
        }
    }
}

impl Cache {
    /// An empty cache indexed by `fields`.
    pub(super) fn new(fields: &'static [&'static str]) -> Cache {
        Cache {
            objects: OrdMap::new(),
            indexes: fields
                .iter()
                .map(|field| Index {
                    field,
                    by_value: HashMap::new(),
                })
                .collect(),
        }
    }

    /// A cache of `objects` indexed by `fields`.
    pub(super) fn of(
        fields: &'static [&'static str],
        objects: impl IntoIterator<Item = Arc<Obj>>,
    ) -> Cache {
        let mut cache = Cache::new(fields);
        for obj in objects {
            cache.insert(obj.key(), obj);
        }
        cache
    }

    pub(super) fn len(&self) -> usize {
        self.objects.len()
    }

    pub(super) fn get(&self, key: &ObjKey) -> Option<&Arc<Obj>> {
        self.objects.get(key)
    }

    pub(super) fn contains_key(&self, key: &ObjKey) -> bool {
        self.objects.contains_key(key)
    }

    /// Every object, in key order.
    pub(super) fn objects(&self) -> &Objects {
        &self.objects
    }

    /// Stores `obj` under `key`; the version it replaces.
    pub(super) fn insert(&mut self, key: ObjKey, obj: Arc<Obj>) -> Option<Arc<Obj>> {
        let old = self.objects.insert(key.clone(), obj.clone());
        for index in &mut self.indexes {
            if let Some(old) = &old
                && index.value(old) != index.value(&obj)
            {
                index.remove(&key, old);
            }
            index.insert(&key, &obj);
        }
        old
    }

    pub(super) fn remove(&mut self, key: &ObjKey) -> Option<Arc<Obj>> {
        let old = self.objects.remove(key)?;
        for index in &mut self.indexes {
            index.remove(key, &old);
        }
        Some(old)
    }

    /// The objects `filter` can match, as a snapshot to read under no
    /// lock: those of an exact name in the namespaces asked, those of an
    /// indexed field's value, those of the namespaces asked (ranges of
    /// keys), or all. In key order. O(log n) per part, whatever it holds.
    /// The filter itself is the reader's to apply.
    pub(super) fn snapshot(&self, filter: &Filter) -> Snapshot {
        let fields = &filter.fields;
        let namespaces: Vec<&str> = match fields.requires_exact("metadata.namespace") {
            Some(ns) => vec![ns],
            None => filter.namespaces.iter().map(String::as_str).collect(),
        };
        if let Some(name) = fields.requires_exact("metadata.name")
            && !namespaces.is_empty()
        {
            let mut keys: Vec<ObjKey> = namespaces
                .iter()
                .map(|ns| ObjKey::new(Some(ns), name))
                .collect();
            keys.sort();
            return Snapshot::new(
                keys.into_iter()
                    .map(|key| Segment::one(self.objects.clone(), key))
                    .collect(),
            );
        }
        for index in &self.indexes {
            if let Some(value) = fields.requires_exact(index.field) {
                let objects = index.by_value.get(value).cloned().unwrap_or_default();
                return Snapshot::new(vec![Segment::all(objects)]);
            }
        }
        if !namespaces.is_empty() {
            let mut namespaces = namespaces;
            namespaces.sort_unstable();
            namespaces.dedup();
            return Snapshot::new(
                namespaces
                    .into_iter()
                    .map(|ns| {
                        let (from, to) = ObjKey::namespace_range(ns);
                        Segment::range(
                            self.objects.clone(),
                            Bound::Included(from),
                            Bound::Excluded(to),
                        )
                    })
                    .collect(),
            );
        }
        Snapshot::new(vec![Segment::all(self.objects.clone())])
    }

    /// The objects of one value of an indexed field, for tests.
    #[cfg(test)]
    pub(super) fn indexed(&self, field: &str, value: &str) -> Vec<ObjKey> {
        self.indexes
            .iter()
            .find(|i| i.field == field)
            .and_then(|i| i.by_value.get(value))
            .map(|objects| objects.keys().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::{FieldSelector, LabelSelector};

    const FIELDS: &[&str] = &["spec.nodeName"];

    fn pod(ns: &str, name: &str, rv: u64, node: Option<&str>) -> Arc<Obj> {
        Arc::new(Obj::new(Some(ns), name, rv, b"{}").with_selectors(
            [],
            FIELDS,
            [node.map(String::from)],
        ))
    }

    fn filter(namespaces: &[&str], fields: &str) -> Filter {
        Filter {
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            labels: LabelSelector::default(),
            fields: FieldSelector::parse_any(fields).unwrap(),
        }
    }

    fn keys(mut snapshot: Snapshot) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let chunk = snapshot.next_chunk(2, usize::MAX, &|_| true);
            if chunk.is_empty() && snapshot.is_done() {
                return out;
            }
            out.extend(
                chunk
                    .iter()
                    .map(|o| format!("{}/{}", o.namespace().unwrap(), o.name())),
            );
        }
    }

    fn cache() -> Cache {
        let mut cache = Cache::new(FIELDS);
        for (ns, name, node) in [
            ("a", "x", Some("n1")),
            ("a", "y", Some("n2")),
            ("a-b", "x", Some("n1")),
            ("ab", "z", None),
            ("b", "x", Some("n1")),
            ("a0", "w", Some("n2")),
        ] {
            let obj = pod(ns, name, 1, node);
            cache.insert(obj.key(), obj);
        }
        cache
    }

    #[test]
    fn the_index_follows_every_change_of_its_field() {
        let mut cache = cache();
        assert_eq!(cache.indexed("spec.nodeName", "n1").len(), 3);
        // Rescheduled: it leaves n1 for n2.
        cache.insert(ObjKey::new(Some("a"), "x"), pod("a", "x", 2, Some("n2")));
        assert_eq!(cache.indexed("spec.nodeName", "n1").len(), 2);
        assert_eq!(cache.indexed("spec.nodeName", "n2").len(), 3);
        // Unscheduled reads as "", as field selectors read a missing field.
        cache.insert(ObjKey::new(Some("a"), "y"), pod("a", "y", 2, None));
        assert_eq!(cache.indexed("spec.nodeName", "").len(), 2);
        cache.remove(&ObjKey::new(Some("b"), "x"));
        cache.remove(&ObjKey::new(Some("a-b"), "x"));
        assert!(cache.indexed("spec.nodeName", "n1").is_empty());
        assert!(
            !cache.indexes[0].by_value.contains_key("n1"),
            "an empty value is forgotten"
        );
        let rebuilt = Cache::of(FIELDS, cache.objects().values().cloned());
        for value in ["", "n1", "n2"] {
            assert_eq!(
                rebuilt.indexed("spec.nodeName", value),
                cache.indexed("spec.nodeName", value)
            );
        }
    }

    #[test]
    fn a_snapshot_reads_only_what_its_filter_can_match_in_key_order() {
        let cache = cache();
        // Sorted as keys are: "a-b/" < "a/" < "a0/" < "ab/".
        let all = keys(cache.snapshot(&filter(&[], "")));
        assert_eq!(all, ["a-b/x", "a/x", "a/y", "a0/w", "ab/z", "b/x"]);
        assert_eq!(
            keys(cache.snapshot(&filter(&["a"], ""))),
            ["a/x", "a/y"],
            "a namespace is a range: not a-b, a0 nor ab"
        );
        assert_eq!(
            keys(cache.snapshot(&filter(&["b", "a"], ""))),
            ["a/x", "a/y", "b/x"]
        );
        assert_eq!(
            keys(cache.snapshot(&filter(&[], "metadata.namespace=ab"))),
            ["ab/z"]
        );
        assert_eq!(
            keys(cache.snapshot(&filter(&[], "spec.nodeName=n1"))),
            ["a-b/x", "a/x", "b/x"]
        );
        assert_eq!(
            keys(cache.snapshot(&filter(&[], "spec.nodeName="))),
            ["ab/z"]
        );
        assert!(keys(cache.snapshot(&filter(&[], "spec.nodeName=n9"))).is_empty());
        assert_eq!(
            keys(cache.snapshot(&filter(&["b", "a"], "metadata.name=x"))),
            ["a/x", "b/x"]
        );
        assert!(keys(cache.snapshot(&filter(&["a"], "metadata.name=q"))).is_empty());
    }

    #[test]
    fn a_snapshot_is_not_changed_by_later_changes() {
        let mut cache = cache();
        let snapshot = cache.snapshot(&filter(&[], ""));
        let node = cache.snapshot(&filter(&[], "spec.nodeName=n1"));
        cache.remove(&ObjKey::new(Some("a"), "x"));
        cache.insert(
            ObjKey::new(Some("c"), "new"),
            pod("c", "new", 2, Some("n1")),
        );
        cache.insert(ObjKey::new(Some("b"), "x"), pod("b", "x", 3, Some("n2")));
        assert_eq!(
            keys(snapshot),
            ["a-b/x", "a/x", "a/y", "a0/w", "ab/z", "b/x"]
        );
        assert_eq!(keys(node), ["a-b/x", "a/x", "b/x"]);
        assert_eq!(
            keys(cache.snapshot(&filter(&[], "spec.nodeName=n1"))),
            ["a-b/x", "c/new"]
        );
    }
}
