//! Configuration: one tree, each module getting only its own section.
//!
//! Flags and environment variables (`KUBEFAN_*`) are read by clap in
//! `main.rs`; [`GatewayArgs::into_config`] turns them into [`Config`], which
//! tests build directly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::hub::LogLimits;
use crate::upstream::{InformerConfig, IngestOptions, UpstreamConfig};

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
    /// Subscriptions one `/ws` socket may hold at once.
    pub max_subscriptions_per_socket: usize,
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
            max_subscriptions_per_socket: 100,
            write_timeout: Duration::from_secs(60),
        }
    }
}

/// How clients prove who they are (see `crate::auth`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    /// Everyone may see everything the gateway serves: loopback only,
    /// unless `allow_unauthenticated`.
    #[default]
    None,
    /// Signed JWTs whose claims grant namespaces and resources.
    Jwt,
    /// Kubernetes bearer tokens: TokenReview, then SubjectAccessReview.
    Kubernetes,
}

/// How a `kubernetes` principal's rights are decided (see `crate::auth`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthorizationMode {
    /// Locally, from the cluster's Roles, RoleBindings, ClusterRoles and
    /// ClusterRoleBindings (one shared informer each): all-namespace
    /// streams are narrowed to what the user may see, and follow RBAC
    /// changes while open. Sees only RBAC.
    #[default]
    Rbac,
    /// A SubjectAccessReview per decision (cached): what the API server's
    /// whole authorizer chain answers (webhooks, Node, ABAC too).
    Review,
}

/// JWT verification settings.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// A file holding the HS256/384/512 shared secret (surrounding
    /// whitespace is trimmed).
    pub secret_file: Option<PathBuf>,
    /// PEM public keys (RSA, EC or Ed25519), tried in turn.
    pub public_key_files: Vec<PathBuf>,
    /// A JWKS file; keys are chosen by `kid`, and the file is re-read when
    /// its modification time changes.
    pub jwks_file: Option<PathBuf>,
    /// Accepted issuers (`iss`); empty: not checked.
    pub issuers: Vec<String>,
    /// Accepted audiences (`aud`); empty: not checked.
    pub audiences: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// The claim listing granted namespaces (`"*"`: all).
    pub namespaces_claim: String,
    /// The claim listing granted resources (`"*"`: all).
    pub resources_claim: String,
}

impl Default for JwtConfig {
    fn default() -> Self {
        JwtConfig {
            secret_file: None,
            public_key_files: Vec::new(),
            jwks_file: None,
            issuers: Vec::new(),
            audiences: Vec::new(),
            leeway: Duration::from_secs(30),
            namespaces_claim: "kubefan/namespaces".into(),
            resources_claim: "kubefan/resources".into(),
        }
    }
}

/// Authentication and authorization.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    pub mode: AuthMode,
    pub jwt: JwtConfig,
    /// The cookie a token may be read from.
    pub cookie: String,
    /// How long TokenReview / SubjectAccessReview answers are reused; a
    /// token with open streams is reviewed again after this long.
    pub cache_ttl: Duration,
    /// Allow `AuthMode::None` on a non-loopback address.
    pub allow_unauthenticated: bool,
    /// Audiences sent in TokenReviews (`spec.audiences`): tokens must be
    /// minted for one of them. Empty: the API server's own audience.
    pub token_audiences: Vec<String>,
    /// How `kubernetes` principals are authorized.
    pub authorization: AuthorizationMode,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            mode: AuthMode::None,
            jwt: JwtConfig::default(),
            cookie: "kubefan_token".into(),
            cache_ttl: Duration::from_secs(10),
            allow_unauthenticated: false,
            token_audiences: Vec::new(),
            authorization: AuthorizationMode::Rbac,
        }
    }
}

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
    /// Longest request target (path and query), in bytes (414 beyond).
    pub max_uri_bytes: usize,
    /// Largest sum of request header names and values, in bytes (431 beyond).
    pub max_header_bytes: usize,
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
            max_per_address: 0,
            per_second_per_address: 0,
            max_uri_bytes: 8 << 10,
            max_header_bytes: 16 << 10,
            trusted_proxies: Vec::new(),
        }
    }
}

/// A configuration kubefan refuses to start with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "refusing to serve {0} without authentication: anyone who can reach that address would see everything the service account can list. Use --auth jwt or --auth kubernetes, listen on loopback, or pass --allow-unauthenticated if something in front of kubefan authenticates"
    )]
    Unauthenticated(SocketAddr),
    #[error("--auth jwt needs a key: --jwt-secret-file, --jwt-public-key-file or --jwks-file")]
    NoJwtKeys,
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
        }
    }
}

