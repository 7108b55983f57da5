//! The read half of a taken-over WebSocket: the client's frames, parsed
//! with actix-http's codec, continuations joined as actix-ws joins them
//! (same limits, same errors). Nothing is buffered between frames.

use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};

use actix_http::ws::{Frame, Item, ProtocolError};
use actix_ws::AggregatedMessage;
use bytes::{BufMut, Bytes, BytesMut};
use tokio_util::codec::Decoder;

use super::io::InputWatch;
use super::socket::Socket;

/// A taken-over WebSocket's client messages: frames parsed by actix-http's
/// codec, continuations joined as actix-ws joins them (same limits, same
/// errors). Nothing is buffered between frames.
pub struct Inbox {
    read: Arc<Socket>,
    input: InputWatch,
    /// Bytes of a frame not complete yet.
    pending: BytesMut,
    codec: actix_http::ws::Codec,
    max_message: usize,
    /// A message arriving in continuation frames.
    joining: Option<Joining>,
    /// The rest of a message that grew too big is being skipped.
    skipping: bool,
    ended: bool,
}

struct Joining {
    text: bool,
    parts: Vec<Bytes>,
    size: usize,
}

/// The error actix-ws gives a message too big in continuation frames.
fn too_big() -> ProtocolError {
    ProtocolError::Io(io::Error::other("Exceeded maximum continuation size"))
}

/// A text message's payload, which must be UTF-8.
fn text_message(bytes: Bytes) -> Result<AggregatedMessage, ProtocolError> {
    bytestring::ByteString::try_from(bytes)
        .map(AggregatedMessage::Text)
        .map_err(|err| ProtocolError::Io(io::Error::new(io::ErrorKind::InvalidData, err)))
}

impl Inbox {
    /// Reads from `read`; messages over `max_message` bytes are refused.
    pub(super) fn new(read: Arc<Socket>, max_message: usize) -> Inbox {
        Inbox {
            read,
            input: InputWatch::default(),
            pending: BytesMut::new(),
            codec: actix_http::ws::Codec::new().max_size(max_message),
            max_message,
            joining: None,
            skipping: false,
            ended: false,
        }
    }

    /// Registers `cx` for the socket's input: ready if there is some (or
    /// a frame is half read). For a batch writer holding the socket's
    /// stream (`batch`); [`Inbox::rearm`] gives the watch back.
    pub fn poll_input(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.pending.is_empty() || self.ended {
            return Poll::Ready(());
        }
        self.read.tcp().poll_read_ready(cx).map(|_| ())
    }

    /// The next read registers the task's own waker again (after
    /// [`Inbox::poll_input`] registered another).
    pub fn rearm(&mut self) {
        self.input = InputWatch::default();
    }

    /// The message `frame` completes, if any.
    fn assemble(&mut self, frame: Frame) -> Option<Result<AggregatedMessage, ProtocolError>> {
        let (start, bytes, last) = match frame {
            Frame::Text(bytes) => return Some(text_message(bytes)),
            Frame::Binary(bytes) => return Some(Ok(AggregatedMessage::Binary(bytes))),
            Frame::Ping(bytes) => return Some(Ok(AggregatedMessage::Ping(bytes))),
            Frame::Pong(bytes) => return Some(Ok(AggregatedMessage::Pong(bytes))),
            Frame::Close(reason) => return Some(Ok(AggregatedMessage::Close(reason))),
            Frame::Continuation(Item::FirstText(bytes)) => (Some(true), bytes, false),
            Frame::Continuation(Item::FirstBinary(bytes)) => (Some(false), bytes, false),
            Frame::Continuation(Item::Continue(bytes)) => (None, bytes, false),
            Frame::Continuation(Item::Last(bytes)) => (None, bytes, true),
        };
        if self.skipping {
            self.skipping = !last;
            return None;
        }
        let joining = self.joining.get_or_insert(Joining {
            text: false,
            parts: Vec::new(),
            size: 0,
        });
        if let Some(text) = start {
            *joining = Joining {
                text,
                parts: Vec::new(),
                size: 0,
            };
        }
        joining.size += bytes.len();
        if joining.size > self.max_message {
            self.joining = None;
            self.skipping = !last;
            return Some(Err(too_big()));
        }
        // Empty parts are not kept: endless empty frames cannot grow this.
        if !bytes.is_empty() {
            joining.parts.push(bytes);
        }
        if !last {
            return None;
        }
        let joined = self.joining.take()?;
        let mut whole = BytesMut::with_capacity(joined.size);
        for part in &joined.parts {
            whole.put_slice(part);
        }
        let whole = whole.freeze();
        Some(if joined.text {
            text_message(whole)
        } else {
            Ok(AggregatedMessage::Binary(whole))
        })
    }
}

