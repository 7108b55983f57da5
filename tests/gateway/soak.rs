//! The chaos soak: churn across resources, random upstream faults (watches
//! ended, 500s, compaction to 410, stalls), subscribers hopping on and off
//! every transport and resuming, a slow reader, and kube-rs's reflector on
//! the Kubernetes face. At the end every subscriber's view equals the truth
//! (filtered as it asked); the client model fails on any loss or duplicate
//! not covered by a signalled reset.
//!
//! CI runs a short seed. The long run (a few minutes; not in CI):
//! `SOAK_ROUNDS=20000 cargo test --release --test gateway soak_long -- --ignored --nocapture`

use std::time::Duration;

use futures::StreamExt;
use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::support::{ClientView, TestEnv, WAIT, sim_config, spawn, test_config};
use kubefan_sim::{Sim, pod};

const NAMESPACES: &[&str] = &["web", "batch", "default"];

/// How long a subscriber has, once the chaos is over and every change is
/// there to be sent, to catch up with it: generous, so that only a lost
/// event (which would otherwise keep it reading forever) fails it.
const SETTLE: Duration = Duration::from_secs(60);

fn populate(sim: &Sim) {
    for i in 0..40 {
        let ns = NAMESPACES[i % 3];
        sim.create(
            "pods",
            pod(&format!("p{i}"))
                .ns(ns)
                .label("app", ["web", "db"][i % 2])
                .build(),
        )
        .unwrap();
    }
    for i in 0..15 {
        sim.create("configmaps", json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm{i}"), "namespace": NAMESPACES[i % 3]}, "data": {"v": "0"}}))
            .unwrap();
    }
}

/// One random change to the simulated cluster.
fn change(sim: &Sim, rng: &mut StdRng) {
    let resource = if rng.random_bool(0.7) {
        "pods"
    } else {
        "configmaps"
    };
    let (objects, _) = sim.list(resource);
    let ns = NAMESPACES[rng.random_range(0..3)];
    if objects.is_empty() || rng.random_bool(0.15) {
        let name = format!("x{}", rng.random_range(0..10_000));
        let obj = if resource == "pods" {
            pod(&name)
                .ns(ns)
                .label("app", ["web", "db"][rng.random_range(0..2)])
                .build()
        } else {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"v": "0"}})
        };
        let _ = sim.create(resource, obj);
        return;
    }
    let o = &objects[rng.random_range(0..objects.len())]["metadata"];
    let (ns, name) = (o["namespace"].as_str(), o["name"].as_str().unwrap());
    if rng.random_bool(0.1) {
        let _ = sim.delete(resource, ns, name);
        return;
    }
    let patch = if resource == "pods" {
        match rng.random_range(0..3) {
            0 => json!({"metadata": {"labels": {"app": (["web", "db"][rng.random_range(0..2)])}}}),
            1 => json!({"spec": {"nodeName": format!("node-{}", rng.random_range(0..3))}}),
            _ => {
                json!({"status": {"phase": (["Running", "Pending", "Failed"][rng.random_range(0..3)])}})
            }
        }
    } else {
        json!({"data": {"v": rng.random_range(0..1000).to_string()}})
    };
    let _ = sim.merge_patch(resource, ns, name, &patch);
}

/// A random upstream fault, now and then.
fn fault(sim: &Sim, rng: &mut StdRng, stalled: &mut bool) {
    if *stalled && rng.random_bool(0.3) {
        sim.stall_watches(false);
        *stalled = false;
    }
    match rng.random_range(0..100) {
        0..=2 => sim.end_watches(),
        3 => {
            sim.fail_next(2);
            sim.end_watches();
        }
        4 => {
            sim.compact();
            sim.end_watches();
        }
        5 if !*stalled => {
            sim.stall_watches(true);
            *stalled = true;
        }
        _ => {}
    }
}

