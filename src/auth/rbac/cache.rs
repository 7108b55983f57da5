//! Access sets cached per identity (user and groups), and kept current for
//! whoever holds them.
//!
//! One [`UserAccess`] per identity, shared by every stream of that user:
//! a thousand subscribers from a hundred users hold a hundred. When the
//! index changes, the cache asks the change which users and groups it may
//! affect ([`Affected`]) and, for each cached identity it touches,
//! recomputes the set once if someone holds it (moving its epoch if the set
//! differs), or drops it if nobody does (it is computed again when next
//! asked for). Identities the change does not touch keep their sets: those
//! are still what the index grants them.
//!
//! Untouched sets nobody holds stay cached for one-off questions until
//! [`IDLE_ENTRIES`] identities are cached; past that they are dropped.
//!
//! Holders are told through an [`Epoch`], not a `tokio::sync::watch`: it
//! is what a stream's scope (`hub::scope::ScopeSource::changes`) waits on,
//! and it wakes every waiting holder once per change without a receiver
//! per holder.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::access::AccessSet;
use super::identity::Identity;
use super::index::{Affected, Index};
use crate::epoch::Epoch;

/// Identities cached at most before those nobody holds are dropped.
pub const IDLE_ENTRIES: usize = 10_000;

/// One identity's access set, kept current while held. Everyone who holds
/// the same identity's shares one: it is recomputed once per change, and
/// its [`UserAccess::changes`] epoch moves when the set changed.
pub struct UserAccess {
    identity: Identity,
    set: Mutex<Arc<AccessSet>>,
    changes: Epoch,
}

impl UserAccess {
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The access set now.
    pub fn current(&self) -> Arc<AccessSet> {
        self.set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Moves (after [`UserAccess::current`] changed) whenever the set
    /// changes; not when a change to RBAC leaves it as it was.
    pub fn changes(&self) -> &Epoch {
        &self.changes
    }
}

impl std::fmt::Debug for UserAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserAccess")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// What one change to the index did to the cached access sets.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Refresh {
    /// Held sets the change touched, each recomputed once.
    pub recomputed: usize,
    /// Of those, the ones that differ now (their epochs moved).
    pub changed: usize,
    /// Sets nobody held that the change touched: dropped, not recomputed.
    pub dropped: usize,
}

/// A refresh whose holders are still to be woken: done by
/// [`Refreshed::announce`] once the index's lock is released.
#[derive(Default)]
#[must_use]
pub struct Refreshed {
    refresh: Refresh,
    changed: Vec<Arc<UserAccess>>,
}

impl Refreshed {
    pub fn announce(self) -> Refresh {
        for access in &self.changed {
            access.changes.advance();
        }
        self.refresh
    }
}

#[derive(Default)]
pub struct Cache {
    entries: HashMap<Identity, Arc<UserAccess>>,
    computations: u64,
}

impl Cache {
    /// The cached set of `identity`, computed now if it is not cached.
    pub fn entry(&mut self, identity: &Identity, index: &Index) -> Arc<UserAccess> {
        if let Some(entry) = self.entries.get(identity) {
            return entry.clone();
        }
        if self.entries.len() >= IDLE_ENTRIES {
            self.entries.retain(|_, entry| held(entry));
        }
        let entry = Arc::new(UserAccess {
            identity: identity.clone(),
            set: Mutex::new(self.compute(identity, index)),
            changes: Epoch::default(),
        });
        self.entries.insert(identity.clone(), entry.clone());
        entry
    }

    fn compute(&mut self, identity: &Identity, index: &Index) -> Arc<AccessSet> {
        self.computations += 1;
        Arc::new(index.evaluate(identity))
    }

    /// Brings every cached set `affected` touches up to date with `index`.
    pub fn refresh(&mut self, index: &Index, affected: &Affected) -> Refreshed {
        let mut out = Refreshed::default();
        let touched: Vec<Identity> = self
            .entries
            .keys()
            .filter(|identity| affected.touches(identity))
            .cloned()
            .collect();
        for identity in touched {
            let Some(entry) = self.entries.get(&identity) else {
                continue;
            };
            if !held(entry) {
                self.entries.remove(&identity);
                out.refresh.dropped += 1;
                continue;
            }
            let entry = entry.clone();
            let new = self.compute(&identity, index);
            out.refresh.recomputed += 1;
            let mut current = entry.set.lock().unwrap_or_else(PoisonError::into_inner);
            if **current != *new {
                *current = new;
                drop(current);
                out.refresh.changed += 1;
                out.changed.push(entry);
            }
        }
        out
    }

    pub fn computations(&self) -> u64 {
        self.computations
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn held(&self) -> usize {
        self.entries.values().filter(|entry| held(entry)).count()
    }
}

/// Whether anyone but the cache holds `entry`. Checked under the index's
/// lock, where no new holder can appear (holders come from
/// [`Cache::entry`]); one leaving meanwhile only costs a recomputation.
fn held(entry: &Arc<UserAccess>) -> bool {
    Arc::strong_count(entry) > 1
}
