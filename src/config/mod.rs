//! Configuration: one tree, each module getting only its own section.
//!
//! Flags and environment variables (`KUBEFAN_*`) are read by clap in
//! `main.rs`; [`GatewayArgs::into_config`] turns them into [`Config`], which
//! tests build directly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod args;
mod auth;
pub use args::GatewayArgs;
#[cfg(test)]
use args::parse_net;
pub use auth::{
    AuthConfig, AuthMethod, AuthorizationMode, JwtConfig, OidcConfig, RequestHeaderConfig,
    SignInConfig, parse_required_claim,
};

use crate::upstream::UpstreamConfig;

/// Settings of the streaming transports.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    /// How long a new subscriber waits for a resource's first list before 503.
    pub sync_timeout: Duration,
    /// Interval of keep-alive comments / progress bookmarks.
    pub keepalive: Duration,
    /// The SSE `retry:` hint.
    pub retry: Duration,
    /// A WebSocket peer that sends nothing (not even a pong) for this long
    /// is closed. Never less than twice `keepalive`, the ping interval (see
    /// [`StreamConfig::effective_ws_idle_timeout`]).
    pub ws_idle_timeout: Duration,
    /// Largest WebSocket message accepted from a client, in bytes (a frame,
    /// or a message in continuation frames); a larger one closes with 1009.
    pub ws_max_message: usize,
    /// Most frames one WebSocket message may come in; more close with 1009.
    pub ws_max_fragments: usize,
    /// Subscriptions one `/ws` socket may hold at once.
    pub max_subscriptions_per_socket: usize,
    /// Subscriptions one `/ws` socket may start at once, and again every
    /// minute: each one starts a stream and sends its snapshot, so a
    /// client that subscribes and unsubscribes in a loop is rationed.
    pub subscribes_per_minute: u32,
    /// A stream whose client takes no byte for this long is closed (as
    /// nginx's `send_timeout`); a slow reader that still reads is lapped
    /// instead (RESET and a fresh snapshot).
    pub write_timeout: Duration,
}

impl StreamConfig {
    /// `ws_idle_timeout`, raised to at least two ping intervals and a half,
    /// so that a live peer always has a ping to answer in time.
    pub fn effective_ws_idle_timeout(&self) -> Duration {
        self.ws_idle_timeout.max(self.keepalive * 5 / 2)
    }
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            sync_timeout: Duration::from_secs(10),
            keepalive: Duration::from_secs(15),
            retry: Duration::from_secs(2),
            ws_idle_timeout: Duration::from_secs(45),
            ws_max_message: 64 << 10,
            ws_max_fragments: 64,
            max_subscriptions_per_socket: 100,
            subscribes_per_minute: 600,
            write_timeout: Duration::from_secs(60),
        }
    }
}

/// Per-address limits on by default, at values a team never meets: one
/// address is a person's browser (one shared socket, a few dozen requests
/// when tabs open), kubectl, an informer, a node agent, or an office
/// behind NAT; behind an ingress whose proxies are `--trusted-proxies`,
/// each client is its forwarded address. What they bound is one address
/// holding the file limit: each connection costs ~25 KB (README,
/// "Operations").
pub const DEFAULT_MAX_PER_ADDRESS: usize = 4096;
/// See [`DEFAULT_MAX_PER_ADDRESS`]; a burst of as many.
pub const DEFAULT_PER_SECOND_PER_ADDRESS: u32 = 1000;
/// See [`DEFAULT_MAX_PER_ADDRESS`]: a browser opens at most 6 connections
/// to a host at once, an ingress pod reconnecting its pool a few hundred
/// (and is exempt as a trusted proxy).
pub const DEFAULT_PENDING_HANDSHAKES_PER_ADDRESS: usize = 256;