/// Whether a subscriber following `path` to the end has caught up with
/// the simulated server; fails it once `by` has passed without that.
fn settled(env: &TestEnv, path: &str, view: &ClientView, by: Instant) -> bool {
    let rv = resource_version_of(&env.sim, path);
    if view.settled(rv) {
        return true;
    }
    assert!(
        Instant::now() < by,
        "{path}: expected to reach resourceVersion {rv} within {SETTLE:?} of the chaos ending, \
         but it is at {} ({} objects; in a snapshot: {}): an event lost?",
        view.position,
        view.objects.len(),
        view.in_snapshot()
    );
    false
}

/// An SSE or WebSocket subscriber that disconnects and resumes at random
/// until `stop`, then follows to the end (at most [`SETTLE`]).
async fn hopper(
    env: &TestEnv,
    path: String,
    ws: bool,
    seed: u64,
    stop: watch::Receiver<bool>,
) -> ClientView {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut view = ClientView::new();
    // Set when the chaos is over: the end of reading.
    let mut settle_by: Option<Instant> = None;
    loop {
        let resume = view.last_id.clone();
        if resume.is_some() {
            view.resume();
        } else {
            view.restart();
        }
        let stopping = *stop.borrow();
        if stopping {
            settle_by.get_or_insert_with(|| Instant::now() + SETTLE);
        }
        let reads = if stopping {
            usize::MAX
        } else {
            rng.random_range(1..40)
        };
        if ws {
            let url = match &resume {
                Some(id) => format!("{path}&resourceVersion={id}"),
                None => path.clone(),
            };
            let mut client = tokio::time::timeout(WAIT, crate::ws::WsClient::connect(env, &url))
                .await
                .unwrap_or_else(|_| panic!("{url}: a WebSocket upgrade within {WAIT:?}"));
            for _ in 0..reads {
                if let Some(by) = settle_by {
                    if settled(env, &path, &view, by) {
                        return view;
                    }
                } else if *stop.borrow() && !view.in_snapshot() {
                    break;
                }
                match tokio::time::timeout(Duration::from_millis(300), client.next()).await {
                    Ok(msg) => view.apply(&crate::ws::event(&msg)),
                    Err(_) if stopping => {}
                    Err(_) => break,
                }
            }
        } else {
            let mut sse = tokio::time::timeout(WAIT, env.sse_with(&path, resume.as_deref()))
                .await
                .unwrap_or_else(|_| panic!("{path}: an SSE response within {WAIT:?}"));
            for _ in 0..reads {
                if let Some(by) = settle_by {
                    if settled(env, &path, &view, by) {
                        return view;
                    }
                } else if *stop.borrow() && !view.in_snapshot() {
                    break;
                }
                match tokio::time::timeout(Duration::from_millis(300), sse.next()).await {
                    Ok(Some(ev)) => view.apply(&ev),
                    Ok(None) => break,
                    Err(_) if stopping => {}
                    Err(_) => break,
                }
            }
        }
    }
}

/// The newest resourceVersion among the objects a path streams (a view
/// reaches at least this once caught up).
fn resource_version_of(sim: &Sim, path: &str) -> u64 {
    let resource = if path.contains("configmaps") {
        "configmaps"
    } else {
        "pods"
    };
    sim.list(resource).1
}

fn truth(sim: &Sim, path: &str) -> Vec<Value> {
    let resource = if path.contains("configmaps") {
        "configmaps"
    } else {
        "pods"
    };
    let ns = path
        .split("namespace=")
        .nth(1)
        .map(|s| s.split('&').next().unwrap().to_string());
    let app = path
        .split("labelSelector=app%3D")
        .nth(1)
        .map(|s| s.split('&').next().unwrap().to_string());
    sim.list(resource)
        .0
        .into_iter()
        .filter(|o| {
            ns.as_deref()
                .is_none_or(|n| o["metadata"]["namespace"] == n)
        })
        .filter(|o| {
            app.as_deref()
                .is_none_or(|a| o["metadata"]["labels"]["app"] == a)
        })
        .collect()
}

