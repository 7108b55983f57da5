//! Cached objects and logged events: immutable, shared by `Arc`, encoded at birth.

use std::sync::Arc;

use bytes::Bytes;

use super::encode::{EventType, Frame, KeptBuf};

/// One version of one Kubernetes object, after ingest (managedFields
/// stripped, Secrets redacted). Immutable; the cache and the log share it.
///
/// Besides its JSON, an object holds what selectors read without parsing
/// it, in two allocations whatever its number of labels and fields (one
/// small string each had cost a fifth of a pod's JSON again:
/// `loadtest/RESULTS.md`, *The hub's memory*).
#[derive(Debug)]
pub struct Obj {
    rv: u64,
    /// The object's JSON: once the hub has logged this version, a slice of
    /// that event's frame ([`Obj::share_frame`]), so the version is stored
    /// once for the cache, the log and every wire format.
    json: Bytes,
    /// Back to back: the namespace (empty when cluster-scoped), the name,
    /// each label's key and value (sorted by key: `metadata.labels`, for
    /// label selectors), then the value of each of the resource's
    /// selectable fields present on this object (for field selectors).
    text: Box<str>,
    /// Where each piece of `text` ends.
    ends: Box<[u32]>,
    /// How many labels `text` holds.
    labels: u32,
    /// The resource's selectable fields (`selector::selectable_fields`)...
    fields: &'static [&'static str],
    /// ... and which of them this object has, bit `i` for `fields[i]`.
    present: u64,
}

impl Obj {
    /// `json` is the object as one JSON value; `rv` its parsed resourceVersion.
    pub fn new(namespace: Option<&str>, name: &str, rv: u64, json: &[u8]) -> Obj {
        // Exactly its length: the encoder's doubled buffer is not kept.
        Obj::with_json(namespace, name, rv, KeptBuf::copy(json))
    }

    /// As [`Obj::new`], for a version the hub logs at once (a watch
    /// event's: `Hub::apply`), whose JSON then lives in its frame
    /// ([`Obj::share_frame`]): `json` stays in the process's allocator
    /// rather than being copied into a kept buffer for the moment until
    /// then. That copy, freed just below each frame the log keeps, left a
    /// hole per event in glibc's arena that later copies fitted only in
    /// part: at 150,000 pods and 200 changes/s, 2.4 MB free in the arena
    /// after the first 50 s against 0.3 MB without it
    /// (`loadtest/RESULTS.md`, 2026-12-05).
    pub fn logged(namespace: Option<&str>, name: &str, rv: u64, json: Vec<u8>) -> Obj {
        Obj::with_json(namespace, name, rv, Bytes::from(json))
    }

    fn with_json(namespace: Option<&str>, name: &str, rv: u64, json: Bytes) -> Obj {
        let mut obj = Obj {
            rv,
            json,
            text: Box::default(),
            ends: Box::default(),
            labels: 0,
            fields: &[],
            present: 0,
        };
        obj.set_text(namespace.unwrap_or(""), name, &[], &[]);
        obj
    }

