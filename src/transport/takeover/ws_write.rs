//! A taken-over WebSocket: the upgrade (the socket taken from actix, its
//! `101` written before the first frame) and the write half, which frames
//! kubefan's messages (one unfragmented, unmasked frame each, header and
//! payload in one vectored write).

use std::future::poll_fn;
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use actix_web::{HttpMessage, HttpRequest};
use bytes::{Buf, Bytes};

use super::io::{Blocked, LINGER, Linger, MAX_PARTS, WriteDeadline, poll_write_parts};
use super::socket::{Detached, Socket};
use super::ws_read::{Inbox, InboxLimits, Messages};
use super::{Streams, socket_of};
use crate::limits::Permit;

/// A WebSocket connection taken over from actix after its handshake was
/// validated: [`Inbox`] reads what the client sends from the socket's read
/// half, and [`WsWriter`] frames what kubefan sends onto the write half.
pub struct Upgraded {
    pub inbox: Inbox,
    pub writer: WsWriter,
}

/// A WebSocket connection taken from actix, out of any reactor until
/// [`Taken::open`] is called on the runtime that is to drive it.
pub struct Taken {
    socket: Detached,
    head: Bytes,
    limits: InboxLimits,
    deadline: WriteDeadline,
    permit: Option<Permit>,
}

/// Takes `req`'s connection over for a WebSocket, if it can. `head` is the
/// `101 Switching Protocols` response, written before the first frame;
/// what the client sends is held to `limits`.
pub fn upgrade(
    req: &HttpRequest,
    streams: &Streams,
    head: Bytes,
    limits: InboxLimits,
) -> Option<io::Result<Taken>> {
    let socket = match socket_of(req)? {
        Ok(socket) => socket,
        Err(err) => return Some(Err(err)),
    };
    let permit = req.extensions_mut().remove::<Permit>();
    Some(Ok(Taken {
        socket,
        head,
        limits,
        deadline: streams.deadline.clone(),
        permit,
    }))
}

impl Taken {
    /// Registers the socket with the current runtime's reactor. Whether
    /// the socket takes client `messages` decides which of them do
    /// nothing (`ws_read`).
    pub fn open(self, messages: Messages) -> io::Result<Upgraded> {
        let socket = Arc::new(self.socket.attach()?);
        Ok(Upgraded {
            inbox: Inbox::new(
                socket.clone(),
                self.limits,
                messages,
                self.deadline.metrics.clone(),
            ),
            writer: WsWriter {
                write: socket,
                head: Some(self.head),
                deadline: self.deadline,
                blocked: Blocked::default(),
                _permit: self.permit,
            },
        })
    }
}

/// WebSocket opcodes kubefan sends (RFC 6455 section 5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    Text = 0x1,
    Close = 0x8,
    Ping = 0x9,
    Pong = 0xA,
}

/// The write half of a taken-over WebSocket: each message is one
/// unfragmented, unmasked frame (a server's frames are never masked),
/// written as its header and payload in one vectored write.
pub struct WsWriter {
    write: Arc<Socket>,
    /// The handshake response, not yet sent.
    head: Option<Bytes>,
    deadline: WriteDeadline,
    /// How a write waits for a client that takes nothing.
    blocked: Blocked,
    /// The connection's place in the limits, given back when it ends.
    _permit: Option<Permit>,
}

impl WsWriter {
    /// Whether the handshake response went.
    pub fn opened(&self) -> bool {
        self.head.is_none()
    }

    /// Sends the handshake response (`101 Switching Protocols`).
    pub async fn open(&mut self) -> io::Result<()> {
        poll_fn(|cx| self.poll_open(cx)).await
    }

    /// [`WsWriter::open`] as a poll; ready at once when the response went.
    /// What is left of it is what `head` still holds.
    pub fn poll_open(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(head) = &mut self.head else {
            return Poll::Ready(Ok(()));
        };
        let mut written = 0;
        let (socket, deadline) = (&self.write, &self.deadline);
        let done = poll_write_parts(
            socket,
            deadline,
            &mut self.blocked,
            cx,
            &[head],
            &mut written,
        );
        head.advance(written);
        ready!(done)?;
        self.head = None;
        Poll::Ready(Ok(()))
    }

    /// Sends one frame; an error means the connection is gone.
    pub async fn send(&mut self, opcode: Opcode, payload: &[u8]) -> io::Result<()> {
        self.send_parts(opcode, &[payload]).await
    }

    /// Sends one frame whose payload is `parts` (at most four) one after
    /// the other, in one vectored write with no copy.
    pub async fn send_parts(&mut self, opcode: Opcode, parts: &[&[u8]]) -> io::Result<()> {
        self.open().await?;
        let mut written = 0;
        poll_fn(|cx| self.poll_send_parts(cx, opcode, parts, &mut written)).await
    }

    /// [`WsWriter::send_parts`] as a poll, `*written` bytes of the frame
    /// (its header included) having gone already; the handshake response
    /// must have been sent.
    pub fn poll_send_parts(
        &mut self,
        cx: &mut Context<'_>,
        opcode: Opcode,
        parts: &[&[u8]],
        written: &mut usize,
    ) -> Poll<io::Result<()>> {
        assert!(
            parts.len() < MAX_PARTS,
            "a frame is sent in at most four parts"
        );
        debug_assert!(self.head.is_none(), "the handshake response goes first");
        let mut header = [0u8; 10];
        let len = parts.iter().map(|p| p.len()).sum();
        let header = frame_header(&mut header, opcode, len);
        let mut all: [&[u8]; MAX_PARTS] = [&[]; MAX_PARTS];
        all[0] = header;
        all[1..=parts.len()].copy_from_slice(parts);
        let (socket, deadline) = (&self.write, &self.deadline);
        poll_write_parts(
            socket,
            deadline,
            &mut self.blocked,
            cx,
            &all[..=parts.len()],
            written,
        )
    }

