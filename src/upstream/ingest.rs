//! Ingest: what an upstream object becomes before the hub stores it.
//!
//! `metadata.managedFields` is dropped (20–40% of a pod, useless to
//! viewers) unless configured otherwise; Secrets have `data` and
//! `stringData` values blanked unless configured otherwise; `apiVersion` and
//! `kind` are filled in (list items arrive without them).

use kube::api::DynamicObject;
use kube::core::{ApiResource, TypeMeta};

use crate::hub::Obj;
use crate::selector::{field_text, selectable_fields};

#[derive(Debug, Clone, Copy, Default)]
pub struct IngestOptions {
    pub keep_managed_fields: bool,
    /// Serve Secret values as they are (otherwise each value is "").
    pub reveal_secret_data: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("object without metadata.name")]
    NoName,
    #[error("object {0} has a non-numeric resourceVersion {1:?}")]
    ResourceVersion(String, String),
    #[error("object {0} cannot be encoded: {1}")]
    Encode(String, serde_json::Error),
}

/// Turns an upstream object into the hub's form.
pub fn ingest(
    mut o: DynamicObject,
    api: &ApiResource,
    opts: IngestOptions,
) -> Result<Obj, IngestError> {
    let name = o.metadata.name.clone().ok_or(IngestError::NoName)?;
    let rv_text = o.metadata.resource_version.clone().unwrap_or_default();
    let rv = rv_text
        .parse::<u64>()
        .map_err(|_| IngestError::ResourceVersion(name.clone(), rv_text))?;
    if !opts.keep_managed_fields {
        o.metadata.managed_fields = None;
    }
    o.types = Some(TypeMeta {
        api_version: api.api_version.clone(),
        kind: api.kind.clone(),
    });
    if !opts.reveal_secret_data && api.group.is_empty() && api.plural == "secrets" {
        redact_secret(&mut o.data);
    }
    let json = serde_json::to_vec(&o).map_err(|e| IngestError::Encode(name.clone(), e))?;
    let fields = selectable_fields(&api.group, &api.plural);
    let values = fields.iter().map(|path| {
        let value = o.data.pointer(&format!("/{}", path.replace('.', "/")));
        value.map(|v| field_text(Some(v)))
    });
    let labels = o.metadata.labels.take().unwrap_or_default();
    Ok(Obj::new(o.metadata.namespace.as_deref(), &name, rv, &json)
        .with_selectors(labels, fields, values))
}

fn redact_secret(data: &mut serde_json::Value) {
    for field in ["data", "stringData"] {
        if let Some(map) = data.get_mut(field).and_then(|v| v.as_object_mut()) {
            for value in map.values_mut() {
                *value = serde_json::Value::String(String::new());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dyn_obj(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    fn parse(obj: &Obj) -> serde_json::Value {
        serde_json::from_slice(&obj.json()).unwrap()
    }

    #[test]
    fn managed_fields_are_dropped_and_types_filled_in() {
        let api = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let o = dyn_obj(
            json!({"metadata": {"name": "a", "namespace": "x", "resourceVersion": "7",
            "labels": {"app": "web"}, "managedFields": [{"manager": "kubectl"}]}, "spec": {"nodeName": "n1"}}),
        );
        let obj = ingest(o, &api, IngestOptions::default()).unwrap();
        let v = parse(&obj);
        assert_eq!(v["kind"], "Pod");
        assert_eq!(v["apiVersion"], "v1");
        assert!(v["metadata"].get("managedFields").is_none());
        assert_eq!(v["spec"]["nodeName"], "n1");
        assert_eq!(
            v["metadata"]["labels"]["app"], "web",
            "labels stay in the object"
        );
        assert_eq!(obj.label("app"), Some("web"));
        assert_eq!(obj.resource_version(), 7);
        assert_eq!(obj.namespace(), Some("x"));
        assert_eq!(obj.field("spec.nodeName"), Some("n1"));
        assert_eq!(obj.field("metadata.namespace"), Some("x"));
        assert_eq!(obj.field("status.phase"), None);
    }

    #[test]
    fn secret_values_are_blanked_unless_revealed() {
        let api = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        let raw = json!({"metadata": {"name": "s", "namespace": "x", "resourceVersion": "3"},
            "data": {"password": "aHVudGVyMg=="}, "stringData": {"token": "t"}});
        let v = parse(&ingest(dyn_obj(raw.clone()), &api, IngestOptions::default()).unwrap());
        assert_eq!(v["data"]["password"], "");
        assert_eq!(v["stringData"]["token"], "");
        let opts = IngestOptions {
            reveal_secret_data: true,
            ..Default::default()
        };
        let v = parse(&ingest(dyn_obj(raw), &api, opts).unwrap());
        assert_eq!(v["data"]["password"], "aHVudGVyMg==");
    }

    #[test]
    fn bad_resource_version_is_an_error_not_a_panic() {
        let api = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let o = dyn_obj(json!({"metadata": {"name": "a", "resourceVersion": "abc"}}));
        assert!(matches!(
            ingest(o, &api, IngestOptions::default()),
            Err(IngestError::ResourceVersion(..))
        ));
    }
}
