//! WebSocket messages: the SSE `data` JSON the hub already encoded, with
//! `"id"` spliced in where SSE sends an `id:` line and, on `/ws`,
//! `{"sub":ID,` spliced in front; one copy at most, no re-serialisation.
//! [`WsFraming`] turns a stream's messages into them.

use actix_ws::{CloseCode, CloseReason};
use bytes::{BufMut, Bytes, BytesMut};
use bytestring::ByteString;
use serde_json::Value;

use crate::hub::encode::ADDED_JSON_HEAD;
use crate::transport::message::{Ending, Message, bookmark_object, event_json, reset_status};
use crate::transport::stream::{Framing, Stream};
use crate::transport::takeover::{Opcode, frame_header};

/// The Close code of a socket whose credentials ended (after an ERROR per
/// subscription); see `proto/PROTOCOL.md`.
pub const CLOSE_UNAUTHORIZED: u16 = 4001;
/// The Close code of a socket whose access was withdrawn.
pub const CLOSE_FORBIDDEN: u16 = 4003;

/// Why a socket closes on an idle timeout.
pub const IDLE: &str = "no pong or message within the idle timeout";
/// ... on a `/ws` socket not read for the idle timeout because its
/// client took nothing it was sent.
pub const NOT_READING: &str = "not reading what it is sent";
/// ... on shutdown.
pub const GOING_AWAY: &str = "kubefan is shutting down; reconnect";

/// The `id` a message carries: where SSE sends `id:`, and empty where SSE
/// clears the client's id (RESET).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Id {
    None,
    Clear,
    Rv(u64),
    /// `RV~TAG` on a stream its access narrows (`hub::scope`).
    Tagged(u64, [u8; 8]),
}

impl Id {
    /// The id of position `rv` on `stream`.
    fn at(rv: u64, stream: &Stream<'_>) -> Id {
        match stream
            .tag
            .and_then(|t| <[u8; 8]>::try_from(t.as_bytes()).ok())
        {
            Some(tag) => Id::Tagged(rv, tag),
            None => Id::Rv(rv),
        }
    }
}

/// One message before its `{"sub":..,` prefix: shared JSON and its id.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub json: Bytes,
    pub id: Id,
    /// `json` is a snapshot object, not an event: the message is an
    /// id-less ADDED around it.
    pub added: bool,
}

impl Outgoing {
    /// A message whose `json` is a whole `{"type":..}` object.
    pub fn event(json: Bytes, id: Id) -> Outgoing {
        Outgoing {
            json,
            id,
            added: false,
        }
    }

    /// The length of its payload as a single-stream socket sends it.
    pub fn payload_len(&self) -> u64 {
        let mut tail = [0u8; TAIL];
        parts(None, self, &mut tail)
            .iter()
            .map(|p| p.len() as u64)
            .sum()
    }
}

/// Messages as WebSocket text messages. A single-stream socket also needs
/// to know how its stream ended, to choose its Close frame.
#[derive(Default)]
pub struct WsFraming {
    /// Boxed: every stream's framing would carry the room for it, and it
    /// is only known at the stream's end.
    pub ending: Option<Box<Ending>>,
}

impl Framing for WsFraming {
    type Out = Vec<Outgoing>;

    /// Each message as a whole text frame, back to back; its payloads are
    /// what a socket counts as sent.
    fn batched(out: Vec<Outgoing>) -> Option<(Bytes, u64)> {
        if out.is_empty() {
            return None;
        }
        let mut bytes = BytesMut::new();
        let mut payloads = 0;
        for msg in &out {
            let mut tail = [0u8; TAIL];
            let parts = parts(None, msg, &mut tail);
            let len = parts.iter().map(|p| p.len()).sum();
            let mut header = [0u8; 10];
            bytes.reserve(10 + len);
            bytes.put_slice(frame_header(&mut header, Opcode::Text, len));
            parts.iter().for_each(|p| bytes.put_slice(p));
            payloads += len as u64;
        }
        Some((bytes.freeze(), payloads))
    }

