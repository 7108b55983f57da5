//! A `/ws` socket's write half, shared by everything that writes to it:
//! the control loop (pongs, replies, pings, the Close), each
//! subscription's task, and the batch writers of the views its caught-up
//! subscriptions are parked with (`takeover::batch`), on any thread.
//!
//! One rule keeps the frames whole and each subscription's in order: the
//! socket is written *directly* (one `sendmsg`, under the outbox's lock)
//! only while nothing is queued and the socket's control loop has no
//! frame under way; anything else is queued, and the control loop writes
//! the queue in order (`super::Writer`). A direct write the socket takes
//! only part of queues its rest first, so nothing can come between. Over
//! TLS a direct write is encrypted into the session; records its socket
//! did not take are the control loop's to send (an empty frame, queued),
//! and what follows queues behind them.
//!
//! The queue is bounded for the subscriptions ([`OUTBOX`]: past it they
//! wait for room), and for the control loop by its reading: it reads the
//! client only while there is room ([`Outbox::has_room`]), and each
//! client message queues at most one frame (a pong, a reply), so the
//! queue holds at most [`OUTBOX`] frames and one of the control loop's
//! beyond the rest of a direct write.
//!
//! The outbox also says which subscriptions may still write
//! ([`Outbox::remove`]): a frame of one that was unsubscribed is refused
//! under the same lock the reply to the unsubscribe is queued under, so
//! nothing of it can follow that reply, whether its task or a batch writer
//! holds it. Removing one wakes it (it is waiting on its subscription, for
//! room, or parked), and it ends.

use std::collections::VecDeque;
use std::io;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use actix_ws::CloseReason;
use bytes::Bytes;
use bytestring::ByteString;

use super::splice::{Written, spliced, write_spliced};
use crate::transport::takeover::DirectSocket;

/// Frames the socket's subscriptions and control loop may have queued
/// (beyond the rest of a direct write, queued whatever this says).
pub(super) const OUTBOX: usize = 64;

/// A frame on its way to the socket.
pub(super) enum Frame {
    Text(ByteString),
    Ping,
    Pong(Bytes),
    Close(Option<CloseReason>),
    /// Whole frames, framed already (a batch writer's, for a subscription).
    Raw(Bytes),
}

pub(super) struct Outbox(Mutex<State>);

struct State {
    queue: VecDeque<Frame>,
    /// The control loop has a frame under way (or the handshake response:
    /// until [`Outbox::opened`]).
    busy: bool,
    /// The socket, for direct writes (once opened).
    direct: Option<DirectSocket>,
    /// The socket's subscriptions, in the order they were admitted (by
    /// generation), while they may write. The one list of them: the
    /// control loop looks ids up here too.
    live: Vec<Live>,
    /// Nothing more is taken: a Close is queued, or the socket is gone.
    closed: bool,
    /// A subscription ended since the control loop last looked.
    ended: bool,
    /// Some subscription waits for room in the queue ([`Live::room`]).
    waiting: bool,
    /// The control loop, while it waits for a frame to write or for a
    /// subscription to end (one task: one waker for both).
    control: Option<Waker>,
}

/// A subscription that may write: its id, and what to wake when it may
/// not any more.
///
/// A short list, not a map: a socket holds one subscription, or a few
/// (at most `--ws-max-subscriptions`), and a map allocates room for
/// several on its first entry.
struct Live {
    generation: u64,
    id: Box<str>,
    /// Its task (or its batch writer's wake-up for it), woken when it may
    /// not write any more, or when there is room again if it waits for
    /// some (`room`).
    waker: Option<Waker>,
    room: bool,
}

impl State {
    fn live(&mut self, generation: u64) -> Option<&mut Live> {
        let at = self
            .live
            .binary_search_by_key(&generation, |l| l.generation)
            .ok()?;
        Some(&mut self.live[at])
    }

    /// The subscriptions that waited for room, no longer waiting: to be
    /// woken (outside the lock).
    fn room_made(&mut self) -> Vec<Waker> {
        if !std::mem::take(&mut self.waiting) {
            return Vec::new();
        }
        self.live
            .iter_mut()
            .filter_map(|l| {
                std::mem::take(&mut l.room)
                    .then(|| l.waker.clone())
                    .flatten()
            })
            .collect()
    }

