//! What a node agent makes of its stream: its messages, parsed into
//! [`Frame`]s ([`super::frame`]), folded into the state the agent holds (each
//! pod's name and resourceVersion), as the integration tests fold a stream
//! (`tests/gateway/`): a snapshot replaces the state at its end marker, a
//! `RESET` starts a new snapshot, changes apply in order.
//!
//! Positions: on SSE and WebSocket, the `id`s (a relist's run of events
//! shares one, carried by its last event only, so the events before it
//! wait for it); on the watch face, the objects' and bookmarks'
//! resourceVersions. With a freeze at `L` (the resourceVersion of the LIST
//! the state is compared with), changes past `L` are not applied, so the
//! state compared is the one at `L` even while the cluster goes on
//! changing.

use std::collections::HashMap;

use super::frame::{Frame, Id, Kind};

/// One applied step, and how to take it back.
#[derive(Debug)]
enum Undo {
    /// An object's resourceVersion before it (`None`: absent).
    Object {
        at: u64,
        key: String,
        before: Option<u64>,
    },
    /// The state before a snapshot replaced it.
    State {
        at: u64,
        before: HashMap<String, u64>,
    },
}

/// What a frame asks of the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Go,
    /// A snapshot (or a watch's initial events) is complete.
    SnapshotEnd,
    /// An `ERROR` (a watch's 410 Expired: relist).
    Error(Option<u16>),
}

/// An agent's state and position.
#[derive(Debug, Default)]
pub struct Fold {
    /// `namespace/name` → resourceVersion.
    pub state: HashMap<String, u64>,
    /// A snapshot being received (at the start, after a `RESET`, or a
    /// watch's initial events): it replaces `state` at its end.
    snapshot: Option<HashMap<String, u64>>,
    /// Changes whose run's id has not come yet (SSE, WebSocket).
    pending: Vec<Frame>,
    pub position: u64,
    /// Positions come from ids (SSE, WebSocket), else from the objects'
    /// resourceVersions (the watch face).
    ids: bool,
    /// Changes past this position are not applied.
    freeze: Option<u64>,
    /// What was applied since [`Fold::keep_undo`], to take back what is
    /// past the freeze once it is known (the agent may be ahead of the
    /// list that sets it).
    undo: Option<Vec<Undo>>,
    /// The node the agent watches (`None`: every pod).
    node: Option<String>,
    pub resets: u64,
    pub snapshots: u64,
    /// Changes received after a snapshot.
    pub changes: u64,
    /// Objects not on the agent's node (must be 0).
    pub leaked: u64,
    /// Positions that went backwards (must be 0).
    pub backwards: u64,
}

impl Fold {
    /// A fold waiting for its first snapshot.
    pub fn new(ids: bool, node: Option<String>) -> Fold {
        Fold {
            ids,
            node,
            snapshot: Some(HashMap::new()),
            ..Fold::default()
        }
    }

    /// Whether a snapshot is being received.
    pub fn in_snapshot(&self) -> bool {
        self.snapshot.is_some()
    }

    /// A new snapshot follows (a watch's initial events after a relist).
    pub fn expect_snapshot(&mut self) {
        self.pending.clear();
        self.snapshot = Some(HashMap::new());
    }

    /// A LIST's items replace the state (LIST then WATCH).
    pub fn listed(
        &mut self,
        items: impl IntoIterator<Item = (String, u64, Option<String>)>,
        rv: u64,
    ) {
        self.pending.clear();
        self.snapshot = None;
        self.state.clear();
        for (key, object_rv, node) in items {
            self.check_node(node.as_deref());
            self.state.insert(key, object_rv);
        }
        self.advance(rv);
        self.snapshots += 1;
    }

    /// Changes past `at` are no longer applied.
    /// Takes back what was applied past it since [`Fold::keep_undo`];
    /// only the first freeze counts.
    pub fn freeze_at(&mut self, at: u64) {
        if self.freeze.is_some() {
            return;
        }
        self.freeze = Some(at);
        // The newest first. Steps are nearly in position order: a relist
        // run's events take their objects' own resourceVersions, which
        // may be older than the step before, so every step is looked at.
        for step in self.undo.take().unwrap_or_default().into_iter().rev() {
            match step {
                Undo::Object { at: p, key, before } if p > at => match before {
                    Some(rv) => {
                        self.state.insert(key, rv);
                    }
                    None => {
                        self.state.remove(&key);
                    }
                },
                Undo::State { at: p, before } if p > at => self.state = before,
                _ => {}
            }
        }
    }

