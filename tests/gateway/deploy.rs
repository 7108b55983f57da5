//! `deploy/` and the `Dockerfile`, checked without a cluster or a Docker
//! engine: every manifest parses into the k8s-openapi type of its kind and
//! survives a round trip unchanged (k8s-openapi ignores unknown fields, so a
//! misspelt field shows up as a difference), the security properties hold,
//! the container names only flags `kubefan serve --help` knows, its config
//! file is one kubefan accepts, and the Grafana dashboard queries metrics
//! kubefan exports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, PodSpec, Service, ServiceAccount, Volume,
};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kubefan_sim::{Sim, pod};
use serde::Serialize;
use serde::de::{Deserialize, DeserializeOwned};
use serde_json::Value;

use crate::support::{sim_config, spawn, test_config};

const BIN: &str = env!("CARGO_BIN_EXE_kubefan");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every document of every `deploy/*.yaml`, as (file, document).
fn documents() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    let mut docs = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_norway::Deserializer::from_str(&text) {
            let value = Value::deserialize(doc).unwrap_or_else(|e| panic!("{name}: {e}"));
            if !value.is_null() {
                docs.push((name.clone(), value));
            }
        }
    }
    docs
}

/// Parses `doc` as `T` and checks that serialising it again gives the same
/// document: no field was dropped as unknown, none changed.
fn typed<T: DeserializeOwned + Serialize>(file: &str, doc: &Value) -> T {
    let t: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{file}: not a valid {}: {e}", doc["kind"]));
    let back = serde_json::to_value(&t).unwrap();
    if let Some(diff) = difference(doc, &back, "") {
        panic!(
            "{file}: {} {} does not survive a round trip through k8s-openapi (a misspelt or misplaced field?): {diff}",
            doc["kind"], doc["metadata"]["name"]
        );
    }
    t
}

fn difference(want: &Value, got: &Value, at: &str) -> Option<String> {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, v) in w {
                let here = format!("{at}.{k}");
                match g.get(k) {
                    None => return Some(format!("{here} is unknown")),
                    Some(gv) => {
                        if let Some(d) = difference(v, gv, &here) {
                            return Some(d);
                        }
                    }
                }
            }
            g.keys()
                .find(|k| !w.contains_key(*k))
                .map(|k| format!("{at}.{k} appeared"))
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => w
            .iter()
            .zip(g)
            .enumerate()
            .find_map(|(i, (w, g))| difference(w, g, &format!("{at}[{i}]"))),
        _ if want == got => None,
        _ => Some(format!("{at}: {want} became {got}")),
    }
}

/// The manifests, typed.
#[derive(Default)]
struct Manifests {
    namespaces: Vec<Namespace>,
    service_accounts: Vec<ServiceAccount>,
    cluster_roles: Vec<ClusterRole>,
    bindings: Vec<ClusterRoleBinding>,
    config_maps: Vec<ConfigMap>,
    deployments: Vec<Deployment>,
    services: Vec<Service>,
    pdbs: Vec<PodDisruptionBudget>,
    ingresses: Vec<Ingress>,
    /// (file, kind, namespace) of every object.
    objects: Vec<(String, String, Option<String>)>,
}

fn manifests() -> Manifests {
    let mut m = Manifests::default();
    for (file, doc) in documents() {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        if kind == "Kustomization" {
            continue;
        }
        let ns = doc["metadata"]["namespace"].as_str().map(str::to_string);
        m.objects.push((file.clone(), kind.clone(), ns));
        match kind.as_str() {
            "Namespace" => m.namespaces.push(typed(&file, &doc)),
            "ServiceAccount" => m.service_accounts.push(typed(&file, &doc)),
            "ClusterRole" => m.cluster_roles.push(typed(&file, &doc)),
            "ClusterRoleBinding" => m.bindings.push(typed(&file, &doc)),
            "ConfigMap" => m.config_maps.push(typed(&file, &doc)),
            "Deployment" => m.deployments.push(typed(&file, &doc)),
            "Service" => m.services.push(typed(&file, &doc)),
            "PodDisruptionBudget" => m.pdbs.push(typed(&file, &doc)),
            "Ingress" => m.ingresses.push(typed(&file, &doc)),
            other => panic!("{file}: no check for kind {other:?}"),
        }
    }
    m
}

/// The volume holding `file` in container `c` of `pod`: its innermost
/// mount, which must be read-only.
fn read_only_volume<'a>(pod: &'a PodSpec, c: &Container, file: &str) -> &'a Volume {
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| file.starts_with(&format!("{}/", m.mount_path)))
        .max_by_key(|m| m.mount_path.len())
        .unwrap_or_else(|| panic!("{file} is in no mount"));
    assert_eq!(mount.read_only, Some(true), "{}", mount.mount_path);
    pod.volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .unwrap_or_else(|| panic!("no volume {}", mount.name))
}

fn one<'a, T>(items: &'a [T], what: &str) -> &'a T {
    assert_eq!(items.len(), 1, "expected one {what}");
    &items[0]
}

/// The long flags `kubefan serve --help` lists.
fn serve_flags() -> BTreeSet<String> {
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let flags: BTreeSet<String> = help
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| {
            w.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .next()
                .unwrap()
                .to_string()
        })
        .filter(|w| !w.is_empty())
        .collect();
    assert!(
        flags.contains("listen") && flags.contains("config"),
        "{flags:?}"
    );
    flags
}

/// The `--config` file the Deployment mounts, parsed.
fn config_file(m: &Manifests) -> (String, BTreeMap<String, Value>) {
    let cm = one(&m.config_maps, "ConfigMap");
    let data = cm.data.as_ref().expect("ConfigMap data");
    assert_eq!(data.len(), 1, "one config file");
    let (name, text) = data.iter().next().unwrap();
    let map: BTreeMap<String, Value> = serde_norway::from_str(text).unwrap();
    (format!("{name}\n{text}"), map)
}

