//! A relist: the upstream's fresh list replaces the cache, diffed into
//! synthetic ADDED / MODIFIED / DELETED events so that subscribers keep
//! their cursors across an upstream 410, restart or desync.
//!
//! Nothing of its size happens under the hub's lock: the diff is made
//! against a snapshot of the cache (an O(1) clone, `hub::cache`), the
//! events are encoded and the new cache and its indexes built under no
//! lock; the write lock then only swaps the cache and appends the events,
//! and what the swap and the log's trim let go (150,000 objects, after a
//! relist that changed them all) is freed once the lock is released. So
//! a relist of 150,000 pods delays no delivery by more than the append.

use std::collections::HashMap;
use std::sync::Arc;

use super::cache::{Cache, Objects};
use super::{Event, EventType, Hub, Obj, ObjKey, RelistOutcome, event_frame};

impl Hub {
    /// Replaces the cache with a fresh list taken at `rv`. The first list
    /// syncs the hub; later ones are diffed against the cache and appended
    /// as synthetic ADDED / MODIFIED / DELETED events, so subscribers keep
    /// their cursors across an upstream relist.
    ///
    /// Synthetic events take the object's own resourceVersion (ADDED,
    /// MODIFIED) or the list's (DELETED), in that order, so resourceVersions
    /// stay non-decreasing. Where several share one, only the last carries
    /// an id: a client resumes only from the end of such a run.
    pub fn relist(&self, objects: Vec<Obj>, rv: u64) -> RelistOutcome {
        let mut fresh: HashMap<ObjKey, Arc<Obj>> = objects
            .into_iter()
            .map(|o| (o.key(), Arc::new(o)))
            .collect();
        let planned = {
            let st = self.read_state();
            if st.closed.is_some() {
                return RelistOutcome::default();
            }
            (st.synced && rv >= st.rv).then(|| (st.rv, st.cache.objects().clone()))
        };
        let planned = planned.map(|(from, old)| {
            let diff = Self::diff(&old, from, &mut fresh, rv);
            (from, self.encode_diff(diff, &mut fresh))
        });
        let mut cache = Cache::of(self.indexed, fresh.values().cloned());
        let mut st = self.write_state();
        if st.closed.is_some() {
            return RelistOutcome::default();
        }
        let (events, skipped) = match planned {
            // The informer is the hub's one writer, so the state the diff
            // was made from is normally still there; if not, diff again.
            Some((from, events)) if st.synced && st.rv == from => events,
            _ if st.synced && rv >= st.rv => {
                let from = st.rv;
                let diff = Self::diff(st.cache.objects(), from, &mut fresh, rv);
                let events = self.encode_diff(diff, &mut fresh);
                cache = Cache::of(self.indexed, fresh.values().cloned());
                events
            }
            _ => {
                let outcome = RelistOutcome {
                    rewound: st.synced,
                    ..RelistOutcome::default()
                };
                let old = std::mem::replace(&mut st.cache, cache);
                st.rv = rv;
                st.base_rv = rv;
                let old_log = std::mem::take(&mut st.log);
                st.log_bytes = 0;
                if outcome.rewound {
                    // Skip one seq so that every existing cursor is lapped.
                    st.next_seq += 1;
                }
                st.synced = true;
                self.publish(st);
                drop((old, old_log));
                return outcome;
            }
        };
        let mut outcome = RelistOutcome::default();
        for kind in skipped
            .iter()
            .map(|s| s.0)
            .chain(events.iter().map(|e| e.kind))
        {
            match kind {
                EventType::Added => outcome.added += 1,
                EventType::Modified => outcome.modified += 1,
                EventType::Deleted => outcome.deleted += 1,
            }
            self.count(kind);
        }
        let mut dropped = Vec::new();
        if let Some(&(_, last_rv)) = skipped.last() {
            // More events than the log holds: the first ones would be
            // trimmed as soon as appended, and the log before them too, so
            // they are numbered and not kept. A cursor before them is
            // lapped, as it would have been.
            dropped.extend(st.log.drain(..));
            st.log_bytes = 0;
            st.next_seq += skipped.len() as u64;
            st.base_rv = last_rv;
        }
        for event in events {
            Self::push(&mut st, event);
        }
        let old = std::mem::replace(&mut st.cache, cache);
        st.rv = rv;
        dropped.extend(self.trim(&mut st));
        self.publish(st);
        drop((old, dropped, fresh));
        outcome
    }

