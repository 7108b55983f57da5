//! The Kubernetes-compatible face, end to end: kube-rs's own watcher and
//! reflector as the compatibility oracle, lists, selectors, errors, and a
//! kubefan whose upstream is another kubefan.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};

use serde_json::{Value, json};

use crate::sse::{pods_of, seeded, subscribed};
use crate::support::{TestEnv, WAIT, spawn, test_config, validate, validate_status};
use kubefan_sim::pod;

/// name → resourceVersion of the simulated server's pods.
fn upstream_state(env: &TestEnv) -> BTreeMap<String, String> {
    pods_of(&env.sim)
        .0
        .iter()
        .map(|o| {
            (
                format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                ),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

fn store_state(store: &reflector::Store<Pod>) -> BTreeMap<String, String> {
    store
        .state()
        .iter()
        .map(|p| {
            (
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap(),
                    p.metadata.name.as_deref().unwrap()
                ),
                p.metadata.resource_version.clone().unwrap(),
            )
        })
        .collect()
}

/// Drives the reflector stream until its store equals upstream.
async fn converge(
    stream: &mut (impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Unpin),
    store: &reflector::Store<Pod>,
    env: &TestEnv,
) {
    let want = upstream_state(env);
    tokio::time::timeout(WAIT, async {
        while store_state(store) != want {
            // Errors (410 Expired) are part of the path: the watcher relists.
            let _ = stream.next().await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        let got = store_state(store);
        let diff: Vec<_> = want
            .iter()
            .filter(|(k, v)| got.get(*k) != Some(v))
            .map(|(k, v)| (k, v, got.get(k)))
            .take(5)
            .collect();
        panic!(
            "reflector did not converge: {} vs {} objects; differing (key, want, got): {diff:?}",
            got.len(),
            want.len()
        )
    });
}

fn churn(env: &TestEnv, round: u32, n: u32) {
    for i in 0..n {
        let name = format!("k-{}", (round * n + i) % 40);
        match env.sim.get("pods", Some("web"), &name) {
            None => {
                env.sim
                    .create("pods", pod(&name).ns("web").label("app", "churn").build())
                    .unwrap();
            }
            Some(_) if i % 4 == 0 => {
                env.sim.delete("pods", Some("web"), &name).unwrap();
            }
            Some(_) => {
                env.sim
                    .merge_patch(
                        "pods",
                        Some("web"),
                        &name,
                        &json!({"metadata": {"labels": {"round": round.to_string()}}}),
                    )
                    .unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_reflector_converges_through_churn_watch_restarts_and_410() {
    let mut cfg = test_config(&["pods"]);
    cfg.upstream.log_limits.max_bytes = 1 << 20;
    let env = spawn(seeded(50), cfg).await;
    env.synced("pods").await;
    let client = env.kube_client(None).await;
    let api: Api<Pod> = Api::all(client);
    let (store, writer) = reflector::store();
    // Watches end every second: every restart resumes from the last
    // resourceVersion, against kubefan's log.
    let mut stream = Box::pin(
        reflector(writer, watcher(api, watcher::Config::default().timeout(1))).default_backoff(),
    );
    converge(&mut stream, &store, &env).await;
    for round in 0..5 {
        churn(&env, round, 30);
        converge(&mut stream, &store, &env).await;
    }
    let stats = env.sim.stats().resource("pods");
    let probes_before = probes_of(&env.sim);

    // Not polling the watcher while ~20 MB of changes pass a 1 MB log: its
    // watch is lapped and answered 410 Expired; the watcher relists from
    // kubefan and converges again.
    let blob = "x".repeat(16 << 10);
    env.sim
        .create("pods", pod("big").ns("web").build())
        .unwrap();
    for i in 0..1200 {
        env.sim
            .merge_patch(
                "pods",
                Some("web"),
                "big",
                &json!({"metadata": {"annotations": {"blob": format!("{i}-{blob}")}}}),
            )
            .unwrap();
    }
    converge(&mut stream, &store, &env).await;
    let metrics = env.metrics().await;
    // Lapped mid-stream, or (when a 1 s watch timed out meanwhile) its resume
    // fell out of the log: either way it was answered 410 and relisted.
    assert!(
        metrics.contains("kubefan_resets_total{resource=\"pods\",reason=\"Lapped\"}")
            || metrics.contains("kubefan_resets_total{resource=\"pods\",reason=\"Expired\"}"),
        "the watcher got a 410: {metrics}"
    );
    let after = env.sim.stats().resource("pods");
    // The reflector's LISTs through kubefan each probe the upstream's
    // resourceVersion (consistent reads); nothing else was listed.
    assert_eq!(
        after.list_requests - stats.list_requests,
        probes_of(&env.sim) - probes_before,
        "kubefan never relisted upstream"
    );
    assert_eq!(after.open_watches, 1);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_paginate_consistently_and_select() {
    let env = spawn(seeded(0), test_config(&["pods"])).await;
    for i in 0..25 {
        let node = if i % 2 == 0 { "node-a" } else { "node-b" };
        let app = if i % 5 == 0 { "db" } else { "web" };
        env.sim
            .create(
                "pods",
                pod(&format!("p{i:02}"))
                    .ns("web")
                    .node(node)
                    .label("app", app)
                    .build(),
            )
            .unwrap();
    }
    env.caught_up("pods", env.sim.resource_version()).await;
    let client = env.kube_client(None).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), "web");
    let first = api.list(&ListParams::default().limit(10)).await.unwrap();
    assert_eq!(first.items.len(), 10);
    assert_eq!(first.metadata.remaining_item_count, Some(15));
    // With a selector, as kube-apiserver: no count (it cannot count one).
    let selected = api
        .list(&ListParams::default().limit(2).labels("app=web"))
        .await
        .unwrap();
    assert!(selected.metadata.continue_.is_some());
    assert_eq!(selected.metadata.remaining_item_count, None);
    let rv = first.metadata.resource_version.clone().unwrap();
    // A change between pages does not show in the paginated list.
    env.sim.delete("pods", Some("web"), "p24").unwrap();
    let mut names: Vec<String> = first
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    let mut token = first.metadata.continue_.clone();
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = api
            .list(&ListParams::default().limit(10).continue_token(&t))
            .await
            .unwrap();
        assert_eq!(
            page.metadata.resource_version.as_deref(),
            Some(rv.as_str()),
            "one snapshot"
        );
        names.extend(page.items.iter().map(|p| p.metadata.name.clone().unwrap()));
        token = page.metadata.continue_;
    }
    let want: Vec<String> = (0..25).map(|i| format!("p{i:02}")).collect();
    assert_eq!(names, want, "every object once, in order");

    let selected = api
        .list(
            &ListParams::default()
                .labels("app in (db)")
                .fields("spec.nodeName=node-a"),
        )
        .await
        .unwrap();
    let names: Vec<_> = selected
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["p00", "p10", "p20"]);
    let one = api.get("p03").await.unwrap();
    assert_eq!(one.spec.unwrap().node_name.as_deref(), Some("node-b"));
    let missing = api.get("nope").await.unwrap_err();
    assert!(matches!(missing, kube::Error::Api(s) if s.code == 404));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_selectors_send_transitions_and_initial_events() {
    let env = spawn(seeded(0), test_config(&["pods"])).await;
    env.sim
        .create("pods", pod("a").ns("web").label("app", "web").build())
        .unwrap();
    env.sim
        .create("pods", pod("b").ns("web").label("app", "db").build())
        .unwrap();
    env.caught_up("pods", env.sim.resource_version()).await;
    let api: Api<Pod> = Api::namespaced(env.kube_client(None).await, "web");
    let wp = WatchParams::default().labels("app=web").initial_events();
    let mut events = Box::pin(api.watch(&wp, "0").await.unwrap());
    let mut next = async || {
        tokio::time::timeout(WAIT, events.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    };
    assert!(
        matches!(next().await, WatchEvent::Added(p) if p.metadata.name.as_deref() == Some("a"))
    );
    match next().await {
        WatchEvent::Bookmark(b) => assert_eq!(
            b.metadata
                .annotations
                .get("k8s.io/initial-events-end")
                .map(String::as_str),
            Some("true")
        ),
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
    env.sim
        .merge_patch(
            "pods",
            Some("web"),
            "b",
            &json!({"metadata": {"labels": {"app": "web"}}}),
        )
        .unwrap();
    assert!(
        matches!(next().await, WatchEvent::Added(p) if p.metadata.name.as_deref() == Some("b")),
        "starts matching: ADDED"
    );
    let o = env
        .sim
        .merge_patch(
            "pods",
            Some("web"),
            "a",
            &json!({"metadata": {"labels": {"app": "gone"}}}),
        )
        .unwrap();
    match next().await {
        WatchEvent::Deleted(p) => {
            assert_eq!(p.metadata.name.as_deref(), Some("a"));
            assert_eq!(
                p.metadata.resource_version,
                o["metadata"]["resourceVersion"].as_str().map(String::from)
            );
        }
        other => panic!("stops matching: DELETED, got {other:?}"),
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_watch_lines_resume_expire_and_validate() {
    let mut cfg = test_config(&["pods"]);
    cfg.upstream.log_limits.max_events = 10;
    cfg.stream.keepalive = Duration::from_millis(200);
    let env = spawn(seeded(3), cfg).await;
    env.synced("pods").await;
    let rv = env
        .app
        .informers()
        .hub("pods")
        .await
        .unwrap()
        .resource_version();
    let url = |q: &str| format!("{}/api/v1/pods?watch=1&{q}", env.base);
    // Resume inside the log: exactly the later events, then bookmarks.
    let mut resp = env
        .http
        .get(url(&format!(
            "resourceVersion={rv}&allowWatchBookmarks=true"
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let created = env.sim.create("pods", pod("w1").ns("web").build()).unwrap();
    let mut lines = Vec::new();
    let mut buf = Vec::new();
    while lines.len() < 2 {
        let chunk = tokio::time::timeout(WAIT, resp.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        buf.extend_from_slice(&chunk);
        while let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line: Value = serde_json::from_slice(&buf[..i]).unwrap();
            buf.drain(..=i);
            validate(&line);
            lines.push(line);
        }
    }
    assert_eq!(lines[0]["type"], "ADDED");
    assert_eq!(
        lines[0]["object"]["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );
    assert_eq!(lines[1]["type"], "BOOKMARK");
    drop(resp);
    // Resume from a position the log no longer holds: 200, then an in-stream 410.
    for i in 0..20 {
        env.sim
            .create("pods", pod(&format!("x{i}")).ns("web").build())
            .unwrap();
    }
    env.caught_up("pods", env.sim.resource_version()).await;
    let resp = env
        .http
        .get(url(&format!("resourceVersion={rv}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body = tokio::time::timeout(WAIT, resp.text())
        .await
        .unwrap()
        .unwrap();
    let line: Value = serde_json::from_str(body.trim()).unwrap();
    validate(&line);
    assert_eq!(line["type"], "ERROR");
    assert_eq!(line["object"]["code"], 410);
    assert_eq!(line["object"]["reason"], "Expired");
    // timeoutSeconds ends the stream.
    let resp = env.http.get(url("timeoutSeconds=1")).send().await.unwrap();
    let body = tokio::time::timeout(WAIT, resp.text())
        .await
        .unwrap()
        .unwrap();
    assert!(
        body.lines().count() >= 24,
        "initial ADDED events for every pod before the timeout"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_writes_and_bad_requests() {
    let env = spawn(seeded(1), test_config(&["pods"])).await;
    let (status, core) = env.get_json("/api/v1").await;
    assert_eq!(status, 200);
    let pods = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods")
        .unwrap();
    assert_eq!(pods["verbs"], json!(["get", "list", "watch"]));
    assert!(
        !core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "secrets"),
        "Secrets are not advertised"
    );
    let (status, groups) = env.get_json("/apis").await;
    assert_eq!(status, 200);
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "apps")
    );
    let (status, apps) = env.get_json("/apis/apps/v1").await;
    assert_eq!(status, 200);
    assert!(
        apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "deployments")
    );
    let (status, versions) = env.get_json("/api").await;
    assert_eq!((status, &versions["versions"]), (200, &json!(["v1"])));
    // kube-rs discovery finds its way.
    let discovery = kube::Discovery::new(env.kube_client(None).await)
        .run()
        .await
        .unwrap();
    assert!(discovery.has_group("apps"));

    for method in [
        reqwest::Method::POST,
        reqwest::Method::PUT,
        reqwest::Method::PATCH,
        reqwest::Method::DELETE,
    ] {
        let resp = env
            .http
            .request(
                method.clone(),
                format!("{}/api/v1/namespaces/web/pods/x", env.base),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 405, "{method}");
        let body: Value = resp.json().await.unwrap();
        validate_status(&body);
        assert!(body["message"].as_str().unwrap().contains("read-only"));
    }
    for (path, code) in [
        ("/api/v1/podz", 404),
        ("/apis/apps/v2/deployments", 404),
        ("/api/v1/nodes?labelSelector=a%20b", 400),
        ("/api/v1/pods?fieldSelector=spec.color%3Dred", 400),
        ("/api/v1/pods?dryRun=All", 400),
        ("/api/v1/pods?watch=1&sendInitialEvents=true", 422),
        ("/api/v1/namespaces/web/nodes", 404),
        ("/api/v1/namespaces/web/pods/x/status", 404),
        ("/api/v1/secrets", 403),
    ] {
        let (status, body) = env.get_json(path).await;
        assert_eq!(status, code, "{path}: {body}");
        validate_status(&body);
    }
    env.stop().await;
}

/// `ValidateListOptions` and `timeoutSeconds` as kube-apiserver reads
/// them, answered alike by kubefan and by the simulated API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_watch_options_are_checked_as_kube_apiserver_checks_them() {
    let env = spawn(seeded(3), test_config(&["pods"])).await;
    env.synced("pods").await;
    let rv = env.sim.resource_version();
    let forbidden_for_list =
        "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list";
    for (query, code, message) in [
        ("sendInitialEvents=true", 422, forbidden_for_list),
        ("sendInitialEvents=false", 422, forbidden_for_list),
        (
            "resourceVersionMatch=NotOlderThan",
            422,
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
        (
            "resourceVersionMatch=Exact&resourceVersion=0",
            422,
            "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        ),
        (
            "resourceVersionMatch=Newest&resourceVersion=1",
            422,
            "resourceVersionMatch: Unsupported value: \"Newest\"",
        ),
        (
            "watch=1&timeoutSeconds=9223372036854775808",
            400,
            "timeoutSeconds",
        ),
        ("watch=1&timeoutSeconds=1.5", 400, "timeoutSeconds"),
    ] {
        let path = format!("/api/v1/pods?{query}");
        let (status, body) = env.get_json(&path).await;
        assert_eq!(status, code, "{path}: {body}");
        validate_status(&body);
        let text = body["message"].as_str().unwrap();
        assert!(text.starts_with(message), "{path}: {text}");
        let upstream = reqwest::get(format!("{}{path}", env.server.url()))
            .await
            .unwrap();
        assert_eq!(upstream.status(), code, "the simulator on {path}");
    }
    // With a continue token, a match is forbidden: the token's own list
    // decides.
    let (_, page) = env.get_json("/api/v1/pods?limit=1").await;
    let token = page["metadata"]["continue"].as_str().unwrap();
    let (status, body) = env
        .get_json(&format!(
            "/api/v1/pods?limit=1&continue={token}&resourceVersion={rv}&resourceVersionMatch=NotOlderThan"
        ))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("resourceVersionMatch is forbidden when continue is provided"),
        "{body}"
    );
    // A token that is not kubefan's, multi-byte characters and all: 400.
    let (status, body) = env
        .get_json(&format!(
            "/api/v1/pods?continue=%E2%82%AC{}.0",
            "a".repeat(29)
        ))
        .await;
    assert_eq!(status, 400, "{body}");

    let upstream = env.server.url();
    for base in [env.base.as_str(), upstream.as_str()] {
        let url = |query: &str| format!("{base}/api/v1/pods?watch=1&{query}");
        // A timeout already passed: 200, and the stream ends at once, empty.
        let resp = env.http.get(url("timeoutSeconds=-1")).send().await.unwrap();
        assert_eq!(resp.status(), 200, "{base}");
        let body = tokio::time::timeout(WAIT, resp.text())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(body, "", "{base}");
        // The largest int64: a watch like any other (once a panic, adding
        // it to an Instant), here ended by the client.
        for timeout in ["9223372036854775807", "0"] {
            let mut resp = env
                .http
                .get(url(&format!("timeoutSeconds={timeout}")))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200, "{base} {timeout}");
            let first = tokio::time::timeout(WAIT, resp.chunk())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            let line: Value =
                serde_json::from_slice(first.split(|b| *b == b'\n').next().unwrap()).unwrap();
            assert_eq!(line["type"], "ADDED", "{base} {timeout}");
        }
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubefan_behind_kubefan_serves_consistent_streams_with_one_upstream_watch() {
    let tier1 = spawn(seeded(40), test_config(&["pods"])).await;
    tier1.synced("pods").await;
    // Tier 2's upstream is tier 1's Kubernetes face.
    let tier2_app = kubefan::app::App::build(test_config(&["pods"]), tier1.kube_client(None).await)
        .await
        .unwrap();
    let tier2_base = format!("http://{}", tier2_app.local_addr());
    let hub2 = tier2_app.informers().hub("pods").await.unwrap();
    assert!(hub2.wait_synced(WAIT).await);
    let tier2 = TestEnv {
        sim: tier1.sim.clone(),
        server: kubefan_sim::Sim::new(Default::default())
            .serve("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap(),
        app: tier2_app,
        base: tier2_base,
        http: reqwest::Client::new(),
    };
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(subscribed(&tier2, "/stream/pods").await);
    }
    for round in 0..4 {
        churn(&tier1, round, 25);
    }
    let (objects, rv) = pods_of(&tier1.sim);
    for (sse, view) in &mut clients {
        view.follow(sse, rv).await;
        view.assert_matches(&objects);
        assert!(view.resets.is_empty());
    }
    let stats = tier1.sim.stats().resource("pods");
    // The leaf's lists make the root probe the upstream's resourceVersion
    // (consistent reads); besides those, one watch, whose streaming list
    // brought the root its state.
    assert_eq!(
        (
            stats.list_requests - probes_of(&tier1.sim),
            stats.watch_requests,
            stats.open_watches
        ),
        (0, 1, 1),
        "{stats:?}"
    );
    drop(clients);
    tier2.stop().await;
    tier1.stop().await;
}

fn probes(env: &TestEnv) -> u64 {
    probes_of(&env.sim)
}

/// The resourceVersion probes (`limit=1` LISTs) the simulator answered
/// for pods.
fn probes_of(sim: &kubefan_sim::Sim) -> u64 {
    sim.stats().lists.get("pods").map_or(0, |l| l.probes)
}

/// A LIST without resourceVersion shows every write the upstream finished
/// before it, even one kubefan's watch has not delivered yet (KEP-2340's
/// consistent reads); the upstream's resourceVersion is probed with one
/// `limit=1` LIST shared by the LISTs arriving together, at most one per
/// 100 ms however many clients list; `resourceVersion=0` reads the cache
/// as it is, without a probe.
/// A watch list (`sendInitialEvents=true`, no resourceVersion, what
/// client-go's streaming informers send) is consistent as a LIST is: its
/// initial events wait for a write the upstream has made and kubefan's
/// watch has not brought yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_list_without_resource_version_is_consistent() {
    let env = spawn(seeded(3), test_config(&["pods"])).await;
    env.caught_up("pods", env.sim.resource_version()).await;
    env.sim.stall_watches(true);
    env.sim.create("pods", pod("fresh").build()).unwrap();
    let before = probes(&env);
    let watching = tokio::spawn(
        env.http
            .get(format!(
                "{}/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
                env.base
            ))
            .send(),
    );
    tokio::time::timeout(WAIT, async {
        while probes(&env) == before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the watch list probes the upstream");
    env.sim.stall_watches(false);
    let resp = tokio::time::timeout(WAIT, watching)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut lines = crate::tables::Lines::new(resp);
    let mut initial = Vec::new();
    loop {
        let ev = lines.next().await;
        if ev["type"] == "BOOKMARK" {
            break;
        }
        initial.push(
            ev["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    assert!(
        initial.iter().any(|n| n == "fresh"),
        "the initial events waited for the write: {initial:?}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_without_resource_version_are_consistent_with_shared_probes() {
    let env = spawn(seeded(3), test_config(&["pods"])).await;
    env.caught_up("pods", env.sim.resource_version()).await;
    let client = env.kube_client(None).await;
    let api: Api<Pod> = Api::all(client.clone());

    // Written upstream while kubefan's watch is held back.
    env.sim.stall_watches(true);
    env.sim.create("pods", pod("fresh").build()).unwrap();
    let before = probes(&env);
    let listing = tokio::spawn({
        let api = api.clone();
        async move { api.list(&ListParams::default()).await.unwrap() }
    });
    tokio::time::timeout(WAIT, async {
        while probes(&env) == before {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the LIST probes the upstream");
    env.sim.stall_watches(false);
    let listed = tokio::time::timeout(WAIT, listing).await.unwrap().unwrap();
    assert!(
        listed
            .items
            .iter()
            .any(|p| p.metadata.name.as_deref() == Some("fresh")),
        "the LIST waited for the write it must show"
    );

    // Twenty clients listing for half a second: one probe per 100 ms.
    let before = probes(&env);
    let started = std::time::Instant::now();
    let lists = futures::future::join_all((0..20).map(|_| {
        let api = api.clone();
        async move {
            let mut n = 0;
            while started.elapsed() < Duration::from_millis(500) {
                api.list_metadata(&ListParams::default()).await.unwrap();
                n += 1;
            }
            n
        }
    }))
    .await;
    let elapsed = started.elapsed();
    let made = probes(&env) - before;
    let lists: u64 = lists.iter().sum();
    assert!(lists >= 40, "{lists} lists");
    let allowed = elapsed.as_millis() as u64 / 100 + 2;
    assert!(
        made <= allowed,
        "{made} probes for {lists} lists in {elapsed:?} (at most {allowed})"
    );

    // resourceVersion=0: the cache as it is.
    let before = probes(&env);
    api.list(&ListParams::default().match_any()).await.unwrap();
    assert_eq!(probes(&env), before, "no probe for resourceVersion=0");
    env.stop().await;
}

/// `/api/v1/watch/namespaces/NS/pods/NAME` (kube-apiserver's deprecated
/// watch path) watches that one object, as kube-apiserver serves it (the
/// collection with `fieldSelector=metadata.name=NAME`); `.../pods/NAME?watch=1`
/// is a GET of the object, as kube-apiserver v1.36.2 answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_watched_by_its_path_sends_only_its_events() {
    let env = spawn(seeded(0), test_config(&["pods"])).await;
    env.sim
        .create("pods", pod("one").ns("web").build())
        .unwrap();
    env.sim
        .create("pods", pod("other").ns("web").build())
        .unwrap();
    env.caught_up("pods", env.sim.resource_version()).await;
    let rv = env.sim.resource_version();
    let resp = env
        .http
        .get(format!(
            "{}/api/v1/watch/namespaces/web/pods/one?resourceVersion={rv}",
            env.base
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut lines = crate::tables::Lines::new(resp);
    for name in ["other", "one", "other", "one"] {
        env.sim
            .merge_patch(
                "pods",
                Some("web"),
                name,
                &json!({"metadata": {"labels": {"touched": "yes"}}}),
            )
            .unwrap();
    }
    env.sim.delete("pods", Some("web"), "one").unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let event = lines.next().await;
        seen.push((
            event["type"].as_str().unwrap().to_string(),
            event["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
        ));
    }
    assert_eq!(
        seen,
        [
            ("MODIFIED".to_string(), "one".to_string()),
            ("MODIFIED".to_string(), "one".to_string()),
            ("DELETED".to_string(), "one".to_string()),
        ]
    );
    let (status, body) = env.get_json("/api/v1/watch/namespaces/web/pods/a,b").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = env
        .get_json("/api/v1/namespaces/web/pods/other?watch=1")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["kind"], "Pod", "the object itself: {body}");
    assert_eq!(body["metadata"]["name"], "other");
    env.stop().await;
}

/// A response's `Warning` headers.
fn warnings(resp: &reqwest::Response) -> Vec<String> {
    resp.headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect()
}

/// The API server's warnings for a resource (v1 Endpoints is deprecated)
/// reach kubefan's clients as kube-apiserver sends them: a `Warning`
/// header on the Kubernetes face's LIST, WATCH and GET (a missing object's
/// 404 too) and on a stream's response; a resource without any gets none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_servers_deprecation_warnings_reach_kubefans_clients() {
    const DEPRECATED: &str =
        r#"299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice""#;
    let env = spawn(seeded(3), test_config(&["endpoints", "pods"])).await;
    env.synced("endpoints").await;
    env.synced("pods").await;
    let get = |path: &str| {
        let url = format!("{}{path}", env.base);
        let http = env.http.clone();
        async move {
            tokio::time::timeout(WAIT, http.get(url).send())
                .await
                .expect("an answer in time")
                .unwrap()
        }
    };
    for path in [
        "/api/v1/endpoints",
        "/api/v1/namespaces/default/endpoints",
        "/api/v1/namespaces/default/endpoints?watch=1",
        "/stream/endpoints",
    ] {
        let resp = get(path).await;
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(warnings(&resp), [DEPRECATED], "{path}");
    }
    let missing = get("/api/v1/namespaces/default/endpoints/not-there").await;
    assert_eq!(missing.status(), 404);
    assert_eq!(warnings(&missing), [DEPRECATED], "a 404 of the resource");
    for path in ["/api/v1/pods", "/api/v1/pods?watch=1", "/stream/pods"] {
        let resp = get(path).await;
        assert_eq!(resp.status(), 200, "{path}");
        assert!(warnings(&resp).is_empty(), "{path}");
    }
    // A single-stream WebSocket: with its `101`.
    for (path, want) in [
        ("/stream/endpoints", vec![DEPRECATED]),
        ("/stream/pods", vec![]),
    ] {
        let url = format!("ws://{}{path}", env.app.local_addr());
        let (_ws, resp) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url))
            .await
            .expect("handshake in time")
            .unwrap();
        assert_eq!(resp.status(), 101);
        let got: Vec<&str> = resp
            .headers()
            .get_all("warning")
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(got, want, "{path}");
    }
    // A `/ws` subscription has no response of its own: a WARNING message
    // (valid by the schema) before its first event; none for pods.
    let mut ws = crate::ws::WsClient::connect(&env, "/ws").await;
    for (id, resource) in [("ep", "endpoints"), ("p", "pods")] {
        ws.send_json(json!({"op": "subscribe", "id": id, "resource": resource}))
            .await;
        let first = ws.next().await;
        assert_eq!(first["sub"], id, "{first}");
        if resource == "endpoints" {
            assert_eq!(first["type"], "WARNING", "{first}");
            assert_eq!(
                first["message"],
                "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"
            );
            let next = ws.next().await;
            assert_ne!(next["type"], "WARNING", "once: {next}");
        } else {
            assert_ne!(first["type"], "WARNING", "{first}");
        }
        ws.send_json(json!({"op": "unsubscribe", "id": id})).await;
        loop {
            let msg = ws.next().await;
            if msg["sub"] == id && msg["type"] == "UNSUBSCRIBED" {
                break;
            }
        }
    }
    env.stop().await;
}

/// The request that starts a resource's informer (on demand: nothing
/// started it before) carries the API server's warnings too, on every
/// face: it waited for the informer's first list, which brought them.
/// Each request is the first on a fresh gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_that_starts_an_informer_carries_its_warnings() {
    const MESSAGE: &str =
        "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice";
    let header = format!("299 - \"{MESSAGE}\"");
    let fresh = || async { spawn(seeded(3), test_config(&[])).await };
    for (path, status) in [
        ("/api/v1/endpoints", 200),
        ("/api/v1/namespaces/default/endpoints/not-there", 404),
        ("/api/v1/endpoints?watch=1", 200),
        ("/stream/endpoints", 200),
    ] {
        let env = fresh().await;
        let resp = tokio::time::timeout(WAIT, env.http.get(format!("{}{path}", env.base)).send())
            .await
            .expect("an answer in time")
            .unwrap();
        assert_eq!(resp.status(), status, "{path}");
        assert_eq!(
            warnings(&resp),
            std::slice::from_ref(&header),
            "{path}, the first request"
        );
        drop(resp);
        env.stop().await;
    }
    let env = fresh().await;
    let url = format!("ws://{}/stream/endpoints", env.app.local_addr());
    let (_ws, resp) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(url))
        .await
        .expect("handshake in time")
        .unwrap();
    let got: Vec<&str> = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(got, [header.as_str()], "a WebSocket's 101");
    drop(_ws);
    env.stop().await;
    let env = fresh().await;
    let mut ws = crate::ws::WsClient::connect(&env, "/ws").await;
    ws.send_json(json!({"op": "subscribe", "id": "ep", "resource": "endpoints"}))
        .await;
    let first = ws.next().await;
    assert_eq!(first["type"], "WARNING", "a /ws subscription: {first}");
    assert_eq!(first["message"], MESSAGE);
    drop(ws);
    env.stop().await;
}

/// A node agent's watch (`fieldSelector=spec.nodeName=NODE`) resumed from
/// a list's resourceVersion replays, from the history, exactly the changes
/// to that node's set: a pod rescheduled onto it is ADDED, one rescheduled
/// away or unscheduled is DELETED (at the resourceVersion that moved it),
/// one deleted there is DELETED, one created there ADDED; pods that never
/// were on the node are not seen. Then the same live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_watch_resumed_from_history_sees_pods_rescheduled_onto_and_off_its_node() {
    let env = spawn(seeded(0), test_config(&["pods"])).await;
    for (name, node) in [
        ("stays", "node-1"),
        ("leaves", "node-1"),
        ("unscheduled", "node-1"),
        ("deleted", "node-1"),
        ("arrives", "node-0"),
        ("elsewhere", "node-2"),
    ] {
        env.sim
            .create("pods", pod(name).ns("web").node(node).build())
            .unwrap();
    }
    env.caught_up("pods", env.sim.resource_version()).await;
    let api: Api<Pod> = Api::namespaced(env.kube_client(None).await, "web");
    let listed = api
        .list(&ListParams::default().fields("spec.nodeName=node-1"))
        .await
        .unwrap();
    let names: Vec<_> = listed
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["deleted", "leaves", "stays", "unscheduled"]);
    let rv = listed.metadata.resource_version.unwrap();

    // Written before the watch starts: it must replay them from history.
    let patch = |name: &str, p: Value| {
        let o = env.sim.merge_patch("pods", Some("web"), name, &p).unwrap();
        o["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut want = vec![
        (
            "MODIFIED",
            "stays",
            patch("stays", json!({"metadata": {"labels": {"x": "1"}}})),
        ),
        (
            "DELETED",
            "leaves",
            patch("leaves", json!({"spec": {"nodeName": "node-2"}})),
        ),
        (
            "ADDED",
            "arrives",
            patch("arrives", json!({"spec": {"nodeName": "node-1"}})),
        ),
        (
            "DELETED",
            "unscheduled",
            patch("unscheduled", json!({"spec": {"nodeName": null}})),
        ),
    ];
    let gone = env.sim.delete("pods", Some("web"), "deleted").unwrap();
    want.push((
        "DELETED",
        "deleted",
        gone["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string(),
    ));
    patch("elsewhere", json!({"spec": {"nodeName": "node-0"}}));
    env.caught_up("pods", env.sim.resource_version()).await;

    let wp = WatchParams::default().fields("spec.nodeName=node-1");
    let mut events = Box::pin(api.watch(&wp, &rv).await.unwrap());
    let mut next = async || {
        let event = tokio::time::timeout(WAIT, events.try_next())
            .await
            .expect("an event in time")
            .unwrap()
            .unwrap();
        let (ty, p) = match event {
            WatchEvent::Added(p) => ("ADDED", p),
            WatchEvent::Modified(p) => ("MODIFIED", p),
            WatchEvent::Deleted(p) => ("DELETED", p),
            other => panic!("unexpected {other:?}"),
        };
        (
            ty,
            p.metadata.name.unwrap(),
            p.metadata.resource_version.unwrap(),
        )
    };
    for (ty, name, rv) in &want {
        assert_eq!(
            next().await,
            (*ty, name.to_string(), rv.clone()),
            "replayed"
        );
    }

    // Live: onto the node, off it, and a pod elsewhere not seen.
    patch("elsewhere", json!({"spec": {"nodeName": "node-2"}}));
    let on = patch("leaves", json!({"spec": {"nodeName": "node-1"}}));
    assert_eq!(next().await, ("ADDED", "leaves".into(), on));
    let off = patch("arrives", json!({"spec": {"nodeName": "node-0"}}));
    assert_eq!(next().await, ("DELETED", "arrives".into(), off));
    env.stop().await;
}