fn shutdown_grace_secs(config: &BTreeMap<String, Value>) -> i64 {
    config
        .get("shutdown-grace-secs")
        .map_or(10, |v| v.as_i64().expect("a number"))
}

#[test]
fn every_manifest_parses_into_its_kubernetes_type_and_round_trips() {
    let m = manifests();
    assert_eq!(m.namespaces.len(), 1);
    let ns = m.namespaces[0].metadata.name.clone().unwrap();
    for (file, kind, namespace) in &m.objects {
        let cluster_scoped = matches!(
            kind.as_str(),
            "Namespace" | "ClusterRole" | "ClusterRoleBinding"
        );
        if cluster_scoped {
            assert_eq!(namespace, &None, "{file}: {kind} is cluster-scoped");
        } else {
            assert_eq!(namespace.as_deref(), Some(ns.as_str()), "{file}: {kind}");
        }
    }
    // kustomization.yaml lists every manifest except the examples.
    let text = std::fs::read_to_string(root().join("deploy/kustomization.yaml")).unwrap();
    let k: Value = serde_norway::from_str(&text).unwrap();
    let listed: BTreeSet<&str> = k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let files: BTreeSet<&str> = m
        .objects
        .iter()
        .map(|(f, _, _)| f.as_str())
        .filter(|f| !f.starts_with("ingress"))
        .collect();
    assert_eq!(listed, files, "kustomization.yaml resources");
}

#[test]
fn the_deployment_runs_locked_down_with_probes_and_a_long_enough_grace_period() {
    let m = manifests();
    let d = one(&m.deployments, "Deployment");
    let spec = d.spec.as_ref().unwrap();
    let pod = spec.template.spec.as_ref().unwrap();
    let psc = pod.security_context.as_ref().expect("pod securityContext");
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.run_as_user, Some(65532));
    assert_eq!(
        psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );
    let c = one(&pod.containers, "container");
    let sc = c
        .security_context
        .as_ref()
        .expect("container securityContext");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_ne!(sc.privileged, Some(true));
    let caps = sc.capabilities.as_ref().unwrap();
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert!(caps.add.is_none());
    assert_eq!(
        c.image.as_deref(),
        Some(format!("kubefan:{}", env!("CARGO_PKG_VERSION")).as_str()),
        "the image the Dockerfile builds, at this version"
    );

    let res = c.resources.as_ref().expect("resources");
    for key in ["cpu", "memory"] {
        assert!(
            res.requests.as_ref().unwrap().contains_key(key),
            "requests.{key}"
        );
    }
    assert!(
        res.limits.as_ref().unwrap().contains_key("memory"),
        "limits.memory"
    );

    let http = c
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .find(|p| p.name.as_deref() == Some("http"))
        .expect("a port named http");
    assert_eq!(http.container_port, 8080, "the image's KUBEFAN_LISTEN port");
    for (probe, path) in [
        (c.liveness_probe.as_ref(), "/healthz"),
        (c.readiness_probe.as_ref(), "/readyz"),
    ] {
        let get = probe.and_then(|p| p.http_get.as_ref()).expect("HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(get.port, IntOrString::String("http".into()));
    }

    let (_, config) = config_file(&m);
    let pre_stop = c
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|h| h.sleep.as_ref())
        .map_or(0, |s| s.seconds);
    let grace = pod.termination_grace_period_seconds.expect("grace period");
    assert!(
        grace > pre_stop + shutdown_grace_secs(&config),
        "terminationGracePeriodSeconds {grace} must exceed preStop {pre_stop} s + shutdown-grace-secs"
    );
    assert!(spec.replicas.unwrap_or(1) >= 2, "several replicas");

    // The PodDisruptionBudget and the Service select these pods.
    let labels = spec
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    let selects =
        |sel: &BTreeMap<String, String>| sel.iter().all(|(k, v)| labels.get(k) == Some(v));
    let pdb = one(&m.pdbs, "PodDisruptionBudget").spec.as_ref().unwrap();
    assert!(selects(
        pdb.selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()
    ));
    assert_eq!(pdb.min_available, Some(IntOrString::Int(1)));
    let svc = one(&m.services, "Service").spec.as_ref().unwrap();
    assert!(selects(svc.selector.as_ref().unwrap()));
    let port = one(svc.ports.as_deref().unwrap(), "Service port");
    assert_eq!(port.target_port, Some(IntOrString::String("http".into())));
    assert_eq!(
        pod.service_account_name.as_deref(),
        one(&m.service_accounts, "ServiceAccount")
            .metadata
            .name
            .as_deref()
    );
}