impl Config {
    /// Refuses configurations that would expose the cluster: no
    /// authentication on a non-loopback address (unless
    /// `allow_unauthenticated`), JWT mode without a key.
    pub fn validate(&self) -> Result<(), Error> {
        match self.auth.mode {
            AuthMode::None
                if !self.listen.ip().is_loopback() && !self.auth.allow_unauthenticated =>
            {
                Err(Error::Unauthenticated(self.listen))
            }
            AuthMode::Jwt
                if self.auth.jwt.secret_file.is_none()
                    && self.auth.jwt.public_key_files.is_empty()
                    && self.auth.jwt.jwks_file.is_none() =>
            {
                Err(Error::NoJwtKeys)
            }
            _ => Ok(()),
        }
    }
}

/// Gateway flags, shared by `serve` and `demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// Address to serve HTTP on.
    #[arg(long, env = "KUBEFAN_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Also serve `/metrics` on this address, without authentication (for
    /// in-cluster scraping; give it its own port and NetworkPolicy).
    #[arg(long, env = "KUBEFAN_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Resources whose informers start at boot (comma-separated: plural,
    /// `plural.group` or short name); /readyz waits for them. Others start
    /// on first subscription.
    #[arg(long, env = "KUBEFAN_RESOURCES", value_delimiter = ',')]
    pub resources: Vec<String>,
    /// Serve only these resources (comma-separated: plural, `plural.group`
    /// or short name); empty: everything the upstream serves.
    #[arg(long, env = "KUBEFAN_ALLOW_RESOURCES", value_delimiter = ',')]
    pub allow_resources: Vec<String>,
    /// Never serve these resources, even when allowed.
    #[arg(long, env = "KUBEFAN_DENY_RESOURCES", value_delimiter = ',')]
    pub deny_resources: Vec<String>,
    /// Serve Secrets (their data/stringData values are still blanked
    /// unless --secret-data).
    #[arg(long, env = "KUBEFAN_ALLOW_SECRETS")]
    pub allow_secrets: bool,
    /// Seconds an on-demand informer (not started at boot) runs on after
    /// its last subscriber left.
    #[arg(long, env = "KUBEFAN_IDLE_GRACE_SECS", default_value_t = 300)]
    pub idle_grace_secs: u64,
    /// With --allow-secrets, serve Secret values unredacted
    /// (--reveal-secret-data is an older name).
    #[arg(
        long = "secret-data",
        alias = "reveal-secret-data",
        env = "KUBEFAN_SECRET_DATA",
        requires = "allow_secrets"
    )]
    pub secret_data: bool,
    /// Keep metadata.managedFields (dropped by default: 20-40% of an object).
    #[arg(long, env = "KUBEFAN_KEEP_MANAGED_FIELDS")]
    pub keep_managed_fields: bool,
    /// Events kept per resource for resumes and slow readers.
    #[arg(long, env = "KUBEFAN_LOG_MAX_EVENTS", default_value_t = 10_000)]
    pub log_max_events: usize,
    /// Bytes kept per resource's event log.
    #[arg(long, env = "KUBEFAN_LOG_MAX_BYTES", default_value_t = 64 << 20)]
    pub log_max_bytes: usize,
    /// Seconds between keep-alives on idle streams.
    #[arg(long, env = "KUBEFAN_KEEPALIVE_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub keepalive_secs: u64,
    /// SSE reconnection delay hint (`retry:`), in milliseconds.
    #[arg(long, env = "KUBEFAN_RETRY_MS", default_value_t = 2000)]
    pub retry_ms: u64,
    /// Seconds without any frame from a WebSocket peer (pongs count) before
    /// it is closed; at least 2.5 keep-alive intervals.
    #[arg(long, env = "KUBEFAN_WS_IDLE_TIMEOUT_SECS", default_value_t = 45, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub ws_idle_timeout_secs: u64,
    /// Largest WebSocket message accepted from a client, in bytes.
    #[arg(long, env = "KUBEFAN_WS_MAX_MESSAGE_BYTES", default_value_t = 64 << 10, value_parser = clap::value_parser!(u64).range(128..=(16 << 20)))]
    pub ws_max_message_bytes: u64,
    /// Subscriptions one multiplexed WebSocket (`/ws`) may hold at once.
    #[arg(long, env = "KUBEFAN_WS_MAX_SUBSCRIPTIONS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub ws_max_subscriptions: u64,
    /// Seconds a stream waits for a client that reads nothing before it
    /// closes the connection.
    #[arg(long, env = "KUBEFAN_WRITE_TIMEOUT_SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub write_timeout_secs: u64,
    /// Seconds a new subscriber waits for a resource's first list before 503.
    #[arg(long, env = "KUBEFAN_SYNC_TIMEOUT_SECS", default_value_t = 10)]
    pub sync_timeout_secs: u64,
    /// Seconds open streams get to close at shutdown.
    #[arg(long, env = "KUBEFAN_SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,
    /// HTTP worker threads.
    #[arg(long, env = "KUBEFAN_WORKERS", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: u16,
    /// Upstream LIST page size.
    #[arg(long, env = "KUBEFAN_PAGE_SIZE", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub page_size: u32,
    /// Upstream WATCH timeoutSeconds (at most 290).
    #[arg(long, env = "KUBEFAN_WATCH_TIMEOUT_SECS", default_value_t = 290, value_parser = clap::value_parser!(u64).range(1..=290))]
    pub watch_timeout_secs: u64,
    /// Authentication: none (loopback only, unless
    /// --allow-unauthenticated), jwt, or kubernetes (TokenReview and
    /// SubjectAccessReview).
    #[arg(long, env = "KUBEFAN_AUTH", value_enum, default_value_t = AuthMode::None)]
    pub auth: AuthMode,
    /// Serve without authentication on a non-loopback address.
    #[arg(long, env = "KUBEFAN_ALLOW_UNAUTHENTICATED")]
    pub allow_unauthenticated: bool,
    /// File holding the HS256/384/512 secret.
    #[arg(long, env = "KUBEFAN_JWT_SECRET_FILE")]
    pub jwt_secret_file: Option<PathBuf>,
    /// PEM public key file (RSA, EC or Ed25519); repeatable.
    #[arg(long, env = "KUBEFAN_JWT_PUBLIC_KEY_FILE", value_delimiter = ',')]
    pub jwt_public_key_file: Vec<PathBuf>,
    /// JWKS file; keys chosen by `kid`, re-read when the file changes.
    #[arg(long, env = "KUBEFAN_JWKS_FILE")]
    pub jwks_file: Option<PathBuf>,
    /// Accepted `iss` (comma-separated); unchecked when empty.
    #[arg(long, env = "KUBEFAN_JWT_ISSUER", value_delimiter = ',')]
    pub jwt_issuer: Vec<String>,
    /// Accepted `aud` (comma-separated); unchecked when empty.
    #[arg(long, env = "KUBEFAN_JWT_AUDIENCE", value_delimiter = ',')]
    pub jwt_audience: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`, in seconds.
    #[arg(long, env = "KUBEFAN_JWT_LEEWAY_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub jwt_leeway_secs: u64,
    /// Claim listing the namespaces a token grants ("*": all).
    #[arg(
        long,
        env = "KUBEFAN_JWT_NAMESPACES_CLAIM",
        default_value = "kubefan/namespaces"
    )]
    pub jwt_namespaces_claim: String,
    /// Claim listing the resources a token grants ("*": all).
    #[arg(
        long,
        env = "KUBEFAN_JWT_RESOURCES_CLAIM",
        default_value = "kubefan/resources"
    )]
    pub jwt_resources_claim: String,
    /// Cookie a token may be read from.
    #[arg(long, env = "KUBEFAN_AUTH_COOKIE", default_value = "kubefan_token")]
    pub auth_cookie: String,
    /// Seconds TokenReview / SubjectAccessReview answers are reused; a
    /// token with open streams is reviewed again this often.
    #[arg(long, env = "KUBEFAN_AUTH_CACHE_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub auth_cache_secs: u64,
    /// `--auth kubernetes`: audiences sent in TokenReviews (comma-separated),
    /// so users can hand kubefan tokens minted for it alone.
    #[arg(long, env = "KUBEFAN_TOKEN_AUDIENCES", value_delimiter = ',')]
    pub token_audiences: Vec<String>,
    /// `--auth kubernetes`: decide rights locally from RBAC objects
    /// (`rbac`), or ask the API server with SubjectAccessReviews (`review`).
    #[arg(long, env = "KUBEFAN_AUTHORIZATION", value_enum, default_value_t = AuthorizationMode::Rbac)]
    pub authorization: AuthorizationMode,
    /// Origins (`https://dash.example.com`) allowed cross-origin: WebSocket
    /// upgrades and CORS with credentials. Same-origin is always allowed.
    #[arg(long, env = "KUBEFAN_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Vec<String>,
    /// Requests in flight at once, open streams included (503 beyond; 0: no limit).
    #[arg(long, env = "KUBEFAN_MAX_CONNECTIONS", default_value_t = 15_000)]
    pub max_connections: usize,
    /// Requests in flight per principal (429 beyond; 0: no limit).
    #[arg(
        long,
        env = "KUBEFAN_MAX_CONNECTIONS_PER_PRINCIPAL",
        default_value_t = 0
    )]
    pub max_connections_per_principal: usize,
    /// Requests in flight per client address (429 beyond; 0: no limit).
    #[arg(long, env = "KUBEFAN_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = 0)]
    pub max_connections_per_address: usize,
    /// New requests per second per client address (429 beyond; 0: no limit).
    #[arg(
        long,
        env = "KUBEFAN_CONNECTIONS_PER_SECOND_PER_ADDRESS",
        default_value_t = 0
    )]
    pub connections_per_second_per_address: u32,
    /// Proxies in front of kubefan, as addresses or CIDR ranges
    /// (comma-separated): from these, the client address the per-address
    /// limits count is read from `X-Forwarded-For`.
    #[arg(long, env = "KUBEFAN_TRUSTED_PROXIES", value_delimiter = ',', value_parser = parse_net)]
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

