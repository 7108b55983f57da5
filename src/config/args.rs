//! The gateway's flags (clap, `KUBEFAN_*` environment variables), shared
//! by `serve` and `demo`, and how they become the configuration tree.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{
    AuthConfig, AuthMethod, AuthorizationMode, Config, JwtConfig, LimitsConfig, OidcConfig,
    RequestHeaderConfig, SignInConfig, StreamConfig, TlsArgs,
};
use crate::hub::LogLimits;
use crate::upstream::{InformerConfig, IngestOptions, ListMode, PositionsConfig, UpstreamConfig};

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
    /// Most frames one WebSocket message may be split into (1009 beyond).
    #[arg(long, env = "KUBEFAN_WS_MAX_FRAGMENTS", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub ws_max_fragments: u64,
    /// Subscriptions one multiplexed WebSocket (`/ws`) may hold at once.
    #[arg(long, env = "KUBEFAN_WS_MAX_SUBSCRIPTIONS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub ws_max_subscriptions: u64,
    /// Subscriptions one `/ws` socket may start at once, and again every
    /// minute; past them a subscribe gets an ERROR (429) for its id.
    #[arg(long, env = "KUBEFAN_WS_SUBSCRIBES_PER_MINUTE", default_value_t = 600, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub ws_subscribes_per_minute: u32,
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
    /// How informers get a resource's state: auto (a streaming list,
    /// `sendInitialEvents=true`, where the upstream serves it, else paged
    /// LISTs), streaming (only the streaming list), paged (only LISTs).
    #[arg(long, env = "KUBEFAN_UPSTREAM_LIST", value_enum, default_value_t = ListMode::Auto)]
    pub upstream_list: ListMode,
    /// Upstream LIST page size.
    #[arg(long, env = "KUBEFAN_PAGE_SIZE", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub page_size: u32,
    /// Keep each resource's position (its resourceVersion) in this
    /// directory, so that after a restart the first LIST is at that
    /// position and clients resume with the changes they missed instead of
    /// a fresh snapshot. Give it a volume that outlives the process (an
    /// `emptyDir` outlives a container restart).
    #[arg(long, env = "KUBEFAN_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Upstream WATCH timeoutSeconds (at most 290).
    #[arg(long, env = "KUBEFAN_WATCH_TIMEOUT_SECS", default_value_t = 290, value_parser = clap::value_parser!(u64).range(1..=290))]
    pub watch_timeout_secs: u64,
    /// Authentication, one or more comma-separated (`oidc,kubernetes`:
    /// people sign in, services bring ServiceAccount tokens): none
    /// (loopback only, unless --allow-unauthenticated), jwt (claims grant
    /// namespaces), oidc (id-tokens from --oidc-issuer-url), kubernetes
    /// (TokenReview), request-header (a front proxy's identity headers,
    /// trusted from a client certificate of --requestheader-client-ca-file).
    #[arg(
        long,
        env = "KUBEFAN_AUTH",
        value_enum,
        value_delimiter = ',',
        default_value = "none"
    )]
    pub auth: Vec<AuthMethod>,
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
    /// `--auth oidc`: the issuer (https); its discovery document is at
    /// `/.well-known/openid-configuration` under it.
    #[arg(long, env = "KUBEFAN_OIDC_ISSUER_URL", default_value = "")]
    pub oidc_issuer_url: String,
    /// `--auth oidc`: the client id, which tokens must name as audience.
    #[arg(long, env = "KUBEFAN_OIDC_CLIENT_ID", default_value = "")]
    pub oidc_client_id: String,
    /// `--auth oidc`: PEM CA certificates for the issuer's certificate
    /// (default: the system's roots).
    #[arg(long, env = "KUBEFAN_OIDC_CA_FILE")]
    pub oidc_ca_file: Option<PathBuf>,
    /// `--auth oidc`: the claim naming the user.
    #[arg(long, env = "KUBEFAN_OIDC_USERNAME_CLAIM", default_value = "sub")]
    pub oidc_username_claim: String,
    /// `--auth oidc`: put before user names; unset: the issuer URL and
    /// `#`, unless the claim is `email`; `-`: nothing.
    #[arg(long, env = "KUBEFAN_OIDC_USERNAME_PREFIX")]
    pub oidc_username_prefix: Option<String>,
    /// `--auth oidc`: the claim listing the user's groups.
    #[arg(long, env = "KUBEFAN_OIDC_GROUPS_CLAIM")]
    pub oidc_groups_claim: Option<String>,
    /// `--auth oidc`: put before group names.
    #[arg(long, env = "KUBEFAN_OIDC_GROUPS_PREFIX", default_value = "")]
    pub oidc_groups_prefix: String,
    /// `--auth oidc`: a claim tokens must carry with this value
    /// (`key=value`; repeatable, or comma-separated).
    #[arg(long, env = "KUBEFAN_OIDC_REQUIRED_CLAIM", value_delimiter = ',', value_parser = super::parse_required_claim)]
    pub oidc_required_claim: Vec<(String, String)>,
    /// `--auth oidc`: accepted signing algorithms (comma-separated; RS*,
    /// ES*, PS*).
    #[arg(
        long,
        env = "KUBEFAN_OIDC_SIGNING_ALGS",
        value_delimiter = ',',
        default_value = "RS256"
    )]
    pub oidc_signing_algs: Vec<String>,
    /// `--auth oidc` sign-in: scopes asked for (comma-separated).
    #[arg(
        long,
        env = "KUBEFAN_OIDC_SCOPES",
        value_delimiter = ',',
        default_value = "openid,email,profile"
    )]
    pub oidc_scopes: Vec<String>,
    /// `--auth oidc` sign-in: where the issuer sends the browser back
    /// (default: /oauth2/callback on the host the sign-in started on;
    /// behind an ingress, its public https URL).
    #[arg(long, env = "KUBEFAN_OIDC_REDIRECT_URL")]
    pub oidc_redirect_url: Option<String>,
    /// `--auth oidc` sign-in: a file holding the client secret (none: a
    /// public client, PKCE alone).
    #[arg(long, env = "KUBEFAN_OIDC_CLIENT_SECRET_FILE")]
    pub oidc_client_secret_file: Option<PathBuf>,
    /// A file holding the key (32 bytes or more) sessions are sealed with,
    /// the same on every replica (none: a random key of this process).
    #[arg(long, env = "KUBEFAN_SESSION_SECRET_FILE")]
    pub session_secret_file: Option<PathBuf>,
    /// The longest a signed-in session lasts, refreshes included, in hours.
    #[arg(long, env = "KUBEFAN_SESSION_MAX_AGE_HOURS", default_value_t = 12, value_parser = clap::value_parser!(u64).range(1..=720))]
    pub session_max_age_hours: u64,
    /// `--auth request-header`: PEM CA certificates; identity headers are
    /// trusted only from a client certificate they sign (needs TLS).
    #[arg(
        long,
        env = "KUBEFAN_REQUESTHEADER_CLIENT_CA_FILE",
        value_name = "FILE"
    )]
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// `--auth request-header`: common names the proxy's client certificate
    /// may have (comma-separated); empty: any the CA signs.
    #[arg(
        long,
        env = "KUBEFAN_REQUESTHEADER_ALLOWED_NAMES",
        value_delimiter = ','
    )]
    pub requestheader_allowed_names: Vec<String>,
    /// `--auth request-header`: headers naming the user, in order; the
    /// first non-empty wins.
    #[arg(
        long,
        env = "KUBEFAN_REQUESTHEADER_USERNAME_HEADERS",
        value_delimiter = ',',
        default_value = "X-Remote-User"
    )]
    pub requestheader_username_headers: Vec<String>,
    /// `--auth request-header`: headers naming groups; every value of each.
    #[arg(
        long,
        env = "KUBEFAN_REQUESTHEADER_GROUP_HEADERS",
        value_delimiter = ',',
        default_value = "X-Remote-Group"
    )]
    pub requestheader_group_headers: Vec<String>,
    /// `--auth request-header`: prefixes of headers carrying extras;
    /// removed from requests, not used for authorization.
    #[arg(
        long,
        env = "KUBEFAN_REQUESTHEADER_EXTRA_HEADERS_PREFIX",
        value_delimiter = ',',
        default_value = "X-Remote-Extra-"
    )]
    pub requestheader_extra_headers_prefix: Vec<String>,
    /// `--auth request-header` (kubefan's own): also split group header
    /// values at this character (`,` for oauth2-proxy, which joins a
    /// user's groups into one value); unset: one value, one group.
    #[arg(long, env = "KUBEFAN_REQUESTHEADER_GROUP_SEPARATOR")]
    pub requestheader_group_separator: Option<char>,
    /// `--auth request-header` (kubefan's own): a request naming more
    /// groups is refused (401).
    #[arg(long, env = "KUBEFAN_REQUESTHEADER_MAX_GROUPS", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub requestheader_max_groups: u32,
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
    /// `--auth oidc`, `kubernetes` and `request-header`: decide users' rights locally from
    /// RBAC objects (`rbac`), or ask the API server with
    /// SubjectAccessReviews (`review`).
    #[arg(long, env = "KUBEFAN_AUTHORIZATION", value_enum, default_value_t = AuthorizationMode::Rbac)]
    pub authorization: AuthorizationMode,
    /// Origins (`https://dash.example.com`) allowed cross-origin: WebSocket
    /// upgrades and CORS with credentials. Same-origin is always allowed.
    #[arg(long, env = "KUBEFAN_ALLOWED_ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Vec<String>,
    /// Host names (`Host` header, port aside) that a loopback listener
    /// serving without authentication answers besides loopback ones
    /// (`localhost`, `*.localhost`, 127.0.0.0/8, `[::1]`). Any other is
    /// refused (403): a page whose name someone points at 127.0.0.1 (DNS
    /// rebinding) is same-origin with kubefan to the browser. As
    /// kubectl proxy's `--accept-hosts`. Not looked at otherwise.
    #[arg(long, env = "KUBEFAN_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
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
    /// Behind an ingress, name its proxies in --trusted-proxies: each
    /// client then counts by its forwarded address.
    #[arg(
        long,
        env = "KUBEFAN_MAX_CONNECTIONS_PER_ADDRESS",
        default_value_t = crate::config::DEFAULT_MAX_PER_ADDRESS
    )]
    pub max_connections_per_address: usize,
    /// New requests per second per client address, in a burst of as many
    /// (429 beyond; 0: no limit).
    #[arg(
        long,
        env = "KUBEFAN_CONNECTIONS_PER_SECOND_PER_ADDRESS",
        default_value_t = crate::config::DEFAULT_PER_SECOND_PER_ADDRESS
    )]
    pub connections_per_second_per_address: u32,
    /// TLS handshakes under way at once per client address (its TCP peer;
    /// a --trusted-proxies proxy is not counted). A connection beyond is
    /// closed at once (0: no limit).
    #[arg(
        long,
        env = "KUBEFAN_MAX_PENDING_HANDSHAKES_PER_ADDRESS",
        default_value_t = crate::config::DEFAULT_PENDING_HANDSHAKES_PER_ADDRESS
    )]
    pub max_pending_handshakes_per_address: usize,
    /// Frames that do nothing one connection may send at once, and again
    /// every minute: WebSocket pings, pongs and empty fragments, HTTP/2
    /// frames beyond what its traffic earns. Past them the connection is
    /// closed (WebSocket 1008, HTTP/2 GOAWAY ENHANCE_YOUR_CALM).
    #[arg(long, env = "KUBEFAN_IDLE_FRAMES_PER_MINUTE", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub idle_frames_per_minute: u32,
    /// Proxies in front of kubefan, as addresses or CIDR ranges
    /// (comma-separated): from these, the client address the per-address
    /// limits count is read from `X-Forwarded-For`.
    #[arg(long, env = "KUBEFAN_TRUSTED_PROXIES", value_delimiter = ',', value_parser = parse_net)]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// With `--cluster`: the cluster also served at the root paths
    /// (`/stream/pods`, `/api/v1/...`); without it, every request names
    /// its cluster (`/clusters/NAME/...`).
    #[arg(long, env = "KUBEFAN_DEFAULT_CLUSTER")]
    pub default_cluster: Option<String>,
    /// With `--cluster`: whether `/readyz` needs `any` cluster ready (one
    /// cluster down never takes the others' viewers away) or `all`.
    #[arg(long, env = "KUBEFAN_READY_WHEN", value_enum, default_value_t = super::ReadyWhen::Any)]
    pub ready_when: super::ReadyWhen,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// An address range (`10.0.0.0/8`) or one address (`10.0.0.7`).
