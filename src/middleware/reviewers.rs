//! Which clusters review a request's token (`--auth kubernetes`), and
//! how their answers are waited for: the request's own cluster, or, for a
//! request across clusters, every cluster at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use actix_web::HttpMessage;
use actix_web::dev::ServiceRequest;

use crate::auth::{Authorizer, Principal};
use crate::cluster::ClusterOf;
use crate::transport::state::AppState;

/// The authorizers whose reviewers may accept `req`'s token, in order of
/// preference; a request across clusters is marked so
/// (`cluster::Across`) for its handler.
pub(super) fn of(req: &ServiceRequest, state: &AppState) -> Vec<Arc<Authorizer>> {
    // A request across clusters at the root is for no cluster, even where
    // the root also serves a default one: which clusters accept its token
    // is theirs to say (the default first, so that a token every cluster
    // accepts names the default's user), and the default down or hung
    // takes none of the others away. Whatever it then reads of any
    // cluster is that cluster's to review again (`Auth::principal_in`).
    let across = across_clusters(req, state.clusters.named());
    if across {
        req.extensions_mut().insert(crate::cluster::Across);
    }
    let own = req
        .extensions()
        .get::<ClusterOf>()
        .map(|c| c.authorizer().clone());
    match own {
        Some(own) if !across => vec![own],
        default if state.auth.reviews_tokens() => default
            .iter()
            .cloned()
            .chain(
                state
                    .clusters
                    .all()
                    .iter()
                    .map(|c| c.authorizer().clone())
                    .filter(|a| !default.as_ref().is_some_and(|d| Arc::ptr_eq(d, a))),
            )
            .collect(),
        // One review at most, and not a Kubernetes token's: any
        // cluster's authorizer authenticates it.
        _ => vec![state.clusters.all()[0].authorizer().clone()],
    }
}

/// The first of `reviews` (one per cluster, in order of preference) to
/// accept, run at once: a cluster that hangs or is down delays no other's
/// answer, and a bad token costs one review per cluster, concurrently.
/// Of those accepted by the time one is, the most preferred names the
/// principal (reviews the clusters hold within their TTL answer at once,
/// so a token every cluster knows is the default's user); when none
/// accepts, the most preferred's refusal is the answer.
pub(super) async fn first_accepted<F>(
    reviews: impl Iterator<Item = F>,
) -> Result<Principal, crate::auth::Error>
where
    F: Future<Output = Result<Principal, crate::auth::Error>>,
{
    let mut pending: Vec<Option<Pin<Box<F>>>> = reviews.map(|f| Some(Box::pin(f))).collect();
    let mut answers: Vec<Option<Result<Principal, crate::auth::Error>>> =
        pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        for (review, answer) in pending.iter_mut().zip(answers.iter_mut()) {
            if let Some(fut) = review
                && let Poll::Ready(verdict) = fut.as_mut().poll(cx)
            {
                *answer = Some(verdict);
                *review = None;
            }
        }
        if let Some(at) = answers.iter().position(|a| matches!(a, Some(Ok(_)))) {
            return Poll::Ready(answers[at].take());
        }
        if pending.iter().all(Option::is_none) {
            return Poll::Ready(answers.iter_mut().find_map(Option::take));
        }
        Poll::Pending
    })
    .await
    .unwrap_or_else(|| Err(crate::auth::Error::Setup("no cluster".into())))
}

/// Whether a request is for several clusters at once: `/clusters`, a
/// stream across clusters (`/stream/R?clusters=...`), or, on a gateway of
/// several clusters (`several`), `/ws`, whose subscriptions may each name
/// theirs; at the root.
fn across_clusters(req: &ServiceRequest, several: bool) -> bool {
    if req.extensions().contains::<crate::cluster::Prefixed>() {
        return false;
    }
    req.path() == "/clusters"
        || (several && req.path() == "/ws")
        || (req.path().starts_with("/stream/") && names_clusters(req.query_string()))
}

/// Whether a query has a `clusters` key, decoded as the stream's handler
/// decodes it (`transport::sse`'s `web::Query`), so `%63lusters=` is the
/// same request here as there. A query that does not decode is refused
/// by the handler (400) before anything streams.
fn names_clusters(query: &str) -> bool {
    actix_web::web::Query::<Vec<(String, String)>>::from_query(query)
        .is_ok_and(|pairs| pairs.iter().any(|(key, _)| key == "clusters"))
}
