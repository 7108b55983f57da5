//! CustomResourceDefinitions (apiextensions.k8s.io/v1) as objects: what
//! the API server does to a CRD on every write (defaults, validation,
//! status kept apart), and what a CRD serves: its storage version as a
//! resource, with the CRD's names, scope, `selectableFields` and
//! `additionalPrinterColumns`.
//!
//! Written from kube-apiserver's apiextensions-apiserver:
//! - validation (pkg/apis/apiextensions/validation): the name is
//!   `spec.names.plural + "." + spec.group`, the group is a domain with at
//!   least one dot, the scope is `Namespaced` or `Cluster` and does not
//!   change, exactly one version is the storage version, `selectableFields`
//!   are JSON paths starting with `.` (at most 8);
//! - defaults (pkg/apis/apiextensions/v1/defaults.go): `names.singular` is
//!   the lowercase kind, `names.listKind` the kind + "List";
//! - status: cleared on create and kept on update (the CRD strategy's
//!   PrepareForCreate/PrepareForUpdate); the naming and establishing
//!   controllers then write `acceptedNames`, the `NamesAccepted` and
//!   `Established` conditions and `storedVersions` (a MODIFIED event).
//!
//! Not simulated: several served versions and conversion between them
//! (only the storage version is served), schemas (custom objects are
//! stored as sent), name conflicts between CRDs, the finalizer that
//! deletes custom objects one by one before the CRD goes (here they go at
//! once and their watches end, as `Sim::unregister` always did).

use serde_json::{Value, json};

use super::SimError;
use super::resource::{NameRule, ResourceDef, SelectableField, UnknownField};

pub(crate) const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";
const GROUP: &str = "apiextensions.k8s.io";

fn text<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn invalid(name: &str, errors: &[String]) -> SimError {
    let errs = match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    SimError::Invalid(format!(
        "CustomResourceDefinition.{GROUP} \"{name}\" is invalid: {errs}"
    ))
}

/// The storage version object of a CRD, if it has exactly one.
fn storage_version(crd: &Value) -> Option<&Value> {
    let versions = crd.pointer("/spec/versions")?.as_array()?;
    let mut storage = versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true));
    let one = storage.next()?;
    storage.next().is_none().then_some(one)
}

/// Defaults and validates a CRD on create (`old` None) or update, and
/// keeps its status apart from what the client sent.
pub(crate) fn admit(crd: &mut Value, old: Option<&Value>) -> Result<(), SimError> {
    let name = text(crd, "/metadata/name").to_owned();
    if !crd.get("spec").is_some_and(Value::is_object) {
        return Err(invalid(&name, &["spec: Required value".into()]));
    }
    let kind = text(crd, "/spec/names/kind").to_owned();
    let names = &mut crd["spec"]["names"];
    if names.is_object() {
        if text(names, "/singular").is_empty() {
            names["singular"] = json!(kind.to_lowercase());
        }
        if text(names, "/listKind").is_empty() && !kind.is_empty() {
            names["listKind"] = json!(format!("{kind}List"));
        }
    }
    let mut errors = Vec::new();
    let group = text(crd, "/spec/group");
    let plural = text(crd, "/spec/names/plural");
    if group.is_empty() {
        errors.push("spec.group: Required value".to_owned());
    } else if !group.contains('.') || !NameRule::Subdomain.allows(group) {
        errors.push(format!(
            "spec.group: Invalid value: {group:?}: should be a domain with at least one dot"
        ));
    }
    if plural.is_empty() {
        errors.push("spec.names.plural: Required value".to_owned());
    }
    if kind.is_empty() {
        errors.push("spec.names.kind: Required value".to_owned());
    }
    if name != format!("{plural}.{group}") {
        errors.push(format!(
            "metadata.name: Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"
        ));
    }
    let scope = text(crd, "/spec/scope");
    if scope != "Namespaced" && scope != "Cluster" {
        errors.push(format!(
            "spec.scope: Unsupported value: {scope:?}: supported values: \"Cluster\", \"Namespaced\""
        ));
    }
    match crd.pointer("/spec/versions").and_then(Value::as_array) {
        None => errors.push(
            "spec.versions: Invalid value: must have exactly one version marked as storage version"
                .into(),
        ),
        Some(versions) => {
            let storage = versions
                .iter()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .count();
            if storage != 1 {
                errors.push(format!(
                    "spec.versions: Invalid value: must have exactly one version marked as storage version, status.storedVersions[{storage}]"
                ));
            }
            for (i, v) in versions.iter().enumerate() {
                if text(v, "/name").is_empty() {
                    errors.push(format!("spec.versions[{i}].name: Required value"));
                }
                let fields = v["selectableFields"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                if fields.len() > 8 {
                    errors.push(format!(
                        "spec.versions[{i}].selectableFields: Too many: {}: must have at most 8 items",
                        fields.len()
                    ));
                }
                for (j, f) in fields.iter().enumerate() {
                    let path = text(f, "/jsonPath");
                    if !path.starts_with('.') || path.len() < 2 {
                        errors.push(format!(
                            "spec.versions[{i}].selectableFields[{j}].jsonPath: Invalid value: {path:?}: must be a simple JSON path starting with ."
                        ));
                    }
                }
            }
        }
    }
    if let Some(old) = old
        && text(old, "/spec/scope") != scope
    {
        errors.push(format!(
            "spec.scope: Invalid value: {scope:?}: field is immutable"
        ));
    }
    if !errors.is_empty() {
        return Err(invalid(&name, &errors));
    }
    let status = old
        .and_then(|o| o.get("status"))
        .cloned()
        .unwrap_or(json!({}));
    crd["status"] = status;
    Ok(())
}

/// The resource a valid CRD serves: its storage version, if served.
pub(crate) fn resource_def(crd: &Value) -> Option<ResourceDef> {
    let version = storage_version(crd)?;
    if version["served"].as_bool() == Some(false) {
        return None;
    }
    let names = crd.pointer("/spec/names")?;
    let namespaced = text(crd, "/spec/scope") == "Namespaced";
    let mut def = ResourceDef::new(
        text(crd, "/spec/group"),
        text(version, "/name"),
        text(names, "/plural"),
        text(names, "/kind"),
        namespaced,
    )
    .with_unknown_field(UnknownField::NotSupported);
    def.singular = text(names, "/singular").to_owned();
    def.short_names = names["shortNames"]
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    for field in version["selectableFields"].as_array().into_iter().flatten() {
        let path = text(field, "/jsonPath");
        def = def.with_field(SelectableField::path(&path[1..]));
    }
    def.printer_columns = version["additionalPrinterColumns"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Some(def)
}

/// The status the naming and establishing controllers give a served CRD
/// (`storedVersions` keeps every storage version it ever had).
pub(crate) fn status(crd: &Value) -> Value {
    let mut stored: Vec<Value> = crd
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(v) = storage_version(crd).and_then(|v| v.get("name"))
        && !stored.contains(v)
    {
        stored.push(v.clone());
    }
    let now = super::store::now_rfc3339();
    let condition = |ty: &str, reason: &str, message: &str| {
        let since = crd
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == ty && c["status"] == "True"))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        json!({"type": ty, "status": "True", "lastTransitionTime": since,
               "reason": reason, "message": message})
    };
    json!({
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "storedVersions": stored,
    })
}

