//! A hub's view table: one [`View`] per subscription spec, shared by every
//! subscription asking the same, held only while someone holds the view.

use std::hash::BuildHasher;
use std::sync::{Arc, Weak};

use super::{View, ViewSpec};

/// A hub's live views, found by their normalised spec's hash and compared
/// by the spec each view holds, so the table keeps no copy of it (a node
/// agent's view is one entry of 16 bytes, not of its 192-byte spec and its
/// strings). The hash is keyed per hub ([`RandomState`]): clients choose
/// the specs, and must not be able to choose colliding ones.
///
/// [`RandomState`]: std::hash::RandomState
#[derive(Default)]
pub(super) struct Views {
    pub(super) table: hashbrown::HashTable<(u64, Weak<View>)>,
    hasher: std::hash::RandomState,
}

impl Views {
    /// The live view of `spec` (normalised), or the one `make` makes of it,
    /// kept in the table from now on. Views no one holds any more are
    /// forgotten when a new one is made.
    pub(super) fn shared(
        &mut self,
        spec: ViewSpec,
        make: impl FnOnce(ViewSpec) -> View,
    ) -> Arc<View> {
        let hash = self.hasher.hash_one(&spec);
        let live = self
            .table
            .find(hash, |(h, v)| {
                *h == hash && v.upgrade().is_some_and(|v| *v.spec() == spec)
            })
            .and_then(|(_, v)| v.upgrade());
        if let Some(view) = live {
            return view;
        }
        self.table.retain(|(_, v)| v.strong_count() > 0);
        let view = Arc::new(make(spec));
        self.table
            .insert_unique(hash, (hash, Arc::downgrade(&view)), |(h, _)| *h);
        view
    }
}
