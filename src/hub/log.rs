//! Appending to a hub's log: an upstream event applied to the cache and
//! logged with its shared frame (encoded once, before the lock), a
//! bookmark moving the hub's position, and the log kept within its
//! bounds ([`LogLimits`](super::LogLimits)).

use std::sync::Arc;

use super::{Event, EventType, Hub, Obj, State, event_frame};

impl Hub {
    /// Applies one upstream watch event. Returns whether an event was
    /// appended. Events at or below the current resourceVersion are
    /// replays and are ignored; an ADDED for a known object becomes
    /// MODIFIED, a MODIFIED for an unknown one ADDED, and a DELETED for an
    /// unknown one only advances the resourceVersion.
    pub fn apply(&self, kind: EventType, mut obj: Obj) -> bool {
        let rv = obj.resource_version();
        // Encoded before taking the lock that every reader waits on; redone
        // under it only if the kind is normalised (ADDED <-> MODIFIED). The
        // object keeps its JSON inside the frame: one copy per version.
        let mut encoded = (kind, event_frame(kind, rv, true, &obj.json()));
        obj.share_frame(&encoded.1);
        let mut st = self.write_state();
        if !st.synced || rv <= st.rv || st.closed.is_some() {
            return false;
        }
        // A relist held for this resourceVersion goes just before it.
        let released = self.file_pending(&mut st, rv, false);
        let key = obj.key();
        let kind = match kind {
            EventType::Added | EventType::Modified if st.cache.contains_key(&key) => {
                EventType::Modified
            }
            EventType::Added | EventType::Modified => EventType::Added,
            EventType::Deleted if st.cache.contains_key(&key) => EventType::Deleted,
            EventType::Deleted => {
                // Nothing to tell subscribers, but a waiter for this
                // resourceVersion has it now.
                st.rv = rv;
                self.publish(st);
                drop(released);
                return false;
            }
        };
        if encoded.0 != kind {
            encoded = (kind, event_frame(kind, rv, true, &obj.json()));
            obj.share_frame(&encoded.1);
        }
        let frame = encoded.1;
        let obj = Arc::new(obj);
        let prev = match kind {
            EventType::Deleted => st.cache.remove(&key),
            _ => st.cache.insert(key, obj.clone()),
        };
        st.rv = rv;
        Self::push(
            &mut st,
            Event {
                seq: 0,
                rv,
                kind,
                obj,
                prev,
                frame,
                has_id: true,
            },
        );
        let trimmed = self.trim(&mut st);
        self.publish(st);
        // Freed after the lock: an event trimmed may hold an object's
        // last version.
        drop((trimmed, released));
        self.count(kind);
        true
    }

    /// The upstream says nothing changed up to `rv` (a watch BOOKMARK).
    pub fn bookmark(&self, rv: u64) {
        self.metrics.heard_from_upstream();
        let mut st = self.write_state();
        if st.synced && rv > st.rv && st.closed.is_none() {
            // A relist held for a later resourceVersion is filed at this one.
            let released = self.file_pending(&mut st, rv, true);
            st.rv = rv;
            // Whoever waits for this resourceVersion (a resume from another
            // replica) has it now, and caught-up subscriptions move their
            // position to it.
            self.publish(st);
            drop(released);
        }
    }

    pub(super) fn count(&self, kind: EventType) {
        match kind {
            EventType::Added => self.metrics.added(),
            EventType::Modified => self.metrics.modified(),
            EventType::Deleted => self.metrics.deleted(),
        }
    }

    /// Appends `event` to the log, giving it the next `seq`.
    pub(super) fn push(st: &mut State, mut event: Event) {
        st.log_bytes += event.size();
        event.seq = st.next_seq;
        st.next_seq += 1;
        st.log.push_back(Arc::new(event));
    }

    /// Drops the oldest events past the log's bounds; they are returned,
    /// for the caller to free once it has released the lock.
    pub(super) fn trim(&self, st: &mut State) -> Vec<Arc<Event>> {
        let mut trimmed = Vec::new();
        while st.log.len() > self.limits.max_events || st.log_bytes > self.limits.max_bytes {
            let Some(old) = st.log.pop_front() else { break };
            st.log_bytes -= old.size();
            st.base_rv = old.rv;
            trimmed.push(old);
        }
        trimmed
    }
}
