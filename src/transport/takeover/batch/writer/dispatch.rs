//! Which of a writer's streams an event reaches, so that a change costs
//! the streams it reaches and not every stream parked.
//!
//! A stream whose view pins a value (`hub::pin`: a node agent's
//! `spec.nodeName=node-7`, a namespace, a label) is visited by a pass only
//! when the log has an event whose old or new version has that value, as
//! kube-apiserver's cacher dispatches an event only to the watchers of its
//! trigger values (`startDispatching`, `valueWatchers`, in
//! `staging/src/k8s.io/apiserver/pkg/storage/cacher/cacher.go`). A stream
//! whose view pins nothing is visited by every pass, as before.
//!
//! The writer scans the log once per pass ([`Dispatch::scan`]) and looks
//! up each event's values. A pinned stream is *clean* when no event in
//! the log from its cursor up to where the scan reached can reach it:
//! such a stream is not visited, and is in effect at the scan's end; its
//! cursor is moved there ([`Dispatch::catch_up`]) only when it leaves the
//! writer or a keep-alive tick asks it what it owes, by the same
//! [`Advance`] a step over those events would have made. An event that
//! reaches a clean stream makes it *dirty*: its cursor jumps to that
//! event (the ones before it reach it not), and passes visit it, reading
//! the log through its view as every stream is read, until a step brings
//! it to the head. A stream that came in is dirty until then too.

use slab::Slab;
use std::collections::{BTreeSet, HashMap};

use super::super::Parkable;
use super::Parked;
use crate::hub::{Advance, Dim, Hub, Lapped, Pin};

/// One dimension pinned by some parked stream's view, and who pins what.
struct Pinned {
    dim: Dim,
    /// Value → the slots of the streams pinning it.
    slots: HashMap<Box<str>, Vec<usize>>,
    /// Streams registered under this dimension.
    streams: usize,
}

/// A writer's index of its streams by the values their views pin.
pub(super) struct Dispatch {
    pinned: Vec<Pinned>,
    /// Streams whose view pins nothing: every pass visits them.
    unpinned: BTreeSet<usize>,
    /// Pinned streams the next pass visits (not clean).
    dirty: BTreeSet<usize>,
    /// The log's position the scan reached: every clean stream is in
    /// effect there.
    scanned_to: u64,
    /// What a clean stream takes to be at `scanned_to`.
    implied: Advance,
    /// The last position a client can resume from that a scan read.
    last_id: Option<u64>,
}

impl Dispatch {
    pub(super) fn new(head: u64) -> Dispatch {
        Dispatch {
            pinned: Vec::new(),
            unpinned: BTreeSet::new(),
            dirty: BTreeSet::new(),
            scanned_to: head,
            implied: Advance::skipped(head, None, None),
            last_id: None,
        }
    }

    /// Whether no stream is pinned: a pass then visits every stream.
    fn none_pinned(&self) -> bool {
        self.pinned.is_empty()
    }

    /// Takes in the stream in `slot`; a pinned one is dirty until a step
    /// brings it to the head.
    pub(super) fn admit(&mut self, slot: usize, pin: Option<&Pin>) {
        let Some(pin) = pin else {
            self.unpinned.insert(slot);
            return;
        };
        let at = match self.pinned.iter().position(|p| p.dim == pin.dim) {
            Some(at) => at,
            None => {
                self.pinned.push(Pinned {
                    dim: pin.dim.clone(),
                    slots: HashMap::new(),
                    streams: 0,
                });
                self.pinned.len() - 1
            }
        };
        let pinned = &mut self.pinned[at];
        pinned.streams += 1;
        for value in &pin.values {
            pinned.slots.entry(value.clone()).or_default().push(slot);
        }
        self.dirty.insert(slot);
    }

