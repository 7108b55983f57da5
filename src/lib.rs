//! kubefan: a Kubernetes watch fan-out gateway.
//!
//! One shared informer per resource keeps a cache; any number of clients
//! subscribe and receive a snapshot, then every change. The API server sees
//! one list+watch per resource however many viewers connect.
//!
//! # Layout
//! `upstream → hub → transport`; imports point down this list, from the
//! modules that wire things together to the ones everything uses, but for
//! the few exceptions `ARCHITECTURE.md` names beside its codemap (which
//! also has the invariants).
//! - [`app`]: builds the gateway and serves it (`App::build`, `App::stop`).
//! - [`middleware`]: what every request passes first: size bounds, origins,
//!   CORS, authentication, connection limits.
//! - [`ops`]: `/healthz`, `/readyz`, `/metrics`.
//! - [`web`]: the dashboard page at `/`, compiled into the binary.
//! - `fuzzing` (hidden): entry points for the fuzz targets in `fuzz/`.
//! - [`token_cookie`]: `POST /session`, where a browser trades a bearer
//!   token for an HttpOnly cookie holding it (not a session: nothing is
//!   kept server-side, and clearing it revokes nothing).
//! - [`signin`]: `/login`, `/oauth2/callback`, `/logout`: signing in with
//!   the OpenID Connect issuer, into a session (`auth::session`).
//! - [`transport`]: SSE, WebSocket, the Kubernetes face; the one path from
//!   a subscription's items to bytes; the socket takeover.
//! - [`auth`]: principals, JWT and Kubernetes authentication, grants.
//! - [`limits`]: requests in flight and their rate, per principal and per
//!   address; the permit a response holds while it is sent.
//! - [`kubeconfig`]: a kubeconfig pointing ordinary Kubernetes clients at
//!   kubefan.
//! - [`config`]: the configuration tree; each module takes its section.
//! - [`tls`]: the served certificate (PEM files, re-read when they change)
//!   and the rustls configuration.
//! - [`status`]: request errors as Kubernetes `Status` responses.
//! - [`upstream`]: discovery, the resource policy, one informer
//!   (list-then-watch loop) per resource, ingest transforms; the internal
//!   reflector through which kubefan follows RBAC objects and CRDs.
//! - [`hub`]: per resource, the cache and a bounded event log; subscribers
//!   are cursors into it. The one place that owns consistency.
//! - [`table`]: server-side tables (the columns `kubectl get` shows) for
//!   the Kubernetes face: printers, CRD printer columns, negotiation.
//! - [`metrics`], [`lifecycle`], [`epoch`], [`selector`], [`heap`]: what the
//!   rest records to, stops with, waits on, filters with, and gives memory
//!   back through.
//!
//! The simulated API server the demo, the tests and the load tests use is
//! its own crate (`crates/sim`, `kubefan_sim`), apart from this library.

#![deny(unsafe_code)]
// The library is the gateway's inside, documented for whoever changes it:
// its docs link to private items on purpose (`cargo doc
// --document-private-items`, README "Development"). A link that resolves to
// nothing is still a warning (`rustdoc::broken_intra_doc_links`).
#![allow(rustdoc::private_intra_doc_links)]

pub mod app;
pub mod auth;
pub mod cluster;
pub mod config;
pub mod epoch;
#[doc(hidden)]
pub mod fuzzing;
pub mod heap;
pub mod hub;
pub mod kubeconfig;
pub mod lifecycle;
pub mod limits;
pub mod metrics;
pub mod middleware;
pub mod ops;
pub mod selector;
pub mod signin;
pub mod status;
pub mod table;
pub mod tls;
pub mod token_cookie;
pub mod transport;
pub mod upstream;
pub mod web;
