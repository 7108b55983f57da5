//! A message of an agent's stream, parsed: an SSE event's `id` and
//! `data` assembled from its lines ([`SseEvent`]), and a message's JSON
//! (SSE `data`, a watch line, a WebSocket message) parsed into a [`Frame`]
//! with only the fields a fold needs, the rest of the object skipped.
//! LIST bodies are read with the same types ([`WireList`]).

use std::borrow::Cow;

use anyhow::Context;
use memchr::memmem;
use serde::Deserialize;

/// A message's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Reset,
    Error,
}

/// An SSE `id:` line, or a WebSocket message's `id` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Id {
    /// None (a snapshot's events, a relist run's first ones, the watch face).
    #[default]
    Absent,
    /// Present and empty: a `RESET`'s (forget your position).
    Empty,
    At(u64),
}

impl Id {
    /// An id's value as sent.
    pub fn parse(value: &str) -> Id {
        let value = value.trim();
        if value.is_empty() {
            return Id::Empty;
        }
        value.parse().map_or(Id::Absent, Id::At)
    }
}

/// One message, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: Kind,
    /// `namespace/name` of the object (changes and snapshot events).
    pub key: Option<String>,
    /// The object's `metadata.resourceVersion` (a bookmark's position).
    pub rv: Option<u64>,
    /// The object's `spec.nodeName`.
    pub node: Option<String>,
    /// A bookmark annotated `k8s.io/initial-events-end`: a snapshot's end.
    pub end: bool,
    pub id: Id,
    /// An `ERROR`'s (or a `RESET`'s) `Status` code.
    pub code: Option<u16>,
}

#[derive(Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    object: Option<WireObject<'a>>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
}

/// The fields of an object (or a `Status`) a fold needs; the rest is
/// skipped, never built.
#[derive(Deserialize, Default)]
pub struct WireObject<'a> {
    #[serde(default, borrow)]
    pub metadata: WireMeta<'a>,
    #[serde(default, borrow)]
    pub spec: Option<WireSpec<'a>>,
    #[serde(default)]
    pub code: Option<u16>,
}

#[derive(Deserialize, Default)]
pub struct WireMeta<'a> {
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub namespace: Option<Cow<'a, str>>,
    #[serde(default, rename = "resourceVersion", borrow)]
    pub resource_version: Option<Cow<'a, str>>,
    #[serde(default, rename = "continue", borrow)]
    pub cont: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
pub struct WireSpec<'a> {
    #[serde(default, rename = "nodeName", borrow)]
    pub node_name: Option<Cow<'a, str>>,
}

impl WireObject<'_> {
    /// `namespace/name`, or `name` for a cluster-scoped object.
    pub fn key(&self) -> Option<String> {
        let name = self.metadata.name.as_deref()?;
        Some(match self.metadata.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
            _ => name.to_string(),
        })
    }

    pub fn rv(&self) -> Option<u64> {
        self.metadata.resource_version.as_deref()?.parse().ok()
    }

    pub fn node(&self) -> Option<String> {
        self.spec
            .as_ref()?
            .node_name
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(str::to_string)
    }
}

/// A LIST's body: its items' keys, resourceVersions and nodes.
#[derive(Deserialize)]
pub struct WireList<'a> {
    #[serde(default, borrow)]
    pub metadata: WireMeta<'a>,
    #[serde(default, borrow)]
    pub items: Vec<WireObject<'a>>,
}

/// Parses a message's JSON (`{"type","object"[,"id"]}`); `id` is the SSE
/// `id:` line's, which a WebSocket message carries inside instead.
pub fn parse_event(json: &[u8], id: Id) -> anyhow::Result<Frame> {
    let event: WireEvent = serde_json::from_slice(json).with_context(|| {
        format!(
            "a message: {}",
            String::from_utf8_lossy(&json[..json.len().min(200)])
        )
    })?;
    let kind = match event.kind.as_ref() {
        "ADDED" => Kind::Added,
        "MODIFIED" => Kind::Modified,
        "DELETED" => Kind::Deleted,
        "BOOKMARK" => Kind::Bookmark,
        "RESET" => Kind::Reset,
        "ERROR" => Kind::Error,
        other => anyhow::bail!("a message of type {other:?}"),
    };
    let object = event.object.unwrap_or_default();
    let id = match event.id {
        Some(value) => Id::parse(&value),
        None => id,
    };
    Ok(Frame {
        kind,
        key: object.key(),
        rv: object.rv(),
        node: object.node(),
        end: kind == Kind::Bookmark
            && memmem::find(json, crate::subscriber::SNAPSHOT_END).is_some(),
        id,
        code: object.code,
    })
}

