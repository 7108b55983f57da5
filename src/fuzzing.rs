//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz), and for
//! nothing else: plain functions over `&str` and `&[u8]` that run the
//! parsers a request meets exactly as its handler runs them, and hand back
//! what they decided in plain, comparable types, so that a target can
//! check properties (bounds, round trips), not only that nothing panics.
//!
//! The parsers stay private to their modules; this module only calls them.
//! It is hidden from the documentation and is not an API: it changes with
//! the targets.

use std::time::Duration;

use actix_web::ResponseError;
use actix_web::http::header::HeaderValue;
use actix_ws::AggregatedMessage;
use serde_json::{Map, Value};

use crate::hub::scope::Position;
use crate::status::ApiError;
use crate::transport::kube::params::{self, KubeQuery};
use crate::transport::takeover::{Frames, InboxLimits, Messages};
use crate::transport::ws::ops::{At, Op, OpError, parse_op};
use crate::transport::{StreamParams, parse_stream_query, sse};

/// The longest a watch of the Kubernetes face lasts, whatever its
/// `timeoutSeconds`.
pub const MAX_WATCH_TIMEOUT: Duration = params::MAX_WATCH_TIMEOUT;

/// A request refused: the HTTP status and the message of its `Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: u16,
    pub message: String,
}

impl From<ApiError> for Refused {
    fn from(err: ApiError) -> Refused {
        Refused {
            code: err.status_code().as_u16(),
            message: err.to_string(),
        }
    }
}

/// What a LIST or WATCH of pods decided from its query, before touching a
/// hub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubePlan {
    pub watch: bool,
    /// The label selector in its shortest spelling.
    pub labels: String,
    /// The field selector in its shortest spelling.
    pub fields: String,
    pub resource_version: Option<u64>,
    pub limit: Option<usize>,
    /// A LIST's `continue` token, as kubefan writes tokens.
    pub continue_token: Option<String>,
    /// How long a WATCH lasts.
    pub timeout: Duration,
}

/// `GET /api/v1/pods?{query}`, or `GET /api/v1/pods/{name}?{query}` with
/// `name`: the query parsed and planned as the Kubernetes face does,
/// against the fields pods are selectable by.
pub fn kube_query(query: &str, name: Option<&str>) -> Result<KubePlan, Refused> {
    let fields = crate::selector::selectable_fields("", "pods");
    let plan = KubeQuery::parse(query)?.plan(name, fields)?;
    Ok(KubePlan {
        watch: plan.query.watch,
        labels: plan.labels.to_string(),
        fields: plan.fields.to_string(),
        resource_version: plan.resource_version,
        limit: plan.query.limit,
        continue_token: plan.continued.as_ref().map(|t| t.encode()),
        timeout: plan.timeout,
    })
}

/// The query `query` parses to on the Kubernetes face, written out again;
/// `None` when it does not parse.
pub fn kube_query_again(query: &str) -> Option<String> {
    KubeQuery::parse(query)
        .ok()
        .map(|q| query_string(&q.pairs()))
}

/// `GET /stream/{resource}?{query}` (SSE, and WebSocket upgrades of the
/// same path): the stream's options.
pub fn stream_query(query: &str) -> Result<StreamParams, Refused> {
    Ok(parse_stream_query(query)?)
}

/// `params` as a query string for [`stream_query`].
pub fn stream_query_of(params: &StreamParams) -> String {
    query_string(&params.pairs())
}

/// `Last-Event-ID: {value}`, from the bytes a header carries: the position
/// an SSE stream resumes from (`None`: a snapshot).
pub fn last_event_id(value: &[u8]) -> Result<Option<Position>, Refused> {
    let Ok(value) = HeaderValue::from_bytes(value) else {
        return Err(Refused {
            code: 400,
            message: "not a header value (no request carries it)".into(),
        });
    };
    Ok(sse::parse_last_event_id(&value)?)
}

/// A `/ws` client message, parsed.
#[derive(Debug, PartialEq)]
pub struct WsOp(Op);

impl WsOp {
    /// The subscription the message names (none for `renew`).
    pub fn id(&self) -> Option<&str> {
        match &self.0 {
            Op::Subscribe { id, .. } | Op::Unsubscribe { id } => Some(id),
            Op::Renew { .. } => None,
        }
    }

