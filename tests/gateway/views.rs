//! Views end to end: selectors (with enter/leave transitions), projection,
//! merge-patch deltas, and one encoding per distinct view.

use std::time::Duration;

use futures::future::join_all;
use kubefan::hub::projection::Projection;
use kubefan::selector::{FieldSelector, LabelSelector};
use kubefan_sim::{Sim, pod};
use serde_json::{Value, json};

use crate::sse::{pods_of, subscribed};
use crate::support::{ClientView, SseClient, TestEnv, WAIT, sim_config, spawn, test_config};

/// One kind of dashboard: its query, and how the test computes its truth.
struct Dashboard {
    query: &'static str,
    labels: &'static str,
    fields: &'static str,
    projection: Option<&'static str>,
}

const DASHBOARDS: &[Dashboard] = &[
    // Pods on nodes, web and db only: label transitions, projection.
    Dashboard {
        query: "labelSelector=app%20in%20(web,db)&fields=spec.nodeName,status.phase,metadata.labels",
        labels: "app in (web,db)",
        fields: "",
        projection: Some("spec.nodeName,status.phase,metadata.labels"),
    },
    // One node's pods, phase only, as merge patches: node moves enter/leave.
    Dashboard {
        query: "fieldSelector=spec.nodeName%3Dnode-1&fields=status.phase&delta=merge-patch",
        labels: "",
        fields: "spec.nodeName=node-1",
        projection: Some("status.phase"),
    },
    // Whole objects by label and selectable field: the hub's own frames,
    // retyped as pods enter and leave (no view cache).
    Dashboard {
        query: "labelSelector=tier%3Dfrontend&fieldSelector=status.phase!%3DFailed",
        labels: "tier=frontend",
        fields: "status.phase!=Failed",
        projection: None,
    },
    // Any dotted path, whole objects as merge patches.
    Dashboard {
        query: "fieldSelector=metadata.labels.tier!%3Dbackend&delta=merge-patch&namespace=web,batch",
        labels: "",
        fields: "metadata.labels.tier!=backend",
        projection: None,
    },
];

impl Dashboard {
    fn truth(&self, sim: &Sim, namespaces: &[&str]) -> Vec<Value> {
        let labels = LabelSelector::parse(self.labels).unwrap();
        let fields = FieldSelector::parse_any(self.fields).unwrap();
        sim.list("pods")
            .0
            .into_iter()
            .filter(|o| labels.matches(o) && fields.matches(o))
            .filter(|o| {
                namespaces.is_empty()
                    || namespaces.contains(&o["metadata"]["namespace"].as_str().unwrap())
            })
            .collect()
    }

    fn namespaces(&self) -> Vec<&'static str> {
        if self.query.contains("namespace=web,batch") {
            vec!["web", "batch"]
        } else {
            vec![]
        }
    }
}

fn seed(sim: &Sim) {
    for i in 0..40 {
        let app = ["web", "db", "cache"][i % 3];
        let tier = ["frontend", "backend"][i % 2];
        let ns = ["web", "batch", "default"][i % 3];
        let mut p = pod(&format!("p{i}"))
            .ns(ns)
            .label("app", app)
            .label("tier", tier);
        if i % 4 != 0 {
            p = p.node(&format!("node-{}", i % 3));
        }
        sim.create("pods", p.build()).unwrap();
    }
}

