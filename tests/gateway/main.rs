//! Integration tests: the real gateway app on port 0 against the simulated
//! API server, through the real kube-rs client, spoken to over real sockets.
//! One test binary; a module per surface.

mod kube;
mod lifecycle;
mod sse;
mod support;
mod ws;
