//! What a `/ws` client may send: `subscribe` and `unsubscribe` messages,
//! parsed and checked before the socket acts on them.

use serde_json::{Map, Value};

use crate::status::ApiError;
use crate::transport::{StreamParams, parse_stream_params};

/// Longest subscription id a client may choose, in bytes.
const MAX_SUB_ID: usize = 128;

/// A `/ws` client message.
#[derive(Debug, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "one message at a time, acted on at once: boxing would only add an allocation"
)]
pub enum Op {
    Subscribe {
        id: String,
        resource: String,
        params: StreamParams,
        /// Where it streams from.
        at: At,
    },
    Unsubscribe {
        id: String,
    },
    /// `{"op":"renew","session":RENEWAL}`: a refreshed session's renewal
    /// (`POST /session/refresh`'s `renewal`) for this socket's streams.
    Renew {
        renewal: String,
    },
}

/// Where a subscription streams from, on a gateway serving several
/// clusters (`--cluster`).
#[derive(Debug, PartialEq)]
pub enum At {
    /// The socket's cluster (`/clusters/NAME/ws`, or the default one's at
    /// `/ws`).
    Socket,
    /// The cluster `"cluster"` names.
    Cluster(String),
    /// The clusters `"clusters"` names (`a,b`, a list, or `*`), merged
    /// into one stream (`transport::merged`); `resume` is its compound id
    /// (`"resourceVersion"`), checked once the clusters are known.
    Clusters {
        names: String,
        resume: Option<String>,
    },
}

#[derive(Debug)]
pub enum OpError {
    /// Not attributable to a subscription: answered with `"sub":null`.
    Socket(String),
    /// Refused for this subscription id.
    Sub(String, ApiError),
}

pub fn parse_op(text: &str) -> Result<Op, OpError> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| OpError::Socket(format!("malformed JSON: {e}")))?;
    let Value::Object(mut fields) = value else {
        return Err(OpError::Socket(
            "a client message is a JSON object with \"op\" and \"id\"".into(),
        ));
    };
    let op = match fields.remove("op") {
        Some(Value::String(op)) => op,
        _ => {
            return Err(OpError::Socket(
                "missing \"op\" (\"subscribe\", \"unsubscribe\" or \"renew\")".into(),
            ));
        }
    };
    if op == "renew" {
        return renew(fields);
    }
    let id = match fields.remove("id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_SUB_ID => id,
        _ => {
            return Err(OpError::Socket(format!(
                "missing \"id\": a string of 1 to {MAX_SUB_ID} bytes naming the subscription"
            )));
        }
    };
    match op.as_str() {
        "subscribe" => {
            let resource = match fields.remove("resource") {
                Some(Value::String(r)) if !r.is_empty() => r,
                _ => {
                    return Err(OpError::Sub(
                        id,
                        ApiError::BadRequest("missing \"resource\" (e.g. \"pods\")".into()),
                    ));
                }
            };
            let at = match at(&mut fields) {
                Ok(at) => at,
                Err(why) => return Err(OpError::Sub(id, ApiError::BadRequest(why))),
            };
            match options(fields).and_then(|pairs| parse_stream_params(pairs, "field")) {
                Ok(params) => Ok(Op::Subscribe {
                    id,
                    resource,
                    params,
                    at,
                }),
                Err(err) => Err(OpError::Sub(id, err)),
            }
        }
        "unsubscribe" => match fields.keys().next() {
            None => Ok(Op::Unsubscribe { id }),
            Some(key) => Err(OpError::Sub(
                id.clone(),
                ApiError::BadRequest(format!("unknown field {key:?} in unsubscribe")),
            )),
        },
        other => Err(OpError::Socket(format!(
            "unknown op {other:?} (known: subscribe, unsubscribe, renew)"
        ))),
    }
}

/// A `renew` message's fields: exactly `"session"`, a sealed renewal of
/// at most a cookie's size.
fn renew(mut fields: Map<String, Value>) -> Result<Op, OpError> {
    let renewal = match fields.remove("session") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= crate::auth::session::MAX_SEALED => s,
        _ => {
            return Err(OpError::Socket(format!(
                "renew needs \"session\": the \"renewal\" of POST /session/refresh (a string of at most {} bytes)",
                crate::auth::session::MAX_SEALED
            )));
        }
    };
    match fields.keys().next() {
        None => Ok(Op::Renew { renewal }),
        Some(key) => Err(OpError::Socket(format!("unknown field {key:?} in renew"))),
    }
}