    /// The control loop (`cx`) is woken by the next frame queued or
    /// subscription ended.
    fn wait_for_control(&mut self, cx: &Context<'_>) {
        if !self
            .control
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            self.control = Some(cx.waker().clone());
        }
    }

    /// Takes subscription `generation` out of the list: what to wake.
    fn unlist(&mut self, generation: u64) -> Option<Option<Waker>> {
        let at = self
            .live
            .binary_search_by_key(&generation, |l| l.generation)
            .ok()?;
        Some(self.live.remove(at).waker)
    }
}

/// What a direct write of a subscription's frames did.
pub(super) enum Direct {
    /// All of it went, or is queued behind what was.
    Sent,
    /// Nothing went and there is no room: the subscription's task must
    /// wait for some.
    Full,
    /// The subscription may not write any more.
    Gone,
}

impl Outbox {
    pub(super) fn new() -> Outbox {
        Outbox(Mutex::new(State {
            queue: VecDeque::new(),
            busy: true,
            direct: None,
            live: Vec::new(),
            closed: false,
            ended: false,
            waiting: false,
            control: None,
        }))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The handshake response went: the socket may be written directly
    /// while nothing is under way.
    pub(super) fn opened(&self, direct: DirectSocket) {
        let mut state = self.lock();
        state.direct = Some(direct);
        state.busy = false;
    }

    /// Whether the socket can be written directly: opened, and not failed.
    pub(super) fn direct(&self) -> bool {
        self.lock().direct.is_some()
    }

    /// Whether a direct write would go onto the socket now, rather than
    /// queue: opened, nothing queued, no frame of the control loop's
    /// under way.
    pub(super) fn idle(&self) -> bool {
        let state = self.lock();
        state.direct.is_some() && !state.busy && state.queue.is_empty()
    }

    /// Subscription `id` of `generation` may write from now on;
    /// generations only grow.
    pub(super) fn admit(&self, id: &str, generation: u64) {
        let mut state = self.lock();
        if state.live.len() == state.live.capacity() && state.live.len() < 4 {
            // One at a time while they are few: most sockets hold one.
            state.live.reserve_exact(1);
        }
        state.live.push(Live {
            generation,
            id: id.into(),
            waker: None,
            room: false,
        });
    }

    /// Whether a subscription of this id may write.
    pub(super) fn holds(&self, id: &str) -> bool {
        self.lock().live.iter().any(|l| &*l.id == id)
    }

    /// How many subscriptions may write.
    pub(super) fn subscriptions(&self) -> usize {
        self.lock().live.len()
    }

    /// Subscription `id` may not write any more: nothing of it follows
    /// what is queued next. It is woken to end. False if there is none.
    pub(super) fn remove(&self, id: &str) -> bool {
        let mut state = self.lock();
        let Some(at) = state.live.iter().position(|l| &*l.id == id) else {
            return false;
        };
        let waker = state.live.remove(at).waker;
        drop(state);
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }

    /// Subscription `generation` ended (it was dropped, wherever it was):
    /// its id is free again, and the control loop is told.
    pub(super) fn ended(&self, generation: u64) {
        let mut state = self.lock();
        if state.unlist(generation).is_none() {
            // Removed already, and its id freed then.
            return;
        }
        state.ended = true;
        let control = state.control.take();
        drop(state);
        if let Some(control) = control {
            control.wake();
        }
    }

    /// Ready if a subscription ended since the control loop last looked;
    /// it is woken when one does.
    pub(super) fn poll_ended(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.lock();
        if std::mem::take(&mut state.ended) {
            return Poll::Ready(());
        }
        state.wait_for_control(cx);
        Poll::Pending
    }

    /// No subscription may write any more; each is woken to end.
    pub(super) fn remove_all(&self) {
        let live = std::mem::take(&mut self.lock().live);
        live.into_iter()
            .filter_map(|l| l.waker)
            .for_each(Waker::wake);
    }

    /// Nothing more is queued; the control loop's writing ends once it
    /// wrote what is.
    pub(super) fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        let control = state.control.take();
        let room = state.room_made();
        drop(state);
        control.into_iter().chain(room).for_each(Waker::wake);
    }

