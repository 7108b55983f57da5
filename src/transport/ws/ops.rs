//! What a `/ws` client may send: `subscribe` and `unsubscribe` messages,
//! parsed and checked before the socket acts on them.

use serde_json::{Map, Value};

use crate::status::ApiError;
use crate::transport::{StreamParams, parse_stream_params};

/// Longest subscription id a client may choose, in bytes.
const MAX_SUB_ID: usize = 128;

/// A `/ws` client message.
#[derive(Debug, PartialEq)]
pub enum Op {
    Subscribe {
        id: String,
        resource: String,
        params: StreamParams,
        /// The cluster to subscribe in (`--cluster`); `None`: the
        /// socket's own.
        cluster: Option<String>,
    },
    Unsubscribe {
        id: String,
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
                "missing \"op\" (\"subscribe\" or \"unsubscribe\")".into(),
            ));
        }
    };
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
            let cluster = match fields.remove("cluster") {
                None => None,
                Some(Value::String(name)) => match crate::cluster::check_name(&name) {
                    Ok(()) => Some(name),
                    Err(why) => return Err(OpError::Sub(id, ApiError::BadRequest(why))),
                },
                Some(_) => {
                    return Err(OpError::Sub(
                        id,
                        ApiError::BadRequest("\"cluster\" is a cluster's name".into()),
                    ));
                }
            };
            match options(fields).and_then(|pairs| parse_stream_params(pairs, "field")) {
                Ok(params) => Ok(Op::Subscribe {
                    id,
                    resource,
                    params,
                    cluster,
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
            "unknown op {other:?} (known: subscribe, unsubscribe)"
        ))),
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
            cluster,
        } = op
        else {
            panic!("{op:?}")
        };
        assert_eq!((id.as_str(), resource.as_str()), ("a", "pods"));
        assert_eq!(cluster, None);
        let Ok(Op::Subscribe { cluster, .. }) =
            parse_op(r#"{"op":"subscribe","id":"a","resource":"pods","cluster":"east"}"#)
        else {
            panic!("a cluster")
        };
        assert_eq!(cluster.as_deref(), Some("east"));
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
            r#"{"op":"unsubscribe","id":"a","resource":"pods"}"#,
        ] {
            match parse_op(text) {
                Err(OpError::Sub(id, ApiError::BadRequest(_))) => assert_eq!(id, "a"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
