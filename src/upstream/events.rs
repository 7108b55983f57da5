//! An upstream WATCH request and its stream of events, with the response's
//! `Warning` headers, which `Api::watch` drops: a streaming list takes
//! the place of a LIST, and a LIST's warnings are kept on its hub
//! (`upstream::warning`).
//!
//! The request is the one `Api::watch` makes, sent as kube-client's
//! `Client::request_events` sends it, and its body read as that reads it
//! (kube-client 5, `src/client/mod.rs`): one JSON event per line; a line
//! that is not an event but a `Status` is that error; an incomplete last
//! line, and a connection cut mid-chunk (`UnexpectedEof`), end the stream
//! quietly, to be resumed.
//!
//! Objects are left as raw JSON ([`Object`]), for `upstream::ingest` to
//! read what it needs from (it says why).

use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use http_body_util::BodyExt;
use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};

use serde_json::value::RawValue;

use super::ingest::Object;

/// A watch's events, as `Api::watch` yields them.
pub(super) type Events =
    Pin<Box<dyn Stream<Item = Result<WatchEvent<Object>, kube::Error>> + Send>>;

/// Opens a WATCH of `api` from `rv` ("" for none): its events and the
/// `Warning`s its response came with. An error response is its `Status`,
/// as `Api::watch` returns it.
pub(super) async fn open(
    api: &Api<DynamicObject>,
    wp: &WatchParams,
    rv: &str,
) -> Result<(Events, Vec<&'static str>), kube::Error> {
    let mut request = kube::core::Request::new(api.resource_url())
        .watch(wp, rv)
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("watch");
    // As kube-client asks: a gzipped watch stream has a member per event,
    // which its decompression would not read past the first.
    request
        .headers_mut()
        .entry(http1::header::ACCEPT_ENCODING)
        .or_insert(http1::HeaderValue::from_static("identity"));
    let client = api.clone().into_client();
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let status = response.status();
    let warnings = super::warning::of(response.headers());
    let body = response.into_body();
    if status.is_client_error() || status.is_server_error() {
        let bytes = body.collect_bytes().await?;
        return Err(kube::Error::Api(failure(status.as_u16(), &bytes).boxed()));
    }
    Ok((Box::pin(events(body.into_data_stream())), warnings))
}

/// The events of a body that arrives as `chunks`.
fn events<S>(chunks: S) -> impl Stream<Item = Result<WatchEvent<Object>, kube::Error>>
where
    S: Stream<Item = Result<Bytes, kube::Error>> + Unpin,
{
    let lines = Lines {
        chunks: Some(chunks),
        buf: BytesMut::new(),
        scanned: 0,
    };
    futures::stream::unfold(lines, |mut lines| async move {
        let event = lines.next().await?;
        Some((event, lines))
    })
    .fuse()
}

/// The `Status` of an error response, or one made from its text when it
/// has none (a proxy's answer), as kube-client reads it.
pub(super) fn failure(code: u16, body: &[u8]) -> kube::core::Status {
    serde_json::from_slice::<kube::core::Status>(body).unwrap_or_else(|_| {
        kube::core::Status::failure(
            String::from_utf8_lossy(body).trim(),
            "Failed to parse error data",
        )
        .with_code(code)
    })
}

/// A response body cut into lines.
struct Lines<S> {
    /// `None` once it ended.
    chunks: Option<S>,
    buf: BytesMut,
    /// How much of `buf` holds no newline.
    scanned: usize,
}