#[test]
fn the_container_names_only_flags_kubefan_knows_and_mounts_an_accepted_config_file() {
    let m = manifests();
    let flags = serve_flags();
    let d = one(&m.deployments, "Deployment");
    let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let c = one(&pod.containers, "container");
    let args = c.args.clone().unwrap();
    assert_eq!(args[0], "serve");
    let mut config_arg = None;
    for (i, a) in args.iter().enumerate().skip(1) {
        if let Some(flag) = a.strip_prefix("--") {
            let name = flag.split('=').next().unwrap();
            assert!(
                flags.contains(name),
                "--{name} is not a flag of kubefan serve"
            );
            if name == "config" {
                config_arg = Some(args[i + 1].clone());
            }
        }
    }
    for var in c.env.iter().flatten() {
        if let Some(flag) = var.name.strip_prefix("KUBEFAN_") {
            let flag = flag.to_ascii_lowercase().replace('_', "-");
            assert!(flags.contains(&flag), "{} names no flag", var.name);
        }
    }

    // --config names the file the ConfigMap mounts.
    let config_arg = config_arg.expect("--config FILE");
    let volume = read_only_volume(pod, c, &config_arg);
    let cm = one(&m.config_maps, "ConfigMap");
    assert_eq!(
        volume.config_map.as_ref().unwrap().name,
        cm.metadata.name.clone().unwrap()
    );
    let (text, config) = config_file(&m);
    let key = Path::new(&config_arg)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    assert!(
        text.starts_with(&format!("{key}\n")),
        "the ConfigMap holds {key}"
    );
    for k in config.keys() {
        assert!(flags.contains(k), "config key {k:?} is not a flag");
    }

    // kubefan itself accepts the file (unknown keys are refused at start).
    let dir = std::env::temp_dir().join(format!("kubefan-deploy-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(key);
    std::fs::write(&file, text.split_once('\n').unwrap().1).unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&file)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&file, "resources: [pods]\nkeepalive: 20\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown key \"keepalive\""), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn text_logs_to_a_pipe_carry_no_colour_codes() {
    let dir = std::env::temp_dir().join(format!("kubefan-ansi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("kubefan.yaml");
    std::fs::write(&file, "resources: [pods]\n").unwrap();
    // An INFO line (the settings read), then an error: no kubeconfig.
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&file)
        .args(["--kubeconfig", "/nonexistent/kubeconfig"])
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        log.contains("INFO") && log.contains("settings read from --config"),
        "{log}"
    );
    assert!(
        !log.contains('\x1b'),
        "colour codes in a piped log: {log:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_demo_prints_its_urls_after_the_start_up_logs_and_no_configuration_dump() {
    use std::io::BufRead;
    let mut child = Command::new(BIN)
        .args(["demo", "--listen", "127.0.0.1:0"])
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let last = line.starts_with("Ctrl-C to stop");
            if tx.send(line).is_err() || last {
                return;
            }
        }
    });
    let mut lines = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !lines
        .last()
        .is_some_and(|l: &String| l.starts_with("Ctrl-C to stop"))
    {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => lines.push(line),
            Err(_) => break,
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let at = |needle: &str| lines.iter().position(|l| l.contains(needle));
    let banner = at("kubefan demo:").unwrap_or_else(|| panic!("no banner: {lines:#?}"));
    // The informers start (and sync, which is logged a moment after
    // readiness) before the URLs are printed.
    let started = at("starting informer resource=pods").expect("the pods' informer is logged");
    assert!(
        started < banner,
        "the URLs come after the start-up: {lines:#?}"
    );
    assert!(
        lines[banner..].iter().all(|l| !l.contains(" INFO ")),
        "no log line inside the URLs: {lines:#?}"
    );
    assert_eq!(at("effective configuration"), None, "{lines:#?}");
}

#[test]
fn rbac_grants_only_reads_of_the_served_resources_the_rbac_kinds_and_the_auth_reviews() {
    let m = manifests();
    let (_, config) = config_file(&m);
    let list = |key: &str| -> BTreeSet<String> {
        config
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let served: BTreeSet<String> = list("resources")
        .union(&list("allow-resources"))
        .cloned()
        .collect();
    assert!(!list("allow-resources").is_empty(), "serve a fixed set");

    let role = one(&m.cluster_roles, "ClusterRole");
    let mut readable = BTreeSet::new();
    for rule in role.rules.iter().flatten() {
        let resources = rule.resources.clone().unwrap_or_default();
        let groups = rule.api_groups.clone().unwrap_or_default();
        assert!(
            !resources.iter().any(|r| r.contains('*')),
            "no wildcard resources"
        );
        assert!(!groups.iter().any(|g| g == "*"), "no wildcard groups");
        assert!(rule.non_resource_urls.is_none());
        match resources.as_slice() {
            [r] if r == "tokenreviews" || r == "subjectaccessreviews" => {
                assert_eq!(rule.verbs, ["create"], "{r}");
                let group = if r == "tokenreviews" {
                    "authentication.k8s.io"
                } else {
                    "authorization.k8s.io"
                };
                assert_eq!(groups, [group]);
            }
            _ => {
                for verb in &rule.verbs {
                    assert!(
                        ["get", "list", "watch"].contains(&verb.as_str()),
                        "verb {verb} on {resources:?}"
                    );
                }
                for r in resources {
                    let name = match groups.as_slice() {
                        [g] if g.is_empty() => r,
                        [g] => format!("{r}.{g}"),
                        _ => panic!("one API group per rule"),
                    };
                    readable.insert(name);
                }
            }
        }
    }
    // With `auth: kubernetes` and `authorization: rbac` (the default),
    // kubefan reads the four RBAC kinds to evaluate users' access itself.
    let kubernetes = config.get("auth").and_then(Value::as_str) == Some("kubernetes");
    let local_rbac = kubernetes
        && config
            .get("authorization")
            .and_then(Value::as_str)
            .is_none_or(|mode| mode == "rbac");
    let rbac_kinds: BTreeSet<String> = [
        "roles",
        "rolebindings",
        "clusterroles",
        "clusterrolebindings",
    ]
    .iter()
    .map(|r| format!("{r}.rbac.authorization.k8s.io"))
    .collect();
    let mut expected = served.clone();
    if local_rbac {
        expected.extend(rbac_kinds.iter().cloned());
    }
    assert_eq!(
        readable, expected,
        "RBAC reads exactly what kubefan serves, plus the RBAC kinds it evaluates"
    );
    assert!(
        served.is_disjoint(&rbac_kinds),
        "RBAC objects are read for evaluation, not served to clients"
    );
    if kubernetes {
        let has = |r: &str| {
            role.rules
                .iter()
                .flatten()
                .any(|rule| rule.resources.iter().flatten().any(|x| x == r))
        };
        assert!(has("tokenreviews") && has("subjectaccessreviews"));
    }

    let binding = one(&m.bindings, "ClusterRoleBinding");
    assert_eq!(binding.role_ref.kind, "ClusterRole");
    assert_eq!(Some(&binding.role_ref.name), role.metadata.name.as_ref());
    let sa = one(&m.service_accounts, "ServiceAccount");
    let subject = one(binding.subjects.as_deref().unwrap(), "subject");
    assert_eq!(subject.kind, "ServiceAccount");
    assert_eq!(Some(&subject.name), sa.metadata.name.as_ref());
    assert_eq!(subject.namespace, sa.metadata.namespace);
}

#[test]
fn the_ingress_example_keeps_streams_unbuffered_and_open() {
    let m = manifests();
    let (_, config) = config_file(&m);
    let keepalive = config
        .get("keepalive-secs")
        .map_or(15, |v| v.as_i64().unwrap());
    let ing = one(&m.ingresses, "Ingress");
    let ann = ing.metadata.annotations.clone().unwrap();
    let a = |k: &str| {
        ann.get(&format!("nginx.ingress.kubernetes.io/{k}"))
            .cloned()
    };
    assert_eq!(a("proxy-buffering").as_deref(), Some("off"));
    for k in ["proxy-read-timeout", "proxy-send-timeout"] {
        let secs: i64 = a(k).unwrap_or_else(|| panic!("{k}")).parse().unwrap();
        assert!(
            secs >= 4 * keepalive,
            "{k} {secs} s is too close to the keep-alive"
        );
    }
    let svc = one(&m.services, "Service");
    let backend = ing.spec.as_ref().unwrap().rules.as_ref().unwrap()[0]
        .http
        .as_ref()
        .unwrap()
        .paths[0]
        .backend
        .service
        .clone()
        .unwrap();
    assert_eq!(Some(&backend.name), svc.metadata.name.as_ref());
    let port = backend.port.unwrap();
    let svc_port = &svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert!(port.name == svc_port.name || port.number == Some(svc_port.port));
}

/// Files the binary embeds (`include_str!`, `include_bytes!`) must be in
/// the image's build context, or the image does not build: the client
/// library served at `/lib/` lives outside `src/`.
#[test]
fn the_dockerfile_copies_every_file_the_binary_embeds() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let copied: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .filter(|l| !l.starts_with("--"))
        .flat_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words[..words.len() - 1].to_vec()
        })
        .collect();
    let mut dirs = vec![root().join("src")];
    let mut embedded = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let strs = text.split("include_str!(\"").skip(1);
            for part in strs.chain(text.split("include_bytes!(\"").skip(1)) {
                let Some(rel) = part.split('"').next() else {
                    continue;
                };
                let file = path.parent().unwrap().join(rel).canonicalize().unwrap();
                embedded.push(
                    file.strip_prefix(root().canonicalize().unwrap())
                        .unwrap()
                        .to_path_buf(),
                );
            }
        }
    }
    assert!(
        embedded.iter().any(|f| f.starts_with("clients/js")),
        "the client library is embedded: {embedded:?}"
    );
    for file in &embedded {
        let covered = copied.iter().any(|src| {
            let src = src.trim_end_matches('/');
            file.starts_with(src)
        });
        assert!(covered, "the Dockerfile must COPY {}", file.display());
    }
}

