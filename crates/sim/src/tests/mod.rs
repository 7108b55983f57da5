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
async fn exact_list_is_the_state_at_that_resource_version_until_the_history_is_gone() {
    use kube::api::VersionMatch;
    let (sim, server, client) = start(SimConfig::default()).await;
    for i in 0..4 {
        sim.create("pods", pod(&format!("p{i}")).build()).unwrap();
    }
    let api = pods(&client);
    let then = api.list(&ListParams::default()).await.unwrap();
    let at = then.metadata.resource_version.clone().unwrap();
    // After `at`: one pod changed, one deleted, one added, one changed twice.
    let patch = |v: &str| json!({"metadata": {"labels": {"v": v}}});
    sim.merge_patch("pods", None, "p1", &patch("1")).unwrap();
    sim.delete("pods", None, "p2").unwrap();
    sim.create("pods", pod("p9").build()).unwrap();
    sim.merge_patch("pods", None, "p3", &patch("1")).unwrap();
    sim.merge_patch("pods", None, "p3", &patch("2")).unwrap();
    let exact = |limit: Option<u32>| {
        let lp = ListParams::default().at(&at).matching(VersionMatch::Exact);
        match limit {
            Some(l) => lp.limit(l),
            None => lp,
        }
    };
    // The same names and the same versions (resourceVersions, labels) as
    // the list taken at `at`, in one page or in pages.
    let versions = |items: &[DynamicObject]| -> Vec<(String, String, Value)> {
        items
            .iter()
            .map(|o| {
                let labels = json!(o.metadata.labels.clone().unwrap_or_default());
                (
                    name(o),
                    o.metadata.resource_version.clone().unwrap(),
                    labels,
                )
            })
            .collect()
    };
    let whole = api.list(&exact(None)).await.unwrap();
    assert_eq!(
        whole.metadata.resource_version.as_deref(),
        Some(at.as_str())
    );
    assert_eq!(versions(&whole.items), versions(&then.items));
    let first = api.list(&exact(Some(3))).await.unwrap();
    assert_eq!(
        first.metadata.resource_version.as_deref(),
        Some(at.as_str())
    );
    let token = first.metadata.continue_.clone().unwrap();
    let rest = api
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(rest.metadata.resource_version.as_deref(), Some(at.as_str()));
    let paged: Vec<_> = first.items.iter().chain(&rest.items).cloned().collect();
    assert_eq!(versions(&paged), versions(&then.items));
    // The current state is unaffected by reading the past.
    let now = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        now.items.iter().map(name).collect::<Vec<_>>(),
        ["p0", "p1", "p3", "p9"]
    );

    let status = |err: kube::Error| match err {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("expected a Status, got {other:?}"),
    };
    // Asked through reqwest: kube-rs retries a 504 for minutes. Not reached
    // yet: 504, as kube-apiserver answers "Too large resource version";
    // and what kube-rs never sends (it drops the resourceVersion of a page
    // with a continue token) is refused as kube-apiserver refuses it.
    let ahead = sim.resource_version() + 5;
    for (query, code) in [
        (
            format!("resourceVersionMatch=Exact&resourceVersion={ahead}"),
            504,
        ),
        (format!("resourceVersion={ahead}"), 504),
        (format!("resourceVersion={at}&continue={token}"), 400),
        (
            format!("resourceVersionMatch=Exact&resourceVersion={at}&continue={token}"),
            422,
        ),
        ("resourceVersionMatch=Exact".to_owned(), 422),
        (
            "resourceVersionMatch=Exact&resourceVersion=0".to_owned(),
            422,
        ),
        (
            format!("resourceVersionMatch=Newest&resourceVersion={at}"),
            422,
        ),
    ] {
        let url = format!("{}/api/v1/pods?limit=3&{query}", server.url());
        let answer = reqwest::get(&url).await.unwrap();
        assert_eq!(answer.status().as_u16(), code, "{query}");
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["kind"], "Status", "{query}");
    }
    // Compacted: 410, and a client lists at the latest instead.
    sim.compact();
    let err = api.list(&exact(None)).await.unwrap_err();
    assert_eq!(status(err), (410, "Expired".to_owned()));
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
async fn the_churn_rate_is_set_over_http_and_a_bad_rate_is_a_400() {
    let (sim, server, _client) = start(SimConfig::default()).await;
    let post = |q: &'static str| {
        let url = format!("{}/debug/churn{q}", server.url());
        async move { reqwest::Client::new().post(url).send().await.unwrap() }
    };
    for bad in ["", "?rate=fast", "?rate=-1", "?rate=NaN", "?rate=1e9"] {
        let resp = post(bad).await;
        assert_eq!(resp.status(), 400, "{bad}");
        let status: Value = resp.json().await.unwrap();
        assert!(
            status["message"].as_str().unwrap().contains("rate"),
            "{bad}: {status}"
        );
    }
    assert_eq!(*sim.churn_rate().borrow(), None, "no bad rate was taken");
    let resp = post("?rate=0").await;
    assert!(resp.status().is_success());
    assert_eq!(*sim.churn_rate().borrow(), Some(0.0));
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
            http.get(url(&format!("{pods}?sendInitialEvents=false"))),
            422,
            "Invalid",
        ),
        (
            http.get(url(&format!(
                "{pods}?watch=1&timeoutSeconds=9223372036854775808"
            ))),
            400,
            "BadRequest",
        ),
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
async fn a_negative_timeout_ends_the_watch_at_once_and_zero_is_the_default() {
    let (sim, server, _client) = start(SimConfig::default()).await;
    sim.create("pods", pod("a").build()).unwrap();
    let url = |t: &str| format!("{}/api/v1/pods?watch=1&timeoutSeconds={t}", server.url());
    let resp = reqwest::get(url("-1")).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = tokio::time::timeout(Duration::from_secs(10), resp.text())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(body, "", "not even the initial events");
    for t in ["0", "9223372036854775807"] {
        let mut resp = reqwest::get(url(t)).await.unwrap();
        let first = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
            .await
            .unwrap()
            .unwrap();
        assert!(
            first.is_some_and(|c| c.starts_with(br#"{"type":"ADDED""#)),
            "{t}"
        );
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stalled_watch_resumes_and_an_overflowing_one_ends_without_an_error() {
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
    // The four it had queued, then the end: no error (kube-apiserver
    // closes an unresponsive watcher; its client watches again).
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(got.iter().all(|(ty, _)| *ty == "ADDED"), "{got:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn history_is_bounded_by_bytes_and_reported_in_debug_stats() {
    let cfg = SimConfig {
        history_bytes: 40_000,
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
    assert!(stored.history_bytes <= 40_000, "{stored:?}");
    assert!(
        (5..30).contains(&stored.history_events),
        "about 4 KB a pod: {stored:?}"
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
    assert_eq!(http["history_limit_bytes"], 40_000);
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
    assert_eq!(
        after.lists("pods").probes - before.lists("pods").probes,
        2,
        "limit=1 lists are probes"
    );
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
    assert_eq!(
        http["lists"]["pods"],
        json!({"limited": 2, "probes": 2, "items": 7})
    );
    assert_eq!(http["resources"]["pods"]["list_requests"], 3);
    server.stop().await;
}

mod access;
mod kinds;
mod rbac;