pub async fn soak(seed: u64, rounds: usize) {
    eprintln!("soak seed {seed}, {rounds} rounds");
    let sim = Sim::new(sim_config());
    populate(&sim);
    let mut cfg = test_config(&["pods", "configmaps"]);
    cfg.upstream.log_limits.max_events = 300;
    cfg.stream.keepalive = Duration::from_millis(200);
    // The slow reader reads nothing until the chaos is over, which in the
    // long run is minutes: it is to be lapped and reset, not closed by the
    // write timeout (that one has its own test in sse.rs).
    cfg.stream.write_timeout = Duration::from_secs(3600);
    let env = spawn(sim, cfg).await;
    env.synced("pods").await;
    env.synced("configmaps").await;
    let (stop_tx, stop_rx) = watch::channel(false);
    let paths = [
        ("/stream/pods?namespace=web", false),
        ("/stream/pods?labelSelector=app%3Dweb", false),
        ("/stream/configmaps?namespace=batch", false),
        ("/stream/pods?namespace=default", true),
        ("/stream/configmaps?namespace=web", true),
    ];
    let hoppers = join_all(paths.iter().enumerate().map(|(i, (path, ws))| {
        hopper(
            &env,
            path.to_string(),
            *ws,
            seed + i as u64,
            stop_rx.clone(),
        )
    }));
    // A slow reader: its snapshot, then nothing until the end.
    let (mut slow, mut slow_view) =
        tokio::time::timeout(WAIT, crate::sse::subscribed(&env, "/stream/pods"))
            .await
            .unwrap_or_else(|_| panic!("the slow reader's snapshot of pods within {WAIT:?}"));
    let api: kube::Api<Pod> = kube::Api::all(env.kube_client(None).await);
    let (store, writer) = reflector::store();
    let mut reflect = Box::pin(
        reflector(writer, watcher(api, watcher::Config::default().timeout(2))).default_backoff(),
    );
    let chaos = async {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut stalled = false;
        for round in 0..rounds {
            change(&env.sim, &mut rng);
            fault(&env.sim, &mut rng, &mut stalled);
            if round % 5 == 0 {
                // Let the gateway, the hoppers and the reflector run.
                let _ = tokio::time::timeout(Duration::from_millis(2), reflect.next()).await;
                tokio::task::yield_now().await;
            }
        }
        env.sim.stall_watches(false);
        env.sim.end_watches();
        stop_tx.send_replace(true);
    };
    let ((), views) = tokio::join!(chaos, hoppers);
    for ((path, _), view) in paths.iter().zip(&views) {
        view.assert_matches(&truth(&env.sim, path));
        eprintln!(
            "{path}: {} changes, {} resets, {} snapshots",
            view.changes.len(),
            view.resets.len(),
            view.snapshots
        );
    }
    let (all, rv) = env.sim.list("pods");
    tokio::time::timeout(SETTLE, slow_view.follow(&mut slow, rv))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the slow reader: pods at resourceVersion {rv} (after a reset) within {SETTLE:?}"
            )
        });
    slow_view.assert_matches(&all);
    let want: std::collections::BTreeMap<String, String> = all
        .iter()
        .map(|o| {
            (
                crate::support::key_of(o),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    tokio::time::timeout(WAIT, async {
        loop {
            let got: std::collections::BTreeMap<String, String> = store
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
                .collect();
            if got == want {
                break;
            }
            let _ = reflect.next().await;
        }
    })
    .await
    .expect("the reflector converges");
    drop((slow, reflect, views));
    // Memory bounded: the logs stay within their bound.
    for hub in env.app.informers().hubs() {
        assert!(hub.stats().log_events <= 300, "{:?}", hub.stats());
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_soak_loses_nothing() {
    soak(7, 1500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "minutes long; run by hand (see the module doc)"]
async fn soak_long() {
    let rounds = std::env::var("SOAK_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20_000);
    let seed = std::env::var("SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(kubefan_seed);
    soak(seed, rounds).await;
}

fn kubefan_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(1)
}
