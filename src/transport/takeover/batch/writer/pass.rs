//! A writer's passes over its streams: the log's new events, framed once
//! per cursor and written to each stream, and a keep-alive tick's bytes;
//! both within the poll's budget of writes, resumed after a yield.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

use super::super::{Parkable, Tick};
use super::{BatchWriter, Parked};
use crate::hub::{Hub, Lapped, Step, View};
use crate::metrics::Unparked;
use crate::transport::stream::Batched;

/// A stream a pass sends back to its task: its slot, what it has to
/// write first, and why.
type Leaving = (usize, Option<(Bytes, usize)>, Unparked);

/// One try at writing `bytes` to the stream in slot `key`: true if they
/// went, or the stream's task is to write the rest (it joins `unpark`);
/// false if the connection failed (it joins `ended`).
fn send<M: Parkable>(
    key: usize,
    stream: &mut M,
    bytes: &Bytes,
    unpark: &mut Vec<Leaving>,
    ended: &mut Vec<usize>,
) -> bool {
    let rest = match stream.send_now(bytes) {
        Ok((went, all)) if went == all => {
            if stream.flushed() {
                return true;
            }
            // All of it went into its TLS session, whose records the
            // socket did not all take: its task sends them (the write,
            // all of it gone, is what makes its task flush).
            unpark.push((key, Some((bytes.clone(), went)), Unparked::Flush));
            return true;
        }
        Ok((went, _)) => went,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
        Err(_) => {
            ended.push(key);
            return false;
        }
    };
    // Its task writes the rest: sent all the same.
    unpark.push((key, Some((bytes.clone(), rest)), Unparked::Write));
    true
}

/// A pass over a writer's streams that brings each to the head of the
/// log, kept across the writer's yields.
#[derive(Default)]
pub(super) struct Pass {
    /// The steps read so far, one per view and cursor the streams were at.
    steps: Vec<Prepared>,
    /// Where each is in `steps`, by its view's address and cursor, and
    /// the one found last (streams of one view at one cursor are the
    /// usual case). The address is a key only while `steps` holds the
    /// view: no other view can be at it meanwhile, across yields too.
    index: HashMap<(usize, u64), usize>,
    last: Option<usize>,
    /// The next slot to visit.
    next: usize,
    /// A step stopped short of the head, or a stream came in meanwhile:
    /// another pass follows.
    pub(super) again: bool,
    /// The hub's position when `steps` were read.
    read_at: u64,
    /// The slots to visit, in order (`next` indexes it), when some
    /// stream is pinned; every slot (`next` is a slot) when none is.
    visit: Option<Vec<usize>>,
}

/// A step read and framed once for every stream of a view at one
/// cursor, and how many streams took it.
struct Prepared {
    /// The view it was read through, held so that its address keys
    /// `Pass::index` (a view no stream holds any more is not dropped
    /// while the pass may still look it up).
    view: Arc<View>,
    from: u64,
    step: Result<(Step, Option<Batched>), Lapped>,
    took: u64,
    /// Bytes the streams that took it count beyond its messages' own
    /// (`Parkable::extra_per_message`).
    extra: u64,
}

impl Pass {
    /// The step read for `view` at cursor `from`, if there is one.
    fn find(&mut self, view: &Arc<View>, from: u64) -> Option<usize> {
        if let Some(at) = self.last
            && Arc::ptr_eq(&self.steps[at].view, view)
            && self.steps[at].from == from
        {
            return Some(at);
        }
        let at = *self.index.get(&(address(view), from))?;
        self.last = Some(at);
        Some(at)
    }

    /// Counts what the streams took of the steps read so far, and forgets
    /// them.
    fn count_and_clear(&mut self, counters: Option<&(Counter, Counter)>) {
        if let Some((events, sent)) = counters {
            for prepared in &self.steps {
                if let Ok((_, Some(batched))) = &prepared.step {
                    events.inc_by(prepared.took * batched.messages);
                    sent.inc_by(prepared.took * batched.message_bytes + prepared.extra);
                }
            }
        }
        self.steps.clear();
        self.index.clear();
        self.last = None;
    }

    fn add(&mut self, prepared: Prepared) -> usize {
        let at = self.steps.len();
        self.index
            .insert((address(&prepared.view), prepared.from), at);
        self.steps.push(prepared);
        self.last = Some(at);
        at
    }
}

/// A view's key in `Pass::index`: its address, unique while the pass
/// holds it.
fn address(view: &Arc<View>) -> usize {
    Arc::as_ptr(view) as usize
}

/// What a pass's visit of one stream came to.
enum Visit {
    /// The budget is spent: the pass stops before this stream.
    Stopped,
    /// It was brought to the head.
    Head,
    /// It leaves the writer (its task has something to do, or its
    /// connection failed), wherever its cursor is.
    Left,
    /// Its step stopped short of the head: the next pass visits it again.
    Behind,
}

