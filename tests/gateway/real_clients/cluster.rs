//! The world a real client runs in: a simulated API server with pods,
//! deployments and a custom resource under churn, and a kubefan in this
//! process on a fixed loopback address that can be restarted. Faults are
//! the simulator's own (ended watches, compacted history); the scenario
//! drives them and checks that the upstream sees one watch per resource.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kubefan::app::{App, Upstream};
use kubefan_sim::{ChurnConfig, ResourceDef, SimServer, Stats, seed_cluster, spawn_churn};
use kubefan_sim::{Sim, pod};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::support::{WAIT, sim_config, test_config};

/// The resources every real client watches, keyed as the simulator and
/// kubefan name them.
pub const RESOURCES: [&str; 3] = ["pods", "deployments.apps", "widgets.example.com"];

/// The custom resource, as the client programs take it (group/version/plural).
pub const CRD: &str = "example.com/v1/widgets";

/// resource → object key (`ns/name`) → resourceVersion: a client's caches,
/// or the simulated server's state.
pub type Caches = BTreeMap<String, BTreeMap<String, String>>;

/// Churn writes per second: pods, and deployments and widgets together.
const POD_CHURN_RATE: f64 = 40.0;
const OTHER_CHURN_PERIOD: Duration = Duration::from_millis(40);

pub struct Cluster {
    pub sim: Sim,
    server: Option<SimServer>,
    app: Option<App>,
    addr: SocketAddr,
    /// Where kubeconfigs, certificates, caches and client state go;
    /// removed on drop.
    pub dir: TempDir,
    churn_stop: CancellationToken,
    churn: Vec<JoinHandle<()>>,
    /// Objects written by [`Cluster::mark`], for unique names.
    marks: u32,
    /// What the previous [`Cluster::mark`] wrote.
    previous_marks: Marks,
    /// With [`Cluster::start_named`]: a second, quiet cluster (`west`)
    /// beside this one (`east`), both served by name only.
    other: Option<(Sim, SimServer)>,
}

/// The names [`Cluster::start_named`] serves its two clusters by.
pub const NAMED: [&str; 2] = ["east", "west"];

/// A directory removed when dropped, also when a test panics.
pub struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let dir = std::env::temp_dir().join(format!("kubefan-clients-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn deployment(name: &str, replicas: u64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "web", "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": format!("registry.example.com/{name}:1.0")}]}
            }
        },
        "status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas}
    })
}

fn widget(name: &str, size: u64) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size}})
}

/// Creates, changes and deletes deployments and widgets until `stop`.
fn spawn_other_churn(sim: Sim, stop: CancellationToken) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(OTHER_CHURN_PERIOD);
        for i in 0u64.. {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let (resource, ns, name) = if i % 2 == 0 {
                ("deployments.apps", "web", format!("d-{}", (i / 2) % 8))
            } else {
                (
                    "widgets.example.com",
                    "default",
                    format!("w-{}", (i / 2) % 8),
                )
            };
            let object = || match resource {
                "deployments.apps" => deployment(&name, i % 5),
                _ => widget(&name, i),
            };
            let result = match sim.get(resource, Some(ns), &name) {
                None => sim.create(resource, object()),
                Some(_) if i % 7 == 0 => sim.delete(resource, Some(ns), &name),
                Some(_) => sim.merge_patch(
                    resource,
                    Some(ns),
                    &name,
                    &json!({"metadata": {"labels": {"round": i.to_string()}}}),
                ),
            };
            result.expect("churn write");
        }
    })
}

fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .expect("object has a resourceVersion")
}

fn key_of(obj: &Value) -> String {
    let m = &obj["metadata"];
    match m["namespace"].as_str() {
        Some(ns) => format!("{ns}/{}", m["name"].as_str().unwrap()),
        None => m["name"].as_str().unwrap().to_string(),
    }
}

/// One object written to each resource: (resource, key, resourceVersion).
pub type Marks = Vec<(String, String, u64)>;

impl Cluster {
    /// A seeded simulated cluster under churn and a kubefan on it whose
    /// informers for [`RESOURCES`] start at boot.
    pub async fn start() -> Cluster {
        Self::start_with(false).await
    }

    /// [`Cluster::start`], served as the cluster `east` of a gateway with
    /// two (`--cluster east=... --cluster west=...`, no default): clients
    /// reach it through the kubeconfig's `kubefan-east` context, whose
    /// server is `https://ADDR/clusters/east`. `west` holds a few pods of
    /// its own and no churn.
    pub async fn start_named() -> Cluster {
        Self::start_with(true).await
    }

