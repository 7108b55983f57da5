//! How an informer gets a resource's whole state, and which way it takes
//! next (`--upstream-list`).
//!
//! - **Streaming list** (`upstream::watchlist`): a WATCH with
//!   `sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan`,
//!   `allowWatchBookmarks=true` and no resourceVersion (KEP-3157). The
//!   state arrives as the watch's first events and the watch goes on from
//!   it: no gap between a list and its watch, and no big LIST from etcd.
//! - **Paged LIST**: `limit=--page-size` pages of a consistent read, at
//!   the resourceVersion of its first page; its watch starts from there
//!   once the last page is in. A list slower than the upstream's watch
//!   history ends older than anything a watch can resume from: the watch
//!   is 410 at once.
//! - **`resourceVersion=0` LIST**, unpaged: kube-apiserver serves it from
//!   its watch cache as the cache is
//!   (<https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions>,
//!   "resourceVersion=0"), in one response, fast, and at a
//!   resourceVersion its watches have; it may be older than what kubefan
//!   saw (an HA API server's lagging cache): the hub then rewinds and
//!   clients take a fresh snapshot.
//! - **Exact LIST** at a saved position (`upstream::positions`), paged.
//!
//! [`ListPlan`] picks: with `auto`, the streaming list, and where the
//! upstream does not serve it, a paged LIST for that list, as client-go's
//! reflector falls back (`ListAndWatchWithContext` in
//! `staging/src/k8s.io/client-go/tools/cache/reflector.go`: "The watchlist
//! request ended with an error, falling back to the standard LIST/WATCH
//! semantics because making progress is better than deadlocking"); every
//! later list tries the streaming list again. Once a LIST has been older
//! than the upstream's history by the time its watch started, the LISTs
//! of that informer are `resourceVersion=0` ones, which cannot be.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::api::{ListParams, VersionMatch};
use serde::{Deserialize, Deserializer};

use super::informer::Informer;
use super::ingest::Object;
use crate::hub::Obj;

/// Which list an informer makes (`--upstream-list`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ListMode {
    /// The streaming list; a paged LIST where the upstream does not serve
    /// it (API servers before v1.27, or with the `WatchList` feature gate
    /// off, answer 422), as client-go falls back.
    #[default]
    Auto,
    /// Only the streaming list: a refusal is an error, retried with
    /// back-off.
    Streaming,
    /// Only LISTs, in pages, never a streaming list.
    Paged,
}

/// One way of listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListKind {
    Streaming,
    Paged,
    /// `resourceVersion=0`, unpaged: the API server's watch cache.
    Cached,
    /// Paged, at exactly a saved resourceVersion.
    Exact(u64),
}

impl ListKind {
    /// The `kind` label of `kubefan_upstream_lists_total`.
    pub(super) fn label(self) -> &'static str {
        match self {
            ListKind::Streaming => "streaming",
            ListKind::Paged => "paged",
            ListKind::Cached => "cached",
            ListKind::Exact(_) => "exact",
        }
    }

    /// Whether the watch after this list starts from an older position
    /// than now (a LIST), rather than going on from the list (a streaming
    /// list).
    pub(super) fn is_list_request(self) -> bool {
        self != ListKind::Streaming
    }
}

/// Which list comes next: `--upstream-list`, and what earlier lists of
/// this informer taught.
#[derive(Debug, Clone, Copy)]
pub(super) struct ListPlan {
    mode: ListMode,
    /// A LIST was older than the upstream's history by the time its
    /// watch started.
    outran_history: bool,
}

impl ListPlan {
    pub(super) fn new(mode: ListMode) -> ListPlan {
        ListPlan {
            mode,
            outran_history: false,
        }
    }

    /// The next list.
    pub(super) fn next(&self) -> ListKind {
        match self.mode {
            ListMode::Auto | ListMode::Streaming => ListKind::Streaming,
            ListMode::Paged => self.list_request(),
        }
    }

    /// What replaces a streaming list the upstream does not serve; `None`
    /// with `--upstream-list streaming`.
    pub(super) fn fallback(&self) -> Option<ListKind> {
        match self.mode {
            ListMode::Streaming => None,
            ListMode::Auto | ListMode::Paged => Some(self.list_request()),
        }
    }

