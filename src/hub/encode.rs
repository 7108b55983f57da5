//! Wire encodings of hub events, made once and shared by every subscriber.
//!
//! One allocation per event holds its Server-Sent-Events frame:
//!
//! ```text
//! event: MODIFIED\nid: 42\ndata: {"type":"MODIFIED","object":{...}}\n\n
//!                               └──────────── json ─────────────┘
//!                               └──────────── ndjson ─────────────┘ (json + "\n")
//!                                                        └ object ┘
//! ```
//!
//! The WebSocket text frame (`json`), the Kubernetes watch line (`ndjson`)
//! and the bare object (`object`, used by lists and snapshots) are zero-copy
//! slices of that one buffer, so no transport re-serialises anything.
//! serde_json never emits a raw newline, so a JSON document is always one
//! SSE `data:` line.
//!
//! The object a live event carries is also the object the cache and the
//! log hold ([`super::Obj`] keeps a slice of its event's frame), so each
//! version of an object is stored once. A snapshot sends objects, not
//! events: each transport writes the id-less `ADDED` around the shared
//! object ([`added_sse`], [`added_line`], or [`ADDED_JSON_HEAD`] spliced
//! into a WebSocket message), as it copies a snapshot batch into one
//! buffer anyway.

use std::alloc::System;

use bytes::Bytes;

/// The type of a watch event, as Kubernetes names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// `{"type":"ADDED","object":` — the start of a snapshot object's event,
/// which is this, the object, and `}`.
pub const ADDED_JSON_HEAD: &[u8] = br#"{"type":"ADDED","object":"#;

const ADDED_SSE_HEAD: &[u8] = b"event: ADDED\ndata: {\"type\":\"ADDED\",\"object\":";
const ADDED_SSE_TAIL: &[u8] = b"}\n\n";

/// A snapshot object's SSE frame, an id-less `ADDED` event, in the three
/// parts written around the shared object.
pub fn added_sse(object: &[u8]) -> [&[u8]; 3] {
    [ADDED_SSE_HEAD, object, ADDED_SSE_TAIL]
}

/// A snapshot object's Kubernetes watch line (`ADDED`), in three parts.
pub fn added_line(object: &[u8]) -> [&[u8]; 3] {
    [ADDED_JSON_HEAD, object, b"}\n"]
}

/// The bytes a transport adds around a snapshot object at most (SSE's).
pub const ADDED_FRAMING: usize = ADDED_SSE_HEAD.len() + ADDED_SSE_TAIL.len();

/// A buffer the hub keeps (an event's frame, a cached object's JSON),
/// from the system's allocator rather than the process's.
///
/// The process allocates with jemalloc (`crate::heap` says why), which
/// rounds each block up to its size class, as much as a quarter more: a
/// 2,100-byte pod's frame takes 2,560 bytes. glibc's malloc gives a block
/// its length to 16 bytes. The log and the cache hold little else, so
/// this is the difference between 1.2 and 1.4 times their JSON
/// (`loadtest/RESULTS.md`, hub memory with jemalloc). Their buffers die
/// oldest first, which is the pattern glibc's arenas keep dense.
pub struct KeptBuf(allocator_api2::vec::Vec<u8, System>);

impl KeptBuf {
    /// Room for exactly `len` bytes.
    pub fn with_capacity(len: usize) -> KeptBuf {
        KeptBuf(allocator_api2::vec::Vec::with_capacity_in(len, System))
    }

    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    pub fn push(&mut self, byte: u8) {
        self.0.push(byte);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// The bytes, shared from now on (the buffer is not copied).
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self.0)
    }

    /// `bytes`, copied into a kept buffer of exactly their length.
    pub fn copy(bytes: &[u8]) -> Bytes {
        let mut buf = KeptBuf::with_capacity(bytes.len());
        buf.extend_from_slice(bytes);
        buf.freeze()
    }
}

/// One encoded event: an SSE frame with the JSON event and object inside it.
#[derive(Debug, Clone)]
pub struct Frame {
    buf: Bytes,
    json_start: u32,
    object_start: u32,
    object_end: u32,
}

impl Frame {
    /// Encodes `{"type":T,"object":OBJECT}` as an SSE frame named `event_name`,
    /// with an `id:` line when `id` is given. `object` must be one JSON value.
    pub fn encode(event_name: &str, json_type: &str, id: Option<u64>, object: &[u8]) -> Frame {
        Frame::encode_with(event_name, json_type, id, object, b"")
    }

