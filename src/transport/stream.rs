//! One path from a subscription's items to bytes.
//!
//! [`Framed`] pulls a [`Subscription`], turns each item into
//! [`Message`]s (`message::messages_of`), counts the deliveries, and hands
//! every message to the transport's [`Framing`]: that is all a transport
//! supplies (SSE frames, Kubernetes watch lines, WebSocket text messages).
//! Where the framed bytes go is the writer's business: a taken-over socket
//! today (`transport::takeover`), and anything else that takes chunks.
//!
//! Byte framings write into a [`Chunk`], which passes one shared frame
//! through without a copy (the common case: one event, many subscribers)
//! and joins several into one buffer sized once.

use std::task::{Context, Poll, ready};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use prometheus_client::metrics::counter::Counter;

use super::access_log::{Delivered, StreamRecord};
use super::message::{Message, messages_of};
use crate::hub::encode::ADDED_FRAMING;
use crate::hub::{Advance, Batchable, Item, ResourceMeta, Step, Subscription};
use crate::metrics::Transport;

/// A streaming response body produced one chunk at a time. It is polled,
/// not awaited: a source keeps what it waits for in its fields, so the
/// writer that polls it is the whole of a stream's task.
pub trait ChunkSource: Send + Unpin + 'static {
    /// The next chunk to write, `None` when the stream is over, `Pending`
    /// (with `cx`'s waker registered) while there is none.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>>;

    /// The stream's framed subscription, when this source can be written
    /// in a batch with the others of its view (`takeover::batch`): once it
    /// has sent everything of its own (a preamble, say), all it sends is
    /// its subscription's events, framed by the events alone.
    fn batch(&mut self) -> Option<&mut dyn BatchSource> {
        None
    }
}

/// What a framing needs to know of its stream.
pub struct Stream<'a> {
    pub meta: &'a ResourceMeta,
    /// The tag this stream's ids carry after the resourceVersion
    /// (`RV~TAG`), when access narrows it (`hub::scope`).
    pub tag: Option<&'a str>,
}

impl Stream<'_> {
    /// The id of position `rv` on this stream.
    pub fn id(&self, rv: u64) -> String {
        match self.tag {
            Some(tag) => format!("{rv}~{tag}"),
            None => rv.to_string(),
        }
    }
}

/// How one transport frames messages.
pub trait Framing {
    /// Where framed messages collect until the writer takes them.
    type Out: Default;

    /// Frames `msg` into `out`. False when the stream ends after it.
    fn frame(&mut self, msg: Message<'_>, stream: &Stream<'_>, out: &mut Self::Out) -> bool;

    /// About `bytes` of several shared frames follow: room for them.
    fn reserve(&mut self, _out: &mut Self::Out, _bytes: usize) {}

    /// Events up to `rv` were sent on this stream in bytes another
    /// stream's framing made (a batch writer's,
    /// `transport::takeover::batch`): what [`Framing::frame`] would have
    /// learnt from them.
    fn sent_up_to(&mut self, _rv: u64) {}

    /// What was framed into `out`, as one buffer of whole messages as they
    /// go on the wire, and how many of those bytes are the messages' own
    /// (what a stream counts as sent: without a WebSocket's frame
    /// headers); `None` if nothing was framed. The bytes a batch writer
    /// sends to every stream at one cursor (`takeover::batch`).
    fn batched(out: Self::Out) -> Option<(Bytes, u64)>;
}

/// A subscription and its transport's framing. When it is dropped, the
/// stream's access-log line says what it delivered and how it ended.
///
/// One lives as long as its stream, for each of thousands of subscribers:
/// what the hub already holds (the resource's name and kinds) is read from
/// it, not copied here (`loadtest/RESULTS.md`, memory per subscriber).
pub struct Framed<F> {
    sub: Subscription,
    framing: F,
    /// The events and bytes sent on the stream's resource and transport:
    /// counted here while its task writes it, and by its batch writer for
    /// all its parked streams at once ([`BatchSource::counters`]). The
    /// transports count nothing themselves.
    sent: Counter,
    bytes: Counter,
    ended: bool,
    record: StreamRecord,
    delivered: Delivered,
    /// Why the stream ended, once known; otherwise its connection closed.
    how: Option<Box<str>>,
}

impl<F: Framing> Framed<F> {
    pub fn new(sub: Subscription, framing: F, transport: Transport, principal: &str) -> Self {
        let metrics = sub.hub().metrics();
        Framed {
            sent: metrics.events_sent(sub.hub().name(), transport),
            bytes: metrics.bytes_sent(sub.hub().name(), transport),
            record: StreamRecord {
                principal: principal.into(),
                transport,
                started: Instant::now(),
            },
            delivered: Delivered::default(),
            how: None,
            sub,
            framing,
            ended: false,
        }
    }

