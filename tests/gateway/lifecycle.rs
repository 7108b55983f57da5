//! Any resource, on demand: informers that start with their first
//! subscriber and stop after an idle grace period, resources that appear
//! and disappear upstream, and the allow/deny policy, all counted on the
//! simulated API server.

use std::sync::Arc;
use std::time::Duration;

use kubefan::config::Config;
use kubefan::hub::Hub;
use kubefan_sim::{ResourceDef, ResourceStats, Sim};
use serde_json::{Value, json};

use crate::sse::subscribed;
use crate::support::{TestEnv, WAIT, sim_config, spawn, test_config, validate_status};

const GRACE: Duration = Duration::from_millis(300);

/// Gateway settings with a short idle grace, and keep-alives frequent
/// enough that a client that hangs up is noticed at once.
fn lifecycle_config(boot: &[&str]) -> Config {
    let mut cfg = test_config(boot);
    cfg.upstream.idle_grace = GRACE;
    cfg.stream.keepalive = Duration::from_millis(100);
    cfg
}

pub(crate) fn config_map(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": {"value": value}})
}

fn widget(name: &str, size: u64) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size}})
}

fn with_config_maps(n: usize) -> Sim {
    let sim = Sim::new(sim_config());
    for i in 0..n {
        sim.create("configmaps", config_map(&format!("cm-{i}"), "x"))
            .unwrap();
    }
    sim
}

/// The hub running for `name` now, without starting one.
fn running(env: &TestEnv, name: &str) -> Option<Arc<Hub>> {
    env.app
        .informers()
        .hubs()
        .into_iter()
        .find(|h| h.name() == name)
}

async fn users(hub: &Hub, n: usize) {
    let mut rx = hub.subscribers_rx();
    tokio::time::timeout(WAIT, rx.wait_for(|c| *c == n))
        .await
        .unwrap_or_else(|_| panic!("{} never had {n} users", hub.name()))
        .expect("hub alive");
}

/// Waits for the hub to be closed; returns why.
async fn closed(hub: &Hub) -> String {
    tokio::time::timeout(WAIT, hub.changes().until(|| hub.closed().is_some()))
        .await
        .unwrap_or_else(|_| panic!("{} was not closed", hub.name()));
    hub.closed().expect("closed")
}

