//! The gateway assembled: informers, hubs, transports and operations on
//! one HTTP server. [`App::build`] binds (port 0 works) and starts serving;
//! tests and `main` drive it the same way.

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::dev::ServerHandle;
use actix_web::{HttpResponse, guard, web};
use tokio::task::JoinHandle;

use crate::auth::{Auth, Authorizer};
use crate::cluster::{Cluster, Clusters};
use crate::config::Config;
use crate::hub::SubscriptionContext;
use crate::lifecycle::Lifecycle;
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::ops;
use crate::status::status_json;
use crate::transport::kube as kube_face;
use crate::transport::state::AppState;
use crate::transport::takeover::{Streams, h2, server};
use crate::transport::{sse, ws};
use crate::upstream::Informers;

pub struct App {
    addr: SocketAddr,
    /// The `--metrics-listen` server, when there is one.
    metrics_server: Option<(SocketAddr, ServerHandle, JoinHandle<std::io::Result<()>>)>,
    handle: ServerHandle,
    server: JoinHandle<std::io::Result<()>>,
    lifecycle: Arc<Lifecycle>,
    streams: Arc<Streams>,
    grace: std::time::Duration,
    clusters: Arc<Clusters>,
    metrics: Arc<Metrics>,
    auth: Arc<Auth>,
}

/// One cluster to serve: its name (`None`: the one unnamed cluster of a
/// gateway run without `--cluster`), the API server it watches, and the
/// one that reviews clients' tokens for it.
pub struct Upstream {
    pub name: Option<String>,
    pub client: kube::Client,
    pub reviews: kube::Client,
    /// The API server's URL, which saved positions (`--state-dir`) belong
    /// to; `None` keeps `cfg.upstream.positions` as it is.
    pub url: Option<String>,
}

impl App {
    /// Starts the boot-time informers, binds `cfg.listen` and serves.
    pub async fn build(cfg: Config, client: kube::Client) -> std::io::Result<App> {
        Self::build_with_reviews(cfg, client.clone(), client).await
    }

    /// [`App::build`], reviewing clients' tokens (`--auth kubernetes`)
    /// with `reviews` rather than the upstream: a leaf of a tier, whose
    /// upstream is a read-only kubefan, reviews with the API server.
    pub async fn build_with_reviews(
        cfg: Config,
        client: kube::Client,
        reviews: kube::Client,
    ) -> std::io::Result<App> {
        let upstream = Upstream {
            name: None,
            client,
            reviews,
            url: None,
        };
        Self::build_clusters(cfg, vec![upstream]).await
    }