    /// From now on, remember how to take back what is applied, until the
    /// freeze.
    pub fn keep_undo(&mut self) {
        if self.freeze.is_none() && self.undo.is_none() {
            self.undo = Some(Vec::new());
        }
    }

    /// Whether the stream has reached `at` with a whole state.
    pub fn reached(&self, at: u64) -> bool {
        self.position >= at && self.snapshot.is_none() && self.pending.is_empty()
    }

    /// The state, sorted by key.
    pub fn sorted(&self) -> Vec<(String, u64)> {
        let mut all: Vec<_> = self.state.iter().map(|(k, v)| (k.clone(), *v)).collect();
        all.sort_unstable();
        all
    }

    fn check_node(&mut self, node: Option<&str>) {
        if self.node.as_deref().is_some_and(|n| Some(n) != node) {
            self.leaked += 1;
        }
    }

    fn advance(&mut self, to: u64) {
        if to < self.position {
            self.backwards += 1;
        }
        self.position = self.position.max(to);
    }

    /// Applies the pending run once its position is known. A run's
    /// events before its last have no id, and a view that is sent only
    /// some of them learns the run's position from the next id: the next
    /// change, or the progress `BOOKMARK` up to a keep-alive interval
    /// later (PROTOCOL, "Progress"), which may come after the freeze. Each
    /// event holds the state at its own resourceVersion (a relist's ADDED
    /// and MODIFIED, the object's; its DELETED, the list's), so those at
    /// or before the freeze are applied whatever the position that
    /// resolves them; the rest are not.
    fn resolve(&mut self, at: u64) {
        let run = std::mem::take(&mut self.pending);
        for frame in &run {
            let own = frame.rv.unwrap_or(at).min(at);
            if self.freeze.is_some_and(|f| own > f) {
                continue;
            }
            let before = apply(&mut self.state, frame);
            if let (Some(undo), Some(key)) = (&mut self.undo, &frame.key) {
                undo.push(Undo::Object {
                    at: own,
                    key: key.clone(),
                    before,
                });
            }
        }
        self.advance(at);
    }

    pub fn take(&mut self, frame: Frame) -> Outcome {
        match frame.kind {
            Kind::Error => return Outcome::Error(frame.code),
            Kind::Reset => {
                self.resets += 1;
                self.expect_snapshot();
            }
            Kind::Bookmark => {
                let at = match frame.id {
                    Id::At(at) => Some(at),
                    _ => frame.rv,
                };
                if frame.end
                    && let Some(snapshot) = self.snapshot.take()
                {
                    self.snapshots += 1;
                    let at = at.unwrap_or(self.position);
                    if self.freeze.is_none_or(|f| at <= f) {
                        let before = std::mem::replace(&mut self.state, snapshot);
                        if let Some(undo) = &mut self.undo {
                            undo.push(Undo::State { at, before });
                        }
                    }
                    // A snapshot's position may be older than a position
                    // before a reset (an upstream rewind): not a step back.
                    self.position = at.max(self.position);
                    self.pending.clear();
                    return Outcome::SnapshotEnd;
                }
                if let Some(at) = at {
                    self.resolve(at);
                }
            }
            Kind::Added | Kind::Modified | Kind::Deleted => {
                self.check_node(frame.node.as_deref());
                if let Some(snapshot) = &mut self.snapshot {
                    apply(snapshot, &frame);
                    return Outcome::Go;
                }
                self.changes += 1;
                if self.ids {
                    let id = frame.id;
                    self.pending.push(frame);
                    if let Id::At(at) = id {
                        self.resolve(at);
                    }
                } else {
                    let at = frame.rv.unwrap_or(self.position);
                    self.pending.push(frame);
                    self.resolve(at);
                }
            }
        }
        Outcome::Go
    }
}

/// Applies a change; the object's resourceVersion before it.
fn apply(state: &mut HashMap<String, u64>, frame: &Frame) -> Option<u64> {
    let key = frame.key.as_ref()?;
    match frame.kind {
        Kind::Added | Kind::Modified => state.insert(key.clone(), frame.rv.unwrap_or(0)),
        Kind::Deleted => state.remove(key),
        _ => state.get(key).copied(),
    }
}

/// How an agent's state differs from what the upstream holds for it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Mismatch {
    /// Objects the upstream has and the agent does not.
    pub missing: u64,
    /// Objects the agent has and the upstream does not.
    pub extra: u64,
    /// Objects both have, at different resourceVersions.
    pub stale: u64,
}

impl Mismatch {
    pub fn total(&self) -> u64 {
        self.missing + self.extra + self.stale
    }
}

