//! A single-stream socket (`GET /stream/{resource}` upgraded), in one task
//! on the streams' runtime, as an SSE stream is: it writes the
//! subscription's messages straight onto the socket, answers the client's
//! frames, pings on every keep-alive tick, and closes on the idle timeout
//! or when its stream ends (with the Close code of that ending). No
//! outbox, no second task.

use actix_web::web;
use actix_ws::CloseCode;
use futures::StreamExt;
use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

use super::message::{IDLE, Outgoing, TAIL, WsFraming, close_for, close_reason, parts};
use super::{ClientFrame, Ending, lost};
use crate::transport::state::AppState;
use crate::transport::stream::Framed;
use crate::transport::takeover::{Opcode, Taken, Upgraded, WsWriter};

/// What the socket's task does next.
enum Next {
    /// A client frame, or the end of the connection.
    Client(ClientFrame),
    /// Messages were framed (false: the stream is over).
    Stream(bool),
}

pub(super) async fn serve(
    taken: Box<Taken>,
    mut framed: Box<Framed<WsFraming>>,
    bytes_sent: Counter,
    state: web::Data<AppState>,
) {
    let Upgraded {
        mut inbox,
        writer: mut raw,
    } = match (*taken).open() {
        Ok(upgraded) => upgraded,
        Err(err) => {
            // Logged; the 101 is not sent, and the connection closes.
            let _ = lost(err);
            return;
        }
    };
    if raw.open().await.is_err() {
        return;
    }
    let idle_timeout = state.stream.effective_ws_idle_timeout();
    let idle = tokio::time::sleep(idle_timeout);
    tokio::pin!(idle);
    let mut pinged = state.lifecycle.ticks();
    let mut out = Vec::new();
    let ending: Ending = loop {
        // The client first: its frames are rare, and looking costs a load
        // of the socket's readiness.
        let next = tokio::select! {
            biased;
            msg = inbox.next() => Next::Client(ClientFrame::of(msg)),
            _ = &mut idle => break Some(close_reason(CloseCode::Policy, IDLE)),
            more = framed.next_into(&mut out) => Next::Stream(more),
        };
        match next {
            Next::Client(frame) => {
                idle.as_mut().reset(Instant::now() + idle_timeout);
                match frame {
                    ClientFrame::End(ending) => break ending,
                    ClientFrame::Ping(payload) => {
                        if raw.send(Opcode::Pong, &payload).await.is_err() {
                            return;
                        }
                    }
                    // A single stream takes no messages: text only proves
                    // the peer alive.
                    ClientFrame::Pong | ClientFrame::Text(_) => {}
                }
            }
            Next::Stream(more) => {
                for msg in out.drain(..) {
                    match send(&mut raw, &msg, &bytes_sent).await {
                        Some(n) => framed.wrote(n),
                        None => return,
                    }
                }
                // Kept for the next item, but not at a snapshot chunk's
                // size for the socket's whole life.
                out.shrink_to(4);
                if !more {
                    break Some(close_for(framed.framing().ending.as_ref()));
                }
                // Pinged on every tick, even while the stream is busy: the
                // pong is what keeps the socket from its idle timeout.
                let ticks = state.lifecycle.ticks();
                if ticks != pinged {
                    pinged = ticks;
                    if raw.send(Opcode::Ping, b"").await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    if let Some(reason) = ending {
        raw.close(
            u16::from(reason.code),
            reason.description.as_deref().unwrap_or(""),
        )
        .await;
    }
}

/// Writes one message's parts to the socket as they are, in one `writev`:
/// no copy per socket to splice the `"id"` in. They are UTF-8: the hub's
/// JSON is serde_json output, the rest ASCII. The bytes sent, or `None`
/// once the socket is gone.
async fn send(raw: &mut WsWriter, msg: &Outgoing, bytes_sent: &Counter) -> Option<u64> {
    let mut tail = [0u8; TAIL];
    let parts = parts(None, msg, &mut tail);
    let n = parts.iter().map(|p| p.len() as u64).sum();
    bytes_sent.inc_by(n);
    raw.send_parts(Opcode::Text, &parts).await.ok().map(|()| n)
}
