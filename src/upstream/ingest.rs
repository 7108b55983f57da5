//! Ingest: what an upstream object becomes before the hub stores it.
//!
//! `metadata.managedFields` is dropped (20–40% of a pod, useless to
//! viewers) unless configured otherwise; Secrets have `data` and
//! `stringData` values blanked unless configured otherwise; `apiVersion` and
//! `kind` are filled in (list items arrive without them).
//!
//! An object arrives as its raw JSON ([`Object`]) and only what the hub
//! needs is decoded from it: the names of its fields and of its
//! metadata's, `metadata`'s name, namespace, resourceVersion and labels,
//! and the selectable fields (`spec.nodeName`). Every other value is
//! copied through as the upstream wrote it. Hand-written for a measured
//! reason: decoding a whole object and encoding it again cost 70 µs of a
//! 6.6 KB pod from a watch line as a `kube::api::DynamicObject`, the same as
//! a `serde_json::Value` (the trees, not `DynamicObject`'s flattened
//! fields), and that was most of a change's cost and of a 150,000-pod
//! list's 15 s (`benches/decode.rs`, `loadtest/RESULTS.md`). The object is
//! written as a `DynamicObject` was: `apiVersion`, `kind`, `metadata`, then
//! the other fields by name, the metadata's fields by name (so objects that
//! come sorted, as the simulator's do, keep their bytes); below that, the
//! upstream's own order and spelling (kube-apiserver writes compact JSON).

use std::collections::{BTreeMap, HashMap};

use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;

use kube::core::ApiResource;

use crate::hub::Obj;
use crate::selector::{field_text, selectable_fields};

/// A list's objects, ingested on a blocking thread as the list brings
/// them: a list of 150,000 pods is seconds of [`ingest`], which on an
/// async worker would keep it from parking, and so from polling its
/// sockets (tokio polls its I/O driver only when a worker parks or every
/// 61 task polls): the watch kept beside a relist (`upstream::beside`)
/// was heard in bursts every ~45 ms while a list was decoded beside it.
/// At most [`Ingesting::QUEUED`] objects wait between the two.
pub struct Ingesting {
    queue: tokio::sync::mpsc::Sender<(bool, Object)>,
    done: tokio::task::JoinHandle<HashMap<crate::hub::ObjKey, Obj>>,
}

impl Ingesting {
    /// Objects read and not yet ingested: a few MB at most.
    pub const QUEUED: usize = 1024;

    /// Ingests `resource`'s objects with `opts`; `failed` hears of each
    /// that cannot be (it is skipped).
    pub fn start(
        resource: ApiResource,
        opts: IngestOptions,
        failed: impl Fn(IngestError) + Send + 'static,
    ) -> Ingesting {
        let (queue, mut queued) = tokio::sync::mpsc::channel::<(bool, Object)>(Self::QUEUED);
        let done = tokio::task::spawn_blocking(move || {
            let mut objects = HashMap::new();
            while let Some((present, raw)) = queued.blocking_recv() {
                match ingest(&raw, &resource, opts) {
                    Ok(obj) if present => {
                        objects.insert(obj.key(), obj);
                    }
                    Ok(obj) => {
                        objects.remove(&obj.key());
                    }
                    Err(err) => failed(err),
                }
            }
            objects
        });
        Ingesting { queue, done }
    }

    /// The object `raw` is in the list (`present`), or is not (a watch
    /// list's DELETED): the last word on its key wins.
    pub async fn push(&self, present: bool, raw: Object) {
        // Only a panic in `ingest` ends the receiver; `finish` says so.
        let _ = self.queue.send((present, raw)).await;
    }

    /// The objects, once every one pushed is ingested.
    pub async fn finish(self) -> Vec<Obj> {
        drop(self.queue);
        match self.done.await {
            Ok(objects) => objects.into_values().collect(),
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(err) => panic!("a list's ingest was cancelled: {err}"),
        }
    }
}

/// An upstream object as read: its JSON, not yet decoded.
pub type Object = Box<RawValue>;

/// An object's fields by name, their values undecoded.
type Fields<'a> = BTreeMap<String, &'a RawValue>;

#[derive(Debug, Clone, Copy, Default)]
pub struct IngestOptions {
    pub keep_managed_fields: bool,
    /// Serve Secret values as they are (otherwise each value is "").
    pub reveal_secret_data: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("object is not a JSON object")]
    NotAnObject,
    #[error("object without metadata.name")]
    NoName,
    #[error("object {0} has a non-numeric resourceVersion {1:?}")]
    ResourceVersion(String, String),
    /// A metadata field of the wrong type (a `DynamicObject` could not
    /// have been decoded from it).
    #[error("object {0} has a malformed metadata.{1}")]
    Metadata(String, &'static str),
}

