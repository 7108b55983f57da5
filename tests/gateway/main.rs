//! Integration tests: the real gateway app on port 0 against the simulated
//! API server, through the real kube-rs client, spoken to over real sockets.
//! One test binary; a module per surface.

mod auth;
mod batching;
mod clusters;
mod deploy;
mod front_proxy;
mod issuer;
mod kube;
mod lifecycle;
mod oidc;
mod rbac;
mod real_clients;
mod replicas;
mod signin;
mod soak;
mod sse;
mod support;
mod tables;
mod tls;
mod views;
mod watchlist;
mod ws;
