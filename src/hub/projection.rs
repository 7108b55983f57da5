//! Field projection (`fields=metadata.name,spec.nodeName`) and RFC 7386
//! merge-patch diffs between projected versions.

use serde_json::{Map, Value};

use crate::selector::valid_path;

/// Paths every projection keeps: what a client needs to identify an object
/// and resume.
pub const ALWAYS_KEPT: &[&str] = &[
    "apiVersion",
    "kind",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "metadata.resourceVersion",
];

/// Most paths a projection may name.
pub const MAX_PATHS: usize = 64;

/// A parsed `fields=` projection. Paths descend through objects; a path
/// that meets an array applies to each element (`spec.containers.image`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Projection {
    paths: Vec<Vec<String>>,
}

impl Projection {
    /// Parses a comma-separated list of dotted paths.
    pub fn parse(spec: &str) -> Result<Projection, String> {
        let named: Vec<&str> = spec
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        if named.is_empty() {
            return Err("fields: expected a comma-separated list of dotted paths, e.g. metadata.name,status.phase".into());
        }
        if named.len() > MAX_PATHS {
            return Err(format!(
                "fields: {} paths named; the limit is {MAX_PATHS}",
                named.len()
            ));
        }
        if let Some(bad) = named.iter().find(|p| !valid_path(p)) {
            return Err(format!(
                "fields: {bad:?} is not a dotted path (segments of letters, digits, '-' and '_')"
            ));
        }
        let mut paths: Vec<Vec<String>> = ALWAYS_KEPT
            .iter()
            .chain(named.iter())
            .map(|p| p.split('.').map(str::to_string).collect())
            .collect();
        // Sorted without repeats: projections naming the same paths are
        // equal (one view), however they were spelt.
        paths.sort();
        paths.dedup();
        Ok(Projection { paths })
    }

    /// The object with only the projected paths.
    pub fn apply(&self, obj: &Value) -> Value {
        let mut out = Value::Object(Map::new());
        for path in &self.paths {
            project(obj, path, &mut out);
        }
        out
    }
}

/// The paths named beyond [`ALWAYS_KEPT`], comma-separated (one kept path
/// when there are none): a spelling that parses back to this projection.
impl std::fmt::Display for Projection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let named: Vec<String> = self
            .paths
            .iter()
            .map(|p| p.join("."))
            .filter(|p| !ALWAYS_KEPT.contains(&p.as_str()))
            .collect();
        if named.is_empty() {
            f.write_str(ALWAYS_KEPT[0])
        } else {
            f.write_str(&named.join(","))
        }
    }
}

/// Copies `path` of `src` into `dst`; returns whether anything was copied
/// (so no empty parent is left behind for a path that does not exist).
fn project(src: &Value, path: &[String], dst: &mut Value) -> bool {
    let Some((head, rest)) = path.split_first() else {
        *dst = src.clone();
        return true;
    };
    match src {
        Value::Object(map) => {
            let Some(value) = map.get(head) else {
                return false;
            };
            if !dst.is_object() {
                *dst = Value::Object(Map::new());
            }
            let Value::Object(out) = dst else {
                return false;
            };
            let existed = out.contains_key(head);
            let slot = out.entry(head.clone()).or_insert(Value::Null);
            let wrote = project(value, rest, slot);
            if !wrote && !existed {
                out.remove(head);
            }
            wrote
        }
        Value::Array(items) => {
            if !matches!(dst, Value::Array(d) if d.len() == items.len()) {
                *dst = Value::Array(
                    items
                        .iter()
                        .map(|i| {
                            if i.is_object() {
                                Value::Object(Map::new())
                            } else {
                                Value::Null
                            }
                        })
                        .collect(),
                );
            }
            let Value::Array(out) = dst else { return false };
            let mut wrote = false;
            for (item, slot) in items.iter().zip(out.iter_mut()) {
                wrote |= project(item, path, slot);
            }
            wrote
        }
        _ => false,
    }
}

