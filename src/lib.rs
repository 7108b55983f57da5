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
//! - [`auth`]: principals, JWT and Kubernetes authentication, grants.
//! - [`gate`]: what every request passes first: size bounds, origins,
//!   CORS, authentication, connection limits ([`limits`]).
//! - [`ops`]: metrics, health and readiness.
//! - [`app`]: wires everything onto one HTTP server.
//! - [`config`]: the configuration tree and its flags.
//! - [`heap`]: gives freed memory back to the system.
//! - [`selector`]: Kubernetes label and field selectors.
//! - [`sim`]: the simulated API server used by the demo, tests and load tests.
//! - [`table`]: server-side tables (`kubectl get` columns) for the Kubernetes face.
//! - [`web`]: the dashboard page at `/`, compiled into the binary.

pub mod app;
pub mod auth;
pub mod config;
pub mod gate;
pub mod heap;
pub mod hub;
pub mod limits;
pub mod ops;
pub mod selector;
pub mod server;
pub mod sim;
pub mod table;
pub mod transport;
pub mod upstream;
pub mod web;