pub(super) fn parse_net(text: &str) -> Result<ipnet::IpNet, String> {
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
                    list: self.upstream_list,
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
                // The upstream's identity is filled in by whoever knows its
                // URL (`main`).
                positions: self.state_dir.map(|dir| PositionsConfig {
                    dir,
                    upstream: String::new(),
                }),
                ..UpstreamConfig::default()
            },
            stream: StreamConfig {
                sync_timeout: Duration::from_secs(self.sync_timeout_secs),
                keepalive: Duration::from_secs(self.keepalive_secs),
                retry: Duration::from_millis(self.retry_ms),
                ws_idle_timeout: Duration::from_secs(self.ws_idle_timeout_secs),
                ws_max_message: self.ws_max_message_bytes as usize,
                ws_max_fragments: self.ws_max_fragments as usize,
                max_subscriptions_per_socket: self.ws_max_subscriptions as usize,
                subscribes_per_minute: self.ws_subscribes_per_minute,
                write_timeout: Duration::from_secs(self.write_timeout_secs),
            },
            auth: AuthConfig {
                methods: self.auth,
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
                oidc: OidcConfig {
                    issuer_url: self.oidc_issuer_url.trim().to_string(),
                    client_id: self.oidc_client_id.trim().to_string(),
                    ca_file: self.oidc_ca_file,
                    username_claim: self.oidc_username_claim,
                    username_prefix: self.oidc_username_prefix,
                    groups_claim: self.oidc_groups_claim.filter(|c| !c.is_empty()),
                    groups_prefix: self.oidc_groups_prefix,
                    required_claims: self.oidc_required_claim,
                    signing_algs: names(self.oidc_signing_algs),
                },
                sign_in: SignInConfig {
                    scopes: names(self.oidc_scopes),
                    redirect_url: self.oidc_redirect_url.filter(|u| !u.is_empty()),
                    client_secret_file: self.oidc_client_secret_file,
                    session_secret_file: self.session_secret_file,
                    session_max_age: Duration::from_secs(self.session_max_age_hours * 3600),
                },
                request_header: RequestHeaderConfig {
                    client_ca_file: self.requestheader_client_ca_file,
                    allowed_names: names(self.requestheader_allowed_names),
                    username_headers: names(self.requestheader_username_headers),
                    group_headers: names(self.requestheader_group_headers),
                    extra_headers_prefix: names(self.requestheader_extra_headers_prefix),
                    group_separator: self.requestheader_group_separator,
                    max_groups: self.requestheader_max_groups as usize,
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
                max_pending_handshakes_per_address: self.max_pending_handshakes_per_address,
                idle_frames_per_minute: self.idle_frames_per_minute,
                trusted_proxies: self.trusted_proxies,
                ..LimitsConfig::default()
            },
            allowed_origins: names(self.allowed_origins),
            allowed_hosts: names(self.allowed_hosts),
            tls: self.tls.into_config(),
            clusters: super::ClustersConfig {
                default: self.default_cluster,
                ready_when: self.ready_when,
            },
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