    /// One try at writing `frames` (whole frames, framed already), for a
    /// batch writer (`Socket::send_now`: over TLS, encrypted into the
    /// session): how many bytes went; `WouldBlock` if none did.
    pub fn send_frames_now(&self, frames: &[u8]) -> io::Result<usize> {
        self.write.send_now(&[io::IoSlice::new(frames)])
    }

    /// Whether a TLS session holds records its socket did not take (the
    /// stream's task sends them).
    pub fn holds_records(&self) -> bool {
        self.write.holds_records()
    }

    /// The socket, for writes made past this writer while it has nothing
    /// under way (a `/ws` socket's batch writers, `transport::ws::mux`);
    /// over TLS, through the session.
    pub fn direct(&self) -> DirectSocket {
        DirectSocket(self.write.clone())
    }

    /// Writes `frames` (whole frames, framed already).
    pub async fn write_frames(&mut self, frames: &[u8]) -> io::Result<()> {
        self.open().await?;
        let mut written = 0;
        poll_fn(|cx| self.poll_write_frames(cx, frames, &mut written)).await
    }

    /// Writes the rest of `frames` (whole frames, `*written` bytes of them
    /// gone already), as [`WsWriter::poll_send_parts`] writes one frame.
    pub fn poll_write_frames(
        &mut self,
        cx: &mut Context<'_>,
        frames: &[u8],
        written: &mut usize,
    ) -> Poll<io::Result<()>> {
        let (socket, deadline) = (&self.write, &self.deadline);
        poll_write_parts(socket, deadline, &mut self.blocked, cx, &[frames], written)
    }

    /// A Close frame's payload: `code` and `reason`, cut to fit the
    /// 125-byte control frame limit.
    pub fn close_payload(code: u16, reason: &str) -> Vec<u8> {
        let mut payload = code.to_be_bytes().to_vec();
        let mut end = reason.len().min(123);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        payload.extend_from_slice(&reason.as_bytes()[..end]);
        payload
    }

    /// A Close frame with `code` and `reason`, then the end of the
    /// connection's sending side, then at most [`LINGER`] for the client
    /// to close its side. For a socket nothing else reads any more.
    pub async fn close(&mut self, code: u16, reason: &str) {
        if self
            .send(Opcode::Close, &Self::close_payload(code, reason))
            .await
            .is_ok()
        {
            self.shutdown();
            let (mut linger, socket) = (Linger::default(), &self.write);
            let _ = tokio::time::timeout(LINGER, poll_fn(|cx| linger.poll(socket, cx))).await;
        }
    }

    /// After [`WsWriter::shutdown`]: ready once the client closed its
    /// side too ([`Linger`]; the caller bounds the time).
    pub fn poll_linger(&self, linger: &mut Linger, cx: &mut Context<'_>) -> Poll<()> {
        linger.poll(&self.write, cx)
    }

    /// Ends the connection's sending side (after a Close frame).
    pub fn shutdown(&self) {
        self.write.shutdown();
    }
}

/// A WebSocket's socket, written past its [`WsWriter`]: its owner
/// makes sure that no frame of the writer's is half written meanwhile.
#[derive(Clone)]
pub struct DirectSocket(Arc<Socket>);

impl DirectSocket {
    /// One try at writing `bufs` (`Socket::send_now`: one `sendmsg`, or
    /// over TLS encrypted into the session first): how many bytes went;
    /// `WouldBlock` if none did.
    pub fn send_now(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.0.send_now(bufs)
    }

    /// Whether a TLS session holds records its socket did not take: the
    /// writer's next write (of anything, nothing included) sends them.
    pub fn holds_records(&self) -> bool {
        self.0.holds_records()
    }
}

/// The header of a final, unmasked frame of `len` payload bytes.
pub fn frame_header(buf: &mut [u8; 10], opcode: Opcode, len: usize) -> &[u8] {
    buf[0] = 0x80 | opcode as u8;
    if len < 126 {
        buf[1] = len as u8;
        &buf[..2]
    } else if let Ok(len) = u16::try_from(len) {
        buf[1] = 126;
        buf[2..4].copy_from_slice(&len.to_be_bytes());
        &buf[..4]
    } else {
        buf[1] = 127;
        buf[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        &buf[..10]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_frame_headers_use_the_shortest_length() {
        let mut buf = [0u8; 10];
        assert_eq!(frame_header(&mut buf, Opcode::Text, 5), [0x81, 5]);
        assert_eq!(frame_header(&mut buf, Opcode::Ping, 0), [0x89, 0]);
        assert_eq!(frame_header(&mut buf, Opcode::Text, 125), [0x81, 125]);
        assert_eq!(
            frame_header(&mut buf, Opcode::Text, 126),
            [0x81, 126, 0, 126]
        );
        assert_eq!(
            frame_header(&mut buf, Opcode::Close, 65535),
            [0x88, 126, 0xff, 0xff]
        );
        assert_eq!(
            frame_header(&mut buf, Opcode::Text, 65536),
            [0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0]
        );
    }
}