    /// Counts `bytes` written for this stream, in its access-log record
    /// and the bytes counter (writers that frame messages themselves, and
    /// what a transport sends beside its messages; chunks are counted as
    /// they are made).
    pub fn wrote(&mut self, bytes: u64) {
        self.delivered.bytes += bytes;
        self.bytes.inc_by(bytes);
    }

    /// Records why the stream ends, when the writer ends it.
    pub fn ending(&mut self, how: &str) {
        self.how.get_or_insert_with(|| how.into());
    }

    pub fn subscription(&self) -> &Subscription {
        &self.sub
    }

    pub fn framing(&self) -> &F {
        &self.framing
    }

    /// Frames the subscription's next item into `out`: false once the
    /// stream is over (and nothing was framed), `Pending` while the
    /// subscription has nothing (nothing is framed then).
    pub fn poll_next_into(&mut self, cx: &mut Context<'_>, out: &mut F::Out) -> Poll<bool> {
        if self.ended {
            return Poll::Ready(false);
        }
        let Some(item) = ready!(self.sub.poll_next(cx)) else {
            self.ended = true;
            return Poll::Ready(false);
        };
        match &item {
            Item::Reset(_) => self.delivered.resets += 1,
            Item::Closed(reason) => self.ending(&format!("resource no longer served: {reason}")),
            Item::Shutdown => self.ending("kubefan shutting down"),
            Item::Denied(denial) => self.ending(&format!(
                "{} {}: {}",
                denial.code, denial.reason, denial.message
            )),
            _ => {}
        }
        let (count, bytes) = match &item {
            Item::Snapshot(objects) => (
                objects.len(),
                objects.iter().map(|o| o.len() + ADDED_FRAMING).sum(),
            ),
            Item::Events(events) => (events.len(), events.iter().map(|e| e.frame().len()).sum()),
            _ => (0, 0),
        };
        // Snapshot objects are copied around their ADDED heads, alone too.
        if count > 1 || matches!(item, Item::Snapshot(_)) {
            self.framing.reserve(out, bytes);
        }
        let stream = Stream {
            meta: self.sub.hub().meta(),
            tag: self.sub.id_tag(),
        };
        let mut more = true;
        let delivered = messages_of(&item, |msg| {
            if more {
                more = self.framing.frame(msg, &stream, out);
            }
        });
        self.sent.inc_by(delivered);
        self.delivered.events += delivered;
        if !more {
            self.ended = true;
            // A framing that ends on a reset (the watch face's 410).
            self.ending("expired: the client must list again");
        }
        Poll::Ready(true)
    }
}

/// A step's events framed once for every stream of a view at one cursor.
pub struct Batched {
    /// Whole messages as they go on the wire.
    pub bytes: Bytes,
    pub messages: u64,
    /// What a stream counts as sent for them.
    pub message_bytes: u64,
}

/// A stream written in a batch (`transport::takeover::batch`): with only
/// its subscription's events left to send, it takes the bytes framed once
/// for every stream of its view (and id tag) at its cursor.
pub trait BatchSource: Send {
    /// Whether the stream can be batched now, and what its writer must
    /// watch for it ([`Subscription::batchable`]).
    fn batchable(&self) -> Option<Batchable>;

    fn subscription(&self) -> &Subscription;

    fn subscription_mut(&mut self) -> &mut Subscription;

    /// `step`'s deliveries in this framing, `None` if there are none.
    /// The bytes depend on the events and the stream's id tag alone, so
    /// they can be written to every stream of the view with that tag that
    /// [`BatchSource::took`] the step.
    fn frame_step(&mut self, step: &Step) -> Option<Batched>;

    /// This stream was sent steps up to `advance` (`delivered` messages
    /// in `bytes`), as framed by [`BatchSource::frame_step`] of a stream
    /// of its view. Counted in its access-log record, not in the counter
    /// (its writer counts for all its streams at once).
    fn took(&mut self, advance: &Advance, delivered: u64, bytes: u64);

    /// What an unseen keep-alive tick owes the client
    /// ([`Subscription::tick`]), framed, and counted as a task counts
    /// what it sends; `None` if nothing is owed or the framing writes
    /// nothing for it (a WebSocket's keep-alive is its transport's ping).
    /// Its bytes, and how many of them the stream counts as sent.
    fn frame_tick(&mut self) -> Option<(Bytes, u64)>;

    /// Counts `bytes` its batch writer sent for this stream beyond what
    /// [`BatchSource::frame_tick`] counted (a `/ws` subscription's
    /// prefixes), in its access-log record only: the writer counts the
    /// counter for all its streams at once.
    fn wrote_batched(&mut self, bytes: u64);

    /// The counters of events and bytes sent on this stream's resource
    /// and transport (its writer counts for all its streams at once).
    fn counters(&self) -> (Counter, Counter);
}

impl<F: Framing + Send> BatchSource for Framed<F> {
    fn batchable(&self) -> Option<Batchable> {
        if self.ended {
            return None;
        }
        self.sub.batchable()
    }

    fn subscription(&self) -> &Subscription {
        &self.sub
    }

