//! A taken-over connection's socket: plain TCP, or TCP with the TLS
//! session its handshake negotiated.
//!
//! A TLS connection is taken over like a plain one: actix's connection
//! (its two 8 KiB buffers and its task) is let go, and the stream keeps
//! the TCP socket and the rustls session, nothing else. kubefan drives the
//! session itself by readiness, as it drives a plain socket: plaintext is
//! encrypted into the session's buffer (bounded by [`TLS_BUFFER`]) and the
//! records go out in one `writev`; a client's records are decrypted only
//! when the socket has some. The copy into the session is the encryption
//! itself: shared frames are still never copied per subscriber before it.
//!
//! Both halves of a WebSocket share one [`Socket`]; the session sits
//! behind a mutex that no await ever holds.

use std::io::{self, IoSlice, Read, Write};
use std::sync::Mutex;

use rustls::ServerConnection;
use tokio::net::TcpStream;

/// Encrypted bytes a session may hold that the socket has not taken: one
/// full TLS record. A client that reads nothing costs this much at most,
/// beside the kernel's socket buffer.
pub const TLS_BUFFER: usize = 16 << 10;

/// A connection out of any runtime's reactor, on its way to the task that
/// will serve it.
pub struct Detached {
    tcp: std::net::TcpStream,
    tls: Option<Box<ServerConnection>>,
}

impl Detached {
    pub fn plain(tcp: std::net::TcpStream) -> Detached {
        Detached { tcp, tls: None }
    }

    pub fn tls(tcp: std::net::TcpStream, session: ServerConnection) -> Detached {
        Detached {
            tcp,
            tls: Some(Box::new(session)),
        }
    }

    /// Registers the socket with the current runtime's reactor.
    pub fn attach(self) -> io::Result<Socket> {
        let tcp = TcpStream::from_std(self.tcp)?;
        // Each write is a whole message: do not hold it back for the next.
        tcp.set_nodelay(true)?;
        let tls = self.tls.map(|mut session| {
            session.set_buffer_limit(Some(TLS_BUFFER));
            Mutex::new(session)
        });
        Ok(Socket { tcp, tls })
    }
}

/// A taken-over connection, plain or TLS.
pub struct Socket {
    tcp: TcpStream,
    tls: Option<Mutex<Box<ServerConnection>>>,
}

impl Socket {
    /// A plain socket (tests).
    #[cfg(test)]
    pub fn plain(tcp: TcpStream) -> Socket {
        Socket { tcp, tls: None }
    }

    /// The TCP socket underneath: its readiness is the connection's.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    fn session(&self) -> Option<std::sync::MutexGuard<'_, Box<ServerConnection>>> {
        // Nothing panics while holding the lock but rustls itself, after
        // which the session is as good as gone anyway.
        self.tls
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Writes as much of `bufs` as the connection takes now; `WouldBlock`
    /// when it takes nothing. Over TLS, what is taken may still sit in the
    /// session: [`Socket::try_flush`] sends it.
    pub fn try_write_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let Some(mut session) = self.session() else {
            // sendmsg(2) rather than writev(2): a socket needs no file
            // position, and `perf` put a tenth of a delivery's kernel time
            // in writev's file layer (`vfs_writev`, `fdget_pos`).
            return self.tcp.try_io(tokio::io::Interest::WRITABLE, || {
                socket2::SockRef::from(&self.tcp).send_vectored(bufs)
            });
        };
        flush(&mut session, &self.tcp)?;
        let taken = session.writer().write_vectored(bufs)?;
        match flush(&mut session, &self.tcp) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
            _ => {}
        }
        if taken == 0 && bufs.iter().any(|b| !b.is_empty()) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(taken)
    }

    /// One try at writing `bufs`, for a batch writer's loop over thousands
    /// of sockets. On a plain socket one `sendmsg`, without looking at
    /// tokio's record of its readiness first (one more cold cache line per
    /// socket); `WouldBlock` leaves the record as it was: the stream's task
    /// then finds the socket full on its own first try, and waits for it as
    /// usual. Over TLS, [`Socket::try_write_vectored`]: encrypted into the
    /// session, its records sent in one `writev`; what the socket did not
    /// take stays in the session ([`Socket::holds_records`]).
    pub fn send_now(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.tls.is_some() {
            return self.try_write_vectored(bufs);
        }
        socket2::SockRef::from(&self.tcp).send_vectored(bufs)
    }

    /// Whether the TLS session holds records the socket has not taken yet
    /// (the stream's task sends them, [`Socket::try_flush`]).
    pub fn holds_records(&self) -> bool {
        self.session().is_some_and(|s| s.wants_write())
    }

    /// Sends what the TLS session holds; `WouldBlock` while the socket is
    /// full. Nothing to do on a plain socket.
    pub fn try_flush(&self) -> io::Result<()> {
        match self.session() {
            Some(mut session) => flush(&mut session, &self.tcp),
            None => Ok(()),
        }
    }

    pub async fn writable(&self) -> io::Result<()> {
        self.tcp.writable().await
    }

    /// Reads what the client sent (decrypted): `Ok(0)` at its end,
    /// `WouldBlock` when the socket has nothing more.
    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(mut session) = self.session() else {
            return self.tcp.try_read(buf);
        };
        loop {
            match session.reader().read(buf) {
                // Ok(0): the client's close_notify.
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            // Until the socket itself would block: its readiness is only
            // cleared then.
            if session.read_tls(&mut TcpIo(&self.tcp))? == 0 {
                return Ok(0);
            }
            session
                .process_new_packets()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
    }

    /// Ends the sending side: TLS's close_notify (if the socket takes it
    /// now), then FIN.
    pub fn shutdown(&self) {
        if let Some(mut session) = self.session() {
            session.send_close_notify();
            let _ = flush(&mut session, &self.tcp);
        }
        let _ = socket2::SockRef::from(&self.tcp).shutdown(std::net::Shutdown::Write);
    }
}

/// Sends the session's pending records until there are none or the socket
/// is full.
fn flush(session: &mut ServerConnection, tcp: &TcpStream) -> io::Result<()> {
    while session.wants_write() {
        if session.write_tls(&mut TcpIo(tcp))? == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
    }
    Ok(())
}

/// A non-blocking socket as `std::io`'s reader and writer, for rustls.
struct TcpIo<'a>(&'a TcpStream);

impl Read for TcpIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for TcpIo<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