    /// As [`Frame::encode`], with `extra` (`,"key":value` pairs) after the
    /// object inside the event: `{"type":T,"object":OBJECT<extra>}`.
    pub fn encode_with(
        event_name: &str,
        json_type: &str,
        id: Option<u64>,
        object: &[u8],
        extra: &[u8],
    ) -> Frame {
        let id = id.map(|id| id.to_string());
        // Exactly its length: the log keeps this buffer as it is.
        let len = b"event: \ndata: {\"type\":\"\",\"object\":}\n\n".len()
            + event_name.len()
            + id.as_ref().map_or(0, |id| b"id: \n".len() + id.len())
            + json_type.len()
            + object.len()
            + extra.len();
        let mut buf = KeptBuf::with_capacity(len);
        buf.extend_from_slice(b"event: ");
        buf.extend_from_slice(event_name.as_bytes());
        buf.push(b'\n');
        if let Some(id) = id {
            buf.extend_from_slice(b"id: ");
            buf.extend_from_slice(id.as_bytes());
            buf.push(b'\n');
        }
        buf.extend_from_slice(b"data: ");
        let json_start = buf.len();
        buf.extend_from_slice(b"{\"type\":\"");
        buf.extend_from_slice(json_type.as_bytes());
        buf.extend_from_slice(b"\",\"object\":");
        let object_start = buf.len();
        buf.extend_from_slice(object);
        let object_end = buf.len();
        buf.extend_from_slice(extra);
        buf.extend_from_slice(b"}\n\n");
        debug_assert_eq!(buf.len(), len);
        debug_assert_eq!(buf.capacity(), len, "never grown");
        Frame {
            buf: buf.freeze(),
            json_start: json_start as u32,
            object_start: object_start as u32,
            object_end: object_end as u32,
        }
    }

    /// The whole Server-Sent-Events frame, blank line included.
    pub fn sse(&self) -> &Bytes {
        &self.buf
    }

    /// The `{"type","object"}` watch event as JSON.
    pub fn json(&self) -> Bytes {
        self.buf.slice(self.json_start as usize..self.buf.len() - 2)
    }

    /// The watch event followed by one newline, as a Kubernetes watch stream line.
    pub fn ndjson(&self) -> Bytes {
        self.buf.slice(self.json_start as usize..self.buf.len() - 1)
    }

    /// The object alone.
    pub fn object(&self) -> Bytes {
        self.buf
            .slice(self.object_start as usize..self.object_end as usize)
    }

    /// Bytes held by this frame (for the log's byte bound).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_are_the_event_the_line_and_the_object() {
        let f = Frame::encode("MODIFIED", "MODIFIED", Some(42), br#"{"a":1}"#);
        assert_eq!(
            &f.sse()[..],
            b"event: MODIFIED\nid: 42\ndata: {\"type\":\"MODIFIED\",\"object\":{\"a\":1}}\n\n"
        );
        assert_eq!(&f.json()[..], br#"{"type":"MODIFIED","object":{"a":1}}"#);
        assert_eq!(
            &f.ndjson()[..],
            b"{\"type\":\"MODIFIED\",\"object\":{\"a\":1}}\n"
        );
        assert_eq!(&f.object()[..], br#"{"a":1}"#);
    }

    #[test]
    fn extra_fields_follow_the_object() {
        let f = Frame::encode_with(
            "MODIFIED",
            "MODIFIED",
            Some(3),
            br#"{"b":2}"#,
            br#","patch":"merge""#,
        );
        assert_eq!(
            &f.json()[..],
            br#"{"type":"MODIFIED","object":{"b":2},"patch":"merge"}"#
        );
        assert_eq!(&f.object()[..], br#"{"b":2}"#);
    }

    #[test]
    fn snapshot_heads_frame_an_object_as_an_id_less_added() {
        let f = Frame::encode("ADDED", "ADDED", None, b"{}");
        let sse = added_sse(&f.object()).concat();
        assert_eq!(&sse[..], &f.sse()[..]);
        assert_eq!(sse.len(), ADDED_FRAMING + 2);
        assert_eq!(&added_line(&f.object()).concat()[..], &f.ndjson()[..]);
        let json = [ADDED_JSON_HEAD, &f.object()[..], b"}"].concat();
        assert_eq!(&json[..], &f.json()[..]);
    }

    #[test]
    fn frame_without_id_has_no_id_line() {
        let f = Frame::encode("ADDED", "ADDED", None, b"{}");
        assert_eq!(
            &f.sse()[..],
            b"event: ADDED\ndata: {\"type\":\"ADDED\",\"object\":{}}\n\n"
        );
        assert_eq!(&f.object()[..], b"{}");
    }
}