    /// Attaches what selectors match on: labels, and the values of the
    /// resource's selectable `fields` (in their order; `None` where the
    /// object has none). At most 64 fields (the longest list has 11).
    pub fn with_selectors(
        mut self,
        labels: impl IntoIterator<Item = (String, String)>,
        fields: &'static [&'static str],
        values: impl IntoIterator<Item = Option<String>>,
    ) -> Obj {
        let mut labels: Vec<(String, String)> = labels.into_iter().collect();
        labels.sort();
        let fields = &fields[..fields.len().min(64)];
        let mut present = 0u64;
        let values: Vec<String> = values
            .into_iter()
            .take(fields.len())
            .enumerate()
            .filter_map(|(i, v)| {
                present |= u64::from(v.is_some()) << i;
                v
            })
            .collect();
        let (namespace, name) = (
            self.namespace().unwrap_or("").to_string(),
            self.name().to_string(),
        );
        self.set_text(&namespace, &name, &labels, &values);
        self.fields = fields;
        self.present = present;
        self
    }

    fn set_text(
        &mut self,
        namespace: &str,
        name: &str,
        labels: &[(String, String)],
        values: &[String],
    ) {
        let pieces = || {
            [namespace, name]
                .into_iter()
                .chain(labels.iter().flat_map(|(k, v)| [k.as_str(), v.as_str()]))
                .chain(values.iter().map(String::as_str))
        };
        let mut text = String::with_capacity(pieces().map(str::len).sum());
        let mut ends = Vec::with_capacity(2 + 2 * labels.len() + values.len());
        for piece in pieces() {
            text.push_str(piece);
            ends.push(u32::try_from(text.len()).unwrap_or(u32::MAX));
        }
        self.text = text.into_boxed_str();
        self.ends = ends.into_boxed_slice();
        self.labels = labels.len() as u32;
    }

    /// Piece `i` of `text`.
    fn piece(&self, i: usize) -> &str {
        let start = i.checked_sub(1).map_or(0, |p| self.ends[p] as usize);
        self.text.get(start..self.ends[i] as usize).unwrap_or("")
    }

    /// Label `i` (in key order) as key and value.
    fn label_at(&self, i: usize) -> (&str, &str) {
        (self.piece(2 + 2 * i), self.piece(3 + 2 * i))
    }

    /// Makes the object's JSON the one inside `frame` (an event encoded
    /// from this object), freeing its own copy.
    pub fn share_frame(&mut self, frame: &Frame) {
        let object = frame.object();
        debug_assert_eq!(object, self.json, "the frame encodes this object");
        self.json = object;
    }

    /// This object with its JSON inside `frame`, for an object already
    /// shared (a relist's): what selectors read is copied, the JSON is not.
    pub fn sharing_frame(&self, frame: &Frame) -> Obj {
        debug_assert_eq!(frame.object(), self.json, "the frame encodes this object");
        Obj {
            rv: self.rv,
            json: frame.object(),
            text: self.text.clone(),
            ends: self.ends.clone(),
            labels: self.labels,
            fields: self.fields,
            present: self.present,
        }
    }

    /// This version stamped with `rv`: what a DELETED event at `rv` carries
    /// of an object whose deletion kubefan inferred (a relist no longer
    /// lists it). kube-apiserver's watch sends a deleted object's last
    /// state with the revision of its deletion
    /// (`k8s.io/apiserver/pkg/storage/etcd3/watcher.go`, `prepareObjs`),
    /// and client-go's reflector keeps the resourceVersion of each event's
    /// object as its position: the old one would move it back.
    pub fn restamped(&self, rv: u64) -> Obj {
        let json = serde_json::from_slice::<serde_json::Value>(&self.json)
            .ok()
            .and_then(|mut object| {
                super::transition::restamp(&mut object, rv);
                serde_json::to_vec(&object).ok()
            })
            .map_or_else(|| self.json.clone(), Bytes::from);
        Obj {
            rv,
            json,
            text: self.text.clone(),
            ends: self.ends.clone(),
            labels: self.labels,
            fields: self.fields,
            present: self.present,
        }
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        let mut found = None;
        let (mut low, mut high) = (0, self.labels as usize);
        while low < high {
            let mid = (low + high) / 2;
            let (k, v) = self.label_at(mid);
            match k.cmp(key) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => {
                    found = Some(v);
                    break;
                }
            }
        }
        found
    }

    /// A selectable field by dotted path (`metadata.name`, `spec.nodeName`).
    pub fn field(&self, path: &str) -> Option<&str> {
        match path {
            "metadata.name" => Some(self.name()),
            "metadata.namespace" => Some(self.namespace().unwrap_or("")),
            _ => {
                let i = self.fields.iter().position(|f| *f == path)?;
                let before = (self.present & ((1u64 << i) - 1)).count_ones() as usize;
                (self.present & (1 << i) != 0)
                    .then(|| self.piece(2 + 2 * self.labels as usize + before))
            }
        }
    }

    pub fn namespace(&self) -> Option<&str> {
        Some(self.piece(0)).filter(|ns| !ns.is_empty())
    }

    pub fn name(&self) -> &str {
        self.piece(1)
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The object's JSON.
    pub fn json(&self) -> Bytes {
        self.json.clone()
    }

    /// Its length, without taking a reference to the buffer.
    pub fn json_len(&self) -> usize {
        self.json.len()
    }

    pub fn key(&self) -> ObjKey {
        ObjKey::new(self.namespace(), self.name())
    }

    /// Bytes this object holds beside its JSON.
    fn size_beside_json(&self) -> usize {
        std::mem::size_of::<Obj>() + self.text.len() + 4 * self.ends.len()
    }
}

