//! What a subscription wants to see of a resource, and how each change
//! reaches it.
//!
//! A filter is matched against the previous and the current version of an
//! object; [`super::transition`] decides what the subscriber gets.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::Value;

use super::transition::{Transition, restamp, transition};
use super::{Delivery, Event, EventType, Frame, Obj};
use crate::selector::{FieldSelector, LabelSelector, field_text};

/// A subscription's filter. The default matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// Empty: every namespace (and cluster-scoped objects).
    pub namespaces: Vec<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    /// The same filter in one canonical form: namespaces sorted without
    /// repeats, selectors normalised (see [`LabelSelector::normalized`]).
    /// Filters that mean the same by those rules normalise to equal
    /// filters.
    pub fn normalized(self) -> Filter {
        let Filter {
            mut namespaces,
            labels,
            fields,
        } = self;
        namespaces.sort();
        namespaces.dedup();
        Filter {
            namespaces,
            labels: labels.normalized(),
            fields: fields.normalized(),
        }
    }

    pub fn matches(&self, obj: &Obj) -> bool {
        (self.namespaces.is_empty()
            || obj
                .namespace()
                .is_some_and(|ns| self.namespaces.iter().any(|n| n == ns)))
            && self.labels.matches_with(|k| obj.label(k))
            && self.fields.matches_with(|f| obj.field(f))
    }

    /// Whether the namespaces and labels match (what can be decided
    /// without the object's JSON).
    pub fn matches_labels(&self, obj: &Obj) -> bool {
        (self.namespaces.is_empty()
            || obj
                .namespace()
                .is_some_and(|ns| self.namespaces.iter().any(|n| n == ns)))
            && self.labels.matches_with(|k| obj.label(k))
    }

    /// Whether the field selector reads a path not in `precomputed` (the
    /// resource's selectable fields), so matching needs the object's JSON.
    pub fn needs_json(&self, precomputed: &[&str]) -> bool {
        self.fields
            .fields()
            .any(|f| f != "metadata.name" && f != "metadata.namespace" && !precomputed.contains(&f))
    }

    /// Full match: selectable fields from the object, any other path from
    /// its JSON (`json`, parsed by the caller when [`Filter::needs_json`]).
    pub fn matches_full(&self, obj: &Obj, json: Option<&Value>, precomputed: &[&str]) -> bool {
        self.matches_labels(obj)
            && self.fields.matches_by(|path, pointer| {
                if path == "metadata.name"
                    || path == "metadata.namespace"
                    || precomputed.contains(&path)
                {
                    Cow::Borrowed(obj.field(path).unwrap_or(""))
                } else {
                    Cow::Owned(field_text(json.and_then(|j| j.pointer(pointer))))
                }
            })
    }

    /// How an event reaches a subscriber with this filter, if at all.
    pub fn deliver(&self, ev: &Arc<Event>) -> Option<Delivery> {
        let before = ev.prev.as_ref().is_some_and(|p| self.matches(p));
        let now = self.matches(&ev.obj);
        match transition(ev.kind, before, now)? {
            Transition::AsIs => Some(Delivery::Shared(ev.clone())),
            Transition::Added => Some(retyped(ev, EventType::Added, &ev.obj.json())),
            Transition::Deleted => {
                // `before` holds only with a previous version.
                let prev = ev.prev.as_ref()?;
                let mut last: Value = serde_json::from_slice(&prev.json()).ok()?;
                restamp(&mut last, ev.rv);
                let object = serde_json::to_vec(&last).ok()?;
                Some(retyped(ev, EventType::Deleted, &object))
            }
        }
    }
}

fn retyped(ev: &Event, kind: EventType, object: &[u8]) -> Delivery {
    Delivery::Retyped {
        kind,
        rv: ev.rv,
        has_id: ev.has_id,
        frame: Frame::encode(
            kind.as_str(),
            kind.as_str(),
            ev.has_id.then_some(ev.rv),
            object,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, rv: u64, app: &str, node: &str) -> Arc<Obj> {
        let v = json!({"metadata": {"name": name, "namespace": "x", "resourceVersion": rv.to_string(), "labels": {"app": app}},
            "spec": {"nodeName": node}});
        Arc::new(
            Obj::new(Some("x"), name, rv, &serde_json::to_vec(&v).unwrap()).with_selectors(
                [("app".to_string(), app.to_string())],
                &["spec.nodeName"],
                [Some(node.to_string())],
            ),
        )
    }

    fn modified(prev: Arc<Obj>, obj: Arc<Obj>) -> Arc<Event> {
        let rv = obj.resource_version();
        Arc::new(Event {
            seq: 0,
            rv,
            kind: EventType::Modified,
            frame: Frame::encode("MODIFIED", "MODIFIED", Some(rv), &obj.json()),
            obj,
            prev: Some(prev),
            has_id: true,
        })
    }

    fn filter(labels: &str, fields: &str) -> Filter {
        Filter {
            namespaces: vec![],
            labels: LabelSelector::parse(labels).unwrap(),
            fields: FieldSelector::parse(fields, &["spec.nodeName".to_string()]).unwrap(),
        }
    }

    #[test]
    fn transitions_follow_the_watch_cache() {
        let f = filter("app=web", "");
        let web1 = pod("a", 1, "web", "n1");
        let db2 = pod("a", 2, "db", "n1");
        let web3 = pod("a", 3, "web", "n2");
        let web4 = pod("a", 4, "web", "n3");
        let d = f.deliver(&modified(web1.clone(), db2.clone())).unwrap();
        assert_eq!(d.kind(), EventType::Deleted, "stops matching: DELETED");
        let obj: serde_json::Value = serde_json::from_slice(&d.frame().object()).unwrap();
        assert_eq!(
            obj["metadata"]["labels"]["app"], "web",
            "DELETED carries the last matching state"
        );
        assert_eq!(
            obj["metadata"]["resourceVersion"], "2",
            "stamped with the change's resourceVersion"
        );
        let d = f.deliver(&modified(db2.clone(), web3.clone())).unwrap();
        assert_eq!(d.kind(), EventType::Added, "starts matching: ADDED");
        assert!(matches!(
            f.deliver(&modified(web3, web4)).unwrap(),
            Delivery::Shared(_)
        ));
        assert!(
            f.deliver(&modified(db2.clone(), pod("a", 5, "db", "n1")))
                .is_none()
        );
    }

    #[test]
    fn fields_and_labels_combine() {
        let f = filter("app in (web,db)", "spec.nodeName=n1");
        assert!(f.matches(&pod("a", 1, "web", "n1")));
        assert!(!f.matches(&pod("a", 1, "web", "n2")));
        assert!(!f.matches(&pod("a", 1, "cache", "n1")));
        let name = Filter {
            fields: FieldSelector::parse("metadata.name!=a", &[]).unwrap(),
            ..Filter::default()
        };
        assert!(!name.matches(&pod("a", 1, "web", "n1")));
        assert!(name.matches(&pod("b", 1, "web", "n1")));
    }
}
