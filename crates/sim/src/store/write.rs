//! Object writes: the checks and server-set metadata of create, update,
//! merge patch and delete, before `Store::commit` stores the result.

use serde_json::{Value, json};

use super::{EventKind, Store, Written};
use crate::SimError;
use crate::crd;
use crate::patch::merge_patch;
use crate::rbac;
use crate::resource::ResourceDef;

pub(crate) fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    now.replace_nanosecond(0)
        .unwrap_or(now)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn str_at<'a>(obj: &'a Value, ptr: &str) -> Option<&'a str> {
    obj.pointer(ptr)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn valid_namespace(name: &str) -> bool {
    crate::resource::NameRule::Subdomain.allows(name)
}

/// The 5-character suffix of `generateName`, from the apiserver's alphabet.
fn random_suffix() -> String {
    use rand::RngExt;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Sets `metadata.<field>` of an object that has a metadata map.
pub(crate) fn set_meta(obj: &mut Value, field: &str, value: Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert(field.to_owned(), value);
    }
}

/// Checks the type fields and shape of a body, fills in apiVersion/kind and
/// the namespace, and returns its (namespace, name) with the name possibly
/// still missing.
fn normalize(def: &ResourceDef, obj: &mut Value) -> Result<(String, Option<String>), SimError> {
    if obj.is_object() {
        crate::builtins::apply_defaults(def, obj);
    }
    let Value::Object(map) = obj else {
        return Err(SimError::BadRequest(
            "the body must be a JSON object".into(),
        ));
    };
    let api_version = def.api_version();
    match map.get("kind") {
        None | Some(Value::Null) => {}
        Some(Value::String(k)) if *k == def.kind || k.is_empty() => {}
        Some(k) => {
            return Err(SimError::BadRequest(format!(
                "wrong kind {k}, expected {}",
                def.kind
            )));
        }
    }
    match map.get("apiVersion") {
        None | Some(Value::Null) => {}
        Some(Value::String(v)) if *v == api_version || v.is_empty() => {}
        Some(v) => {
            return Err(SimError::BadRequest(format!(
                "wrong apiVersion {v}, expected {api_version}"
            )));
        }
    }
    map.insert("apiVersion".into(), Value::String(api_version));
    map.insert("kind".into(), Value::String(def.kind.clone()));
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    let Value::Object(meta) = meta else {
        return Err(SimError::BadRequest("metadata must be an object".into()));
    };
    let ns = if def.namespaced {
        let ns = match meta.get("namespace") {
            Some(Value::String(ns)) if !ns.is_empty() => ns.clone(),
            None | Some(Value::Null) | Some(Value::String(_)) => "default".to_owned(),
            Some(_) => {
                return Err(SimError::BadRequest(
                    "metadata.namespace must be a string".into(),
                ));
            }
        };
        if !valid_namespace(&ns) {
            return Err(SimError::Invalid(format!("invalid namespace {ns:?}")));
        }
        meta.insert("namespace".into(), Value::String(ns.clone()));
        ns
    } else {
        meta.remove("namespace");
        String::new()
    };
    let name = match meta.get("name") {
        Some(Value::String(n)) if !n.is_empty() => Some(n.clone()),
        None | Some(Value::Null) | Some(Value::String(_)) => None,
        Some(_) => {
            return Err(SimError::BadRequest(
                "metadata.name must be a string".into(),
            ));
        }
    };
    if let Some(n) = &name
        && !def.names.allows(n)
    {
        return Err(SimError::Invalid(format!(
            "metadata.name: Invalid value: {n:?}: {}",
            match def.names {
                crate::resource::NameRule::Subdomain => "must be a lowercase RFC 1123 subdomain",
                crate::resource::NameRule::PathSegment =>
                    "may not be '.' or '..' and may not contain '/' or '%'",
            }
        )));
    }
    for field in ["labels", "annotations"] {
        if let Some(v) = meta.get(field)
            && !v.is_null()
            && !v
                .as_object()
                .is_some_and(|m| m.values().all(Value::is_string))
        {
            return Err(SimError::BadRequest(format!(
                "metadata.{field} must map strings to strings"
            )));
        }
    }
    Ok((ns, name))
}

impl Store {
    pub fn create(&mut self, key: &str, mut obj: Value) -> Result<Written, SimError> {
        let def = self.def(key)?;
        let (ns, name) = normalize(&def, &mut obj)?;
        let name = match name {
            Some(n) => n,
            None => match str_at(&obj, "/metadata/generateName") {
                Some(prefix) => {
                    let name = format!("{prefix}{}", random_suffix());
                    if !def.names.allows(&name) {
                        return Err(SimError::Invalid(format!(
                            "invalid generateName {prefix:?}"
                        )));
                    }
                    set_meta(&mut obj, "name", json!(name));
                    name
                }
                None => {
                    return Err(SimError::Invalid(
                        "metadata.name: Required value: name or generateName is required".into(),
                    ));
                }
            },
        };
        if self.get(key, Some(&ns), &name).is_ok() {
            return Err(SimError::AlreadyExists {
                resource: def.key(),
                name,
            });
        }
        admit(key, &mut obj, None)?;
        if key == crd::CRDS && self.def(&name).is_ok() && !self.is_crd_key(&name) {
            return Err(SimError::Invalid(format!(
                "CustomResourceDefinition.apiextensions.k8s.io {name:?} is invalid: metadata.name: Invalid value: {name:?}: the API server already serves this resource"
            )));
        }
        set_meta(&mut obj, "uid", json!(uuid::Uuid::new_v4().to_string()));
        set_meta(&mut obj, "creationTimestamp", json!(now_rfc3339()));
        set_meta(&mut obj, "generation", json!(1));
        let written = self.commit(key, EventKind::Added, obj)?;
        self.react(key);
        Ok(written)
    }