/// Assembles SSE events from a stream's lines (the `\n` taken off).
#[derive(Debug, Default)]
pub struct SseEvent {
    id: Id,
    data: Vec<u8>,
    /// Whether any field has come since the last event.
    started: bool,
}

impl SseEvent {
    /// Takes one line; at the blank line that ends an event, its `id` and
    /// `data`.
    pub fn line(&mut self, line: &[u8]) -> Option<(Id, Vec<u8>)> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if !std::mem::take(&mut self.started) {
                return None;
            }
            let id = std::mem::take(&mut self.id);
            return Some((id, std::mem::take(&mut self.data)));
        }
        if line[0] == b':' {
            // A keep-alive comment.
            return None;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if !self.data.is_empty() {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
            }
            b"id" => self.id = Id::parse(&String::from_utf8_lossy(value)),
            // `event:` repeats the data's type; `retry:` is for browsers.
            _ => {}
        }
        self.started = true;
        None
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    pub fn pod(kind: &str, name: &str, rv: u64, node: &str) -> String {
        format!(
            r#"{{"type":"{kind}","object":{{"kind":"Pod","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{"nodeName":"{node}","containers":[]}},"status":{{}}}}}}"#
        )
    }

    pub fn bookmark(rv: u64, end: bool) -> String {
        let annotations = if end {
            r#","annotations":{"k8s.io/initial-events-end":"true"}"#
        } else {
            ""
        };
        format!(
            r#"{{"type":"BOOKMARK","object":{{"kind":"Pod","metadata":{{"resourceVersion":"{rv}"{annotations}}}}}}}"#
        )
    }

    pub fn frame(json: &str, id: Id) -> Frame {
        parse_event(json.as_bytes(), id).unwrap()
    }

    #[test]
    fn messages_parse_into_frames_on_every_transport() {
        let f = frame(&pod("MODIFIED", "a", 7, "node-3"), Id::At(7));
        assert_eq!(
            f,
            Frame {
                kind: Kind::Modified,
                key: Some("ns/a".into()),
                rv: Some(7),
                node: Some("node-3".into()),
                end: false,
                id: Id::At(7),
                code: None
            }
        );
        let end = frame(&bookmark(9, true), Id::At(9));
        assert!(end.end && end.rv == Some(9));
        assert!(!frame(&bookmark(9, false), Id::Absent).end);
        // A WebSocket message carries its id inside; a RESET's is empty.
        let ws = frame(
            r#"{"type":"RESET","object":{"kind":"Status","code":410},"id":""}"#,
            Id::Absent,
        );
        assert_eq!(
            (ws.kind, ws.id, ws.code),
            (Kind::Reset, Id::Empty, Some(410))
        );
        let ws = frame(
            r#"{"type":"ADDED","object":{"metadata":{"name":"b","namespace":"ns","resourceVersion":"12"}},"id":"12"}"#,
            Id::Absent,
        );
        assert_eq!((ws.id, ws.key.as_deref()), (Id::At(12), Some("ns/b")));
        let err = frame(
            r#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}"#,
            Id::Absent,
        );
        assert_eq!((err.kind, err.code), (Kind::Error, Some(410)));
        assert!(parse_event(b"{\"type\":\"NOPE\"}", Id::Absent).is_err());
        assert!(parse_event(b"not json", Id::Absent).is_err());
        assert_eq!(Id::parse(" 15 "), Id::At(15));
        assert_eq!(Id::parse(""), Id::Empty);
        assert_eq!(Id::parse("c0=1,c1=2"), Id::Absent);
    }

    #[test]
    fn sse_events_end_at_blank_lines_and_skip_comments() {
        let mut sse = SseEvent::default();
        let mut out = Vec::new();
        for line in [
            "retry: 2000",
            "",
            ": keep-alive",
            "event: MODIFIED",
            "id: 5",
            "data: {\"a\":1}\r",
            "",
            "",
            "event: RESET",
            "id:",
            "data: {\"b\"",
            "data: :2}",
            "",
        ] {
            if let Some(ev) = sse.line(line.as_bytes()) {
                out.push(ev);
            }
        }
        assert_eq!(
            out,
            [
                (Id::Absent, Vec::new()),
                (Id::At(5), b"{\"a\":1}".to_vec()),
                (Id::Empty, b"{\"b\"\n:2}".to_vec()),
            ]
        );
    }
}
