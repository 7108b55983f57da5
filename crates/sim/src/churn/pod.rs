//! The shape of a pod as kube-apiserver stores one that a Deployment's
//! ReplicaSet created, the scheduler bound and the kubelet started: owner
//! reference, containers with resources, probes, env and mounts, the
//! projected service-account token volume, tolerations, status conditions
//! and container statuses (what `kubectl get pods` reads for READY and
//! STATUS), and optionally the `managedFields` of kube-controller-manager
//! and the kubelet. Sizes, measured by `generated_pods_are_the_size_of_real_ones`:
//! about 2–4 KB without managedFields, 3–8 KB with them, as pods read from
//! a real kube-apiserver are.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// A pod fixture: `pod("a").ns("x").node("n1").build()`.
#[derive(Debug, Clone)]
pub struct PodBuilder {
    name: String,
    ns: String,
    node: Option<String>,
    labels: BTreeMap<String, String>,
    phase: String,
    containers: usize,
    managed_fields: bool,
    owner: Option<(String, String)>,
    image_tag: String,
}

/// Starts a pod fixture in namespace "default", unscheduled, phase Pending,
/// one container, with managedFields.
pub fn pod(name: &str) -> PodBuilder {
    PodBuilder {
        name: name.to_owned(),
        ns: "default".to_owned(),
        node: None,
        labels: BTreeMap::new(),
        phase: "Pending".to_owned(),
        containers: 1,
        managed_fields: true,
        owner: None,
        image_tag: "1.4.2".to_owned(),
    }
}

/// Sidecars after the app's own container, as meshes and agents add them.
const SIDECARS: [(&str, &str, u16); 2] = [
    ("log-shipper", "registry.example.com/fluent-bit:3.1.4", 2020),
    (
        "metrics-exporter",
        "registry.example.com/exporter:0.15.0",
        9100,
    ),
];

/// A stable hash of `s`, for names derived from names.
pub(crate) fn fnv_hash(s: &str) -> u64 {
    fnv(s, 0)
}

