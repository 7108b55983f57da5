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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::cache::{Cache, Objects};
use super::{Event, EventType, Hub, Obj, ObjKey, State, event_frame};

/// What a relist changed, as synthetic events.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RelistOutcome {
    pub added: usize,
    pub modified: usize,
    pub deleted: usize,
    /// The upstream's resourceVersion went backwards (e.g. an etcd restore):
    /// every cursor was lapped so that all clients take a fresh snapshot.
    pub rewound: bool,
}

impl Hub {
    /// The informer lost its watch's history (a 410) and relists with a
    /// watch beside it, whose changes it applies meanwhile: until the list
    /// is filed, the cache lacks what changed in between, and a reader that
    /// needs every change up to a resourceVersion
    /// ([`Hub::wait_for_rv`]) waits for it.
    pub fn relist_begins(&self) {
        let mut st = self.write_state();
        if st.synced {
            st.gap = true;
        }
    }

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
                let stale = st.pending.take();
                st.gap = false;
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
                drop((old, old_log, stale));
                return outcome;
            }
        };
        // This list supersedes one held for a later resourceVersion.
        let stale = st.pending.take();
        let (outcome, released) = self.file(&mut st, events, skipped, cache, rv);
        self.publish(st);
        drop((released, fresh, stale));
        outcome
    }

    /// Replaces the cache with a list taken at `rv` while a watch from at
    /// or below `rv` went on applying its events to the hub
    /// (`upstream::beside`): the cache holds
    /// the old state, and on top of it every change the watch brought,
    /// some of them after `rv`. `deleted` holds the keys that watch deleted
    /// and at which resourceVersion.
    ///
    /// The merge: a key the watch wrote after `rv` (its cached version is
    /// newer than `rv`, or the watch deleted it after `rv`) keeps what the
    /// watch made it; every other key takes the list's version, diffed into
    /// synthetic events as [`Hub::relist`] does.
    ///
    /// Where the hub is already past `rv`, those events cannot be filed at
    /// their objects' resourceVersions (behind events already sent), nor at
    /// the hub's (a stream holding it as its position would resume past
    /// them): they and the new cache are held (`State::pending`) until the
    /// next upstream event or bookmark, and filed just before it, at its
    /// resourceVersion, without ids; a bookmark gives the last one its id.
    /// A position at the hub's resourceVersion then resumes before them, and
    /// the next one after them. Until then the hub serves the state the
    /// stream already has, consistently. Where the hub is not past `rv`,
    /// nothing the watch wrote is newer than the list, and this is
    /// [`Hub::relist`].
    pub fn relist_beside(
        &self,
        objects: Vec<Obj>,
        rv: u64,
        deleted: &HashMap<ObjKey, u64>,
    ) -> RelistOutcome {
        match self.merge_beside(objects, rv, deleted) {
            Merging::Merged(merged) => self.file_merged(merged, &HashSet::new()),
            Merging::Relisted(outcome) => outcome,
        }
    }

    /// [`Hub::relist_beside`]'s merge, made under no lock and against the
    /// cache as it is now, for [`Hub::file_merged`] to hold; the watch may
    /// go on applying its events meanwhile. Where the hub is not past `rv`,
    /// this is [`Hub::relist`], and the watch must wait for it.
    pub fn merge_beside(
        &self,
        objects: Vec<Obj>,
        rv: u64,
        deleted: &HashMap<ObjKey, u64>,
    ) -> Merging {
        let planned = {
            let st = self.read_state();
            if st.closed.is_some() {
                return Merging::Relisted(RelistOutcome::default());
            }
            (st.synced && st.rv > rv).then(|| (st.rv, st.cache.objects().clone()))
        };
        let Some((from, old)) = planned else {
            return Merging::Relisted(self.relist(objects, rv));
        };
        let mut fresh: HashMap<ObjKey, Arc<Obj>> = objects
            .into_iter()
            .map(|o| (o.key(), Arc::new(o)))
            .collect();
        merge(&mut fresh, &old, rv, deleted);
        let (events, skipped) = self.encode_beside(&old, from, &mut fresh, rv);
        let cache = Cache::of(self.indexed, fresh.values().cloned());
        drop((old, fresh));
        Merging::Merged(Merged {
            from,
            events,
            skipped,
            cache,
        })
    }

    /// Holds a relist merged by [`Hub::merge_beside`] until the next
    /// upstream resourceVersion (`State::pending`). `written` holds every
    /// key the watch wrote since the merge read the cache: each keeps what
    /// the watch made it (it is newer than the list), and the merge's
    /// event for it, if any, is dropped, since streams have the watch's.
    /// The hub's log since the merge's position gives the same keys; both
    /// are read, so a change the caller did not count is not undone.
    pub fn file_merged(&self, merged: Merged, written: &HashSet<ObjKey>) -> RelistOutcome {
        let Merged {
            from,
            mut events,
            skipped,
            mut cache,
        } = merged;
        let mut st = self.write_state();
        if st.closed.is_some() {
            return RelistOutcome::default();
        }
        if st.rv != from {
            let logged = st
                .log
                .iter()
                .rev()
                .take_while(|e| e.rv > from)
                .map(|e| e.obj.key());
            let since: HashSet<ObjKey> = written.iter().cloned().chain(logged).collect();
            for key in &since {
                match st.cache.get(key) {
                    Some(live) => cache.insert(key.clone(), live.clone()),
                    None => cache.remove(key),
                };
            }
            // Those the log could not hold (`skipped`) carry no key: a
            // cursor before them is lapped anyway, and only their count can
            // be high by the keys among them written since.
            events.retain(|e| !since.contains(&e.obj.key()));
        }
        let outcome = RelistOutcome::of(&events, &skipped);
        let replaced = st.pending.replace(Pending {
            events,
            skipped,
            cache,
        });
        drop(st);
        drop(replaced);
        outcome
    }

    /// A merged relist's events: [`Hub::diff`]'s, without ids (they are
    /// filed at a later resourceVersion, [`Hub::file_pending`]).
    fn encode_beside(
        &self,
        old: &Objects,
        from: u64,
        fresh: &mut HashMap<ObjKey, Arc<Obj>>,
        rv: u64,
    ) -> (Vec<Event>, Vec<(EventType, u64)>) {
        let mut diff = Self::diff(old, from, fresh, rv);
        for planned in &mut diff {
            planned.has_id = false;
        }
        self.encode_diff(diff, fresh)
    }

    /// Files the relist held in `st.pending`, if any, at `rv`, the
    /// resourceVersion of the upstream event or bookmark that came after
    /// it; a bookmark (`id_on_last`) gives its last event the id. Returns
    /// what the swap let go, to be freed after the lock.
    pub(super) fn file_pending(&self, st: &mut State, rv: u64, id_on_last: bool) -> Released {
        let Some(Pending {
            mut events,
            mut skipped,
            cache,
        }) = st.pending.take()
        else {
            return Released::default();
        };
        for event in &mut events {
            event.rv = rv;
        }
        for s in &mut skipped {
            s.1 = rv;
        }
        if id_on_last && let Some(last) = events.last_mut() {
            last.has_id = true;
            last.frame = event_frame(last.kind, rv, true, &last.obj.json());
        }
        self.file(st, events, skipped, cache, rv).1
    }

    /// Appends a relist's events and swaps its cache in, at `rv`; counts
    /// them. What it let go is returned, to be freed after the lock.
    fn file(
        &self,
        st: &mut State,
        events: Vec<Event>,
        skipped: Vec<(EventType, u64)>,
        cache: Cache,
        rv: u64,
    ) -> (RelistOutcome, Released) {
        let outcome = RelistOutcome::of(&events, &skipped);
        for kind in skipped
            .iter()
            .map(|s| s.0)
            .chain(events.iter().map(|e| e.kind))
        {
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
            Self::push(st, event);
        }
        let old = std::mem::replace(&mut st.cache, cache);
        st.rv = rv;
        st.gap = false;
        dropped.extend(self.trim(st));
        (
            outcome,
            Released {
                _cache: Some(old),
                _events: dropped,
            },
        )
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

/// What [`Hub::merge_beside`] made.
pub enum Merging {
    /// A merge, for [`Hub::file_merged`].
    Merged(Merged),
    /// The hub was not past the list: relisted as [`Hub::relist`] does.
    Relisted(RelistOutcome),
}

/// A relist merged beside its watch, not yet held ([`Hub::file_merged`]).
pub struct Merged {
    /// The hub's resourceVersion when the merge read the cache.
    from: u64,
    events: Vec<Event>,
    skipped: Vec<(EventType, u64)>,
    cache: Cache,
}

/// One synthetic event of a relist, before it is encoded.
struct Planned {
    kind: EventType,
    rv: u64,
    has_id: bool,
    obj: Arc<Obj>,
    prev: Option<Arc<Obj>>,
}

/// A relist merged while the hub was past its list, waiting for the next
/// upstream resourceVersion to be filed at ([`Hub::relist_beside`]).
pub(super) struct Pending {
    /// Encoded without ids; their resourceVersion is set when filed.
    events: Vec<Event>,
    /// Those before them that the log could not hold.
    skipped: Vec<(EventType, u64)>,
    cache: Cache,
}

/// What a mutation let go under the lock, to be freed after it: a
/// replaced cache, trimmed events.
#[derive(Default)]
pub(super) struct Released {
    _cache: Option<Cache>,
    _events: Vec<Arc<Event>>,
}

impl RelistOutcome {
    /// What a relist's events (and those the log could not hold) change.
    fn of(events: &[Event], skipped: &[(EventType, u64)]) -> RelistOutcome {
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
        }
        outcome
    }
}

/// Merges what a watch wrote after a list at `rv` into the list
/// (`fresh`), as [`Hub::relist_beside`] says.
fn merge(
    fresh: &mut HashMap<ObjKey, Arc<Obj>>,
    cached: &Objects,
    rv: u64,
    deleted: &HashMap<ObjKey, u64>,
) {
    for (key, obj) in cached.iter() {
        if obj.resource_version() > rv {
            fresh.insert(key.clone(), obj.clone());
        }
    }
    for (key, &at) in deleted {
        if at > rv && !cached.contains_key(key) {
            fresh.remove(key);
        }
    }
}
