//! A merged stream as one `/ws` subscription: `{"op":"subscribe",
//! "id":ID,"resource":R,"clusters":"a,b"}` (or `*`, or a list). Each
//! part is framed as a `/ws` subscription's messages are ([`WsFraming`])
//! and marked ([`ClusterWs`]): its JSON starts `{"cluster":"NAME",` and its
//! `"id"` is the compound id, so the socket sends
//! `{"sub":ID,"cluster":"a","type":"MODIFIED","object":{..},"id":"a=7,b=41"}`.
//!
//! The subscription is one stream of its socket ([`MergedWs`] as the
//! source, its socket's outbox as the wire, as any subscription's): one
//! id, so `unsubscribe`, 409 and the socket's subscription count treat it
//! as one. A part's `ERROR` names its cluster and ends that part only;
//! once every part has ended, the subscription ends with an `ERROR`
//! without `cluster` (the last part's `Status`, saying so), after which
//! its id is free, as for any subscription.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use actix_web::web;
use bytes::Bytes;
use serde_json::Value;

use super::{Asked, Ids, Opened, Parts, Start, about_json, open, warning_text};
use crate::auth::Principal;
use crate::metrics::Transport;
use crate::status::status_json;
use crate::transport::message::{Message, shutdown_status};
use crate::transport::state::AppState;
use crate::transport::stream::{BatchSource, Framing, Stream};
use crate::transport::takeover::{Next, Source};
use crate::transport::ws::message::{Id, Outgoing, TAIL, WsFraming, parts};
use crate::transport::ws::poll_messages;

/// One part's framing: a `/ws` subscription's messages, then marked with
/// the cluster and given the compound id.
pub(crate) struct ClusterWs {
    inner: WsFraming,
    cluster: Arc<str>,
    /// `{"cluster":"NAME",`: what each of its messages starts with.
    head: Box<[u8]>,
    index: usize,
    ids: Arc<Ids>,
    /// The `Status` its part ended with, once it has.
    ended: Option<Value>,
}

