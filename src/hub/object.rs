//! Cached objects and logged events: immutable, shared by `Arc`, encoded at birth.

use std::sync::Arc;

use bytes::Bytes;

use super::encode::{EventType, Frame};

/// One version of one Kubernetes object, after ingest (managedFields
/// stripped, Secrets redacted). Immutable; the cache and the log share it.
#[derive(Debug)]
pub struct Obj {
    namespace: Option<Box<str>>,
    name: Box<str>,
    rv: u64,
    /// The snapshot encoding: an id-less `ADDED` frame. The object's JSON is
    /// a slice of it, so the object is stored once.
    frame: Frame,
    /// `metadata.labels`, sorted by key, for label selectors.
    labels: Box<[(Box<str>, Box<str>)]>,
    /// The resource's selectable fields present on this object (see
    /// `selector::selectable_fields`), for field selectors.
    fields: Box<[(&'static str, Box<str>)]>,
}

impl Obj {
    /// `json` is the object as one JSON value; `rv` its parsed resourceVersion.
    pub fn new(namespace: Option<&str>, name: &str, rv: u64, json: &[u8]) -> Obj {
        Obj {
            namespace: namespace.filter(|ns| !ns.is_empty()).map(Into::into),
            name: name.into(),
            rv,
            frame: Frame::encode("ADDED", "ADDED", None, json),
            labels: Box::default(),
            fields: Box::default(),
        }
    }

    /// Attaches what selectors match on: labels and selectable fields.
    pub fn with_selectors(
        mut self,
        labels: impl IntoIterator<Item = (String, String)>,
        fields: impl IntoIterator<Item = (&'static str, String)>,
    ) -> Obj {
        let mut labels: Vec<(Box<str>, Box<str>)> = labels
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        labels.sort();
        self.labels = labels.into();
        self.fields = fields.into_iter().map(|(k, v)| (k, v.into())).collect();
        self
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.labels[i].1)
    }

    /// A selectable field by dotted path (`metadata.name`, `spec.nodeName`).
    pub fn field(&self, path: &str) -> Option<&str> {
        match path {
            "metadata.name" => Some(self.name()),
            "metadata.namespace" => Some(self.namespace().unwrap_or("")),
            _ => self
                .fields
                .iter()
                .find(|(k, _)| *k == path)
                .map(|(_, v)| &**v),
        }
    }

    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// The object's JSON.
    pub fn json(&self) -> Bytes {
        self.frame.object()
    }

    /// The object as an id-less `ADDED` event, as sent in snapshots.
    pub fn snapshot_frame(&self) -> &Frame {
        &self.frame
    }

    pub fn key(&self) -> ObjKey {
        ObjKey::new(self.namespace(), self.name())
    }

    /// Bytes this object holds, for the log's byte bound.
    pub fn size(&self) -> usize {
        self.frame.len()
            + self.name.len()
            + self.namespace.as_ref().map_or(0, |n| n.len())
            + self
                .labels
                .iter()
                .map(|(k, v)| k.len() + v.len() + 32)
                .sum::<usize>()
            + self.fields.iter().map(|(_, v)| v.len() + 32).sum::<usize>()
    }
}

/// `namespace/name`, or `name` for cluster-scoped objects.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey(Box<str>);

impl ObjKey {
    pub fn new(namespace: Option<&str>, name: &str) -> ObjKey {
        match namespace {
            Some(ns) if !ns.is_empty() => ObjKey(format!("{ns}/{name}").into()),
            _ => ObjKey(name.into()),
        }
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