/// The fields written first, in this order, as `DynamicObject` wrote them.
const FIRST: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Turns an upstream object into the hub's form, its JSON in a buffer
/// the hub keeps (a listed object's: the cache holds it as it is).
pub fn ingest(o: &RawValue, api: &ApiResource, opts: IngestOptions) -> Result<Obj, IngestError> {
    ingest_as(o, api, opts, true)
}

/// As [`ingest`], for a watch event's object, which the hub logs at once
/// and then keeps inside the event's frame (`Obj::logged`).
pub fn ingest_event(
    o: &RawValue,
    api: &ApiResource,
    opts: IngestOptions,
) -> Result<Obj, IngestError> {
    ingest_as(o, api, opts, false)
}

fn ingest_as(
    o: &RawValue,
    api: &ApiResource,
    opts: IngestOptions,
    kept: bool,
) -> Result<Obj, IngestError> {
    let top: Fields = serde_json::from_str(o.get()).map_err(|_| IngestError::NotAnObject)?;
    let meta: Fields = top
        .get("metadata")
        .and_then(|m| serde_json::from_str(m.get()).ok())
        .ok_or(IngestError::NoName)?;
    let Ok(Some(name)) = field_of::<String>(&meta, "name") else {
        return Err(IngestError::NoName);
    };
    let malformed = |field| IngestError::Metadata(name.clone(), field);
    let rv = match field_of::<String>(&meta, "resourceVersion") {
        Ok(Some(text)) => text
            .parse::<u64>()
            .map_err(|_| IngestError::ResourceVersion(name.clone(), text))?,
        Ok(None) => return Err(IngestError::ResourceVersion(name, String::new())),
        Err(()) => return Err(malformed("resourceVersion")),
    };
    let namespace = field_of::<String>(&meta, "namespace").map_err(|()| malformed("namespace"))?;
    let labels = field_of::<BTreeMap<String, String>>(&meta, "labels")
        .map_err(|()| malformed("labels"))?
        .unwrap_or_default();

    let redact = !opts.reveal_secret_data && api.group.is_empty() && api.plural == "secrets";
    let mut json = Vec::with_capacity(o.get().len());
    json.push(b'{');
    write_entry(&mut json, "apiVersion", &string(&api.api_version));
    write_entry(&mut json, "kind", &string(&api.kind));
    json.extend_from_slice(b",\"metadata\":{");
    let mut first = true;
    for (key, value) in &meta {
        if key == "managedFields" && !opts.keep_managed_fields {
            continue;
        }
        if !std::mem::take(&mut first) {
            json.push(b',');
        }
        write_key(&mut json, key);
        json.extend_from_slice(value.get().as_bytes());
    }
    json.push(b'}');
    for (key, value) in &top {
        if FIRST.contains(&key.as_str()) {
            continue;
        }
        match blanked(redact, key, value) {
            Some(blank) => write_entry(&mut json, key, &blank),
            None => write_entry(&mut json, key, value.get()),
        }
    }
    json.push(b'}');

    let fields = selectable_fields(&api.group, &api.plural);
    let mut nested = Nested::default();
    let values: Vec<Option<String>> = fields
        .iter()
        .map(|path| nested.find(&top, path).map(|v| field_text(Some(&v))))
        .collect();
    let obj = match kept {
        true => Obj::new(namespace.as_deref(), &name, rv, &json),
        false => Obj::logged(namespace.as_deref(), &name, rv, json),
    };
    Ok(obj.with_selectors(labels, fields, values))
}

/// The field `key` of `fields` decoded as `T`: `None` if it is missing or
/// null, `Err` if it is not a `T`.
fn field_of<T: DeserializeOwned>(fields: &Fields, key: &str) -> Result<Option<T>, ()> {
    match fields.get(key) {
        None => Ok(None),
        Some(raw) => serde_json::from_str::<Option<T>>(raw.get()).map_err(|_| ()),
    }
}

/// `text` as a JSON string.
fn string(text: &str) -> String {
    Value::from(text).to_string()
}

/// `"key":`.
fn write_key(out: &mut Vec<u8>, key: &str) {
    out.extend_from_slice(string(key).as_bytes());
    out.push(b':');
}

/// `"key":value`, after a comma unless it is the first entry.
fn write_entry(out: &mut Vec<u8>, key: &str, value: &str) {
    if out.last() != Some(&b'{') {
        out.push(b',');
    }
    write_key(out, key);
    out.extend_from_slice(value.as_bytes());
}

/// A Secret's `data` or `stringData` with every value "", when `redact`.
fn blanked(redact: bool, key: &str, value: &RawValue) -> Option<String> {
    if !redact || !matches!(key, "data" | "stringData") {
        return None;
    }
    let values: Fields = serde_json::from_str(value.get()).ok()?;
    let mut out = Vec::with_capacity(value.get().len());
    out.push(b'{');
    for key in values.keys() {
        write_entry(&mut out, key, "\"\"");
    }
    out.push(b'}');
    String::from_utf8(out).ok()
}