/// Bounds on what clients may open and send (see `crate::middleware`). A limit
/// of 0 is no limit.
#[derive(Debug, Clone)]
pub struct LimitsConfig {
    /// Requests in flight at once, streams included (503 beyond).
    pub max_connections: usize,
    /// Requests in flight per principal (429 beyond).
    pub max_per_principal: usize,
    /// Requests in flight per client address (429 beyond).
    pub max_per_address: usize,
    /// New requests per second per client address (429 beyond).
    pub per_second_per_address: u32,
    /// TLS handshakes under way at once per TCP peer (a trusted proxy's
    /// are not counted); a connection beyond is closed before its
    /// handshake.
    pub max_pending_handshakes_per_address: usize,
    /// Frames that do nothing (WebSocket pings, pongs, empty fragments;
    /// HTTP/2 frames beyond what the connection's traffic earns) one
    /// connection may send in a burst, and again every minute; past them
    /// it is closed (`transport::takeover::ration`).
    pub idle_frames_per_minute: u32,
    /// Longest request target (path and query), in bytes (414 beyond).
    pub max_uri_bytes: usize,
    /// Largest sum of request header names and values, in bytes (431 beyond).
    pub max_header_bytes: usize,
    /// How soon after its first byte an HTTP/1.1 request is to be answered,
    /// or its answer begun, before its connection is closed (nginx's
    /// `client_header_timeout` is 60 s too). Longer than any wait of a
    /// request that is not a stream (`--sync-timeout-secs`, a review's
    /// 10 s).
    pub request_timeout: Duration,
    /// Proxies (an ingress, a load balancer) whose `X-Forwarded-For` names
    /// the client address the per-address limits count. Empty: the TCP peer
    /// is the client.
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_connections: 15_000,
            max_per_principal: 0,
            max_per_address: DEFAULT_MAX_PER_ADDRESS,
            per_second_per_address: DEFAULT_PER_SECOND_PER_ADDRESS,
            max_pending_handshakes_per_address: DEFAULT_PENDING_HANDSHAKES_PER_ADDRESS,
            idle_frames_per_minute: 100,
            max_uri_bytes: 8 << 10,
            max_header_bytes: 16 << 10,
            request_timeout: Duration::from_secs(60),
            trusted_proxies: Vec::new(),
        }
    }
}

/// Whether the gateway is ready when some of its clusters are not
/// (`--ready-when`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadyWhen {
    /// Ready while any cluster is: one cluster down never takes the
    /// others' viewers away (a load balancer keeps sending them).
    #[default]
    Any,
    /// Ready only when every cluster is.
    All,
}

/// What `--default-cluster` and `--ready-when` set.
#[derive(Debug, Clone, Default)]
pub struct ClustersConfig {
    /// The named cluster also served at the root paths.
    pub default: Option<String>,
    pub ready_when: ReadyWhen,
}

/// TLS and HTTP/2 on the main listener (see `crate::tls`).
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// PEM certificate chain, end-entity first; with `key_file`, the
    /// listener speaks TLS only. Re-read when it changes.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`'s certificate.
    pub key_file: Option<PathBuf>,
    /// The CA clients should trust (for `kubefan kubeconfig`); when absent,
    /// the served chain stands for it.
    pub ca_file: Option<PathBuf>,
    /// Streams one HTTP/2 connection may have open at once
    /// (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub http2_max_streams: u32,
}

impl TlsConfig {
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some() || self.key_file.is_some()
    }
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            cert_file: None,
            key_file: None,
            ca_file: None,
            http2_max_streams: 128,
        }
    }
}

/// TLS flags, shared by `serve`, `demo` and `kubeconfig`.
#[derive(Debug, Clone, clap::Args)]
pub struct TlsArgs {
    /// PEM certificate chain to serve HTTPS with (HTTP/2 and HTTP/1.1);
    /// re-read when it changes. Needs --tls-key-file.
    #[arg(long, env = "KUBEFAN_TLS_CERT_FILE", value_name = "FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file's certificate.
    #[arg(long, env = "KUBEFAN_TLS_KEY_FILE", value_name = "FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// PEM CA certificate clients should trust, written by `kubefan
    /// kubeconfig` (default: the served chain).
    #[arg(long, env = "KUBEFAN_TLS_CA_FILE", value_name = "FILE")]
    pub tls_ca_file: Option<PathBuf>,
    /// Streams one HTTP/2 connection may have open at once.
    #[arg(long, env = "KUBEFAN_HTTP2_MAX_STREAMS", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub http2_max_streams: u32,
}

