//! Socket I/O for taken-over streams: writing without waiting forever
//! ([`poll_write_parts`], bounded by the [`WriteDeadline`]), and noticing client
//! input or a hang-up without a read per message ([`InputWatch`]).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use super::socket::Socket;
use crate::lifecycle::Lifecycle;
use crate::metrics::Metrics;

/// When a stream blocked on a client that does not read gives up: one
/// for all streams, each holding a pointer to it (a copy in every stream
/// and WebSocket writer was 40 bytes of each).
#[derive(Clone)]
pub struct WriteDeadline(Arc<Deadline>);

pub struct Deadline {
    /// Its hard stop ends every stream at once, even one blocked writing
    /// to a client that does not read (after the shutdown grace period).
    pub lifecycle: Arc<Lifecycle>,
    /// Longest wait for a client to take any byte at all.
    pub timeout: Duration,
    pub metrics: Arc<Metrics>,
}

impl WriteDeadline {
    pub fn new(lifecycle: Arc<Lifecycle>, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        WriteDeadline(Arc::new(Deadline {
            lifecycle,
            timeout,
            metrics,
        }))
    }
}

impl std::ops::Deref for WriteDeadline {
    type Target = Deadline;

    fn deref(&self) -> &Deadline {
        &self.0
    }
}

/// Reads a socket only when it has something: a look at its readiness (no
/// lock, no new registration) is enough until the next readiness comes.
/// Streams poll this on every message they send, to notice a client's
/// frame or hang-up without waiting for their next write.
#[derive(Default)]
pub struct InputWatch {
    /// Registered for the socket's next readiness.
    armed: bool,
    /// Bytes a stream that takes no input has read and dropped.
    dropped: usize,
}

/// Input a stream that takes none reads and drops before it treats its
/// client as gone: an HTTP/1.1 client has nothing to send once its
/// request is in (kubefan answers no pipelined request on a stream's
/// connection), so this is a request body's tail at most, not a
/// conversation.
pub const MAX_DROPPED_INPUT: usize = 64 << 10;

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

    /// The next read registers the task's waker again (after another
    /// task, a batch writer, watched the socket).
    pub fn rearm(&mut self) {
        self.armed = false;
    }

    /// Whether the client of a stream that takes no input is gone (end of
    /// file or an error), or sent more than [`MAX_DROPPED_INPUT`], which
    /// ends its stream too; what it sends is read and dropped.
    pub fn hung_up(&mut self, socket: &Socket, cx: &mut Context<'_>) -> bool {
        let discard = |socket: &Socket| socket.try_read(&mut [0u8; 2048]);
        loop {
            match self.poll_read(socket, cx, discard) {
                Poll::Pending => return false,
                Poll::Ready(Ok(0) | Err(_)) => return true,
                Poll::Ready(Ok(n)) => {
                    self.dropped += n;
                    if self.dropped > MAX_DROPPED_INPUT {
                        tracing::debug!(
                            bytes = self.dropped,
                            "ending a stream whose client keeps sending"
                        );
                        return true;
                    }
                }
            }
        }
    }
}

/// How long a connection kubefan closes stays open after its last frame
/// and its FIN, reading and dropping what the client still sends
/// (nginx's lingering close, for the same reason): a socket closed with
/// unread input is reset, and a reset can throw away the last frame (a
/// WebSocket Close saying why, an HTTP/2 GOAWAY) before the client has
/// read it. A client that goes on sending is exactly the one that needs
/// to be told.
pub const LINGER: Duration = Duration::from_secs(1);
/// Input a lingering connection reads and drops before it only waits.
const LINGER_BYTES: usize = 256 << 10;

/// A closing connection's last reads ([`LINGER`]); its owner bounds the
/// time.
#[derive(Default)]
pub struct Linger {
    watch: InputWatch,
    dropped: usize,
}

impl Linger {
    /// Ready once the client has closed its side too (or the connection
    /// failed); what it sends meanwhile is read and dropped, up to
    /// [`LINGER_BYTES`], then left unread.
    pub fn poll(&mut self, socket: &Socket, cx: &mut Context<'_>) -> Poll<()> {
        let discard = |socket: &Socket| socket.try_read(&mut [0u8; 2048]);
        while self.dropped < LINGER_BYTES {
            match self.watch.poll_read(socket, cx, discard) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(()),
                Poll::Ready(Ok(n)) => self.dropped += n,
            }
        }
        Poll::Pending
    }
}

/// [`Linger`] on a connection kubefan no longer drives (an HTTP/2
/// connection h2 is done with): at most [`LINGER`], reading and dropping
/// at most [`LINGER_BYTES`].
pub async fn linger(mut io: impl tokio::io::AsyncRead + Unpin) {
    use tokio::io::AsyncReadExt;
    let mut dropped = 0;
    let mut scratch = [0u8; 2048];
    let _ = tokio::time::timeout(LINGER, async {
        while dropped < LINGER_BYTES {
            match io.read(&mut scratch).await {
                Ok(0) | Err(_) => return,
                Ok(n) => dropped += n,
            }
        }
        std::future::pending::<()>().await;
    })
    .await;
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
        self.poll_give_up(deadline, cx)
            .map(|()| Err(io::ErrorKind::TimedOut.into()))
    }

    /// Ready (and forgotten) at most `deadline.timeout` after the wait
    /// began, or at the hard stop: the write gives up. For waits on
    /// something else than the socket (an HTTP/2 stream's window).
    pub fn poll_give_up(&mut self, deadline: &WriteDeadline, cx: &mut Context<'_>) -> Poll<()> {
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
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// The socket took something: a later wait starts its timeout afresh.
    pub fn clear(&mut self) {
        self.0 = None;
    }
}