    /// The message as JSON a client could send, which parses back to it.
    pub fn to_json(&self) -> String {
        let mut fields = Map::new();
        let (op, id) = match &self.0 {
            Op::Subscribe {
                id,
                resource,
                params,
                at,
            } => {
                fields.insert("resource".into(), Value::String(resource.clone()));
                match at {
                    At::Socket => {}
                    At::Cluster(cluster) => {
                        fields.insert("cluster".into(), Value::String(cluster.clone()));
                    }
                    At::Clusters { names, resume } => {
                        fields.insert("clusters".into(), Value::String(names.clone()));
                        if let Some(resume) = resume {
                            fields.insert("resourceVersion".into(), Value::String(resume.clone()));
                        }
                    }
                }
                for (key, value) in params.pairs() {
                    fields.insert(key.into(), Value::String(value));
                }
                ("subscribe", Some(id))
            }
            Op::Unsubscribe { id } => ("unsubscribe", Some(id)),
            Op::Renew { renewal } => {
                fields.insert("session".into(), Value::String(renewal.clone()));
                ("renew", None)
            }
        };
        fields.insert("op".into(), Value::String(op.into()));
        if let Some(id) = id {
            fields.insert("id".into(), Value::String(id.clone()));
        }
        Value::Object(fields).to_string()
    }
}

/// A `/ws` message refused: for the whole socket (`sub` is `None`), or
/// for the subscription it names.
#[derive(Debug)]
pub struct WsRefused {
    pub sub: Option<String>,
    pub refused: Refused,
}

/// A `/ws` client message, parsed and checked as the socket does before
/// acting on it.
pub fn ws_op(text: &str) -> Result<WsOp, WsRefused> {
    parse_op(text).map(WsOp).map_err(|err| match err {
        OpError::Socket(message) => WsRefused {
            sub: None,
            refused: Refused { code: 400, message },
        },
        OpError::Sub(id, err) => WsRefused {
            sub: Some(id),
            refused: err.into(),
        },
    })
}

/// The limits [`ws_frames`] reads with.
pub const WS_LIMITS: InboxLimits = InboxLimits {
    max_message: 4096,
    max_fragments: 16,
    idle_frames_per_minute: 50,
};

/// What a WebSocket's frame reader made of a client's bytes.
#[derive(Debug, Default)]
pub struct WsRead {
    /// Each message: whether it is a control frame (ping, pong, close),
    /// and its payload's length.
    pub messages: Vec<(bool, usize)>,
    /// The most the reader held after any read.
    pub most_held: usize,
    /// The Close code it refused the input with, if it did (reading stops
    /// there, as the socket closes).
    pub refused: Option<u16>,
}

/// `bytes` as a client's frames, arriving `read` bytes at a time, on a
/// `/ws` socket (`takes_messages`) or a single-stream one, read with
/// [`WS_LIMITS`] as `transport::takeover::ws_read` reads a socket.
pub fn ws_frames(bytes: &[u8], read: usize, takes_messages: bool) -> WsRead {
    let messages = if takes_messages {
        Messages::Taken
    } else {
        Messages::Ignored
    };
    let mut frames = Frames::new(WS_LIMITS, messages);
    let now = tokio::time::Instant::now();
    let mut out = WsRead::default();
    for chunk in bytes.chunks(read.max(1)) {
        frames.extend(chunk);
        loop {
            match frames.next(now) {
                Ok(Some(message)) => out.messages.push(match message {
                    AggregatedMessage::Text(text) => (false, text.len()),
                    AggregatedMessage::Binary(bytes) => (false, bytes.len()),
                    AggregatedMessage::Ping(bytes) | AggregatedMessage::Pong(bytes) => {
                        (true, bytes.len())
                    }
                    AggregatedMessage::Close(_) => (true, 0),
                }),
                Ok(None) => break,
                Err(refusal) => {
                    out.refused = Some(u16::from(refusal.code()));
                    return out;
                }
            }
        }
        out.most_held = out.most_held.max(frames.held());
    }
    out
}

/// `key=value` pairs joined with `&`, every byte of a value but ASCII
/// letters and digits percent-encoded.
pub fn query_string(pairs: &[(&str, String)]) -> String {
    let mut out = String::new();
    for (i, (key, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(key);
        out.push('=');
        for b in value.bytes() {
            if b.is_ascii_alphanumeric() {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}