/// The objects under an object's top-level fields, each decoded once for
/// all the selectable fields under it (a pod's eight are under `spec` and
/// `status`).
#[derive(Default)]
struct Nested<'a> {
    decoded: Vec<(&'a str, Option<Fields<'a>>)>,
}

impl<'a> Nested<'a> {
    /// The value at a dotted `path` (`spec.nodeName`) of `top`.
    fn find(&mut self, top: &Fields<'a>, path: &'a str) -> Option<Value> {
        let mut parts = path.split('.');
        let head = parts.next()?;
        let Some(next) = parts.next() else {
            return serde_json::from_str(top.get(head)?.get()).ok();
        };
        let at = match self.decoded.iter().position(|(h, _)| *h == head) {
            Some(at) => at,
            None => {
                let fields = top
                    .get(head)
                    .and_then(|raw| serde_json::from_str::<Fields>(raw.get()).ok());
                self.decoded.push((head, fields));
                self.decoded.len() - 1
            }
        };
        let mut raw: &RawValue = self.decoded[at].1.as_ref()?.get(next)?;
        for part in parts {
            raw = serde_json::from_str::<Fields>(raw.get()).ok()?.get(part)?;
        }
        serde_json::from_str(raw.get()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::ObjKey;
    use serde_json::json;

    fn dyn_obj(v: Value) -> Object {
        serde_json::value::to_raw_value(&v).unwrap()
    }

    fn parse(obj: &Obj) -> serde_json::Value {
        serde_json::from_slice(&obj.json()).unwrap()
    }

    /// A list ingested off the async worker: more objects than its queue
    /// holds, the last word on a key wins, a bad object is told of and
    /// skipped.
    #[tokio::test]
    async fn a_list_ingested_on_a_blocking_thread_keeps_the_last_word_on_each_key() {
        let api = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let failed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let told = failed.clone();
        let ingesting = Ingesting::start(api, IngestOptions::default(), move |_| {
            told.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let pod = |name: &str, rv: u64| {
            dyn_obj(
                json!({"metadata": {"name": name, "namespace": "x", "resourceVersion": rv.to_string()}}),
            )
        };
        let n = Ingesting::QUEUED * 3;
        for i in 0..n {
            ingesting
                .push(true, pod(&format!("p{i}"), i as u64 + 1))
                .await;
        }
        ingesting.push(true, pod("p0", 9_000)).await;
        ingesting.push(false, pod("p1", 9_001)).await;
        ingesting
            .push(true, dyn_obj(json!({"metadata": {"resourceVersion": "1"}})))
            .await;
        let objects = ingesting.finish().await;
        assert_eq!(objects.len(), n - 1);
        let p0 = objects
            .iter()
            .find(|o| o.key() == ObjKey::new(Some("x"), "p0"))
            .unwrap();
        assert_eq!(p0.resource_version(), 9_000);
        assert!(
            !objects
                .iter()
                .any(|o| o.key() == ObjKey::new(Some("x"), "p1"))
        );
        assert_eq!(failed.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn managed_fields_are_dropped_and_types_filled_in() {
        let api = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let o = dyn_obj(
            json!({"metadata": {"name": "a", "namespace": "x", "resourceVersion": "7",
            "labels": {"app": "web"}, "managedFields": [{"manager": "kubectl"}]}, "spec": {"nodeName": "n1"}}),
        );
        let obj = ingest(&o, &api, IngestOptions::default()).unwrap();
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
        let v = parse(&ingest(&dyn_obj(raw.clone()), &api, IngestOptions::default()).unwrap());
        assert_eq!(v["data"]["password"], "");
        assert_eq!(v["stringData"]["token"], "");
        let opts = IngestOptions {
            reveal_secret_data: true,
            ..Default::default()
        };
        let v = parse(&ingest(&dyn_obj(raw), &api, opts).unwrap());
        assert_eq!(v["data"]["password"], "aHVudGVyMg==");
    }

    #[test]
    fn bad_resource_version_is_an_error_not_a_panic() {
        let api = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let o = dyn_obj(json!({"metadata": {"name": "a", "resourceVersion": "abc"}}));
        assert!(matches!(
            ingest(&o, &api, IngestOptions::default()),
            Err(IngestError::ResourceVersion(..))
        ));
        let o = dyn_obj(json!({"metadata": {"name": "a"}}));
        assert!(matches!(
            ingest(&o, &api, IngestOptions::default()),
            Err(IngestError::ResourceVersion(..))
        ));
    }

    #[test]
    fn malformed_metadata_is_an_error_not_a_panic() {
        let api = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        for (meta, err) in [
            (json!({"resourceVersion": "1"}), "no name"),
            (json!({"name": 3, "resourceVersion": "1"}), "no name"),
            (
                json!({"name": "a", "resourceVersion": 1}),
                "resourceVersion",
            ),
            (
                json!({"name": "a", "resourceVersion": "1", "namespace": []}),
                "namespace",
            ),
            (
                json!({"name": "a", "resourceVersion": "1", "labels": {"a": 1}}),
                "labels",
            ),
            (
                json!({"name": "a", "resourceVersion": "1", "labels": "a"}),
                "labels",
            ),
        ] {
            let o = dyn_obj(json!({ "metadata": meta }));
            match ingest(&o, &api, IngestOptions::default()) {
                Err(IngestError::NoName) => assert_eq!(err, "no name"),
                Err(IngestError::Metadata(_, field)) => assert_eq!(field, err),
                other => panic!("{meta}: {other:?}"),
            }
        }
        assert!(matches!(
            ingest(
                &dyn_obj(json!({"spec": {}})),
                &api,
                IngestOptions::default()
            ),
            Err(IngestError::NoName)
        ));
    }

    /// What ingest wrote when it decoded a `DynamicObject`.
    fn as_dynamic_object(o: &Value, api: &ApiResource, opts: IngestOptions) -> Vec<u8> {
        let mut o: kube::api::DynamicObject = serde_json::from_value(o.clone()).unwrap();
        if !opts.keep_managed_fields {
            o.metadata.managed_fields = None;
        }
        o.types = Some(kube::core::TypeMeta {
            api_version: api.api_version.clone(),
            kind: api.kind.clone(),
        });
        if !opts.reveal_secret_data && api.plural == "secrets" {
            for field in ["data", "stringData"] {
                if let Some(map) = o.data.get_mut(field).and_then(|v| v.as_object_mut()) {
                    map.values_mut().for_each(|v| *v = json!(""));
                }
            }
        }
        serde_json::to_vec(&o).unwrap()
    }

    #[test]
    fn the_hub_gets_the_bytes_a_dynamic_object_made() {
        let pod_api = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let mut pod = kubefan_sim::pod("web-1")
            .node("n1")
            .label("app", "web")
            .containers(3)
            .build();
        pod["metadata"]["resourceVersion"] = json!("12");
        pod["metadata"]["uid"] = json!("3f0c5e1a-9b7d-4c2e-8f61-000000000001");
        pod["metadata"]["creationTimestamp"] = json!("2025-06-01T12:00:00Z");
        pod["metadata"]["annotations"] = json!({"a": "b"});
        pod["metadata"]["finalizers"] = json!(["x/y"]);
        let secret_api = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        // Fields named before "kind" and "metadata".
        let secret = json!({"metadata": {"name": "s", "namespace": "x", "resourceVersion": "3"},
            "data": {"password": "aHVudGVyMg=="}, "immutable": true, "type": "Opaque"});
        let event_api = ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&());
        let event = json!({"apiVersion": "v1", "kind": "Event", "count": 2, "action": "Pulled",
            "involvedObject": {"kind": "Pod", "name": "web-1"}, "reason": "Pulled",
            "metadata": {"name": "web-1.17", "namespace": "default", "resourceVersion": "9",
                "deletionGracePeriodSeconds": 0, "generation": 4}});
        for keep in [false, true] {
            for reveal in [false, true] {
                let opts = IngestOptions {
                    keep_managed_fields: keep,
                    reveal_secret_data: reveal,
                };
                for (o, api) in [
                    (&pod, &pod_api),
                    (&secret, &secret_api),
                    (&event, &event_api),
                ] {
                    let obj = ingest(&dyn_obj(o.clone()), api, opts).unwrap();
                    assert_eq!(
                        String::from_utf8_lossy(&obj.json()),
                        String::from_utf8_lossy(&as_dynamic_object(o, api, opts)),
                        "{opts:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn selectable_fields_are_read_from_the_object() {
        let api = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        let o = dyn_obj(json!({"metadata": {"name": "s", "resourceVersion": "3"},
            "type": "kubernetes.io/tls"}));
        let obj = ingest(&o, &api, IngestOptions::default()).unwrap();
        assert_eq!(obj.field("type"), Some("kubernetes.io/tls"));
        let api = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let o = dyn_obj(json!({"metadata": {"name": "a", "resourceVersion": "3"},
            "spec": {"hostNetwork": true, "nodeName": null}, "status": {"phase": "Running"}}));
        let obj = ingest(&o, &api, IngestOptions::default()).unwrap();
        assert_eq!(obj.field("spec.hostNetwork"), Some("true"));
        assert_eq!(obj.field("spec.nodeName"), Some(""));
        assert_eq!(obj.field("status.phase"), Some("Running"));
        assert_eq!(obj.field("status.podIP"), None);
    }
}
