//! A realistic cluster for the simulator: `seed_cluster` creates namespaces,
//! nodes and pods, `spawn_churn` keeps changing pods at a steady rate, and
//! `pod(..)` builds pod fixtures for tests.
//!
//! Churn works on the pods it knows (those present when it starts and those
//! it creates) and forgets any that someone else deleted. It keeps the
//! population near the target by biasing creates against deletes.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::{Sim, SimError};

/// Shape and pace of a simulated cluster.
#[derive(Debug, Clone)]
pub struct ChurnConfig {
    /// Pod operations per second; 0 disables churn.
    pub rate: f64,
    pub nodes: usize,
    pub namespaces: Vec<String>,
    /// Pod population churn keeps close to.
    pub pods: usize,
    /// Makes the sequence of operations reproducible.
    pub seed: Option<u64>,
}

impl Default for ChurnConfig {
    fn default() -> Self {
        ChurnConfig {
            rate: 20.0,
            nodes: 3,
            namespaces: vec!["default".into(), "web".into(), "batch".into()],
            pods: 300,
            seed: None,
        }
    }
}

const APPS: [(&str, &str); 6] = [
    ("web", "frontend"),
    ("api", "backend"),
    ("cache", "backend"),
    ("worker", "batch"),
    ("db", "data"),
    ("metrics", "ops"),
];

/// A pod fixture: `pod("a").ns("x").node("n1").build()`.
#[derive(Debug, Clone)]
pub struct PodBuilder {
    name: String,
    ns: String,
    node: Option<String>,
    labels: BTreeMap<String, String>,
    phase: String,
}

/// Starts a pod fixture in namespace "default", unscheduled, phase Pending.
pub fn pod(name: &str) -> PodBuilder {
    PodBuilder {
        name: name.to_owned(),
        ns: "default".to_owned(),
        node: None,
        labels: BTreeMap::new(),
        phase: "Pending".to_owned(),
    }
}

impl PodBuilder {
    pub fn ns(mut self, ns: &str) -> Self {
        self.ns = ns.to_owned();
        self
    }

    /// Schedules the pod on `node` and makes it Running.
    pub fn node(mut self, node: &str) -> Self {
        self.node = Some(node.to_owned());
        self.phase = "Running".to_owned();
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_owned(), value.to_owned());
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.phase = phase.to_owned();
        self
    }

    /// A pod of about 2 KB, shaped like one a Deployment creates.
    pub fn build(&self) -> Value {
        let app = self.labels.get("app").map(String::as_str).unwrap_or("app");
        let now = time::OffsetDateTime::now_utc()
            .replace_nanosecond(0)
            .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        let mut pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": self.ns,
                "labels": self.labels,
                "annotations": {"kubectl.kubernetes.io/restartedAt": now},
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-7d9f8c6b5"),
                    "uid": "6f1c1a52-0d8e-4a4e-9a43-0c1f5e1b2a7d", "controller": true, "blockOwnerDeletion": true
                }],
                "managedFields": [{
                    "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                    "time": now, "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:tier": {}},
                            "f:ownerReferences": {".": {}, "k:{\"uid\":\"6f1c1a52-0d8e-4a4e-9a43-0c1f5e1b2a7d\"}": {}}},
                        "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {".": {}, "f:image": {}, "f:imagePullPolicy": {},
                            "f:name": {}, "f:ports": {}, "f:resources": {}, "f:terminationMessagePath": {}}},
                            "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:terminationGracePeriodSeconds": {}}
                    }
                }]
            },
            "spec": {
                "containers": [{
                    "name": "main",
                    "image": format!("registry.example.com/{app}:1.4.2"),
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                    "env": [{"name": "APP", "value": app}, {"name": "LOG_LEVEL", "value": "info"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                    "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access", "readOnly": true}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"
                }],
                "dnsPolicy": "ClusterFirst",
                "enableServiceLinks": true,
                "restartPolicy": "Always",
                "schedulerName": "default-scheduler",
                "serviceAccountName": "default",
                "terminationGracePeriodSeconds": 30,
                "tolerations": [
                    {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
                    {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300}
                ],
                "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
                ]}}]
            },
            "status": {"phase": self.phase, "qosClass": "Burstable"}
        });
        if let Some(node) = &self.node {
            pod["spec"]["nodeName"] = json!(node);
            pod["status"]["hostIP"] = json!("10.0.0.10");
            pod["status"]["podIP"] = json!("10.244.1.17");
            pod["status"]["startTime"] = json!(now);
            pod["status"]["conditions"] = json!([
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": if self.phase == "Running" { "True" } else { "False" }, "lastTransitionTime": now}
            ]);
        } else {
            pod["status"]["conditions"] = json!([{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": now,
                "message": "0/3 nodes are available: 3 Insufficient cpu."
            }]);
        }
        pod
    }
}

