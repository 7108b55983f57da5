//! Resource definitions and the discovery documents built from them.
//!
//! Owns `ResourceDef` (what a resource is called and where it is served), the
//! built-in set, and the JSON of `/api`, `/apis`, `/api/v1`, `/apis/{g}/{v}`
//! and `/version`, in both the legacy and the aggregated (v2) discovery forms.
//! Routing and storage live in `http.rs` and `store.rs`.

use std::sync::Arc;

use serde_json::{Value, json};

/// Verbs every simulated resource serves.
const VERBS: [&str; 7] = [
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// A field a `fieldSelector` may name, and where its value comes from.
///
/// kube-apiserver matches field selectors against a per-kind field set
/// (each registry's `GetAttrs`/`ToSelectableFields`) whose values are Go
/// values printed as strings: a missing integer is "0", a missing boolean
/// "false". `paths` are tried in order (JSON pointers); `default` is the
/// value when none is present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectableField {
    pub name: Arc<str>,
    pub paths: Vec<String>,
    pub default: String,
}

impl SelectableField {
    /// The field at the dotted path of the same name, "" when absent (a
    /// CRD's `selectableFields`).
    pub fn path(name: &str) -> SelectableField {
        SelectableField::from_paths(name, &[&format!("/{}", name.replace('.', "/"))], "")
    }

    /// A field read from the first present pointer of `paths`, else `default`.
    pub fn from_paths(name: &str, paths: &[&str], default: &str) -> SelectableField {
        SelectableField {
            name: name.into(),
            paths: paths.iter().map(|p| (*p).to_owned()).collect(),
            default: default.to_owned(),
        }
    }

    /// The field's value in `obj`: strings as they are, numbers and
    /// booleans printed, anything absent or null as the default.
    pub fn value(&self, obj: &Value) -> String {
        for path in &self.paths {
            match obj.pointer(path) {
                None | Some(Value::Null) => continue,
                Some(Value::String(s)) => return s.clone(),
                Some(other) => return other.to_string(),
            }
        }
        self.default.clone()
    }
}

/// How a field selector naming a field the resource does not have is
/// refused (400 BadRequest), in the words kube-apiserver uses for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnknownField {
    /// `field label not supported: F`: kinds with their own field label
    /// conversion (pkg/apis/core/v1/conversion.go) and custom resources
    /// (apiextensions-apiserver's `crConverter.ConvertFieldLabel`).
    NotSupported,
    /// `"F" is not a known field selector: only "metadata.name",
    /// "metadata.namespace"`: kinds without one
    /// (`runtime.DefaultMetaV1FieldSelectorConversion`).
    NotKnown,
    /// `field label "F" not supported for batchv1.Job`: batch/v1 Jobs
    /// (pkg/apis/batch/v1/conversion.go), named by the string.
    NotSupportedFor(String),
}

impl UnknownField {
    /// The message refusing `field`.
    pub fn message(&self, field: &str) -> String {
        match self {
            UnknownField::NotSupported => format!("field label not supported: {field}"),
            UnknownField::NotKnown => format!(
                "{field:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            ),
            UnknownField::NotSupportedFor(kind) => {
                format!("field label {field:?} not supported for {kind}")
            }
        }
    }
}

/// What a valid object name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// A lowercase RFC 1123 subdomain (most kinds).
    Subdomain,
    /// Any path segment: not "." or "..", no "/" or "%" (RBAC kinds:
    /// `ValidateRBACName` in pkg/apis/rbac/validation, so "system:masters"
    /// is a valid ClusterRoleBinding name).
    PathSegment,
}

impl NameRule {
    pub fn allows(self, name: &str) -> bool {
        match self {
            NameRule::Subdomain => {
                name.len() <= 253
                    && name.chars().all(|c| {
                        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'
                    })
                    && name.starts_with(|c: char| c.is_ascii_alphanumeric())
                    && name.ends_with(|c: char| c.is_ascii_alphanumeric())
            }
            NameRule::PathSegment => {
                !name.is_empty()
                    && name != "."
                    && name != ".."
                    && !name.contains('/')
                    && !name.contains('%')
            }
        }
    }
}

/// One resource type served by the simulator: a built-in or a CRD.
#[derive(Debug, Clone, PartialEq)]
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
    /// Every field a `fieldSelector` may name, `metadata.name` included.
    pub selectable_fields: Vec<SelectableField>,
    /// How a selector naming any other field is refused.
    pub unknown_field: UnknownField,
    pub names: NameRule,
    /// A CRD's `additionalPrinterColumns`, kept in the CRD object that
    /// [`crate::Sim::register`] writes.
    pub printer_columns: Vec<Value>,
    /// Values the API server writes into an object that lacks them (JSON
    /// pointer, value), as its defaulting does on every write.
    pub defaults: Vec<(String, Value)>,
}

impl ResourceDef {
    /// A definition like a CRD's: `singular` = lowercase kind, no short
    /// names, selectable by `metadata.name` and (namespaced) by
    /// `metadata.namespace`.
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        let mut fields = vec![SelectableField::path("metadata.name")];
        if namespaced {
            fields.push(SelectableField::path("metadata.namespace"));
        }
        ResourceDef {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            singular: kind.to_lowercase(),
            kind: kind.to_owned(),
            namespaced,
            short_names: Vec::new(),
            selectable_fields: fields,
            unknown_field: UnknownField::NotSupported,
            names: NameRule::Subdomain,
            printer_columns: Vec::new(),
            defaults: Vec::new(),
        }
    }

    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| (*s).to_owned()).collect();
        self
    }

    /// Adds selectable fields read at their own dotted path, like a CRD's
    /// `selectableFields`.
    pub fn with_selectable_fields(mut self, fields: &[&str]) -> Self {
        self.selectable_fields
            .extend(fields.iter().map(|f| SelectableField::path(f)));
        self
    }

    /// Adds one selectable field.
    pub fn with_field(mut self, field: SelectableField) -> Self {
        self.selectable_fields.push(field);
        self
    }

    pub fn with_unknown_field(mut self, unknown: UnknownField) -> Self {
        self.unknown_field = unknown;
        self
    }

    pub fn with_names(mut self, names: NameRule) -> Self {
        self.names = names;
        self
    }

    /// A CRD's `additionalPrinterColumns` (JSON objects with `name`,
    /// `type`, `jsonPath`, ...).
    pub fn with_printer_columns(mut self, columns: Vec<Value>) -> Self {
        self.printer_columns = columns;
        self
    }

    /// Writes `value` at the JSON pointer `pointer` of objects that lack it.
    pub fn with_default(mut self, pointer: &str, value: Value) -> Self {
        self.defaults.push((pointer.to_owned(), value));
        self
    }

    /// The selectable field called `name`.
    pub fn field(&self, name: &str) -> Option<&SelectableField> {
        self.selectable_fields.iter().find(|f| *f.name == *name)
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
