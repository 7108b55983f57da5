//! What a subscription wants to see of a resource.

use std::sync::Arc;

use super::{Delivery, Event, Obj};

/// A subscription's filter. Only namespaces for now; an object never
/// changes namespace, so matching the current version is exact.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// Empty: every namespace (and cluster-scoped objects).
    pub namespaces: Vec<String>,
}

impl Filter {
    pub fn matches(&self, obj: &Obj) -> bool {
        self.namespaces.is_empty()
            || obj
                .namespace()
                .is_some_and(|ns| self.namespaces.iter().any(|n| n == ns))
    }
}

impl Filter {
    /// How an event reaches a subscriber with this filter, if at all.
    pub fn deliver(&self, ev: &Arc<Event>) -> Option<Delivery> {
        self.matches(&ev.obj).then(|| Delivery::Shared(ev.clone()))
    }
}