impl TlsArgs {
    pub fn into_config(self) -> TlsConfig {
        TlsConfig {
            cert_file: self.tls_cert_file,
            key_file: self.tls_key_file,
            ca_file: self.tls_ca_file,
            http2_max_streams: self.http2_max_streams,
        }
    }
}

/// A configuration kubefan refuses to start with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "refusing to serve {0} without authentication: anyone who can reach that address would see everything the service account can list. Use --auth oidc, kubernetes or jwt, listen on loopback, or pass --allow-unauthenticated if something in front of kubefan authenticates"
    )]
    Unauthenticated(SocketAddr),
    #[error("--auth jwt needs a key: --jwt-secret-file, --jwt-public-key-file or --jwks-file")]
    NoJwtKeys,
    #[error(
        "--auth jwt with no --jwt-issuer takes every JWT, and ServiceAccount tokens and id-tokens are JWTs: {0} would never see one; add --jwt-issuer with the issuer (iss) of the tokens jwt is for"
    )]
    JwtTakesEveryToken(String),
    #[error("--auth none cannot be combined with other methods")]
    NoneWithOthers,
    #[error("{0}")]
    Oidc(String),
    #[error("{0}")]
    RequestHeader(String),
    #[error(
        "--auth request-header needs TLS on kubefan's listener (--tls-cert-file, --tls-key-file): the front proxy is trusted by the client certificate it presents in the TLS handshake, and without TLS there is none"
    )]
    RequestHeaderWithoutTls,
    #[error("TLS needs both --tls-cert-file and --tls-key-file")]
    TlsPair,
    #[error(
        "--allowed-origins cannot list null: any sandboxed frame or file: page sends that origin, so listing it allows every one of them"
    )]
    NullOrigin,
}

/// Everything the gateway needs besides a Kubernetes client.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// A second listener serving only `/metrics`, without authentication
    /// (in-cluster scraping).
    pub metrics_listen: Option<SocketAddr>,
    /// HTTP worker threads.
    pub workers: usize,
    /// Time allowed for open streams to close at shutdown.
    pub shutdown_grace: Duration,
    pub upstream: UpstreamConfig,
    pub stream: StreamConfig,
    pub auth: AuthConfig,
    pub limits: LimitsConfig,
    /// Origins (`scheme://host[:port]`) allowed cross-origin: WebSocket
    /// upgrades, and CORS with credentials. Same-origin is always allowed.
    pub allowed_origins: Vec<String>,
    /// Host names a loopback listener without authentication answers
    /// besides loopback ones (`--allowed-hosts`).
    pub allowed_hosts: Vec<String>,
    pub tls: TlsConfig,
    /// The default cluster and when the gateway is ready (`--cluster`).
    pub clusters: ClustersConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            metrics_listen: None,
            workers: 2,
            shutdown_grace: Duration::from_secs(10),
            upstream: UpstreamConfig::default(),
            stream: StreamConfig::default(),
            auth: AuthConfig::default(),
            limits: LimitsConfig::default(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            tls: TlsConfig::default(),
            clusters: Default::default(),
        }
    }
}

