//! The streaming list (KEP-3157, "WatchList"; kube-apiserver serves it
//! from v1.27 behind the `WatchList` gate, by default since v1.32): the
//! informer's state through the watch itself.
//!
//! The request is kube-rs's `WatchParams::streaming_lists()`: `watch=true`,
//! `sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan`,
//! `allowWatchBookmarks=true`, `timeoutSeconds`, and `resourceVersion`
//! empty (unset): a consistent read, whose initial events are at least as
//! new as the upstream was when it got the request. Its ADDED events (and
//! whatever MODIFIED / DELETED come before the end: the cacher sends
//! changes it dispatched meanwhile) are gathered until the BOOKMARK
//! annotated `k8s.io/initial-events-end: "true"`; the hub is then relisted
//! at that bookmark's resourceVersion, and the same stream goes on as the
//! informer's watch: no second request, no gap.
//!
//! The rules are client-go's reflector's (`watchList`, `handleAnyWatch`,
//! `isWatchErrorRetriable` in
//! `staging/src/k8s.io/client-go/tools/cache/reflector.go`):
//! - 429 and 410 (or a resourceVersion too large) before the end: start
//!   over, backed off (`isErrorRetriableWithSideEffectsFn`);
//! - the stream ending before the end bookmark: start over, backed off
//!   (client-go starts over at once), except a watch that ended within a
//!   second with nothing (its `VeryShortWatchError`), which is a refusal;
//! - any other error is a refusal: the informer lists instead
//!   (`upstream::list::ListPlan::fallback`). API servers that do not serve
//!   the streaming list refuse it with 422 Invalid
//!   (`resourceVersionMatch` or `sendInitialEvents` "is forbidden for
//!   watch").
//! - kubefan's own addition: a BOOKMARK without the annotation before the
//!   annotated one is a refusal too. kube-apiserver annotates every
//!   bookmark of a watch list until one has been sent
//!   (`convertToWatchEvent` in
//!   `staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go`),
//!   so a plain one means an upstream that ignored `sendInitialEvents` and
//!   would never end the initial events (client-go waits for ever, warning
//!   every 10 s).
//!
//! A request that got no answer at all (connection refused or reset) says
//! nothing of what the upstream serves: it is retried, backed off.

use std::time::Instant;

use futures::StreamExt;
use kube::api::{WatchEvent, WatchParams};
use kube::core::Status;
use kube::core::watch::BookmarkMeta;

use super::events::{self, Events};
use super::informer::{Informer, SHORT_WATCH};
use crate::hub::Obj;

/// The annotation of the BOOKMARK that ends a watch list's initial events
/// (`metav1.InitialEventsAnnotationKey`).
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// How a streaming list ended.
pub(super) enum WatchListEnd {
    /// The state at `rv`, and the watch that goes on from it.
    Listed {
        objects: Vec<Obj>,
        rv: u64,
        events: Events,
    },
    /// The upstream refused it, or does not serve it: list instead.
    Refused(String),
    /// It broke before the end: start over after a back-off.
    Broken(String),
    /// What a LIST would have been answered with (403, 404).
    Failed(kube::Error),
    Shutdown,
}

/// What an error before the end bookmark means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Start over, backed off.
    Retry,
    /// List instead.
    Refused,
    /// 403 or 404: as a LIST's.
    Fatal,
}

/// client-go's rules for an error of a watch list (module docs).
fn verdict(status: &Status) -> Verdict {
    match status.code {
        403 | 404 => Verdict::Fatal,
        410 | 429 => Verdict::Retry,
        _ if too_large_resource_version(status) => Verdict::Retry,
        _ => Verdict::Refused,
    }
}

/// How a streaming list ended with `status` before its end.
fn ended_by(status: Box<Status>) -> WatchListEnd {
    match verdict(&status) {
        Verdict::Retry => WatchListEnd::Broken(status.message),
        Verdict::Refused => WatchListEnd::Refused(format!(
            "{} ({} {})",
            status.message, status.code, status.reason
        )),
        Verdict::Fatal => WatchListEnd::Failed(kube::Error::Api(status)),
    }
}

/// client-go's `isTooLargeResourceVersionError`: the cause
/// `ResourceVersionTooLarge`, or a 504 whose words say so (API servers
/// before v1.18.6).
fn too_large_resource_version(status: &Status) -> bool {
    let causes = status.details.iter().flat_map(|d| d.causes.iter());
    let by_cause = causes
        .clone()
        .any(|c| c.reason == "ResourceVersionTooLarge");
    let by_words = status.code == 504
        && (status.message.contains("Too large resource version")
            || causes
                .clone()
                .any(|c| c.message == "Too large resource version"));
    by_cause || by_words
}

/// Whether `bookmark` ends the initial events.
fn ends_initial_events(bookmark: &BookmarkMeta) -> bool {
    bookmark
        .annotations
        .get(INITIAL_EVENTS_END)
        .is_some_and(|v| v == "true")
}

