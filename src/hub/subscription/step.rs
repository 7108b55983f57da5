//! What a subscription reads from its hub's log in one go ([`Step`]), how
//! far that moves it ([`Advance`]), and what a batch writer holding it
//! must watch ([`Batchable`]): the pieces a subscription's own `poll_next`
//! and a batch writer (`transport::takeover::batch`) share, so a stream's
//! sequence is the same whichever wrote it.

use std::task::{Context, Poll};

use tokio::time::Instant;

use super::super::{Hub, Lapped, View};
use super::{Delivery, READ_BATCH, Subscription};

/// A subscription a batch writer can hold ([`Subscription::batchable`]).
#[derive(Debug, Clone, Copy)]
pub struct Batchable {
    /// Where it is in its hub's log.
    pub cursor: u64,
    /// When its credentials expire: its writer hands it back to its task
    /// then, which ends the stream or, for a refreshed session, follows
    /// the session's new end.
    pub deadline: Option<Instant>,
    /// Whether it follows an access that can change: its writer hands it
    /// back to its task when that moves ([`Subscription::poll_scope`]).
    pub scoped: bool,
}

/// The log's events after one cursor as a view shows them: what every
/// subscription of that view at that cursor is sent next.
pub struct Step {
    pub advance: Advance,
    pub deliveries: Vec<Delivery>,
}

/// Where a [`Step`] (or several, one after the other) moves a
/// subscription: [`Subscription::took`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Advance {
    /// The cursor after.
    pub cursor: u64,
    /// The last resourceVersion read that a client can resume from.
    pub(super) read_rv: Option<u64>,
    /// ... and the last one delivered.
    pub(super) sent_rv: Option<u64>,
    /// The hub's resourceVersion, when the step reached its head.
    pub caught_up: Option<u64>,
    /// The newest resourceVersion among the deliveries (with an id or
    /// not): what a framing that tracks its client's position has sent
    /// (`Framing::sent_up_to`).
    pub delivered_rv: Option<u64>,
}

impl Advance {
    /// A move to `cursor` over events none of which reaches the
    /// subscription's view (a pin tells which, `hub::pin`): what a step
    /// over them would be, had it been read. `read_rv` is the last of
    /// them a client can resume from, `caught_up` the hub's position when
    /// `cursor` was its head.
    pub fn skipped(cursor: u64, read_rv: Option<u64>, caught_up: Option<u64>) -> Advance {
        Advance {
            cursor,
            read_rv,
            sent_rv: None,
            caught_up,
            delivered_rv: None,
        }
    }

    /// This advance, then `next` (which starts where this one ends).
    pub fn then(&mut self, next: &Advance) {
        self.cursor = next.cursor;
        self.read_rv = self.read_rv.max(next.read_rv);
        self.sent_rv = next.sent_rv.or(self.sent_rv);
        self.caught_up = self.caught_up.max(next.caught_up);
        self.delivered_rv = self.delivered_rv.max(next.delivered_rv);
    }
}

impl Step {
    /// Reads up to a batch of events from `cursor` on through `view`.
    pub fn read(hub: &Hub, view: &View, from: u64) -> Result<Step, Lapped> {
        // A fresh vector per read: an idle subscriber holds no buffer.
        let mut out = Vec::new();
        let mut cursor = from;
        let caught_up = hub.read(&mut cursor, READ_BATCH, &mut out)?;
        let read_rv = out.iter().rev().find(|ev| ev.has_id).map(|ev| ev.rv);
        let deliveries = view.deliver(out);
        let sent_rv = deliveries
            .iter()
            .rev()
            .find(|d| d.has_id())
            .map(Delivery::rv);
        let delivered_rv = deliveries.iter().map(Delivery::rv).max();
        Ok(Step {
            advance: Advance {
                cursor,
                read_rv,
                sent_rv,
                caught_up,
                delivered_rv,
            },
            deliveries,
        })
    }
}

impl Subscription {
    /// Where this subscription is in its hub's log, and what a writer
    /// holding it must watch, if all it owes its client now is the log's
    /// next events through its view, framed exactly as for every other
    /// such subscription of the view at the same cursor with the same id
    /// tag: no snapshot, reset or progress mark pending, no keep-alive
    /// tick unseen, not ending, no change of access unread. Such
    /// subscriptions can be written together
    /// (`transport::takeover::batch`): [`Step::read`] once, then
    /// [`Subscription::took`] for each.
    ///
    /// This is the one place that decides whether a stream may leave its
    /// task: a new obligation of a subscription belongs here (or in
    /// [`Batchable`], for the writer to watch).
    pub fn batchable(&self) -> Option<Batchable> {
        let owes_nothing = !self.finished
            && self.snapshot.is_none()
            && self.join_after.is_none()
            && self.reset.is_none()
            && !self.announce
            && self.expires.is_none_or(|at| Instant::now() < at)
            && self.scoped.as_ref().is_none_or(|s| {
                s.pending.is_none() && s.access.source.changes().current() == s.seen
            })
            && !self.life.moved()
            && !self.life.lifecycle().is_shutting_down();
        owes_nothing.then_some(Batchable {
            cursor: self.cursor,
            deadline: self.expires,
            scoped: self.scoped.is_some(),
        })
    }

    /// Whether the access this subscription follows moved since it last
    /// read it (a writer holding it then gives it back to its task, which
    /// reads it).
    pub fn scope_moved(&self) -> bool {
        self.scoped
            .as_ref()
            .is_some_and(|s| s.access.source.changes().current() != s.seen)
    }

    /// Registers `cx` for a move of the access this subscription follows
    /// (for a writer holding it; its own task registers again when it
    /// next waits). Ready if it moved, or there is none to follow.
    pub fn poll_scope(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.scoped {
            Some(s) => s
                .access
                .source
                .changes()
                .poll_moved(s.seen, &mut s.wait, cx),
            None => Poll::Ready(()),
        }
    }

    /// Stops waiting for the hub, the lifecycle and the expiry: whoever
    /// holds the subscription now watches them for it (a batch writer),
    /// and polls it again (with its own waker) once anything but the log's
    /// events is owed.
    pub fn stop_waiting(&mut self) {
        self.hub.changes().deregister(&mut self.hub_wait);
        self.life.stop_waiting();
        self.expiry_timer = None;
    }
}

#[cfg(test)]
mod tests {
    use super::Advance;

    #[test]
    fn advances_compose_as_the_steps_they_stand_for() {
        let first = Advance {
            cursor: 5,
            read_rv: Some(10),
            sent_rv: Some(10),
            caught_up: None,
            delivered_rv: Some(10),
        };
        // Filtered out: read, nothing sent, reached the head.
        let second = Advance {
            cursor: 7,
            read_rv: Some(12),
            sent_rv: None,
            caught_up: Some(12),
            delivered_rv: None,
        };
        let mut both = first;
        both.then(&second);
        assert_eq!(
            both,
            Advance {
                cursor: 7,
                read_rv: Some(12),
                sent_rv: Some(10),
                caught_up: Some(12),
                delivered_rv: Some(10),
            },
            "the cursor and positions of the second, the last id sent of the first"
        );
    }
}