    /// Replaces an object, keeping its server-owned metadata. A non-empty
    /// `metadata.resourceVersion` in the body must equal the stored one.
    pub fn update(&mut self, key: &str, mut obj: Value) -> Result<Written, SimError> {
        let def = self.def(key)?;
        let (ns, name) = normalize(&def, &mut obj)?;
        let name = name.ok_or_else(|| SimError::Invalid("metadata.name: Required value".into()))?;
        let prev = self.get(key, Some(&ns), &name)?.value()?;
        if let Some(rv) = str_at(&obj, "/metadata/resourceVersion")
            && Some(rv) != str_at(&prev, "/metadata/resourceVersion")
        {
            return Err(SimError::Conflict {
                resource: def.key(),
                name,
            });
        }
        for field in ["uid", "creationTimestamp"] {
            if let Some(v) = prev.pointer(&format!("/metadata/{field}")) {
                set_meta(&mut obj, field, v.clone());
            }
        }
        let generation = prev
            .pointer("/metadata/generation")
            .and_then(Value::as_u64)
            .unwrap_or(1);
        admit(key, &mut obj, Some(&prev))?;
        let bump = u64::from(obj.get("spec") != prev.get("spec"));
        set_meta(&mut obj, "generation", json!(generation + bump));
        let written = self.commit(key, EventKind::Modified, obj)?;
        self.react(key);
        Ok(written)
    }

    pub fn merge_patch(
        &mut self,
        key: &str,
        ns: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<Written, SimError> {
        if !patch.is_object() {
            return Err(SimError::BadRequest(
                "a merge patch must be a JSON object".into(),
            ));
        }
        let prev = self.get(key, ns, name)?.value()?;
        let mut obj = prev.clone();
        merge_patch(&mut obj, patch);
        if !obj.get("metadata").is_some_and(Value::is_object) {
            return Err(SimError::BadRequest("metadata must be an object".into()));
        }
        // Identity is not patchable; an rv in the patch stays as a precondition
        // that `update` checks.
        for field in ["name", "namespace", "uid", "creationTimestamp"] {
            if let Some(v) = prev.pointer(&format!("/metadata/{field}")) {
                set_meta(&mut obj, field, v.clone());
            }
        }
        for field in ["apiVersion", "kind"] {
            if let Some(v) = prev.get(field) {
                obj[field] = v.clone();
            }
        }
        self.update(key, obj)
    }

    /// Deletes an object; the result is the object as last seen, stamped
    /// with the deletion's rv.
    pub fn delete(&mut self, key: &str, ns: Option<&str>, name: &str) -> Result<Written, SimError> {
        let prev = self.get(key, ns, name)?.value()?;
        let written = self.commit(key, EventKind::Deleted, prev)?;
        self.react(key);
        Ok(written)
    }

    /// Runs what a cluster's controllers do after a write to `key`; their
    /// own writes do not start them again.
    fn react(&mut self, key: &str) {
        if self.reacting {
            return;
        }
        self.reacting = true;
        if key == rbac::CLUSTER_ROLES {
            rbac::aggregate::aggregate(self);
        }
        if key == crd::CRDS {
            self.sync_crds();
        }
        self.reacting = false;
    }

    /// What the apiextensions controllers do after a CRD changes: serve
    /// each CRD's storage version (a changed definition replaces the old,
    /// keeping its objects), write each CRD's status, and stop serving the
    /// resources of CRDs that are gone.
    fn sync_crds(&mut self) {
        let crds: Vec<Value> = self
            .objects(crd::CRDS)
            .unwrap_or_default()
            .iter()
            .filter_map(|s| s.value().ok())
            .collect();
        let mut live = std::collections::BTreeSet::new();
        for obj in &crds {
            let Some(def) = crd::resource_def(obj) else {
                continue;
            };
            let key = def.key();
            live.insert(key.clone());
            if self.def(&key).ok().as_deref() != Some(&def) {
                self.register(def);
            }
            let status = crd::status(obj);
            if obj.get("status") != Some(&status) {
                let mut established = obj.clone();
                established["status"] = status;
                if let Err(e) = self.commit(crd::CRDS, EventKind::Modified, established) {
                    tracing::warn!(crd = %key, error = %e, "writing a CRD's status failed");
                }
            }
        }
        let gone: Vec<String> = self.crd_keys.difference(&live).cloned().collect();
        for key in gone {
            self.unregister(&key);
        }
        self.crd_keys = live;
    }
}

/// Kind-specific defaults and validation, as the API server's registry
/// strategies apply them on create and update.
fn admit(key: &str, obj: &mut Value, old: Option<&Value>) -> Result<(), SimError> {
    if rbac::is_rbac(key) {
        rbac::admit(key, obj, old)?;
    }
    if key == crd::CRDS {
        crd::admit(obj, old)?;
    }
    Ok(())
}
