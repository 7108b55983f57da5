//! A relist: the upstream's fresh list replaces the cache, diffed into
//! synthetic ADDED / MODIFIED / DELETED events so that subscribers keep
//! their cursors across an upstream 410, restart or desync. The diff is
//! made under the read lock and encoded under none; only appending takes
//! the write lock.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Event, EventType, Hub, Obj, ObjKey, RelistOutcome, State, event_frame};

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
        // The diff is made under the read lock and encoded under none:
        // readers go on meanwhile, however big the relist. Only appending
        // takes the write lock.
        let planned = {
            let st = self.read_state();
            if st.closed.is_some() {
                return RelistOutcome::default();
            }
            (st.synced && rv >= st.rv).then(|| (st.rv, Self::diff(&st, &mut fresh, rv)))
        };
        let encoded = planned.map(|(from, diff)| (from, Self::encode_diff(diff, &mut fresh)));
        let mut st = self.write_state();
        if st.closed.is_some() {
            return RelistOutcome::default();
        }
        let events = match encoded {
            // The informer is the hub's one writer, so the state the diff
            // was made from is normally still there; if not, diff again.
            Some((from, events)) if st.synced && st.rv == from => events,
            _ if st.synced && rv >= st.rv => {
                let diff = Self::diff(&st, &mut fresh, rv);
                Self::encode_diff(diff, &mut fresh)
            }
            _ => {
                let outcome = RelistOutcome {
                    rewound: st.synced,
                    ..RelistOutcome::default()
                };
                st.cache = fresh;
                st.rv = rv;
                st.base_rv = rv;
                st.log.clear();
                st.log_bytes = 0;
                if outcome.rewound {
                    // Skip one seq so that every existing cursor is lapped.
                    st.next_seq += 1;
                }
                st.synced = true;
                self.publish(st);
                return outcome;
            }
        };
        let mut outcome = RelistOutcome::default();
        for event in events {
            match event.kind {
                EventType::Added => outcome.added += 1,
                EventType::Modified => outcome.modified += 1,
                EventType::Deleted => outcome.deleted += 1,
            }
            self.count(event.kind);
            Self::push(&mut st, event);
        }
        st.cache = fresh;
        st.rv = rv;
        self.trim(&mut st);
        self.publish(st);
        outcome
    }

    /// The synthetic events that take the cache of `st` to `fresh`, listed
    /// at `rv`: each with its kind, resourceVersion, whether it carries an
    /// id, the object and the version it replaces. An unchanged object
    /// keeps the cache's copy (which the log may share): `fresh` gets it.
    fn diff(st: &State, fresh: &mut HashMap<ObjKey, Arc<Obj>>, rv: u64) -> Vec<Planned> {
        let mut changes: Vec<(EventType, Arc<Obj>, Option<Arc<Obj>>)> = Vec::new();
        for (key, obj) in fresh.iter_mut() {
            match st.cache.get(key) {
                None => changes.push((EventType::Added, obj.clone(), None)),
                Some(old) if old.resource_version() != obj.resource_version() => {
                    changes.push((EventType::Modified, obj.clone(), Some(old.clone())))
                }
                Some(old) => *obj = old.clone(),
            }
        }
        let mut deleted: Vec<(EventType, Arc<Obj>, Option<Arc<Obj>>)> = st
            .cache
            .iter()
            .filter(|(key, _)| !fresh.contains_key(*key))
            .map(|(_, old)| (EventType::Deleted, old.clone(), Some(old.clone())))
            .collect();
        changes.sort_by_key(|(_, obj, _)| obj.resource_version());
        deleted.sort_by_key(|(_, obj, _)| obj.key());
        changes.extend(deleted);

        let mut last = st.rv;
        let rvs: Vec<u64> = changes
            .iter()
            .map(|(kind, obj, _)| {
                let wanted = match kind {
                    EventType::Deleted => rv,
                    _ => obj.resource_version(),
                };
                // An object older than our position that still differs can
                // only come from an inconsistent upstream: file it at the list.
                let r = if wanted <= st.rv { rv } else { wanted };
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

    /// The events of a relist's diff, encoded. An added or modified
    /// object is replaced by one whose JSON is its event's (one copy per
    /// version, as for watch events): `fresh` gets it too.
    fn encode_diff(diff: Vec<Planned>, fresh: &mut HashMap<ObjKey, Arc<Obj>>) -> Vec<Event> {
        diff.into_iter()
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
            .collect()
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