    fn frame(&mut self, msg: Message<'_>, stream: &Stream<'_>, out: &mut Vec<Outgoing>) -> bool {
        let meta = stream.meta;
        let (json, id) = match msg {
            Message::Object(object) => {
                out.push(Outgoing {
                    json: object.clone(),
                    id: Id::None,
                    added: true,
                });
                return true;
            }
            Message::Event(delivery) => {
                let id = if delivery.has_id() {
                    Id::at(delivery.rv(), stream)
                } else {
                    Id::None
                };
                (delivery.frame().json(), id)
            }
            Message::Bookmark { rv, initial_end } => {
                let object = bookmark_object(meta, rv, initial_end);
                (
                    Bytes::from(event_json("BOOKMARK", &object)),
                    Id::at(rv, stream),
                )
            }
            // The socket's own pings keep it alive.
            Message::KeepAlive => return true,
            Message::Reset(reason) => (
                Bytes::from(event_json("RESET", &reset_status(reason).to_string())),
                Id::Clear,
            ),
            Message::End(ending) => {
                out.push(Outgoing::event(error_json(&ending.status(meta)), Id::None));
                self.ending = Some(Box::new(ending));
                return false;
            }
        };
        out.push(Outgoing::event(json, id));
        true
    }
}

/// The Close frame a single-stream socket sends once its stream ended.
pub fn close_for(ending: Option<&Ending>) -> CloseReason {
    match ending {
        Some(Ending::Shutdown) => close_reason(CloseCode::Away, GOING_AWAY),
        Some(Ending::Denied(d)) if d.code == 403 => {
            close_reason(CloseCode::Other(CLOSE_FORBIDDEN), "access withdrawn")
        }
        Some(Ending::Denied(_)) => {
            close_reason(CloseCode::Other(CLOSE_UNAUTHORIZED), "token expired")
        }
        Some(Ending::Closed(_)) | None => close_reason(CloseCode::Normal, "the stream ended"),
    }
}

pub fn close_reason(code: CloseCode, description: &str) -> CloseReason {
    CloseReason {
        code,
        description: Some(description.to_string()),
    }
}

/// `msg` with `prefix` (`{"sub":ID,`) spliced in front and `"id"` at the
/// end. An event without either is its `json` itself, shared.
pub fn message(prefix: Option<&[u8]>, msg: &Outgoing) -> ByteString {
    if prefix.is_none() && msg.id == Id::None && !msg.added {
        return text(msg.json.clone());
    }
    let mut tail = [0u8; TAIL];
    let parts = parts(prefix, msg, &mut tail);
    let mut buf = BytesMut::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        buf.put_slice(part);
    }
    text(buf.freeze())
}

/// Room for the end of a message: `,"id":"`, a `u64`, `~` and a tag, `"}`.
pub const TAIL: usize = 48;