impl Config {
    /// Refuses configurations that would expose the cluster: no
    /// authentication on a non-loopback address (unless
    /// `allow_unauthenticated`), JWT mode without a key, a front proxy's
    /// headers without the TLS that tells the proxy apart.
    pub fn validate(&self) -> Result<(), Error> {
        if self.tls.enabled() && (self.tls.cert_file.is_none() || self.tls.key_file.is_none()) {
            return Err(Error::TlsPair);
        }
        if self
            .allowed_origins
            .iter()
            .any(|o| o.trim().eq_ignore_ascii_case("null"))
        {
            return Err(Error::NullOrigin);
        }
        if self.auth.uses(AuthMethod::RequestHeader) && !self.tls.enabled() {
            return Err(Error::RequestHeaderWithoutTls);
        }
        if self.auth.anonymous()
            && !self.listen.ip().is_loopback()
            && !self.auth.allow_unauthenticated
        {
            return Err(Error::Unauthenticated(self.listen));
        }
        self.auth.validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusted_proxies_are_ranges_or_single_addresses() {
        assert_eq!(parse_net("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_net(" 10.0.0.7").unwrap().to_string(), "10.0.0.7/32");
        assert_eq!(parse_net("fd00::/8").unwrap().to_string(), "fd00::/8");
        let err = parse_net("ingress").unwrap_err();
        assert!(err.contains("\"ingress\" is neither"), "{err}");
    }

    #[test]
    fn the_null_origin_cannot_be_allowed() {
        let cfg = Config {
            allowed_origins: vec!["https://dash.example".into(), " NULL".into()],
            ..Config::default()
        };
        let err = cfg.validate().unwrap_err();
        assert!(matches!(err, Error::NullOrigin), "{err}");
    }

    #[test]
    fn no_auth_on_a_public_address_is_refused_with_the_reason() {
        let mut cfg = Config {
            listen: "0.0.0.0:8080".parse().unwrap(),
            ..Config::default()
        };
        let err = cfg.validate().unwrap_err();
        assert!(matches!(err, Error::Unauthenticated(_)));
        assert!(err.to_string().contains("--allow-unauthenticated"), "{err}");
        cfg.auth.allow_unauthenticated = true;
        cfg.validate().unwrap();
        cfg.auth.allow_unauthenticated = false;
        cfg.listen = "[::1]:8080".parse().unwrap();
        cfg.validate().unwrap();
        cfg.listen = "10.0.0.1:8080".parse().unwrap();
        cfg.auth.set(AuthMethod::Kubernetes);
        cfg.validate().unwrap();
        cfg.auth.set(AuthMethod::Jwt);
        assert!(matches!(cfg.validate(), Err(Error::NoJwtKeys)));
        cfg.auth.jwt.secret_file = Some("/s".into());
        cfg.validate().unwrap();
    }

    #[test]
    fn request_header_needs_tls_and_says_why() {
        let mut cfg = Config::default();
        cfg.auth.set(AuthMethod::RequestHeader);
        cfg.auth.request_header.client_ca_file = Some("/front-proxy-ca.crt".into());
        let err = cfg.validate().unwrap_err();
        assert!(matches!(err, Error::RequestHeaderWithoutTls), "{err}");
        assert!(err.to_string().contains("client certificate"), "{err}");
        cfg.tls.cert_file = Some("/tls.crt".into());
        cfg.tls.key_file = Some("/tls.key".into());
        cfg.validate().unwrap();
    }

    #[test]
    fn tls_needs_both_a_certificate_and_a_key() {
        let mut cfg = Config::default();
        cfg.tls.cert_file = Some("/tls.crt".into());
        assert!(matches!(cfg.validate(), Err(Error::TlsPair)));
        cfg.tls.key_file = Some("/tls.key".into());
        cfg.validate().unwrap();
        cfg.tls.cert_file = None;
        assert!(matches!(cfg.validate(), Err(Error::TlsPair)));
    }

    #[test]
    fn the_old_secret_flag_name_still_works() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            gateway: GatewayArgs,
        }
        use clap::Parser;
        for flag in ["--secret-data", "--reveal-secret-data"] {
            let cli = Cli::try_parse_from(["kubefan", "--allow-secrets", flag]).unwrap();
            assert!(
                cli.gateway
                    .into_config()
                    .upstream
                    .informer
                    .ingest
                    .reveal_secret_data
            );
        }
    }
}