impl Informer {
    /// One streaming list: the state and the watch that goes on from it,
    /// or why not. Its `Warning`s replace the hub's, as a LIST's do.
    pub(super) async fn watch_list(&self) -> WatchListEnd {
        let name = self.hub.name();
        self.metrics.upstream_watch(name);
        let wp = WatchParams::streaming_lists().timeout(self.watch_timeout_secs());
        let started = Instant::now();
        let opened = tokio::select! {
            _ = self.shutdown.cancelled() => return WatchListEnd::Shutdown,
            opened = events::open(&self.api, &wp, "") => opened,
        };
        let (mut events, warnings) = match opened {
            Ok(opened) => opened,
            Err(kube::Error::Api(status)) => return ended_by(status),
            Err(err) => {
                self.hub
                    .upstream_down(format!("watching its API server failed: {err}"));
                return WatchListEnd::Broken(err.to_string());
            }
        };
        self.hub.upstream_up();
        let initial = self.ingesting();
        let mut seen = 0usize;
        loop {
            let next = tokio::select! {
                _ = self.shutdown.cancelled() => return WatchListEnd::Shutdown,
                next = events.next() => next,
            };
            let (added, obj) = match next {
                None if seen == 0 && started.elapsed() < SHORT_WATCH => {
                    return WatchListEnd::Refused("the watch ended at once, empty".into());
                }
                None => {
                    return WatchListEnd::Broken(format!(
                        "the stream ended after {seen} events, before the bookmark that ends them"
                    ));
                }
                Some(Ok(WatchEvent::Bookmark(bookmark)))
                    if ends_initial_events(&bookmark.metadata) =>
                {
                    let rv = &bookmark.metadata.resource_version;
                    let Ok(rv) = rv.parse::<u64>() else {
                        return WatchListEnd::Broken(format!(
                            "its end bookmark has a non-numeric resourceVersion {rv:?}"
                        ));
                    };
                    self.hub.set_warnings(warnings);
                    return WatchListEnd::Listed {
                        objects: initial.finish().await,
                        rv,
                        events,
                    };
                }
                Some(Ok(WatchEvent::Bookmark(_))) => {
                    return WatchListEnd::Refused(format!(
                        "a bookmark without {INITIAL_EVENTS_END} came first: the upstream ignores sendInitialEvents"
                    ));
                }
                Some(Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj))) => (true, obj),
                Some(Ok(WatchEvent::Deleted(obj))) => (false, obj),
                Some(Ok(WatchEvent::Error(status))) | Some(Err(kube::Error::Api(status))) => {
                    return ended_by(status);
                }
                Some(Err(err)) => return WatchListEnd::Broken(err.to_string()),
            };
            seen += 1;
            // Ingested on a blocking thread (`Ingesting` says why).
            initial.push(added, obj).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: &str, message: &str) -> Status {
        Status::failure(message, reason).with_code(code)
    }

    #[test]
    fn an_api_server_without_watch_lists_refuses_and_the_informer_lists() {
        // kube-apiserver v1.27 to v1.31 with the WatchList gate off, and
        // before v1.27.
        for message in [
            "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch",
        ] {
            assert_eq!(verdict(&status(422, "Invalid", message)), Verdict::Refused);
        }
        // client-go falls back on any error it cannot retry.
        assert_eq!(
            verdict(&status(500, "InternalError", "boom")),
            Verdict::Refused
        );
        assert_eq!(verdict(&status(400, "BadRequest", "no")), Verdict::Refused);
    }

    #[test]
    fn throttling_expiry_and_a_resource_version_not_reached_are_retried() {
        assert_eq!(
            verdict(&status(429, "TooManyRequests", "slow down")),
            Verdict::Retry
        );
        assert_eq!(verdict(&status(410, "Expired", "too old")), Verdict::Retry);
        let old_words = status(504, "Timeout", "Too large resource version: 9, current: 3");
        assert_eq!(verdict(&old_words), Verdict::Retry);
        let mut by_cause = status(504, "Timeout", "Timeout: Too large resource version");
        by_cause.details = Some(kube::core::response::StatusDetails {
            causes: vec![kube::core::response::StatusCause {
                reason: "ResourceVersionTooLarge".into(),
                message: "Too large resource version".into(),
                field: String::new(),
            }],
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            retry_after_seconds: 0,
        });
        assert_eq!(verdict(&by_cause), Verdict::Retry);
        // A 504 about something else is not.
        assert_eq!(
            verdict(&status(504, "Timeout", "took too long")),
            Verdict::Refused
        );
    }

    #[test]
    fn forbidden_and_not_found_are_what_a_list_would_get() {
        assert_eq!(verdict(&status(403, "Forbidden", "no")), Verdict::Fatal);
        assert_eq!(verdict(&status(404, "NotFound", "gone")), Verdict::Fatal);
    }

    #[test]
    fn only_the_annotated_bookmark_ends_the_initial_events() {
        let mut bookmark = BookmarkMeta {
            resource_version: "7".into(),
            annotations: Default::default(),
        };
        assert!(!ends_initial_events(&bookmark));
        bookmark
            .annotations
            .insert(INITIAL_EVENTS_END.into(), "false".into());
        assert!(!ends_initial_events(&bookmark));
        bookmark
            .annotations
            .insert(INITIAL_EVENTS_END.into(), "true".into());
        assert!(ends_initial_events(&bookmark));
    }
}