    /// A LIST ended older than the upstream's history: from now on, LISTs
    /// are ones that cannot.
    pub(super) fn outran_history(&mut self) {
        self.outran_history = true;
    }

    fn list_request(&self) -> ListKind {
        if self.outran_history {
            ListKind::Cached
        } else {
            ListKind::Paged
        }
    }
}

/// The longest the LIST at a saved position may take. kube-rs retries a
/// 504 for minutes, and 504 is what kube-apiserver answers a position it
/// has not reached (an etcd restored from a backup): the ordinary LIST
/// then starts instead.
const SAVED_LIST_TIMEOUT: Duration = Duration::from_secs(30);

impl Informer {
    /// A LIST of `kind` (not [`ListKind::Streaming`]): every object and
    /// the list's resourceVersion; at a saved position, given at most
    /// [`SAVED_LIST_TIMEOUT`].
    pub(super) async fn list_request(
        &self,
        kind: ListKind,
    ) -> Result<(Vec<Obj>, u64), kube::Error> {
        if !matches!(kind, ListKind::Exact(_)) {
            return self.list_all(kind).await;
        }
        tokio::time::timeout(SAVED_LIST_TIMEOUT, self.list_all(kind))
            .await
            .unwrap_or_else(|_| {
                Err(kube::Error::Api(
                    kube::core::Status::failure(
                        "listing at the saved position took too long",
                        "Timeout",
                    )
                    .boxed(),
                ))
            })
    }

    /// Every object, in pages, and the list's resourceVersion: the latest,
    /// any (`resourceVersion=0`, one page), or exactly a saved one. (The
    /// resourceVersion goes with the first page only: the continue token
    /// carries it on, and kube-apiserver refuses both together.)
    async fn list_all(&self, kind: ListKind) -> Result<(Vec<Obj>, u64), kube::Error> {
        let objects = self.ingesting();
        let mut warnings = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let lp = match (&token, kind) {
                (Some(t), _) => ListParams::default()
                    .limit(self.cfg.page_size)
                    .continue_token(t),
                // No `limit`: kube-rs would drop `resourceVersion=0` with one.
                (None, ListKind::Cached) => ListParams::default().at("0"),
                (None, ListKind::Exact(rv)) => ListParams::default()
                    .limit(self.cfg.page_size)
                    .at(&rv.to_string())
                    .matching(VersionMatch::Exact),
                (None, _) => ListParams::default().limit(self.cfg.page_size),
            };
            let (page, page_warnings) = self.list_page(&lp).await?;
            for warning in page_warnings {
                if !warnings.contains(&warning) {
                    warnings.push(warning);
                }
            }
            // Ingested on a blocking thread (`Ingesting` says why).
            for item in page.items {
                objects.push(true, item).await;
            }
            match page.metadata.continue_ {
                Some(next) if !next.is_empty() => token = Some(next),
                _ => {
                    let rv = resource_version_of(page.metadata)?;
                    self.hub.set_warnings(warnings);
                    return Ok((objects.finish().await, rv));
                }
            }
        }
    }

    /// The upstream's current resourceVersion, by a one-item LIST: a
    /// consistent read, which etcd answers with a range of one key and
    /// kube-apiserver v1.31+ from its watch cache once that has caught up
    /// (KEP-2340, "Consistent Reads from Cache"), so it costs little
    /// however big the resource.
    pub(super) async fn current_resource_version(&self) -> Result<u64, kube::Error> {
        let (page, _warnings) = self.list_page(&ListParams::default().limit(1)).await?;
        resource_version_of(page.metadata)
    }

    /// One page of the LIST, and the `Warning`s it came with (what
    /// `Api::list` drops): the request `Api::list` makes, sent as it sends
    /// it, its errors read as it reads them.
    async fn list_page(&self, lp: &ListParams) -> Result<(Page, Vec<&'static str>), kube::Error> {
        let request = kube::core::Request::new(self.api.resource_url())
            .list(lp)
            .map_err(kube::Error::BuildRequest)?;
        let client = self.api.clone().into_client();
        let response = client.send(request.map(kube::client::Body::from)).await?;
        let status = response.status();
        let warnings = super::warning::of(response.headers());
        let body = response.into_body().collect_bytes().await?;
        if status.is_client_error() || status.is_server_error() {
            let failure = super::events::failure(status.as_u16(), &body);
            return Err(kube::Error::Api(failure.boxed()));
        }
        let page = serde_json::from_slice(&body).map_err(kube::Error::SerdeError)?;
        Ok((page, warnings))
    }
}