    /// Whether subscription `generation` may still write; if it may, `cx`
    /// is woken once it may not.
    pub(super) fn poll_live(&self, generation: u64, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.lock();
        match state.live(generation) {
            None => Poll::Ready(()),
            Some(live) => {
                if !live.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    live.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    /// Queues `frame` (taken from the option) for subscription
    /// `generation`, waiting for room: false if it may not write any more
    /// (nothing is queued then).
    pub(super) fn poll_push(
        &self,
        cx: &mut Context<'_>,
        frame: &mut Option<Frame>,
        generation: u64,
    ) -> Poll<bool> {
        let mut state = self.lock();
        if state.closed || state.live(generation).is_none() {
            return Poll::Ready(false);
        }
        if state.queue.len() >= OUTBOX {
            state.waiting = true;
            if let Some(live) = state.live(generation) {
                live.room = true;
                if !live.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    live.waker = Some(cx.waker().clone());
                }
            }
            return Poll::Pending;
        }
        if let Some(frame) = frame.take() {
            state.push(frame);
        }
        Poll::Ready(true)
    }

    /// Whether the subscriptions may queue more: the control loop reads
    /// the client only then.
    pub(super) fn has_room(&self) -> bool {
        self.lock().queue.len() < OUTBOX
    }

    /// Queues a frame of the control loop's (a pong, a reply, the Close),
    /// room or not (see the module's note on the bound): false if nothing
    /// more is taken.
    pub(super) fn push(&self, frame: Frame) -> bool {
        let mut state = self.lock();
        if state.closed {
            return false;
        }
        state.push(frame);
        true
    }

    /// Queues a ping of the control loop's if there is room (a tick's: the
    /// next tick brings another).
    pub(super) fn try_push(&self, frame: Frame) -> bool {
        let mut state = self.lock();
        if state.closed || state.queue.len() >= OUTBOX {
            return false;
        }
        state.push(frame);
        true
    }

    /// Writes subscription `generation`'s `frames` (a batch writer's,
    /// spliced with its `prefix`, `super::splice`) straight onto the socket if
    /// nothing is under way, or queues them behind what is.
    pub(super) fn send_direct(
        &self,
        generation: u64,
        prefix: &[u8],
        frames: &Bytes,
    ) -> io::Result<Direct> {
        let mut state = self.lock();
        if state.closed || state.live(generation).is_none() {
            return Ok(Direct::Gone);
        }
        let idle = !state.busy && state.queue.is_empty();
        let went = match (&state.direct, idle) {
            (Some(socket), true) => match write_spliced(socket, prefix, frames)? {
                Written::All if socket.holds_records() => {
                    // A TLS session holds records its socket did not
                    // take: the control loop sends them (an empty frame is
                    // a write of what the session holds), and until it
                    // has, what follows is queued behind.
                    state.push(Frame::Raw(Bytes::new()));
                    return Ok(Direct::Sent);
                }
                Written::All => return Ok(Direct::Sent),
                Written::Part(went) => went,
            },
            _ if state.queue.len() >= OUTBOX => return Ok(Direct::Full),
            _ => 0,
        };
        // Ahead of anything else: part of a frame may be out already.
        let rest = spliced(prefix, frames).slice(went..);
        state.push(Frame::Raw(rest));
        Ok(Direct::Sent)
    }

    /// The next frame to write (it is under way until [`Outbox::wrote`]);
    /// `None` once the outbox is closed and empty.
    pub(super) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Frame>> {
        let mut state = self.lock();
        match state.queue.pop_front() {
            Some(frame) => {
                state.busy = true;
                let room = state.room_made();
                drop(state);
                room.into_iter().for_each(Waker::wake);
                Poll::Ready(Some(frame))
            }
            None if state.closed => Poll::Ready(None),
            None => {
                // Frames are queued rarely once streams are caught up (a
                // ping per tick, a reply): an idle socket keeps no queue
                // (after a burst, a snapshot behind a slow socket, least
                // of all).
                if state.queue.capacity() > 0 {
                    state.queue = VecDeque::new();
                }
                state.wait_for_control(cx);
                Poll::Pending
            }
        }
    }

    /// The frame under way went whole.
    pub(super) fn wrote(&self) {
        self.lock().busy = false;
    }

    /// The socket failed: nothing more is taken, and every subscription
    /// is woken to end.
    pub(super) fn failed(&self) {
        let mut state = self.lock();
        state.closed = true;
        state.queue.clear();
        state.direct = None;
        let live = std::mem::take(&mut state.live);
        state.waiting = false;
        drop(state);
        live.into_iter()
            .filter_map(|l| l.waker)
            .for_each(Waker::wake);
    }
}

impl State {
    fn push(&mut self, frame: Frame) {
        self.queue.push_back(frame);
        if let Some(control) = self.control.take() {
            control.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    /// A waker that counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn an_id_is_held_until_its_subscription_ends_and_a_late_end_frees_no_later_one() {
        let outbox = Outbox::new();
        outbox.admit("a", 1);
        outbox.admit("b", 2);
        assert!(outbox.holds("a") && outbox.holds("b"));
        assert_eq!(outbox.subscriptions(), 2);
        // Unsubscribed: the id is free at once, and its task is woken to end.
        let (woken, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert!(outbox.poll_live(1, &mut cx).is_pending());
        assert!(outbox.remove("a"));
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert!(!outbox.holds("a"));
        assert!(outbox.poll_live(1, &mut cx).is_ready());
        assert!(!outbox.remove("a"), "nothing is left to remove");
        // Subscribed again before the first one's task ended: that late end
        // leaves the new one listed, and tells the control loop nothing.
        outbox.admit("a", 3);
        outbox.ended(1);
        assert!(outbox.holds("a"));
        assert!(outbox.poll_ended(&mut cx).is_pending());
        // A subscription that ends by itself frees its id and wakes the
        // control loop.
        let (control, control_waker) = counting();
        let mut control_cx = Context::from_waker(&control_waker);
        assert!(outbox.poll_ended(&mut control_cx).is_pending());
        outbox.ended(2);
        assert_eq!(control.0.load(Ordering::SeqCst), 1);
        assert!(!outbox.holds("b"));
        assert!(outbox.poll_ended(&mut control_cx).is_ready());
        assert!(outbox.poll_ended(&mut control_cx).is_pending());
        assert_eq!(outbox.subscriptions(), 1);
    }

    #[test]
    fn a_subscription_waiting_for_room_is_woken_when_a_frame_leaves() {
        let outbox = Outbox::new();
        outbox.admit("a", 1);
        let (woken, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..OUTBOX {
            let mut frame = Some(Frame::Ping);
            assert_eq!(outbox.poll_push(&mut cx, &mut frame, 1), Poll::Ready(true));
        }
        assert!(!outbox.has_room());
        let mut frame = Some(Frame::Ping);
        assert!(outbox.poll_push(&mut cx, &mut frame, 1).is_pending());
        assert!(frame.is_some(), "nothing was queued");
        assert_eq!(woken.0.load(Ordering::SeqCst), 0);
        // The control loop takes a frame: room, and the waiter is woken
        // (once: it is no longer waiting).
        let (_, control) = counting();
        let mut control_cx = Context::from_waker(&control);
        assert!(matches!(
            outbox.poll_next(&mut control_cx),
            Poll::Ready(Some(_))
        ));
        outbox.wrote();
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert!(matches!(
            outbox.poll_next(&mut control_cx),
            Poll::Ready(Some(_))
        ));
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert_eq!(outbox.poll_push(&mut cx, &mut frame, 1), Poll::Ready(true));
        // A socket that fails wakes whoever waits, and takes nothing more.
        let mut frame = Some(Frame::Ping);
        while outbox.poll_push(&mut cx, &mut frame, 1).is_ready() {
            frame = Some(Frame::Ping);
        }
        outbox.failed();
        assert_eq!(woken.0.load(Ordering::SeqCst), 2);
        assert_eq!(outbox.poll_push(&mut cx, &mut frame, 1), Poll::Ready(false));
    }
}