/// The RFC 7386 merge patch that turns `old` into `new`, or `None` when they
/// are equal. Always carries `metadata.name`, `metadata.namespace` and
/// `metadata.resourceVersion` of `new`, so a client can tell which object it
/// patches and where it stands.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    let mut patch = diff(old, new)?;
    if let (Some(p), Some(meta)) = (patch.as_object_mut(), new.get("metadata")) {
        let pm = p
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(pm) = pm.as_object_mut() {
            for key in ["name", "namespace", "resourceVersion"] {
                if let Some(v) = meta.get(key) {
                    pm.insert(key.to_string(), v.clone());
                }
            }
        }
    }
    Some(patch)
}

fn diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for key in o.keys().filter(|k| !n.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            for (key, nv) in n {
                match o.get(key) {
                    None => {
                        patch.insert(key.clone(), nv.clone());
                    }
                    Some(ov) => {
                        if let Some(d) = diff(ov, nv) {
                            patch.insert(key.clone(), d);
                        }
                    }
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ => (old != new).then(|| new.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "x", "uid": "u", "resourceVersion": "5", "labels": {"app": "web"},
                "annotations": {"big": "..."}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i:1", "args": ["x"]}, {"name": "d", "image": "i:2"}]},
            "status": {"phase": "Running"}})
    }

    #[test]
    fn projection_keeps_named_paths_and_identity() {
        let p = Projection::parse("spec.nodeName, status.phase,spec.containers.image").unwrap();
        assert_eq!(
            p.apply(&pod()),
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "a", "namespace": "x", "uid": "u", "resourceVersion": "5"},
                "spec": {"nodeName": "n1", "containers": [{"image": "i:1"}, {"image": "i:2"}]},
                "status": {"phase": "Running"}})
        );
        let whole = Projection::parse("metadata,metadata.name")
            .unwrap()
            .apply(&pod());
        assert_eq!(
            whole["metadata"],
            pod()["metadata"],
            "a whole subtree wins over its parts"
        );
        assert!(
            Projection::parse("status.missing")
                .unwrap()
                .apply(&pod())
                .get("status")
                .is_none()
        );
    }

    #[test]
    fn a_projection_prints_as_paths_that_parse_back_to_it() {
        for spec in [
            "kind",
            "spec.nodeName, status.phase,spec.nodeName",
            "a,metadata.uid",
        ] {
            let p = Projection::parse(spec).unwrap();
            assert_eq!(Projection::parse(&p.to_string()).unwrap(), p, "{spec}");
        }
        // The most paths a client may name, one of them always kept: the
        // spelling names no more than were named.
        let many: Vec<String> = (1..MAX_PATHS).map(|i| format!("p{i}")).collect();
        let p = Projection::parse(&format!("kind,{}", many.join(","))).unwrap();
        assert_eq!(Projection::parse(&p.to_string()).unwrap(), p);
    }

    #[test]
    fn bad_projections_are_refused() {
        for bad in ["", " , ", "spec..nodeName", "spec.node name", ".a", "a."] {
            assert!(Projection::parse(bad).is_err(), "{bad:?}");
        }
        let many: Vec<String> = (0..65).map(|i| format!("f{i}")).collect();
        assert!(
            Projection::parse(&many.join(","))
                .unwrap_err()
                .contains("limit")
        );
    }

    #[test]
    fn merge_diff_round_trips() {
        let old = pod();
        let mut new = pod();
        new["metadata"]["resourceVersion"] = json!("9");
        new["metadata"]["labels"] = json!({"app": "db", "tier": "x"});
        new["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        new["spec"]["containers"][1]["image"] = json!("i:3");
        new["status"]["phase"] = json!("Failed");
        let patch = merge_diff(&old, &new).unwrap();
        assert_eq!(
            patch["metadata"]["annotations"],
            Value::Null,
            "removed keys are nulled"
        );
        assert_eq!(patch["metadata"]["name"], "a", "identity always present");
        assert!(patch.get("kind").is_none(), "unchanged fields are left out");
        let mut applied = old.clone();
        // What a client does with the delta: RFC 7386, as json-patch
        // implements it.
        json_patch::merge(&mut applied, &patch);
        assert_eq!(applied, new);
        assert_eq!(merge_diff(&old, &old), None);
    }
}