fn node_name(i: usize) -> String {
    format!("node-{i}")
}

fn random_pod(rng: &mut StdRng, cfg: &ChurnConfig, nodes: &[String]) -> Value {
    let (app, tier) = APPS[rng.random_range(0..APPS.len())];
    let ns = cfg
        .namespaces
        .choose(rng)
        .map(String::as_str)
        .unwrap_or("default");
    let suffix: String = (0..5)
        .map(|_| (b'a' + rng.random_range(0..26u8)) as char)
        .collect();
    let mut b = pod(&format!("{app}-7d9f8c6b5-{suffix}"))
        .ns(ns)
        .label("app", app)
        .label("tier", tier)
        .label("pod-template-hash", "7d9f8c6b5");
    if let Some(node) = nodes.choose(rng).filter(|_| rng.random_bool(0.85)) {
        b = b.node(node);
    }
    b.build()
}

fn rng_for(cfg: &ChurnConfig) -> StdRng {
    match cfg.seed {
        Some(seed) => StdRng::seed_from_u64(seed),
        None => StdRng::from_rng(&mut rand::rng()),
    }
}

fn ignore_exists(r: Result<Value, SimError>) -> Result<(), SimError> {
    match r {
        Ok(_) | Err(SimError::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates the namespaces, `cfg.nodes` nodes and `cfg.pods` pods (most
/// scheduled and Running, some Pending). Objects that already exist are kept.
pub fn seed_cluster(sim: &Sim, cfg: &ChurnConfig) {
    let mut rng = rng_for(cfg);
    let result = (|| {
        for ns in cfg
            .namespaces
            .iter()
            .map(String::as_str)
            .chain(["default", "kube-system"])
        {
            ignore_exists(sim.create(
                "namespaces",
                json!({"metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}, "status": {"phase": "Active"}}),
            ))?;
        }
        let nodes: Vec<String> = (0..cfg.nodes).map(node_name).collect();
        for (i, n) in nodes.iter().enumerate() {
            ignore_exists(sim.create(
                "nodes",
                json!({
                    "metadata": {"name": n, "labels": {"kubernetes.io/hostname": n, "kubernetes.io/os": "linux",
                        "topology.kubernetes.io/zone": format!("zone-{}", i % 3)}},
                    "spec": {"podCIDR": format!("10.244.{i}.0/24")},
                    "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                        "conditions": [{"type": "Ready", "status": "True"}]}
                }),
            ))?;
        }
        for _ in 0..cfg.pods {
            ignore_exists(sim.create("pods", random_pod(&mut rng, cfg, &nodes)))?;
        }
        Ok::<(), SimError>(())
    })();
    if let Err(e) = result {
        tracing::warn!(error = %e, "seeding the simulated cluster failed");
    }
}

/// Pods churn knows about, as (namespace, name).
type Known = Vec<(String, String)>;

fn churn_once(sim: &Sim, cfg: &ChurnConfig, nodes: &[String], known: &mut Known, rng: &mut StdRng) {
    let ratio = known.len() as f64 / cfg.pods.max(1) as f64;
    // Creates and deletes balance at the target; the other ops modify.
    let p_create = (0.25 * (2.0 - ratio)).clamp(0.0, 0.5);
    let p_delete = (0.25 * ratio).clamp(0.0, 0.5);
    let roll: f64 = rng.random();
    if roll < p_create || known.is_empty() {
        if let Ok(p) = sim.create("pods", random_pod(rng, cfg, nodes)) {
            let at = |k: &str| p["metadata"][k].as_str().unwrap_or_default().to_owned();
            known.push((at("namespace"), at("name")));
        }
        return;
    }
    let i = rng.random_range(0..known.len());
    let (ns, name) = known[i].clone();
    let result = if roll < p_create + p_delete {
        known.swap_remove(i);
        sim.delete("pods", Some(&ns), &name)
    } else {
        let patch = match rng.random_range(0..3) {
            0 => {
                let (_, tier) = APPS[rng.random_range(0..APPS.len())];
                json!({"metadata": {"labels": {"tier": tier, "churn": rng.random_range(0..10u8).to_string()}}})
            }
            1 => {
                let phase = ["Pending", "Running", "Running", "Succeeded", "Failed"]
                    [rng.random_range(0..5)];
                json!({"status": {"phase": phase}})
            }
            _ => match nodes.choose(rng).filter(|_| rng.random_bool(0.8)) {
                Some(node) => json!({"spec": {"nodeName": node}, "status": {"phase": "Running"}}),
                None => json!({"spec": {"nodeName": null}, "status": {"phase": "Pending"}}),
            },
        };
        sim.merge_patch("pods", Some(&ns), &name, &patch)
    };
    if let Err(SimError::NotFound { .. }) = result {
        known.retain(|k| *k != (ns.clone(), name.clone()));
    }
}

/// Runs pod churn at `cfg.rate` ops/s until `shutdown` is cancelled.
pub fn spawn_churn(
    sim: Sim,
    cfg: ChurnConfig,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if cfg.rate <= 0.0 || !cfg.rate.is_finite() {
            shutdown.cancelled().await;
            return;
        }
        let mut rng = rng_for(&cfg);
        let nodes: Vec<String> = (0..cfg.nodes).map(node_name).collect();
        let mut known: Known = sim.names("pods");
        // Ticks of at least 10 ms; each runs the ops that fell due since the last.
        let period = Duration::from_secs_f64((1.0 / cfg.rate).max(0.01));
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let (mut last, mut due) = (Instant::now(), 0.0f64);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let now = Instant::now();
            due += now.duration_since(last).as_secs_f64() * cfg.rate;
            last = now;
            while due >= 1.0 {
                churn_once(&sim, &cfg, &nodes, &mut known, &mut rng);
                due -= 1.0;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::{ChurnConfig, pod, seed_cluster, spawn_churn};
    use crate::{Sim, SimConfig};

    #[test]
    fn seeded_pods_are_realistic() {
        let sim = Sim::new(SimConfig::default());
        let cfg = ChurnConfig {
            pods: 50,
            seed: Some(7),
            ..ChurnConfig::default()
        };
        seed_cluster(&sim, &cfg);
        let (pods, _) = sim.list("pods");
        assert_eq!(pods.len(), 50);
        let names: Vec<(String, String)> = pods
            .iter()
            .map(|p| {
                let at = |k: &str| p["metadata"][k].as_str().unwrap().to_owned();
                (at("namespace"), at("name"))
            })
            .collect();
        assert_eq!(sim.names("pods"), names);
        assert_eq!(sim.list("nodes").0.len(), 3);
        for p in &pods {
            let size = serde_json::to_vec(p).unwrap().len();
            assert!((1500..=3500).contains(&size), "pod of {size} bytes");
            assert!(p["metadata"]["labels"]["app"].is_string());
            assert!(p["metadata"]["managedFields"].is_array());
        }
        let scheduled = pods
            .iter()
            .filter(|p| p["spec"]["nodeName"].is_string())
            .count();
        assert!(scheduled > 25 && scheduled < 50, "{scheduled} scheduled");
    }

    #[test]
    fn pod_builder_sets_node_and_labels() {
        let p = pod("a").ns("x").node("n1").label("app", "web").build();
        assert_eq!(p["metadata"]["namespace"], "x");
        assert_eq!(p["spec"]["nodeName"], "n1");
        assert_eq!(p["status"]["phase"], "Running");
        assert_eq!(p["metadata"]["labels"]["app"], "web");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn churn_writes_and_keeps_population_near_target() {
        let sim = Sim::new(SimConfig::default());
        let cfg = ChurnConfig {
            pods: 40,
            rate: 2000.0,
            seed: Some(1),
            ..ChurnConfig::default()
        };
        seed_cluster(&sim, &cfg);
        let start = sim.resource_version();
        let stop = CancellationToken::new();
        let task = spawn_churn(sim.clone(), cfg, stop.clone());
        tokio::time::timeout(Duration::from_secs(5), async {
            while sim.resource_version() < start + 500 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("churn made progress");
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        let n = sim.list("pods").0.len();
        assert!((20..=60).contains(&n), "population drifted to {n}");
    }
}
