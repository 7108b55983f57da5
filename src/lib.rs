//! kubefan: a Kubernetes watch fan-out gateway.
//!
//! One shared informer per resource keeps a cache; any number of clients
//! subscribe and receive a snapshot, then every change. The API server sees
//! one list+watch per resource however many viewers connect.
//!
//! # Layout
//! - [`upstream`]: discovery, one informer (list-then-watch loop) per
//!   resource, ingest transforms (managedFields, Secret redaction).
//! - [`hub`]: per resource, the cache and a bounded event log; subscribers
//!   are cursors into it. The one place that owns consistency.
//! - [`transport`]: SSE framing and request errors; transports only frame
//!   what the hub encoded once.
//! - [`ops`]: metrics, health and readiness.
//! - [`app`]: wires everything onto one HTTP server.
//! - [`config`]: the configuration tree and its flags.
//! - [`selector`]: Kubernetes label and field selectors.
//! - [`sim`]: the simulated API server used by the demo, tests and load tests.

pub mod app;
pub mod config;
pub mod hub;
pub mod ops;
pub mod selector;
pub mod sim;
pub mod transport;
pub mod upstream;