    /// [`App::build`] for several clusters (`--cluster`), each named, or
    /// for the one unnamed cluster.
    pub async fn build_clusters(cfg: Config, upstreams: Vec<Upstream>) -> std::io::Result<App> {
        let names: Vec<Option<&str>> = upstreams.iter().map(|u| u.name.as_deref()).collect();
        crate::cluster::check_names(&names, cfg.clusters.default.as_deref())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let auth = Arc::new(
            Auth::new(&cfg.auth, cfg.stream.sync_timeout)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?,
        );
        log_exposure(&cfg);
        let certificate = load_certificate(&cfg.tls)?;
        if auth.request_header().is_some() && certificate.is_none() {
            return Err(invalid_input(crate::config::Error::RequestHeaderWithoutTls));
        }
        let lifecycle = Lifecycle::new();
        let metrics = Arc::new(Metrics::new());
        let subscriptions = SubscriptionContext {
            sync_timeout: cfg.stream.sync_timeout,
            lifecycle: lifecycle.clone(),
            metrics: metrics.clone(),
        };
        let mut clusters = Vec::with_capacity(upstreams.len());
        for upstream in upstreams {
            let mut settings = cfg.upstream.clone();
            settings.cluster = upstream.name.clone();
            settings.server.clone_from(&upstream.url);
            if auth.reads_rbac() {
                // Read for kubefan itself, and waited for by /readyz.
                settings.internal_resources = crate::auth::feed::resources();
            }
            if let Some(positions) = &mut settings.positions {
                if let Some(url) = upstream.url {
                    positions.upstream = url;
                }
                if let Some(name) = &upstream.name {
                    positions.dir = positions.dir.join("clusters").join(name);
                }
            }
            let informers = Informers::new(
                upstream.client,
                settings,
                metrics.for_cluster(upstream.name.as_deref()),
                lifecycle.child_token(),
            )?;
            informers.start_boot();
            let authorizer = auth.authorizer(upstream.reviews);
            authorizer.start(informers.clone(), subscriptions.clone());
            clusters.push(Arc::new(Cluster::new(upstream.name, informers, authorizer)));
        }
        let clusters = Arc::new(Clusters::new(
            clusters,
            cfg.clusters.default.as_deref(),
            cfg.clusters.ready_when,
        ));
        auth.start(&lifecycle, &metrics);
        crate::heap::spawn_trimmer(lifecycle.clone());
        lifecycle.spawn_ticker(cfg.stream.keepalive);

        let state = web::Data::new(AppState {
            clusters: clusters.clone(),
            metrics: metrics.clone(),
            stream: cfg.stream.clone(),
            lifecycle: lifecycle.clone(),
            subscriptions,
            streams: Arc::new(Streams::on_current_runtime(
                cfg.stream.write_timeout,
                lifecycle.clone(),
                metrics.clone(),
            )),
            auth: auth.clone(),
            limits: Limits::new(cfg.limits.clone()),
            tls: certificate.is_some(),
            allowed_origins: cfg
                .allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            allowed_hosts: (cfg.auth.anonymous() && cfg.listen.ip().is_loopback()).then(|| {
                cfg.allowed_hosts
                    .iter()
                    .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
                    .collect()
            }),
        });
        let metrics_data = web::Data::new(metrics.clone());
        let listener = listen(cfg.listen)?;
        let addr = listener.local_addr()?;
        let grace = cfg.shutdown_grace;
        let streams = state.streams.clone();
        let tls = match certificate {
            Some(certificate) => {
                let client_ca = auth.request_header().map(|proxy| proxy.client_ca());
                let tls = certificate
                    .server_config(client_ca)
                    .map_err(invalid_input)?;
                certificate.watch(lifecycle.clone());
                Some(tls)
            }
            None => None,
        };
        let settings = server::Settings {
            workers: cfg.workers.max(1),
            grace_secs: grace.as_secs().max(1),
            lifecycle: lifecycle.clone(),
            tls,
            h2: h2::Settings::new(
                &streams,
                cfg.tls.http2_max_streams,
                u32::try_from(cfg.limits.max_header_bytes.saturating_mul(2))
                    .unwrap_or(u32::MAX)
                    .max(16 << 10),
                cfg.stream.keepalive,
                cfg.limits.idle_frames_per_minute,
            ),
            metrics: metrics.clone(),
            // A request may wait for its resource's first list: longer.
            request_timeout: cfg
                .limits
                .request_timeout
                .max(cfg.stream.sync_timeout + std::time::Duration::from_secs(5)),
            write_timeout: cfg.stream.write_timeout,
            handshakes: crate::limits::Handshakes::new(&cfg.limits),
        };
        let scheme = if settings.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let server = server::serve(listener, settings, move || {
            actix_web::App::new()
                .wrap(actix_web::middleware::from_fn(
                    crate::middleware::check_request,
                ))
                .app_data(state.clone())
                .app_data(metrics_data.clone())
                .service(
                    web::resource("/stream/{resource}")
                        .route(
                            web::get()
                                .guard(guard::fn_guard(|ctx| ctx.head().upgrade()))
                                .to(ws::stream),
                        )
                        .route(web::get().to(sse::stream)),
                )
                .configure(crate::web::configure)
                .route("/ws", web::get().to(ws::mux))
                .route("/session", web::post().to(crate::token_cookie::create))
                .route("/session", web::delete().to(crate::token_cookie::delete))
                .route("/session", web::get().to(crate::signin::whoami))
                .route("/session/refresh", web::post().to(crate::signin::refresh))
                .route("/login", web::get().to(crate::signin::login))
                .route(
                    crate::signin::CALLBACK,
                    web::get().to(crate::signin::callback),
                )
                .route("/logout", web::get().to(crate::signin::logout))
                .route("/logout", web::post().to(crate::signin::logout))
                .route("/healthz", web::get().to(ops::healthz))
                .route("/readyz", web::get().to(ops::readyz))
                .route("/clusters", web::get().to(ops::clusters))
                .route("/metrics", web::get().to(ops::metrics))
                .configure(kube_face::configure)
                .default_service(web::to(not_found))
        })?;
        let handle = server.handle();
        let server = tokio::spawn(server);
        let metrics_server = match cfg.metrics_listen {
            Some(addr) => Some(serve_metrics(addr, metrics.clone())?),
            None => None,
        };
        tracing::info!(%addr, scheme, "kubefan listening");
        Ok(App {
            addr,
            metrics_server,
            handle,
            server,
            lifecycle,
            streams,
            grace,
            clusters,
            metrics,
            auth,
        })
    }