#[test]
fn the_dockerfile_builds_what_ci_builds_locked_with_every_workspace_member() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let builds: Vec<&str> = dockerfile
        .split("&&")
        .flat_map(|s| s.lines())
        .map(|l| {
            l.trim()
                .trim_start_matches("RUN ")
                .trim()
                .trim_end_matches('\\')
                .trim()
        })
        .filter(|l| l.starts_with("cargo build"))
        .collect();
    assert!(
        builds.len() >= 2,
        "a dependency layer and the real build: {builds:?}"
    );
    for b in &builds {
        let words: Vec<&str> = b.split_whitespace().collect();
        assert!(
            words.contains(&"--locked"),
            "{b}: the lockfile CI tests with"
        );
        assert!(words.contains(&"--release"), "{b}");
        // The package CI tests (`cargo test` in the root builds `kubefan`).
        if let Some(i) = words.iter().position(|w| *w == "--package" || *w == "-p") {
            assert_eq!(words[i + 1], "kubefan", "{b}");
        }
        assert!(
            !words
                .iter()
                .any(|w| w.starts_with("--features") || *w == "--all-features"),
            "{b}: CI builds default features"
        );
    }
    // Every workspace member's manifest is in the image's build context, and
    // every target the dependency layer stubs exists.
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    if let Some(line) = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
    {
        for member in line.split('"').skip(1).step_by(2).filter(|m| *m != ".") {
            assert!(
                dockerfile.contains(&format!("COPY {member}/Cargo.toml")),
                "the Dockerfile must copy workspace member {member}'s Cargo.toml"
            );
        }
    }
    let mut lines = manifest.lines();
    while let Some(l) = lines.next() {
        if l.trim() == "[[bench]]" {
            let name = lines.next().unwrap().split('"').nth(1).unwrap();
            assert!(
                dockerfile.contains(&format!("benches/{name}.rs")),
                "the Dockerfile's dependency layer must stub benches/{name}.rs"
            );
        }
    }
    assert!(
        dockerfile.contains("USER 65532:65532"),
        "the Deployment's runAsUser"
    );
    assert!(
        dockerfile.contains("ENV KUBEFAN_LISTEN=0.0.0.0:8080"),
        "the Deployment's port"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_grafana_dashboard_queries_only_metrics_kubefan_exports_and_they_carry_values() {
    let text = std::fs::read_to_string(root().join("deploy/grafana-dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(e)) = m.get("expr") {
                    out.push(e.clone());
                }
                m.values().for_each(|v| walk(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(&dashboard, &mut exprs);
    assert!(exprs.len() >= 8, "{} queries", exprs.len());
    // Several clusters (`--cluster`): a variable picks them, and every
    // query of a resource's series follows it.
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(variables.contains(&"cluster"), "{variables:?}");
    for expr in exprs.iter().filter(|e| e.contains("$resource")) {
        assert!(expr.contains("cluster=~\"$cluster\""), "{expr}");
    }

    // The metric families a gateway with a subscriber exports.
    let sim = Sim::new(sim_config());
    sim.create("pods", pod("one").ns("web").build()).unwrap();
    let env = spawn(sim, test_config(&["pods"])).await;
    env.synced("pods").await;
    let mut sse = env.sse("/stream/pods").await;
    while sse.next().await.unwrap().event != "BOOKMARK" {}
    let body = env.metrics().await;
    let exported: BTreeSet<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    // Families with no series yet (no reset has happened) are not in the
    // exposition: those must at least be registered in src/metrics/mod.rs.
    let source = std::fs::read_to_string(root().join("src/metrics/mod.rs")).unwrap();
    let registered: BTreeSet<String> = source
        .split("registry.register(")
        .skip(1)
        .filter_map(|s| s.split('"').nth(1))
        .map(|n| format!("kubefan_{n}"))
        .collect();
    assert!(registered.contains("kubefan_subscribers"), "{registered:?}");
    for expr in &exprs {
        for (i, _) in expr.match_indices("kubefan_") {
            let name: String = expr[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let family = ["_total", "_bucket", "_sum", "_count", "_created"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(&name);
            assert!(
                exported.contains(family)
                    || exported.contains(name.as_str())
                    || registered.contains(family),
                "the dashboard queries {name}, which kubefan does not export: {expr}"
            );
        }
    }
    // The operator's additions carry values: bytes out, snapshot sizes,
    // and when the upstream last spoke.
    let value = |series: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no {series} in\n{body}"))
            .parse()
            .unwrap()
    };
    assert!(value("kubefan_bytes_sent_total{resource=\"pods\",transport=\"Sse\"}") > 0.0);
    assert_eq!(
        value("kubefan_snapshot_objects_count{resource=\"pods\"}"),
        1.0
    );
    assert!(value("kubefan_snapshot_bytes_sum{resource=\"pods\"}") > 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let last = value("kubefan_upstream_last_sync_timestamp_seconds{resource=\"pods\"}");
    assert!((now - last).abs() < 60.0, "last sync {last}, now {now}");
    drop(sse);
    env.stop().await;
}

/// `path` relative to `from` (both absolute), as kustomize wants its
/// resources named.
fn relative(path: &Path, from: &Path) -> PathBuf {
    let common = path
        .components()
        .zip(from.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut rel = PathBuf::new();
    for _ in from.components().skip(common) {
        rel.push("..");
    }
    for part in path.components().skip(common) {
        rel.push(part);
    }
    rel
}

/// deploy/ with the component `name`, from an overlay outside deploy/, as
/// the components' own comments say to write it, rendered by kubectl's
/// kustomize.
fn render_with_component(name: &str) -> String {
    render_with_components(&[name])
}

/// [`render_with_component`] with several components, in this order.
fn render_with_components(names: &[&str]) -> String {
    let overlay = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "kubefan-{}-overlay-{}",
        names.join("-"),
        uuid::Uuid::new_v4()
    ));
    std::fs::create_dir_all(&overlay).unwrap();
    let deploy = relative(&root().join("deploy"), &overlay);
    let components: Vec<String> = names
        .iter()
        .map(|n| deploy.join(n).display().to_string())
        .collect();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources: [{}]\ncomponents: [{}]\n",
            deploy.display(),
            components.join(", ")
        ),
    )
    .unwrap();
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&overlay)
        .output()
        .expect("kubectl is on the PATH (README.md, Development)");
    let _ = std::fs::remove_dir_all(&overlay);
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_tls_component_serves_https_from_a_mounted_secret_with_https_probes() {
    let text = render_with_component("tls");
    let mut deployment = None;
    let mut service = None;
    for doc in serde_norway::Deserializer::from_str(&text) {
        let value = Value::deserialize(doc).unwrap();
        match value["kind"].as_str() {
            Some("Deployment") => deployment = Some(typed::<Deployment>("tls", &value)),
            Some("Service") => service = Some(typed::<Service>("tls", &value)),
            _ => {}
        }
    }
    let deployment = deployment.expect("a Deployment");
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let c = one(&pod.containers, "container");

    // The certificate and key flags, known to kubefan, name files in a
    // read-only mount of a Secret.
    let flags = serve_flags();
    let args = c.args.clone().unwrap();
    let arg = |flag: &str| {
        assert!(flags.contains(flag), "kubefan serve has no --{flag}");
        args.iter()
            .find_map(|a| a.strip_prefix(&format!("--{flag}=")))
            .unwrap_or_else(|| panic!("--{flag} in {args:?}"))
            .to_string()
    };
    for flag in ["tls-cert-file", "tls-key-file", "tls-ca-file"] {
        let volume = read_only_volume(&pod, c, &arg(flag));
        let secret = volume.secret.as_ref().expect("a Secret volume");
        assert_eq!(secret.secret_name.as_deref(), Some("kubefan-tls"));
    }

    // Probes over HTTPS to the container's port, which the Service targets.
    let port = one(c.ports.as_deref().unwrap(), "container port");
    assert_eq!(port.name.as_deref(), Some("https"));
    assert_eq!(port.container_port, 8080);
    for (probe, path) in [
        (c.liveness_probe.as_ref(), "/healthz"),
        (c.readiness_probe.as_ref(), "/readyz"),
    ] {
        let get = probe.and_then(|p| p.http_get.as_ref()).expect("HTTP probe");
        assert_eq!(get.path.as_deref(), Some(path));
        assert_eq!(get.scheme.as_deref(), Some("HTTPS"), "{path}");
        assert_eq!(get.port, IntOrString::String("https".into()));
    }
    let svc = service.expect("a Service").spec.unwrap();
    let svc_port = one(svc.ports.as_deref().unwrap(), "Service port");
    assert_eq!(svc_port.port, 443);
    assert_eq!(
        svc_port.target_port,
        Some(IntOrString::String("https".into()))
    );
}

/// The front-proxy component with the TLS one, as its comment says to add
/// them: kubefan believes identity headers only from ingress-nginx's
/// client certificate, reads them only from headers ingress-nginx
/// overwrites with oauth2-proxy's answer, and that certificate is one
/// kubefan's client CA signs, with an allowed name and client use.
#[test]
fn the_front_proxy_component_trusts_only_ingress_nginx_and_headers_it_overwrites() {
    let text = render_with_components(&["tls", "front-proxy"]);
    let mut deployment = None;
    let mut ingresses = Vec::new();
    let mut service = None;
    for doc in serde_norway::Deserializer::from_str(&text) {
        let value = Value::deserialize(doc).unwrap();
        match value["kind"].as_str() {
            Some("Deployment") => deployment = Some(typed::<Deployment>("front-proxy", &value)),
            Some("Ingress") => ingresses.push(typed::<Ingress>("front-proxy", &value)),
            Some("Service") => service = Some(typed::<Service>("front-proxy", &value)),
            _ => {}
        }
    }
    let pod = deployment
        .expect("a Deployment")
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    let c = one(&pod.containers, "container");
    let flags = serve_flags();
    let args = c.args.clone().unwrap();
    let arg = |flag: &str| -> String {
        assert!(flags.contains(flag), "kubefan serve has no --{flag}");
        args.iter()
            .rev()
            .find_map(|a| a.strip_prefix(&format!("--{flag}=")))
            .unwrap_or_else(|| panic!("--{flag} in {args:?}"))
            .to_string()
    };
    let list = |flag: &str| -> BTreeSet<String> {
        arg(flag)
            .split(',')
            .map(|h| h.trim().to_ascii_lowercase())
            .collect()
    };
    for a in &args {
        if let Some(flag) = a.strip_prefix("--") {
            let name = flag.split('=').next().unwrap();
            assert!(
                flags.contains(name),
                "--{name} is not a flag of kubefan serve"
            );
        }
    }
    assert_eq!(
        list("auth"),
        BTreeSet::from(["request-header".into(), "kubernetes".into()])
    );
    assert_eq!(arg("requestheader-group-separator"), ",");
    // kubefan's client CA is the ca.crt of the mounted serving Secret.
    let ca_file = arg("requestheader-client-ca-file");
    let volume = read_only_volume(&pod, c, &ca_file);
    assert_eq!(
        volume
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref()),
        Some("kubefan-tls")
    );
    assert!(ca_file.ends_with("/ca.crt"), "{ca_file}");

    let ing = ingresses
        .iter()
        .find(|i| i.metadata.namespace.as_deref() == Some("kubefan"))
        .expect("kubefan's Ingress");
    let ann = ing.metadata.annotations.clone().unwrap();
    let a = |k: &str| {
        ann.get(&format!("nginx.ingress.kubernetes.io/{k}"))
            .cloned()
            .unwrap_or_else(|| panic!("annotation {k}"))
    };
    assert!(a("auth-url").ends_with("/oauth2/auth"));
    // Every identity header kubefan reads is one ingress-nginx sets from
    // oauth2-proxy's answer (replacing the client's).
    let passed: BTreeSet<String> = a("auth-response-headers")
        .split(',')
        .map(|h| h.trim().to_ascii_lowercase())
        .collect();
    for flag in [
        "requestheader-username-headers",
        "requestheader-group-headers",
    ] {
        for header in list(flag) {
            assert!(
                passed.contains(&header),
                "--{flag} reads {header}, which ingress-nginx does not overwrite"
            );
        }
    }
    assert_eq!(a("backend-protocol"), "HTTPS");
    assert_eq!(a("proxy-ssl-verify"), "on");
    assert_eq!(a("proxy-buffering"), "off");
    let svc = service.expect("a Service");
    let backend = ing.spec.as_ref().unwrap().rules.as_ref().unwrap()[0]
        .http
        .as_ref()
        .unwrap()
        .paths[0]
        .backend
        .service
        .clone()
        .unwrap();
    assert_eq!(Some(&backend.name), svc.metadata.name.as_ref());
    let svc_port = &svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
    assert_eq!(backend.port.unwrap().name, svc_port.name);

    // The proxy's client certificate: the Secret proxy-ssl-secret names,
    // issued for an allowed name, for client use, by the Issuer that
    // issues kubefan-tls (whose ca.crt is kubefan's client CA).
    let certificates = |file: &str| -> Vec<Value> {
        let text = std::fs::read_to_string(root().join("deploy").join(file)).unwrap();
        serde_norway::Deserializer::from_str(&text)
            .map(|doc| Value::deserialize(doc).unwrap())
            .filter(|v| v["kind"] == "Certificate")
            .collect()
    };
    let (ns, secret) = a("proxy-ssl-secret")
        .split_once('/')
        .map(|(n, s)| (n.to_string(), s.to_string()))
        .expect("proxy-ssl-secret is namespace/name");
    let client = certificates("front-proxy/certificate.yaml")
        .into_iter()
        .find(|c| c["spec"]["secretName"] == secret.as_str())
        .expect("a Certificate for the proxy-ssl-secret");
    assert_eq!(client["metadata"]["namespace"], ns.as_str());
    assert!(
        list("requestheader-allowed-names")
            .contains(client["spec"]["commonName"].as_str().unwrap())
    );
    assert_eq!(client["spec"]["usages"], serde_json::json!(["client auth"]));
    let serving = certificates("tls/certificate.yaml")
        .into_iter()
        .find(|c| c["spec"]["secretName"] == "kubefan-tls")
        .expect("the kubefan-tls Certificate");
    assert_eq!(client["spec"]["issuerRef"], serving["spec"]["issuerRef"]);
    assert_eq!(
        serving["spec"]["usages"],
        serde_json::json!(["server auth"]),
        "kubefan's own certificate cannot pass for the proxy"
    );
}

/// The leaf tier: a root Deployment (the only one watching the API server,
/// not behind the public Service), the public Deployment turned into
/// autoscaled leaves whose upstream is the root and whose clients' tokens
/// are reviewed by the API server, every flag one kubefan knows.
/// The `--state-dir` a config file names is a writable volume of the pod
/// that outlives a container restart (an `emptyDir`).
fn assert_state_dir_is_a_writable_empty_dir(pod: &PodSpec, config: &BTreeMap<String, Value>) {
    let dir = config
        .get("state-dir")
        .and_then(Value::as_str)
        .expect("state-dir in the config file");
    let c = one(&pod.containers, "container");
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == dir)
        .unwrap_or_else(|| panic!("{dir} is mounted"));
    assert_ne!(mount.read_only, Some(true), "{dir} is writable");
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .expect("its volume");
    assert!(volume.empty_dir.is_some(), "{dir} is an emptyDir");
}

#[test]
fn the_deployment_keeps_positions_across_a_container_restart() {
    let m = manifests();
    let d = one(&m.deployments, "Deployment");
    let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_state_dir_is_a_writable_empty_dir(pod, &config_file(&m).1);
    // The tier's root too: its leaves' watches resume after its restart.
    let text = render_with_component("tier");
    let mut root = None;
    let mut root_config = None;
    for doc in serde_norway::Deserializer::from_str(&text) {
        let value = Value::deserialize(doc).unwrap();
        if value["metadata"]["name"] != "kubefan-root" {
            continue;
        }
        match value["kind"].as_str() {
            Some("Deployment") => root = Some(typed::<Deployment>("tier", &value)),
            Some("ConfigMap") => root_config = Some(typed::<ConfigMap>("tier", &value)),
            _ => {}
        }
    }
    let root = root.expect("the root Deployment");
    let data = root_config.expect("the root's ConfigMap").data.unwrap();
    let config: BTreeMap<String, Value> = serde_norway::from_str(&data["config.yaml"]).unwrap();
    let pod = root.spec.unwrap().template.spec.unwrap();
    assert_state_dir_is_a_writable_empty_dir(&pod, &config);
}

#[test]
fn the_tier_component_makes_autoscaled_leaves_of_a_root() {
    let text = render_with_component("tier");
    let (mut deployments, mut services, mut config_maps, mut hpas) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for doc in serde_norway::Deserializer::from_str(&text) {
        let value = Value::deserialize(doc).unwrap();
        match value["kind"].as_str() {
            Some("Deployment") => deployments.push(typed::<Deployment>("tier", &value)),
            Some("Service") => services.push(typed::<Service>("tier", &value)),
            Some("ConfigMap") => config_maps.push(typed::<ConfigMap>("tier", &value)),
            Some("HorizontalPodAutoscaler") => hpas.push(typed::<
                k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler,
            >("tier", &value)),
            _ => {}
        }
    }
    let named = |name: &str| {
        deployments
            .iter()
            .find(|d| d.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("a Deployment {name}"))
    };
    let flags = serve_flags();
    let args_of = |d: &Deployment| -> Vec<String> {
        let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let c = one(&pod.containers, "container");
        let sc = c.security_context.as_ref().expect("securityContext");
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        let args = c.args.clone().unwrap();
        for a in args.iter().filter_map(|a| a.strip_prefix("--")) {
            let flag = a.split('=').next().unwrap();
            assert!(flags.contains(flag), "kubefan serve has no --{flag}");
        }
        args
    };

    // The leaves: the root as upstream, the API server for reviews.
    let leaf = named("kubefan");
    let args = args_of(leaf);
    assert!(
        args.contains(&"--auth-kubeconfig=in-cluster".to_string()),
        "{args:?}"
    );
    let kubeconfig = args
        .iter()
        .find_map(|a| a.strip_prefix("--kubeconfig="))
        .expect("--kubeconfig");
    let pod = leaf.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let c = one(&pod.containers, "container");
    let volume = read_only_volume(pod, c, kubeconfig);
    let cm_name = volume
        .config_map
        .as_ref()
        .expect("a ConfigMap")
        .name
        .clone();
    let cm = config_maps
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(cm_name.as_str()))
        .expect("the leaves' kubeconfig ConfigMap");
    let file = kubeconfig.rsplit('/').next().unwrap();
    let kc: kube::config::Kubeconfig =
        serde_norway::from_str(&cm.data.as_ref().unwrap()[file]).expect("a kubeconfig");
    let server = kc.clusters[0]
        .cluster
        .as_ref()
        .unwrap()
        .server
        .clone()
        .unwrap();
    let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
    assert_eq!(
        user.token_file.as_deref(),
        Some("/var/run/secrets/kubernetes.io/serviceaccount/token"),
        "leaves present their ServiceAccount token to the root"
    );

    // The root: reached at that address, not behind the public Service.
    let root_svc = services
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("kubefan-root"))
        .expect("the root's Service");
    let port = one(
        root_svc.spec.as_ref().unwrap().ports.as_deref().unwrap(),
        "port",
    )
    .port;
    assert_eq!(
        server,
        format!(
            "http://kubefan-root.{}.svc:{port}",
            root_svc.metadata.namespace.as_deref().unwrap()
        )
    );
    let root = named("kubefan-root");
    args_of(root);
    let root_labels = root
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    let public = services
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("kubefan"))
        .expect("the public Service");
    let selector = public.spec.as_ref().unwrap().selector.clone().unwrap();
    assert!(
        !selector.iter().all(|(k, v)| root_labels.get(k) == Some(v)),
        "viewers never reach the root"
    );
    assert_eq!(
        root_svc.spec.as_ref().unwrap().selector.as_ref(),
        Some(&root_labels),
        "the root's Service selects the root"
    );
    // The root serves what leaves read: the resources and the RBAC kinds.
    let root_cm = config_maps
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some("kubefan-root"))
        .expect("the root's config");
    let config: BTreeMap<String, Value> =
        serde_norway::from_str(root_cm.data.as_ref().unwrap().values().next().unwrap()).unwrap();
    for key in config.keys() {
        assert!(flags.contains(key.as_str()), "kubefan serve has no --{key}");
    }
    let allowed: Vec<&str> = config["allow-resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for kind in [
        "roles",
        "rolebindings",
        "clusterroles",
        "clusterrolebindings",
    ] {
        assert!(
            allowed.contains(&format!("{kind}.rbac.authorization.k8s.io").as_str()),
            "{kind}"
        );
    }
    assert_eq!(config["auth"], "kubernetes");

    // The leaves scale; the root does not need to.
    let hpa = one(&hpas, "HorizontalPodAutoscaler");
    let spec = hpa.spec.as_ref().unwrap();
    assert_eq!(spec.scale_target_ref.kind, "Deployment");
    assert_eq!(spec.scale_target_ref.name, "kubefan");
    assert!(spec.min_replicas.unwrap_or(1) >= 2);
}

