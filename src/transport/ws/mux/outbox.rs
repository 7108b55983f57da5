//! A `/ws` socket's write half, shared by everything that writes to it:
//! the control loop (pongs, replies, pings, the Close), each
//! subscription's task, and the batch writers of the views its caught-up
//! subscriptions are parked with (`takeover::batch`), on any thread.
//!
//! One rule keeps the frames whole and each subscription's in order: the
//! socket is written *directly* (one `sendmsg`) only while nothing is
//! queued, the socket's control loop has no frame under way and no other
//! direct write is; anything else is queued, and the control loop writes
//! the queue in order (`super::SocketWriter`). A direct write claims the socket
//! under the outbox's lock and writes (and, over TLS, encrypts) outside
//! it, so the control loop and the writers of the socket's other
//! subscriptions, on other threads, queue meanwhile rather than wait for
//! a syscall; the control loop takes nothing from the queue until the
//! write is done. A direct write the socket takes only part of puts its
//! rest at the head of the queue, so nothing can come between. Over TLS
//! records its socket did not take are the control loop's to send (an
//! empty frame, at the head), and what follows queues behind them. Tasks
//! are woken after the lock is let go.
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
    /// A direct write is under way, outside the lock ([`Outbox::send_direct`]):
    /// nothing else writes the socket until it is done.
    writing: bool,
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
    /// Nothing under way or queued: the socket may be written directly.
    fn idle(&self) -> bool {
        self.direct.is_some() && !self.busy && !self.writing && self.queue.is_empty()
    }

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
            writing: false,
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
        self.lock().idle()
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
        let control = frame.take().and_then(|frame| state.push(frame));
        drop(state);
        wake(control);
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
        let control = state.push(frame);
        drop(state);
        wake(control);
        true
    }

    /// Queues a ping of the control loop's if there is room (a tick's: the
    /// next tick brings another).
    pub(super) fn try_push(&self, frame: Frame) -> bool {
        let mut state = self.lock();
        if state.closed || state.queue.len() >= OUTBOX {
            return false;
        }
        let control = state.push(frame);
        drop(state);
        wake(control);
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
        let socket = match &state.direct {
            Some(socket) if state.idle() => socket.clone(),
            _ if state.queue.len() >= OUTBOX => return Ok(Direct::Full),
            _ => {
                let control = state.push(Frame::Raw(spliced(prefix, frames)));
                drop(state);
                wake(control);
                return Ok(Direct::Sent);
            }
        };
        // The socket is this write's until it is done; the lock is not.
        state.writing = true;
        drop(state);
        let written = write_spliced(&socket, prefix, frames);
        self.written_direct(match &written {
            // A TLS session holds records its socket did not take: the
            // control loop sends them (an empty frame is a write of what
            // the session holds), and until it has, what follows (queued
            // meanwhile too) waits behind.
            Ok(Written::All) if socket.holds_records() => Some(Bytes::new()),
            Ok(Written::All) | Err(_) => None,
            // Ahead of anything queued meanwhile: part of a frame is out.
            Ok(Written::Part(went)) => Some(spliced(prefix, frames).slice(*went..)),
        });
        written.map(|_| Direct::Sent)
    }

    /// The direct write under way is done; `first` (the rest of it, or
    /// an empty frame for the records its TLS session holds) is written
    /// before anything queued meanwhile.
    fn written_direct(&self, first: Option<Bytes>) {
        let mut state = self.lock();
        state.writing = false;
        // (Unless the socket failed meanwhile, `Outbox::failed`: nothing
        // more is written.)
        let failed = state.closed && state.direct.is_none();
        if let Some(first) = first
            && !failed
        {
            state.queue.push_front(Frame::Raw(first));
        }
        // What this or others queued while the socket was this write's,
        // or the outbox closed meanwhile, is the control loop's now (its
        // `poll_next` waited for this write).
        let control = (!state.queue.is_empty() || state.closed)
            .then(|| state.control.take())
            .flatten();
        drop(state);
        wake(control);
    }

    /// The next frame to write (it is under way until [`Outbox::wrote`]);
    /// `None` once the outbox is closed and empty.
    pub(super) fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Frame>> {
        let mut state = self.lock();
        if state.writing {
            // A direct write has the socket; it wakes the control loop
            // when done if anything is queued.
            state.wait_for_control(cx);
            return Poll::Pending;
        }
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
    /// Queues `frame`: the control loop's waker, to wake once the lock is
    /// let go.
    #[must_use]
    fn push(&mut self, frame: Frame) -> Option<Waker> {
        self.queue.push_back(frame);
        self.control.take()
    }
}

fn wake(waker: Option<Waker>) {
    if let Some(waker) = waker {
        waker.wake();
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

    /// A direct write has the socket outside the lock: while it is under
    /// way the control loop takes nothing from the queue, what is queued
    /// meanwhile follows the write's rest, and the control loop is woken
    /// for them when it is done (or when the outbox closed meanwhile).
    #[test]
    fn what_is_queued_during_a_direct_write_follows_its_rest() {
        let outbox = Outbox::new();
        outbox.admit("a", 1);
        outbox.lock().busy = false;
        let (control, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert!(outbox.poll_next(&mut cx).is_pending());
        // Claimed, as `send_direct` claims it before it lets the lock go.
        outbox.lock().writing = true;
        assert!(!outbox.idle(), "nothing else writes directly meanwhile");
        assert!(outbox.push(Frame::Ping));
        assert!(
            outbox.poll_next(&mut cx).is_pending(),
            "the write has the socket"
        );
        let woken = control.0.load(Ordering::SeqCst);
        outbox.written_direct(Some(Bytes::from_static(b"rest")));
        assert!(
            control.0.load(Ordering::SeqCst) > woken,
            "woken for what was queued"
        );
        assert!(matches!(
            outbox.poll_next(&mut cx),
            Poll::Ready(Some(Frame::Raw(rest))) if &rest[..] == b"rest"
        ));
        outbox.wrote();
        assert!(matches!(
            outbox.poll_next(&mut cx),
            Poll::Ready(Some(Frame::Ping))
        ));
        outbox.wrote();
        // Nothing queued, but closed during the write: woken to end.
        assert!(outbox.poll_next(&mut cx).is_pending());
        outbox.lock().writing = true;
        outbox.close();
        assert!(outbox.poll_next(&mut cx).is_pending());
        let woken = control.0.load(Ordering::SeqCst);
        outbox.written_direct(None);
        assert!(control.0.load(Ordering::SeqCst) > woken);
        assert!(matches!(outbox.poll_next(&mut cx), Poll::Ready(None)));
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
