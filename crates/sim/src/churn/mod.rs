//! A realistic cluster for the simulator: `seed_cluster` creates namespaces,
//! nodes, and pods owned by Deployments' ReplicaSets; `spawn_churn` keeps
//! changing pods at a steady rate, in one of two styles (`ChurnStyle`);
//! `pod(..)` (`pod.rs`) builds pods, for the generator and for tests.
//!
//! Random churn works on the pods it knows (those present when it starts
//! and those it creates) and forgets any that someone else deleted. It
//! keeps the population near the target by biasing creates against
//! deletes. Rollout churn (`rollout.rs`) replaces one Deployment's pods
//! after another, a few at a time, as the deployment controller does.

mod pod;
mod rollout;

pub use pod::{PodBuilder, pod};

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::{Sim, SimError};

/// What churn does to pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ChurnStyle {
    /// Random creates, deletes, label, phase and node patches (a pod
    /// moved between nodes, set back to Pending): every transition a
    /// gateway must handle, at the population churn keeps near. The
    /// default, since tests rely on its variety.
    #[default]
    Random,
    /// Rolling updates: a Deployment's pods replaced a few at a time
    /// (create Pending, bind to a node, Running and ready, the old pod
    /// terminating and then deleted), Deployment after Deployment.
    Rollout,
}

/// Shape and pace of a simulated cluster.
#[derive(Debug, Clone)]
pub struct ChurnConfig {
    /// Pod operations per second; 0 disables churn.
    pub rate: f64,
    pub nodes: usize,
    pub namespaces: Vec<String>,
    /// Pod population to seed and churn keeps close to.
    pub pods: usize,
    /// Makes the sequence of operations reproducible.
    pub seed: Option<u64>,
    pub style: ChurnStyle,
    /// Whether generated pods carry `metadata.managedFields` (3–8 KB a
    /// pod with them, 2–4 KB without).
    pub managed_fields: bool,
}