impl futures::Stream for Inbox {
    type Item = Result<AggregatedMessage, ProtocolError>;

    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            if !this.pending.is_empty() {
                match this.codec.decode(&mut this.pending) {
                    Err(err) => {
                        this.ended = true;
                        return Poll::Ready(Some(Err(err)));
                    }
                    Ok(Some(frame)) => match this.assemble(frame) {
                        Some(message) => return Poll::Ready(Some(message)),
                        None => continue,
                    },
                    Ok(None) => {}
                }
            }
            if this.pending.is_empty() && this.pending.capacity() > 0 {
                // Idle: hold no buffer.
                this.pending = BytesMut::new();
            }
            let pending = &mut this.pending;
            let read = |socket: &Socket| {
                let mut scratch = [0u8; 2048];
                let n = socket.try_read(&mut scratch)?;
                pending.extend_from_slice(&scratch[..n]);
                Ok(n)
            };
            match this.input.poll_read(&this.read, cx, read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(err)) => {
                    this.ended = true;
                    return Poll::Ready(Some(Err(ProtocolError::Io(err))));
                }
                Poll::Ready(Ok(0)) => {
                    this.ended = true;
                    return Poll::Ready(None);
                }
                Poll::Ready(Ok(_)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;

    /// An inbox on one end of a loopback connection.
    async fn inbox(max_message: usize) -> (Inbox, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (
            Inbox::new(Arc::new(Socket::plain(server)), max_message),
            client,
        )
    }

    fn part(item: Item) -> Frame {
        Frame::Continuation(item)
    }

    #[tokio::test]
    async fn continuations_are_joined_and_checked_as_actix_ws_does() {
        let (mut inbox, _client) = inbox(8).await;
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        assert!(inbox.assemble(part(Item::FirstText(b("ab")))).is_none());
        assert!(inbox.assemble(part(Item::Continue(b("")))).is_none());
        assert!(inbox.assemble(part(Item::Continue(b("cd")))).is_none());
        match inbox.assemble(part(Item::Last(b("e")))) {
            Some(Ok(AggregatedMessage::Text(text))) => assert_eq!(&*text, "abcde"),
            other => panic!("{other:?}"),
        }
        // Too big: one error, then the rest of that message is skipped and
        // the next one is read normally.
        assert!(
            inbox
                .assemble(part(Item::FirstBinary(b("12345"))))
                .is_none()
        );
        match inbox.assemble(part(Item::Continue(b("6789")))) {
            Some(Err(ProtocolError::Io(e))) => {
                assert!(e.to_string().contains("continuation size"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert!(inbox.assemble(part(Item::Continue(b("more")))).is_none());
        assert!(inbox.assemble(part(Item::Last(b("end")))).is_none());
        assert!(matches!(
            inbox.assemble(Frame::Binary(b("x"))),
            Some(Ok(AggregatedMessage::Binary(_)))
        ));
        // Text must be UTF-8, whole or joined.
        match inbox.assemble(Frame::Text(Bytes::from_static(&[0xff, 0xfe]))) {
            Some(Err(ProtocolError::Io(e))) => assert_eq!(e.kind(), io::ErrorKind::InvalidData),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn the_inbox_reads_frames_from_the_socket_and_ends_at_eof() {
        use futures::StreamExt;
        let (mut inbox, mut client) = inbox(1024).await;
        // A masked text frame "hi" (clients always mask), then a close.
        let mask = [1u8, 2, 3, 4];
        let mut frame = vec![0x81, 0x80 | 2];
        frame.extend_from_slice(&mask);
        frame.extend(b"hi".iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
        client.write_all(&frame).await.unwrap();
        match tokio::time::timeout(Duration::from_secs(5), inbox.next()).await {
            Ok(Some(Ok(AggregatedMessage::Text(text)))) => assert_eq!(&*text, "hi"),
            other => panic!("{other:?}"),
        }
        assert!(inbox.pending.capacity() == 0, "no buffer held while idle");
        drop(client);
        assert!(
            tokio::time::timeout(Duration::from_secs(5), inbox.next())
                .await
                .unwrap()
                .is_none()
        );
    }
}