/// Compares a folded state (sorted by key) with the upstream's objects.
pub fn compare<'a>(
    state: &[(String, u64)],
    upstream: impl Iterator<Item = (&'a String, &'a u64)>,
) -> Mismatch {
    let mut m = Mismatch::default();
    let mine: HashMap<&str, u64> = state.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let mut seen = 0;
    for (key, rv) in upstream {
        match mine.get(key.as_str()) {
            None => m.missing += 1,
            Some(v) => {
                seen += 1;
                if v != rv {
                    m.stale += 1;
                }
            }
        }
    }
    m.extra = (mine.len() - seen) as u64;
    m
}

/// Up to `n` of the objects on which a state and the upstream differ:
/// (key, the agent's resourceVersion, the upstream's).
pub fn differences(
    state: &[(String, u64)],
    upstream: &HashMap<String, u64>,
    n: usize,
) -> Vec<(String, Option<u64>, Option<u64>)> {
    let mine: HashMap<&str, u64> = state.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let mut out: Vec<_> = upstream
        .iter()
        .filter(|(k, v)| mine.get(k.as_str()) != Some(*v))
        .map(|(k, v)| (k.clone(), mine.get(k.as_str()).copied(), Some(*v)))
        .take(n)
        .collect();
    out.extend(
        state
            .iter()
            .filter(|(k, _)| !upstream.contains_key(k))
            .map(|(k, v)| (k.clone(), Some(*v), None))
            .take(n - out.len().min(n)),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::frame::tests::{bookmark, frame, pod};

    #[test]
    fn a_snapshot_replaces_the_state_at_its_end_and_changes_apply_in_order() {
        let mut fold = Fold::new(true, Some("n".into()));
        assert_eq!(
            fold.take(frame(&pod("ADDED", "a", 3, "n"), Id::Absent)),
            Outcome::Go
        );
        fold.take(frame(&pod("ADDED", "b", 4, "n"), Id::Absent));
        assert!(fold.state.is_empty() && !fold.reached(0));
        assert_eq!(
            fold.take(frame(&bookmark(10, true), Id::At(10))),
            Outcome::SnapshotEnd
        );
        assert_eq!(fold.sorted(), [("ns/a".into(), 3), ("ns/b".into(), 4)]);
        assert!(fold.reached(10) && !fold.reached(11));
        fold.take(frame(&pod("MODIFIED", "a", 11, "n"), Id::At(11)));
        fold.take(frame(&pod("DELETED", "b", 12, "n"), Id::At(12)));
        fold.take(frame(&bookmark(20, false), Id::At(20)));
        assert_eq!(fold.sorted(), [("ns/a".into(), 11)]);
        assert_eq!(
            (fold.position, fold.changes, fold.leaked, fold.backwards),
            (20, 2, 0, 0)
        );
        // A RESET: the old state stands until the new snapshot ends.
        fold.take(frame(
            r#"{"type":"RESET","object":{"code":410}}"#,
            Id::Empty,
        ));
        fold.take(frame(&pod("ADDED", "c", 25, "n"), Id::Absent));
        assert_eq!(fold.sorted(), [("ns/a".into(), 11)]);
        assert!(!fold.reached(20));
        fold.take(frame(&bookmark(30, true), Id::At(30)));
        assert_eq!(fold.sorted(), [("ns/c".into(), 25)]);
        assert_eq!((fold.resets, fold.snapshots), (1, 2));
    }

    #[test]
    fn a_relist_run_waits_for_its_id_and_a_freeze_keeps_the_state_at_its_position() {
        let mut fold = Fold::new(true, Some("n".into()));
        fold.take(frame(&bookmark(10, true), Id::At(10)));
        // A relist's run: only its last event has the id.
        fold.take(frame(&pod("MODIFIED", "a", 12, "n"), Id::Absent));
        fold.take(frame(&pod("ADDED", "b", 14, "n"), Id::Absent));
        assert!(fold.state.is_empty() && !fold.reached(10), "pending");
        fold.take(frame(&pod("DELETED", "c", 15, "n"), Id::At(15)));
        assert_eq!(fold.sorted(), [("ns/a".into(), 12), ("ns/b".into(), 14)]);
        fold.freeze_at(16);
        fold.take(frame(&pod("MODIFIED", "a", 16, "n"), Id::At(16)));
        fold.take(frame(&pod("MODIFIED", "a", 17, "n"), Id::At(17)));
        fold.take(frame(&pod("DELETED", "b", 18, "n"), Id::At(18)));
        assert_eq!(fold.sorted(), [("ns/a".into(), 16), ("ns/b".into(), 14)]);
        assert!(fold.reached(16) && fold.position == 18);
        // A run only partly this view's, resolved past the freeze by a
        // progress BOOKMARK: what it holds at or before the freeze holds.
        fold.take(frame(&pod("ADDED", "d", 14, "n"), Id::Absent));
        fold.take(frame(&pod("DELETED", "a", 16, "n"), Id::Absent));
        fold.take(frame(&pod("ADDED", "e", 18, "n"), Id::Absent));
        fold.take(frame(&bookmark(18, false), Id::At(18)));
        assert_eq!(fold.sorted(), [("ns/b".into(), 14), ("ns/d".into(), 14)]);
        // Another node's pod is a leak; a step back is counted.
        fold.take(frame(&pod("MODIFIED", "z", 19, "other"), Id::At(19)));
        fold.take(frame(&bookmark(5, false), Id::At(5)));
        assert_eq!((fold.leaked, fold.backwards), (1, 1));
    }

    #[test]
    fn a_freeze_takes_back_what_was_applied_past_it() {
        let mut fold = Fold::new(true, None);
        fold.take(frame(&pod("ADDED", "a", 3, "n"), Id::Absent));
        fold.take(frame(&bookmark(10, true), Id::At(10)));
        fold.keep_undo();
        fold.take(frame(&pod("MODIFIED", "a", 11, "n"), Id::At(11)));
        fold.take(frame(&pod("ADDED", "b", 12, "n"), Id::At(12)));
        fold.take(frame(&pod("DELETED", "a", 13, "n"), Id::At(13)));
        // A RESET past the freeze, its snapshot taken back too.
        fold.take(frame(
            r#"{"type":"RESET","object":{"code":410}}"#,
            Id::Empty,
        ));
        fold.take(frame(&pod("ADDED", "c", 14, "n"), Id::Absent));
        fold.take(frame(&bookmark(15, true), Id::At(15)));
        assert_eq!(fold.sorted(), [("ns/c".into(), 14)]);
        // The list said 11: the agent was ahead of it.
        fold.freeze_at(11);
        assert_eq!(fold.sorted(), [("ns/a".into(), 11)]);
        fold.freeze_at(10);
        assert_eq!(
            fold.sorted(),
            [("ns/a".into(), 11)],
            "the first freeze counts"
        );
        assert!(fold.reached(11));
    }

    #[test]
    fn watch_positions_are_resource_versions_and_a_list_then_watch_starts_from_the_list() {
        let mut fold = Fold::new(false, Some("n".into()));
        fold.take(frame(&pod("ADDED", "a", 3, "n"), Id::Absent));
        assert_eq!(
            fold.take(frame(&bookmark(8, true), Id::Absent)),
            Outcome::SnapshotEnd
        );
        fold.take(frame(&pod("MODIFIED", "a", 9, "n"), Id::Absent));
        assert_eq!(fold.sorted(), [("ns/a".into(), 9)]);
        fold.take(frame(&bookmark(12, false), Id::Absent));
        assert!(fold.reached(12));
        let expired = frame(
            r#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#,
            Id::Absent,
        );
        assert_eq!(fold.take(expired), Outcome::Error(Some(410)));
        let mut listed = Fold::new(false, Some("n".into()));
        listed.listed(
            [
                ("ns/a".to_string(), 3, Some("n".to_string())),
                ("ns/x".into(), 4, None),
            ],
            7,
        );
        assert!(listed.reached(7));
        assert_eq!((listed.leaked, listed.state.len()), (1, 2));
        listed.freeze_at(7);
        listed.take(frame(&pod("DELETED", "a", 8, "n"), Id::Absent));
        assert_eq!(listed.state.len(), 2, "past the freeze");
    }

    #[test]
    fn a_comparison_counts_missing_extra_and_stale_objects() {
        let upstream: HashMap<String, u64> =
            [("a".to_string(), 1), ("b".into(), 2), ("c".into(), 3)].into();
        let state = vec![("a".to_string(), 1), ("b".into(), 5), ("d".into(), 4)];
        let m = compare(&state, upstream.iter());
        assert_eq!(
            m,
            Mismatch {
                missing: 1,
                extra: 1,
                stale: 1
            }
        );
        assert_eq!(m.total(), 3);
        let same: Vec<(String, u64)> = upstream.iter().map(|(k, v)| (k.clone(), *v)).collect();
        assert_eq!(compare(&same, upstream.iter()).total(), 0);
        let mut diff = differences(&state, &upstream, 5);
        diff.sort();
        assert_eq!(
            diff,
            [
                ("b".into(), Some(5), Some(2)),
                ("c".into(), None, Some(3)),
                ("d".into(), Some(4), None)
            ]
        );
        assert_eq!(differences(&state, &upstream, 1).len(), 1);
    }
}