    async fn start_with(named: bool) -> Cluster {
        let other = match named {
            true => {
                let sim = Sim::new(sim_config());
                seed_cluster(
                    &sim,
                    &ChurnConfig {
                        pods: 5,
                        seed: Some(11),
                        ..ChurnConfig::default()
                    },
                );
                let server = sim
                    .serve("127.0.0.1:0".parse().unwrap())
                    .await
                    .expect("sim binds");
                Some((sim, server))
            }
            false => None,
        };
        let sim = Sim::new(sim_config());
        sim.register(ResourceDef::new(
            "example.com",
            "v1",
            "widgets",
            "Widget",
            true,
        ));
        let churn_cfg = ChurnConfig {
            rate: POD_CHURN_RATE,
            pods: 60,
            ..ChurnConfig::default()
        };
        seed_cluster(&sim, &churn_cfg);
        for i in 0..4 {
            sim.create("deployments.apps", deployment(&format!("d-{i}"), 2))
                .unwrap();
            sim.create("widgets.example.com", widget(&format!("w-{i}"), i))
                .unwrap();
        }
        let server = sim
            .serve("127.0.0.1:0".parse().unwrap())
            .await
            .expect("sim binds");
        // kubefan serves HTTPS, as clients that refuse plain http
        // (@kubernetes/client-node) and teams that verify certificates
        // reach it: a CA made here, its certificate for 127.0.0.1.
        let dir = TempDir::new();
        let ca = crate::support::Authority::new("kubefan conformance CA");
        let (cert, key) = ca.leaf("kubefan");
        std::fs::write(dir.path().join("ca.crt"), ca.pem()).expect("CA written");
        std::fs::write(dir.path().join("tls.crt"), cert).expect("certificate written");
        std::fs::write(dir.path().join("tls.key"), key).expect("key written");
        let app = Self::gateway(
            &server,
            other.as_ref().map(|(_, s)| s),
            "127.0.0.1:0".parse().unwrap(),
            dir.path(),
        )
        .await;
        let addr = app.local_addr();
        let churn_stop = CancellationToken::new();
        let churn = vec![
            spawn_churn(sim.clone(), churn_cfg, churn_stop.clone()),
            spawn_other_churn(sim.clone(), churn_stop.clone()),
        ];
        let cluster = Cluster {
            sim,
            server: Some(server),
            app: Some(app),
            addr,
            dir,
            churn_stop,
            churn,
            marks: 0,
            previous_marks: Marks::new(),
            other,
        };
        cluster.write_kubeconfig();
        cluster
    }

    async fn gateway(
        server: &SimServer,
        other: Option<&SimServer>,
        listen: SocketAddr,
        dir: &Path,
    ) -> App {
        let mut cfg = test_config(&RESOURCES);
        cfg.listen = listen;
        cfg.tls.cert_file = Some(dir.join("tls.crt"));
        cfg.tls.key_file = Some(dir.join("tls.key"));
        cfg.tls.ca_file = Some(dir.join("ca.crt"));
        let upstream = |name: Option<&str>, server: &SimServer| {
            let client = kube::Client::try_from(server.client_config()).expect("kube client");
            Upstream {
                name: name.map(str::to_string),
                client: client.clone(),
                reviews: client,
                url: None,
            }
        };
        let upstreams = match other {
            None => vec![upstream(None, server)],
            Some(other) => vec![
                upstream(Some(NAMED[0]), server),
                upstream(Some(NAMED[1]), other),
            ],
        };
        let app = App::build_clusters(cfg, upstreams)
            .await
            .expect("gateway starts");
        for resource in RESOURCES {
            let hub = app.informers().hub(resource).await.expect("resolves");
            assert!(hub.wait_synced(WAIT).await, "{resource} did not sync");
        }
        app
    }

    fn app(&self) -> &App {
        self.app.as_ref().expect("kubefan is running")
    }

