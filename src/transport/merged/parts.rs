//! A merged stream's parts ([`Parts`]): one cluster's subscription each,
//! joining now or later, polled in turn by the stream's one task, and
//! what the stream says of each part's API server (`CLUSTER`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::Value;

use super::{Start, in_cluster};
use crate::metrics::Transport;
use crate::transport::stream::{Framed, Framing};

/// A `CLUSTER` message's `Status`: the part's API server cannot be
/// reached (503, `why`), or is reached again (200).
fn reach_status(cluster: &str, down: Option<String>) -> Value {
    match down {
        Some(why) => crate::status::status_json(
            503,
            "ServiceUnavailable",
            &format!("cluster {cluster:?}: {why}; its part resumes when it is back"),
        ),
        None => serde_json::json!({"kind": "Status", "apiVersion": "v1",
            "metadata": {}, "status": "Success", "code": 200,
            "message": format!("cluster {cluster:?}: the API server is reached again")}),
    }
}

/// A part that joins its hub later ([`Start::Later`]): framed once it
/// has, or the `Status` (naming its cluster) it could not join with.
type Joining<F> = Pin<Box<dyn Future<Output = Result<Framed<F>, Value>> + Send>>;

/// One cluster's part of a merged stream.
#[expect(
    clippy::large_enum_variant,
    reason = "a part streams for the stream's life, in the Vec its stream allocates once; boxing it would add an allocation per part"
)]
enum Part<F> {
    Joining(Joining<F>),
    Streaming(Framed<F>),
    Over,
}

/// A merged stream's parts, framed, polled in turn by its one task.
pub(super) struct Parts<F: Framing> {
    parts: Vec<Part<F>>,
    names: Vec<Arc<str>>,
    /// What each part's stream was told of its API server.
    reach: Vec<Reach>,
    /// The part polled first next time, so that a busy cluster cannot
    /// starve the others.
    next: usize,
    /// Bytes the stream sent of its own while no part was streaming yet
    /// (its counters are its parts' hubs'): counted by the first to start.
    unclaimed: u64,
}

/// What a merged stream said of one part's API server.
#[derive(Default)]
struct Reach {
    /// The `Hub::upstream_changes` epoch last looked at (`None`: never).
    seen: Option<u64>,
    /// Whether the stream was told it is unreachable.
    down: bool,
    /// The part's task, waiting for the epoch to move.
    wait: crate::epoch::Registration,
}

/// A part that joined its hub since the stream last looked (with the API
/// server's warnings for its resource), or could not (the `Status`).
pub(super) type Joined = (Arc<str>, Result<Arc<[&'static str]>, Value>);

impl<F: Framing + Send + 'static> Parts<F> {
    /// Each part (its cluster, how it starts, its framing), framed as
    /// `principal`'s stream on `transport`.
    pub(super) fn new(
        parts: Vec<(Arc<str>, Start, F)>,
        transport: Transport,
        principal: &str,
    ) -> Parts<F> {
        let mut names = Vec::with_capacity(parts.len());
        let parts: Vec<Part<F>> = parts
            .into_iter()
            .map(|(name, start, framing)| {
                names.push(name.clone());
                match start {
                    Start::Now(sub) => {
                        Part::Streaming(Framed::new(sub, framing, transport, principal))
                    }
                    Start::Later(joining) => {
                        let principal = principal.to_string();
                        Part::Joining(Box::pin(async move {
                            match joining.await {
                                Ok(sub) => Ok(Framed::new(sub, framing, transport, &principal)),
                                Err(err) => Err(in_cluster(err, &name).status()),
                            }
                        }))
                    }
                }
            })
            .collect();
        Parts {
            reach: parts.iter().map(|_| Reach::default()).collect(),
            parts,
            names,
            next: 0,
            unclaimed: 0,
        }
    }
}

impl<F: Framing> Parts<F> {
    /// The first part that joined its hub, or could not, since last
    /// asked (a part that could not is over).
    pub(super) fn poll_joined(&mut self, cx: &mut Context<'_>) -> Option<Joined> {
        for (part, name) in self.parts.iter_mut().zip(&self.names) {
            let Part::Joining(joining) = part else {
                continue;
            };
            let Poll::Ready(joined) = joining.as_mut().poll(cx) else {
                continue;
            };
            return Some(match joined {
                Ok(mut framed) => {
                    let warnings = framed.subscription().hub().warnings();
                    framed.wrote(std::mem::take(&mut self.unclaimed));
                    *part = Part::Streaming(framed);
                    (name.clone(), Ok(warnings))
                }
                Err(status) => {
                    *part = Part::Over;
                    (name.clone(), Err(status))
                }
            });
        }
        None
    }

    /// The cluster and `Status` of a `CLUSTER` message for the first part
    /// whose API server was lost or found since the stream last said
    /// (registering for the next change of each).
    pub(super) fn poll_reach(&mut self, cx: &mut Context<'_>) -> Option<(Arc<str>, Value)> {
        for ((part, reach), name) in self.parts.iter().zip(&mut self.reach).zip(&self.names) {
            let Part::Streaming(part) = part else {
                continue;
            };
            let hub = part.subscription().hub();
            let changes = hub.upstream_changes();
            loop {
                let now = changes.current();
                if reach.seen != Some(now) {
                    reach.seen = Some(now);
                    let down = hub.upstream();
                    if down.is_some() != reach.down {
                        reach.down = down.is_some();
                        return Some((name.clone(), reach_status(name, down)));
                    }
                }
                if changes.poll_moved(now, &mut reach.wait, cx).is_pending() {
                    break;
                }
            }
        }
        None
    }

    /// The next of any streaming part's items (`poll`, on each part in
    /// turn from the one after the last that had one); a part whose `poll`
    /// is ready with `None` is over. `None` once every part is.
    pub(super) fn poll_next<T>(
        &mut self,
        cx: &mut Context<'_>,
        mut poll: impl FnMut(&mut Framed<F>, &mut Context<'_>) -> Poll<Option<T>>,
    ) -> Poll<Option<T>> {
        let n = self.parts.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let Part::Streaming(part) = &mut self.parts[i] else {
                continue;
            };
            match poll(part, cx) {
                Poll::Ready(Some(item)) => {
                    self.next = (i + 1) % n;
                    return Poll::Ready(Some(item));
                }
                Poll::Ready(None) => {
                    if let Part::Streaming(part) = std::mem::replace(&mut self.parts[i], Part::Over)
                    {
                        let hub = part.subscription().hub();
                        hub.upstream_changes().deregister(&mut self.reach[i].wait);
                    }
                }
                Poll::Pending => {}
            }
        }
        if self.parts.iter().all(|p| matches!(p, Part::Over)) {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }

    /// `bytes` the stream sent of its own (about its clusters, not of a
    /// part's stream): counted as its first streaming part's, or, while
    /// none streams yet, as the first to start's.
    pub(super) fn wrote(&mut self, bytes: u64) {
        let streaming = self.parts.iter_mut().find_map(|p| match p {
            Part::Streaming(framed) => Some(framed),
            _ => None,
        });
        match streaming {
            Some(part) => part.wrote(bytes),
            None => self.unclaimed += bytes,
        }
    }
}

impl<F: Framing> Drop for Parts<F> {
    fn drop(&mut self) {
        for (part, reach) in self.parts.iter().zip(&mut self.reach) {
            if let Part::Streaming(part) = part {
                part.subscription()
                    .hub()
                    .upstream_changes()
                    .deregister(&mut reach.wait);
            }
        }
    }
}
