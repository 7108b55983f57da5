//! The batch writer (`transport::takeover::batch`) in the configurations a
//! team ships: streams with expiring credentials and narrowed access are
//! written by their hubs' writers, which follow their deadlines and
//! access changes; keep-alive ticks and pongs never send a caught-up
//! stream back to a task of its own.

use std::time::Duration;

use kubefan_sim::pod;
use serde_json::json;

use crate::auth::{claims, hs256, jwt_config};
use crate::rbac::{ROLE_BINDINGS, binding, pods_in, rbac_env, team_sim, until_holds};
use crate::sse::{BATCH_PATHS, batched_through_churn, batching_env, touch_tracked};
use crate::support::{ClientView, SseClient, TestEnv, WAIT, test_config};
use crate::ws::{batched_sockets, follow, subscribed};

/// `kubefan_streams_batched` now.
async fn batched(env: &TestEnv) -> usize {
    env.metrics()
        .await
        .lines()
        .find_map(|l| l.strip_prefix("kubefan_streams_batched "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `kubefan_streams_unparked_total` for `reason`, or summed over every
/// reason.
async fn unparked(env: &TestEnv, reason: Option<&str>) -> u64 {
    let metrics = env.metrics().await;
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("kubefan_streams_unparked_total{reason=\""))
        .filter_map(|l| l.split_once("\"} "))
        .filter(|(r, _)| reason.is_none_or(|want| *r == want))
        .map(|(_, v)| v.parse::<u64>().expect("a count"))
        .sum()
}

/// An SSE stream opened with `token`, its snapshot read.
async fn sse_as(env: &TestEnv, path: &str, token: &str) -> (SseClient, ClientView) {
    let resp = env.get_as(path, token).await;
    assert_eq!(resp.status(), 200, "{path}");
    let mut sse = SseClient::new(resp);
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        view.apply(&sse.next().await.expect("snapshot"));
    }
    (sse, view)
}

/// Changes the pod `NS/tracked`: the resourceVersion it is at then.
fn touch(env: &TestEnv, ns: &str, round: &str) -> u64 {
    let o = env
        .sim
        .merge_patch(
            "pods",
            Some(ns),
            "tracked",
            &json!({"metadata": {"labels": {"round": round}}}),
        )
        .unwrap();
    crate::support::rv_of(&o)
}

/// Touches the pod `NS/tracked` and has `sse` follow, until `n` streams
/// are batched (a stream is parked once it is caught up after a write).
async fn until_batched(
    env: &TestEnv,
    ns: &str,
    sse: &mut [&mut (SseClient, ClientView)],
    n: usize,
) {
    for round in 0..200 {
        if batched(env).await == n {
            return;
        }
        let rv = touch(env, ns, &format!("b{round}"));
        for (client, view) in sse.iter_mut().map(|s| &mut **s) {
            view.follow(client, rv).await;
        }
    }
    let metrics = env.metrics().await;
    let unparked: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("kubefan_streams_"))
        .collect();
    panic!("{n} streams were never batched: {unparked:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_with_expiring_tokens_are_batched_and_end_at_their_deadline() {
    let mut cfg = jwt_config();
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let env = batching_env(cfg).await;
    let token = hs256(&claims("alice", &["*"], &["*"], 300));
    let mut subs = Vec::new();
    for path in BATCH_PATHS {
        subs.push((path, sse_as(&env, path, &token).await));
    }
    batched_through_churn(&env, &mut subs, async |sse, view, rv| {
        view.follow(sse, rv).await
    })
    .await;

    // A token that expires in seconds: batched first, then ended by its
    // writer's deadline (its task sends the ERROR), on time.
    let short = hs256(&claims("bob", &["*"], &["*"], 4));
    let mut expiring = sse_as(&env, "/stream/pods", &short).await;
    until_batched(&env, "batch", &mut [&mut expiring], BATCH_PATHS.len() + 1).await;
    let (sse, view) = &mut expiring;
    let error = sse.until_error(view).await;
    assert_eq!(error.data["object"]["code"], 401);
    assert!(
        sse.next().await.is_none(),
        "the stream ends after the ERROR"
    );
    assert_eq!(unparked(&env, Some("Deadline")).await, 1);
    assert_eq!(batched(&env).await, BATCH_PATHS.len(), "the others stay");
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_ticks_are_written_by_the_writer_without_unparking() {
    let env = batching_env(test_config(&["pods"])).await;
    let mut subs = crate::sse::batched_sse(&env).await;
    let before = unparked(&env, None).await;
    // Three ticks (every 100 ms here): each stream gets its keep-alives.
    for _ in 0..3 {
        for (_, (sse, _)) in subs.iter_mut() {
            sse.next_comment().await;
        }
    }
    assert_eq!(unparked(&env, None).await, before, "no tick unparked");
    assert_eq!(batched(&env).await, subs.len());
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_pings_and_pongs_leave_sockets_batched_and_the_idle_timeout_holds() {
    // Longer than the churn leaves a client unread (it answers pings only
    // as it reads), shorter than the ticks read below.
    let (env, mut subs) = batched_sockets(Duration::from_secs(4)).await;
    let before = unparked(&env, None).await;
    // Each tick's ping is written by the writer, and the pong (sent as the
    // client reads on) absorbed there: the sockets stay batched, past
    // their idle timeout's length.
    for _ in 0..50 {
        for (_, (ws, _)) in subs.iter_mut() {
            ws.pings(1).await;
        }
    }
    assert_eq!(
        unparked(&env, None).await,
        before,
        "no ping or pong unparked"
    );
    assert_eq!(batched(&env).await, subs.len());

    // A client that stops answering is closed at its idle timeout (1008),
    // its writer noticing on a tick.
    let (mut quiet, _) = subscribed(&env, "/stream/pods").await;
    let (_, (ws, view)) = &mut subs[0];
    let rv = touch_tracked(&env.sim, "quiet");
    follow(ws, view, rv).await;
    tokio::time::timeout(WAIT, async {
        while batched(&env).await < BATCH_PATHS.len() + 1 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the quiet socket is batched");
    // Read nothing for longer than the idle timeout: tungstenite answers
    // pings only as it reads.
    tokio::time::timeout(WAIT, async {
        while unparked(&env, Some("Idle")).await == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the quiet socket leaves its writer at its idle timeout");
    assert_eq!(quiet.closed().await, 1008);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn narrowed_streams_are_batched_and_a_grant_unparks_only_its_users_streams() {
    let sim = team_sim();
    sim.create(ROLE_BINDINGS, binding("dana-web", "web", "dana"))
        .unwrap();
    sim.create(ROLE_BINDINGS, binding("erin-web", "web", "erin"))
        .unwrap();
    sim.create(ROLE_BINDINGS, binding("erin-batch", "batch", "erin"))
        .unwrap();
    let env = rbac_env(sim, |cfg| {
        cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    env.sim
        .create("pods", pod("tracked").ns("web").build())
        .unwrap();
    let mut dana = sse_as(&env, "/stream/pods", "dana-token").await;
    let mut erin = sse_as(&env, "/stream/pods", "erin-token").await;
    assert!(
        dana.1.last_id.as_deref().is_some_and(|id| id.contains('~')),
        "narrowed: ids carry a tag"
    );
    until_batched(&env, "web", &mut [&mut dana, &mut erin], 2).await;

    // A grant for dana: her stream (only) goes to its task, which shows
    // batch's pods, then comes back.
    env.sim
        .create(ROLE_BINDINGS, binding("dana-batch", "batch", "dana"))
        .unwrap();
    let (sse, view) = &mut dana;
    until_holds(sse, view, &pods_in(&env.sim, &["web", "batch"])).await;
    assert!(view.resets.is_empty());
    until_batched(&env, "web", &mut [&mut dana, &mut erin], 2).await;
    assert_eq!(unparked(&env, Some("Access")).await, 1, "dana's alone");

    // Both now see web and batch, and follow changes there, batched.
    let rv = touch(&env, "web", "both");
    for (sse, view) in [&mut dana, &mut erin] {
        view.follow(sse, rv).await;
        view.assert_matches(&pods_in(&env.sim, &["web", "batch"]));
    }

    // The revocation reaches a parked stream: ERROR 403, then the end.
    env.sim
        .delete(ROLE_BINDINGS, Some("web"), "erin-web")
        .unwrap();
    env.sim
        .delete(ROLE_BINDINGS, Some("batch"), "erin-batch")
        .unwrap();
    let (sse, view) = &mut erin;
    let error = sse.until_error(view).await;
    assert_eq!(error.data["object"]["code"], 403);
    env.stop().await;
}

/// A watch's lines as they come.
struct Lines {
    body: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: Vec<u8>,
}

impl Lines {
    async fn open(env: &TestEnv, path: &str) -> Lines {
        let resp = tokio::time::timeout(WAIT, env.http.get(format!("{}{path}", env.base)).send())
            .await
            .expect("an answer in time")
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        Lines {
            body: Box::pin(resp.bytes_stream()),
            buf: Vec::new(),
        }
    }

    /// The next line as JSON; `None` once the watch ended.
    async fn next(&mut self) -> Option<serde_json::Value> {
        use futures::StreamExt;
        tokio::time::timeout(WAIT, async {
            loop {
                if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = self.buf.drain(..=end).collect();
                    return Some(serde_json::from_slice(&line).expect("a JSON line"));
                }
                match self.body.next().await {
                    Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                    _ => return None,
                }
            }
        })
        .await
        .expect("a line or the end in time")
    }
}

/// Reads `watch` until an event at `rv` or later; checks on the way that
/// resourceVersions only grow and that no BOOKMARK goes back behind an
/// event already sent (`last`: the newest seen so far).
async fn watch_until(watch: &mut Lines, last: &mut u64, rv: u64) {
    while *last < rv {
        let line = watch.next().await.expect("the watch goes on");
        let at = crate::support::rv_of(&line["object"]);
        if line["type"] == "BOOKMARK" {
            assert!(at >= *last, "a bookmark at {at} after an event at {last}");
        } else {
            assert!(at > *last, "{} at {at} after {last}", line["type"]);
        }
        *last = at;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_watches_are_batched_with_their_bookmarks_and_timeouts() {
    let env = batching_env(test_config(&["pods"])).await;
    let from = env.sim.resource_version();
    let paths = [
        format!("/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={from}"),
        format!("/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={from}"),
        format!(
            "/api/v1/namespaces/batch/pods?watch=1&allowWatchBookmarks=true&resourceVersion={from}"
        ),
    ];
    let mut watches = Vec::new();
    for path in &paths {
        watches.push((Lines::open(&env, path).await, from));
    }
    let mut all_batched = false;
    for round in 0..200 {
        let rv = touch_tracked(&env.sim, &format!("w{round}"));
        for (watch, last) in watches.iter_mut() {
            watch_until(watch, last, rv).await;
        }
        if batched(&env).await == watches.len() {
            all_batched = true;
            break;
        }
    }
    assert!(
        all_batched,
        "caught-up watches are written by their hubs' writers"
    );
    crate::sse::churn_across_namespaces(&env.sim, 200).await;
    let rv = touch_tracked(&env.sim, "last");
    for (watch, last) in watches.iter_mut() {
        watch_until(watch, last, rv).await;
    }
    // Ticks every 100 ms: each watch's bookmarks, written by its writer,
    // say the position that watch holds, never one behind it.
    for (watch, last) in watches.iter_mut() {
        for _ in 0..3 {
            let line = watch.next().await.expect("the watch goes on");
            assert_eq!(line["type"], "BOOKMARK");
            assert!(crate::support::rv_of(&line["object"]) >= *last);
        }
    }
    assert_eq!(batched(&env).await, watches.len());

    // timeoutSeconds: a batched watch still ends then, cleanly.
    let mut short = Lines::open(
        &env,
        &format!("/api/v1/pods?watch=1&resourceVersion={rv}&timeoutSeconds=2"),
    )
    .await;
    let rv = touch_tracked(&env.sim, "short");
    let mut last = 0;
    watch_until(&mut short, &mut last, rv).await;
    assert!(
        short.next().await.is_none(),
        "the watch ends at its timeout"
    );
    assert_eq!(unparked(&env, Some("Deadline")).await, 1);
    env.stop().await;
}
