//! The HTTP server: actix-web's application served by actix-http over TCP
//! connections that a handler may take over, plain or TLS.
//!
//! This is what `actix_web::HttpServer` does, with one difference: each
//! connection's socket sits in a shared slot ([`FrontIo`]), and the
//! request's connection data carries a [`Takeover`] handle to it. A
//! long-lived stream (SSE, Kubernetes watch) takes the socket out once the
//! middleware and its handler have accepted the request, and writes the response
//! itself (`transport::takeover`). actix then sees a connection whose writes
//! go nowhere and whose reads end, and lets it go, with its two 8 KiB
//! buffers and its task: a stream costs its subscription and its socket,
//! nothing more (loadtest/RESULTS.md has the numbers).
//!
//! With TLS, every connection is TLS: the handshake is done here (rustls,
//! the served certificate as it is at that moment), then ALPN decides:
//! `h2` goes to kubefan's own HTTP/2 connection ([`super::h2`]), which
//! calls the same actix-web application for every request; anything else
//! is HTTP/1.1 through actix-http, over a slot that holds the TLS stream
//! and is taken over the same way.
//!
//! A TLS client's certificate chain (`--auth request-header`), taken from
//! the session once the handshake is done, goes with each request as a
//! [`PeerCertificates`]: an HTTP/1.1 connection's in its connection data
//! (`on_connect_ext`, read with `HttpRequest::conn_data`), an HTTP/2
//! stream's in its request's extensions (`h2`; actix-http offers no way
//! to set connection data on a request it did not parse). Both are read
//! in one place, [`super::peer_certificates`]. A stream that takes its
//! connection over has been authenticated already.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use actix_http::body::{BoxBody, MessageBody};
use actix_http::{HttpService, Protocol, Request, Response};
use actix_server::Server;
use actix_service::{
    IntoServiceFactory, Service, ServiceFactory, ServiceFactoryExt, fn_factory, fn_service,
    map_config,
};
use actix_web::dev::AppConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::h2;
use super::socket::Detached;
use super::watchdog::Watchdog;
use crate::lifecycle::Lifecycle;
use crate::limits::Handshakes;
use crate::metrics::{Metrics, Protocol as Wire};
use crate::tls::PeerCertificates;

/// How long a client has to complete its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

type Slot = Rc<RefCell<Conn>>;