/// `namespace/name`, or `name` for cluster-scoped objects. Ordered as
/// the text is, so a namespace's objects are one range of keys
/// ([`ObjKey::namespace_range`]) and a list comes out sorted as
/// kube-apiserver's (by etcd key, `/registry/pods/NAMESPACE/NAME`).
/// Shared, not copied: the cache and its indexes hold the same key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey(Arc<str>);

impl ObjKey {
    pub fn new(namespace: Option<&str>, name: &str) -> ObjKey {
        match namespace {
            Some(ns) if !ns.is_empty() => ObjKey(format!("{ns}/{name}").into()),
            _ => ObjKey(name.into()),
        }
    }

    /// The keys of `namespace`'s objects: from `namespace/` up to, not
    /// including, `namespace0` (`'0'` follows `'/'`), which holds every
    /// key starting `namespace/` and no other.
    pub fn namespace_range(namespace: &str) -> (ObjKey, ObjKey) {
        (
            ObjKey(format!("{namespace}/").into()),
            ObjKey(format!("{namespace}0").into()),
        )
    }
}

impl Event {
    /// Bytes this event holds, for the log's byte bound: itself, its frame,
    /// its object beside the JSON, and that JSON only where it is not a
    /// slice of the frame.
    pub fn size(&self) -> usize {
        let object = self.frame.object();
        let shared =
            self.obj.json.as_ptr() == object.as_ptr() && self.obj.json.len() == object.len();
        std::mem::size_of::<Event>()
            + self.frame.len()
            + self.obj.size_beside_json()
            + if shared { 0 } else { self.obj.json.len() }
    }
}

/// One change in the log. `seq` numbers the hub's events without gaps;
/// `rv` is the resourceVersion a client resumes from.
#[derive(Debug)]
pub struct Event {
    pub seq: u64,
    pub rv: u64,
    pub kind: EventType,
    /// The object after the change (for DELETED: its last state).
    pub obj: Arc<Obj>,
    /// The object before the change, when the hub had one (filters that
    /// match old and new versions need it).
    pub prev: Option<Arc<Obj>>,
    /// Encoded with an `id:` unless a later event in the same batch shares
    /// its resourceVersion (see `Hub::relist`).
    pub frame: Frame,
    /// Whether `frame` carries an `id:` (a resume position).
    pub has_id: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_read_labels_and_fields_from_one_text() {
        const FIELDS: &[&str] = &["spec.nodeName", "status.podIP", "status.phase", "spec.x"];
        let obj = Obj::new(Some("ns"), "web-1", 7, br#"{"a":1}"#).with_selectors(
            [("tier", "web"), ("app", "shop"), ("z", ""), ("m", "x=y")]
                .map(|(k, v)| (k.to_string(), v.to_string())),
            FIELDS,
            [Some("n1"), None, Some("")].map(|v| v.map(String::from)),
        );
        assert_eq!((obj.namespace(), obj.name()), (Some("ns"), "web-1"));
        for (key, value) in [("app", "shop"), ("m", "x=y"), ("tier", "web"), ("z", "")] {
            assert_eq!(obj.label(key), Some(value), "{key}");
        }
        for missing in ["", "a", "n", "zz", "web"] {
            assert_eq!(obj.label(missing), None, "{missing}");
        }
        assert_eq!(obj.field("spec.nodeName"), Some("n1"));
        assert_eq!(obj.field("status.phase"), Some(""));
        assert_eq!(obj.field("status.podIP"), None);
        assert_eq!(obj.field("spec.x"), None, "no value given");
        assert_eq!(obj.field("spec.other"), None, "not selectable");
        // A label is not a field, nor a value a path.
        assert_eq!(obj.field("tier"), None);
        assert_eq!(obj.field("n1"), None);
        assert_eq!(obj.field("metadata.name"), Some("web-1"));
        assert_eq!(obj.key(), ObjKey::new(Some("ns"), "web-1"));
        assert_eq!(&obj.json()[..], br#"{"a":1}"#);
    }

    #[test]
    fn a_cluster_scoped_object_has_no_namespace() {
        for namespace in [None, Some("")] {
            let obj = Obj::new(namespace, "node-1", 1, b"{}").with_selectors([], &[], []);
            assert_eq!(obj.namespace(), None);
            assert_eq!(obj.field("metadata.namespace"), Some(""));
            assert_eq!(obj.label("x"), None);
            assert_eq!(obj.key(), ObjKey::new(None, "node-1"));
        }
    }
}