    /// The kubeconfig every client is given: kubefan's Kubernetes face over
    /// HTTPS, as `kubefan kubeconfig` writes it (the CA to trust, no
    /// `insecure-skip-tls-verify`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig.yaml")
    }

    fn write_kubeconfig(&self) {
        let ca = kubefan::kubeconfig::read_certificates(
            "--tls-ca-file",
            &self.dir.path().join("ca.crt"),
        )
        .expect("the CA reads");
        let kubeconfig = kubefan::kubeconfig::Kubeconfig {
            name: "kubefan".into(),
            server: kubefan::kubeconfig::server_url(self.addr, true),
            ca_pem: Some(ca),
            user: kubefan::kubeconfig::User::Anonymous,
            clusters: match self.other {
                Some(_) => NAMED.map(String::from).to_vec(),
                None => Vec::new(),
            },
            namespace: None,
        };
        let yaml = kubeconfig.to_yaml();
        assert!(!yaml.contains("insecure"), "verification stays on: {yaml}");
        std::fs::write(self.kubeconfig(), yaml).expect("kubeconfig written");
    }

    /// The simulated server's objects, as [`Caches`].
    pub fn upstream(&self) -> Caches {
        RESOURCES
            .iter()
            .map(|resource| {
                let objects = self.sim.list(resource).0;
                let state = objects
                    .iter()
                    .map(|o| (key_of(o), rv_of(o).to_string()))
                    .collect();
                (resource.to_string(), state)
            })
            .collect()
    }

    /// The simulated server's pods on `node` (`spec.nodeName`), as a node
    /// agent's cache holds them.
    pub fn node_pods(&self, node: &str) -> BTreeMap<String, String> {
        self.sim
            .list("pods")
            .0
            .iter()
            .filter(|o| o["spec"]["nodeName"].as_str() == Some(node))
            .map(|o| (key_of(o), rv_of(o).to_string()))
            .collect()
    }

    /// Moves pods onto and off `node`, as a scheduler and an eviction do:
    /// one created elsewhere then rescheduled onto it, one rescheduled from
    /// it to another node, one unscheduled, one deleted there, and one that
    /// stays and changes. Returns the marks a client then holds (in `pods`
    /// and, for the pods on `node`, in `pods@NODE`) and the ones it must
    /// not: the pods that left `node` are gone from `pods@NODE` (a DELETED
    /// to a watch of `spec.nodeName=NODE`), the deleted one from both.
    pub fn reschedule(&mut self, node: &str, elsewhere: &str) -> (Marks, Marks) {
        self.marks += 1;
        let n = self.marks;
        let agent = format!("pods@{node}");
        let (mut held, mut gone) = (Marks::new(), Marks::new());
        let write = |name: &str, first: &str, then: Option<Value>| {
            let created = self
                .sim
                .create(
                    "pods",
                    pod(&format!("{name}-{n}")).ns("web").node(first).build(),
                )
                .expect("pod created");
            let key = key_of(&created);
            let last = match then {
                Some(patch) => self
                    .sim
                    .merge_patch("pods", Some("web"), &format!("{name}-{n}"), &patch)
                    .expect("pod patched"),
                None => created,
            };
            (
                key,
                rv_of(&last),
                last["spec"]["nodeName"].as_str() == Some(node),
            )
        };
        let moves = [
            (
                "arrives",
                elsewhere,
                Some(json!({"spec": {"nodeName": node}})),
            ),
            (
                "leaves",
                node,
                Some(json!({"spec": {"nodeName": elsewhere}})),
            ),
            (
                "unscheduled",
                node,
                Some(json!({"spec": {"nodeName": null}, "status": {"phase": "Pending"}})),
            ),
            (
                "stays",
                node,
                Some(json!({"metadata": {"labels": {"round": n.to_string()}}})),
            ),
            ("deleted", node, None),
        ];
        for (name, first, then) in moves {
            let (key, rv, on_node) = write(name, first, then);
            if name == "deleted" {
                self.sim
                    .delete("pods", Some("web"), &format!("{name}-{n}"))
                    .expect("pod deleted");
                gone.push(("pods".into(), key.clone(), rv));
                gone.push((agent.clone(), key, rv));
                continue;
            }
            held.push(("pods".into(), key.clone(), rv));
            match on_node {
                true => held.push((agent.clone(), key, rv)),
                false => gone.push((agent.clone(), key, rv)),
            }
        }
        (held, gone)
    }

    /// The pods of the quiet cluster of [`Cluster::start_named`] (`west`),
    /// as [`Caches`] hold them.
    pub fn other_pods(&self) -> BTreeMap<String, String> {
        let (sim, _) = self.other.as_ref().expect("started named");
        sim.list("pods")
            .0
            .iter()
            .map(|o| (key_of(o), rv_of(o).to_string()))
            .collect()
    }

    /// Writes one new object to each resource, so that a client holding
    /// them all has followed the changes up to here.
    pub fn mark(&mut self) -> Marks {
        self.marks += 1;
        let n = self.marks;
        let written = [
            self.sim
                .create("pods", pod(&format!("mark-{n}")).ns("web").build()),
            self.sim
                .create("deployments.apps", deployment(&format!("mark-{n}"), 1)),
            self.sim
                .create("widgets.example.com", widget(&format!("mark-{n}"), 0)),
        ];
        let marks: Marks = RESOURCES
            .iter()
            .zip(written)
            .map(|(resource, obj)| {
                let obj = obj.expect("mark written");
                (resource.to_string(), key_of(&obj), rv_of(&obj))
            })
            .collect();
        self.previous_marks = marks.clone();
        marks
    }

    /// Counters of the simulated server.
    pub fn stats(&self) -> Stats {
        self.sim.stats()
    }

    /// Ends every upstream watch, as an API server restart would: kubefan
    /// resumes each from its last resourceVersion.
    pub fn end_upstream_watches(&self) {
        self.sim.end_watches();
    }

    /// Makes kubefan's resume fail with 410 Expired: its watches stall
    /// while changes are written (new marks, and the previous marks
    /// deleted), history is compacted past them, and the watches end.
    /// kubefan relists, and the diff against its cache must carry the
    /// deletions too.
    /// Returns the new marks and the deleted ones.
    pub fn expire_upstream_history(&mut self) -> (Marks, Marks) {
        self.sim.stall_watches(true);
        let stale = std::mem::take(&mut self.previous_marks);
        let marks = self.mark();
        for (resource, key, _) in &stale {
            let (ns, name) = key.split_once('/').expect("namespaced");
            self.sim
                .delete(resource, Some(ns), name)
                .expect("mark deleted");
        }
        self.sim.compact();
        self.sim.end_watches();
        self.sim.stall_watches(false);
        (marks, stale)
    }

    /// Stops kubefan (its streams are told to reconnect) and starts a new
    /// one on the same address; returns the simulator's counters between
    /// the two, to count what the new process asks of the upstream.
    pub async fn restart_kubefan(&mut self) -> Stats {
        let app = self.app.take().expect("kubefan is running");
        tokio::time::timeout(WAIT, app.stop())
            .await
            .expect("kubefan stops in time");
        let between = self.sim.stats();
        let server = self.server.as_ref().expect("sim is running");
        let other = self.other.as_ref().map(|(_, s)| s);
        self.app = Some(Self::gateway(server, other, self.addr, self.dir.path()).await);
        between
    }

    /// Stops the churn and waits until kubefan has taken in every change.
    pub async fn settle(&mut self) {
        self.churn_stop.cancel();
        for task in self.churn.drain(..) {
            tokio::time::timeout(WAIT, task)
                .await
                .expect("churn stops in time")
                .expect("churn task");
        }
        let rv = self.sim.resource_version();
        for resource in RESOURCES {
            let hub = self.app().informers().hub(resource).await.unwrap();
            assert!(
                hub.wait_for_rv(rv, WAIT).await,
                "kubefan's {resource} did not reach resourceVersion {rv}"
            );
        }
    }

    /// The upstream holds exactly one watch per resource, and the kubefan
    /// process running now opened exactly one (and listed) per resource
    /// since `before`, however many clients it serves.
    pub fn assert_one_watch_per_resource(&self, before: &Stats) {
        let now = self.sim.stats();
        for resource in RESOURCES {
            let (b, n) = (before.resource(resource), now.resource(resource));
            assert_eq!(n.open_watches, 1, "{resource}: {n:?}");
            assert_eq!(
                n.watch_requests - b.watch_requests,
                1,
                "{resource}: watches since {b:?}: {n:?}"
            );
        }
    }

    /// How many times kubefan relisted each of [`RESOURCES`] after a 410
    /// (`kubefan_upstream_relists_total{reason="expired"}`); its lists are
    /// watches (streaming lists), which the upstream's counters cannot
    /// tell from resumed watches.
    pub fn relists(&self) -> Vec<u64> {
        let text = self
            .app
            .as_ref()
            .map(|a| a.metrics().encode())
            .unwrap_or_default();
        RESOURCES
            .into_iter()
            .map(|r| {
                let series = format!(
                    "kubefan_upstream_relists_total{{resource=\"{r}\",reason=\"expired\"}} "
                );
                text.lines()
                    .find_map(|l| l.strip_prefix(series.as_str()))
                    .and_then(|n| n.trim().parse().ok())
                    .unwrap_or(0)
            })
            .collect()
    }

    /// The resources kubefan relisted upstream since `before` (the 410
    /// path), as [`Cluster::relists`] counted then.
    pub fn relisted_since(&self, before: &[u64]) -> Vec<&'static str> {
        let now = self.relists();
        RESOURCES
            .into_iter()
            .zip(now.iter().zip(before))
            .filter(|(_, (n, b))| n > b)
            .map(|(r, _)| r)
            .collect()
    }

    pub async fn stop(mut self) {
        self.churn_stop.cancel();
        if let Some(app) = self.app.take() {
            tokio::time::timeout(WAIT, app.stop())
                .await
                .expect("kubefan stops in time");
        }
        if let Some(server) = self.server.take() {
            server.stop().await;
        }
        if let Some((_, server)) = self.other.take() {
            server.stop().await;
        }
    }
}