    /// The synthetic events that take `old` (the cache at `from`) to
    /// `fresh`, listed at `rv`: each with its kind, resourceVersion,
    /// whether it carries an id, the object and the version it replaces.
    /// An unchanged object keeps the cache's copy (which the log may
    /// share): `fresh` gets it.
    fn diff(
        old: &Objects,
        from: u64,
        fresh: &mut HashMap<ObjKey, Arc<Obj>>,
        rv: u64,
    ) -> Vec<Planned> {
        let mut changes: Vec<(EventType, Arc<Obj>, Option<Arc<Obj>>)> = Vec::new();
        for (key, obj) in fresh.iter_mut() {
            match old.get(key) {
                None => changes.push((EventType::Added, obj.clone(), None)),
                Some(old) if old.resource_version() != obj.resource_version() => {
                    changes.push((EventType::Modified, obj.clone(), Some(old.clone())))
                }
                Some(old) => *obj = old.clone(),
            }
        }
        // In key order already: the cache is.
        let deleted = old
            .iter()
            .filter(|(key, _)| !fresh.contains_key(*key))
            .map(|(_, old)| (EventType::Deleted, old.clone(), Some(old.clone())));
        changes.sort_by_key(|(_, obj, _)| obj.resource_version());
        changes.extend(deleted);

        let mut last = from;
        let rvs: Vec<u64> = changes
            .iter()
            .map(|(kind, obj, _)| {
                let wanted = match kind {
                    EventType::Deleted => rv,
                    _ => obj.resource_version(),
                };
                // An object older than our position that still differs can
                // only come from an inconsistent upstream: file it at the list.
                let r = if wanted <= from { rv } else { wanted };
                last = last.max(r);
                last
            })
            .collect();
        changes
            .into_iter()
            .enumerate()
            .map(|(i, (kind, obj, prev))| Planned {
                kind,
                rv: rvs[i],
                has_id: rvs.get(i + 1) != Some(&rvs[i]),
                obj,
                prev,
            })
            .collect()
    }

    /// The events of a relist's diff, encoded, and the kinds and
    /// resourceVersions of those before them that the log could not hold
    /// (more than its `max_events`: a cursor before them is lapped anyway,
    /// so they are not encoded). An added or modified object is replaced
    /// by one whose JSON is its event's (one copy per version, as for
    /// watch events): `fresh` gets it too.
    fn encode_diff(
        &self,
        mut diff: Vec<Planned>,
        fresh: &mut HashMap<ObjKey, Arc<Obj>>,
    ) -> (Vec<Event>, Vec<(EventType, u64)>) {
        let skip = diff.len().saturating_sub(self.limits.max_events);
        let skipped = diff.drain(..skip).map(|p| (p.kind, p.rv)).collect();
        let events = diff
            .into_iter()
            .map(|mut p| {
                if p.kind == EventType::Deleted {
                    // Its last state, as of its deletion (`Obj::restamped`).
                    p.obj = Arc::new(p.obj.restamped(p.rv));
                }
                let frame = event_frame(p.kind, p.rv, p.has_id, &p.obj.json());
                let obj = match p.kind {
                    EventType::Deleted => Arc::new(p.obj.sharing_frame(&frame)),
                    _ => {
                        let obj = Arc::new(p.obj.sharing_frame(&frame));
                        fresh.insert(obj.key(), obj.clone());
                        obj
                    }
                };
                Event {
                    seq: 0,
                    rv: p.rv,
                    kind: p.kind,
                    frame,
                    obj,
                    prev: p.prev,
                    has_id: p.has_id,
                }
            })
            .collect();
        (events, skipped)
    }
}

/// One synthetic event of a relist, before it is encoded.
struct Planned {
    kind: EventType,
    rv: u64,
    has_id: bool,
    obj: Arc<Obj>,
    prev: Option<Arc<Obj>>,
}
