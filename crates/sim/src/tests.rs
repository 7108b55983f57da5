//! End-to-end tests of the simulator through the real kube-rs client.

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::discovery::Discovery;
use serde_json::{Value, json};

use super::{ResourceDef, Sim, SimConfig, SimServer, pod};

const WAIT: Duration = Duration::from_secs(5);

async fn start(cfg: SimConfig) -> (Sim, SimServer, kube::Client) {
    let sim = Sim::new(cfg);
    let server = sim.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = kube::Client::try_from(server.client_config()).unwrap();
    (sim, server, client)
}

fn pods(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &ApiResource::erase::<Pod>(&()))
}

fn name(o: &DynamicObject) -> String {
    o.metadata.name.clone().unwrap()
}

async fn next<S: Stream<Item = kube::Result<WatchEvent<DynamicObject>>> + Unpin>(
    s: &mut S,
) -> Option<WatchEvent<DynamicObject>> {
    tokio::time::timeout(WAIT, s.next())
        .await
        .expect("watch event in time")
        .map(|r| r.expect("watch item"))
}

/// Event type and object name, for compact assertions.
fn brief(ev: &WatchEvent<DynamicObject>) -> (&'static str, String) {
    match ev {
        WatchEvent::Added(o) => ("ADDED", name(o)),
        WatchEvent::Modified(o) => ("MODIFIED", name(o)),
        WatchEvent::Deleted(o) => ("DELETED", name(o)),
        WatchEvent::Bookmark(b) => ("BOOKMARK", b.metadata.resource_version.clone()),
        WatchEvent::Error(e) => ("ERROR", e.code.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn paginated_list_is_a_consistent_snapshot_while_writes_happen() {
    let (sim, server, client) = start(SimConfig::default()).await;
    for i in 0..5 {
        sim.create("pods", pod(&format!("p{i}")).build()).unwrap();
    }
    let api = pods(&client);
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    assert_eq!(rv, sim.resource_version().to_string());
    let mut names: Vec<String> = first.items.iter().map(name).collect();
    let mut token = first.metadata.continue_.clone();
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    sim.create("pods", pod("p9").build()).unwrap();
    sim.delete("pods", None, "p4").unwrap();
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = api
            .list(&ListParams::default().limit(2).continue_token(&t))
            .await
            .unwrap();
        assert_eq!(page.metadata.resource_version.as_deref(), Some(rv.as_str()));
        names.extend(page.items.iter().map(name));
        token = page.metadata.continue_.clone();
    }
    assert_eq!(names, ["p0", "p1", "p2", "p3", "p4"]);
    assert_eq!(sim.stats().resource("pods").list_requests, 3);
    let all = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        all.items.iter().map(name).collect::<Vec<_>>(),
        ["p0", "p1", "p2", "p3", "p9"]
    );
    assert_eq!(all.items[0].types.as_ref().unwrap().kind, "Pod");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_from_rv_gets_exactly_the_later_events_in_order() {
    let (sim, server, client) = start(SimConfig::default()).await;
    sim.create("pods", pod("before").build()).unwrap();
    let rv = sim.resource_version();
    sim.create("pods", pod("a").build()).unwrap();
    sim.merge_patch(
        "pods",
        None,
        "a",
        &json!({"metadata": {"labels": {"x": "1"}}}),
    )
    .unwrap();
    let api = pods(&client);
    let mut w = api
        .watch(&WatchParams::default().timeout(10), &rv.to_string())
        .await
        .unwrap()
        .boxed();
    sim.delete("pods", None, "a").unwrap();
    sim.create("pods", pod("b").ns("other").build()).unwrap();
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(brief(&next(&mut w).await.unwrap()));
    }
    let want = [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
        ("ADDED", "b"),
    ];
    assert_eq!(got, want.map(|(t, n)| (t, n.to_owned())));
    // A namespaced watch with rv "0" starts with the current objects.
    let api_ns: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "other", &ApiResource::erase::<Pod>(&()));
    let mut w = api_ns
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "b".to_owned())
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn too_old_rv_after_compact_yields_410_in_stream() {
    let (sim, server, client) = start(SimConfig::default()).await;
    sim.create("pods", pod("a").build()).unwrap();
    let old = sim.resource_version();
    sim.create("pods", pod("b").build()).unwrap();
    let api = pods(&client);
    let mut live = api
        .watch(&WatchParams::default().timeout(10), &old.to_string())
        .await
        .unwrap()
        .boxed();
    assert_eq!(
        brief(&next(&mut live).await.unwrap()),
        ("ADDED", "b".to_owned())
    );
    sim.compact();
    let mut w = api
        .watch(&WatchParams::default().timeout(10), &old.to_string())
        .await
        .unwrap()
        .boxed();
    match next(&mut w).await {
        Some(WatchEvent::Error(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message
                    .starts_with(&format!("too old resource version: {old}")),
                "{}",
                e.message
            );
        }
        other => panic!("expected a 410 error, got {other:?}"),
    }
    assert!(next(&mut w).await.is_none(), "stream ends after the 410");
    // Existing watches keep running; the current rv is still watchable.
    sim.create("pods", pod("c").build()).unwrap();
    assert_eq!(
        brief(&next(&mut live).await.unwrap()),
        ("ADDED", "c".to_owned())
    );
    let now = sim.resource_version().to_string();
    let mut w = api
        .watch(&WatchParams::default().timeout(10), &now)
        .await
        .unwrap()
        .boxed();
    sim.create("pods", pod("d").build()).unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "d".to_owned())
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bookmarks_arrive_with_the_current_rv() {
    let cfg = SimConfig {
        bookmark_interval: Duration::from_millis(50),
        ..SimConfig::default()
    };
    let (sim, server, client) = start(cfg).await;
    sim.create("pods", pod("a").build()).unwrap();
    let rv = sim.resource_version().to_string();
    let api = pods(&client);
    let mut w = api
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    sim.create("nodes", json!({"metadata": {"name": "n1"}}))
        .unwrap();
    match next(&mut w).await {
        Some(WatchEvent::Bookmark(b)) => {
            assert_eq!(b.types.kind, "Pod");
            assert_eq!(
                b.metadata.resource_version,
                sim.resource_version().to_string()
            );
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn end_watches_ends_streams_and_stats_count_them() {
    let (sim, server, client) = start(SimConfig::default()).await;
    let api = pods(&client);
    let mut w1 = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let mut w2 = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let stats = sim.stats().resource("pods");
    assert_eq!((stats.open_watches, stats.watch_requests), (2, 2));
    sim.end_watches();
    assert!(next(&mut w1).await.is_none());
    assert!(next(&mut w2).await.is_none());
    tokio::time::timeout(WAIT, async {
        while sim.stats().resource("pods").open_watches > 0 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("open watches drop to zero");
    // New watches still work after end_watches.
    let mut w3 = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    sim.create("pods", pod("a").build()).unwrap();
    assert_eq!(
        brief(&next(&mut w3).await.unwrap()),
        ("ADDED", "a".to_owned())
    );
    // A client that goes away is noticed at the next write to its stream.
    let w4 = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    drop(w4);
    sim.create("pods", pod("b").build()).unwrap();
    assert_eq!(
        brief(&next(&mut w3).await.unwrap()),
        ("ADDED", "b".to_owned())
    );
    tokio::time::timeout(WAIT, async {
        while sim.stats().resource("pods").open_watches > 1 {
            sim.merge_patch(
                "pods",
                None,
                "b",
                &json!({"metadata": {"labels": {"poke": "1"}}}),
            )
            .unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a dropped client's watch is closed");
    let http: Value = reqwest::get(format!("{}/debug/stats", server.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(http["resources"]["pods"]["watch_requests"], 4);
    assert_eq!(http["resources"]["pods"]["open_watches"], 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fail_next_gives_500_then_recovers() {
    let (sim, server, client) = start(SimConfig::default()).await;
    let api = pods(&client);
    sim.fail_next(2);
    for _ in 0..2 {
        match api.list(&ListParams::default()).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"))
            }
            other => panic!("expected a 500, got {other:?}"),
        }
    }
    api.list(&ListParams::default()).await.unwrap();
    let resp = reqwest::Client::new()
        .post(format!("{}/debug/faults/fail-next?n=1", server.url()))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    assert!(api.watch(&WatchParams::default(), "0").await.is_err());
    assert_eq!(sim.stats().resource("pods").watch_requests, 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn discovery_finds_builtins_and_registered_crds() {
    let (sim, server, client) = start(SimConfig::default()).await;
    sim.register(
        ResourceDef::new("example.com", "v1", "widgets", "Widget", true).with_short_names(&["wd"]),
    );
    let d = Discovery::new(client.clone()).run().await.unwrap();
    let find = |group: &str, plural: &str| {
        d.groups()
            .flat_map(|g| g.recommended_resources())
            .find(|(ar, _)| ar.group == group && ar.plural == plural)
    };
    assert_eq!(find("", "pods").unwrap().0.kind, "Pod");
    assert_eq!(find("apps", "deployments").unwrap().0.kind, "Deployment");
    let (widget, caps) = find("example.com", "widgets").unwrap();
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    let d = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    assert!(d.groups().any(|g| g.name() == "example.com"));
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &widget);
    let w = DynamicObject::new("w1", &widget).data(json!({"spec": {"size": 3}}));
    widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(
        sim.get("widgets.example.com", Some("default"), "w1")
            .unwrap()["spec"]["size"],
        3
    );
    let v = client.apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unregistered_resource_ends_its_watches_and_answers_404() {
    let (sim, server, client) = start(SimConfig::default()).await;
    sim.register(ResourceDef::new(
        "example.com",
        "v1",
        "widgets",
        "Widget",
        true,
    ));
    let ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let rv = widgets
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = widgets
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    assert!(sim.unregister("widgets.example.com"));
    assert!(!sim.unregister("widgets.example.com"));
    assert!(next(&mut stream).await.is_none(), "the open watch ends");
    let err = widgets.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
    let d = Discovery::new(client.clone()).run().await.unwrap();
    assert!(!d.groups().any(|g| g.name() == "example.com"));
    // Registered again, it starts empty with fresh counters.
    sim.register(ResourceDef::new(
        "example.com",
        "v1",
        "widgets",
        "Widget",
        true,
    ));
    assert_eq!(
        sim.stats().resource("widgets.example.com"),
        Default::default()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn merge_patch_over_http_follows_rfc7386_and_checks_rv() {
    let (sim, server, client) = start(SimConfig::default()).await;
    let created = sim
        .create(
            "pods",
            pod("a").label("app", "web").label("tier", "x").build(),
        )
        .unwrap();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &ApiResource::erase::<Pod>(&()));
    let patch = json!({"metadata": {"labels": {"tier": null, "new": "y"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let out = api
        .patch("a", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let labels = out.metadata.labels.clone().unwrap();
    assert_eq!(labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(labels.get("new").map(String::as_str), Some("y"));
    assert!(!labels.contains_key("tier"));
    assert_eq!(out.data["spec"]["containers"].as_array().unwrap().len(), 1);
    assert_eq!(
        out.metadata.uid.as_deref(),
        created["metadata"]["uid"].as_str()
    );
    assert_eq!(out.metadata.generation, Some(2));
    let stale = json!({"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}});
    match api
        .patch("a", &PatchParams::default(), &Patch::Merge(&stale))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "Conflict")),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let mut obj = api.get("a").await.unwrap();
    obj.metadata.resource_version = Some("1".into());
    match api.replace("a", &PostParams::default(), &obj).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 409),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let deleted = api.delete("a", &Default::default()).await.unwrap();
    assert!(deleted.is_left());
    assert!(sim.get("pods", None, "a").is_none());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn label_selectors_filter_lists_and_turn_watch_transitions_into_add_delete() {
    let (sim, server, client) = start(SimConfig::default()).await;
    sim.create("pods", pod("a").label("app", "web").build())
        .unwrap();
    sim.create("pods", pod("b").label("app", "db").build())
        .unwrap();
    sim.create("pods", pod("c").build()).unwrap();
    let api = pods(&client);
    let names =
        |l: kube::core::ObjectList<DynamicObject>| l.items.iter().map(name).collect::<Vec<_>>();
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app in (web,db)"))
                .await
                .unwrap()
        ),
        ["a", "b"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("app!=web"))
                .await
                .unwrap()
        ),
        ["b", "c"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("!app"))
                .await
                .unwrap()
        ),
        ["c"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().fields("metadata.name=b"))
                .await
                .unwrap()
        ),
        ["b"]
    );
    let rv = sim.resource_version().to_string();
    let mut w = api
        .watch(&WatchParams::default().labels("app=web").timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    sim.merge_patch(
        "pods",
        None,
        "b",
        &json!({"metadata": {"labels": {"app": "web"}}}),
    )
    .unwrap();
    sim.merge_patch(
        "pods",
        None,
        "a",
        &json!({"metadata": {"labels": {"app": "old"}}}),
    )
    .unwrap();
    sim.merge_patch(
        "pods",
        None,
        "c",
        &json!({"metadata": {"labels": {"x": "1"}}}),
    )
    .unwrap();
    sim.merge_patch(
        "pods",
        None,
        "b",
        &json!({"metadata": {"labels": {"x": "1"}}}),
    )
    .unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(brief(&next(&mut w).await.unwrap()));
    }
    let want = [("ADDED", "b"), ("DELETED", "a"), ("MODIFIED", "b")];
    assert_eq!(got, want.map(|(t, n)| (t, n.to_owned())));
    match api.list(&ListParams::default().labels("app in web")).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 400),
        other => panic!("expected a 400, got {other:?}"),
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn send_initial_events_ends_with_the_annotated_bookmark() {
    let (sim, server, client) = start(SimConfig::default()).await;
    sim.create("pods", pod("a").build()).unwrap();
    sim.create("pods", pod("b").build()).unwrap();
    let rv = sim.resource_version().to_string();
    let api = pods(&client);
    let wp = WatchParams::default().initial_events().timeout(10);
    let mut w = api.watch(&wp, "").await.unwrap().boxed();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "a".to_owned())
    );
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "b".to_owned())
    );
    match next(&mut w).await {
        Some(WatchEvent::Bookmark(b)) => {
            assert_eq!(b.metadata.resource_version, rv);
            assert_eq!(
                b.metadata
                    .annotations
                    .get("k8s.io/initial-events-end")
                    .map(String::as_str),
                Some("true")
            );
        }
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
    sim.create("pods", pod("c").build()).unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "c".to_owned())
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_a_4xx_status() {
    let (sim, server, _client) = start(SimConfig::default()).await;
    sim.create("pods", pod("a").build()).unwrap();
    let http = reqwest::Client::new();
    let url = |p: &str| format!("{}{p}", server.url());
    let pods = "/api/v1/namespaces/default/pods";
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (http.post(url(pods)).body("{not json"), 400, "BadRequest"),
        (
            http.post(url(pods))
                .body(r#"{"kind":"Node","metadata":{"name":"x"}}"#),
            400,
            "BadRequest",
        ),
        (
            http.post(url(pods)).body(r#"{"metadata":{}}"#),
            422,
            "Invalid",
        ),
        (
            http.post(url(pods))
                .body(r#"{"metadata":{"name":"Bad_Name"}}"#),
            422,
            "Invalid",
        ),
        (
            http.post(url(pods)).body(r#"{"metadata":{"name":"a"}}"#),
            409,
            "AlreadyExists",
        ),
        (
            http.post(url(pods))
                .body(r#"{"metadata":{"name":"z","namespace":"other"}}"#),
            400,
            "BadRequest",
        ),
        (http.post(url(pods)).body("[1]"), 400, "BadRequest"),
        (
            http.put(url(&format!("{pods}/b")))
                .body(r#"{"metadata":{"name":"b"}}"#),
            404,
            "NotFound",
        ),
        (
            http.put(url(&format!("{pods}/a")))
                .body(r#"{"metadata":{"name":"c"}}"#),
            400,
            "BadRequest",
        ),
        (
            http.patch(url(&format!("{pods}/a")))
                .body("{}")
                .header("content-type", "application/json-patch+json"),
            415,
            "UnsupportedMediaType",
        ),
        (
            http.patch(url(&format!("{pods}/a")))
                .body("[]")
                .header("content-type", "application/merge-patch+json"),
            400,
            "BadRequest",
        ),
        (http.delete(url(&format!("{pods}/nope"))), 404, "NotFound"),
        (
            http.get(url(&format!("{pods}?labelSelector=a%20in%20b"))),
            400,
            "BadRequest",
        ),
        (
            http.get(url(&format!("{pods}?fieldSelector=spec.bogus%3Dx"))),
            400,
            "BadRequest",
        ),
        (http.get(url(&format!("{pods}?limit=x"))), 400, "BadRequest"),
        (
            http.get(url(&format!("{pods}?watch=1&resourceVersion=abc"))),
            400,
            "BadRequest",
        ),
        (
            http.get(url(&format!("{pods}?limit=1&continue=99.1"))),
            410,
            "Expired",
        ),
        (http.get(url("/api/v1/gizmos")), 404, "NotFound"),
        (http.get(url("/api/v1/pods/a")), 404, "NotFound"),
        (http.delete(url(pods)), 405, "MethodNotAllowed"),
    ];
    for (req, code, reason) in cases {
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.unwrap();
        assert_eq!(
            (status, body["code"].as_u64(), body["reason"].as_str()),
            (code, Some(code as u64), Some(reason)),
            "{body}"
        );
        assert_eq!(body["kind"], "Status");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stalled_watch_resumes_and_an_overflowing_one_ends_with_410() {
    let cfg = SimConfig {
        watch_queue: 4,
        ..SimConfig::default()
    };
    let (sim, server, client) = start(cfg).await;
    let api = pods(&client);
    let rv = sim.resource_version().to_string();
    let mut w = api
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    sim.stall_watches(true);
    sim.create("pods", pod("a").build()).unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), w.next())
            .await
            .is_err(),
        "stalled stream sends nothing"
    );
    sim.stall_watches(false);
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "a".to_owned())
    );
    sim.stall_watches(true);
    for i in 0..10 {
        sim.create("pods", pod(&format!("p{i}")).build()).unwrap();
    }
    sim.stall_watches(false);
    let mut got = Vec::new();
    while let Some(ev) = next(&mut w).await {
        got.push(brief(&ev));
    }
    assert_eq!(got.len(), 5, "{got:?}");
    assert_eq!(got[4], ("ERROR", "410".to_owned()));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn history_is_bounded_by_bytes_and_reported_in_debug_stats() {
    let cfg = SimConfig {
        history_bytes: 20_000,
        ..SimConfig::default()
    };
    let (sim, server, client) = start(cfg).await;
    let first = sim.resource_version();
    let mut json_bytes = 0;
    for i in 0..30 {
        let p = sim
            .create("pods", pod(&format!("p{i:02}")).build())
            .unwrap();
        json_bytes += serde_json::to_vec(&p).unwrap().len() as u64;
    }
    let stored = sim.stats().storage("pods");
    assert_eq!((stored.objects, stored.object_bytes), (30, json_bytes));
    assert!(stored.history_bytes <= 20_000, "{stored:?}");
    assert!(
        (5..30).contains(&stored.history_events),
        "about 2.3 KB a pod: {stored:?}"
    );
    assert_eq!(
        stored.history_floor,
        first + 30 - stored.history_events,
        "the floor is the newest event dropped"
    );
    let api = pods(&client);
    let mut w = api
        .watch(&WatchParams::default().timeout(10), &first.to_string())
        .await
        .unwrap()
        .boxed();
    match next(&mut w).await {
        Some(WatchEvent::Error(e)) => assert_eq!(e.code, 410),
        other => panic!("expected 410 for a version the bytes bound dropped, got {other:?}"),
    }
    let mut w = api
        .watch(
            &WatchParams::default().timeout(10),
            &stored.history_floor.to_string(),
        )
        .await
        .unwrap()
        .boxed();
    let oldest_kept = 30 - stored.history_events;
    for i in oldest_kept..30 {
        assert_eq!(
            brief(&next(&mut w).await.unwrap()),
            ("ADDED", format!("p{i:02}"))
        );
    }
    let http: Value = reqwest::get(format!("{}/debug/stats", server.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        http["storage"]["pods"]["history_events"],
        stored.history_events
    );
    assert_eq!(http["history_limit_bytes"], 20_000);
    server.stop().await;
}

/// Names of the items of a LIST at `path`, or the `Status` message of a refusal.
async fn list_names(server: &SimServer, path: &str) -> Result<Vec<String>, (u16, String)> {
    let resp = reqwest::get(format!("{}{path}", server.url()))
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap();
    if code != 200 {
        return Err((code, body["message"].as_str().unwrap_or("").to_owned()));
    }
    Ok(body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
        .collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn builtin_kinds_select_by_the_fields_kube_apiserver_defines() {
    let (sim, server, client) = start(SimConfig::default()).await;
    let d = Discovery::new(client.clone()).run().await.unwrap();
    let served: Vec<(String, String)> = d
        .groups()
        .flat_map(|g| g.recommended_resources())
        .map(|(ar, _)| (ar.group, ar.plural))
        .collect();
    for (group, plural) in [
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("", "events"),
        ("events.k8s.io", "events"),
        ("networking.k8s.io", "ingresses"),
        ("", "persistentvolumes"),
        ("", "persistentvolumeclaims"),
        ("", "serviceaccounts"),
        ("", "endpoints"),
        ("discovery.k8s.io", "endpointslices"),
    ] {
        assert!(
            served.contains(&(group.to_owned(), plural.to_owned())),
            "{plural}.{group} is discovered"
        );
    }

    sim.create("jobs.batch", json!({"metadata": {"name": "fresh"}}))
        .unwrap();
    sim.create(
        "jobs.batch",
        json!({"metadata": {"name": "done"}, "status": {"succeeded": 2}}),
    )
    .unwrap();
    let jobs = "/apis/batch/v1/namespaces/default/jobs";
    let sel = |s: &str| format!("{jobs}?fieldSelector={s}");
    assert_eq!(
        list_names(&server, &sel("status.successful%3D0")).await,
        Ok(vec!["fresh".to_owned()]),
        "an absent count reads 0"
    );
    assert_eq!(
        list_names(&server, &sel("status.successful%3D2")).await,
        Ok(vec!["done".to_owned()])
    );
    assert_eq!(
        list_names(&server, &sel("status.succeeded%3D2")).await,
        Err((
            400,
            "field label \"status.succeeded\" not supported for batchv1.Job".to_owned()
        ))
    );
    assert_eq!(
        list_names(
            &server,
            "/apis/apps/v1/replicasets?fieldSelector=status.replicas%3D0"
        )
        .await,
        Err((
            400,
            "\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\"".to_owned()
        ))
    );
    assert_eq!(
        list_names(&server, "/api/v1/nodes?fieldSelector=metadata.namespace%3D").await,
        Err((
            400,
            "field label not supported: metadata.namespace".to_owned()
        ))
    );

    sim.create(
        "events",
        json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Pod", "name": "a"},
               "reason": "Pulled", "type": "Normal", "reportingComponent": "kubelet"}),
    )
    .unwrap();
    sim.create(
        "events",
        json!({"metadata": {"name": "e2"}, "involvedObject": {"kind": "Node", "name": "n1"},
               "source": {"component": "node-controller"}, "type": "Warning"}),
    )
    .unwrap();
    let events = "/api/v1/events?fieldSelector=";
    assert_eq!(
        list_names(
            &server,
            &format!("{events}involvedObject.kind%3DPod,type%3DNormal")
        )
        .await,
        Ok(vec!["e1".to_owned()])
    );
    assert_eq!(
        list_names(&server, &format!("{events}source%3Dkubelet")).await,
        Ok(vec!["e1".to_owned()]),
        "source falls back to reportingComponent"
    );
    assert_eq!(
        list_names(&server, &format!("{events}source%3Dnode-controller")).await,
        Ok(vec!["e2".to_owned()])
    );
    sim.create(
        "events.events.k8s.io",
        json!({"metadata": {"name": "n1"}, "regarding": {"kind": "Pod", "name": "a"},
               "reportingController": "kubelet", "reason": "Pulled", "type": "Normal"}),
    )
    .unwrap();
    let new_events = "/apis/events.k8s.io/v1/events?fieldSelector=";
    assert_eq!(
        list_names(
            &server,
            &format!(
                "{new_events}regarding.kind%3DPod,regarding.name%3Da,reportingController%3Dkubelet"
            )
        )
        .await,
        Ok(vec!["n1".to_owned()])
    );
    assert_eq!(
        list_names(&server, &format!("{new_events}involvedObject.kind%3DPod")).await,
        Err((
            400,
            "field label not supported: involvedObject.kind".to_owned()
        ))
    );

    let mut p = pod("hosted").build();
    p["status"]["podIPs"] = json!([{"ip": "10.1.2.3"}]);
    sim.create("pods", p).unwrap();
    let pods = "/api/v1/pods?fieldSelector=";
    assert_eq!(
        list_names(
            &server,
            &format!("{pods}spec.hostNetwork%3Dfalse,status.podIP%3D10.1.2.3")
        )
        .await,
        Ok(vec!["hosted".to_owned()])
    );
    assert_eq!(
        list_names(&server, &format!("{pods}status.podIPs%3D10.1.2.3")).await,
        Ok(vec![]),
        "status.podIPs is accepted but never set"
    );

    // The API server's defaults are in the object and select like it.
    let secret = sim
        .create("secrets", json!({"metadata": {"name": "s"}}))
        .unwrap();
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(
        list_names(&server, "/api/v1/secrets?fieldSelector=type%3DOpaque").await,
        Ok(vec!["s".to_owned()])
    );

    // A watch on a field turns the transition into DELETED, like the watch cache.
    let ar = ApiResource {
        group: "batch".into(),
        version: "v1".into(),
        api_version: "batch/v1".into(),
        kind: "Job".into(),
        plural: "jobs".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let rv = sim.resource_version().to_string();
    let mut w = api
        .watch(
            &WatchParams::default()
                .fields("status.successful=0")
                .timeout(10),
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    sim.merge_patch(
        "jobs.batch",
        None,
        "fresh",
        &json!({"status": {"succeeded": 1}}),
    )
    .unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("DELETED", "fresh".to_owned())
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rbac_kinds_are_ordinary_resources_and_cluster_roles_aggregate() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
    let (sim, server, client) = start(SimConfig::default()).await;
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let role = |name: &str, labels: Value, rules: Value| -> ClusterRole {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": labels}, "rules": rules}),
        )
        .unwrap()
    };
    let monitoring: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "monitoring", "labels": {"example.com/aggregate": "true"}},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"example.com/aggregate": "true"}}]},
    }))
    .unwrap();
    roles
        .create(&PostParams::default(), &monitoring)
        .await
        .unwrap();
    let rv = sim.resource_version().to_string();
    let dynamic: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<ClusterRole>(&()));
    let mut w = dynamic
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let get_pods = json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]);
    roles
        .create(
            &PostParams::default(),
            &role(
                "pods-reader",
                json!({"example.com/aggregate": "true"}),
                get_pods.clone(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "pods-reader".to_owned())
    );
    let rules_of = |ev: WatchEvent<DynamicObject>| match ev {
        WatchEvent::Modified(o) => {
            assert_eq!(o.metadata.name.as_deref(), Some("monitoring"));
            o.data["rules"].clone()
        }
        other => panic!("expected the aggregated role's MODIFIED, got {other:?}"),
    };
    assert_eq!(rules_of(next(&mut w).await.unwrap()), get_pods);
    // Roles are taken by name, each rule once.
    let nodes = json!([{"verbs": ["list"], "apiGroups": [""], "resources": ["nodes"]},
                       {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]);
    roles
        .create(
            &PostParams::default(),
            &role(
                "nodes-reader",
                json!({"example.com/aggregate": "true"}),
                nodes.clone(),
            ),
        )
        .await
        .unwrap();
    next(&mut w).await.unwrap();
    assert_eq!(
        rules_of(next(&mut w).await.unwrap()),
        json!([nodes[0], nodes[1]])
    );
    // A role no selector matches changes nothing.
    roles
        .create(
            &PostParams::default(),
            &role("other", json!({}), get_pods.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "other".to_owned())
    );
    // Losing the label takes its rules away.
    roles
        .patch(
            "nodes-reader",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"example.com/aggregate": null}}})),
        )
        .await
        .unwrap();
    next(&mut w).await.unwrap();
    assert_eq!(rules_of(next(&mut w).await.unwrap()), get_pods);
    roles
        .delete("pods-reader", &Default::default())
        .await
        .unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("DELETED", "pods-reader".to_owned())
    );
    assert_eq!(rules_of(next(&mut w).await.unwrap()), json!([]));
    assert!(
        tokio::time::timeout(Duration::from_millis(100), w.next())
            .await
            .is_err(),
        "nothing more: an unchanged union is not written"
    );

    // RoleBindings: namespaced, names may hold colons, defaulted, validated.
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), "web");
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "system:readers"},
        "roleRef": {"kind": "ClusterRole", "name": "monitoring", "apiGroup": "rbac.authorization.k8s.io"},
        "subjects": [{"kind": "Group", "name": "devs"}],
    }))
    .unwrap();
    let made = bindings.create(&PostParams::default(), &rb).await.unwrap();
    assert_eq!(
        made.subjects.unwrap()[0].api_group.as_deref(),
        Some("rbac.authorization.k8s.io")
    );
    let mut moved = bindings.get("system:readers").await.unwrap();
    moved.role_ref.name = "other".into();
    match bindings
        .replace("system:readers", &PostParams::default(), &moved)
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
            assert!(s.message.contains("cannot change roleRef"), "{}", s.message);
        }
        other => panic!("expected 422, got {other:?}"),
    }
    assert_eq!(
        bindings
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(
        sim.list("clusterrolebindings.rbac.authorization.k8s.io")
            .0
            .len(),
        0
    );
    server.stop().await;
}