/// Label changes, node moves, phase changes, annotation-only changes,
/// creations and deletions.
fn churn(sim: &Sim, round: usize) {
    let (pods, _) = sim.list("pods");
    for (i, o) in pods.iter().enumerate() {
        let (ns, name) = (
            o["metadata"]["namespace"].as_str().unwrap(),
            o["metadata"]["name"].as_str().unwrap(),
        );
        let patch = match (i + round) % 6 {
            0 => {
                json!({"metadata": {"labels": {"app": (["web", "db", "cache"][(i + round) % 3])}}})
            }
            1 => json!({"spec": {"nodeName": format!("node-{}", (i + round) % 3)}}),
            2 => {
                json!({"status": {"phase": (["Running", "Succeeded", "Failed"][(i + round) % 3])}})
            }
            3 => json!({"metadata": {"annotations": {"touched": round.to_string()}}}),
            4 => {
                json!({"metadata": {"labels": {"tier": (["frontend", "backend"][(i + round) % 2])}}})
            }
            _ => continue,
        };
        sim.merge_patch("pods", Some(ns), name, &patch).unwrap();
    }
    let victim = &pods[round % pods.len()]["metadata"];
    sim.delete(
        "pods",
        victim["namespace"].as_str(),
        victim["name"].as_str().unwrap(),
    )
    .unwrap();
    sim.create(
        "pods",
        pod(&format!("new-{round}"))
            .ns("web")
            .node("node-1")
            .label("app", "web")
            .label("tier", "frontend")
            .build(),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn differently_filtered_and_projected_subscribers_converge_under_churn() {
    let sim = Sim::new(sim_config());
    seed(&sim);
    let env = spawn(sim, test_config(&["pods"])).await;
    env.synced("pods").await;
    let mut clients: Vec<(SseClient, ClientView)> = Vec::new();
    for d in DASHBOARDS {
        clients.push(subscribed(&env, &format!("/stream/pods?{}", d.query)).await);
    }
    for (d, (_, view)) in DASHBOARDS.iter().zip(&clients) {
        let projection = d.projection.map(|p| Projection::parse(p).unwrap());
        view.assert_matches_view(&d.truth(&env.sim, &d.namespaces()), projection.as_ref());
    }
    for round in 0..6 {
        churn(&env.sim, round);
    }
    let (_, rv) = pods_of(&env.sim);
    for (d, (sse, view)) in DASHBOARDS.iter().zip(&mut clients) {
        // Their positions advance to rv through events or progress bookmarks.
        view.follow(sse, rv).await;
        let projection = d.projection.map(|p| Projection::parse(p).unwrap());
        view.assert_matches_view(&d.truth(&env.sim, &d.namespaces()), projection.as_ref());
        assert!(view.resets.is_empty());
        let kinds = |k: &str| view.changes.iter().filter(|(t, _)| t == k).count();
        assert!(
            kinds("ADDED") > 1 && kinds("DELETED") > 1,
            "{}: enter and leave events: {:?}",
            d.query,
            view.changes
        );
        if d.query.contains("merge-patch") {
            assert!(view.patches > 0, "{}: merge patches were sent", d.query);
        }
    }
    // A late joiner of each view agrees.
    for d in DASHBOARDS {
        let (_, view) = subscribed(&env, &format!("/stream/pods?{}", d.query)).await;
        let projection = d.projection.map(|p| Projection::parse(p).unwrap());
        view.assert_matches_view(&d.truth(&env.sim, &d.namespaces()), projection.as_ref());
    }
    env.stop().await;
}

async fn metric(env: &TestEnv, name: &str) -> u64 {
    let text = env.metrics().await;
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_subscriptions_share_one_encoding_and_unchanged_projections_are_not_sent() {
    let mut cfg = test_config(&["pods"]);
    cfg.stream.keepalive = Duration::from_millis(200);
    let sim = Sim::new(sim_config());
    seed(&sim);
    let env = spawn(sim, cfg).await;
    env.synced("pods").await;
    let query = "/stream/pods?fields=status.phase&namespace=web";
    let mut clients = join_all((0..100).map(|_| subscribed(&env, query))).await;
    let encodings = "kubefan_view_encodings_total{resource=\"pods\"}";
    let before = metric(&env, encodings).await;
    assert_eq!(
        metric(&env, "kubefan_views{resource=\"pods\"}").await,
        1,
        "one distinct view"
    );
    // Ten phase changes in the view: ten encodings for a hundred subscribers.
    let web: Vec<String> = env
        .sim
        .list("pods")
        .0
        .iter()
        .filter(|o| o["metadata"]["namespace"] == "web")
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let mut last = 0;
    for (i, name) in web.iter().cycle().take(10).enumerate() {
        let phase = ["Failed", "Succeeded"][i % 2];
        let o = env
            .sim
            .merge_patch(
                "pods",
                Some("web"),
                name,
                &json!({"status": {"phase": format!("{phase}{i}")}}),
            )
            .unwrap();
        last = crate::support::rv_of(&o);
    }
    join_all(clients.iter_mut().map(|(sse, view)| async move {
        view.follow(sse, last).await;
        assert_eq!(view.changes.len(), 10);
    }))
    .await;
    assert_eq!(
        metric(&env, encodings).await - before,
        10,
        "one encoding per event, not one per subscriber"
    );

    // An annotation-only change is not sent to a phase-only view, but the
    // position advances: the next message is a BOOKMARK at that change.
    let o = env
        .sim
        .merge_patch(
            "pods",
            Some("web"),
            &web[0],
            &json!({"metadata": {"annotations": {"note": "x"}}}),
        )
        .unwrap();
    let rv = crate::support::rv_of(&o);
    let (sse, view) = &mut clients[0];
    let ev = tokio::time::timeout(WAIT, sse.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (ev.event.as_str(), ev.id.clone()),
        ("BOOKMARK", Some(rv.to_string())),
        "{ev:?}"
    );
    view.apply(&ev);
    assert_eq!(
        view.changes.len(),
        10,
        "no MODIFIED for a change the view does not show"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_that_mean_the_same_in_another_order_share_one_view() {
    let sim = Sim::new(sim_config());
    seed(&sim);
    let env = spawn(sim, test_config(&["pods"])).await;
    env.synced("pods").await;
    let views = "kubefan_views{resource=\"pods\"}";
    let (_a, first) = subscribed(
        &env,
        "/stream/pods?namespace=web,batch&labelSelector=app%20in%20(web,db),tier",
    )
    .await;
    let (_b, second) = subscribed(
        &env,
        "/stream/pods?namespace=batch,web,batch&labelSelector=tier,app%20in%20(db,web,db)",
    )
    .await;
    assert!(!first.objects.is_empty());
    assert_eq!(first.objects, second.objects, "the same objects");
    assert_eq!(metric(&env, views).await, 1, "one view for both spellings");
    // A different meaning is a different view.
    let (_c, _) = subscribed(
        &env,
        "/stream/pods?namespace=web&labelSelector=app%20in%20(web,db),tier",
    )
    .await;
    assert_eq!(
        metric(&env, views).await,
        2,
        "another view for other options"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_view_options_say_what_is_wrong() {
    let env = spawn(Sim::new(sim_config()), test_config(&["pods"])).await;
    for (query, mentions) in [
        ("labelSelector=app%20in%20web", "labelSelector"),
        ("fieldSelector=spec..x%3D1", "fieldSelector"),
        ("fields=spec.node%20name", "fields"),
        ("fields=", "fields"),
        ("delta=json-patch", "delta"),
    ] {
        let (status, body) = env.get_json(&format!("/stream/pods?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        crate::support::validate_status(&body);
        assert!(
            body["message"].as_str().unwrap().contains(mentions),
            "{query}: {body}"
        );
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_options_work_the_same_over_websocket() {
    let sim = Sim::new(sim_config());
    seed(&sim);
    let env = spawn(sim, test_config(&["pods"])).await;
    env.synced("pods").await;
    let d = &DASHBOARDS[0];
    let projection = d.projection.map(|p| Projection::parse(p).unwrap());
    // Single stream, upgraded.
    let (mut single, mut single_view) =
        crate::ws::subscribed(&env, &format!("/stream/pods?{}", d.query)).await;
    // Multiplexed, the same options as subscribe fields, and a patch view.
    let mut mux = crate::ws::WsClient::connect(&env, "/ws").await;
    mux.subscribe(json!({"op": "subscribe", "id": "a", "resource": "pods",
        "labelSelector": d.labels, "fields": d.projection.unwrap()}))
        .await;
    mux.subscribe(json!({"op": "subscribe", "id": "b", "resource": "pods",
        "fieldSelector": "spec.nodeName=node-1", "fields": "status.phase", "delta": "merge-patch"}))
        .await;
    mux.subscribe(json!({"op": "subscribe", "id": "bad", "resource": "pods", "fields": "spec..x"}))
        .await;
    for round in 0..4 {
        churn(&env.sim, round);
    }
    let (_, rv) = pods_of(&env.sim);
    crate::ws::follow(&mut single, &mut single_view, rv).await;
    single_view.assert_matches_view(&d.truth(&env.sim, &[]), projection.as_ref());
    let mut views: std::collections::HashMap<String, ClientView> = std::collections::HashMap::new();
    let mut bad_error = None;
    while !(views.get("a").is_some_and(|v| v.settled(rv))
        && views.get("b").is_some_and(|v| v.settled(rv)))
    {
        let msg = mux.next().await;
        let sub = msg["sub"].as_str().unwrap().to_string();
        if sub == "bad" {
            bad_error = Some(msg);
            continue;
        }
        views.entry(sub).or_default().apply(&crate::ws::event(&msg));
    }
    views["a"].assert_matches_view(&d.truth(&env.sim, &[]), projection.as_ref());
    let b_truth = DASHBOARDS[1].truth(&env.sim, &[]);
    views["b"].assert_matches_view(&b_truth, Some(&Projection::parse("status.phase").unwrap()));
    assert!(views["b"].patches > 0);
    let bad = bad_error.expect("an error for the bad subscription");
    assert_eq!(bad["type"], "ERROR");
    assert!(
        bad["object"]["message"]
            .as_str()
            .unwrap()
            .contains("fields"),
        "{bad}"
    );
    env.stop().await;
}