impl<S: Stream<Item = Result<Bytes, kube::Error>> + Unpin> Lines<S> {
    async fn next(&mut self) -> Option<Result<WatchEvent<Object>, kube::Error>> {
        loop {
            if let Some(at) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') {
                let line = self.buf.split_to(self.scanned + at + 1);
                self.scanned = 0;
                match decode(&line) {
                    Some(event) => return Some(event),
                    None => continue,
                }
            }
            self.scanned = self.buf.len();
            let Some(chunks) = self.chunks.as_mut() else {
                let rest = self.buf.split();
                self.scanned = 0;
                return if rest.is_empty() { None } else { decode(&rest) };
            };
            match chunks.next().await {
                Some(Ok(data)) => self.buf.extend_from_slice(&data),
                None => self.chunks = None,
                Some(Err(err)) if unexpected_eof(&err) => {
                    tracing::debug!(error = %err, "upstream watch cut mid-chunk; it ends here");
                    self.chunks = None;
                }
                Some(Err(err)) => {
                    self.chunks = None;
                    self.buf.clear();
                    self.scanned = 0;
                    return Some(Err(err));
                }
            }
        }
    }
}

/// One line: an event, a `Status` the server sent instead, or nothing (a
/// blank line, or an incomplete one at the end of the stream). Public for
/// `benches/decode.rs`.
pub fn decode(line: &[u8]) -> Option<Result<WatchEvent<Object>, kube::Error>> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return None;
    }
    match decode_event(line) {
        Ok(event) => Some(Ok(event)),
        Err(err) if err.is_eof() => None,
        Err(err) => Some(Err(
            // Every field of a `Status` is optional: a line that is only
            // an object would read as an empty one.
            match serde_json::from_slice::<kube::core::Status>(line) {
                Ok(status) if status.code != 0 || status.status.is_some() => {
                    kube::Error::Api(status.boxed())
                }
                _ => kube::Error::SerdeError(err),
            },
        )),
    }
}

/// A watch line as kube-apiserver writes one, its object not yet read.
#[derive(serde::Deserialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// An event whose object is left as JSON, for `upstream::ingest`; what
/// kube's `WatchEvent` reads. Read through a struct, not `WatchEvent`
/// itself: that enum is adjacently tagged, and serde takes the path that
/// buffers its object as a tree (70 µs of a 6.6 KB pod with the encoding
/// after it, `benches/decode.rs`).
fn decode_event(line: &[u8]) -> Result<WatchEvent<Object>, serde_json::Error> {
    let line: Line = serde_json::from_slice(line)?;
    let object = || -> Result<Object, serde_json::Error> {
        if !line.object.get().starts_with('{') {
            return Err(serde::de::Error::custom(format!(
                "the event's object is not a JSON object: {:.40}",
                line.object.get()
            )));
        }
        Ok(line.object.to_owned())
    };
    Ok(match line.kind {
        "ADDED" => WatchEvent::Added(object()?),
        "MODIFIED" => WatchEvent::Modified(object()?),
        "DELETED" => WatchEvent::Deleted(object()?),
        "BOOKMARK" => WatchEvent::Bookmark(serde_json::from_str(line.object.get())?),
        "ERROR" => WatchEvent::Error(serde_json::from_str(line.object.get())?),
        other => {
            return Err(serde::de::Error::unknown_variant(
                other,
                &["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"],
            ));
        }
    })
}