/// An address range (`10.0.0.0/8`) or one address (`10.0.0.7`).
fn parse_net(text: &str) -> Result<ipnet::IpNet, String> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{text:?} is neither an address nor a CIDR range (10.0.0.0/8)"))
}

impl GatewayArgs {
    pub fn into_config(self) -> Config {
        Config {
            listen: self.listen,
            metrics_listen: self.metrics_listen,
            workers: usize::from(self.workers),
            shutdown_grace: Duration::from_secs(self.shutdown_grace_secs),
            upstream: UpstreamConfig {
                boot_resources: names(self.resources),
                allow_resources: names(self.allow_resources),
                deny_resources: names(self.deny_resources),
                allow_secrets: self.allow_secrets,
                idle_grace: Duration::from_secs(self.idle_grace_secs),
                informer: InformerConfig {
                    page_size: self.page_size,
                    watch_timeout: Duration::from_secs(self.watch_timeout_secs),
                    ingest: IngestOptions {
                        keep_managed_fields: self.keep_managed_fields,
                        reveal_secret_data: self.secret_data,
                    },
                    ..InformerConfig::default()
                },
                log_limits: LogLimits {
                    max_events: self.log_max_events.max(1),
                    max_bytes: self.log_max_bytes.max(1),
                },
                ..UpstreamConfig::default()
            },
            stream: StreamConfig {
                sync_timeout: Duration::from_secs(self.sync_timeout_secs),
                keepalive: Duration::from_secs(self.keepalive_secs),
                retry: Duration::from_millis(self.retry_ms),
                ws_idle_timeout: Duration::from_secs(self.ws_idle_timeout_secs),
                ws_max_message: self.ws_max_message_bytes as usize,
                max_subscriptions_per_socket: self.ws_max_subscriptions as usize,
                write_timeout: Duration::from_secs(self.write_timeout_secs),
            },
            auth: AuthConfig {
                mode: self.auth,
                jwt: JwtConfig {
                    secret_file: self.jwt_secret_file,
                    public_key_files: self.jwt_public_key_file,
                    jwks_file: self.jwks_file,
                    issuers: names(self.jwt_issuer),
                    audiences: names(self.jwt_audience),
                    leeway: Duration::from_secs(self.jwt_leeway_secs),
                    namespaces_claim: self.jwt_namespaces_claim,
                    resources_claim: self.jwt_resources_claim,
                },
                cookie: self.auth_cookie,
                cache_ttl: Duration::from_secs(self.auth_cache_secs),
                allow_unauthenticated: self.allow_unauthenticated,
                token_audiences: names(self.token_audiences),
                authorization: self.authorization,
            },
            limits: LimitsConfig {
                max_connections: self.max_connections,
                max_per_principal: self.max_connections_per_principal,
                max_per_address: self.max_connections_per_address,
                per_second_per_address: self.connections_per_second_per_address,
                trusted_proxies: self.trusted_proxies,
                ..LimitsConfig::default()
            },
            allowed_origins: names(self.allowed_origins),
        }
    }
}

/// A comma-separated list of resource names, trimmed, without empties.
fn names(list: Vec<String>) -> Vec<String> {
    list.into_iter()
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty())
        .collect()
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
        cfg.auth.mode = AuthMode::Kubernetes;
        cfg.validate().unwrap();
        cfg.auth.mode = AuthMode::Jwt;
        assert!(matches!(cfg.validate(), Err(Error::NoJwtKeys)));
        cfg.auth.jwt.secret_file = Some("/s".into());
        cfg.validate().unwrap();
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
