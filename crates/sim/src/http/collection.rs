//! Collection reads: LIST (pages, `continue`, `resourceVersion` and
//! `resourceVersionMatch` as `ValidateListOptions` allows them) and WATCH
//! (bookmarks, `sendInitialEvents`, `timeoutSeconds`).

use std::time::Duration;

use actix_web::HttpResponse;

use serde_json::json;

use super::{JSON, Query, flag, number};
use crate::resource::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Filter, ListAt, WatchFrom};
use crate::watch::{self, WatchTiming};
use crate::{Sim, SimError};

fn filter(def: &ResourceDef, ns: Option<&str>, q: &Query) -> Result<Filter, SimError> {
    let labels = q.get("labelSelector").map(String::as_str).unwrap_or("");
    let fields = q.get("fieldSelector").map(String::as_str).unwrap_or("");
    Ok(Filter {
        ns: ns.map(str::to_owned),
        labels: LabelSelector::parse(labels)?,
        fields: FieldSelector::parse(fields, def)?,
    })
}

pub(super) async fn list_endpoint(
    sim: &Sim,
    def: &ResourceDef,
    ns: Option<&str>,
    q: &Query,
) -> Result<HttpResponse, SimError> {
    let key = def.key();
    sim.store().count_list(&key);
    if sim.take_failure() {
        return Err(SimError::Internal("injected failure".into()));
    }
    let delay = sim.list_delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let filter = filter(def, ns, q)?;
    let limit = number(q, "limit")?.map(|l| l as usize);
    let cont = q
        .get("continue")
        .map(String::as_str)
        .filter(|c| !c.is_empty());
    let at = list_at(q, cont.is_some())?;
    let page = sim.store().list(&key, &filter, limit, cont, at)?;
    let mut meta = json!({"resourceVersion": page.rv.to_string()});
    if let Some(c) = &page.cont {
        meta["continue"] = json!(c);
    }
    if let Some(n) = page.remaining {
        meta["remainingItemCount"] = json!(n);
    }
    let head = json!({
        "kind": format!("{}List", page.def.kind),
        "apiVersion": page.def.api_version(),
        "metadata": meta,
    })
    .to_string();
    // Splice the items into the head object without re-building a Value.
    let size = page.items.iter().map(|i| i.len() + 1).sum::<usize>();
    let mut out = Vec::with_capacity(head.len() + size + 16);
    out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.extend_from_slice(b"]}");
    Ok(HttpResponse::Ok().content_type(JSON).body(out))
}

/// Which state a LIST reads, from `resourceVersion` and
/// `resourceVersionMatch`, checked as kube-apiserver's
/// `ValidateListOptions` (apimachinery
/// `pkg/apis/meta/internalversion/validation/validation.go`: every
/// violation, aggregated) and etcd3 store do
/// (<https://kubernetes.io/docs/reference/using-api/api-concepts/#semantics-for-get-and-list>).
fn list_at(q: &Query, paged: bool) -> Result<ListAt, SimError> {
    let rv = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    let rv_match = q
        .get("resourceVersionMatch")
        .map(String::as_str)
        .unwrap_or("");
    let mut errs = Vec::new();
    if !rv_match.is_empty() {
        if rv.is_empty() {
            errs.push(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".to_owned(),
            );
        }
        if paged {
            errs.push(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided".to_owned(),
            );
        }
        if rv_match != "Exact" && rv_match != "NotOlderThan" {
            errs.push(format!(
                "resourceVersionMatch: Unsupported value: {rv_match:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""
            ));
        }
        if rv_match == "Exact" && rv == "0" {
            errs.push(
                "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"".to_owned(),
            );
        }
    }
    // Any value, true or false: a pointer that is set.
    if q.contains_key("sendInitialEvents") {
        errs.push(
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list".to_owned(),
        );
    }
    let aggregated = match errs.as_slice() {
        [] => None,
        [one] => Some(one.clone()),
        many => Some(format!("[{}]", many.join(", "))),
    };
    if let Some(errs) = aggregated {
        return Err(SimError::Invalid(format!(
            "ListOptions.meta.k8s.io \"\" is invalid: {errs}"
        )));
    }
    if rv.is_empty() || rv == "0" {
        return Ok(ListAt::Latest);
    }
    if paged {
        return Err(SimError::BadRequest(
            "specifying resource version is not allowed when using continue".into(),
        ));
    }
    let n = rv
        .parse::<u64>()
        .map_err(|_| SimError::BadRequest(format!("invalid resource version {rv:?}")))?;
    Ok(if rv_match == "Exact" {
        ListAt::Exact(n)
    } else {
        ListAt::NotOlderThan(n)
    })
}

/// How long a watch lasts, from `timeoutSeconds`, an int64 that
/// kube-apiserver multiplies by a second
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/get.go`,
/// `ListResource`): unset or 0 is the default, a negative value a deadline
/// already passed (the watch ends at once, with an empty body), and
/// anything that is not an int64 is 400. The stream caps what is left.
fn watch_timeout(q: &Query, default: Duration) -> Result<Duration, SimError> {
    let Some(value) = q.get("timeoutSeconds").filter(|v| !v.is_empty()) else {
        return Ok(default);
    };
    let seconds = value.parse::<i64>().map_err(|_| {
        SimError::BadRequest(format!("invalid value for timeoutSeconds: {value:?}"))
    })?;
    Ok(match seconds {
        0 => default,
        s if s < 0 => Duration::ZERO,
        s => Duration::from_secs(s.unsigned_abs()),
    })
}

pub(super) fn watch_endpoint(
    sim: &Sim,
    def: &ResourceDef,
    ns: Option<&str>,
    q: &Query,
) -> Result<HttpResponse, SimError> {
    let key = def.key();
    sim.store().count_watch(&key);
    if sim.take_failure() {
        return Err(SimError::Internal("injected failure".into()));
    }
    let filter = filter(def, ns, q)?;
    let bookmarks = flag(q, "allowWatchBookmarks")?;
    let initial_events = flag(q, "sendInitialEvents")?;
    let rv_match = q
        .get("resourceVersionMatch")
        .map(String::as_str)
        .unwrap_or("");
    if initial_events && (rv_match != "NotOlderThan" || !bookmarks) {
        return Err(SimError::Invalid(
            "sendInitialEvents requires resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true".into(),
        ));
    }
    if !initial_events && !rv_match.is_empty() {
        return Err(SimError::Invalid(
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
                .into(),
        ));
    }
    let from = match q.get("resourceVersion").map(String::as_str) {
        _ if initial_events => WatchFrom::Now {
            initial_events_end: true,
        },
        None | Some("" | "0") => WatchFrom::Now {
            initial_events_end: false,
        },
        Some(rv) => WatchFrom::After(
            rv.parse()
                .map_err(|_| SimError::BadRequest(format!("invalid resource version {rv:?}")))?,
        ),
    };
    let timeout = watch_timeout(q, sim.config().watch_timeout)?;
    let start = sim.store().watch(&key, filter, from);
    match start {
        Ok(start) => {
            let timing = WatchTiming {
                bookmarks: bookmarks.then_some(sim.config().bookmark_interval),
                timeout,
            };
            Ok(HttpResponse::Ok()
                .content_type(JSON)
                .streaming(watch::stream(sim.clone(), key, start, timing)))
        }
        Err(e @ SimError::Expired(_)) => Ok(HttpResponse::Ok()
            .content_type(JSON)
            .body(watch::error_line(&e))),
        Err(e) => Err(e),
    }
}
