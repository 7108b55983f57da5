//! A subscription whose access can change while it is open (`hub::scope`):
//! it reads its scope when the source moves, and switches what it shows by
//! the watch cache's transition rule.

use super::super::scope::{Scoping, scope_tag, shown};
use super::super::transition::{Transition, transition};
use super::super::{EventType, Frame};
use super::{Delivery, Denial, Subscription};
use crate::epoch::Registration;

/// A subscription's access as it follows it (boxed: most have none).
pub(super) struct Scoped {
    pub(super) access: Scoping,
    /// The source's epoch when the scope was last read.
    pub(super) seen: u64,
    pub(super) wait: Registration,
    /// The tag of the namespaces shown now (see `hub::scope`).
    pub(super) tag: Option<String>,
    /// Namespaces to show once the cursor is caught up.
    pub(super) pending: Option<Vec<String>>,
}

impl Subscription {
    /// Reads the scope if its source moved: the denial that ends the
    /// stream, or the namespaces to show once caught up.
    pub(super) fn follow_scope(&mut self) -> Option<Denial> {
        let scoped = self.scoped.as_mut()?;
        let epoch = scoped.access.source.changes().current();
        if epoch == scoped.seen {
            return None;
        }
        scoped.seen = epoch;
        match shown(&scoped.access.requested, &scoped.access.source.scope()) {
            Err(denial) => return Some(denial),
            Ok(now) if now != self.view.spec().filter.namespaces => scoped.pending = Some(now),
            Ok(_) => scoped.pending = None,
        }
        None
    }

    /// Switches to showing `namespaces`: what the client loses arrives as
    /// DELETED, what it gains as ADDED, at its current position (the
    /// transition rule, `hub::transition`). `None` when the cursor is not
    /// caught up: the client's state is then not the cache's.
    pub(super) fn rescope(&mut self, namespaces: &[String]) -> Option<Vec<Delivery>> {
        let mut spec = self.view.spec().clone();
        spec.filter.namespaces = namespaces.to_vec();
        let old = self.view.clone();
        let new = self.hub.view(spec);
        // What either shows: the namespaces of both (all, if either has all).
        let mut both = old.spec().filter.clone();
        both.namespaces = match (&both.namespaces, namespaces) {
            (was, now) if was.is_empty() || now.is_empty() => Vec::new(),
            (was, now) => was.iter().chain(now).cloned().collect(),
        };
        let (snapshot, rv) = self.hub.objects_at(self.cursor, &both)?;
        let objects = snapshot.collect(&|o| old.prefilter(o) || new.prefilter(o));
        let mut changed = Vec::new();
        for obj in &objects {
            let before = old.snapshot(std::slice::from_ref(obj)).pop();
            let now = new.snapshot(std::slice::from_ref(obj)).pop();
            let (kind, frame) = match (
                transition(EventType::Modified, before.is_some(), now.is_some()),
                before,
                now,
            ) {
                (Some(Transition::Added), _, Some(now)) => (
                    EventType::Added,
                    Frame::encode("ADDED", "ADDED", None, &now),
                ),
                (Some(Transition::Deleted), Some(before), _) => (
                    EventType::Deleted,
                    Frame::encode("DELETED", "DELETED", None, &before),
                ),
                _ => continue,
            };
            changed.push(Delivery::Retyped {
                kind,
                rv,
                has_id: false,
                frame,
            });
        }
        self.view = new;
        if let Some(scoped) = &mut self.scoped {
            scoped.tag = scope_tag(&scoped.access.requested, namespaces);
        }
        self.pos_rv = self.pos_rv.max(rv);
        self.announce = true;
        Some(changed)
    }
}