/// Where a subscribe message streams from (`"cluster"`, `"clusters"`,
/// whose `"resourceVersion"` is a compound id and taken out with them),
/// or why not.
fn at(fields: &mut Map<String, Value>) -> Result<At, String> {
    match (fields.remove("cluster"), fields.remove("clusters")) {
        (None, None) => Ok(At::Socket),
        (Some(_), Some(_)) => {
            Err("give \"cluster\" (one cluster) or \"clusters\" (several, merged), not both".into())
        }
        (Some(Value::String(name)), None) => {
            crate::cluster::check_name(&name)?;
            Ok(At::Cluster(name))
        }
        (Some(_), None) => Err("\"cluster\" is a cluster's name".into()),
        (None, Some(names)) => {
            const WHAT: &str = "\"clusters\" names clusters: \"a,b\", [\"a\",\"b\"] or \"*\"";
            let names = match names {
                Value::String(names) => names,
                Value::Array(items) => {
                    let mut names = Vec::with_capacity(items.len());
                    for item in items {
                        match item {
                            Value::String(name) => names.push(name),
                            _ => return Err(WHAT.into()),
                        }
                    }
                    names.join(",")
                }
                _ => return Err(WHAT.into()),
            };
            if names.trim() != "*" {
                for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    crate::cluster::check_name(name)?;
                }
            }
            let resume = match fields.remove("resourceVersion") {
                None => None,
                Some(Value::String(id)) => Some(id),
                Some(_) => {
                    return Err(
                        "\"resourceVersion\" of a merged subscription is its compound id (\"a=12,b=40\")"
                            .into(),
                    );
                }
            };
            Ok(At::Clusters { names, resume })
        }
    }
}

/// A subscribe message's options as the query string's key/value pairs:
/// a string or number is one value, a list of them repeats the key.
fn options(fields: Map<String, Value>) -> Result<Vec<(String, String)>, ApiError> {
    let mut pairs = Vec::new();
    for (key, value) in fields {
        let values = match value {
            Value::Array(items) => items,
            one => vec![one],
        };
        for value in values {
            let value = match value {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                _ => {
                    return Err(ApiError::BadRequest(format!(
                        "field {key:?} must be a string or a list of strings"
                    )));
                }
            };
            pairs.push((key.clone(), value));
        }
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribe_takes_the_query_string_options() {
        let op = parse_op(
            r#"{"op":"subscribe","id":"a","resource":"pods","namespace":["web","db"],"resourceVersion":"12"}"#,
        )
        .unwrap();
        let Op::Subscribe {
            id,
            resource,
            params,
            at,
        } = op
        else {
            panic!("{op:?}")
        };
        assert_eq!((id.as_str(), resource.as_str()), ("a", "pods"));
        assert_eq!(at, At::Socket);
        let at_of = |text: &str| match parse_op(text) {
            Ok(Op::Subscribe { at, .. }) => at,
            other => panic!("{text}: {other:?}"),
        };
        assert_eq!(
            at_of(r#"{"op":"subscribe","id":"a","resource":"pods","cluster":"east"}"#),
            At::Cluster("east".into())
        );
        assert_eq!(
            at_of(
                r#"{"op":"subscribe","id":"a","resource":"pods","clusters":["east","west"],"resourceVersion":"east=12,west=40~0a0b0c0d"}"#
            ),
            At::Clusters {
                names: "east,west".into(),
                resume: Some("east=12,west=40~0a0b0c0d".into())
            }
        );
        assert_eq!(
            at_of(r#"{"op":"subscribe","id":"a","resource":"pods","clusters":"*"}"#),
            At::Clusters {
                names: "*".into(),
                resume: None
            }
        );
        assert_eq!(params.namespaces, ["web", "db"]);
        assert_eq!(params.resume.map(|p| p.rv), Some(12));
        assert_eq!(
            parse_op(r#"{"op":"unsubscribe","id":"a"}"#).unwrap(),
            Op::Unsubscribe { id: "a".into() }
        );
    }

    #[test]
    fn bad_messages_are_refused_for_the_socket_or_the_id() {
        for text in [
            "{",
            "[]",
            r#"{"id":"a"}"#,
            r#"{"op":"subscribe"}"#,
            r#"{"op":"subscribe","id":""}"#,
            r#"{"op":"dance","id":"a"}"#,
        ] {
            assert!(matches!(parse_op(text), Err(OpError::Socket(_))), "{text}");
        }
        for text in [
            r#"{"op":"subscribe","id":"a"}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","nmespace":"x"}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","namespace":"Bad_NS"}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","namespace":{"x":1}}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","cluster":"East"}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","cluster":7}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","cluster":"a","clusters":"b"}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","clusters":"a,B"}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","clusters":["a",7]}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","clusters":{"a":1}}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","clusters":"a,*"}"#,
            r#"{"op":"subscribe","id":"a","resource":"pods","clusters":"a","resourceVersion":12}"#,
            r#"{"op":"unsubscribe","id":"a","resource":"pods"}"#,
        ] {
            match parse_op(text) {
                Err(OpError::Sub(id, ApiError::BadRequest(_))) => assert_eq!(id, "a"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
