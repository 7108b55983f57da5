//! The read half of a taken-over WebSocket: what the client sends, read
//! from the socket only as far as one message's limit allows.
//!
//! # Bounded before buffered
//! A frame's header says how long its payload is. [`Frames`] reads that
//! header first (at most 14 bytes) and refuses the frame there, before
//! buffering any of its payload, if it would take its message past
//! `max_message` bytes, or past `max_fragments` frames, or breaks RFC 6455
//! in a way the header already shows. So a client holds at most one
//! message's limit in kubefan (the fragments joined so far plus the frame
//! being read, never more than `max_message` together) and one read's
//! worth beyond it. actix-http's parser, used once a frame is whole to
//! unmask and split it, cannot be relied on for this: it answers
//! "incomplete" before its size check, and a header declaring 2^62 bytes
//! has its payload buffered for as long as the client keeps sending
//! (actix-http 3.20, `ws/frame.rs`).
//!
//! # Frames that do nothing are rationed
//! Pings, pongs, empty fragments, and any message on a socket that takes
//! none (a single-stream socket) each spend the connection's
//! [`Ration`]; past it the socket closes with 1008. Reading yields to the
//! runtime after [`READS_PER_POLL`] reads, so a client that keeps the
//! socket full never holds a thread.
//!
//! Each refusal names its Close code ([`Refusal::code`]); the socket's
//! owner sends it and closes (`transport::ws`).

use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};

use actix_http::ws::{CloseCode, CloseReason, OpCode, Parser, ProtocolError};
use actix_ws::AggregatedMessage;
use bytes::{BufMut, Bytes, BytesMut};
use bytestring::ByteString;
use tokio::time::Instant;

use super::io::InputWatch;
use super::ration::{IDLE_FRAMES, Ration};
use super::socket::Socket;
use crate::metrics::Metrics;

/// Reads from the socket in one poll before the task yields to its
/// runtime.
const READS_PER_POLL: usize = 64;
/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 2048;
/// Longest payload of a control frame (RFC 6455 section 5.5).
const MAX_CONTROL_PAYLOAD: u64 = 125;

/// What one client may send on a WebSocket.
#[derive(Debug, Clone, Copy)]
pub struct InboxLimits {
    /// Largest message, in bytes: one frame, or the fragments of one
    /// message together.
    pub max_message: usize,
    /// Most frames one message may come in.
    pub max_fragments: usize,
    /// Frames that do nothing allowed in a burst, and again every minute
    /// ([`Ration`]).
    pub idle_frames_per_minute: u32,
}

/// Whether a socket takes client messages: `/ws` does (its subscribe and
/// unsubscribe messages); a single-stream socket does not, and any
/// message on it is a frame that does nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Messages {
    Taken,
    Ignored,
}

/// Why a socket is closed for what its client sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// RFC 6455 broken (1002).
    #[error("{0}")]
    Protocol(&'static str),
    /// A message over the size limit, refused from its header (1009).
    #[error("message too big")]
    TooBig,
    /// A message in more fragments than allowed (1009).
    #[error("message in too many fragments")]
    TooManyFragments,
    /// Text (or a Close reason) that is not UTF-8 (1007).
    #[error("text is not UTF-8")]
    NotUtf8,
    /// More frames that do nothing than the connection's ration (1008).
    #[error("too many frames that carry nothing")]
    IdleFrames,
}

impl Refusal {
    /// The Close code RFC 6455 (section 7.4.1) gives this refusal.
    pub fn code(&self) -> CloseCode {
        match self {
            Refusal::Protocol(_) => CloseCode::Protocol,
            Refusal::TooBig | Refusal::TooManyFragments => CloseCode::Size,
            Refusal::NotUtf8 => CloseCode::Invalid,
            Refusal::IdleFrames => CloseCode::Policy,
        }
    }

    /// The `kubefan_limits_hit_total` kind it is counted under, if it is
    /// a limit rather than a broken protocol.
    fn limit(&self) -> Option<&'static str> {
        match self {
            Refusal::TooBig | Refusal::TooManyFragments => Some("ws_message_size"),
            Refusal::IdleFrames => Some(IDLE_FRAMES),
            Refusal::Protocol(_) | Refusal::NotUtf8 => None,
        }
    }
}

/// Why a socket's input ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The client sent something kubefan refuses; the socket is closed
    /// with the refusal's code.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The connection failed; nobody is left to tell.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// A frame's header: enough to bound it before reading its payload.
