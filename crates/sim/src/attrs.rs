//! What selectors read of an object: its namespace, name, labels and the
//! values of its resource's selectable fields, taken once when the object
//! is written.
//!
//! The store keeps each object version as its JSON encoding plus these
//! attributes, never as a parsed `serde_json::Value`: a `Value` of a 2 KB
//! pod takes several times its JSON on the heap, and the watch history
//! holds thousands of versions (loadtest/RESULTS.md, "The simulator's
//! memory"). Lists, watches and the history filter on `Attrs` alone and
//! hand out the encoded bytes as they are.

use std::sync::Arc;

use serde_json::Value;

use super::resource::ResourceDef;

/// The selectable attributes of one object version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Attrs {
    /// "" for cluster-scoped objects.
    pub ns: Box<str>,
    pub name: Box<str>,
    /// Sorted by key.
    pub labels: Vec<(Box<str>, Box<str>)>,
    /// Every selectable field of the resource (`metadata.name` included),
    /// with its value as the API server's field set spells it.
    pub fields: Vec<(Arc<str>, Box<str>)>,
}

impl Attrs {
    /// The attributes of `obj` as a `def` object.
    pub fn of(def: &ResourceDef, obj: &Value) -> Attrs {
        let text = |ptr: &str| -> Box<str> {
            obj.pointer(ptr)
                .and_then(Value::as_str)
                .unwrap_or("")
                .into()
        };
        let mut labels: Vec<(Box<str>, Box<str>)> = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.as_str().into(), v.as_str()?.into())))
                    .collect()
            })
            .unwrap_or_default();
        labels.sort_unstable();
        let fields = def
            .selectable_fields
            .iter()
            .map(|f| (f.name.clone(), f.value(obj).into()))
            .collect();
        Attrs {
            ns: text("/metadata/namespace"),
            name: text("/metadata/name"),
            labels,
            fields,
        }
    }

    /// The value of label `key`, if the object has it.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.labels[i].1)
    }

    /// The value of selectable field `name`; `None` if the resource has no
    /// such field.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| **n == *name)
            .map(|(_, v)| &**v)
    }

    /// Heap bytes these attributes hold, for the history's byte bound.
    pub fn size(&self) -> usize {
        let strings = self.ns.len()
            + self.name.len()
            + self
                .labels
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
            + self.fields.iter().map(|(_, v)| v.len()).sum::<usize>();
        std::mem::size_of::<Attrs>()
            + strings
            + self.labels.len() * std::mem::size_of::<(Box<str>, Box<str>)>()
            + self.fields.len() * std::mem::size_of::<(Arc<str>, Box<str>)>()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Attrs;
    use crate::resource::{ResourceDef, SelectableField};

    #[test]
    fn attributes_hold_labels_sorted_and_every_selectable_field() {
        let def = ResourceDef::new("", "v1", "pods", "Pod", true).with_field(
            SelectableField::from_paths("spec.hostNetwork", &["/spec/hostNetwork"], "false"),
        );
        let pod = json!({"metadata": {"name": "a", "namespace": "web",
            "labels": {"b": "2", "a": "1", "odd": 3}}});
        let attrs = Attrs::of(&def, &pod);
        assert_eq!((&*attrs.ns, &*attrs.name), ("web", "a"));
        assert_eq!(attrs.label("a"), Some("1"));
        assert_eq!(attrs.label("b"), Some("2"));
        assert_eq!(attrs.label("odd"), None, "only string values are labels");
        assert_eq!(attrs.field("metadata.name"), Some("a"));
        assert_eq!(attrs.field("metadata.namespace"), Some("web"));
        assert_eq!(attrs.field("spec.hostNetwork"), Some("false"));
        assert_eq!(attrs.field("spec.nodeName"), None);
        assert!(attrs.size() > std::mem::size_of::<Attrs>());
    }
}