    /// The gateway's authenticators.
    pub fn auth(&self) -> &Arc<Auth> {
        &self.auth
    }

    /// The clusters served.
    pub fn clusters(&self) -> &Arc<Clusters> {
        &self.clusters
    }

    /// The first cluster's authorizer (the only one's, without
    /// `--cluster`).
    pub fn authorizer(&self) -> &Arc<Authorizer> {
        self.clusters.all()[0].authorizer()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where `--metrics-listen` serves, if it was given.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_server.as_ref().map(|(addr, ..)| *addr)
    }

    /// The first cluster's informers (the only one's, without
    /// `--cluster`).
    pub fn informers(&self) -> &Arc<Informers> {
        self.clusters.all()[0].informers()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Where taken-over streams run, and what [`App::stop`] waits for.
    pub fn streams(&self) -> &Arc<Streams> {
        &self.streams
    }

    /// Graceful stop: stop accepting, tell every open stream to reconnect
    /// (each ends after a final ERROR event), wait for them up to the grace
    /// period, then stop the informers.
    pub async fn stop(self) {
        self.lifecycle.shut_down();
        // No new connections; streams that took their connection over end
        // first, then actix finishes what it still serves.
        self.handle.pause().await;
        self.streams.stop(self.grace).await;
        self.handle.stop(true).await;
        let _ = self.server.await;
        if let Some((_, handle, server)) = self.metrics_server {
            handle.stop(true).await;
            let _ = server.await;
        }
        for cluster in self.clusters.all() {
            cluster.informers().stopped().await;
        }
    }

    /// The gateway's lifecycle: shut down when [`App::stop`] begins.
    pub fn lifecycle(&self) -> &Arc<Lifecycle> {
        &self.lifecycle
    }
}

/// Serves `/metrics` alone on `addr`, without authentication: what a
/// Prometheus in the cluster scrapes (the main listener's `/metrics` needs
/// a token when auth is on).
fn serve_metrics(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> std::io::Result<(SocketAddr, ServerHandle, JoinHandle<std::io::Result<()>>)> {
    let listener = listen(addr)?;
    let local = listener.local_addr()?;
    let metrics = web::Data::new(metrics);
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .app_data(metrics.clone())
            .route("/metrics", web::get().to(ops::metrics))
            .default_service(web::to(not_found))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)?
    .run();
    let handle = server.handle();
    tracing::info!(addr = %local, "serving /metrics without authentication");
    Ok((local, handle, tokio::spawn(server)))
}

/// The served certificate, when TLS is configured: a file that cannot be
/// served is a start-up error naming it.
fn load_certificate(
    tls: &crate::config::TlsConfig,
) -> std::io::Result<Option<Arc<crate::tls::Certificate>>> {
    match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let certificate = crate::tls::Certificate::load(cert, key).map_err(invalid_input)?;
            tracing::info!(cert = %cert.display(), key = %key.display(), "serving HTTPS (HTTP/2 and HTTP/1.1); the files are re-read when they change");
            Ok(Some(certificate))
        }
        (None, None) => Ok(None),
        _ => Err(invalid_input(crate::config::Error::TlsPair)),
    }
}

fn invalid_input(err: impl std::error::Error + Send + Sync + 'static) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, err)
}

/// Binds `addr` with room for a herd of connections arriving at once
/// (std's own `bind` queues 128).
fn listen(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)?.into_std()
}

async fn not_found(req: actix_web::HttpRequest) -> HttpResponse {
    HttpResponse::NotFound().json(status_json(
        404,
        "NotFound",
        &format!("no route for {} {}", req.method(), req.path()),
    ))
}

/// Says at start-up what is exposed: the auth mode and what happens to
/// Secrets.
fn log_exposure(cfg: &Config) {
    let mode = cfg.auth.describe();
    if cfg.auth.anonymous() && !cfg.listen.ip().is_loopback() {
        tracing::warn!(listen = %cfg.listen, "serving without authentication on a non-loopback address (--allow-unauthenticated)");
    } else {
        tracing::info!(auth = %mode, "authentication");
    }
    let upstream = &cfg.upstream;
    if !upstream.allow_secrets {
        tracing::info!("Secrets are not served (--allow-secrets serves them, redacted)");
    } else if upstream.informer.ingest.reveal_secret_data {
        tracing::warn!("Secrets are served WITH their data and stringData values (--secret-data)");
    } else {
        tracing::info!(
            "Secrets are served with data and stringData redacted (--secret-data reveals them)"
        );
    }
}
