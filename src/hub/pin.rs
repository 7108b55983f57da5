//! Pins: a value one field of an object must have for a view's filter to
//! match it, as `spec.nodeName=node-7` pins a node agent's view.
//!
//! A pin is a necessary condition of the filter, never a sufficient one:
//! an object whose pinned field has none of the pin's values matches
//! nothing, so an event whose old and new versions both miss it reaches no
//! subscriber of the view (the transition rule, `hub::transition`, sends
//! nothing when neither version matches). So a hub's batch writers
//! dispatch events by their pinned values, as kube-apiserver's watch cache
//! dispatches a pod event only to the watchers of its old and new
//! `spec.nodeName` (`indexedTrigger`, `triggerValues` and `valueWatchers`
//! in `staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go`, with
//! the pod registry's `NodeNameTriggerFunc`), and the hub answers a pinned
//! snapshot from its index (`hub::cache`).

use super::{Event, Filter, Obj};

/// Which value of an object a pin reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Dim {
    /// `metadata.namespace` as a filter's namespaces read it: a
    /// cluster-scoped object has none, and matches no namespace.
    Namespace,
    /// A field the object carries without its JSON (`metadata.name`,
    /// `metadata.namespace`, the resource's selectable fields), "" when
    /// absent, as field selectors read it.
    Field(Box<str>),
    /// A label; an object without it has no value.
    Label(Box<str>),
}

impl Dim {
    /// The value of this dimension on `obj`, if it has one.
    pub fn value<'a>(&self, obj: &'a Obj) -> Option<&'a str> {
        match self {
            Dim::Namespace => obj.namespace(),
            Dim::Field(path) => Some(obj.field(path).unwrap_or("")),
            Dim::Label(key) => obj.label(key),
        }
    }
}

/// A dimension and the values (sorted, no repeats) every object a filter
/// matches has in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pin {
    pub dim: Dim,
    pub values: Vec<Box<str>>,
}

impl Pin {
    fn new(dim: Dim, values: impl IntoIterator<Item = impl Into<Box<str>>>) -> Pin {
        let mut values: Vec<Box<str>> = values.into_iter().map(Into::into).collect();
        values.sort();
        values.dedup();
        Pin { dim, values }
    }

    /// Whether `obj` has one of the pinned values.
    pub fn holds(&self, obj: &Obj) -> bool {
        self.dim
            .value(obj)
            .is_some_and(|v| self.values.iter().any(|p| **p == *v))
    }

    /// Whether `ev` can reach a view with this pin: its old or its new
    /// version has a pinned value.
    pub fn reaches(&self, ev: &Event) -> bool {
        self.holds(&ev.obj) || ev.prev.as_ref().is_some_and(|p| self.holds(p))
    }
}