#[derive(Debug, Clone, Copy)]
struct Head {
    fin: bool,
    opcode: u8,
    /// The payload's declared length.
    len: u64,
    /// Bytes of the header, mask included.
    size: usize,
}

impl Head {
    /// The header at the start of `bytes`, once it is all there. Refuses
    /// what the header alone shows to be wrong.
    fn parse(bytes: &[u8]) -> Result<Option<Head>, Refusal> {
        let [first, second, ..] = *bytes else {
            return Ok(None);
        };
        if first & 0x70 != 0 {
            // No extension is negotiated (kubefan offers none).
            return Err(Refusal::Protocol("reserved bits set"));
        }
        if second & 0x80 == 0 {
            return Err(Refusal::Protocol("unmasked client frame"));
        }
        let (len, at) = match second & 0x7F {
            126 => match bytes.get(2..4) {
                Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
                None => return Ok(None),
            },
            127 => match bytes.get(2..10).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
                Some(b) => (u64::from_be_bytes(b), 10),
                None => return Ok(None),
            },
            len => (u64::from(len), 2),
        };
        let head = Head {
            fin: first & 0x80 != 0,
            opcode: first & 0x0F,
            len,
            size: at + 4,
        };
        match head.opcode {
            0..=2 => {}
            8..=10 if !head.fin => return Err(Refusal::Protocol("fragmented control frame")),
            8..=10 if head.len > MAX_CONTROL_PAYLOAD => {
                return Err(Refusal::Protocol("control frame over 125 bytes"));
            }
            8..=10 => {}
            _ => return Err(Refusal::Protocol("unknown opcode")),
        }
        Ok(Some(head))
    }

    fn is_control(&self) -> bool {
        self.opcode >= 8
    }
}

/// A message arriving in fragments.
struct Joining {
    text: bool,
    parts: Vec<Bytes>,
    size: usize,
}

/// The client's frames, parsed from the bytes read so far: no I/O, so
/// the socket's reader ([`Inbox`]) and the fuzzer share it.
pub struct Frames {
    /// Bytes of the frame being read (and at most one read's worth of
    /// what follows it).
    buffered: BytesMut,
    limits: InboxLimits,
    messages: Messages,
    /// Boxed: fragmented messages are rare, and every socket's reader
    /// would carry the room for one.
    joining: Option<Box<Joining>>,
    ration: Ration,
}

impl Frames {
    pub fn new(limits: InboxLimits, messages: Messages) -> Frames {
        Frames {
            buffered: BytesMut::new(),
            limits,
            messages,
            joining: None,
            ration: Ration::per_minute(limits.idle_frames_per_minute),
        }
    }