/// Whether a body error is the connection ending mid-chunk, which
/// kube-client takes for the end of a watch (`UnexpectedEof` somewhere in
/// its sources, or the chunk decoder's words for it).
fn unexpected_eof(err: &kube::Error) -> bool {
    if err.to_string().contains("unexpected EOF during chunk") {
        return true;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    // A source chain that cycles must not stall the watch.
    for _ in 0..16 {
        let Some(e) = source else { return false };
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::UnexpectedEof
        {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(o: &Object) -> String {
        let o: serde_json::Value = serde_json::from_str(o.get()).unwrap();
        o["metadata"]["name"].as_str().unwrap().to_owned()
    }

    async fn events_of(chunks: &[&str]) -> Vec<Result<WatchEvent<Object>, String>> {
        let chunks: Vec<Result<Bytes, kube::Error>> = chunks
            .iter()
            .map(|c| Ok(Bytes::copy_from_slice(c.as_bytes())))
            .collect();
        events(futures::stream::iter(chunks))
            .map(|e| e.map_err(|e| e.to_string()))
            .collect()
            .await
    }

    const ADDED: &str = r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}}}"#;
    const END: &str = r#"{"type":"BOOKMARK","object":{"apiVersion":"v1","kind":"Pod","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;

    #[tokio::test]
    async fn lines_split_across_chunks_are_one_event_each() {
        let whole = format!("{ADDED}\n\n{END}\n");
        let (a, b) = whole.split_at(40);
        let (b, c) = b.split_at(70);
        let events = events_of(&[a, b, c]).await;
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(matches!(&events[0], Ok(WatchEvent::Added(o)) if name(o) == "a"));
        match &events[1] {
            Ok(WatchEvent::Bookmark(b)) => {
                assert_eq!(b.metadata.resource_version, "9");
                assert_eq!(
                    b.metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .map(String::as_str),
                    Some("true")
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn an_incomplete_last_line_ends_the_stream_quietly() {
        let events = events_of(&[&format!("{ADDED}\n"), &ADDED[..30]]).await;
        assert_eq!(events.len(), 1, "{events:?}");
    }

    #[tokio::test]
    async fn a_status_line_is_its_error_and_garbage_a_decoding_error() {
        let status = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"boom","reason":"InternalError","code":500}"#;
        let events = events_of(&[&format!("{status}\nnot json\n")]).await;
        assert_eq!(events.len(), 2, "{events:?}");
        assert!(
            events[0].as_ref().is_err_and(|e| e.contains("boom")),
            "{events:?}"
        );
        assert!(events[1].is_err(), "{events:?}");
    }

    #[tokio::test]
    async fn a_broken_body_is_an_error_and_a_cut_chunk_the_end() {
        let cut = || {
            kube::Error::ReadEvents(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "cut",
            ))
        };
        let broken = || kube::Error::ReadEvents(std::io::Error::other("reset"));
        for (error, ends_quietly) in [(cut(), true), (broken(), false)] {
            let chunks = vec![
                Ok(Bytes::from(format!("{ADDED}\n{}", &END[..20]))),
                Err(error),
            ];
            let events: Vec<_> = events(futures::stream::iter(chunks)).collect().await;
            assert!(matches!(events[0], Ok(WatchEvent::Added(_))), "{events:?}");
            // What was cut off mid-line is dropped either way.
            assert_eq!(events.len(), if ends_quietly { 1 } else { 2 }, "{events:?}");
        }
    }

    #[tokio::test]
    async fn an_error_event_is_its_status_and_every_kind_of_change_its_object() {
        let error = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (9)","reason":"Expired","code":410}}"#;
        let changes = [
            r#"{"type":"MODIFIED","object":{"metadata":{"name":"m"}}}"#,
            // In either order of its fields.
            r#"{"object":{"metadata":{"name":"d"}},"type":"DELETED"}"#,
            r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12"}}}"#,
        ];
        let events = events_of(&[&format!("{}\n{error}\n", changes.join("\n"))]).await;
        assert_eq!(events.len(), 4, "{events:?}");
        assert!(matches!(&events[0], Ok(WatchEvent::Modified(o)) if name(o) == "m"));
        assert!(matches!(&events[1], Ok(WatchEvent::Deleted(o)) if name(o) == "d"));
        assert!(
            matches!(&events[2], Ok(WatchEvent::Bookmark(b)) if b.metadata.resource_version == "12" && b.metadata.annotations.is_empty())
        );
        match &events[3] {
            Ok(WatchEvent::Error(status)) => {
                assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_object_that_is_not_an_object_is_a_decoding_error() {
        for line in [
            r#"{"type":"ADDED","object":[1]}"#,
            r#"{"type":"ADDED"}"#,
            r#"{"type":"RENAMED","object":{}}"#,
        ] {
            assert!(
                matches!(
                    decode(line.as_bytes()),
                    Some(Err(kube::Error::SerdeError(_)))
                ),
                "{line}"
            );
        }
    }

    #[test]
    fn a_text_error_response_keeps_its_code() {
        let status = failure(502, b"Bad Gateway\n");
        assert_eq!((status.code, status.message.as_str()), (502, "Bad Gateway"));
    }
}