    fn subscription_mut(&mut self) -> &mut Subscription {
        &mut self.sub
    }

    fn frame_step(&mut self, step: &Step) -> Option<Batched> {
        let mut chunk = F::Out::default();
        let stream = Stream {
            meta: self.sub.hub().meta(),
            tag: self.sub.id_tag(),
        };
        if step.deliveries.len() > 1 {
            let bytes = step.deliveries.iter().map(|d| d.frame().len()).sum();
            self.framing.reserve(&mut chunk, bytes);
        }
        for delivery in &step.deliveries {
            // No framing ends a stream on an event (only on a reset).
            self.framing
                .frame(Message::Event(delivery), &stream, &mut chunk);
        }
        let (bytes, message_bytes) = F::batched(chunk)?;
        Some(Batched {
            bytes,
            messages: step.deliveries.len() as u64,
            message_bytes,
        })
    }

    fn took(&mut self, advance: &Advance, delivered: u64, bytes: u64) {
        self.sub.took(advance);
        if let Some(rv) = advance.delivered_rv {
            self.framing.sent_up_to(rv);
        }
        self.delivered.events += delivered;
        self.delivered.bytes += bytes;
    }

    fn frame_tick(&mut self) -> Option<(Bytes, u64)> {
        let item = self.sub.tick()?;
        let mut out = F::Out::default();
        let stream = Stream {
            meta: self.sub.hub().meta(),
            tag: self.sub.id_tag(),
        };
        // A progress mark or a keep-alive: neither ends a stream.
        messages_of(&item, |msg| {
            self.framing.frame(msg, &stream, &mut out);
        });
        let (bytes, message_bytes) = F::batched(out)?;
        self.delivered.bytes += message_bytes;
        Some((bytes, message_bytes))
    }

    fn wrote_batched(&mut self, bytes: u64) {
        self.delivered.bytes += bytes;
    }

    fn counters(&self) -> (Counter, Counter) {
        (self.sent.clone(), self.bytes.clone())
    }
}

impl<F> Drop for Framed<F> {
    fn drop(&mut self) {
        let how = self.how.as_deref().unwrap_or("connection closed");
        self.record
            .ended(self.sub.hub().name(), &self.delivered, how);
    }
}

impl<F: Framing<Out = Chunk>> Framed<F> {
    /// The next non-empty chunk of bytes, `None` once the stream is over,
    /// `Pending` while there is none.
    pub fn poll_next_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let mut chunk = Chunk::default();
        loop {
            // Nothing is framed when the subscription is pending, so no
            // chunk is lost by returning.
            let more = ready!(self.poll_next_into(cx, &mut chunk));
            if let Some(bytes) = chunk.take() {
                self.wrote(bytes.len() as u64);
                return Poll::Ready(Some(bytes));
            }
            if !more {
                return Poll::Ready(None);
            }
        }
    }
}

/// The bytes framed from one item.
#[derive(Default)]
pub struct Chunk {
    /// A shared frame, passed through as it is while it is alone.
    one: Option<Bytes>,
    buf: BytesMut,
}

impl Chunk {
    /// Adds a shared, already encoded frame (cheap to clone).
    pub fn shared(&mut self, bytes: &Bytes) {
        if self.one.is_none() && self.buf.is_empty() {
            self.one = Some(bytes.clone());
            return;
        }
        self.join();
        self.buf.extend_from_slice(bytes);
    }

    /// Adds bytes framed for this subscriber alone.
    pub fn put(&mut self, bytes: &[u8]) {
        self.join();
        self.buf.extend_from_slice(bytes);
    }

    /// Adds one message written in parts (a snapshot object and its event
    /// around it).
    pub fn put_parts(&mut self, parts: &[&[u8]]) {
        self.join();
        parts.iter().for_each(|p| self.buf.extend_from_slice(p));
    }

    pub fn reserve(&mut self, bytes: usize) {
        self.buf.reserve(bytes);
    }

    fn join(&mut self) {
        if let Some(one) = self.one.take() {
            self.buf.extend_from_slice(&one);
        }
    }

    /// What was framed, if anything; the chunk is empty afterwards.
    pub fn take(&mut self) -> Option<Bytes> {
        if let Some(one) = self.one.take() {
            debug_assert!(self.buf.is_empty());
            return Some(one);
        }
        (!self.buf.is_empty()).then(|| self.buf.split().freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_shared_frame_passes_through_uncopied() {
        let frame = Bytes::from_static(b"data: {}\n\n");
        let mut chunk = Chunk::default();
        chunk.shared(&frame);
        let out = chunk.take().unwrap();
        assert_eq!(out.as_ptr(), frame.as_ptr(), "the same buffer");
        assert!(chunk.take().is_none());
        chunk.shared(&frame);
        chunk.put(b": x\n\n");
        chunk.shared(&frame);
        assert_eq!(
            &chunk.take().unwrap()[..],
            b"data: {}\n\n: x\n\ndata: {}\n\n"
        );
    }
}