impl Default for ChurnConfig {
    fn default() -> Self {
        ChurnConfig {
            rate: 20.0,
            nodes: 3,
            namespaces: vec!["default".into(), "web".into(), "batch".into()],
            pods: 300,
            seed: None,
            style: ChurnStyle::Random,
            managed_fields: true,
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

/// Pods per Deployment, on average, in a seeded cluster.
const PODS_PER_DEPLOYMENT: usize = 30;

/// A Deployment of the simulated cluster (not stored: its pods are).
#[derive(Debug, Clone)]
pub(crate) struct Deployment {
    pub ns: String,
    pub name: String,
    pub tier: &'static str,
    pub containers: usize,
    /// The template revision; each rollout bumps it.
    pub revision: u64,
}

impl Deployment {
    /// The `pod-template-hash` of the current revision: 10 characters of
    /// the apiserver's name alphabet.
    pub fn hash(&self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut h = pod::fnv_hash(&format!("{}/{}/{}", self.ns, self.name, self.revision));
        (0..10)
            .map(|_| {
                let c = ALPHABET[(h % ALPHABET.len() as u64) as usize] as char;
                h /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }

    pub fn replica_set(&self) -> String {
        format!("{}-{}", self.name, self.hash())
    }

    /// A new pod of the current revision, unscheduled and Pending, or
    /// bound to `node` and Running.
    pub fn pod(&self, cfg: &ChurnConfig, rng: &mut StdRng, node: Option<&str>) -> PodBuilder {
        let suffix: String = (0..5)
            .map(|_| (b'a' + rng.random_range(0..26u8)) as char)
            .collect();
        self.pod_named(cfg, &format!("{}-{suffix}", self.replica_set()), node)
    }

    /// The pod `name` of the current revision, as [`Deployment::pod`].
    pub fn pod_named(&self, cfg: &ChurnConfig, name: &str, node: Option<&str>) -> PodBuilder {
        let rs = self.replica_set();
        let mut b = pod(name)
            .ns(&self.ns)
            .label("app", &self.name)
            .label("tier", self.tier)
            .label("pod-template-hash", &self.hash())
            .containers(self.containers)
            .managed_fields(cfg.managed_fields)
            .owner(&rs, &pod::uid_of(&format!("{}/{rs}", self.ns)))
            .image_tag(&format!("1.4.{}", self.revision));
        if let Some(node) = node {
            b = b.node(node);
        }
        b
    }

    /// Whether the pod named `name` belongs to this Deployment (any revision).
    pub fn owns(&self, name: &str) -> bool {
        let mut parts = name.rsplitn(3, '-');
        let (_, _, deploy) = (parts.next(), parts.next(), parts.next());
        deploy == Some(self.name.as_str())
    }
}

/// The Deployments of a cluster of `cfg.pods` pods, spread over its
/// namespaces.
pub(crate) fn deployments(cfg: &ChurnConfig) -> Vec<Deployment> {
    let namespaces: Vec<&str> = if cfg.namespaces.is_empty() {
        vec!["default"]
    } else {
        cfg.namespaces.iter().map(String::as_str).collect()
    };
    let n = (cfg.pods / PODS_PER_DEPLOYMENT).max(APPS.len());
    (0..n)
        .map(|i| {
            let ns = namespaces[i % namespaces.len()];
            let j = i / namespaces.len();
            let (app, tier) = APPS[j % APPS.len()];
            let k = j / APPS.len();
            Deployment {
                ns: ns.to_owned(),
                name: if k == 0 {
                    app.to_owned()
                } else {
                    format!("{app}-{k}")
                },
                tier,
                containers: 1 + (i * 7 + 3) % 5 / 2,
                revision: 1,
            }
        })
        .collect()
}

fn node_name(i: usize) -> String {
    format!("node-{i}")
}

fn random_pod(
    rng: &mut StdRng,
    cfg: &ChurnConfig,
    deploys: &[Deployment],
    nodes: &[String],
) -> Value {
    let d = &deploys[rng.random_range(0..deploys.len())];
    // Most pods of a settled cluster run; a few wait for the scheduler.
    let node = nodes.choose(rng).filter(|_| rng.random_bool(0.97));
    d.pod(cfg, rng, node.map(String::as_str)).build()
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

fn node_object(i: usize, name: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "node.kubernetes.io/instance-type": "m5.2xlarge",
            "topology.kubernetes.io/zone": format!("zone-{}", i % 3)}},
        "spec": {"podCIDR": format!("10.{}.{}.0/24", 100 + i / 256 % 100, i % 256),
            "providerID": format!("aws:///zone-{}/i-{:017x}", i % 3, i)},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "7910m", "memory": "31Gi", "pods": "110", "ephemeral-storage": "95Gi"},
            "addresses": [{"type": "InternalIP", "address": format!("10.{}.{}.{}", 1 + i / 65536 % 200, i / 256 % 256, i % 256)},
                {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.33.1", "containerRuntimeVersion": "containerd://1.7.27",
                "osImage": "Ubuntu 24.04 LTS", "kernelVersion": "6.8.0-1024-aws", "architecture": "amd64",
                "operatingSystem": "linux"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status"}]}
    })
}

/// Objects handed to the store per lock, when seeding: other requests
/// are served between batches.
const SEED_BATCH: usize = 1000;

/// Creates the namespaces, `cfg.nodes` nodes and `cfg.pods` pods (nearly
/// all scheduled and Running, a few Pending). Objects that already exist
/// are kept. Nodes and pods go in through [`Sim::seed`], which records no
/// watch history for them: a cluster's state at start, as a
/// kube-apiserver's watch cache begins with a LIST.
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
        for (i, chunk) in nodes.chunks(SEED_BATCH).enumerate() {
            let objs = chunk
                .iter()
                .enumerate()
                .map(|(j, n)| node_object(i * SEED_BATCH + j, n));
            sim.seed("nodes", objs.collect())?;
        }
        let deploys = deployments(cfg);
        let mut left = cfg.pods;
        while left > 0 {
            let n = left.min(SEED_BATCH);
            left -= n;
            let objs = (0..n)
                .map(|_| random_pod(&mut rng, cfg, &deploys, &nodes))
                .collect();
            sim.seed("pods", objs)?;
        }
        Ok::<(), SimError>(())
    })();
    if let Err(e) = result {
        tracing::warn!(error = %e, "seeding the simulated cluster failed");
    }
}

/// Pods churn knows about, as (namespace, name).
type Known = Vec<(String, String)>;

