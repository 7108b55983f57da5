//! Socket I/O for taken-over streams: writing without waiting forever
//! ([`write_all`], bounded by the [`WriteDeadline`]), and noticing client
//! input or a hang-up without a read per message ([`InputWatch`]).

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
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

/// A write that waits for a client to take more: how it gives up, made
/// only once it has to wait, and kept while the socket takes nothing.
#[derive(Default)]
pub struct Blocked(Option<Pin<Box<dyn Future<Output = ()> + Send>>>);

impl Blocked {
    /// Ready once `socket` takes more, or with an error at most
    /// `deadline.timeout` after the wait began, or at the hard stop.
    /// Called after a write found the socket full (which cleared its
    /// readiness); the wait is over, and forgotten, once it is ready.
    pub fn poll_writable(
        &mut self,
        socket: &Socket,
        deadline: &WriteDeadline,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        if let Poll::Ready(ready) = socket.tcp().poll_write_ready(cx) {
            self.0 = None;
            return Poll::Ready(ready);
        }
        let give_up = self.0.get_or_insert_with(|| {
            let deadline = deadline.clone();
            Box::pin(async move {
                tokio::select! {
                    () = deadline.lifecycle.hard_stopped() => {}
                    () = tokio::time::sleep(deadline.timeout) => {
                        tracing::debug!(timeout = ?deadline.timeout, "closing a stream whose client reads nothing");
                        deadline.metrics.limit_hit("write_timeout");
                    }
                }
            })
        });
        match give_up.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.0 = None;
                Poll::Ready(Err(io::ErrorKind::TimedOut.into()))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// The socket took something: a later wait starts its timeout afresh.
    pub fn clear(&mut self) {
        self.0 = None;
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
            // How the wait gives up is boxed: a stream's task holds it
            // only while its client is behind, not for as long as it
            // streams.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut blocked = Blocked::default();
                poll_fn(|cx| blocked.poll_writable(socket, deadline, cx)).await?;
            }
            Err(e) => return Err(e),
        }
    }
}
