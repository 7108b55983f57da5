//! The watch-cache transition rule, written once: how a change shows to a
//! subscriber whose filter may have matched the object before it and may
//! match it after.
//!
//! kube-apiserver's watch cache decides it in `cacheWatcher.convertToWatchEvent`
//! (k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go): a change that
//! starts matching is ADDED, one that stops matching is DELETED carrying the
//! previous object stamped with the change's resourceVersion, one that
//! matches both before and after keeps its type, one that matches neither is
//! not sent. Filters and views use this function; so will a subscription
//! whose filter itself changes (the objects it gains and loses follow the
//! same rule).

use serde_json::Value;

use super::EventType;

/// How a change reaches a subscriber, if at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// As it happened upstream: the event's own type and object.
    AsIs,
    /// The object starts matching: an ADDED carrying its new state.
    Added,
    /// The object stops matching: a DELETED carrying its last matching
    /// state, stamped with the change's resourceVersion ([`restamp`]).
    Deleted,
}

/// The rule. `before`: the filter matched the previous version (false when
/// there is none); `now`: it matches the event's object (for a DELETED, the
/// object's last state).
pub fn transition(kind: EventType, before: bool, now: bool) -> Option<Transition> {
    match (kind, before, now) {
        (EventType::Added | EventType::Deleted, _, true) => Some(Transition::AsIs),
        (EventType::Added | EventType::Deleted, _, false) => None,
        (EventType::Modified, true, true) => Some(Transition::AsIs),
        (EventType::Modified, false, true) => Some(Transition::Added),
        (EventType::Modified, true, false) => Some(Transition::Deleted),
        (EventType::Modified, false, false) => None,
    }
}

/// Sets `metadata.resourceVersion` of `object` to `rv`: the last matching
/// state of an object that stopped matching, as of the change that made it
/// stop.
pub fn restamp(object: &mut Value, rv: u64) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), rv.to_string().into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_that_start_or_stop_matching_are_added_or_deleted() {
        use EventType::{Added, Deleted, Modified};
        use Transition as T;
        assert_eq!(transition(Modified, false, true), Some(T::Added));
        assert_eq!(transition(Modified, true, false), Some(T::Deleted));
        assert_eq!(transition(Modified, true, true), Some(T::AsIs));
        assert_eq!(transition(Modified, false, false), None);
        for kind in [Added, Deleted] {
            assert_eq!(transition(kind, false, true), Some(T::AsIs));
            assert_eq!(transition(kind, true, true), Some(T::AsIs));
            assert_eq!(transition(kind, true, false), None);
        }
        let mut obj = serde_json::json!({"metadata": {"name": "a", "resourceVersion": "3"}});
        restamp(&mut obj, 7);
        assert_eq!(obj["metadata"]["resourceVersion"], "7");
    }
}
