//! The SSE transport, end to end.

use std::time::Duration;

use crate::support::{
    ClientView, SseClient, WAIT, sim_config, spawn, test_config, validate_status,
};
use futures::future::join_all;
use kubefan_sim::{ChurnConfig, ResourceDef, Sim, pod, seed_cluster};
use serde_json::{Value, json};

pub(crate) fn seeded(pods: usize) -> Sim {
    let sim = Sim::new(sim_config());
    seed_cluster(
        &sim,
        &ChurnConfig {
            pods,
            nodes: 3,
            seed: Some(7),
            ..ChurnConfig::default()
        },
    );
    sim
}

pub(crate) fn pods_of(sim: &Sim) -> (Vec<Value>, u64) {
    sim.list("pods")
}

/// One batch of 50 changes of ~16 KB to the pod `web/big`, for the slow
/// reader tests; returns the resourceVersion of the last.
pub(crate) fn big_changes(sim: &Sim, batch: usize) -> u64 {
    let blob = "x".repeat(16 << 10);
    let mut last = 0;
    for i in 0..50 {
        let o = sim
            .merge_patch(
                "pods",
                Some("web"),
                "big",
                &json!({"metadata": {"annotations": {"blob": format!("{batch}-{i}-{blob}")}}}),
            )
            .unwrap();
        last = crate::support::rv_of(&o);
    }
    last
}