/// A message in four parts, to copy or to write as they are: its start
/// (`prefix`, or `{`), a snapshot object's `"type":"ADDED","object":`, the
/// inside of an event's `json` or the object, and its end (`"id"` and `}`).
pub fn parts<'a>(
    prefix: Option<&'a [u8]>,
    msg: &'a Outgoing,
    tail: &'a mut [u8; TAIL],
) -> [&'a [u8]; 4] {
    let json = &msg.json[..];
    let start = prefix.unwrap_or(b"{");
    if msg.added {
        debug_assert_eq!(msg.id, Id::None, "snapshot objects carry no id");
        return [start, &ADDED_JSON_HEAD[1..], json, b"}"];
    }
    debug_assert!(json.len() >= 2 && json[0] == b'{' && json[json.len() - 1] == b'}');
    let tail: &[u8] = match msg.id {
        Id::None => b"}",
        Id::Clear => br#","id":""}"#,
        Id::Rv(rv) | Id::Tagged(rv, _) => {
            // Written backwards: `"}`, the tag, the digits, `,"id":"` (at
            // most 38 bytes), without the formatting machinery, per socket
            // and message.
            let mut at = TAIL;
            let mut put = |bytes: &[u8]| {
                at -= bytes.len();
                tail[at..at + bytes.len()].copy_from_slice(bytes);
            };
            put(br#""}"#);
            if let Id::Tagged(_, tag) = msg.id {
                put(&tag);
                put(b"~");
            }
            let mut rest = rv;
            loop {
                put(&[b'0' + (rest % 10) as u8]);
                rest /= 10;
                if rest == 0 {
                    break;
                }
            }
            put(br#","id":""#);
            &tail[at..]
        }
    };
    [start, b"", &json[1..json.len() - 1], tail]
}

/// Every message is built from serde_json output and ASCII, so it is UTF-8;
/// the lossy path only exists so that a broken invariant cannot panic.
fn text(bytes: Bytes) -> ByteString {
    ByteString::try_from(bytes.clone())
        .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned().into())
}

/// An ERROR event carrying `status`.
pub fn error_json(status: &Value) -> Bytes {
    Bytes::from(event_json("ERROR", &status.to_string()))
}

pub fn error_message(prefix: Option<&[u8]>, status: &Value) -> ByteString {
    message(prefix, &Outgoing::event(error_json(status), Id::None))
}

/// `{"sub":ID,` for a client's subscription id.
pub fn sub_prefix(id: &str) -> Bytes {
    Bytes::from(format!(r#"{{"sub":{},"#, Value::from(id)))
}

/// The prefix of replies not attributable to a subscription.
pub const NULL_PREFIX: &[u8] = br#"{"sub":null,"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn s(b: ByteString) -> String {
        b.to_string()
    }

    #[test]
    fn messages_splice_sub_and_id_into_the_shared_json() {
        let json = Bytes::from_static(br#"{"type":"ADDED","object":{"a":1}}"#);
        let event = |id| Outgoing::event(json.clone(), id);
        let none = message(None, &event(Id::None));
        assert_eq!(s(none.clone()), std::str::from_utf8(&json).unwrap());
        assert_eq!(
            none.as_bytes().as_ptr(),
            json.as_ptr(),
            "shared, not copied"
        );
        assert_eq!(
            s(message(None, &event(Id::Rv(42)))),
            r#"{"type":"ADDED","object":{"a":1},"id":"42"}"#
        );
        assert_eq!(
            s(message(Some(&sub_prefix("a\"b")), &event(Id::Clear))),
            r#"{"sub":"a\"b","type":"ADDED","object":{"a":1},"id":""}"#
        );
        assert_eq!(
            s(message(Some(NULL_PREFIX), &event(Id::None))),
            r#"{"sub":null,"type":"ADDED","object":{"a":1}}"#
        );
        // The longest id fits the tail the writer keeps on its stack.
        let mut tail = [0u8; TAIL];
        assert_eq!(
            parts(None, &event(Id::Rv(u64::MAX)), &mut tail).concat(),
            br#"{"type":"ADDED","object":{"a":1},"id":"18446744073709551615"}"#
        );
        assert_eq!(
            parts(None, &event(Id::Tagged(u64::MAX, *b"0a1b2c3d")), &mut tail).concat(),
            br#"{"type":"ADDED","object":{"a":1},"id":"18446744073709551615~0a1b2c3d"}"#
        );
    }

    #[test]
    fn snapshot_objects_are_sent_as_id_less_added_events() {
        let object = Outgoing {
            json: Bytes::from_static(br#"{"a":1}"#),
            id: Id::None,
            added: true,
        };
        assert_eq!(
            s(message(None, &object)),
            r#"{"type":"ADDED","object":{"a":1}}"#
        );
        assert_eq!(
            s(message(Some(&sub_prefix("x")), &object)),
            r#"{"sub":"x","type":"ADDED","object":{"a":1}}"#
        );
    }

    #[test]
    fn a_stream_closes_with_the_code_of_its_ending() {
        use crate::hub::Denial;
        let code = |e: Option<Ending>| u16::from(close_for(e.as_ref()).code);
        assert_eq!(code(None), 1000);
        assert_eq!(code(Some(Ending::Shutdown)), 1001);
        assert_eq!(code(Some(Ending::Denied(Denial::expired()))), 4001);
        let forbidden = Denial {
            code: 403,
            reason: "Forbidden",
            message: "no".into(),
        };
        assert_eq!(code(Some(Ending::Denied(forbidden))), 4003);
    }
}
