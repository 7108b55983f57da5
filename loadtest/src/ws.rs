//! A WebSocket client for subscribers (RFC 6455), read straight off its
//! socket.

use anyhow::{Context, bail};
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::http1::{Io, exchange};
use crate::target::Credential;

/// A WebSocket client read straight off its socket: frames are split in
/// place and their payloads only searched, never copied, validated or
/// wrapped. (tokio-tungstenite, used before, kept the generator's core
/// saturated at 10,000 sockets, which made the servers' TCP work, charged
/// to whichever side's core runs it on loopback, depend on how far the
/// generator was behind.)
pub struct WsConn {
    /// The socket, or a TLS stream over it (`wss://`).
    tcp: Box<dyn Io>,
    buf: BytesMut,
}

/// Opcodes of RFC 6455, section 5.2.
const OP_CONTINUATION: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_BINARY: u8 = 0x2;
const OP_CLOSE: u8 = 0x8;
const OP_PING: u8 = 0x9;

impl WsConn {
    /// Sends the upgrade request for `path` and reads the `101` answer.
    pub(crate) async fn handshake(
        mut tcp: Box<dyn Io>,
        host: &str,
        path: &str,
        credential: Option<&Credential>,
    ) -> anyhow::Result<WsConn> {
        const UPGRADE: &str = "Upgrade: websocket\r\nConnection: Upgrade\r\n\
            Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
        let (_, buf) = exchange(&mut tcp, host, path, credential, UPGRADE, 101)
            .await
            .context("no WebSocket upgrade")?;
        Ok(WsConn { tcp, buf })
    }

    /// The next data frame's payload; pings are answered and other control
    /// frames skipped. `None` once the server closes.
    pub(crate) async fn next(&mut self) -> anyhow::Result<Option<Bytes>> {
        loop {
            if let Some((opcode, payload)) = self.frame()? {
                match opcode {
                    OP_TEXT | OP_BINARY | OP_CONTINUATION => return Ok(Some(payload)),
                    OP_CLOSE => return Ok(None),
                    OP_PING => self.pong(&payload).await?,
                    _ => {}
                }
                continue;
            }
            if self.tcp.read_buf(&mut self.buf).await? == 0 {
                return Ok(None);
            }
        }
    }

    /// The first whole frame in the buffer, taken out of it.
    fn frame(&mut self) -> anyhow::Result<Option<(u8, Bytes)>> {
        let buf = &self.buf;
        if buf.len() < 2 {
            return Ok(None);
        }
        let (len, header) = match buf[1] & 0x7f {
            126 if buf.len() >= 4 => (u64::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
            127 if buf.len() >= 10 => (u64::from_be_bytes(buf[2..10].try_into()?), 10),
            126 | 127 => return Ok(None),
            n => (u64::from(n), 2),
        };
        if buf[1] & 0x80 != 0 {
            bail!("the server masked a frame");
        }
        let len = usize::try_from(len)?;
        if buf.len() < header + len {
            // Room for the rest, read in as few calls as it takes.
            self.buf.reserve(header + len - buf.len());
            return Ok(None);
        }
        let opcode = buf[0] & 0x0f;
        let mut frame = self.buf.split_to(header + len);
        frame.advance(header);
        Ok(Some((opcode, frame.freeze())))
    }

    /// Sends a text message in one frame, masked (with a zero key, which
    /// leaves the payload as it is).
    pub(crate) async fn send_text(&mut self, payload: &[u8]) -> anyhow::Result<()> {
        let mut frame = vec![0x80 | OP_TEXT];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n <= 0xffff => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&[0, 0, 0, 0]);
        frame.extend_from_slice(payload);
        self.tcp.write_all(&frame).await?;
        self.tcp.flush().await?;
        Ok(())
    }

    /// Answers a ping; a client's frames are masked (here with a zero key,
    /// which leaves the payload as it is).
    pub(crate) async fn pong(&mut self, payload: &[u8]) -> anyhow::Result<()> {
        let mut frame = vec![0x80 | 0xA, 0x80 | payload.len().min(125) as u8, 0, 0, 0, 0];
        frame.extend_from_slice(&payload[..payload.len().min(125)]);
        self.tcp.write_all(&frame).await?;
        self.tcp.flush().await?;
        Ok(())
    }
}

#[cfg(test)]
/// A text frame as a server sends it (unmasked, payload under 64 KiB).
pub fn server_text(payload: &str) -> Vec<u8> {
    let mut frame = vec![0x81];
    if payload.len() < 126 {
        frame.push(payload.len() as u8);
    } else {
        frame.push(126);
        frame.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    }
    frame.extend_from_slice(payload.as_bytes());
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_websocket_client_splits_frames_and_answers_pings() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut tcp, request, _) = crate::http1::accept_request(&listener).await;
            assert!(request.starts_with("GET /sub/x HTTP/1.1\r\n"));
            let big = vec![b'a'; 300];
            let mut out = b"HTTP/1.1 101 Switching Protocols\r\n\r\n".to_vec();
            out.extend_from_slice(&[0x81, 2, b'h', b'i', 0x89, 1, b'p', 0x81, 126, 1, 44]);
            out.extend_from_slice(&big);
            // Byte by byte: frames split across reads.
            for byte in out {
                tcp.write_all(&[byte]).await.unwrap();
            }
            let mut pong = [0u8; 7];
            tcp.read_exact(&mut pong).await.unwrap();
            tcp.write_all(&[0x88, 0]).await.unwrap();
            pong
        });
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut ws = WsConn::handshake(Box::new(tcp), &addr.to_string(), "/sub/x", None)
            .await
            .unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), &b"hi"[..]);
        assert_eq!(ws.next().await.unwrap().unwrap(), vec![b'a'; 300]);
        assert_eq!(ws.next().await.unwrap(), None, "Close ends it");
        assert_eq!(server.await.unwrap(), [0x8A, 0x81, 0, 0, 0, 0, b'p']);
    }
}