/// Waits until the simulated server has `n` watches open on `key`. The
/// informer opens its watch just after its list (a subscriber may have its
/// snapshot before), and the server notices a hung-up watch only on its
/// next write (a bookmark), so this polls its counters: there is no event
/// to wait on.
async fn watches_open(sim: &Sim, key: &str, n: u64) {
    tokio::time::timeout(WAIT, async {
        while sim.stats().resource(key).open_watches != n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{key} never had {n} open watches"));
}

fn stats(list: u64, watch: u64, open: u64) -> ResourceStats {
    ResourceStats {
        open_watches: open,
        watch_requests: watch,
        list_requests: list,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_demand_informer_watches_only_while_subscribed() {
    let env = spawn(with_config_maps(3), lifecycle_config(&["pods"])).await;
    env.synced("pods").await;
    assert_eq!(env.sim.stats().resource("configmaps"), stats(0, 0, 0));
    assert!(running(&env, "configmaps").is_none());

    let (mut a, mut view_a) = subscribed(&env, "/stream/configmaps").await;
    let (b, view_b) = subscribed(&env, "/stream/cm").await;
    let (objects, _) = env.sim.list("configmaps");
    view_a.assert_matches(&objects);
    view_b.assert_matches(&objects);
    watches_open(&env.sim, "configmaps", 1).await;
    // One streaming list: the watch that brought the state goes on.
    assert_eq!(env.sim.stats().resource("configmaps"), stats(0, 1, 1));
    let hub = running(&env, "configmaps").expect("started on demand");
    users(&hub, 2).await;
    assert!(
        env.metrics()
            .await
            .contains("kubefan_informers_running{resource=\"configmaps\"} 1")
    );

    // Changes flow to subscribers through the one watch.
    env.sim
        .create("configmaps", config_map("cm-new", "y"))
        .unwrap();
    let (objects, rv) = env.sim.list("configmaps");
    view_a.follow(&mut a, rv).await;
    view_a.assert_matches(&objects);
    assert!(hub.closed().is_none());

    drop((a, b));
    assert!(closed(&hub).await.contains("without subscribers"));
    assert!(running(&env, "configmaps").is_none());
    watches_open(&env.sim, "configmaps", 0).await;
    assert_eq!(env.sim.stats().resource("configmaps"), stats(0, 1, 0));
    let text = env.metrics().await;
    for gauge in [
        "kubefan_informers_running{resource=\"configmaps\"} 0",
        "kubefan_hub_cache_objects{resource=\"configmaps\"} 0",
        "kubefan_informer_synced{resource=\"configmaps\"} 0",
    ] {
        assert!(text.contains(gauge), "{gauge} in\n{text}");
    }

    // A change while nobody watches, then a later subscriber: a fresh
    // informer, a fresh list, a correct snapshot.
    env.sim
        .delete("configmaps", Some("default"), "cm-0")
        .unwrap();
    let (c, view_c) = subscribed(&env, "/stream/configmaps").await;
    view_c.assert_matches(&env.sim.list("configmaps").0);
    watches_open(&env.sim, "configmaps", 1).await;
    assert_eq!(env.sim.stats().resource("configmaps"), stats(0, 2, 1));
    let fresh = running(&env, "configmaps").expect("started again");
    assert!(!Arc::ptr_eq(&fresh, &hub));
    drop(c);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriber_arriving_in_the_grace_period_keeps_the_informer() {
    let mut cfg = lifecycle_config(&["pods"]);
    cfg.upstream.idle_grace = Duration::from_secs(1);
    let env = spawn(with_config_maps(2), cfg).await;
    let (a, _) = subscribed(&env, "/stream/configmaps").await;
    let hub = running(&env, "configmaps").expect("started on demand");
    drop(a);
    users(&hub, 0).await;
    // Within the grace period.
    let (b, view_b) = subscribed(&env, "/stream/configmaps").await;
    view_b.assert_matches(&env.sim.list("configmaps").0);
    // A grace period that starts after this one, and ends: had the
    // informer not counted b, its own would have ended first and stopped
    // it. No sleep: the later informer's stop is the clock.
    let (later_sub, _) = subscribed(&env, "/stream/services").await;
    let later = running(&env, "services").expect("started on demand");
    drop(later_sub);
    closed(&later).await;
    assert!(hub.closed().is_none(), "stopped while subscribed");
    watches_open(&env.sim, "configmaps", 1).await;
    assert_eq!(env.sim.stats().resource("configmaps"), stats(0, 1, 1));
    drop(b);
    closed(&hub).await;
    assert_eq!(env.sim.stats().resource("configmaps").watch_requests, 1);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_installed_later_is_streamed_and_its_removal_ends_the_stream() {
    let mut cfg = lifecycle_config(&["pods"]);
    // Every unknown name re-reads discovery at once.
    cfg.upstream.discovery_refresh = Duration::ZERO;
    let env = spawn(Sim::new(sim_config()), cfg).await;
    env.synced("pods").await;
    let (status, _) = env.get_json("/stream/widgets").await;
    assert_eq!(status, 404, "not installed yet");

    env.sim.register(ResourceDef::new(
        "example.com",
        "v1",
        "widgets",
        "Widget",
        true,
    ));
    env.sim
        .create("widgets.example.com", widget("w1", 3))
        .unwrap();
    let (mut sse, view) = subscribed(&env, "/stream/widgets").await;
    view.assert_matches(&env.sim.list("widgets.example.com").0);
    let hub = running(&env, "widgets.example.com").expect("started on demand");

    assert!(env.sim.unregister("widgets.example.com"));
    let ev = sse.next().await.expect("an ERROR before the end");
    assert_eq!(ev.event, "ERROR", "{ev:?}");
    assert_eq!(ev.data["object"]["code"], 404);
    assert!(
        ev.data["object"]["message"]
            .as_str()
            .unwrap()
            .contains("removed upstream"),
        "{ev:?}"
    );
    assert!(sse.next().await.is_none(), "the stream ends");
    assert_eq!(closed(&hub).await, "resource removed upstream");
    assert!(running(&env, "widgets.example.com").is_none());
    for path in ["/stream/widgets", "/stream/widgets.example.com"] {
        let (status, body) = env.get_json(path).await;
        assert_eq!(status, 404, "{path}: {body}");
        validate_status(&body);
    }

    // Installed again: found again, with its new objects.
    env.sim.register(ResourceDef::new(
        "example.com",
        "v1",
        "widgets",
        "Widget",
        true,
    ));
    env.sim
        .create("widgets.example.com", widget("w2", 5))
        .unwrap();
    let (sse, view) = subscribed(&env, "/stream/widgets.example.com").await;
    view.assert_matches(&env.sim.list("widgets.example.com").0);
    drop(sse);
    env.stop().await;
}

/// A CRD that moves to another version and stops serving the old one:
/// the hub of the old version ends its streams (its objects are of that
/// version), rather than retry the old version's 404s for ever, and the
/// next subscriber gets the new version's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_served_at_another_version_ends_the_old_versions_streams() {
    let mut cfg = lifecycle_config(&["pods"]);
    cfg.upstream.discovery_refresh = Duration::ZERO;
    let env = spawn(Sim::new(sim_config()), cfg).await;
    env.synced("pods").await;
    let def = |version| ResourceDef::new("example.com", version, "widgets", "Widget", true);
    env.sim.register(def("v1alpha1"));
    let mut w1 = widget("w1", 3);
    w1["apiVersion"] = json!("example.com/v1alpha1");
    env.sim.create("widgets.example.com", w1).unwrap();
    let (mut sse, mut view) = subscribed(&env, "/stream/widgets").await;
    let hub = running(&env, "widgets.example.com").expect("started on demand");

    env.sim.register(def("v1"));
    let ev = sse.until_error(&mut view).await;
    let message = ev.data["object"]["message"].as_str().unwrap();
    assert!(
        message.contains("serves version v1 now, not v1alpha1"),
        "{ev:?}"
    );
    assert!(sse.next().await.is_none(), "the stream ends");
    closed(&hub).await;

    // The new version's (the simulator converts nothing: kubefan stamps
    // each object with the version it watches, as a conversion would).
    let (_sse, view) = subscribed(&env, "/stream/widgets").await;
    assert_eq!(view.objects.len(), 1, "{:?}", view.objects);
    assert!(
        view.objects
            .values()
            .all(|o| o["apiVersion"] == "example.com/v1"),
        "{:?}",
        view.objects
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_resource_removed_upstream_is_reported_not_ready() {
    let sim = Sim::new(sim_config());
    sim.register(ResourceDef::new(
        "example.com",
        "v1",
        "widgets",
        "Widget",
        true,
    ));
    let env = spawn(sim, lifecycle_config(&["widgets"])).await;
    env.synced("widgets").await;
    let hub = running(&env, "widgets.example.com").expect("boot resource");
    let (status, _) = env.get_json("/readyz").await;
    assert_eq!(status, 200);

    env.sim.unregister("widgets.example.com");
    closed(&hub).await;
    let (status, body) = env.get_json("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["resources"][0]["ready"], false, "{body}");
    assert_eq!(
        body["resources"][0]["reason"], "resource removed upstream",
        "{body}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_and_deny_lists_refuse_with_403_and_never_reach_upstream() {
    let mut cfg = lifecycle_config(&[]);
    cfg.upstream.allow_resources = [
        "po",
        "configmaps",
        "secrets",
        "deploy",
        "gadgets.example.com",
    ]
    .map(String::from)
    .to_vec();
    cfg.upstream.deny_resources = vec!["deployments.apps".into()];
    let env = spawn(with_config_maps(1), cfg).await;

    let (sse, _) = subscribed(&env, "/stream/pods").await;
    drop(sse);
    let (sse, _) = subscribed(&env, "/stream/configmaps").await;
    drop(sse);
    for (path, flag) in [
        ("/stream/services", "--allow-resources"),
        ("/stream/svc", "--allow-resources"),
        ("/stream/deploy", "--deny-resources"),
        ("/stream/deployments.apps", "--deny-resources"),
        ("/stream/secrets", "--allow-secrets"),
    ] {
        let (status, body) = env.get_json(path).await;
        assert_eq!(status, 403, "{path}: {body}");
        validate_status(&body);
        assert_eq!(body["reason"], "Forbidden");
        assert!(
            body["message"].as_str().unwrap().contains(flag),
            "{path}: {body}"
        );
    }
    let upstream = env.sim.stats();
    for key in ["services", "deployments.apps", "secrets"] {
        assert_eq!(upstream.resource(key), stats(0, 0, 0), "{key}");
    }
    env.stop().await;
}
