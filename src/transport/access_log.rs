//! The access log: who watched what. One structured line per request (the
//! middleware writes it when the response head is decided) and, for a
//! stream, one more when it ends: what it delivered and how it ended.
//! Lines go to the `kubefan::access` tracing target at info level, so an
//! operator can route or silence them (`RUST_LOG=kubefan::access=off`).
//!
//! A line never holds a token or a cookie: the query string is logged
//! without `access_token`, and headers are not logged at all.

use std::time::Instant;

use actix_web::{HttpMessage, HttpRequest};

use crate::auth::Verb;
use crate::metrics::Transport;

/// What a request asked of which resource, noted by its handler for the
/// request's access-log line.
#[derive(Debug, Clone)]
pub struct AccessNote {
    pub verb: Verb,
    pub resource: String,
    /// The namespaces served (empty: all).
    pub namespaces: Vec<String>,
}

/// Notes on `req` what it asked for (read by the middleware's log line).
pub fn note(req: &HttpRequest, verb: Verb, resource: &str, namespaces: &[String]) {
    req.extensions_mut().insert(AccessNote {
        verb,
        resource: resource.to_string(),
        namespaces: namespaces.to_vec(),
    });
}

/// One stream, for the line written when it ends.
#[derive(Debug, Clone)]
pub struct StreamRecord {
    pub principal: Box<str>,
    pub transport: Transport,
    pub started: Instant,
}

/// What a stream delivered, counted as it goes.
#[derive(Debug, Default)]
pub struct Delivered {
    pub events: u64,
    pub bytes: u64,
    pub resets: u64,
}

impl StreamRecord {
    /// Writes the last line of the stream of `resource`.
    pub fn ended(&self, resource: &str, delivered: &Delivered, how: &str) {
        tracing::info!(
            target: "kubefan::access",
            principal = %self.principal,
            resource = %resource,
            transport = ?self.transport,
            events = delivered.events,
            bytes = delivered.bytes,
            resets = delivered.resets,
            duration_ms = self.started.elapsed().as_millis() as u64,
            ended = how,
            "stream ended"
        );
    }
}