/// jemalloc, the default allocator (`src/heap.rs`), is built from C with
/// its configure script and `make`, which the slim Rust image lacks: the
/// image's build stage installs it, or `docker build` fails there.
#[test]
fn the_image_builds_jemalloc_when_it_is_the_default_allocator() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let default = manifest
        .lines()
        .find(|l| l.starts_with("default = ["))
        .unwrap_or_default();
    if !default.contains("\"jemalloc\"") {
        return;
    }
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    // The text from the first FROM to the second: the build stage.
    let build_stage = dockerfile.split("\nFROM ").nth(1).expect("a build stage");
    assert!(
        build_stage.contains("apt-get install") && build_stage.contains(" make"),
        "the Dockerfile's build stage must install make for tikv-jemalloc-sys"
    );
}

/// The sign-in component: every variable it sets is a flag kubefan knows,
/// and the session key comes from the Secret every replica mounts.
#[test]
fn the_sign_in_component_sets_known_flags_and_mounts_the_shared_session_key() {
    let text = render_with_component("sign-in");
    let mut deployment = None;
    let mut config = None;
    for doc in serde_norway::Deserializer::from_str(&text) {
        let value = Value::deserialize(doc).unwrap();
        match (value["kind"].as_str(), value["metadata"]["name"].as_str()) {
            (Some("Deployment"), _) => deployment = Some(typed::<Deployment>("sign-in", &value)),
            (Some("ConfigMap"), Some("kubefan-sign-in")) => config = Some(value),
            _ => {}
        }
    }
    let deployment = deployment.expect("the Deployment");
    let config = config.expect("the kubefan-sign-in ConfigMap");
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    let from = container.env_from.as_ref().expect("envFrom");
    assert!(from.iter().any(|f| {
        f.config_map_ref
            .as_ref()
            .is_some_and(|r| r.name == "kubefan-sign-in")
    }));
    let flags = serve_flags();
    let vars = config["data"].as_object().unwrap();
    for (var, value) in vars {
        let flag = var
            .strip_prefix("KUBEFAN_")
            .expect("a KUBEFAN_ variable")
            .to_ascii_lowercase()
            .replace('_', "-");
        assert!(
            flags.contains(&flag),
            "{var} is no flag of kubefan serve (--{flag})"
        );
        assert!(value.as_str().is_some_and(|v| !v.is_empty()), "{var}");
    }
    assert_eq!(vars["KUBEFAN_AUTH"], "oidc,kubernetes");
    let key = vars["KUBEFAN_SESSION_SECRET_FILE"].as_str().unwrap();
    let volume = read_only_volume(&pod, container, key);
    assert_eq!(
        volume
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref()),
        Some("kubefan-session"),
        "the key every replica shares"
    );
}