/// A CRD object serving `def`, as `Sim::register` writes it: a schema
/// that keeps any field, `def`'s printer columns, and its selectable
/// fields beyond `metadata.*` as JSON paths.
pub(crate) fn from_def(def: &ResourceDef) -> Value {
    let selectable: Vec<Value> = def
        .selectable_fields
        .iter()
        .filter(|f| !f.name.starts_with("metadata."))
        .map(|f| json!({"jsonPath": format!(".{}", f.name)}))
        .collect();
    let mut version = json!({
        "name": def.version,
        "served": true,
        "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
    });
    if !def.printer_columns.is_empty() {
        version["additionalPrinterColumns"] = json!(def.printer_columns);
    }
    if !selectable.is_empty() {
        version["selectableFields"] = json!(selectable);
    }
    json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": "CustomResourceDefinition",
        "metadata": {"name": def.key()},
        "spec": {
            "group": def.group,
            "scope": if def.namespaced { "Namespaced" } else { "Cluster" },
            "names": {
                "plural": def.plural,
                "singular": def.singular,
                "kind": def.kind,
                "listKind": format!("{}List", def.kind),
                "shortNames": def.short_names,
            },
            "versions": [version],
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{admit, from_def, resource_def, status};
    use crate::resource::ResourceDef;

    #[test]
    fn a_crd_round_trips_through_its_resource_definition() {
        let def = ResourceDef::new("example.com", "v1", "widgets", "Widget", true)
            .with_short_names(&["wd"])
            .with_selectable_fields(&["spec.color"])
            .with_printer_columns(vec![
                json!({"name": "Color", "type": "string", "jsonPath": ".spec.color"}),
            ]);
        let mut crd = from_def(&def);
        admit(&mut crd, None).unwrap();
        assert_eq!(crd["status"], json!({}), "status starts empty");
        let served = resource_def(&crd).unwrap();
        assert_eq!(served, def);
        let st = status(&crd);
        assert_eq!(st["storedVersions"], json!(["v1"]));
        assert_eq!(st["acceptedNames"]["listKind"], "WidgetList");
    }

    #[test]
    fn invalid_crds_are_refused_with_every_reason() {
        let mut crd = json!({"metadata": {"name": "things.nodots"},
            "spec": {"group": "nodots", "scope": "Global", "names": {"plural": "widgets", "kind": "Widget"},
                     "versions": [{"name": "v1", "served": true, "storage": false,
                                   "selectableFields": [{"jsonPath": "spec.x"}]}]}});
        let err = admit(&mut crd, None).unwrap_err();
        assert_eq!(err.code(), 422);
        let msg = err.to_string();
        for want in [
            "should be a domain with at least one dot",
            "must be spec.names.plural+\".\"+spec.group",
            "spec.scope: Unsupported value: \"Global\"",
            "exactly one version marked as storage version",
            "selectableFields[0].jsonPath",
        ] {
            assert!(msg.contains(want), "{msg} lacks {want}");
        }
        assert_eq!(
            crd["spec"]["names"]["singular"], "widget",
            "defaults come first"
        );
    }
}