    /// Adds bytes read from the client.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buffered.extend_from_slice(bytes);
    }

    /// Bytes read and not yet made into a frame.
    pub fn buffered(&self) -> usize {
        self.buffered.len()
    }

    /// Bytes held for the message being read: its fragments so far and
    /// the frame being read.
    pub fn held(&self) -> usize {
        self.buffered.len() + self.joining.as_ref().map_or(0, |j| j.size)
    }

    /// Nothing buffered: the buffer's memory can go.
    fn release_if_idle(&mut self) {
        if self.buffered.is_empty() && self.buffered.capacity() > 0 {
            self.buffered = BytesMut::new();
        }
    }

    /// The next whole frame read, if the bytes buffered hold one; a
    /// frame that does nothing is counted against the ration first.
    /// `Ok(None)`: more bytes are needed.
    fn frame(&mut self, now: Instant) -> Result<Option<Frame>, Refusal> {
        let Some(head) = Head::parse(&self.buffered)? else {
            return Ok(None);
        };
        let so_far = match (&self.joining, head.opcode) {
            (None, 0) => return Err(Refusal::Protocol("continuation of no message")),
            (Some(_), 1 | 2) => {
                return Err(Refusal::Protocol("new message inside a fragmented one"));
            }
            (Some(joining), 0) => {
                if joining.parts.len() >= self.limits.max_fragments {
                    return Err(Refusal::TooManyFragments);
                }
                joining.size
            }
            _ => 0,
        };
        let room = self.limits.max_message.saturating_sub(so_far);
        if !head.is_control() && head.len > room as u64 {
            return Err(Refusal::TooBig);
        }
        // The payload fits in one message's limit, so in a usize.
        let whole = head.size + head.len as usize;
        if self.buffered.len() < whole {
            return Ok(None);
        }
        let idle = match head.opcode {
            8 => false,
            9 | 10 => true,
            _ if self.messages == Messages::Ignored => true,
            // A fragment that is neither the last nor carries anything.
            _ => !head.fin && head.len == 0,
        };
        if idle && !self.ration.spend(now) {
            return Err(Refusal::IdleFrames);
        }
        let (fin, opcode, payload) =
            match Parser::parse(&mut self.buffered, true, head.len as usize) {
                Ok(Some(parsed)) => parsed,
                // The header was checked and the frame is whole: actix-http
                // agrees, or this is its bug; either way the frame is refused.
                Ok(None) | Err(ProtocolError::Overflow) => return Err(Refusal::TooBig),
                Err(_) => return Err(Refusal::Protocol("malformed frame")),
            };
        let payload = payload.map_or_else(Bytes::new, BytesMut::freeze);
        Ok(Some(Frame {
            fin,
            opcode,
            payload,
        }))
    }

    /// The next message the bytes buffered complete; `Ok(None)` if more
    /// are needed. Frames that complete no message are few: a message's
    /// fragments are at most `max_fragments`, and empty ones spend the
    /// ration.
    pub fn next(&mut self, now: Instant) -> Result<Option<AggregatedMessage>, Refusal> {
        loop {
            let Some(frame) = self.frame(now)? else {
                self.release_if_idle();
                return Ok(None);
            };
            if let Some(message) = self.assemble(frame)? {
                self.release_if_idle();
                return Ok(Some(message));
            }
        }
    }

    /// The message `frame` completes, if any.
    fn assemble(&mut self, frame: Frame) -> Result<Option<AggregatedMessage>, Refusal> {
        let Frame {
            fin,
            opcode,
            payload,
        } = frame;
        let (text, bytes) = match opcode {
            OpCode::Ping => return Ok(Some(AggregatedMessage::Ping(payload))),
            OpCode::Pong => return Ok(Some(AggregatedMessage::Pong(payload))),
            OpCode::Close => return close(&payload).map(|r| Some(AggregatedMessage::Close(r))),
            OpCode::Text if fin => return text_message(payload).map(Some),
            OpCode::Binary if fin => return Ok(Some(AggregatedMessage::Binary(payload))),
            OpCode::Text => (true, payload),
            OpCode::Binary => (false, payload),
            OpCode::Continue => (false, payload),
            OpCode::Bad => return Err(Refusal::Protocol("unknown opcode")),
        };
        let joining = self.joining.get_or_insert_with(|| {
            Box::new(Joining {
                text,
                parts: Vec::new(),
                size: 0,
            })
        });
        joining.size += bytes.len();
        // Every fragment counts towards `max_fragments`, empty ones too.
        joining.parts.push(bytes);
        if !fin {
            return Ok(None);
        }
        let Some(joined) = self.joining.take() else {
            return Ok(None);
        };
        let mut whole = BytesMut::with_capacity(joined.size);
        for part in &joined.parts {
            whole.put_slice(part);
        }
        let whole = whole.freeze();
        if joined.text {
            text_message(whole).map(Some)
        } else {
            Ok(Some(AggregatedMessage::Binary(whole)))
        }
    }
}

/// A whole frame, unmasked.
struct Frame {
    fin: bool,
    opcode: OpCode,
    payload: Bytes,
}

/// A text message's payload, which must be UTF-8.
fn text_message(bytes: Bytes) -> Result<AggregatedMessage, Refusal> {
    ByteString::try_from(bytes)
        .map(AggregatedMessage::Text)
        .map_err(|_| Refusal::NotUtf8)
}

/// A Close frame's payload: nothing, or a code and a UTF-8 reason (RFC
/// 6455 section 5.5.1; codes a peer may send, section 7.4).
fn close(payload: &[u8]) -> Result<Option<CloseReason>, Refusal> {
    let (code, reason) = match payload {
        [] => return Ok(None),
        [_] => return Err(Refusal::Protocol("close frame with a one-byte code")),
        [a, b, reason @ ..] => (u16::from_be_bytes([*a, *b]), reason),
    };
    if !matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999) {
        return Err(Refusal::Protocol("close code a peer may not send"));
    }
    let reason = std::str::from_utf8(reason).map_err(|_| Refusal::NotUtf8)?;
    Ok(Some(CloseReason {
        code: CloseCode::from(code),
        description: (!reason.is_empty()).then(|| reason.to_string()),
    }))
}