/// Most parts [`poll_write_parts`] writes at once.
pub const MAX_PARTS: usize = 5;

/// Writes `parts` one after the other, `*written` bytes of them having
/// gone already: one vectored write per try (`Socket::try_write_vectored`), no copy, waiting for a client
/// that takes nothing (not forever: [`Blocked`]). Ready once all of it
/// went (and, over TLS, was sent). What a stream's hand-written task calls
/// with its write in progress, which it keeps across `Pending`.
pub fn poll_write_parts(
    socket: &Socket,
    deadline: &WriteDeadline,
    blocked: &mut Blocked,
    cx: &mut Context<'_>,
    parts: &[&[u8]],
    written: &mut usize,
) -> Poll<io::Result<()>> {
    debug_assert!(parts.len() <= MAX_PARTS);
    loop {
        let mut skip = *written;
        let mut bufs = [IoSlice::new(&[]); MAX_PARTS];
        let mut n = 0;
        for part in parts {
            if skip >= part.len() {
                skip -= part.len();
                continue;
            }
            bufs[n] = IoSlice::new(&part[skip..]);
            skip = 0;
            n += 1;
        }
        let done = if n == 0 {
            socket.try_flush().map(|()| true)
        } else {
            socket.try_write_vectored(&bufs[..n]).and_then(|w| match w {
                0 => Err(io::ErrorKind::WriteZero.into()),
                w => {
                    *written += w;
                    Ok(false)
                }
            })
        };
        match done {
            Ok(true) => {
                blocked.clear();
                return Poll::Ready(Ok(()));
            }
            Ok(false) => blocked.clear(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                ready!(blocked.poll_writable(socket, deadline, cx))?;
            }
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    fn deadline(timeout: Duration) -> WriteDeadline {
        WriteDeadline::new(Lifecycle::new(), timeout, Arc::new(Metrics::new()))
    }

    async fn pair() -> (Socket, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (Socket::plain(server), client)
    }

    #[tokio::test]
    async fn parts_larger_than_the_socket_takes_go_out_whole_and_in_order() {
        let (socket, mut client) = pair().await;
        // Several megabytes: far more than the socket buffers hold, so the
        // write stops part-way (inside a part) and resumes from `written`.
        let parts: Vec<Vec<u8>> = (0u8..4)
            .map(|i| {
                (0..1_500_000u32)
                    .map(|j| i.wrapping_mul(31) ^ j as u8)
                    .collect()
            })
            .collect();
        let expected: Vec<u8> = parts.concat();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.unwrap();
            got
        });
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        let (deadline, mut blocked, mut written) =
            (deadline(Duration::from_secs(30)), Blocked::default(), 0);
        let wrote = tokio::time::timeout(
            Duration::from_secs(30),
            poll_fn(|cx| {
                poll_write_parts(&socket, &deadline, &mut blocked, cx, &refs, &mut written)
            }),
        )
        .await
        .expect("the reader takes everything");
        wrote.unwrap();
        assert_eq!(written, expected.len());
        socket.shutdown();
        let got = tokio::time::timeout(Duration::from_secs(30), reader)
            .await
            .unwrap()
            .unwrap();
        assert!(
            got == expected,
            "{} bytes arrived, {} sent",
            got.len(),
            expected.len()
        );
    }

    #[tokio::test]
    async fn a_client_that_keeps_sending_to_a_stream_that_takes_nothing_is_let_go() {
        use tokio::io::AsyncWriteExt;
        let (socket, mut client) = pair().await;
        let mut watch = InputWatch::default();
        let hung_up = |watch: &mut InputWatch| {
            let waker = futures::task::noop_waker();
            watch.hung_up(&socket, &mut Context::from_waker(&waker))
        };
        // A request body's tail is read and dropped; the stream goes on.
        client.write_all(&[b'x'; 1000]).await.unwrap();
        socket.tcp().readable().await.unwrap();
        assert!(!hung_up(&mut watch));
        // More than a tail: the client is let go, however slowly it came.
        let mut sent = 1000;
        while sent <= MAX_DROPPED_INPUT {
            client.write_all(&[b'x'; 4096]).await.unwrap();
            sent += 4096;
        }
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                socket.tcp().readable().await.unwrap();
                if hung_up(&mut watch) {
                    break;
                }
            }
        })
        .await;
        assert!(ended.is_ok(), "{sent} bytes sent and the stream goes on");
        // A client that only hangs up is gone too.
        let (socket, client) = pair().await;
        drop(client);
        socket.tcp().readable().await.unwrap();
        let waker = futures::task::noop_waker();
        assert!(InputWatch::default().hung_up(&socket, &mut Context::from_waker(&waker)));
    }

    // Paused time: once the socket is full the runtime is idle, and the
    // clock goes straight to the write timeout.
    #[tokio::test(start_paused = true)]
    async fn a_client_that_takes_nothing_ends_the_write_at_the_timeout() {
        let (socket, _client) = pair().await;
        let big = vec![7u8; 32 << 20];
        let (deadline, mut blocked, mut written) =
            (deadline(Duration::from_millis(200)), Blocked::default(), 0);
        let wrote = tokio::time::timeout(
            Duration::from_secs(30),
            poll_fn(|cx| {
                poll_write_parts(&socket, &deadline, &mut blocked, cx, &[&big], &mut written)
            }),
        )
        .await
        .expect("the write gives up by itself");
        assert_eq!(wrote.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(written > 0 && written < big.len(), "{written} bytes went");
    }
}