/// Posts a SubjectAccessReview and returns its status.
async fn sar(server: &SimServer, user: &str, groups: &[&str], attrs: Value) -> Value {
    let key = if attrs.get("path").is_some() {
        "nonResourceAttributes"
    } else {
        "resourceAttributes"
    };
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups, key: attrs}});
    let resp = reqwest::Client::new()
        .post(format!(
            "{}/apis/authorization.k8s.io/v1/subjectaccessreviews",
            server.url()
        ))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);
    resp.json::<Value>().await.unwrap()["status"].clone()
}

fn allowed(status: &Value) -> bool {
    status["allowed"].as_bool().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn subject_access_reviews_follow_the_stored_rbac_objects() {
    use crate::{SimRule, Subject};
    let (sim, server, _client) = start(SimConfig::default()).await;
    let crole = |name: &str, rules: Value| {
        sim.create(
            "clusterroles.rbac.authorization.k8s.io",
            json!({"metadata": {"name": name}, "rules": rules}),
        )
        .unwrap();
    };
    crole(
        "pod-reader",
        json!([{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]}]),
    );
    crole(
        "one-config",
        json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["app"]}]),
    );
    crole(
        "logs",
        json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}]),
    );
    crole(
        "discovery",
        json!([{"verbs": ["get"], "nonResourceURLs": ["/apis/*"]}]),
    );
    let bind = |key: &str, ns: Option<&str>, name: &str, role: (&str, &str), subject: Value| {
        let mut meta = json!({"name": name});
        if let Some(ns) = ns {
            meta["namespace"] = json!(ns);
        }
        sim.create(
            key,
            json!({"metadata": meta, "roleRef": {"kind": role.0, "name": role.1}, "subjects": [subject]}),
        )
        .unwrap();
    };
    let rb = "rolebindings.rbac.authorization.k8s.io";
    let crb = "clusterrolebindings.rbac.authorization.k8s.io";
    // A RoleBinding to a ClusterRole grants it in the binding's namespace only.
    bind(
        rb,
        Some("web"),
        "alice-pods",
        ("ClusterRole", "pod-reader"),
        json!({"kind": "User", "name": "alice"}),
    );
    bind(
        rb,
        Some("web"),
        "devs-config",
        ("ClusterRole", "one-config"),
        json!({"kind": "Group", "name": "devs"}),
    );
    bind(
        rb,
        Some("web"),
        "robot-logs",
        ("ClusterRole", "logs"),
        json!({"kind": "ServiceAccount", "name": "robot"}),
    );
    bind(
        crb,
        None,
        "everyone-discovers",
        ("ClusterRole", "discovery"),
        json!({"kind": "Group", "name": "system:authenticated"}),
    );
    bind(
        rb,
        Some("web"),
        "dangling",
        ("Role", "missing"),
        json!({"kind": "User", "name": "carol"}),
    );

    let res = |verb: &str, ns: &str, resource: &str, sub: &str, name: &str| json!({"verb": verb, "namespace": ns, "resource": resource, "subresource": sub, "name": name});
    let alice_web = sar(&server, "alice", &[], res("watch", "web", "pods", "", "")).await;
    assert!(allowed(&alice_web));
    assert_eq!(
        alice_web["reason"],
        "RBAC: allowed by RoleBinding \"alice-pods/web\" of ClusterRole \"pod-reader\" to User \"alice\""
    );
    assert!(!allowed(
        &sar(&server, "alice", &[], res("watch", "db", "pods", "", "")).await
    ));
    assert!(
        !allowed(&sar(&server, "alice", &[], res("watch", "", "pods", "", "")).await),
        "a RoleBinding never grants across namespaces"
    );
    assert!(!allowed(
        &sar(&server, "alice", &[], res("delete", "web", "pods", "", "a")).await
    ));
    // resourceNames: that object only, and never a list.
    assert!(allowed(
        &sar(
            &server,
            "bob",
            &["devs"],
            res("get", "web", "configmaps", "", "app")
        )
        .await
    ));
    assert!(!allowed(
        &sar(
            &server,
            "bob",
            &["devs"],
            res("get", "web", "configmaps", "", "other")
        )
        .await
    ));
    assert!(!allowed(
        &sar(
            &server,
            "bob",
            &["devs"],
            res("list", "web", "configmaps", "", "")
        )
        .await
    ));
    // A ServiceAccount subject defaults to the binding's namespace; */log is any log.
    let robot = "system:serviceaccount:web:robot";
    assert!(allowed(
        &sar(&server, robot, &[], res("get", "web", "pods", "log", "a")).await
    ));
    assert!(!allowed(
        &sar(&server, robot, &[], res("get", "web", "pods", "", "a")).await
    ));
    assert!(!allowed(
        &sar(
            &server,
            "system:serviceaccount:db:robot",
            &[],
            res("get", "web", "pods", "log", "a")
        )
        .await
    ));
    // Non-resource URLs, through a group.
    let discover = json!({"verb": "get", "path": "/apis/apps/v1"});
    assert!(allowed(
        &sar(&server, "x", &["system:authenticated"], discover.clone()).await
    ));
    assert!(!allowed(&sar(&server, "x", &[], discover).await));
    // An unresolvable role is named in the reason and grants nothing.
    let carol = sar(&server, "carol", &[], res("get", "web", "pods", "", "a")).await;
    assert!(!allowed(&carol));
    assert_eq!(
        carol["reason"],
        "RBAC: role.rbac.authorization.k8s.io \"missing\" not found"
    );
    // system:masters may do anything.
    assert!(allowed(
        &sar(
            &server,
            "root",
            &["system:masters"],
            res("delete", "", "nodes", "", "n1")
        )
        .await
    ));

    // SimRule writes objects that can be changed later like any other.
    sim.set_rules(vec![
        SimRule::read(
            Subject::User("dave".into()),
            &["deployments.apps"],
            &["web"],
        ),
        SimRule::read(Subject::Group("ops".into()), &["*"], &["*"]),
    ]);
    let deploy = |ns: &str| json!({"verb": "list", "namespace": ns, "group": "apps", "resource": "deployments"});
    assert!(allowed(&sar(&server, "dave", &[], deploy("web")).await));
    assert!(!allowed(&sar(&server, "dave", &[], deploy("db")).await));
    assert!(allowed(&sar(&server, "olga", &["ops"], deploy("")).await));
    sim.delete(rb, Some("web"), "kubefan-sim-rule-0").unwrap();
    assert!(!allowed(&sar(&server, "dave", &[], deploy("web")).await));
    sim.set_rules(vec![]);
    assert!(!allowed(&sar(&server, "olga", &["ops"], deploy("")).await));
    assert_eq!(
        sim.list(crb).0.len(),
        1,
        "objects not written by set_rules stay"
    );

    // A review that names neither kind of attributes, or nobody, is invalid.
    for spec in [
        json!({"user": "a"}),
        json!({"resourceAttributes": {"verb": "get"}}),
    ] {
        let resp = reqwest::Client::new()
            .post(format!(
                "{}/apis/authorization.k8s.io/v1/subjectaccessreviews",
                server.url()
            ))
            .json(&json!({"spec": spec}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 422);
    }
    assert_eq!(sim.auth_stats().access_reviews, 21);
    server.stop().await;
}