/// A taken-over WebSocket's client messages, read from its socket by
/// [`Frames`].
pub struct Inbox {
    read: Arc<Socket>,
    input: InputWatch,
    frames: Frames,
    metrics: Arc<Metrics>,
    ended: bool,
}

impl Inbox {
    pub(super) fn new(
        read: Arc<Socket>,
        limits: InboxLimits,
        messages: Messages,
        metrics: Arc<Metrics>,
    ) -> Inbox {
        Inbox {
            read,
            input: InputWatch::default(),
            frames: Frames::new(limits, messages),
            metrics,
            ended: false,
        }
    }

    /// Registers `cx` for the socket's input: ready if there is some (or
    /// a frame is half read). For a batch writer holding the socket's
    /// stream (`batch`); [`Inbox::rearm`] gives the watch back.
    pub fn poll_input(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.frames.buffered() > 0 || self.ended {
            return Poll::Ready(());
        }
        self.read.tcp().poll_read_ready(cx).map(|_| ())
    }

    /// Whether part of a frame has been read: the socket's own task
    /// waits for the rest (a batch writer would hand it straight back,
    /// [`Inbox::poll_input`]).
    pub fn holds_input(&self) -> bool {
        self.frames.buffered() > 0
    }

    /// The next read registers the task's own waker again (after
    /// [`Inbox::poll_input`] registered another).
    pub fn rearm(&mut self) {
        self.input.rearm();
    }

    /// Ends the input with `refusal`, counted if it is a limit.
    fn refuse(&mut self, refusal: Refusal) -> Poll<Option<Result<AggregatedMessage, InboxError>>> {
        self.ended = true;
        if let Some(kind) = refusal.limit() {
            self.metrics.limit_hit(kind);
        }
        tracing::debug!(%refusal, "closing a WebSocket for what its client sent");
        Poll::Ready(Some(Err(refusal.into())))
    }
}

