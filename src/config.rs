//! Configuration: one tree, each module getting only its own section.
//!
//! Flags and environment variables (`KUBEFAN_*`) are read by clap in
//! `main.rs`; [`GatewayArgs::into_config`] turns them into [`Config`], which
//! tests build directly.

use std::net::SocketAddr;
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
        }
    }
}

/// Everything the gateway needs besides a Kubernetes client.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// HTTP worker threads.
    pub workers: usize,
    /// Time allowed for open streams to close at shutdown.
    pub shutdown_grace: Duration,
    pub upstream: UpstreamConfig,
    pub stream: StreamConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            workers: 2,
            shutdown_grace: Duration::from_secs(10),
            upstream: UpstreamConfig::default(),
            stream: StreamConfig::default(),
        }
    }
}

/// Gateway flags, shared by `serve` and `demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// Address to serve HTTP on.
    #[arg(long, env = "KUBEFAN_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
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
    /// Serve Secrets (their data/stringData values are still blanked).
    #[arg(long, env = "KUBEFAN_ALLOW_SECRETS")]
    pub allow_secrets: bool,
    /// Seconds an on-demand informer (not started at boot) runs on after
    /// its last subscriber left.
    #[arg(long, env = "KUBEFAN_IDLE_GRACE_SECS", default_value_t = 300)]
    pub idle_grace_secs: u64,
    /// With --allow-secrets, serve Secret values unredacted.
    #[arg(long, env = "KUBEFAN_REVEAL_SECRET_DATA", requires = "allow_secrets")]
    pub reveal_secret_data: bool,
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
}

impl GatewayArgs {
    pub fn into_config(self) -> Config {
        Config {
            listen: self.listen,
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
                        reveal_secret_data: self.reveal_secret_data,
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