/// An API server that does not answer is named by `/readyz`: which server
/// the gateway is trying, not only that discovery failed.
#[test]
fn readyz_names_the_api_server_it_cannot_reach() {
    use std::io::{BufRead, Read, Write};
    let dir = std::env::temp_dir().join(format!("kubefan-unreachable-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Port 1 on loopback: nothing listens there.
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters: [{name: c, cluster: {server: \"http://127.0.0.1:1\"}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: c, context: {cluster: c, user: u}}]\n",
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
        .args(["--resources", "pods", "--kubeconfig"])
        .arg(&kubeconfig)
        .env_remove("RUST_LOG")
        .env_remove("KUBEFAN_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("\"kubefan listening\"") {
                let log: Value = serde_json::from_str(&line).unwrap();
                let addr = log["fields"]["addr"].as_str().unwrap().to_string();
                if tx.send(addr).is_err() {
                    return;
                }
            }
            // Logged once `/readyz` says why.
            if line.contains("boot-time resource not started") && tx.send(String::new()).is_err() {
                return;
            }
        }
    });
    // Both, in either order: the address, and the failure.
    let wait = std::time::Duration::from_secs(30);
    let (mut addr, mut failed) = (None, false);
    while addr.is_none() || !failed {
        match rx
            .recv_timeout(wait)
            .expect("kubefan listens and logs the failure")
        {
            line if line.is_empty() => failed = true,
            line => addr = Some(line),
        }
    }
    let addr = addr.unwrap();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    conn.set_read_timeout(Some(wait)).unwrap();
    conn.write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains("upstream discovery failed: http://127.0.0.1:1/"),
        "{answer}"
    );
}