/// What visiting a stream needs of its writer besides the stream.
struct Visiting<'a> {
    hub: &'a Hub,
    counters: Option<&'a (Counter, Counter)>,
    budget: &'a mut usize,
    unpark: Vec<Leaving>,
    ended: Vec<usize>,
    /// Streams visited.
    visited: u64,
}

impl Visiting<'_> {
    /// Brings the stream in slot `key` to the head of the log, or as far
    /// as one step goes, with the steps `pass` read for its view and
    /// cursor (reading one if none is there yet).
    fn visit<M: Parkable>(&mut self, pass: &mut Pass, key: usize, parked: &mut Parked<M>) -> Visit {
        if *self.budget == 0 {
            return Visit::Stopped;
        }
        self.visited += 1;
        // Owed something of its own since it came: its task acts.
        // The clock is read at each stream with a deadline, not
        // once a pass: a pass of thousands of writes takes tens of
        // milliseconds, and nothing is sent past a credential's
        // end (a stream's own task looks before each item).
        let expired = parked.deadline.is_some_and(|at| at <= Instant::now());
        let Some(source) = parked.stream.source() else {
            self.unpark.push((key, None, Unparked::Refused));
            return Visit::Left;
        };
        if expired {
            self.unpark.push((key, None, Unparked::Deadline));
            return Visit::Left;
        }
        // Changes that came during the pass go to the streams it
        // has yet to visit with the steps they read now (as each
        // stream's own task would read up to the head when it
        // runs), not a pass later: with a pass as long as the
        // time between changes (10,000 TLS streams), waiting for
        // the next pass doubled the median delivery time. The
        // streams visited already get them in the pass that
        // follows (`hub_seen` is still the pass's start).
        let head = self.hub.changes().current();
        if head != pass.read_at {
            pass.count_and_clear(self.counters);
            pass.read_at = head;
        }
        if parked.scoped && source.subscription().scope_moved() {
            self.unpark.push((key, None, Unparked::Access));
            return Visit::Left;
        }
        // Usually one cursor per view: every stream took the last
        // step.
        let view = source.subscription().view();
        let at = match pass.find(view, parked.cursor) {
            Some(at) => at,
            None => {
                let view = view.clone();
                let step = Step::read(self.hub, &view, parked.cursor).map(|step| {
                    let batched = source.frame_step(&step);
                    (step, batched)
                });
                pass.add(Prepared {
                    view,
                    from: parked.cursor,
                    step,
                    took: 0,
                    extra: 0,
                })
            }
        };
        let prepared = &mut pass.steps[at];
        let (step, batched) = match &prepared.step {
            Ok(step) => step,
            // Its task finds it lapped and starts it over.
            Err(Lapped) => {
                self.unpark.push((key, None, Unparked::Lapped));
                return Visit::Left;
            }
        };
        let reached = if step.advance.caught_up.is_some() {
            Visit::Head
        } else {
            Visit::Behind
        };
        if step.advance.cursor == parked.cursor {
            // Nothing new in the log; but the hub's position may
            // have moved past its last event (an upstream
            // bookmark): the stream's moves with it, as its task's
            // read would move it, so that a tick tells the client.
            if step.advance.caught_up.is_some() {
                match &mut parked.taken {
                    Some(taken) => taken.then(&step.advance),
                    None => parked.taken = Some(step.advance),
                }
            }
            return reached;
        }
        pass.again |= step.advance.caught_up.is_none();
        parked.cursor = step.advance.cursor;
        match &mut parked.taken {
            Some(taken) => taken.then(&step.advance),
            None => parked.taken = Some(step.advance),
        }
        let Some(batched) = batched else {
            // Nothing this view shows: only the position moves.
            return reached;
        };
        *self.budget -= 1;
        if !send(
            key,
            &mut *parked.stream,
            &batched.bytes,
            &mut self.unpark,
            &mut self.ended,
        ) {
            return Visit::Left;
        }
        let extra = batched.messages * parked.stream.extra_per_message();
        parked.events += batched.messages;
        parked.bytes += batched.message_bytes + extra;
        prepared.took += 1;
        prepared.extra += extra;
        reached
    }
}

