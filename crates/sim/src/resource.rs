//! Resource definitions and the discovery documents built from them.
//!
//! Owns `ResourceDef` (what a resource is called and where it is served), the
//! built-in set, and the JSON of `/api`, `/apis`, `/api/v1`, `/apis/{g}/{v}`
//! and `/version`, in both the legacy and the aggregated (v2) discovery forms.
//! Routing and storage live in `http.rs` and `store.rs`.

use serde_json::{Value, json};

/// Verbs every simulated resource serves.
const VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// One resource type served by the simulator: a built-in or a CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceDef {
    /// API group, "" for the core group.
    pub group: String,
    pub version: String,
    /// Lowercase plural, as in URLs: "pods".
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    /// Extra `fieldSelector` fields beyond `metadata.name`/`metadata.namespace`
    /// (dotted paths into the object), like a CRD's `selectableFields`.
    pub selectable_fields: Vec<String>,
}

impl ResourceDef {
    /// A definition with `singular` = lowercase kind and no short names.
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        ResourceDef {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            singular: kind.to_lowercase(),
            kind: kind.to_owned(),
            namespaced,
            short_names: Vec::new(),
            selectable_fields: Vec::new(),
        }
    }

    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    pub fn with_selectable_fields(mut self, fields: &[&str]) -> Self {
        self.selectable_fields = fields.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// The key used by the Rust API and stats: "pods", "deployments.apps".
    pub fn key(&self) -> String {
        key_of(&self.group, &self.plural)
    }

    /// "v1" or "apps/v1".
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn discovery_v1(&self) -> Value {
        json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": VERBS,
            "shortNames": self.short_names,
        })
    }

    fn discovery_v2(&self) -> Value {
        json!({
            "resource": self.plural,
            "responseKind": {"group": self.group, "version": self.version, "kind": self.kind},
            "scope": if self.namespaced { "Namespaced" } else { "Cluster" },
            "singularResource": self.singular,
            "verbs": VERBS,
            "shortNames": self.short_names,
        })
    }
}

/// The resource key for a group and plural: the plural alone for the core group.
pub(crate) fn key_of(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    }
}

/// Resources every `Sim` starts with.
pub(crate) fn builtins() -> Vec<ResourceDef> {
    vec![
        ResourceDef::new("", "v1", "pods", "Pod", true)
            .with_short_names(&["po"])
            .with_selectable_fields(&[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ]),
        ResourceDef::new("", "v1", "nodes", "Node", false)
            .with_short_names(&["no"])
            .with_selectable_fields(&["spec.unschedulable"]),
        ResourceDef::new("", "v1", "namespaces", "Namespace", false)
            .with_short_names(&["ns"])
            .with_selectable_fields(&["status.phase"]),
        ResourceDef::new("", "v1", "services", "Service", true).with_short_names(&["svc"]),
        ResourceDef::new("", "v1", "configmaps", "ConfigMap", true).with_short_names(&["cm"]),
        ResourceDef::new("", "v1", "secrets", "Secret", true).with_selectable_fields(&["type"]),
        ResourceDef::new("apps", "v1", "deployments", "Deployment", true)
            .with_short_names(&["deploy"]),
    ]
}

/// `GET /version`.
pub(crate) fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-kubefan-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `GET /api`.
pub(crate) fn core_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
    })
}

/// Distinct named groups with their versions, in registration order.
fn groups(defs: &[&ResourceDef]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for d in defs.iter().filter(|d| !d.group.is_empty()) {
        match out.iter_mut().find(|(g, _)| *g == d.group) {
            Some((_, vs)) if !vs.contains(&d.version) => vs.push(d.version.clone()),
            Some(_) => {}
            None => out.push((d.group.clone(), vec![d.version.clone()])),
        }
    }
    out
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({"name": group, "versions": vs, "preferredVersion": vs[0]})
}

/// `GET /apis`.
pub(crate) fn group_list(defs: &[&ResourceDef]) -> Value {
    let groups: Vec<Value> = groups(defs)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/{group}`, or `None` if no resource is served in that group.
pub(crate) fn group(defs: &[&ResourceDef], group: &str) -> Option<Value> {
    let (g, vs) = groups(defs).into_iter().find(|(g, _)| g == group)?;
    let mut doc = group_json(&g, &vs);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// `GET /api/v1` or `GET /apis/{g}/{v}`, or `None` if nothing is served there.
pub(crate) fn resource_list(defs: &[&ResourceDef], group: &str, version: &str) -> Option<Value> {
    let rs: Vec<Value> = defs
        .iter()
        .filter(|d| d.group == group && d.version == version)
        .map(|d| d.discovery_v1())
        .collect();
    if rs.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": rs}),
    )
}

/// Aggregated discovery (`as=APIGroupDiscoveryList`) for `/api` (`core`) or `/apis`.
pub(crate) fn aggregated(defs: &[&ResourceDef], core: bool) -> Value {
    let groups: Vec<(String, Vec<String>)> = if core {
        vec![(String::new(), vec!["v1".to_owned()])]
    } else {
        groups(defs)
    };
    let items: Vec<Value> = groups
        .iter()
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| {
                    let rs: Vec<Value> = defs
                        .iter()
                        .filter(|d| d.group == *g && d.version == *v)
                        .map(|d| d.discovery_v2())
                        .collect();
                    json!({"version": v, "resources": rs, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": g}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}
