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

/// Reconnects to `base` as EventSource does (same URL, `Last-Event-ID`)
/// and reads up to `rv`; returns the stream, still open.
async fn come_back(
    http: &reqwest::Client,
    base: &str,
    left_at: &str,
    view: &mut ClientView,
    rv: u64,
) -> SseClient {
    let resp = tokio::time::timeout(
        WAIT,
        http.get(format!("{base}/stream/pods"))
            .header("Last-Event-ID", left_at)
            .send(),
    )
    .await
    .expect("response in time")
    .expect("request");
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    view.resume();
    read_until(&mut sse, view, rv).await;
    sse
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
    let sse = come_back(&a.http, &b_base, &left_at, &mut view, rv).await;

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
    // Each got its state through its watch (a streaming list).
    assert_eq!(
        (stats.watch_requests, stats.list_requests),
        (2, 0),
        "{stats:?}"
    );
    drop(sse);
    tokio::time::timeout(WAIT, b.stop())
        .await
        .expect("replica B stops");
    a.stop().await;
}

/// A state directory removed when the test ends.
struct StateDir(std::path::PathBuf);

impl StateDir {
    fn new() -> StateDir {
        StateDir(std::env::temp_dir().join(format!("kubefan-state-{}", uuid::Uuid::new_v4())))
    }

    /// `test_config` keeping positions here, for the upstream at `url`.
    fn config(&self, url: &str) -> kubefan::config::Config {
        let mut cfg = test_config(&["pods"]);
        cfg.upstream.positions = Some(kubefan::upstream::PositionsConfig {
            dir: self.0.clone(),
            upstream: url.to_owned(),
        });
        cfg
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts a gateway again on `server`, keeping positions in `state`, and
/// brings the subscriber back to it as EventSource does (same URL,
/// `Last-Event-ID`), reading up to `rv`. Returns the new gateway.
async fn started_again(
    state: &StateDir,
    server: &kubefan_sim::SimServer,
    left_at: &str,
    view: &mut ClientView,
    rv: u64,
) -> App {
    let client = kube::Client::try_from(server.client_config()).unwrap();
    let again = App::build(state.config("the sim"), client)
        .await
        .expect("gateway starts again");
    let base = format!("http://{}", again.local_addr());
    come_back(&reqwest::Client::new(), &base, left_at, view, rv).await;
    again
}

/// A gateway keeping positions in `state`, followed by one subscriber
/// through a burst of writes, then stopped; `gone` runs while it is down.
/// Returns the sim, its server, the subscriber's view and the id it
/// resumes from.
async fn stopped_after_a_subscriber(
    state: &StateDir,
    gone: impl FnOnce(&kubefan_sim::Sim),
) -> (kubefan_sim::Sim, kubefan_sim::SimServer, ClientView, String) {
    let env = spawn(seeded(40), state.config("the sim")).await;
    env.synced("pods").await;
    let (mut sse, mut view) = subscribed(&env, "/stream/pods").await;
    let first = writes(&env.sim, 1, 30);
    read_until(&mut sse, &mut view, *first.last().unwrap()).await;
    drop(sse);
    let left_at = view.last_id.clone().expect("an id to resume from");
    let crate::support::TestEnv {
        sim, server, app, ..
    } = env;
    tokio::time::timeout(WAIT, app.stop())
        .await
        .expect("gateway stops");
    gone(&sim);
    (sim, server, view, left_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_gateway_resumes_its_clients_from_its_saved_position() {
    let state = StateDir::new();
    let mut missed = Vec::new();
    let (sim, server, mut view, left_at) =
        stopped_after_a_subscriber(&state, |sim| missed = writes(sim, 2, 30)).await;
    let lists_before = sim.stats().resource("pods").list_requests;
    let (objects, rv) = pods_of(&sim);
    let again = started_again(&state, &server, &left_at, &mut view, rv).await;

    // Exactly what was missed, and no snapshot: the new process listed at
    // the old one's position, so its log holds every change since.
    assert!(view.resets.is_empty(), "no RESET: {:?}", view.resets);
    assert_eq!(view.snapshots, 1, "the first process's snapshot only");
    let got: Vec<u64> = view.changes.iter().map(|(_, rv)| *rv).collect();
    assert_eq!(
        got[got.len() - missed.len()..],
        missed[..],
        "the missed changes, in order"
    );
    view.assert_matches(&objects);
    // One LIST (one page) by the new process, as without a position.
    assert_eq!(sim.stats().resource("pods").list_requests, lists_before + 1);
    tokio::time::timeout(WAIT, again.stop())
        .await
        .expect("gateway stops");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_position_the_upstream_compacted_away_costs_a_snapshot_not_an_outage() {
    let state = StateDir::new();
    let (sim, server, mut view, left_at) = stopped_after_a_subscriber(&state, |sim| {
        writes(sim, 2, 30);
        sim.compact();
    })
    .await;
    let before = sim.stats().resource("pods");
    let (objects, rv) = pods_of(&sim);
    let again = started_again(&state, &server, &left_at, &mut view, rv).await;

    // The LIST at the position answered 410; the ordinary list (a
    // streaming one) followed at once, and the client got a RESET and a
    // fresh snapshot.
    assert_eq!(view.resets.len(), 1, "{:?}", view.resets);
    assert_eq!(view.snapshots, 2);
    view.assert_matches(&objects);
    let after = sim.stats().resource("pods");
    assert_eq!(after.list_requests, before.list_requests + 1, "{after:?}");
    assert_eq!(after.watch_requests, before.watch_requests + 1, "{after:?}");
    tokio::time::timeout(WAIT, again.stop())
        .await
        .expect("gateway stops");
    server.stop().await;
}
