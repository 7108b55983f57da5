//! When a delivery's bytes reached the subscriber's socket, as the kernel
//! stamped them, beside when the generator got round to reading them.
//!
//! At 10,000 subscribers the generator's core is saturated (`RESULTS.md`,
//! stops 42 and 43: two-thirds of it is the kernel's receive and ACK path,
//! which no client code avoids), so a delivery can wait in its socket for
//! the generator after the server has written it, and the latency read in
//! user space is partly the generator's. A real viewer on its own machine
//! reads promptly. Each read here is a `recvmsg` asking for the kernel's
//! receive timestamp (`SO_TIMESTAMPNS`, Documentation/networking/timestamping.rst:
//! for TCP "the timestamp of the most recent skb" read, set in
//! `tcp_recv_timestamp`); on loopback that stamp is taken on the sending
//! core as the server's write passes through the stack, so it measures the
//! server (and the kernel's send path) and not the generator's queue.
//!
//! A read may take several deliveries, and the stamp is the newest one's:
//! an earlier delivery in the same read is charged the later arrival, so
//! arrival latencies err late, never early.
//!
//! The generator's only foreign calls (`setsockopt`, `recvmsg`) are here,
//! with libc rather than nix's safe `recvmsg`: that one reads only into
//! initialized memory, and each read's 16 KiB of room (`http1.rs`) would be
//! zeroed first, on the generator's saturated core.

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The newest receive stamp of a connection (ns since the Unix epoch; 0:
/// nothing read yet), shared with whoever reads what the connection
/// carries (an HTTP/2 connection's streams are read by other tasks).
#[derive(Clone, Debug, Default)]
pub struct Arrival(Arc<AtomicU64>);

impl Arrival {
    /// When the bytes read last reached the socket; `None` before the
    /// first read.
    pub fn get(&self) -> Option<u64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|t| *t != 0)
    }

    fn set(&self, nanos: u64) {
        self.0.store(nanos, Ordering::Relaxed);
    }
}

/// A TCP stream whose reads keep the kernel's receive stamp in an
/// [`Arrival`].
pub struct Stamped {
    tcp: TcpStream,
    arrival: Arrival,
}

impl Stamped {
    /// The server's address (a TLS session is for it).
    pub fn peer_ip(&self) -> io::Result<std::net::IpAddr> {
        Ok(self.tcp.peer_addr()?.ip())
    }

    /// Asks the kernel to stamp what `tcp` receives.
    #[allow(unsafe_code)] // A foreign call (the module's doc says why).
    pub fn new(tcp: TcpStream) -> io::Result<(Stamped, Arrival)> {
        let on: libc::c_int = 1;
        // SAFETY: a valid socket and an int-sized option value.
        let r = unsafe {
            libc::setsockopt(
                tcp.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&raw const on).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        let arrival = Arrival::default();
        Ok((
            Stamped {
                tcp,
                arrival: arrival.clone(),
            },
            arrival,
        ))
    }
}

/// One `recvmsg` into `buf`: the bytes read and the receive stamp (ns since
/// the Unix epoch) if the kernel gave one.
#[allow(unsafe_code)] // A foreign call (the module's doc says why).
fn recv_stamped(
    fd: i32,
    buf: &mut [std::mem::MaybeUninit<u8>],
) -> io::Result<(usize, Option<u64>)> {
    // Room for one SCM_TIMESTAMPNS message (a timespec), aligned for cmsghdr.
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty one; the pointers set
    // below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control);
    // SAFETY: `msg` points at `buf` and `control`, both writable for the
    // lengths given.
    let n = unsafe { libc::recvmsg(fd, &raw mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut stamp = None;
    // SAFETY: walking the control messages the kernel wrote into `control`,
    // with the libc macros that bound them by `msg_controllen`.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
        }
    }
    Ok((n as usize, stamp))
}

impl AsyncRead for Stamped {
    #[allow(unsafe_code)] // Reads into uninitialized room, as tokio's own do.
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            ready!(this.tcp.poll_read_ready(cx))?;
            let fd = this.tcp.as_raw_fd();
            // SAFETY: recvmsg only writes into the unfilled part, and only
            // the `n` bytes it reports are marked filled.
            let unfilled = unsafe { buf.unfilled_mut() };
            match this
                .tcp
                .try_io(Interest::READABLE, || recv_stamped(fd, unfilled))
            {
                Ok((n, stamp)) => {
                    if n > 0 {
                        // No stamp: now, which errs late as a read's own
                        // time does. The kernel turns stamping on for the
                        // first socket that asks a moment later (from a
                        // work queue: `net_enable_timestamp`), so a run's
                        // first bytes may come unstamped.
                        this.arrival
                            .set(stamp.unwrap_or_else(crate::subscriber::now_nanos));
                    }
                    // SAFETY: the kernel wrote `n` bytes.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Stamped {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The stamp is when the bytes came, not when they were read: taken
    /// once the bytes are seen in the socket and before the read, the
    /// clock is already past the stamp (a stamp of the read's own time
    /// would be after it).
    #[tokio::test]
    async fn a_read_carries_when_its_bytes_arrived_not_when_they_were_read() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        let (mut stamped, arrival) = Stamped::new(client).unwrap();
        assert_eq!(arrival.get(), None);
        // Until the kernel stamps (it turns stamping on a moment after the
        // first socket asks, if no other has), a byte at a time.
        let mut buf = [0u8; 64];
        let stamping = async {
            loop {
                server.write_all(b"x").await.unwrap();
                stamped.tcp.readable().await.unwrap();
                let fd = stamped.tcp.as_raw_fd();
                let mut room = [std::mem::MaybeUninit::uninit(); 64];
                match stamped
                    .tcp
                    .try_io(Interest::READABLE, || recv_stamped(fd, &mut room))
                {
                    Ok((_, Some(_))) => break,
                    Ok((_, None)) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(10), stamping)
            .await
            .expect("the kernel stamps within 10 s");
        // Nothing left over from that.
        assert!(stamped.tcp.try_read(&mut buf).is_err());
        let before = crate::subscriber::now_nanos();
        server.write_all(b"one delivery").await.unwrap();
        // Peeked (not read): the bytes are in the socket, whatever the
        // readiness tokio had cached.
        assert_eq!(stamped.tcp.peek(&mut buf).await.unwrap(), 12);
        let seen_readable = crate::subscriber::now_nanos();
        let n = stamped.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"one delivery");
        let arrived = arrival.get().expect("a stamp after a read");
        assert!(
            (before..=seen_readable).contains(&arrived),
            "stamped at {arrived}, not between the write ({before}) and the bytes seen in the socket ({seen_readable})"
        );
        // Writes pass through.
        stamped.write_all(b"back").await.unwrap();
        let n = server.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"back");
    }
}
