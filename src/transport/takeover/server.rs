//! The HTTP server: actix-web's application served by actix-http over TCP
//! connections that a handler may take over.
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

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use actix_http::body::MessageBody;
use actix_http::{HttpService, Protocol, Request, Response};
use actix_server::Server;
use actix_service::{
    IntoServiceFactory, Service, ServiceFactory, ServiceFactoryExt, fn_service, map_config,
};
use actix_web::dev::AppConfig;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::lifecycle::Lifecycle;

type Slot = Rc<RefCell<Conn>>;

struct Conn {
    io: Option<TcpStream>,
    /// Who waits to read: woken when the socket is taken, to see the end.
    reader: Option<Waker>,
}

/// A connection's I/O as actix sees it: the socket until a handler takes
/// it, then a sink (writes vanish, reads end).
pub struct FrontIo(Slot);

/// A handle to the socket of the connection a request arrived on, in the
/// request's connection data (`HttpRequest::conn_data`).
#[derive(Clone)]
pub struct Takeover(Slot);

impl Takeover {
    /// The socket, taken away from actix. `None` if already taken.
    pub fn take_socket(&self) -> Option<TcpStream> {
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
        let poll = Pin::new(io).poll_read(cx, buf);
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
        match self.0.borrow_mut().io.as_mut() {
            Some(io) => Pin::new(io).poll_write(cx, buf),
            None => Poll::Ready(Ok(buf.len())),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.0.borrow_mut().io.as_mut() {
            Some(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            None => Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.0.borrow_mut().io.as_mut() {
            Some(io) => Pin::new(io).poll_flush(cx),
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

/// Serves `factory`'s application on `listener` with `workers` threads.
/// Idle keep-alive connections close when `lifecycle` shuts down; requests
/// in flight get `grace_secs` to finish once the server is stopped.
pub fn serve<F, I, S, B>(
    listener: std::net::TcpListener,
    workers: usize,
    grace_secs: u64,
    lifecycle: Arc<Lifecycle>,
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
    Ok(Server::build()
        .workers(workers)
        .disable_signals()
        .shutdown_timeout(grace_secs)
        .listen("kubefan", listener, move || {
            let lifecycle = lifecycle.clone();
            let app = factory()
                .into_factory()
                .map_err(|err| err.into().error_response());
            // `graceful_shutdown_signal` is what HttpServer uses to close idle
            // keep-alive connections at shutdown (hidden from docs, pinned
            // by Cargo.lock).
            let http = HttpService::<FrontIo, _, _>::build()
                .graceful_shutdown_signal(move || {
                    let lifecycle = lifecycle.clone();
                    async move { lifecycle.shutting_down().await }
                })
                .local_addr(addr)
                .on_connect_ext(|io: &FrontIo, ext| {
                    ext.insert(Takeover(io.0.clone()));
                })
                .finish(map_config(app, |_| AppConfig::default()));
            fn_service(|io: TcpStream| async move {
                let peer = io.peer_addr().ok();
                let io = FrontIo(Rc::new(RefCell::new(Conn {
                    io: Some(io),
                    reader: None,
                })));
                Ok::<_, actix_http::error::DispatchError>((io, Protocol::Http1, peer))
            })
            .and_then(http)
        })?
        .run())
}
