//! Socket I/O for taken-over streams: writing without waiting forever
//! ([`write_all`], bounded by the [`WriteDeadline`]), and noticing client
//! input or a hang-up without a read per message ([`InputWatch`]).

use std::io::{self, IoSlice};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::socket::Socket;
use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;

/// When a stream blocked on a client that does not read gives up.
#[derive(Clone)]
pub struct WriteDeadline {
    /// Its hard stop ends every stream at once, even one blocked writing
    /// to a client that does not read (after the shutdown grace period).
    pub lifecycle: Arc<Lifecycle>,
    /// Longest wait for a client to take any byte at all.
    pub timeout: Duration,
    pub metrics: Arc<Metrics>,
}

/// Reads a socket only when it has something: a look at its readiness (no
/// lock, no new registration) is enough until the next readiness comes.
/// Streams poll this on every message they send, to notice a client's
/// frame or hang-up without waiting for their next write.
#[derive(Default)]
pub struct InputWatch {
    /// Registered for the socket's next readiness.
    armed: bool,
}

impl InputWatch {
    /// Calls `read` (which reads from `socket`) if the socket has something
    /// (`Ok(0)`: the client closed); otherwise the task is woken when it
    /// next becomes readable. `read` owns its buffer, so a look that finds
    /// nothing costs no buffer at all.
    pub fn poll_read(
        &mut self,
        socket: &Socket,
        cx: &mut Context<'_>,
        mut read: impl FnMut(&Socket) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            if self.armed {
                // Reads only if readiness came since arming.
                let mut looked = false;
                let done = socket.tcp().try_io(tokio::io::Interest::READABLE, || {
                    looked = true;
                    read(socket)
                });
                match done {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock && !looked => {
                        return Poll::Pending;
                    }
                    // The readiness was used up (and the registration with
                    // it): arm again.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.armed = false,
                    done => return Poll::Ready(done),
                }
            }
            match socket.tcp().poll_read_ready(cx) {
                Poll::Pending => {
                    self.armed = true;
                    return Poll::Pending;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => match read(socket) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    done => return Poll::Ready(done),
                },
            }
        }
    }

    /// Whether the client of a stream that takes no input is gone (end of
    /// file or an error); what it sends is read and dropped.
    pub fn hung_up(&mut self, socket: &Socket, cx: &mut Context<'_>) -> bool {
        let discard = |socket: &Socket| socket.try_read(&mut [0u8; 512]);
        loop {
            match self.poll_read(socket, cx, discard) {
                Poll::Pending => return false,
                Poll::Ready(Ok(0) | Err(_)) => return true,
                Poll::Ready(Ok(_)) => {}
            }
        }
    }
}

/// Waits until `socket` takes more, at most `deadline.timeout` and not past
/// the hard stop.
async fn writable(socket: &Socket, deadline: &WriteDeadline) -> io::Result<()> {
    tokio::select! {
        ready = socket.writable() => ready,
        _ = deadline.lifecycle.hard_stopped() => Err(io::ErrorKind::TimedOut.into()),
        _ = tokio::time::sleep(deadline.timeout) => {
            tracing::debug!(timeout = ?deadline.timeout, "closing a stream whose client reads nothing");
            deadline.metrics.limit_hit("write_timeout");
            Err(io::ErrorKind::TimedOut.into())
        }
    }
}

/// Writes all of `bufs` (and, over TLS, sends all of it), waiting for the
/// socket when its buffer is full (not forever: see [`writable`]).
pub async fn write_all(
    socket: &Socket,
    deadline: &WriteDeadline,
    mut bufs: &mut [IoSlice<'_>],
) -> io::Result<()> {
    loop {
        let done = if bufs.is_empty() {
            socket.try_flush().map(|()| true)
        } else {
            socket.try_write_vectored(bufs).and_then(|n| match n {
                0 => Err(io::ErrorKind::WriteZero.into()),
                n => {
                    IoSlice::advance_slices(&mut bufs, n);
                    Ok(false)
                }
            })
        };
        match done {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            // Boxed: a stream's task holds this state only while its
            // client is behind, not for as long as it streams.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Box::pin(writable(socket, deadline)).await?
            }
            Err(e) => return Err(e),
        }
    }
}
