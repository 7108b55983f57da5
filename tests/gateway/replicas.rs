//! Several replicas behind one Service: two gateways on one simulated API
//! server. Event ids are resourceVersions, so a subscriber that moves from
//! one replica to the other mid-stream resumes with `Last-Event-ID`: no gap,
//! no duplicate, no RESET.

use kubefan::app::App;
use kubefan_sim::pod;
use serde_json::json;

use crate::sse::{pods_of, seeded, subscribed};
use crate::support::{ClientView, SseClient, WAIT, spawn, test_config};

/// Waits until `app`'s hub for `resource` has taken in every upstream
/// change up to `rv`.
async fn caught_up(app: &App, resource: &str, rv: u64) {
    let hub = app
        .informers()
        .hub(resource)
        .await
        .expect("resource resolves");
    assert!(hub.wait_synced(WAIT).await, "{resource} did not sync");
    assert!(
        hub.wait_for_rv(rv, WAIT).await,
        "replica did not reach resourceVersion {rv}"
    );
}

/// A burst of writes (creates, relabels, moves, deletes); returns the
/// resourceVersion of each, in order.
fn writes(sim: &kubefan_sim::Sim, round: u32, n: u32) -> Vec<u64> {
    let rv = |v: serde_json::Value| {
        v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let mut rvs = Vec::new();
    for i in 0..n {
        let name = format!("r{round}-{}", i / 3);
        let written = match i % 3 {
            0 => sim.create("pods", pod(&name).ns("web").node("node-0").build()),
            1 => sim.merge_patch(
                "pods",
                Some("web"),
                &name,
                &json!({"spec": {"nodeName": "node-1"}, "metadata": {"labels": {"i": i.to_string()}}}),
            ),
            _ if i % 2 == 0 => sim.delete("pods", Some("web"), &name),
            _ => sim.merge_patch(
                "pods",
                Some("web"),
                &name,
                &json!({"status": {"phase": "Succeeded"}}),
            ),
        };
        rvs.push(rv(written.expect("sim write")));
    }
    rvs
}

async fn read_until(sse: &mut SseClient, view: &mut ClientView, rv: u64) {
    view.follow(sse, rv).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_moving_to_another_replica_resumes_with_no_gap_duplicate_or_reset() {
    let a = spawn(seeded(40), test_config(&["pods"])).await;
    a.synced("pods").await;
    let client = kube::Client::try_from(a.server.client_config()).unwrap();
    let b = App::build(test_config(&["pods"]), client)
        .await
        .expect("second replica starts");
    let b_base = format!("http://{}", b.local_addr());
    caught_up(&b, "pods", a.sim.resource_version()).await;

    // On replica A: the snapshot, then part of the changes.
    let (mut sse, mut view) = subscribed(&a, "/stream/pods").await;
    let first = writes(&a.sim, 1, 30);
    read_until(&mut sse, &mut view, *first.last().unwrap()).await;
    drop(sse);
    let left_at = view.last_id.clone().expect("an id to resume from");

    // While it is away, more changes; replica B takes them in.
    let second = writes(&a.sim, 2, 30);
    let (objects, rv) = pods_of(&a.sim);
    caught_up(&b, "pods", rv).await;

    // Reconnect to replica B, as EventSource would: same URL, Last-Event-ID.
    let resp = tokio::time::timeout(
        WAIT,
        a.http
            .get(format!("{b_base}/stream/pods"))
            .header("Last-Event-ID", &left_at)
            .send(),
    )
    .await
    .expect("response in time")
    .expect("request");
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    view.resume();
    read_until(&mut sse, &mut view, rv).await;

    assert!(view.resets.is_empty(), "no RESET: {:?}", view.resets);
    assert_eq!(view.snapshots, 1, "one snapshot, from replica A");
    // Every write arrived exactly once, in order, across both replicas.
    let got: Vec<u64> = view.changes.iter().map(|(_, rv)| *rv).collect();
    let want: Vec<u64> = first.iter().chain(&second).copied().collect();
    assert_eq!(got, want, "changes received across the move");
    view.assert_matches(&objects);

    // Each replica holds its own single watch.
    let stats = a.sim.stats().resource("pods");
    assert_eq!(stats.open_watches, 2, "{stats:?}");
    assert_eq!(stats.list_requests, 2, "{stats:?}");
    drop(sse);
    tokio::time::timeout(WAIT, b.stop())
        .await
        .expect("replica B stops");
    a.stop().await;
}