/// A request's status code and its `Status` (or any JSON) body.
async fn call(
    server: &SimServer,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(method, format!("{}{path}", server.url()));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let code = resp.status().as_u16();
    (code, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn rbac_mode_authenticates_and_authorizes_the_simulators_own_clients() {
    use crate::{AuthorizationMode, SimRule, SimUser, Subject};
    use reqwest::Method;
    let cfg = SimConfig {
        authorization: AuthorizationMode::Rbac,
        ..SimConfig::default()
    };
    let (sim, server, _) = start(cfg).await;
    sim.set_users(vec![
        SimUser::new("admin-token", "root", &["system:masters"]),
        SimUser::new("alice-token", "alice", &["devs"]),
    ]);
    sim.set_rules(vec![SimRule::read(
        Subject::Group("devs".into()),
        &["pods"],
        &["web"],
    )]);
    sim.create("pods", pod("a").ns("web").build()).unwrap();
    let roles: Vec<String> = sim
        .list("clusterroles.rbac.authorization.k8s.io")
        .0
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    for bootstrap in [
        "cluster-admin",
        "system:basic-user",
        "system:discovery",
        "system:public-info-viewer",
    ] {
        assert!(
            roles.iter().any(|r| r == bootstrap),
            "{bootstrap} in {roles:?}"
        );
    }

    // Through kube-rs with the user's token, as a gateway would call it.
    let alice = kube::Client::try_from(server.client_config_with_token("alice-token")).unwrap();
    let web: Api<DynamicObject> =
        Api::namespaced_with(alice.clone(), "web", &ApiResource::erase::<Pod>(&()));
    assert_eq!(
        web.list(&ListParams::default().limit(1))
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let mut w = web
        .watch(&WatchParams::default().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "a".to_owned())
    );
    match pods(&alice).list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
            assert_eq!(
                s.message,
                "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
    assert!(
        pods(&alice)
            .watch(&WatchParams::default(), "0")
            .await
            .is_err()
    );
    let d = Discovery::new(alice.clone()).run().await.unwrap();
    assert!(d.has_group("apps"), "authenticated users may discover");

    let (code, status) = call(
        &server,
        Method::GET,
        "/apis/apps/v1/namespaces/web/deployments/d",
        Some("alice-token"),
        None,
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "deployments.apps \"d\" is forbidden: User \"alice\" cannot get resource \"deployments\" in API group \"apps\" in the namespace \"web\""
    );
    assert_eq!(
        status["details"],
        json!({"name": "d", "group": "apps", "kind": "deployments"})
    );
    let (code, status) = call(&server, Method::GET, "/api/v1/pods", Some("stolen"), None).await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (401, Some("Unauthorized"))
    );
    // No token is system:anonymous: /version is public, discovery is not.
    assert_eq!(
        call(&server, Method::GET, "/version", None, None).await.0,
        200
    );
    let (code, status) = call(&server, Method::GET, "/api", None, None).await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "forbidden: User \"system:anonymous\" cannot get path \"/api\""
    );
    assert_eq!(
        call(
            &server,
            Method::GET,
            "/api/v1/pods",
            Some("admin-token"),
            None
        )
        .await
        .0,
        200
    );
    assert_eq!(
        call(&server, Method::GET, "/debug/stats", None, None)
            .await
            .0,
        200
    );

    // The caller's own access and identity.
    let ssar = |verb: &str, ns: &str| json!({"spec": {"resourceAttributes": {"verb": verb, "resource": "pods", "namespace": ns}}});
    let ssar_path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let (code, review) = call(
        &server,
        Method::POST,
        ssar_path,
        Some("alice-token"),
        Some(ssar("watch", "web")),
    )
    .await;
    assert_eq!((code, &review["status"]["allowed"]), (201, &json!(true)));
    let (_, review) = call(
        &server,
        Method::POST,
        ssar_path,
        Some("alice-token"),
        Some(ssar("watch", "")),
    )
    .await;
    assert_eq!(review["status"]["allowed"], false);
    let ssrr_path = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews";
    let (code, rules) = call(
        &server,
        Method::POST,
        ssrr_path,
        Some("alice-token"),
        Some(json!({"spec": {"namespace": "web"}})),
    )
    .await;
    assert_eq!(code, 201);
    let resource_rules = rules["status"]["resourceRules"].as_array().unwrap();
    assert!(
        resource_rules.contains(
            &json!({"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["pods"]})
        ),
        "{rules}"
    );
    assert!(
        resource_rules
            .iter()
            .any(|r| r["resources"][0] == "selfsubjectaccessreviews")
    );
    assert!(
        !rules["status"]["nonResourceRules"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let (_, rules) = call(
        &server,
        Method::POST,
        ssrr_path,
        Some("alice-token"),
        Some(json!({"spec": {"namespace": "db"}})),
    )
    .await;
    assert!(
        !rules["status"]["resourceRules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"][0] == "pods")
    );
    let (code, _) = call(
        &server,
        Method::POST,
        ssrr_path,
        Some("alice-token"),
        Some(json!({"spec": {}})),
    )
    .await;
    assert_eq!(code, 400, "a rules review needs a namespace");
    let (code, me) = call(
        &server,
        Method::POST,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        Some("alice-token"),
        Some(json!({})),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(
        me["status"]["userInfo"],
        json!({"username": "alice", "groups": ["devs", "system:authenticated"]})
    );

    // Access follows the objects: a removed binding takes it away.
    sim.delete(
        "rolebindings.rbac.authorization.k8s.io",
        Some("web"),
        "kubefan-sim-rule-0",
    )
    .unwrap();
    assert_eq!(
        call(
            &server,
            Method::GET,
            "/api/v1/namespaces/web/pods",
            Some("alice-token"),
            None
        )
        .await
        .0,
        403
    );
    let stats = sim.auth_stats();
    assert_eq!((stats.unauthorized, stats.forbidden), (1, 5));
    assert_eq!(
        (stats.self_access_reviews, stats.self_rules_reviews),
        (2, 3)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn by_default_requests_are_served_unchecked_and_self_reviews_still_read_rbac() {
    use crate::{SimRule, SimUser, Subject};
    use reqwest::Method;
    let (sim, server, _) = start(SimConfig::default()).await;
    sim.set_users(vec![SimUser::new("alice-token", "alice", &[])]);
    sim.set_rules(vec![SimRule::read(
        Subject::User("alice".into()),
        &["pods"],
        &["web"],
    )]);
    assert_eq!(
        call(&server, Method::GET, "/api/v1/pods", Some("anything"), None)
            .await
            .0,
        200
    );
    assert_eq!(
        call(&server, Method::GET, "/api/v1/pods", None, None)
            .await
            .0,
        200
    );
    assert!(
        sim.list("clusterroles.rbac.authorization.k8s.io")
            .0
            .iter()
            .all(|r| r["metadata"]["name"] != "cluster-admin"),
        "no bootstrap policy unless asked for"
    );
    let ssar_path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let body = json!({"spec": {"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "web"}}});
    let (_, review) = call(
        &server,
        Method::POST,
        ssar_path,
        Some("alice-token"),
        Some(body.clone()),
    )
    .await;
    assert_eq!(review["status"]["allowed"], true);
    let (_, review) = call(&server, Method::POST, ssar_path, None, Some(body.clone())).await;
    assert_eq!(
        review["status"]["allowed"], false,
        "system:anonymous has no binding"
    );
    assert_eq!(
        call(&server, Method::POST, ssar_path, Some("stolen"), Some(body))
            .await
            .0,
        401
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn token_reviews_check_audiences_and_revoked_tokens_stop_reviewing() {
    use crate::{AuthorizationMode, SimUser};
    use reqwest::Method;
    let cfg = SimConfig {
        authorization: AuthorizationMode::Rbac,
        ..SimConfig::default()
    };
    let (sim, server, _) = start(cfg).await;
    sim.set_users(vec![
        SimUser::new("alice-token", "alice", &["devs"]),
        SimUser::service_account("kubefan-token", "kubefan", "kubefan")
            .with_audiences(&["kubefan", "metrics"]),
    ]);
    let review = |token: &str, audiences: Option<Vec<&str>>| {
        let mut spec = json!({"token": token});
        if let Some(a) = audiences {
            spec["audiences"] = json!(a);
        }
        let server = &server;
        async move {
            let (code, body) = call(
                server,
                Method::POST,
                "/apis/authentication.k8s.io/v1/tokenreviews",
                Some("kubefan-token-unused"),
                Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})),
            )
            .await;
            (code, body["status"].clone())
        }
    };
    // The review endpoint itself needs a caller allowed to create reviews.
    let (code, _) = review("alice-token", None).await;
    assert_eq!(code, 401, "the caller's own token is checked first");
    sim.set_users(vec![
        SimUser::new("alice-token", "alice", &["devs"]),
        SimUser::service_account("kubefan-token", "kubefan", "kubefan")
            .with_audiences(&["kubefan", "metrics"]),
        SimUser::new("kubefan-token-unused", "reviewer", &["system:masters"]),
    ]);
    let api = "https://kubernetes.default.svc.cluster.local";
    let (code, status) = review("alice-token", None).await;
    assert_eq!(code, 201);
    assert_eq!(status["authenticated"], true);
    assert_eq!(status["audiences"], json!([api]));
    assert_eq!(
        status["user"]["groups"],
        json!(["devs", "system:authenticated"])
    );
    let (_, status) = review("alice-token", Some(vec!["kubefan"])).await;
    assert_eq!(status["authenticated"], false);
    assert_eq!(
        status["error"],
        format!("token audiences [\"{api}\"] is invalid for the target audiences [\"kubefan\"]")
    );
    // A token minted for kubefan reviews for kubefan, answered in the order asked.
    let (_, status) = review("kubefan-token", Some(vec!["other", "metrics", "kubefan"])).await;
    assert_eq!(status["authenticated"], true);
    assert_eq!(status["audiences"], json!(["metrics", "kubefan"]));
    assert_eq!(
        status["user"]["username"],
        "system:serviceaccount:kubefan:kubefan"
    );
    assert_eq!(
        status["user"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:kubefan",
            "system:authenticated"
        ])
    );
    let (_, status) = review("kubefan-token", None).await;
    assert_eq!(
        status["authenticated"], false,
        "not a token for the API server"
    );
    // ... so the API server itself does not take it.
    let (code, _) = call(
        &server,
        Method::GET,
        "/api/v1/pods",
        Some("kubefan-token"),
        None,
    )
    .await;
    assert_eq!(code, 401);

    // Revoked: the next review fails, and so do requests.
    assert_eq!(
        sim.token_reviews_of("alice-token"),
        2,
        "a refused caller's review is not answered"
    );
    assert!(sim.revoke_token("alice-token"));
    assert!(!sim.revoke_token("alice-token"));
    let (_, status) = review("alice-token", None).await;
    assert_eq!(
        (&status["authenticated"], &status["error"]),
        (&json!(false), &json!("invalid bearer token"))
    );
    assert_eq!(sim.token_reviews_of("alice-token"), 3);
    let (code, _) = call(
        &server,
        Method::GET,
        "/api/v1/namespaces/web/pods",
        Some("alice-token"),
        None,
    )
    .await;
    assert_eq!(code, 401);
    assert_eq!(sim.auth_stats().token_reviews, 5);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn custom_resource_definitions_are_objects_that_serve_their_storage_version() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let (sim, server, client) = start(SimConfig::default()).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "gadgets.example.org"},
        "spec": {
            "group": "example.org",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "kind": "Gadget", "shortNames": ["gd"]},
            "versions": [
                {"name": "v1alpha1", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object"}}},
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                 "selectableFields": [{"jsonPath": ".spec.color"}],
                 "additionalPrinterColumns": [{"name": "Color", "type": "string", "jsonPath": ".spec.color"}]}
            ]
        }
    }))
    .unwrap();
    let rv = sim.resource_version().to_string();
    let dynamic: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<CustomResourceDefinition>(&()),
    );
    let mut w = dynamic
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let made = crds.create(&PostParams::default(), &crd).await.unwrap();
    assert!(
        made.status.is_none_or(|s| s.conditions.is_none()),
        "status starts empty"
    );
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("ADDED", "gadgets.example.org".to_owned())
    );
    match next(&mut w).await.unwrap() {
        WatchEvent::Modified(o) => {
            let conditions = &o.data["status"]["conditions"];
            assert_eq!(conditions[1]["type"], "Established");
            assert_eq!(conditions[1]["status"], "True");
            assert_eq!(o.data["status"]["storedVersions"], json!(["v1"]));
            assert_eq!(o.data["status"]["acceptedNames"]["listKind"], "GadgetList");
        }
        other => panic!("expected the CRD established, got {other:?}"),
    }
    let listed = crds.get("gadgets.example.org").await.unwrap();
    let columns = listed.spec.versions[1]
        .additional_printer_columns
        .clone()
        .unwrap();
    assert_eq!(columns[0].json_path, ".spec.color");

    // The storage version is served, discovered, and selectable by its fields.
    let d = Discovery::new(client.clone()).run().await.unwrap();
    let (ar, _) = d
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(ar, _)| ar.plural == "gadgets")
        .expect("gadgets discovered");
    assert_eq!(ar.version, "v1");
    let gadgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    for (name, color) in [("g1", "red"), ("g2", "blue")] {
        let g = DynamicObject::new(name, &ar).data(json!({"spec": {"color": color}}));
        gadgets.create(&PostParams::default(), &g).await.unwrap();
    }
    let red = gadgets
        .list(&ListParams::default().fields("spec.color=red"))
        .await
        .unwrap();
    assert_eq!(red.items.iter().map(name).collect::<Vec<_>>(), ["g1"]);
    assert_eq!(
        list_names(
            &server,
            "/apis/example.org/v1/gadgets?fieldSelector=spec.size%3D1"
        )
        .await,
        Err((400, "field label not supported: spec.size".to_owned()))
    );
    let mut gw = gadgets
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    next(&mut gw).await.unwrap();
    next(&mut gw).await.unwrap();

    // A changed CRD changes what is served, keeping the objects.
    crds.patch(
        "gadgets.example.org",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"names": {"shortNames": ["gd", "gdt"]}}})),
    )
    .await
    .unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("MODIFIED", "gadgets.example.org".to_owned())
    );
    match next(&mut w).await.unwrap() {
        WatchEvent::Modified(o) => assert_eq!(
            o.data["status"]["acceptedNames"]["shortNames"],
            json!(["gd", "gdt"]),
            "the naming controller accepts the new names"
        ),
        other => panic!("expected the accepted names, got {other:?}"),
    }
    let (_, doc) = call(
        &server,
        reqwest::Method::GET,
        "/apis/example.org/v1",
        None,
        None,
    )
    .await;
    assert_eq!(doc["resources"][0]["shortNames"], json!(["gd", "gdt"]));
    assert_eq!(sim.list("gadgets.example.org").0.len(), 2);

    // Refused: invalid CRDs, and CRDs for what the server already serves.
    let bad: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "ingresses.networking.k8s.io"},
        "spec": {"group": "networking.k8s.io", "scope": "Namespaced",
                 "names": {"plural": "ingresses", "kind": "Ingress"},
                 "versions": [{"name": "v1", "served": true, "storage": true}]}
    }))
    .unwrap();
    match crds.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 422),
        other => panic!("expected 422, got {other:?}"),
    }
    let mut nodots = bad.clone();
    nodots.metadata.name = Some("things.nodots".into());
    nodots.spec.group = "nodots".into();
    nodots.spec.names.plural = "things".into();
    match crds.create(&PostParams::default(), &nodots).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422);
            assert!(s.message.contains("at least one dot"), "{}", s.message);
        }
        other => panic!("expected 422, got {other:?}"),
    }

    // Deleting the CRD removes the resource and ends its watches.
    crds.delete("gadgets.example.org", &Default::default())
        .await
        .unwrap();
    assert_eq!(
        brief(&next(&mut w).await.unwrap()),
        ("DELETED", "gadgets.example.org".to_owned())
    );
    assert!(
        next(&mut gw).await.is_none(),
        "the custom objects' watch ends"
    );
    match gadgets.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404),
        other => panic!("expected 404, got {other:?}"),
    }

    // The Rust API's register writes a CRD object.
    sim.register(
        ResourceDef::new("example.com", "v1", "widgets", "Widget", false).with_printer_columns(
            vec![json!({"name": "Size", "type": "integer", "jsonPath": ".spec.size"})],
        ),
    );
    let widgets_crd = sim
        .get(
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
            "widgets.example.com",
        )
        .expect("register writes the CRD");
    assert_eq!(widgets_crd["spec"]["scope"], "Cluster");
    assert_eq!(
        widgets_crd["spec"]["versions"][0]["additionalPrinterColumns"][0]["name"],
        "Size"
    );
    assert!(sim.unregister("widgets.example.com"));
    assert!(
        sim.get(
            "customresourcedefinitions.apiextensions.k8s.io",
            None,
            "widgets.example.com"
        )
        .is_none()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_one_item_list_carries_the_current_resource_version_and_is_counted() {
    let (sim, server, client) = start(SimConfig::default()).await;
    for i in 0..5 {
        sim.create("pods", pod(&format!("p{i}")).build()).unwrap();
    }
    // The latest write is to another resource: the probe still sees it.
    sim.create("nodes", json!({"metadata": {"name": "n1"}}))
        .unwrap();
    let api = pods(&client);
    let before = sim.stats();
    let probe = api.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(
        probe.metadata.resource_version,
        Some(sim.resource_version().to_string())
    );
    assert_eq!(probe.items.len(), 1);
    assert_eq!(probe.metadata.remaining_item_count, Some(4));
    sim.merge_patch(
        "nodes",
        None,
        "n1",
        &json!({"metadata": {"labels": {"x": "1"}}}),
    )
    .unwrap();
    let again = api.list(&ListParams::default().limit(1)).await.unwrap();
    assert_eq!(
        again.metadata.resource_version,
        Some(sim.resource_version().to_string()),
        "each probe is as new as the store"
    );
    let after = sim.stats();
    assert_eq!(
        after.resource("pods").list_requests - before.resource("pods").list_requests,
        2
    );
    assert_eq!(
        after.lists("pods").limited - before.lists("pods").limited,
        2
    );
    assert_eq!(after.lists("pods").items - before.lists("pods").items, 2);
    api.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        sim.stats().lists("pods").items,
        7,
        "an unlimited list counts every item"
    );
    let http: Value = reqwest::get(format!("{}/debug/stats", server.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(http["lists"]["pods"], json!({"limited": 2, "items": 7}));
    assert_eq!(http["resources"]["pods"]["list_requests"], 3);
    server.stop().await;
}