/// A connection as actix-http serves it: plain TCP, or TLS over it.
pub enum Front {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Front {
    /// Out of this runtime's reactor, with its TLS session if it has one.
    pub fn detach(self) -> io::Result<Detached> {
        match self {
            Front::Plain(tcp) => Ok(Detached::plain(tcp.into_std()?)),
            Front::Tls(tls) => {
                let (tcp, session) = tls.into_inner();
                Ok(Detached::tls(tcp.into_std()?, session))
            }
        }
    }
}

struct Conn {
    io: Option<Front>,
    /// Who waits to read: woken when the socket is taken, to see the end.
    reader: Option<Waker>,
    watch: Watchdog,
}

/// A connection's I/O as actix sees it: the socket until a handler takes
/// it, then a sink (writes vanish, reads end).
pub struct FrontIo(Slot);

impl FrontIo {
    /// The certificate chain the TLS client presented, if any.
    fn peer_certificates(&self) -> Option<PeerCertificates> {
        match self.0.borrow().io.as_ref()? {
            Front::Plain(_) => None,
            Front::Tls(tls) => PeerCertificates::of(tls.get_ref().1),
        }
    }
}

/// A handle to the socket of the connection a request arrived on, in the
/// request's connection data (`HttpRequest::conn_data`).
#[derive(Clone)]
pub struct Takeover(Slot);

impl Takeover {
    /// The connection, taken away from actix. `None` if already taken.
    pub fn take_socket(&self) -> Option<Front> {
        let mut conn = self.0.borrow_mut();
        let io = conn.io.take();
        if let Some(reader) = conn.reader.take() {
            // actix waits to read the next request on this connection: let
            // it find the end at once and drop the connection now.
            reader.wake();
        }
        io
    }
}

impl AsyncRead for Front {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Front::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Front::Tls(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Front {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Front::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Front::Tls(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Front::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Front::Tls(io) => Pin::new(io).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Front::Plain(io) => io.is_write_vectored(),
            Front::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Front::Plain(io) => Pin::new(io).poll_flush(cx),
            Front::Tls(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Front::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Front::Tls(io) => Pin::new(io).poll_shutdown(cx),
        }
    }
}

impl AsyncRead for FrontIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut conn = self.0.borrow_mut();
        let Some(io) = conn.io.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let before = buf.filled().len();
        let poll = Pin::new(io).poll_read(cx, buf);
        match &poll {
            Poll::Ready(Ok(())) if buf.filled().len() > before => conn.watch.read(),
            Poll::Pending => {
                if let Err(err) = conn.watch.check(cx) {
                    return Poll::Ready(Err(err));
                }
            }
            _ => {}
        }
        if poll.is_pending()
            && !conn
                .reader
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
        {
            conn.reader = Some(cx.waker().clone());
        }
        poll
    }
}

impl AsyncWrite for FrontIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut conn = self.0.borrow_mut();
        let conn = &mut *conn;
        match conn.io.as_mut() {
            Some(io) => conn.watch.after_write(Pin::new(io).poll_write(cx, buf), cx),
            None => Poll::Ready(Ok(buf.len())),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut conn = self.0.borrow_mut();
        let conn = &mut *conn;
        match conn.io.as_mut() {
            Some(io) => conn
                .watch
                .after_write(Pin::new(io).poll_write_vectored(cx, bufs), cx),
            None => Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut conn = self.0.borrow_mut();
        let conn = &mut *conn;
        match conn.io.as_mut() {
            Some(io) => match Pin::new(io).poll_flush(cx) {
                Poll::Pending => {
                    conn.watch.blocked();
                    match conn.watch.check(cx) {
                        Ok(()) => Poll::Pending,
                        Err(err) => Poll::Ready(Err(err)),
                    }
                }
                // Flushed (a TLS session's records written): nothing is
                // blocked any more, whether or not a write follows.
                Poll::Ready(Ok(())) => {
                    conn.watch.flushed();
                    Poll::Ready(Ok(()))
                }
                done => done,
            },
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.0.borrow_mut().io.as_mut() {
            Some(io) => Pin::new(io).poll_shutdown(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

/// How the server accepts and serves connections.
pub struct Settings {
    pub workers: usize,
    /// Seconds requests in flight get to finish once the server is stopped.
    pub grace_secs: u64,
    /// Idle keep-alive connections close when it shuts down.
    pub lifecycle: Arc<Lifecycle>,
    /// TLS on every connection, when set.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// HTTP/2 connections (over TLS only).
    pub h2: h2::Settings,
    pub metrics: Arc<Metrics>,
    /// An HTTP/1.1 request is answered, or its answer begun, this soon
    /// after its first byte, or its connection closes ([`Watchdog`]).
    pub request_timeout: Duration,
    /// An HTTP/1.1 response's blocked write moves this soon, or its
    /// connection closes (the streams' write timeout).
    pub write_timeout: Duration,
    /// TLS handshakes under way per address (`--max-pending-handshakes-per-address`).
    pub handshakes: Arc<Handshakes>,
}

/// Serves `factory`'s application on `listener` (see the module
/// documentation).
pub fn serve<F, I, S, B>(
    listener: std::net::TcpListener,
    settings: Settings,
    factory: F,
) -> io::Result<Server>
where
    F: Fn() -> I + Send + Clone + 'static,
    I: IntoServiceFactory<S, Request>,
    S: ServiceFactory<Request, Config = AppConfig> + 'static,
    S::Error: Into<actix_web::Error> + 'static,
    S::InitError: fmt::Debug,
    S::Response: Into<Response<B>> + 'static,
    <S::Service as Service<Request>>::Future: 'static,
    S::Service: 'static,
    B: MessageBody + 'static,
{
    let addr = listener.local_addr()?;
    let Settings {
        workers,
        grace_secs,
        lifecycle,
        tls,
        h2,
        metrics,
        request_timeout,
        write_timeout,
        handshakes,
    } = settings;
    let tls = tls.map(TlsAcceptor::from);
    let h2 = Arc::new(h2);
    Ok(Server::build()
        .workers(workers)
        .disable_signals()
        .shutdown_timeout(grace_secs)
        .listen("kubefan", listener, move || {
            let lifecycle = lifecycle.clone();
            let app = || {
                factory()
                    .into_factory()
                    .map_err(|err| err.into().error_response())
            };
            // `graceful_shutdown_signal` is what HttpServer uses to close idle
            // keep-alive connections at shutdown (hidden from docs, pinned
            // by Cargo.lock).
            let http1 = HttpService::<FrontIo, _, _>::build()
                .graceful_shutdown_signal({
                    let lifecycle = lifecycle.clone();
                    move || {
                        let lifecycle = lifecycle.clone();
                        async move { lifecycle.shutting_down().await }
                    }
                })
                .local_addr(addr)
                .on_connect_ext(|io: &FrontIo, ext| {
                    ext.insert(Takeover(io.0.clone()));
                    if let Some(chain) = io.peer_certificates() {
                        ext.insert(chain);
                    }
                })
                .finish(map_config(app(), |_| AppConfig::default()));
            let http2 = map_config(
                app().map(|res| res.into().map_into_boxed_body()),
                |_: ()| AppConfig::default(),
            );
            let (tls, h2, metrics) = (tls.clone(), h2.clone(), metrics.clone());
            let handshakes = handshakes.clone();
            fn_factory(move || {
                let http1 = http1.new_service(());
                let http2 = http2.new_service(());
                let (tls, h2, metrics) = (tls.clone(), h2.clone(), metrics.clone());
                let handshakes = handshakes.clone();
                async move {
                    let connections = Rc::new(Connections {
                        http1: Rc::new(http1.await?),
                        http2: Rc::new(http2.await.map_err(|err| {
                            tracing::error!(error = ?err, "the application did not start");
                        })?),
                        tls,
                        h2,
                        metrics,
                        request_timeout,
                        write_timeout,
                        handshakes,
                    });
                    Ok::<_, ()>(fn_service(move |tcp: TcpStream| connections.serve(tcp)))
                }
            })
        })?
        .run())
}

/// One worker's way to serve a connection: actix-http for HTTP/1.x, plain
/// or TLS; kubefan's own HTTP/2 connection for ALPN `h2`.
struct Connections<H1, H2> {
    http1: Rc<H1>,
    http2: Rc<H2>,
    tls: Option<TlsAcceptor>,
    h2: Arc<h2::Settings>,
    metrics: Arc<Metrics>,
    request_timeout: Duration,
    write_timeout: Duration,
    handshakes: Arc<Handshakes>,
}

impl<H1, H2> Connections<H1, H2>
where
    H1: Service<(FrontIo, Protocol, Option<SocketAddr>), Response = ()> + 'static,
    H1::Error: fmt::Debug,
    H2: Service<Request, Response = Response<BoxBody>> + 'static,
    H2::Error: Into<Response<BoxBody>>,
{
    fn serve(&self, tcp: TcpStream) -> impl Future<Output = Result<(), ()>> + use<H1, H2> {
        let (http1, http2) = (self.http1.clone(), self.http2.clone());
        let (tls, h2, metrics) = (self.tls.clone(), self.h2.clone(), self.metrics.clone());
        let handshakes = self.handshakes.clone();
        let watch = Watchdog::new(self.request_timeout, self.write_timeout);
        async move {
            let peer = tcp.peer_addr().ok();
            // As actix-web's own server does: a response written in
            // parts (a head, a body; TLS records) is not held back by
            // Nagle's algorithm waiting for the client's delayed ACK, 40 ms
            // on Linux, which every small HTTPS answer paid.
            let _ = tcp.set_nodelay(true);
            let front = match tls {
                None => {
                    metrics.connection(Wire::Http1);
                    Front::Plain(tcp)
                }
                Some(acceptor) => {
                    let Some(pending) = handshakes.begin(peer.map(|p| p.ip())) else {
                        tracing::debug!(
                            ?peer,
                            "too many TLS handshakes under way from this address; closed"
                        );
                        metrics.limit_hit("tls_handshakes");
                        return Ok(());
                    };
                    let tls =
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                            Ok(Ok(tls)) => tls,
                            Ok(Err(err)) => {
                                tracing::debug!(?peer, error = %err, "TLS handshake failed");
                                metrics.connection(Wire::TlsFailed);
                                return Ok(());
                            }
                            Err(_) => {
                                tracing::debug!(?peer, "TLS handshake timed out");
                                metrics.connection(Wire::TlsFailed);
                                return Ok(());
                            }
                        };
                    drop(pending);
                    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                        metrics.connection(Wire::H2);
                        let client = PeerCertificates::of(tls.get_ref().1);
                        h2::serve(tls, http2, peer, client, &h2).await;
                        return Ok(());
                    }
                    metrics.connection(Wire::Https1);
                    Front::Tls(Box::new(tls))
                }
            };
            let io = FrontIo(Rc::new(RefCell::new(Conn {
                io: Some(front),
                reader: None,
                watch,
            })));
            if let Err(err) = http1.call((io, Protocol::Http1, peer)).await {
                tracing::trace!(error = ?err, "HTTP/1 connection ended with an error");
            }
            Ok(())
        }
    }
}