fn churn_once(
    sim: &Sim,
    cfg: &ChurnConfig,
    deploys: &[Deployment],
    nodes: &[String],
    known: &mut Known,
    rng: &mut StdRng,
) {
    let ratio = known.len() as f64 / cfg.pods.max(1) as f64;
    // Creates and deletes balance at the target; the other ops modify.
    let p_create = (0.25 * (2.0 - ratio)).clamp(0.0, 0.5);
    let p_delete = (0.25 * ratio).clamp(0.0, 0.5);
    let roll: f64 = rng.random();
    if roll < p_create || known.is_empty() {
        if let Ok(p) = sim.create("pods", random_pod(rng, cfg, deploys, nodes)) {
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
        match rng.random_range(0..3) {
            0 => {
                let (_, tier) = APPS[rng.random_range(0..APPS.len())];
                let patch = json!({"metadata": {"labels": {"tier": tier, "churn": rng.random_range(0..10u8).to_string()}}});
                sim.merge_patch("pods", Some(&ns), &name, &patch)
            }
            1 => {
                let phase = ["Pending", "Running", "Running", "Succeeded", "Failed"]
                    [rng.random_range(0..5)];
                restatus(sim, &ns, &name, phase, None)
            }
            _ => match nodes.choose(rng).filter(|_| rng.random_bool(0.8)) {
                Some(node) => restatus(sim, &ns, &name, "Running", Some(Some(node))),
                None => restatus(sim, &ns, &name, "Pending", Some(None)),
            },
        }
    };
    if let Err(SimError::NotFound { .. }) = result {
        known.retain(|k| *k != (ns.clone(), name.clone()));
    }
}

/// Moves pod `ns/name` to `phase`, and to `node` if given (`Some(None)`
/// unbinds it), with the status the kubelet would write for that
/// (`pod::kubelet_status`): a phase patch alone would leave a Failed pod's
/// containers ready.
fn restatus(
    sim: &Sim,
    ns: &str,
    name: &str,
    phase: &str,
    node: Option<Option<&String>>,
) -> Result<Value, SimError> {
    let Some(mut p) = sim.get("pods", Some(ns), name) else {
        return Err(SimError::NotFound {
            resource: "pods".into(),
            name: name.into(),
        });
    };
    let node = match node {
        Some(node) => node.map(String::as_str),
        None => p["spec"]["nodeName"].as_str(),
    }
    .map(str::to_owned);
    p["status"] = pod::kubelet_status(&p, phase, node.as_deref());
    match &node {
        Some(node) => p["spec"]["nodeName"] = json!(node),
        None => {
            if let Some(spec) = p["spec"].as_object_mut() {
                spec.remove("nodeName");
            }
        }
    }
    sim.update("pods", p)
}

/// Runs pod churn at `cfg.rate` ops/s until `shutdown` is cancelled.
pub fn spawn_churn(
    sim: Sim,
    cfg: ChurnConfig,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut rng = rng_for(&cfg);
        let nodes: Vec<String> = (0..cfg.nodes).map(node_name).collect();
        let deploys = deployments(&cfg);
        let mut known: Option<Known> = None;
        let mut rollout = rollout::Rollout::new(deploys.clone());
        let mut set = sim.churn_rate();
        loop {
            // The rate set by `/debug/churn`, or the one it started with.
            let rate = set.borrow_and_update().unwrap_or(cfg.rate);
            if rate <= 0.0 || !rate.is_finite() {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    changed = set.changed() => if changed.is_err() { return },
                }
                continue;
            }
            if cfg.style == ChurnStyle::Random && known.is_none() {
                known = Some(sim.names("pods"));
            }
            // Ticks of at least 10 ms; each runs the ops that fell due since the last.
            let period = Duration::from_secs_f64((1.0 / rate).max(0.01));
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let (mut last, mut due) = (Instant::now(), 0.0f64);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    changed = set.changed() => {
                        if changed.is_err() { return }
                        break;
                    }
                    _ = tick.tick() => {}
                }
                let now = Instant::now();
                // At most a second's ops at once: a task held back (a
                // loaded machine, a stalled runtime) does not then run a
                // backlog of thousands before it sees `shutdown` again.
                due = (due + now.duration_since(last).as_secs_f64() * rate).min(rate.max(1.0));
                last = now;
                while due >= 1.0 {
                    match cfg.style {
                        ChurnStyle::Random => {
                            let known = known.get_or_insert_with(Vec::new);
                            churn_once(&sim, &cfg, &deploys, &nodes, known, &mut rng)
                        }
                        ChurnStyle::Rollout => rollout.step(&sim, &cfg, &nodes, &mut rng),
                    }
                    due -= 1.0;
                }
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
            assert!(p["metadata"]["labels"]["app"].is_string());
            assert!(p["metadata"]["labels"]["pod-template-hash"].is_string());
            let owner = &p["metadata"]["ownerReferences"][0];
            assert_eq!(
                (&owner["kind"], &owner["controller"]),
                (&"ReplicaSet".into(), &true.into())
            );
            assert!(p["metadata"]["managedFields"].is_array());
        }
        let scheduled = pods
            .iter()
            .filter(|p| p["spec"]["nodeName"].is_string())
            .count();
        assert!(scheduled > 40, "{scheduled} scheduled");
    }

    /// What `kubectl get pods` reads for READY (ready containers of all)
    /// and STATUS (the phase, unless a container waits or is terminated).
    fn kubectl_ready_status(p: &serde_json::Value) -> (String, String) {
        let statuses = p["status"]["containerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let ready = statuses.iter().filter(|s| s["ready"] == true).count();
        let total = p["spec"]["containers"].as_array().map_or(0, Vec::len);
        let mut status = p["status"]["phase"].as_str().unwrap_or_default().to_owned();
        for s in &statuses {
            if let Some(reason) = s["state"]["waiting"]["reason"].as_str() {
                status = reason.to_owned();
            }
        }
        if p["metadata"]["deletionTimestamp"].is_string() {
            status = "Terminating".into();
        }
        (format!("{ready}/{total}"), status)
    }

    #[test]
    fn generated_pods_are_the_size_of_real_ones_and_read_as_running() {
        let cfg = |managed_fields| ChurnConfig {
            managed_fields,
            pods: 600,
            ..ChurnConfig::default()
        };
        let mut rng = rand::SeedableRng::seed_from_u64(5);
        for (managed, range) in [(true, 3000..=8000), (false, 2000..=4000)] {
            let cfg = cfg(managed);
            let deploys = super::deployments(&cfg);
            let containers: std::collections::BTreeSet<usize> =
                deploys.iter().map(|d| d.containers).collect();
            assert_eq!(containers.into_iter().collect::<Vec<_>>(), [1, 2, 3]);
            for d in &deploys {
                let p = d.pod(&cfg, &mut rng, Some("node-4")).build();
                let size = serde_json::to_vec(&p).unwrap().len();
                // A three-container pod without managedFields runs a little over.
                let range = if d.containers == 3 && !managed {
                    2000..=4700
                } else {
                    range.clone()
                };
                assert!(
                    range.contains(&size),
                    "pod of {size} bytes (managedFields {managed})"
                );
                let n = d.containers;
                assert_eq!(
                    kubectl_ready_status(&p),
                    (format!("{n}/{n}"), "Running".into())
                );
                let conditions: Vec<&str> = p["status"]["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["type"].as_str().unwrap())
                    .collect();
                assert_eq!(
                    conditions,
                    [
                        "PodReadyToStartContainers",
                        "Initialized",
                        "Ready",
                        "ContainersReady",
                        "PodScheduled"
                    ]
                );
                for key in ["podIP", "hostIP", "startTime"] {
                    assert!(p["status"][key].is_string(), "{key}");
                }
                assert_eq!(p["status"]["qosClass"], "Burstable");
                let c = &p["spec"]["containers"][0];
                for key in ["livenessProbe", "readinessProbe", "resources"] {
                    assert!(c[key].is_object(), "{key}");
                }
                assert!(c["env"].as_array().unwrap().len() >= 3);
                assert!(
                    p["spec"]["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]
                        .is_object()
                );
                assert_eq!(p["metadata"]["managedFields"].is_array(), managed);
                // Typed as kube-rs (and so client-go) reads it.
                let typed: k8s_openapi::api::core::v1::Pod = serde_json::from_value(p).unwrap();
                assert_eq!(typed.spec.unwrap().containers.len(), n);
            }
            let pending = deploys[0].pod(&cfg, &mut rng, None).build();
            assert_eq!(kubectl_ready_status(&pending).1, "Pending");
            let creating = deploys[0]
                .pod(&cfg, &mut rng, Some("node-1"))
                .phase("Pending")
                .build();
            assert_eq!(kubectl_ready_status(&creating).1, "ContainerCreating");
        }
    }

    #[test]
    fn pod_builder_sets_node_and_labels() {
        let p = pod("a").ns("x").node("n1").label("app", "web").build();
        assert_eq!(p["metadata"]["namespace"], "x");
        assert_eq!(p["spec"]["nodeName"], "n1");
        assert_eq!(p["status"]["phase"], "Running");
        assert_eq!(p["metadata"]["labels"]["app"], "web");
    }

    /// Random churn moves pods between phases and nodes; each pod's
    /// status agrees with its phase afterwards, as the kubelet writes it:
    /// Running pods ready (READY n/n), others not, Failed and Succeeded
    /// ones with terminated containers, unbound ones without a node or
    /// an address.
    #[test]
    fn churned_pods_have_the_status_of_their_phase() {
        let sim = Sim::new(SimConfig::default());
        let cfg = ChurnConfig {
            pods: 60,
            seed: Some(3),
            ..ChurnConfig::default()
        };
        seed_cluster(&sim, &cfg);
        let nodes: Vec<String> = (0..cfg.nodes).map(super::node_name).collect();
        let deploys = super::deployments(&cfg);
        let mut known = sim.names("pods");
        let mut rng = super::rng_for(&cfg);
        for _ in 0..2000 {
            super::churn_once(&sim, &cfg, &deploys, &nodes, &mut known, &mut rng);
        }
        let mut phases = std::collections::BTreeSet::new();
        for p in sim.list("pods").0 {
            let phase = p["status"]["phase"].as_str().unwrap().to_owned();
            let n = p["spec"]["containers"].as_array().unwrap().len();
            let (ready, _) = kubectl_ready_status(&p);
            let condition = |ty: &str| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == ty)
                    .map(|c| c["status"].clone())
            };
            let bound = p["spec"]["nodeName"].is_string();
            let states: Vec<&str> = p["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s["state"].as_object()?.keys().next().map(String::as_str))
                .collect();
            let name = &p["metadata"]["name"];
            match phase.as_str() {
                "Running" => {
                    assert_eq!(ready, format!("{n}/{n}"), "{name}");
                    assert_eq!(condition("Ready"), Some("True".into()), "{name}");
                    assert!(states.iter().all(|s| *s == "running"), "{name}: {states:?}");
                }
                "Failed" | "Succeeded" => {
                    assert_eq!(ready, format!("0/{n}"), "{name}");
                    assert_eq!(condition("Ready"), Some("False".into()), "{name}");
                    assert!(
                        states.iter().all(|s| *s == "terminated"),
                        "{name}: {states:?}"
                    );
                }
                _ => assert_eq!(ready.split('/').next(), Some("0"), "{name} {phase}"),
            }
            if !bound {
                assert!(
                    p["status"]["podIP"].is_null(),
                    "{name}: unbound with an address"
                );
            }
            phases.insert(phase);
        }
        assert!(
            phases.len() >= 3,
            "churn moved pods between phases: {phases:?}"
        );
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

    /// `POST /debug/churn?rate=0` pauses churn (a load test's settle
    /// point), and a rate set again resumes it.
    #[tokio::test(start_paused = true)]
    async fn churn_paused_writes_nothing_and_resumes_at_the_rate_set() {
        let sim = Sim::new(SimConfig::default());
        let cfg = ChurnConfig {
            pods: 20,
            rate: 100.0,
            seed: Some(3),
            managed_fields: false,
            ..ChurnConfig::default()
        };
        seed_cluster(&sim, &cfg);
        let stop = CancellationToken::new();
        let task = spawn_churn(sim.clone(), cfg, stop.clone());
        let start = sim.resource_version();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let running = sim.resource_version();
        assert!(
            running >= start + 50,
            "churn at 100/s: {start} -> {running}"
        );
        sim.set_churn_rate(0.0);
        // The pause takes effect at the churn task's next turn.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let paused = sim.resource_version();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(sim.resource_version(), paused, "paused churn wrote");
        sim.set_churn_rate(10.0);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let resumed = sim.resource_version() - paused;
        assert!(
            (10..=30).contains(&resumed),
            "{resumed} writes in 2 s at 10/s"
        );
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn rollout_churn_replaces_pods_and_keeps_the_population() {
        let sim = Sim::new(SimConfig::default());
        let cfg = ChurnConfig {
            pods: 60,
            rate: 2000.0,
            seed: Some(2),
            style: super::ChurnStyle::Rollout,
            // Smaller pods: building each is most of a write's cost.
            managed_fields: false,
            ..ChurnConfig::default()
        };
        seed_cluster(&sim, &cfg);
        let before = sim.names("pods");
        let start = sim.resource_version();
        let stop = CancellationToken::new();
        let task = spawn_churn(sim.clone(), cfg, stop.clone());
        // A bound, not a timing: a debug build on a busy machine makes
        // these 400 writes of ~6 KB pods in seconds.
        tokio::time::timeout(Duration::from_secs(60), async {
            while sim.resource_version() < start + 400 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("rollouts made progress");
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
        let (pods, _) = sim.list("pods");
        // At most one surge of new pods and terminating old ones in flight.
        assert!((57..=63).contains(&pods.len()), "{} pods", pods.len());
        let replaced = before
            .iter()
            .filter(|k| !sim.names("pods").contains(k))
            .count();
        assert!(replaced >= 30, "{replaced} replaced");
        assert!(
            pods.iter()
                .all(|p| p["metadata"]["ownerReferences"][0]["controller"] == true)
        );
    }
}