impl<M: Parkable> BatchWriter<M> {
    /// Brings every parked stream to the head of the log, within the
    /// poll's budget of writes: false if it stopped short (the pass goes
    /// on at the next poll). A pass visits the streams whose views pin
    /// nothing and those the log's new events reach (`dispatch`); the
    /// others are, in effect, at the head already.
    pub(super) fn deliver(&mut self) -> bool {
        loop {
            let mut pass = match self.pass.take() {
                Some(pass) => pass,
                None => {
                    // Seen before reading: a change after this point
                    // wakes the writer.
                    self.hub_seen = self.hub.changes().current();
                    let visit = self.dispatch.scan(&self.hub, &mut self.streams);
                    Pass {
                        read_at: self.hub_seen,
                        visit,
                        ..Pass::default()
                    }
                }
            };
            let BatchWriter {
                hub,
                counters,
                budget,
                streams,
                dispatch,
                ..
            } = self;
            let mut visiting = Visiting {
                hub,
                counters: counters.as_ref(),
                budget,
                unpark: Vec::new(),
                ended: Vec::new(),
                visited: 0,
            };
            let mut stopped = false;
            match pass.visit.take() {
                None => {
                    for (key, parked) in streams.iter_mut() {
                        if key < pass.next {
                            continue;
                        }
                        if let Visit::Stopped = visiting.visit(&mut pass, key, parked) {
                            pass.next = key;
                            stopped = true;
                            break;
                        }
                    }
                }
                Some(visit) => {
                    while let Some(&key) = visit.get(pass.next) {
                        let Some(parked) = streams.get_mut(key) else {
                            pass.next += 1;
                            continue;
                        };
                        match visiting.visit(&mut pass, key, parked) {
                            Visit::Stopped => {
                                stopped = true;
                                break;
                            }
                            Visit::Head => dispatch.visited(key, parked, true),
                            Visit::Behind => dispatch.visited(key, parked, false),
                            // It leaves dirty: no move past its cursor.
                            Visit::Left => {}
                        }
                        pass.next += 1;
                    }
                    pass.visit = Some(visit);
                }
            }
            let (unpark, ended) = (visiting.unpark, visiting.ended);
            self.batches.0.visited.inc_by(visiting.visited);
            self.settle_all(unpark, ended);
            if stopped {
                self.pass = Some(pass);
                return false;
            }
            pass.count_and_clear(self.counters.as_ref());
            if !pass.again {
                return true;
            }
        }
    }

    /// Writes what the keep-alive tick under way owes each stream, within
    /// the poll's budget of writes: false if it stopped short.
    pub(super) fn tick(&mut self) -> bool {
        let Some(from) = self.ticking else {
            return true;
        };
        let now = Instant::now();
        let mut unpark: Vec<Leaving> = Vec::new();
        let mut ended: Vec<usize> = Vec::new();
        let mut stopped = None;
        for (key, parked) in &mut self.streams {
            if key < from {
                continue;
            }
            if self.budget == 0 {
                stopped = Some(key);
                break;
            }
            // Past its credential's end: its task ends it, and nothing
            // more is written.
            if parked.deadline.is_some_and(|at| at <= Instant::now()) {
                unpark.push((key, None, Unparked::Deadline));
                continue;
            }
            // What the tick owes depends on where the writer brought it
            // (a clean pinned stream: where the scan reached).
            self.dispatch.catch_up(parked);
            parked.settle_here();
            match parked.stream.tick(now) {
                Tick::Nothing => {}
                Tick::Unpark => unpark.push((key, None, Unparked::Idle)),
                Tick::Send(bytes, counted) => {
                    self.budget -= 1;
                    if !send(key, &mut *parked.stream, &bytes, &mut unpark, &mut ended) {
                        continue;
                    }
                    if let Some((_, sent)) = &self.counters {
                        sent.inc_by(counted);
                    }
                }
            }
        }
        self.settle_all(unpark, ended);
        self.ticking = stopped;
        stopped.is_none()
    }

    /// Gives streams their tasks back (`rest` to write first), and ends
    /// those whose connection failed (their access-log line says so, as a
    /// task's failed write ends it).
    fn settle_all(&mut self, unpark: Vec<Leaving>, ended: Vec<usize>) {
        for (key, rest, why) in unpark {
            self.unpark(key, rest, why);
        }
        for key in ended {
            drop(self.leave(key));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Pass, Prepared};
    use crate::hub::{Filter, Hub, Lapped, LogLimits, ResourceMeta, ViewSpec};
    use crate::metrics::Metrics;

    /// A step is found for the view and cursor it was read at, and the
    /// pass holds that view until it forgets its steps: the view's
    /// address keys the pass's index, so no other view may be made at
    /// it while the pass can still find the step (the streams of a view
    /// may all leave mid-pass, and a pass lasts across the writer's
    /// yields).
    #[tokio::test]
    async fn a_pass_holds_the_views_its_steps_are_keyed_by() {
        let hub = Hub::new(
            ResourceMeta::new("pods", "v1", "Pod"),
            LogLimits::default(),
            Arc::new(Metrics::new()),
        );
        let view = hub.view(ViewSpec::new(Filter::default()));
        let other = hub.view(ViewSpec::new(Filter {
            namespaces: vec!["web".into()],
            ..Filter::default()
        }));
        let mut pass = Pass::default();
        let at = pass.add(Prepared {
            view: view.clone(),
            from: 7,
            step: Err(Lapped),
            took: 0,
            extra: 0,
        });
        let weak = Arc::downgrade(&view);
        drop(view);
        let held = weak
            .upgrade()
            .expect("the pass holds the view its step was read through");
        assert_eq!(pass.find(&held, 7), Some(at));
        assert_eq!(pass.find(&held, 8), None, "another cursor");
        assert_eq!(pass.find(&other, 7), None, "another view");
        drop(held);
        pass.count_and_clear(None);
        assert!(weak.upgrade().is_none(), "let go with the steps");
        assert_eq!(pass.find(&other, 7), None);
    }
}