    /// Forgets the stream in `slot`.
    pub(super) fn leave(&mut self, slot: usize, pin: Option<&Pin>) {
        let Some(pin) = pin else {
            self.unpinned.remove(&slot);
            return;
        };
        self.dirty.remove(&slot);
        let Some(at) = self.pinned.iter().position(|p| p.dim == pin.dim) else {
            return;
        };
        let pinned = &mut self.pinned[at];
        for value in &pin.values {
            if let Some(slots) = pinned.slots.get_mut(value) {
                slots.retain(|s| *s != slot);
                if slots.is_empty() {
                    pinned.slots.remove(value);
                }
            }
        }
        pinned.streams -= 1;
        if pinned.streams == 0 {
            self.pinned.swap_remove(at);
        }
    }

    /// Moves a clean stream to where the scan reached, as a step over the
    /// events it skipped (none reached it) would have: before it leaves,
    /// or a tick asks it what it owes.
    pub(super) fn catch_up<M: Parkable>(&self, parked: &mut Parked<M>) {
        // At the same cursor, the hub's position may still have moved
        // (an upstream bookmark): the stream's moves with it.
        if parked.pinned.is_none() || !parked.clean || self.implied.cursor < parked.cursor {
            return;
        }
        parked.cursor = self.implied.cursor;
        match &mut parked.taken {
            Some(taken) => taken.then(&self.implied),
            None => parked.taken = Some(self.implied),
        }
    }

    /// Reads the log's events since the last scan and marks dirty the
    /// clean streams they reach. The slots a pass visits, in order: the
    /// unpinned and the dirty; `None` if no stream is pinned (every slot).
    pub(super) fn scan<M: Parkable>(
        &mut self,
        hub: &Hub,
        streams: &mut Slab<Parked<M>>,
    ) -> Option<Vec<usize>> {
        if self.none_pinned() {
            // No stream to show clean: none to scan for.
            self.scanned_to = hub.head();
            self.implied = Advance::skipped(self.scanned_to, None, None);
            return None;
        }
        let mut cursor = self.scanned_to;
        let mut events = Vec::new();
        let caught_up = loop {
            match hub.read(&mut cursor, usize::MAX, &mut events) {
                Ok(caught_up) => break caught_up,
                Err(Lapped) => {
                    // The log moved past the last scan (a relist bigger
                    // than it): no stream can be shown clean, each reads
                    // from its own cursor and is lapped or not.
                    for (slot, parked) in streams.iter_mut() {
                        if parked.pinned.is_some() {
                            parked.clean = false;
                            self.dirty.insert(slot);
                        }
                    }
                    events.clear();
                    cursor = hub.head();
                    self.implied = Advance::skipped(cursor, None, None);
                }
            }
        };
        for event in &events {
            if event.has_id {
                self.last_id = Some(event.rv);
            }
            for pinned in &self.pinned {
                let now = pinned.dim.value(&event.obj);
                let before = event.prev.as_ref().and_then(|p| pinned.dim.value(p));
                let values = [now, before.filter(|b| Some(*b) != now)];
                for value in values.into_iter().flatten() {
                    for &slot in pinned.slots.get(value).into_iter().flatten() {
                        let Some(parked) = streams.get_mut(slot) else {
                            continue;
                        };
                        if !parked.clean {
                            continue;
                        }
                        // No event before this one reached it: it starts
                        // from here.
                        parked.clean = false;
                        if parked.cursor < event.seq {
                            parked.cursor = event.seq;
                            let skip = Advance::skipped(event.seq, None, None);
                            match &mut parked.taken {
                                Some(taken) => taken.then(&skip),
                                None => parked.taken = Some(skip),
                            }
                        }
                        self.dirty.insert(slot);
                    }
                }
            }
        }
        self.scanned_to = cursor;
        // A clean stream's position may be older than `last_id`'s event
        // or not (it read past it): its position is the greater.
        self.implied = Advance::skipped(cursor, self.last_id, caught_up);
        Some(self.unpinned.union(&self.dirty).copied().collect())
    }

    /// A pass visited the pinned stream in `slot`: clean if its step
    /// reached the head, else visited again by the next pass.
    pub(super) fn visited<M: Parkable>(&mut self, slot: usize, parked: &mut Parked<M>, head: bool) {
        if parked.pinned.is_none() {
            return;
        }
        parked.clean = head;
        if head {
            self.dirty.remove(&slot);
        } else {
            self.dirty.insert(slot);
        }
    }
}