impl ClusterWs {
    fn new(cluster: Arc<str>, index: usize, ids: Arc<Ids>) -> ClusterWs {
        // A DNS label: nothing to escape.
        let head = format!(r#"{{"cluster":"{cluster}","#).into_bytes().into();
        ClusterWs {
            inner: WsFraming::default(),
            cluster,
            head,
            index,
            ids,
            ended: None,
        }
    }

    /// `msg` with the cluster first and, where it has an id, the stream's
    /// compound id (the part's position recorded first).
    fn mark(&self, msg: &Outgoing) -> Outgoing {
        let id = match msg.id {
            Id::None => None,
            Id::Clear => Some(self.ids.set(self.index, None)),
            Id::Rv(rv) => Some(self.ids.set(self.index, Some(&rv.to_string()))),
            Id::Tagged(rv, tag) => {
                let tag = String::from_utf8_lossy(&tag);
                Some(self.ids.set(self.index, Some(&format!("{rv}~{tag}"))))
            }
        };
        let bare = Outgoing {
            json: msg.json.clone(),
            id: Id::None,
            added: msg.added,
        };
        let mut tail = [0u8; TAIL];
        let [head, added, inner, _] = parts(Some(&self.head), &bare, &mut tail);
        let mut buf = Vec::with_capacity(
            head.len() + added.len() + inner.len() + id.as_ref().map_or(1, |id| id.len() + 10),
        );
        buf.extend_from_slice(head);
        buf.extend_from_slice(added);
        buf.extend_from_slice(inner);
        if buf.last() == Some(&b',') {
            // An empty object: `{"cluster":"a"` and nothing after it.
            buf.pop();
        }
        if let Some(id) = id {
            // Names, digits, `=`, `,`, `~` and a hex tag: nothing to escape.
            buf.extend_from_slice(br#","id":""#);
            buf.extend_from_slice(id.as_bytes());
            buf.push(b'"');
        }
        buf.push(b'}');
        Outgoing::event(Bytes::from(buf), Id::None)
    }
}

impl Framing for ClusterWs {
    type Out = Vec<Outgoing>;

    fn frame(&mut self, msg: Message<'_>, stream: &Stream<'_>, out: &mut Vec<Outgoing>) -> bool {
        let from = out.len();
        let more = self.inner.frame(msg, stream, out);
        for msg in &mut out[from..] {
            *msg = self.mark(msg);
        }
        if !more {
            self.ended = self.inner.ending.take().map(|e| e.status(stream.meta));
        }
        more
    }

    /// Never asked: a merged subscription is not parked.
    fn batched(out: Vec<Outgoing>) -> Option<(Bytes, u64)> {
        WsFraming::batched(out)
    }
}

/// A message about a cluster ([`about_json`]).
fn about(cluster: &str, kind: &str, field: &str, value: &Value) -> Outgoing {
    Outgoing::event(
        Bytes::from(about_json(cluster, kind, field, value)),
        Id::None,
    )
}

/// The API server's warnings for a part's resource (a deprecated API's),
/// as WARNING messages naming the cluster.
fn warnings(cluster: &str, warnings: &[&str]) -> Vec<Outgoing> {
    warnings
        .iter()
        .map(|w| about(cluster, "WARNING", "message", &warning_text(w)))
        .collect()
}

/// What a merged subscription's task sends while it opens.
type Opening = Pin<Box<dyn Future<Output = Result<Streaming, Value>> + Send>>;

/// A merged `/ws` subscription's messages: opening (every part's
/// authorization and its hub's sync), then the refused clusters'
/// `CLUSTER` and the parts' warnings, then the parts' messages in turn;
/// or, refused, the `Status` that ends it.
pub(crate) enum MergedWs {
    Opening(Opening),
    Streaming(Streaming),
    /// Refused or over (its end was sent).
    Over,
}

pub(crate) struct Streaming {
    /// Sent before the parts' messages.
    first: Vec<Outgoing>,
    parts: Parts<ClusterWs>,
    /// The last part to end, and the `Status` it ended with.
    last: Option<(Arc<str>, Value)>,
    /// Bytes each message counts beyond its own payload: the
    /// subscription's prefix, less the `{` it takes the place of.
    extra: u64,
}

impl MergedWs {
    /// Subscription `prefix` (`{"sub":ID,`) of `principal` to what
    /// `asked` names, unless the gateway is stopping.
    pub(crate) fn start(
        state: web::Data<AppState>,
        principal: Principal,
        resource: String,
        asked: impl FnOnce(&str) -> Asked<'_> + Send + 'static,
        prefix: &[u8],
    ) -> MergedWs {
        let extra = prefix.len() as u64 - 1;
        MergedWs::Opening(Box::pin(async move {
            let asked = asked(&resource);
            let opened = tokio::select! {
                biased;
                _ = state.lifecycle.shutting_down() => Err(shutdown_status()),
                opened = open(&state, &principal, asked, Transport::WebSocket) => opened.map_err(|e| e.status()),
            }?;
            Ok(Streaming::new(opened, principal.name(), extra))
        }))
    }
}

impl Streaming {
    fn new(opened: Opened, principal: &str, extra: u64) -> Streaming {
        let mut first: Vec<Outgoing> = opened
            .refused
            .iter()
            .map(|(name, status)| about(name, "CLUSTER", "object", status))
            .collect();
        let ids = Arc::new(Ids::default());
        let mut parts = Vec::with_capacity(opened.parts.len());
        for (name, start, resumed) in opened.parts {
            // Before its first event: a `/ws` subscription has no response
            // of its own to carry them as headers.
            if let Start::Now(sub) = &start {
                first.extend(warnings(&name, &sub.hub().warnings()));
            }
            let index = ids.push(name.clone(), resumed);
            let framing = ClusterWs::new(name.clone(), index, ids.clone());
            parts.push((name, start, framing));
        }
        let mut streaming = Streaming {
            first: Vec::new(),
            parts: Parts::new(parts, Transport::WebSocket, principal),
            last: None,
            extra,
        };
        streaming.first = streaming.own(first);
        streaming
    }

    /// Messages of its own (about its clusters, not of a part's stream),
    /// counted as sent.
    fn own(&mut self, msgs: Vec<Outgoing>) -> Vec<Outgoing> {
        let bytes = msgs.iter().map(|m| m.payload_len() + self.extra).sum();
        self.parts.wrote(bytes);
        msgs
    }

    /// The subscription's last `Status`, once every part has ended: the
    /// last part's, saying so.
    fn over(&mut self) -> Value {
        match self.last.take() {
            Some((cluster, mut status)) => {
                let said = status["message"].as_str().unwrap_or("").to_string();
                status["message"] = Value::from(format!(
                    "every cluster's part of this subscription has ended; the last, cluster {cluster:?}'s: {said}"
                ));
                status
            }
            None => status_json(
                503,
                "ServiceUnavailable",
                "every cluster's part of this subscription has ended",
            ),
        }
    }
}

impl Source for MergedWs {
    type Item = Vec<Outgoing>;
    type End = Option<Value>;

    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Next<Vec<Outgoing>, Option<Value>>> {
        loop {
            match self {
                MergedWs::Opening(opening) => match ready!(opening.as_mut().poll(cx)) {
                    Ok(streaming) => *self = MergedWs::Streaming(streaming),
                    Err(status) => {
                        *self = MergedWs::Over;
                        return Poll::Ready(Next::End(Some(status)));
                    }
                },
                MergedWs::Streaming(streaming) => {
                    if !streaming.first.is_empty() {
                        return Poll::Ready(Next::Item(std::mem::take(&mut streaming.first)));
                    }
                    let extra = streaming.extra;
                    // A part that joined its hub later sends its warnings;
                    // one that could not is said to, as one left out.
                    if let Some((cluster, joined)) = streaming.parts.poll_joined(cx) {
                        let msgs = match joined {
                            Ok(said) => warnings(&cluster, &said),
                            Err(status) => {
                                let msg = about(&cluster, "CLUSTER", "object", &status);
                                streaming.last = Some((cluster, status));
                                vec![msg]
                            }
                        };
                        let msgs = streaming.own(msgs);
                        if msgs.is_empty() {
                            continue;
                        }
                        return Poll::Ready(Next::Item(msgs));
                    }
                    if let Some((cluster, status)) = streaming.parts.poll_reach(cx) {
                        let msg = about(&cluster, "CLUSTER", "object", &status);
                        return Poll::Ready(Next::Item(streaming.own(vec![msg])));
                    }
                    let Streaming { parts, last, .. } = streaming;
                    let next = ready!(parts.poll_next(cx, |part, cx| {
                        let out = ready!(poll_messages(part, cx, extra));
                        if out.is_none()
                            && let Some(status) = part.framing().ended.clone()
                        {
                            *last = Some((part.framing().cluster.clone(), status));
                        }
                        Poll::Ready(out)
                    }));
                    return Poll::Ready(match next {
                        Some(out) => Next::Item(out),
                        None => {
                            let status = streaming.over();
                            *self = MergedWs::Over;
                            Next::End(Some(status))
                        }
                    });
                }
                MergedWs::Over => return Poll::Ready(Next::End(None)),
            }
        }
    }

    /// Never parked: its task writes every part.
    fn batch(&mut self) -> Option<&mut dyn BatchSource> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(msg: &Outgoing) -> String {
        String::from_utf8(msg.json.to_vec()).unwrap()
    }

    #[test]
    fn a_part_puts_its_cluster_first_and_the_compound_id_last() {
        let ids = Arc::new(Ids::default());
        let a = ClusterWs::new("a".into(), ids.push("a".into(), None), ids.clone());
        let b = ClusterWs::new(
            "b".into(),
            ids.push("b".into(), Some("40".into())),
            ids.clone(),
        );
        let event =
            |json: &'static str, id| Outgoing::event(Bytes::from_static(json.as_bytes()), id);
        assert_eq!(
            text(&a.mark(&Outgoing {
                json: Bytes::from_static(br#"{"x":1}"#),
                id: Id::None,
                added: true,
            })),
            r#"{"cluster":"a","type":"ADDED","object":{"x":1}}"#
        );
        assert_eq!(
            text(&a.mark(&event(r#"{"type":"MODIFIED","object":{}}"#, Id::Rv(7)))),
            r#"{"cluster":"a","type":"MODIFIED","object":{},"id":"a=7,b=40"}"#
        );
        assert_eq!(
            text(&b.mark(&event(
                r#"{"type":"BOOKMARK"}"#,
                Id::Tagged(41, *b"0a0b0c0d")
            ))),
            r#"{"cluster":"b","type":"BOOKMARK","id":"a=7,b=41~0a0b0c0d"}"#
        );
        // A reset clears the part's position, not the others'.
        assert_eq!(
            text(&a.mark(&event(r#"{"type":"RESET"}"#, Id::Clear))),
            r#"{"cluster":"a","type":"RESET","id":"b=41~0a0b0c0d"}"#
        );
        assert_eq!(text(&a.mark(&event("{}", Id::None))), r#"{"cluster":"a"}"#);
        // With the subscription's prefix, as the socket sends it.
        let sent = crate::transport::ws::message::message(
            Some(br#"{"sub":"x","#),
            &a.mark(&event(r#"{"type":"DELETED"}"#, Id::Rv(8))),
        );
        assert_eq!(
            &*sent,
            r#"{"sub":"x","cluster":"a","type":"DELETED","id":"a=8,b=41~0a0b0c0d"}"#
        );
        let said = about(
            "b",
            "CLUSTER",
            "object",
            &status_json(403, "Forbidden", "no"),
        );
        let said: Value = serde_json::from_slice(&said.json).unwrap();
        assert_eq!(
            (said["cluster"].as_str(), said["object"]["code"].as_u64()),
            (Some("b"), Some(403))
        );
    }
}