impl futures::Stream for Inbox {
    type Item = Result<AggregatedMessage, InboxError>;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        for _ in 0..READS_PER_POLL {
            if this.ended {
                return Poll::Ready(None);
            }
            if this.frames.buffered() > 0 {
                match this.frames.next(Instant::now()) {
                    Err(refusal) => return this.refuse(refusal),
                    Ok(Some(message)) => return Poll::Ready(Some(Ok(message))),
                    Ok(None) => {}
                }
            }
            let frames = &mut this.frames;
            let read = |socket: &Socket| {
                let mut scratch = [0u8; READ_CHUNK];
                let n = socket.try_read(&mut scratch)?;
                frames.extend(&scratch[..n]);
                Ok(n)
            };
            match this.input.poll_read(&this.read, cx, read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(err)) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(err.into())));
                }
                Poll::Ready(Ok(0)) => {
                    this.ended = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(Ok(_)) => {}
            }
        }
        // A client that keeps the socket full: others on this thread go
        // first, and this task is polled again after them.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;

    const LIMITS: InboxLimits = InboxLimits {
        max_message: 1024,
        max_fragments: 8,
        idle_frames_per_minute: 10,
    };

    /// A masked client frame with a header of its declared `len` (which
    /// may differ from the payload given).
    fn frame_declaring(first: u8, len: u64, payload: &[u8]) -> Vec<u8> {
        let mask = [0x11u8, 0x22, 0x33, 0x44];
        let mut out = vec![first];
        match len {
            0..=125 => out.push(0x80 | len as u8),
            126..=0xFFFF => {
                out.push(0x80 | 126);
                out.extend((len as u16).to_be_bytes());
            }
            _ => {
                out.push(0x80 | 127);
                out.extend(len.to_be_bytes());
            }
        }
        out.extend(mask);
        out.extend(payload.iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
        out
    }

    fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
        frame_declaring(first, payload.len() as u64, payload)
    }

    const TEXT: u8 = 0x81;
    const FIRST_TEXT: u8 = 0x01;
    const MORE: u8 = 0x00;
    const LAST: u8 = 0x80;
    const PING: u8 = 0x89;

    fn read_all(frames: &mut Frames, bytes: &[u8]) -> Vec<Result<AggregatedMessage, Refusal>> {
        frames.extend(bytes);
        let mut out = Vec::new();
        loop {
            match frames.next(Instant::now()) {
                Ok(Some(m)) => out.push(Ok(m)),
                Ok(None) => return out,
                Err(e) => {
                    out.push(Err(e));
                    return out;
                }
            }
        }
    }

    fn text(result: &Result<AggregatedMessage, Refusal>) -> &str {
        match result {
            Ok(AggregatedMessage::Text(t)) => t,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn fragments_are_joined_into_one_message() {
        let mut frames = Frames::new(LIMITS, Messages::Taken);
        let bytes = [
            frame(FIRST_TEXT, b"ab"),
            frame(MORE, b"cd"),
            frame(LAST, b"e"),
            frame(TEXT, b"next"),
        ]
        .concat();
        let got = read_all(&mut frames, &bytes);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(text(&got[0]), "abcde");
        assert_eq!(text(&got[1]), "next");
        assert_eq!(frames.held(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_declaring_more_than_the_limit_is_refused_from_its_header() {
        for len in [1025, 1 << 32, 1 << 62, (1 << 63) - 1, u64::MAX] {
            let mut frames = Frames::new(LIMITS, Messages::Taken);
            // The header alone, and a few payload bytes: nothing more is
            // needed to refuse it, and nothing more is buffered.
            let bytes = frame_declaring(TEXT, len, b"xxxx");
            let got = read_all(&mut frames, &bytes);
            assert!(matches!(got[..], [Err(Refusal::TooBig)]), "{len}: {got:?}");
            assert!(frames.buffered() <= 18);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn fragments_are_bounded_by_their_sum_and_their_count() {
        let mut frames = Frames::new(LIMITS, Messages::Taken);
        let mut bytes = frame(FIRST_TEXT, &[b'a'; 600]);
        bytes.extend(frame_declaring(MORE, 600, b""));
        let got = read_all(&mut frames, &bytes);
        assert!(matches!(got[..], [Err(Refusal::TooBig)]), "{got:?}");

        let mut frames = Frames::new(LIMITS, Messages::Taken);
        let mut bytes = frame(FIRST_TEXT, b"a");
        for _ in 0..LIMITS.max_fragments {
            bytes.extend(frame(MORE, b"a"));
        }
        let got = read_all(&mut frames, &bytes);
        assert!(
            matches!(got[..], [Err(Refusal::TooManyFragments)]),
            "{got:?}"
        );
        assert!(frames.held() <= LIMITS.max_message);
    }

    #[tokio::test(start_paused = true)]
    async fn frames_that_do_nothing_are_rationed() {
        // Empty fragments: the ration runs out before the fragment count.
        let limits = InboxLimits {
            max_fragments: 1000,
            ..LIMITS
        };
        let mut frames = Frames::new(limits, Messages::Taken);
        let mut bytes = frame(FIRST_TEXT, b"");
        for _ in 0..20 {
            bytes.extend(frame(MORE, b""));
        }
        let got = read_all(&mut frames, &bytes);
        assert!(matches!(got[..], [Err(Refusal::IdleFrames)]), "{got:?}");

        // Pings: ten pass; a minute later ten more; the eleventh at once
        // is refused.
        let mut frames = Frames::new(LIMITS, Messages::Taken);
        let pings = |n| -> Vec<u8> { (0..n).flat_map(|_| frame(PING, b"p")).collect() };
        let got = read_all(&mut frames, &pings(10));
        assert!(
            got.iter()
                .all(|m| matches!(m, Ok(AggregatedMessage::Ping(_))))
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        let got = read_all(&mut frames, &pings(11));
        assert_eq!(got.len(), 11);
        assert!(got[..10].iter().all(Result::is_ok), "{got:?}");
        assert!(matches!(got[10], Err(Refusal::IdleFrames)), "{got:?}");

        // Messages on a socket that takes none; not on one that does.
        let mut frames = Frames::new(LIMITS, Messages::Ignored);
        let texts: Vec<u8> = (0..11).flat_map(|_| frame(TEXT, b"{}")).collect();
        assert!(matches!(
            read_all(&mut frames, &texts).last(),
            Some(Err(Refusal::IdleFrames))
        ));
        let mut frames = Frames::new(LIMITS, Messages::Taken);
        assert!(read_all(&mut frames, &texts).iter().all(Result::is_ok));
    }

    #[tokio::test(start_paused = true)]
    async fn broken_frames_get_the_close_code_rfc_6455_gives_them() {
        let cases: &[(Vec<u8>, CloseCode)] = &[
            // RSV1 set, no extension negotiated: a protocol error, 1002.
            (frame(0xC1, b"x"), CloseCode::Protocol),
            (vec![0x81, 0x01, b'x'], CloseCode::Protocol), // unmasked
            (frame(0x83, b""), CloseCode::Protocol),       // opcode 3
            (frame(0x09, b""), CloseCode::Protocol),       // fragmented ping
            (frame_declaring(PING, 126, &[0; 126]), CloseCode::Protocol),
            (frame(MORE, b"x"), CloseCode::Protocol), // continuation of nothing
            (
                [frame(FIRST_TEXT, b"a"), frame(TEXT, b"b")].concat(),
                CloseCode::Protocol,
            ),
            (frame(0x88, &[0x03]), CloseCode::Protocol), // one-byte code
            (frame(0x88, &[0x03, 0xEC]), CloseCode::Protocol), // 1004
            (frame(0x88, &[0x03, 0xE8, 0xFF]), CloseCode::Invalid),
            (frame(TEXT, &[0xFF, 0xFE]), CloseCode::Invalid),
            (
                [frame(FIRST_TEXT, &[0xE2]), frame(LAST, &[0x82])].concat(),
                CloseCode::Invalid,
            ),
        ];
        for (bytes, code) in cases {
            let mut frames = Frames::new(LIMITS, Messages::Taken);
            let got = read_all(&mut frames, bytes);
            match got.last() {
                Some(Err(refusal)) => assert_eq!(refusal.code(), *code, "{bytes:x?}: {refusal}"),
                other => panic!("{bytes:x?}: {other:?}"),
            }
        }
        // A valid close, and a fragmented text split inside a character.
        let mut frames = Frames::new(LIMITS, Messages::Taken);
        let got = read_all(
            &mut frames,
            &[
                frame(FIRST_TEXT, &[0xE2, 0x82]),
                frame(LAST, &[0xAC]),
                frame(0x88, &[0x03, 0xE8, b'o', b'k']),
            ]
            .concat(),
        );
        assert_eq!(text(&got[0]), "€");
        match &got[1] {
            Ok(AggregatedMessage::Close(Some(reason))) => {
                assert_eq!(reason.code, CloseCode::Normal);
                assert_eq!(reason.description.as_deref(), Some("ok"));
            }
            other => panic!("{other:?}"),
        }
    }

    /// An inbox on one end of a loopback connection.
    async fn inbox(limits: InboxLimits) -> (Inbox, TcpStream, Arc<Metrics>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let metrics = Arc::new(Metrics::new());
        let inbox = Inbox::new(
            Arc::new(Socket::plain(server)),
            limits,
            Messages::Taken,
            metrics.clone(),
        );
        (inbox, client, metrics)
    }

    #[tokio::test]
    async fn the_inbox_reads_frames_from_the_socket_and_ends_at_eof() {
        use futures::StreamExt;
        let (mut inbox, mut client, _) = inbox(LIMITS).await;
        client.write_all(&frame(TEXT, b"hi")).await.unwrap();
        match tokio::time::timeout(Duration::from_secs(5), inbox.next()).await {
            Ok(Some(Ok(AggregatedMessage::Text(text)))) => assert_eq!(&*text, "hi"),
            other => panic!("{other:?}"),
        }
        assert_eq!(inbox.frames.buffered.capacity(), 0, "no buffer while idle");
        drop(client);
        assert!(
            tokio::time::timeout(Duration::from_secs(5), inbox.next())
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_client_declaring_a_huge_frame_is_refused_before_it_sends_it() {
        use futures::StreamExt;
        let (mut inbox, mut client, metrics) = inbox(LIMITS).await;
        // The header, then as much as the client cares to send: refused
        // at the header, whatever follows.
        client
            .write_all(&frame_declaring(TEXT, 1 << 62, &[0; 4096])[..4096])
            .await
            .unwrap();
        match tokio::time::timeout(Duration::from_secs(5), inbox.next()).await {
            Ok(Some(Err(InboxError::Refused(Refusal::TooBig)))) => {}
            other => panic!("{other:?}"),
        }
        assert!(inbox.frames.held() <= READ_CHUNK + 14);
        assert!(inbox.next().await.is_none(), "the input ends there");
        let text = metrics.encode();
        assert!(
            text.contains(r#"kubefan_limits_hit_total{kind="ws_message_size"} 1"#),
            "{text}"
        );
    }
}