impl Filter {
    /// The pin this filter implies, if any, the narrowest kind first: an
    /// exact `metadata.name`, then any other field equality the object
    /// answers without its JSON (`metadata.namespace` and the resource's
    /// `selectable` fields, as `spec.nodeName`), then the namespaces,
    /// then a label's equality or set.
    pub fn pin(&self, selectable: &[&str]) -> Option<Pin> {
        if let Some((field, value)) = self.fields.pinned(|f| f == "metadata.name") {
            return Some(Pin::new(Dim::Field(field.into()), [value]));
        }
        let readable = |f: &str| f == "metadata.namespace" || selectable.contains(&f);
        if let Some((field, value)) = self.fields.pinned(readable) {
            return Some(Pin::new(Dim::Field(field.into()), [value]));
        }
        if !self.namespaces.is_empty() {
            return Some(Pin::new(Dim::Namespace, self.namespaces.iter().cloned()));
        }
        self.labels
            .pinned()
            .map(|(key, values)| Pin::new(Dim::Label(key.into()), values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::{FieldSelector, LabelSelector};
    use std::sync::Arc;

    const FIELDS: &[&str] = &["spec.nodeName", "status.phase"];

    fn pod(ns: Option<&str>, name: &str, node: Option<&str>, app: Option<&str>) -> Obj {
        Obj::new(ns, name, 1, b"{}").with_selectors(
            app.map(|a| ("app".to_string(), a.to_string())),
            FIELDS,
            [node.map(String::from), Some("Running".into())],
        )
    }

    fn filter(namespaces: &[&str], labels: &str, fields: &str) -> Filter {
        Filter {
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
            labels: LabelSelector::parse(labels).unwrap(),
            fields: FieldSelector::parse_any(fields).unwrap(),
        }
        .normalized()
    }

    fn pinned(dim: Dim, values: &[&str]) -> Option<Pin> {
        Some(Pin::new(dim, values.iter().copied()))
    }

    #[test]
    fn the_narrowest_pin_is_chosen() {
        let field = |f: &str| Dim::Field(f.into());
        for (f, want) in [
            (filter(&[], "", ""), None),
            (
                filter(&["b", "a"], "app=web", "spec.nodeName=n1"),
                pinned(field("spec.nodeName"), &["n1"]),
            ),
            (
                filter(&["a"], "", "spec.nodeName=n1,metadata.name=x"),
                pinned(field("metadata.name"), &["x"]),
            ),
            (
                filter(&["b", "a"], "app=web", ""),
                pinned(Dim::Namespace, &["a", "b"]),
            ),
            (
                filter(&[], "app in (web,db),tier=x", ""),
                pinned(Dim::Label("app".into()), &["db", "web"]),
            ),
            // Inequalities pin nothing; a path the object does not
            // carry cannot be read without its JSON.
            (filter(&[], "app!=web,tier", "spec.nodeName!=n1"), None),
            (filter(&[], "", "spec.other=x"), None),
            (
                filter(&[], "", "spec.nodeName="),
                pinned(field("spec.nodeName"), &[""]),
            ),
        ] {
            assert_eq!(f.pin(FIELDS), want, "{f:?}");
        }
    }

    #[test]
    fn a_pin_holds_of_every_object_its_filter_matches() {
        let objects = [
            pod(Some("a"), "x", Some("n1"), Some("web")),
            pod(Some("b"), "y", Some("n2"), Some("db")),
            pod(Some("a"), "z", None, None),
            pod(None, "node-1", None, None),
        ];
        for f in [
            filter(&[], "", "spec.nodeName=n1"),
            filter(&[], "", "spec.nodeName="),
            filter(&["a"], "", ""),
            filter(&[], "", "metadata.namespace=b"),
            filter(&[], "", "metadata.name=node-1"),
            filter(&[], "app in (web,db)", ""),
            filter(&[], "app=db", ""),
        ] {
            let pin = f.pin(FIELDS).expect("a pin");
            for obj in &objects {
                assert!(
                    !f.matches(obj) || pin.holds(obj),
                    "{f:?} matches {:?} but {pin:?} does not hold",
                    obj.key()
                );
            }
            assert!(objects.iter().any(|o| f.matches(o)), "{f:?} matches one");
        }
    }

    #[test]
    fn an_event_reaches_the_pins_of_its_old_and_new_values() {
        let pin = filter(&[], "", "spec.nodeName=n1").pin(FIELDS).unwrap();
        let event = |prev: Option<&str>, now: Option<&str>| Event {
            seq: 0,
            rv: 2,
            kind: super::super::EventType::Modified,
            obj: Arc::new(pod(Some("a"), "x", now, None)),
            prev: Some(Arc::new(pod(Some("a"), "x", prev, None))),
            frame: super::super::Frame::encode("MODIFIED", "MODIFIED", Some(2), b"{}"),
            has_id: true,
        };
        assert!(pin.reaches(&event(Some("n1"), Some("n2"))), "moved away");
        assert!(pin.reaches(&event(None, Some("n1"))), "scheduled here");
        assert!(!pin.reaches(&event(Some("n2"), Some("n3"))));
        assert!(!pin.reaches(&event(None, None)));
    }
}