/// A stable 64-bit FNV-1a hash, for ids and addresses derived from names.
fn fnv(s: &str, salt: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ salt;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// 64 hex digits derived from `s`, as image digests and container ids are.
fn hex64(s: &str) -> String {
    (0..4).map(|i| format!("{:016x}", fnv(s, i))).collect()
}

/// A UUID-shaped uid derived from `s` (the same name gives the same uid).
pub(crate) fn uid_of(s: &str) -> String {
    let h = hex64(s);
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

fn now() -> String {
    crate::store::now_rfc3339()
}

/// The status the kubelet writes for `pod` once it is in `phase` on
/// `node` (`None`: unbound): conditions, container statuses and
/// addresses that agree with the phase, as they do on a cluster (a Failed
/// pod's containers are terminated and not ready; a Running one's ready).
pub fn kubelet_status(pod: &Value, phase: &str, node: Option<&str>) -> Value {
    let meta = &pod["metadata"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let containers: Vec<(String, String, u16)> = pod["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| (text(&c["name"]), text(&c["image"]), 0))
                .collect()
        })
        .unwrap_or_default();
    let mut builder = self::pod(meta["name"].as_str().unwrap_or_default())
        .ns(meta["namespace"].as_str().unwrap_or("default"))
        .phase(phase);
    builder.node = node.map(str::to_owned);
    builder.status(&containers, &now())
}

impl PodBuilder {
    pub fn ns(mut self, ns: &str) -> Self {
        self.ns = ns.to_owned();
        self
    }

    /// Schedules the pod on `node` and makes it Running and ready.
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

    /// How many containers (1–3): the app's own, then sidecars.
    pub fn containers(mut self, n: usize) -> Self {
        self.containers = n.clamp(1, 1 + SIDECARS.len());
        self
    }

    /// Whether `metadata.managedFields` is written (it is by default, as
    /// kube-apiserver stores it; about a third of a pod).
    pub fn managed_fields(mut self, on: bool) -> Self {
        self.managed_fields = on;
        self
    }

    /// The ReplicaSet that owns the pod (its name and uid); by default one
    /// named after the `app` label.
    pub fn owner(mut self, replica_set: &str, uid: &str) -> Self {
        self.owner = Some((replica_set.to_owned(), uid.to_owned()));
        self
    }

    pub fn image_tag(mut self, tag: &str) -> Self {
        self.image_tag = tag.to_owned();
        self
    }

    fn app(&self) -> &str {
        self.labels.get("app").map(String::as_str).unwrap_or("app")
    }

    /// (name, image, port) of each container.
    fn container_list(&self) -> Vec<(String, String, u16)> {
        let app = self.app();
        let mut list = vec![(
            app.to_owned(),
            format!("registry.example.com/{app}:{}", self.image_tag),
            8080,
        )];
        for (name, image, port) in SIDECARS.iter().take(self.containers - 1) {
            list.push(((*name).to_owned(), (*image).to_owned(), *port));
        }
        list
    }

    /// The app's container in full (env, probes, mounts); a sidecar
    /// slimmer, as agents' usually are (no probes, one variable).
    fn container_spec(name: &str, image: &str, port: u16, main: bool) -> Value {
        let field_env = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}});
        if !main {
            return json!({
                "name": name, "image": image, "imagePullPolicy": "IfNotPresent",
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"
            });
        }
        let probe = |path: &str, delay: u32| {
            json!({"httpGet": {"path": path, "port": port, "scheme": "HTTP"},
                "initialDelaySeconds": delay, "periodSeconds": 10, "timeoutSeconds": 1,
                "successThreshold": 1, "failureThreshold": 3})
        };
        json!({
            "name": name,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "ports": [{"containerPort": port, "name": "http", "protocol": "TCP"}],
            "env": [
                field_env("POD_NAME", "metadata.name"),
                field_env("POD_NAMESPACE", "metadata.namespace"),
                {"name": "LOG_LEVEL", "value": "info"}
            ],
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
            "livenessProbe": probe("/healthz", 10),
            "readinessProbe": probe("/readyz", 5),
            "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "name": "kube-api-access", "readOnly": true}],
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File"
        })
    }

    /// The status a kubelet writes for the pod's phase and node.
    fn status(&self, containers: &[(String, String, u16)], now: &str) -> Value {
        let mut status = json!({"phase": self.phase, "qosClass": "Burstable"});
        let Some(node) = &self.node else {
            // Not yet bound: the scheduler has not written PodScheduled.
            return status;
        };
        let node_ix = node
            .rsplit('-')
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        let h = fnv(&format!("{}/{}", self.ns, self.name), 0);
        let host_ip = format!(
            "10.{}.{}.{}",
            1 + node_ix / 65536 % 200,
            node_ix / 256 % 256,
            node_ix % 256
        );
        let pod_ip = format!(
            "10.{}.{}.{}",
            100 + node_ix / 256 % 100,
            node_ix % 256,
            2 + h % 250
        );
        let running = self.phase == "Running";
        let done = matches!(self.phase.as_str(), "Succeeded" | "Failed");
        let t = |b: bool| if b { "True" } else { "False" };
        let cond = |ty: &str, ok: bool| {
            let mut c = json!({"type": ty, "status": t(ok), "lastTransitionTime": now});
            if !ok && ty.contains("Ready") {
                c["reason"] = json!(if done {
                    "PodCompleted"
                } else {
                    "ContainersNotReady"
                });
            }
            c
        };
        status["conditions"] = json!([
            cond("PodReadyToStartContainers", running),
            cond("Initialized", true),
            cond("Ready", running),
            cond("ContainersReady", running),
            cond("PodScheduled", true)
        ]);
        status["hostIP"] = json!(host_ip);
        status["hostIPs"] = json!([{"ip": host_ip}]);
        status["startTime"] = json!(now);
        if running || done {
            status["podIP"] = json!(pod_ip);
            status["podIPs"] = json!([{"ip": pod_ip}]);
        }
        let statuses: Vec<Value> = containers
            .iter()
            .map(|(name, image, _)| {
                let id = hex64(&format!("{}/{}/{name}", self.ns, self.name));
                let state = if running {
                    json!({"running": {"startedAt": now}})
                } else if done {
                    let code = i32::from(self.phase == "Failed");
                    json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" },
                        "startedAt": now, "finishedAt": now, "containerID": format!("containerd://{id}")}})
                } else {
                    json!({"waiting": {"reason": "ContainerCreating"}})
                };
                let mut s = json!({
                    "name": name, "image": image,
                    "imageID": format!("{}@sha256:{}", image.split(':').next().unwrap_or(image), hex64(image)),
                    "ready": running, "started": running, "restartCount": 0,
                    "lastState": {}, "state": state
                });
                if running || done {
                    s["containerID"] = json!(format!("containerd://{id}"));
                }
                s
            })
            .collect();
        status["containerStatuses"] = json!(statuses);
        status
    }

    /// kube-controller-manager's create and the kubelet's status updates,
    /// as `metadata.managedFields` records them.
    fn managed(&self, containers: &[(String, String, u16)], uid: &str, now: &str) -> Value {
        let mut labels = Map::new();
        labels.insert(".".into(), json!({}));
        for k in self.labels.keys() {
            labels.insert(format!("f:{k}"), json!({}));
        }
        let mut spec_containers = Map::new();
        for (i, (name, _, port)) in containers.iter().enumerate() {
            let port_key = format!("k:{{\"containerPort\":{port},\"protocol\":\"TCP\"}}");
            let entry = if i > 0 {
                json!({".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:resources": {}, "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}})
            } else {
                let probe = json!({".": {}, "f:failureThreshold": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}},
                    "f:initialDelaySeconds": {}, "f:periodSeconds": {}, "f:successThreshold": {}, "f:timeoutSeconds": {}});
                json!({".": {}, "f:env": {".": {}, "k:{\"name\":\"LOG_LEVEL\"}": {".": {}, "f:name": {}, "f:value": {}},
                    "k:{\"name\":\"POD_NAME\"}": {".": {}, "f:name": {}, "f:valueFrom": {}},
                    "k:{\"name\":\"POD_NAMESPACE\"}": {".": {}, "f:name": {}, "f:valueFrom": {}}},
                    "f:image": {}, "f:imagePullPolicy": {}, "f:livenessProbe": probe.clone(), "f:name": {},
                    "f:ports": {".": {}, port_key: {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                    "f:readinessProbe": probe,
                    "f:resources": {".": {}, "f:limits": {".": {}, "f:cpu": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                    "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}, "f:volumeMounts": {}})
            };
            spec_containers.insert(format!("k:{{\"name\":\"{name}\"}}"), entry);
        }
        let mut fields = vec![json!({
            "manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
            "time": now, "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:generateName": {}, "f:labels": labels,
                    "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{uid}\"}}"): {}}},
                "f:spec": {"f:containers": spec_containers, "f:dnsPolicy": {}, "f:enableServiceLinks": {},
                    "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {},
                    "f:serviceAccount": {}, "f:serviceAccountName": {}, "f:terminationGracePeriodSeconds": {}}
            }
        })];
        if self.node.is_some() {
            let conds: Map<String, Value> = [
                "ContainersReady",
                "Initialized",
                "PodReadyToStartContainers",
                "PodScheduled",
                "Ready",
            ]
            .iter()
            .map(|ty| {
                (
                    format!("k:{{\"type\":\"{ty}\"}}"),
                    json!({".": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}),
                )
            })
            .collect();
            fields.push(json!({
                "manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": now,
                "fieldsType": "FieldsV1", "subresource": "status",
                "fieldsV1": {"f:status": {"f:conditions": conds, "f:containerStatuses": {}, "f:hostIP": {},
                    "f:hostIPs": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {".": {}, "k:{\"ip\":\"*\"}": {".": {}, "f:ip": {}}},
                    "f:startTime": {}}}
            }));
        }
        json!(fields)
    }

    /// The pod, shaped like one a Deployment's ReplicaSet creates.
    pub fn build(&self) -> Value {
        let app = self.app();
        let now = now();
        let containers = self.container_list();
        let (rs, uid) = self.owner.clone().unwrap_or_else(|| {
            let rs = format!("{app}-7d9f8c6b5");
            let uid = uid_of(&format!("{}/{rs}", self.ns));
            (rs, uid)
        });
        let specs: Vec<Value> = containers
            .iter()
            .enumerate()
            .map(|(i, (name, image, port))| Self::container_spec(name, image, *port, i == 0))
            .collect();
        let mut pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "generateName": format!("{rs}-"),
                "namespace": self.ns,
                "labels": self.labels,
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                    "uid": uid, "controller": true, "blockOwnerDeletion": true
                }]
            },
            "spec": {
                "containers": specs,
                "dnsPolicy": "ClusterFirst",
                "enableServiceLinks": true,
                "preemptionPolicy": "PreemptLowerPriority",
                "priority": 0,
                "restartPolicy": "Always",
                "schedulerName": "default-scheduler",
                "securityContext": {},
                "serviceAccount": "default",
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
            "status": self.status(&containers, &now)
        });
        if let Some(node) = &self.node {
            pod["spec"]["nodeName"] = json!(node);
        }
        if self.managed_fields {
            pod["metadata"]["managedFields"] = self.managed(&containers, &uid, &now);
        }
        pod
    }
}