/// A LIST response as kube's `ObjectList` reads one (`metadata` may be
/// missing, `items` null), its items left as JSON: `ObjectList`'s
/// flattened `types` made serde buffer the whole page before decoding it,
/// and `DynamicObject` each item again (`upstream::ingest`).
#[derive(Debug, Deserialize)]
struct Page {
    #[serde(default)]
    metadata: ListMeta,
    #[serde(deserialize_with = "null_as_empty")]
    items: Vec<Object>,
}

/// A list's resourceVersion, as a number.
fn resource_version_of(metadata: ListMeta) -> Result<u64, kube::Error> {
    let rv = metadata.resource_version.unwrap_or_default();
    rv.parse::<u64>().map_err(|_| {
        kube::Error::Api(
            kube::core::Status::failure(
                &format!("list has a non-numeric resourceVersion {rv:?}"),
                "BadResponse",
            )
            .boxed(),
        )
    })
}

fn null_as_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Object>, D::Error> {
    Ok(Option::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::ingest::ingest;

    #[test]
    fn auto_streams_and_falls_back_to_pages_then_to_the_cache_once_a_list_outran_history() {
        let mut plan = ListPlan::new(ListMode::Auto);
        assert_eq!(plan.next(), ListKind::Streaming);
        assert_eq!(plan.fallback(), Some(ListKind::Paged));
        plan.outran_history();
        // The streaming list cannot outrun anything: it is still first.
        assert_eq!(plan.next(), ListKind::Streaming);
        assert_eq!(plan.fallback(), Some(ListKind::Cached));
    }

    #[test]
    fn streaming_never_falls_back() {
        let mut plan = ListPlan::new(ListMode::Streaming);
        assert_eq!((plan.next(), plan.fallback()), (ListKind::Streaming, None));
        plan.outran_history();
        assert_eq!((plan.next(), plan.fallback()), (ListKind::Streaming, None));
    }

    #[test]
    fn paged_lists_in_pages_until_a_list_outran_history() {
        let mut plan = ListPlan::new(ListMode::Paged);
        assert_eq!(plan.next(), ListKind::Paged);
        plan.outran_history();
        assert_eq!(plan.next(), ListKind::Cached);
    }

    #[test]
    fn a_page_is_read_as_kube_reads_an_object_list() {
        let page: Page = serde_json::from_str(
            r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"c"},
            "items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#,
        )
        .unwrap();
        assert_eq!(page.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(page.metadata.continue_.as_deref(), Some("c"));
        assert_eq!(page.items.len(), 2);
        assert!(page.items[1].get().contains(r#""name":"b""#));
        let empty: Page = serde_json::from_str(r#"{"items":null}"#).unwrap();
        assert!(empty.items.is_empty() && empty.metadata.resource_version.is_none());
        assert!(serde_json::from_str::<Page>(r#"{"metadata":{}}"#).is_err());
        // An item that is not an object is ingest's error, for that item.
        let odd: Page = serde_json::from_str(r#"{"items":[1]}"#).unwrap();
        let api = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let odd = ingest(&odd.items[0], &api, Default::default());
        assert!(matches!(
            odd,
            Err(super::super::ingest::IngestError::NotAnObject)
        ));
    }

    #[test]
    fn only_a_streaming_list_goes_on_into_its_watch() {
        assert!(!ListKind::Streaming.is_list_request());
        for kind in [ListKind::Paged, ListKind::Cached, ListKind::Exact(3)] {
            assert!(kind.is_list_request(), "{kind:?}");
        }
    }
}
