//! What actix-http does not time on an HTTP/1.1 connection it serves,
//! timed ([`Watchdog`], in [`super::server::FrontIo`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The two waits actix-http's HTTP/1 dispatcher does not bound, on a
/// connection it still serves: a request after the first whose head never
/// completes (its head timer is for the first request only, and any byte
/// read clears its keep-alive timer: a client trickling a second request
/// held the connection for ever, reaching no limit, since no request got
/// to the middleware), and a response the client does not read (it has no
/// write timeout: the response's permit was held for ever). A request is
/// to be answered, or its answer begun, within `request_timeout` of its
/// first byte; a blocked write is to move within `write_timeout`. Past
/// either the connection fails, and actix drops it. A stream that took
/// its socket over has timeouts of its own.
pub(super) struct Watchdog {
    request_timeout: Duration,
    write_timeout: Duration,
    /// Since when bytes have been read that nothing was written after.
    request_since: Option<Instant>,
    /// Since when writes have been blocked.
    blocked_since: Option<Instant>,
    /// Wakes the connection's task at the first of the two deadlines.
    timer: Option<Pin<Box<Sleep>>>,
}

impl Watchdog {
    pub(super) fn new(request_timeout: Duration, write_timeout: Duration) -> Watchdog {
        Watchdog {
            request_timeout,
            write_timeout,
            request_since: None,
            blocked_since: None,
            timer: None,
        }
    }

    pub(super) fn read(&mut self) {
        self.request_since.get_or_insert_with(Instant::now);
    }

    pub(super) fn wrote(&mut self) {
        self.request_since = None;
        self.blocked_since = None;
    }

    pub(super) fn blocked(&mut self) {
        self.blocked_since.get_or_insert_with(Instant::now);
    }

    /// Everything written went (a TLS session's records too): nothing is
    /// blocked, whether or not another write follows.
    pub(super) fn flushed(&mut self) {
        self.blocked_since = None;
    }

    /// The first deadline, if one is running.
    pub(super) fn deadline(&self) -> Option<Instant> {
        let request = self.request_since.map(|at| at + self.request_timeout);
        let write = self.blocked_since.map(|at| at + self.write_timeout);
        request.into_iter().chain(write).min()
    }

    /// An error once a deadline has passed; else `cx` is woken at the
    /// first (the task then polls its I/O again, and gets the error).
    pub(super) fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let Some(deadline) = self.deadline() else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            self.timer = None;
            let why = if self
                .blocked_since
                .is_some_and(|at| at + self.write_timeout <= deadline)
            {
                "the client took nothing of a response for the write timeout"
            } else {
                "the client sent no complete request in time"
            };
            return Err(io::Error::new(io::ErrorKind::TimedOut, why));
        }
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        // Registered for the deadline (ready only once it has passed,
        // which was ruled out above).
        let _ = timer.as_mut().poll(cx);
        Ok(())
    }

    /// What a write's poll says of it, with the watchdog's verdict.
    pub(super) fn after_write(
        &mut self,
        poll: Poll<io::Result<usize>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        match poll {
            Poll::Ready(Ok(n)) if n > 0 => {
                self.wrote();
                Poll::Ready(Ok(n))
            }
            Poll::Pending => {
                self.blocked();
                match self.check(cx) {
                    Ok(()) => Poll::Pending,
                    Err(err) => Poll::Ready(Err(err)),
                }
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write that blocked and then went, by a write or a flush, leaves
    /// no deadline behind: a stale one would end a connection that is
    /// only idle between requests.
    #[test]
    fn the_watchdog_times_only_what_is_under_way() {
        let mut watch = Watchdog::new(Duration::from_secs(60), Duration::from_secs(1));
        assert_eq!(watch.deadline(), None);
        watch.read();
        let request = watch.deadline().expect("a request under way");
        watch.blocked();
        assert!(watch.deadline().unwrap() < request, "the write's is first");
        watch.flushed();
        assert_eq!(watch.deadline(), Some(request));
        watch.blocked();
        watch.wrote();
        assert_eq!(watch.deadline(), None, "answered");
    }
}
