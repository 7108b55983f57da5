//! What a subscription wants to see of a resource.

use super::Obj;

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