/// Opens a stream and reads its snapshot.
pub(crate) async fn subscribed(
    env: &crate::support::TestEnv,
    path: &str,
) -> (SseClient, ClientView) {
    let mut sse = env.sse(path).await;
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        let ev = sse.next().await.expect("snapshot");
        view.apply(&ev);
    }
    (sse, view)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_subscribers_cost_one_upstream_watch() {
    let env = spawn(seeded(100), test_config(&["pods"])).await;
    env.synced("pods").await;
    let mut clients = join_all((0..50).map(|_| subscribed(&env, "/stream/pods"))).await;
    env.sim
        .create("pods", pod("late").ns("web").node("node-1").build())
        .unwrap();
    let (objects, rv) = pods_of(&env.sim);
    let objects = &objects;
    join_all(clients.iter_mut().map(|(sse, view)| async move {
        view.follow(sse, rv).await;
        view.assert_matches(objects);
        assert!(view.changes.iter().any(|(t, _)| t == "ADDED"));
    }))
    .await;
    // The state came through the watch itself (a streaming list): no
    // LIST at all.
    let stats = env.sim.stats().resource("pods");
    assert_eq!(stats.list_requests, 0, "{stats:?}");
    assert_eq!(stats.watch_requests, 1, "{stats:?}");
    assert_eq!(stats.open_watches, 1, "{stats:?}");
    let metrics = env.metrics().await;
    assert!(
        metrics.contains("kubefan_subscribers{resource=\"pods\",transport=\"Sse\"} 50"),
        "{metrics}"
    );
    assert!(
        metrics.contains("kubefan_upstream_lists_total{resource=\"pods\",kind=\"streaming\"} 1"),
        "{metrics}"
    );
    drop(clients);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_with_joining_subscribers_converges_to_upstream_state() {
    let env = spawn(seeded(150), test_config(&["pods"])).await;
    env.synced("pods").await;
    let sim = env.sim.clone();
    let churn = tokio::spawn(async move {
        for i in 0..1500u32 {
            let name = format!("churn-{}", i % 120);
            let existing = sim.get("pods", Some("batch"), &name);
            let result = match (existing, i % 5) {
                (None, _) => sim.create("pods", pod(&name).ns("batch").label("app", "worker").build()).map(|_| ()),
                (Some(_), 0) => sim.delete("pods", Some("batch"), &name).map(|_| ()),
                (Some(_), n) => sim
                    .merge_patch("pods", Some("batch"), &name, &json!({"status": {"phase": format!("P{n}")}, "metadata": {"labels": {"round": i.to_string()}}}))
                    .map(|_| ()),
            };
            result.expect("sim write");
            if i % 10 == 0 {
                tokio::task::yield_now().await;
            }
        }
    });
    let mut subscribers = Vec::new();
    for _ in 0..8 {
        subscribers.push(subscribed(&env, "/stream/pods").await);
        tokio::task::yield_now().await;
    }
    tokio::time::timeout(WAIT, churn).await.unwrap().unwrap();
    let (objects, rv) = pods_of(&env.sim);
    let objects = &objects;
    join_all(subscribers.iter_mut().map(|(sse, view)| async move {
        view.follow(sse, rv).await;
        view.assert_matches(objects);
        assert!(
            view.resets.is_empty(),
            "no reset expected: {:?}",
            view.resets
        );
    }))
    .await;
    // Late joiners agree too.
    let (mut sse, mut view) = subscribed(&env, "/stream/pods").await;
    view.follow(&mut sse, rv).await;
    view.assert_matches(objects);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_with_last_event_id_inside_the_log_gets_exactly_the_missed_events() {
    let mut cfg = test_config(&["pods"]);
    cfg.upstream.log_limits.max_events = 20;
    let env = spawn(seeded(10), cfg).await;
    env.synced("pods").await;
    let (sse, mut view) = subscribed(&env, "/stream/pods").await;
    let id = view.last_id.clone().expect("snapshot end has an id");
    drop(sse);

    let mut missed = Vec::new();
    for i in 0..5 {
        let o = env
            .sim
            .create("pods", pod(&format!("m{i}")).ns("web").build())
            .unwrap();
        missed.push(crate::support::rv_of(&o));
    }
    let (objects, rv) = pods_of(&env.sim);
    env.caught_up("pods", rv).await;
    let mut sse = env.sse_with("/stream/pods", Some(&id)).await;
    view.resume();
    view.follow(&mut sse, rv).await;
    assert_eq!(
        view.snapshots, 1,
        "a resume inside the log sends no snapshot"
    );
    assert!(view.resets.is_empty());
    let got: Vec<u64> = view.changes.iter().map(|(_, rv)| *rv).collect();
    assert_eq!(got, missed, "exactly the missed events");
    view.assert_matches(&objects);

    // The same through ?resourceVersion=.
    let mut sse = env.sse(&format!("/stream/pods?resourceVersion={id}")).await;
    let first = sse.next().await.unwrap();
    assert_eq!(first.event, "ADDED");
    assert_eq!(first.id.as_deref(), Some(missed[0].to_string().as_str()));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_outside_the_log_gets_a_reset_then_a_snapshot() {
    let mut cfg = test_config(&["pods"]);
    cfg.upstream.log_limits.max_events = 20;
    let env = spawn(seeded(10), cfg).await;
    env.synced("pods").await;
    let (sse, mut view) = subscribed(&env, "/stream/pods").await;
    let id = view.last_id.clone().unwrap();
    drop(sse);
    for i in 0..40 {
        env.sim
            .create("pods", pod(&format!("m{i}")).ns("web").build())
            .unwrap();
    }
    let (objects, rv) = pods_of(&env.sim);
    env.caught_up("pods", rv).await;
    let mut sse = env.sse_with("/stream/pods", Some(&id)).await;
    let first = sse.next().await.unwrap();
    assert_eq!(first.event, "RESET");
    assert_eq!(
        first.id.as_deref(),
        Some(""),
        "a reset clears the client's id"
    );
    assert_eq!(first.data["object"]["reason"], "Expired");
    view.resume();
    view.apply(&first);
    view.follow(&mut sse, rv).await;
    assert_eq!(view.snapshots, 2);
    view.assert_matches(&objects);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_watch_end_resumes_without_relist_or_reset() {
    let env = spawn(seeded(20), test_config(&["pods"])).await;
    env.synced("pods").await;
    let (mut sse, mut view) = subscribed(&env, "/stream/pods").await;
    let before = env.sim.stats().resource("pods");
    env.sim.end_watches();
    for i in 0..10 {
        env.sim
            .create("pods", pod(&format!("after-{i}")).ns("web").build())
            .unwrap();
    }
    let (objects, rv) = pods_of(&env.sim);
    view.follow(&mut sse, rv).await;
    view.assert_matches(&objects);
    assert!(view.resets.is_empty());
    let after = env.sim.stats().resource("pods");
    assert_eq!(after.list_requests, before.list_requests, "no relist");
    assert!(
        after.watch_requests > before.watch_requests,
        "the watch was resumed"
    );
    let metrics = env.metrics().await;
    assert!(
        metrics.contains("kubefan_upstream_lists_total{resource=\"pods\",kind=\"streaming\"} 1"),
        "no second streaming list: {metrics}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_watch_relists_and_subscribers_converge_through_synthetic_events() {
    let env = spawn(seeded(30), test_config(&["pods"])).await;
    env.synced("pods").await;
    let (mut sse, mut view) = subscribed(&env, "/stream/pods").await;
    // Changes the gateway cannot see, then history compaction: its next
    // watch from its old resourceVersion gets 410 Expired.
    env.sim.stall_watches(true);
    let (existing, _) = pods_of(&env.sim);
    let victim = &existing[0]["metadata"];
    env.sim
        .delete(
            "pods",
            victim["namespace"].as_str(),
            victim["name"].as_str().unwrap(),
        )
        .unwrap();
    let changed = &existing[1]["metadata"];
    env.sim
        .merge_patch(
            "pods",
            changed["namespace"].as_str(),
            changed["name"].as_str().unwrap(),
            &json!({"status": {"phase": "Failed"}}),
        )
        .unwrap();
    env.sim
        .create("pods", pod("born-in-the-dark").ns("web").build())
        .unwrap();
    env.sim.compact();
    env.sim.end_watches();
    env.sim.stall_watches(false);
    let (objects, rv) = pods_of(&env.sim);
    view.follow(&mut sse, rv).await;
    view.assert_matches(&objects);
    assert!(
        view.resets.is_empty(),
        "a relist is not a reset: {:?}",
        view.resets
    );
    let kinds: Vec<&str> = view.changes.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        kinds,
        ["MODIFIED", "ADDED", "DELETED"],
        "synthetic events in resourceVersion order"
    );
    // The relist is a streaming list too: no LIST request but the one-item
    // one that gave its watch beside a resourceVersion.
    assert_eq!(env.sim.stats().resource("pods").list_requests, 1);
    assert_eq!(env.sim.stats().lists("pods").probes, 1);
    let metrics = env.metrics().await;
    assert!(
        metrics.contains("kubefan_upstream_lists_total{resource=\"pods\",kind=\"streaming\"} 2"),
        "one relist: {metrics}"
    );
    assert!(
        metrics.contains("kubefan_upstream_relists_total{resource=\"pods\",reason=\"expired\"} 1"),
        "{metrics}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_subscriber_is_lapped_and_reset_while_others_get_everything() {
    let mut cfg = test_config(&["pods"]);
    let log_bytes = 2 << 20;
    cfg.upstream.log_limits.max_bytes = log_bytes;
    let env = spawn(seeded(5), cfg).await;
    env.synced("pods").await;
    let (mut slow, mut slow_view) = subscribed(&env, "/stream/pods").await;
    let (mut fast, mut fast_view) = subscribed(&env, "/stream/pods").await;
    env.sim
        .create("pods", pod("big").ns("web").build())
        .unwrap();
    // 1,200 changes of ~16 KB (~19 MB): more than the slow reader's socket
    // buffers and the 2 MB log hold. The fast reader keeps up batch by
    // batch; the slow one reads nothing meanwhile.
    for batch in 0..24 {
        let last = big_changes(&env.sim, batch);
        fast_view.follow(&mut fast, last).await;
    }
    let (objects, rv) = pods_of(&env.sim);
    assert!(
        fast_view.resets.is_empty(),
        "the fast reader was never reset"
    );
    assert_eq!(
        fast_view.changes.len(),
        1 + 24 * 50,
        "the fast reader got every change"
    );
    fast_view.assert_matches(&objects);
    let stats = env.app.informers().hub("pods").await.unwrap().stats();
    assert!(
        stats.log_bytes <= log_bytes,
        "the log stays bounded: {stats:?}"
    );

    slow_view.follow(&mut slow, rv).await;
    assert_eq!(
        slow_view.resets,
        ["Lapped"],
        "the slow reader was reset, not skipped"
    );
    slow_view.assert_matches(&objects);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_status_body_and_harms_no_one() {
    let env = spawn(seeded(5), test_config(&["pods"])).await;
    env.synced("pods").await;
    let (mut sse, mut view) = subscribed(&env, "/stream/pods").await;
    let cases = [
        ("/stream/podz", 404, "podz"),
        ("/stream/secrets", 403, "allow-secrets"),
        ("/stream/pods?namespace=Not_Valid", 400, "Not_Valid"),
        ("/stream/pods?resourceVersion=ten", 400, "ten"),
        ("/stream/pods?nmespace=web", 400, "nmespace"),
        ("/stream/pods?%zz=1", 400, "query"),
        ("/nothing/here", 404, "/nothing/here"),
    ];
    for (path, code, mentions) in cases {
        let (status, body) = env.get_json(path).await;
        assert_eq!(status, code, "{path}: {body}");
        validate_status(&body);
        assert_eq!(body["code"], code);
        assert!(
            body["message"].as_str().unwrap().contains(mentions),
            "{path}: {body}"
        );
    }
    let resp = env
        .http
        .get(format!("{}/stream/pods", env.base))
        .header("Last-Event-ID", "yesterday")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    validate_status(&resp.json().await.unwrap());
    // The subscriber already streaming is unaffected.
    env.sim
        .create("pods", pod("still-here").ns("web").build())
        .unwrap();
    let (objects, rv) = pods_of(&env.sim);
    view.follow(&mut sse, rv).await;
    view.assert_matches(&objects);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_boot_resources_to_sync() {
    let sim = seeded(5);
    // Every list fails (a streaming list and the paged LIST it falls back
    // to alike) until the upstream recovers.
    sim.fail_next(usize::MAX);
    let env = spawn(sim, test_config(&["pods"])).await;
    let (status, body) = env.get_json("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["resources"][0]["ready"], false);
    assert!(body["resources"][0]["reason"].is_string());
    env.sim.fail_next(0);
    env.synced("pods").await;
    let (status, body) = env.get_json("/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["resources"][0]["resource"], "pods");
    let (status, _) = env.get_json("/healthz").await;
    assert_eq!(status, 200);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_an_unknown_boot_resource() {
    let env = spawn(seeded(1), test_config(&["pods", "gizmos"])).await;
    env.synced("pods").await;
    let (status, body) = env.get_json("/readyz").await;
    assert_eq!(status, 503, "{body}");
    let gizmos = body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "gizmos")
        .unwrap();
    assert!(
        gizmos["reason"]
            .as_str()
            .unwrap()
            .contains("unknown resource"),
        "{body}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_headers_and_namespace_filter() {
    let env = spawn(seeded(60), test_config(&[])).await;
    // `po` is a short name; the informer starts lazily on first use.
    let (mut sse, mut view) = subscribed(&env, "/stream/po?namespace=web,batch").await;
    assert_eq!(sse.headers["content-type"], "text/event-stream");
    assert_eq!(sse.headers["cache-control"], "no-cache");
    assert_eq!(sse.headers["x-accel-buffering"], "no");
    assert!(
        sse.headers
            .get("content-encoding")
            .is_none_or(|v| v == "identity")
    );
    // --retry-ms (2000) plus a random share of up to as much again.
    assert!(
        sse.retry.is_some_and(|r| (2000..=4000).contains(&r)),
        "{:?}",
        sse.retry
    );
    env.sim
        .create("pods", pod("elsewhere").ns("default").build())
        .unwrap();
    env.sim
        .create("pods", pod("here").ns("web").build())
        .unwrap();
    let (all, rv) = pods_of(&env.sim);
    let wanted: Vec<Value> = all
        .into_iter()
        .filter(|o| matches!(o["metadata"]["namespace"].as_str(), Some("web" | "batch")))
        .collect();
    view.follow(&mut sse, rv).await;
    view.assert_matches(&wanted);
    assert_eq!(
        view.changes.len(),
        1,
        "only the change in a selected namespace"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_resources_crds_and_redacted_secrets() {
    let sim = seeded(0);
    sim.register(
        ResourceDef::new("example.com", "v1", "widgets", "Widget", true).with_short_names(&["wg"]),
    );
    sim.create(
        "widgets.example.com",
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "default"}, "spec": {"size": 3}}),
    )
    .unwrap();
    sim.create(
        "deployments.apps",
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d1", "namespace": "default"}, "spec": {"replicas": 2}}),
    )
    .unwrap();
    sim.create(
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s1", "namespace": "default"}, "data": {"password": "aHVudGVyMg=="}}),
    )
    .unwrap();
    let mut cfg = test_config(&[]);
    cfg.upstream.allow_secrets = true;
    let env = spawn(sim, cfg).await;
    for (path, name) in [
        ("/stream/wg", "w1"),
        ("/stream/deployments.apps", "d1"),
        ("/stream/deploy", "d1"),
    ] {
        let (_sse, view) = subscribed(&env, path).await;
        assert_eq!(
            view.objects.keys().collect::<Vec<_>>(),
            [&format!("default/{name}")],
            "{path}"
        );
    }
    let (_sse, view) = subscribed(&env, "/stream/secrets").await;
    assert_eq!(
        view.objects["default/s1"]["data"]["password"], "",
        "secret values are redacted"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_tells_open_streams_to_reconnect() {
    let env = spawn(seeded(3), test_config(&["pods"])).await;
    env.synced("pods").await;
    let (mut sse, _view) = subscribed(&env, "/stream/pods").await;
    let crate::support::TestEnv { app, server, .. } = env;
    let stopping = tokio::spawn(app.stop());
    let ev = sse.next().await.expect("a final event");
    assert_eq!(ev.event, "ERROR");
    assert_eq!(ev.data["object"]["code"], 503);
    assert!(sse.next().await.is_none(), "the stream ends");
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .unwrap()
        .unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriber_to_an_unsynced_resource_waits_then_gets_503() {
    let sim = seeded(3);
    // Every list fails: the informer never syncs.
    sim.fail_next(usize::MAX);
    let mut cfg = test_config(&[]);
    cfg.stream.sync_timeout = Duration::from_millis(300);
    let env = spawn(sim, cfg).await;
    let resp = env
        .http
        .get(format!("{}/stream/pods", env.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert!(resp.headers().contains_key("retry-after"));
    let body: Value = resp.json().await.unwrap();
    validate_status(&body);
    assert!(
        body["message"].as_str().unwrap().contains("not synced"),
        "{body}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_streams_get_keepalives_and_progress_bookmarks() {
    let mut cfg = test_config(&["pods"]);
    cfg.stream.keepalive = Duration::from_millis(200);
    let env = spawn(seeded(10), cfg).await;
    env.synced("pods").await;
    let (mut sse, mut view) = subscribed(&env, "/stream/pods?namespace=web").await;
    // A change in another namespace moves the stream's position without
    // anything to send: the next keep-alive is a BOOKMARK carrying it.
    let other = env
        .sim
        .create("pods", pod("elsewhere").ns("default").build())
        .unwrap();
    let rv = crate::support::rv_of(&other);
    let ev = sse.next().await.unwrap();
    assert_eq!(ev.event, "BOOKMARK");
    assert_eq!(ev.id, Some(rv.to_string()));
    view.apply(&ev);
    // Then, with nothing new, plain keep-alive comments.
    sse.next_comment().await;
    let mut idle = env.sse("/stream/pods?namespace=nobody-here").await;
    let first = idle.next().await.unwrap();
    assert_eq!(
        first.event, "BOOKMARK",
        "an empty snapshot is just its end marker"
    );
    idle.next_comment().await;
    idle.next_comment().await;
    env.stop().await;
}

/// Sends `request` on a fresh connection and reads until `until` appears
/// in what comes back (or the server closes). Returns everything read.
async fn raw_exchange(env: &crate::support::TestEnv, request: &str, until: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = env.app.local_addr();
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(WAIT, async {
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains(until) {
            let n = conn.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .expect("answer in time");
    String::from_utf8(got).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_answer_http_1_1_in_chunks_and_http_1_0_until_close() {
    let mut cfg = test_config(&["pods"]);
    cfg.allowed_origins = vec!["https://dash.example".into()];
    let env = spawn(seeded(3), cfg).await;
    env.synced("pods").await;
    let end = "k8s.io/initial-events-end";

    // HTTP/1.1: one head (the stream writes it, not actix as well), with
    // the gate's CORS headers, chunked, not kept alive afterwards.
    let got = raw_exchange(
        &env,
        "GET /stream/pods HTTP/1.1\r\nHost: localhost\r\nOrigin: https://dash.example\r\n\r\n",
        end,
    )
    .await;
    let (head, body) = got.split_once("\r\n\r\n").expect("a head");
    let head = head.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    assert_eq!(got.matches("HTTP/1.1").count(), 1, "one response: {got}");
    for line in [
        "content-type: text/event-stream",
        "transfer-encoding: chunked",
        "connection: close",
        "access-control-allow-origin: https://dash.example",
    ] {
        assert!(head.contains(line), "{line:?} missing from {head}");
    }
    // The first chunk is the retry preamble, framed with its size.
    let (size, rest) = body.split_once("\r\n").expect("a chunk");
    let size = usize::from_str_radix(size, 16).expect("hex chunk size");
    assert!(rest[..size].starts_with("retry: "), "{rest}");
    assert_eq!(&rest[size..size + 2], "\r\n");

    // HTTP/1.0 has no chunks: the body runs until the connection closes.
    let got = raw_exchange(&env, "GET /stream/pods HTTP/1.0\r\n\r\n", end).await;
    let (head, body) = got.split_once("\r\n\r\n").expect("a head");
    let head = head.to_ascii_lowercase();
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(body.starts_with("retry: "), "{body}");
    assert!(!head.contains("access-control-allow-origin"), "{head}");
    env.stop().await;
}

/// A loopback listener serving without authentication answers loopback
/// host names only, and those `--allowed-hosts` lists: a page whose name
/// an attacker points at 127.0.0.1 (DNS rebinding) is same-origin with
/// the gateway to the browser, so its `Host` is all that tells it apart.
/// A WebSocket upgrade from the opaque origin `null` is cross-origin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_loopback_gateway_answers_loopback_hosts_only() {
    let mut cfg = test_config(&["pods"]);
    cfg.allowed_hosts = vec!["dash.internal".into()];
    let env = spawn(seeded(1), cfg).await;
    env.synced("pods").await;
    let end = "k8s.io/initial-events-end";
    let status_of = |got: &str| got.split(' ').nth(1).unwrap_or("").to_string();
    for host in ["localhost:8080", "127.0.0.1", "[::1]:1", "dash.internal"] {
        let got = raw_exchange(
            &env,
            &format!("GET /stream/pods HTTP/1.1\r\nHost: {host}\r\n\r\n"),
            end,
        )
        .await;
        assert_eq!(status_of(&got), "200", "{host}: {got}");
    }
    for host in ["rebound.evil.example:8080", "localhost.evil.example"] {
        let got = raw_exchange(
            &env,
            &format!("GET /api/v1/pods HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
            "\"code\":403}",
        )
        .await;
        assert_eq!(status_of(&got), "403", "{host}: {got}");
        let body: Value = serde_json::from_str(got.split_once("\r\n\r\n").unwrap().1).unwrap();
        validate_status(&body);
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("--allowed-hosts"),
            "{body}"
        );
    }
    let got = raw_exchange(
        &env,
        "GET /ws HTTP/1.1\r\nHost: localhost\r\nOrigin: null\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\n\r\n",
        "\"code\":403}",
    )
    .await;
    assert_eq!(status_of(&got), "403", "Origin: null: {got}");
    env.stop().await;
}

/// What actix-http does not time on an HTTP/1.1 connection kubefan does:
/// a second request whose head never completes closes its connection
/// after the request timeout, and a response the client does not read
/// after the write timeout, giving its permit back (one permit here: the
/// next request is served, not refused with 503, once it has).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http1_connection_is_not_held_by_a_trickled_request_or_an_unread_response() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut cfg = test_config(&["pods"]);
    // The request timeout is at least the sync timeout and 5 s.
    cfg.stream.sync_timeout = Duration::from_millis(200);
    cfg.limits.request_timeout = Duration::from_millis(200);
    cfg.stream.write_timeout = Duration::from_millis(500);
    cfg.limits.max_connections = 1;
    // A list of several MB: more than the socket buffers hold.
    let env = spawn(seeded(4000), cfg).await;
    env.synced("pods").await;
    let addr = env.app.local_addr();

    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(WAIT, conn.read(&mut buf))
        .await
        .expect("the first answer")
        .unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    // A second request, one byte of it.
    conn.write_all(b"G").await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the trickled request's connection is closed"
    );

    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut unread = socket.connect(addr).await.unwrap();
    unread
        .write_all(b"GET /api/v1/pods HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let served = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let (status, _) = env.get_json("/api/v1/namespaces/web/pods?limit=1").await;
            if status == 200 {
                break;
            }
            assert_eq!(status, 503, "refused only for the permit");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        served.is_ok(),
        "the unread response's permit is given back after the write timeout"
    );
    drop(unread);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_hanging_up_ends_its_subscription_without_waiting_for_a_write() {
    // Keep-alives far beyond the test's wait: nothing is written to the
    // stream after its snapshot, so only watching the socket can notice.
    let mut cfg = test_config(&["pods"]);
    cfg.stream.keepalive = Duration::from_secs(600);
    let env = spawn(seeded(3), cfg).await;
    env.synced("pods").await;
    let hub = env.app.informers().hub("pods").await.unwrap();
    let mut subscribers = hub.subscribers_rx();
    let (sse, _view) = subscribed(&env, "/stream/pods").await;
    assert!(*subscribers.borrow_and_update() >= 1);
    drop(sse);
    tokio::time::timeout(WAIT, subscribers.wait_for(|n| *n == 0))
        .await
        .expect("the subscription ends when its client hangs up")
        .unwrap();
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_nothing_is_closed_after_the_write_timeout() {
    use tokio::io::AsyncWriteExt;
    let mut cfg = test_config(&["pods"]);
    cfg.stream.write_timeout = Duration::from_millis(300);
    cfg.stream.keepalive = Duration::from_secs(600);
    // A snapshot of several MB: more than the client's receive buffer and
    // the server's send buffer together, so the writer blocks on it, over
    // SSE and over a WebSocket alike.
    let env = spawn(seeded(4000), cfg).await;
    env.synced("pods").await;
    let hub = env.app.informers().hub("pods").await.unwrap();
    let mut subscribers = hub.subscribers_rx();
    let requests = [
        "GET /stream/pods HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "GET /stream/pods HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\n\r\n",
    ];
    for (closed, request) in requests.into_iter().enumerate() {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut conn = socket.connect(env.app.local_addr()).await.unwrap();
        conn.write_all(request.as_bytes()).await.unwrap();
        tokio::time::timeout(WAIT, subscribers.wait_for(|n| *n >= 1))
            .await
            .expect("subscribed")
            .unwrap();
        // The client never reads; the stream gives up on it.
        tokio::time::timeout(WAIT, subscribers.wait_for(|n| *n == 0))
            .await
            .expect("the stream closes when its client takes nothing")
            .unwrap();
        let metrics = env.metrics().await;
        let counted = format!(
            r#"kubefan_limits_hit_total{{kind="write_timeout"}} {}"#,
            closed + 1
        );
        assert!(metrics.contains(&counted), "{request}: {metrics}");
        drop(conn);
    }
    env.stop().await;
}

/// Changes the pod `batch/tracked`, which every view of the batching
/// tests shows; returns its resourceVersion.
pub(crate) fn touch_tracked(sim: &Sim, round: &str) -> u64 {
    let o = sim
        .merge_patch(
            "pods",
            Some("batch"),
            "tracked",
            &json!({"metadata": {"labels": {"round": round}}}),
        )
        .unwrap();
    crate::support::rv_of(&o)
}

/// `n` creations, changes and deletions across two namespaces.
pub(crate) async fn churn_across_namespaces(sim: &Sim, n: u32) {
    for i in 0..n {
        let name = format!("c-{}", i % 40);
        let ns = if i % 3 == 0 { "batch" } else { "web" };
        let result = match (sim.get("pods", Some(ns), &name), i % 4) {
            (None, _) => sim.create("pods", pod(&name).ns(ns).build()).map(|_| ()),
            (Some(_), 0) => sim.delete("pods", Some(ns), &name).map(|_| ()),
            (Some(_), k) => sim
                .merge_patch(
                    "pods",
                    Some(ns),
                    &name,
                    &json!({"status": {"phase": format!("P{k}-{i}")}}),
                )
                .map(|_| ()),
        };
        result.expect("sim write");
        if i % 25 == 0 {
            tokio::task::yield_now().await;
        }
    }
}

/// The streams the batching tests open: every pod (four), and one
/// namespace's (two): two views.
pub(crate) const BATCH_PATHS: [&str; 6] = [
    "/stream/pods",
    "/stream/pods",
    "/stream/pods",
    "/stream/pods",
    "/stream/pods?namespace=batch",
    "/stream/pods?namespace=batch",
];

/// A gateway for the batching tests: keep-alive ticks every 100 ms, each
/// of which sends every batched stream back to a task of its own and then
/// back to its hub's writer, in the middle of the churn; and the pod
/// `batch/tracked`.
pub(crate) async fn batching_env(mut cfg: kubefan::config::Config) -> crate::support::TestEnv {
    cfg.stream.keepalive = Duration::from_millis(100);
    tracked_env(cfg).await
}

/// A gateway as `cfg` says, with the pod `batch/tracked`.
async fn tracked_env(cfg: kubefan::config::Config) -> crate::support::TestEnv {
    let env = spawn(seeded(30), cfg).await;
    env.synced("pods").await;
    env.sim
        .create("pods", pod("tracked").ns("batch").build())
        .unwrap();
    env
}

/// Churn across namespaces, then a last change: its resourceVersion, and
/// the upstream's pods then, all of them and those of namespace `batch`
/// (the truths of the batching tests' two views).
pub(crate) async fn churned_batch_truth(sim: &Sim) -> (u64, Vec<Value>, Vec<Value>) {
    churn_across_namespaces(sim, 400).await;
    let rv = touch_tracked(sim, "last");
    let (objects, _) = pods_of(sim);
    let in_batch = objects
        .iter()
        .filter(|o| o["metadata"]["namespace"] == "batch")
        .cloned()
        .collect();
    (rv, objects, in_batch)
}

/// Streams opened on [`BATCH_PATHS`], brought to their hubs' writers
/// through churn ([`batched_through_churn`]).
pub(crate) async fn batched_sse(
    env: &crate::support::TestEnv,
) -> Vec<(&'static str, (SseClient, ClientView))> {
    let mut subs = Vec::new();
    for path in BATCH_PATHS {
        subs.push((path, subscribed(env, path).await));
    }
    batched_through_churn(env, &mut subs, async |sse, view, rv| {
        view.follow(sse, rv).await
    })
    .await;
    subs
}

/// The streams `subs` (opened on [`BATCH_PATHS`]) come to be written by
/// their hubs' writers (a change at a time, until every one is: a stream
/// is batched once it has written what it had and is caught up), then
/// follow churn to the upstream's state, each change once, with no reset.
pub(crate) async fn batched_through_churn<C>(
    env: &crate::support::TestEnv,
    subs: &mut [(&str, (C, ClientView))],
    mut follow: impl AsyncFnMut(&mut C, &mut ClientView, u64),
) {
    let mut all_batched = false;
    for round in 0..200 {
        let rv = touch_tracked(&env.sim, &round.to_string());
        for (_, (client, view)) in subs.iter_mut() {
            follow(client, view, rv).await;
        }
        let metrics = env.metrics().await;
        let batched = metrics
            .lines()
            .find_map(|l| l.strip_prefix("kubefan_streams_batched "))
            .and_then(|v| v.parse::<usize>().ok());
        if batched == Some(subs.len()) {
            all_batched = true;
            break;
        }
    }
    assert!(
        all_batched,
        "caught-up streams are written by their hubs' writers"
    );
    let (rv, objects, in_batch) = churned_batch_truth(&env.sim).await;
    for (path, (client, view)) in subs.iter_mut() {
        tokio::time::timeout(WAIT, follow(client, view, rv))
            .await
            .unwrap_or_else(|_| panic!("{path} reached {rv}"));
        assert!(
            view.resets.is_empty(),
            "{path}: no reset: {:?}",
            view.resets
        );
        if path.contains("namespace") {
            view.assert_matches(&in_batch);
        } else {
            view.assert_matches(&objects);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_byte_a_stream_reads_is_counted_once_whichever_writer_sent_it() {
    // The default keep-alive (15 s): no tick in flight when the bytes are
    // compared.
    let env = tracked_env(test_config(&["pods"])).await;
    // The snapshots and first changes through each stream's task, the
    // rest through its hub's writer.
    let subs = batched_sse(&env).await;
    let received: u64 = subs.iter().map(|(_, (sse, _))| sse.received).sum();
    let counted = env
        .metrics()
        .await
        .lines()
        .find_map(|l| {
            l.strip_prefix(r#"kubefan_bytes_sent_total{resource="pods",transport="Sse"} "#)
        })
        .and_then(|v| v.parse::<u64>().ok());
    assert_eq!(
        counted,
        Some(received),
        "retry hints, snapshots and changes"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caught_up_streams_are_written_together_and_get_every_change_once() {
    let env = batching_env(test_config(&["pods"])).await;
    batched_sse(&env).await;
    env.stop().await;
}
