//! Whole-table tests: every printer's columns against kube-apiserver's
//! definitions, rows as wide as their columns, and the `Table` JSON.

use serde_json::{Value, json};

use super::printer::{BUILTINS, DEFAULT_COLUMNS};
use super::test_support::{CLOCK, ago};
use super::{
    IncludeObject, ListMeta, MetaVersion, Printer, TableView, partial_list, partial_object,
};

/// Column definitions transcribed from kubernetes
/// `pkg/printers/internalversion/printers.go` `AddHandlers` (v1.36):
/// `name:type` with `:name` for `Format: "name"` and `*` for priority 1.
const UPSTREAM: &[(&str, &str, &str)] = &[
    (
        "",
        "pods",
        "Name:string:name Ready:string Status:string Restarts:string Age:string IP:string* Node:string* Nominated_Node:string* Readiness_Gates:string*",
    ),
    (
        "",
        "nodes",
        "Name:string:name Status:string Roles:string Age:string Version:string Internal-IP:string* External-IP:string* OS-Image:string* Kernel-Version:string* Container-Runtime:string*",
    ),
    (
        "",
        "namespaces",
        "Name:string:name Status:string Age:string",
    ),
    (
        "",
        "services",
        "Name:string:name Type:string Cluster-IP:string External-IP:string Port(s):string Age:string Selector:string*",
    ),
    (
        "",
        "endpoints",
        "Name:string:name Endpoints:string Age:string",
    ),
    ("", "configmaps", "Name:string:name Data:string Age:string"),
    (
        "",
        "secrets",
        "Name:string:name Type:string Data:string Age:string",
    ),
    ("", "serviceaccounts", "Name:string:name Age:string"),
    (
        "",
        "persistentvolumes",
        "Name:string:name Capacity:string Access_Modes:string Reclaim_Policy:string Status:string Claim:string StorageClass:string VolumeAttributesClass:string Reason:string Age:string VolumeMode:string*",
    ),
    (
        "",
        "persistentvolumeclaims",
        "Name:string:name Status:string Volume:string Capacity:string Access_Modes:string StorageClass:string VolumeAttributesClass:string Age:string VolumeMode:string*",
    ),
    (
        "",
        "events",
        "Last_Seen:string Type:string Reason:string Object:string Subobject:string* Source:string* Message:string First_Seen:string* Count:string* Name:string:name*",
    ),
    (
        "events.k8s.io",
        "events",
        "Last_Seen:string Type:string Reason:string Object:string Subobject:string* Source:string* Message:string First_Seen:string* Count:string* Name:string:name*",
    ),
    (
        "apps",
        "deployments",
        "Name:string:name Ready:string Up-to-date:string Available:string Age:string Containers:string* Images:string* Selector:string*",
    ),
    (
        "apps",
        "replicasets",
        "Name:string:name Desired:integer Current:integer Ready:integer Age:string Containers:string* Images:string* Selector:string*",
    ),
    (
        "apps",
        "statefulsets",
        "Name:string:name Ready:string Age:string Containers:string* Images:string*",
    ),
    (
        "apps",
        "daemonsets",
        "Name:string:name Desired:integer Current:integer Ready:integer Up-to-date:integer Available:integer Node_Selector:string Age:string Containers:string* Images:string* Selector:string*",
    ),
    (
        "batch",
        "jobs",
        "Name:string:name Status:string Completions:string Duration:string Age:string Containers:string* Images:string* Selector:string*",
    ),
    (
        "batch",
        "cronjobs",
        "Name:string:name Schedule:string Timezone:string Suspend:boolean Active:integer Last_Schedule:string Age:string Containers:string* Images:string* Selector:string*",
    ),
    (
        "networking.k8s.io",
        "ingresses",
        "Name:string:name Class:string Hosts:string Address:string Ports:string Age:string",
    ),
    (
        "discovery.k8s.io",
        "endpointslices",
        "Name:string:name AddressType:string Ports:string Endpoints:string Age:string",
    ),
    (
        "",
        "replicationcontrollers",
        "Name:string:name Desired:integer Current:integer Ready:integer Age:string Containers:string* Images:string* Selector:string*",
    ),
    (
        "policy",
        "poddisruptionbudgets",
        "Name:string:name Min_Available:string Max_Unavailable:string Allowed_Disruptions:integer Age:string",
    ),
    (
        "rbac.authorization.k8s.io",
        "rolebindings",
        "Name:string:name Role:string Age:string Users:string* Groups:string* ServiceAccounts:string*",
    ),
    (
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        "Name:string:name Role:string Age:string Users:string* Groups:string* ServiceAccounts:string*",
    ),
    (
        "storage.k8s.io",
        "storageclasses",
        "Name:string:name Provisioner:string ReclaimPolicy:string VolumeBindingMode:string AllowVolumeExpansion:string Age:string",
    ),
    (
        "scheduling.k8s.io",
        "priorityclasses",
        "Name:string:name Value:integer Global-Default:boolean Age:string PreemptionPolicy:string",
    ),
    (
        "networking.k8s.io",
        "ingressclasses",
        "Name:string:name Controller:string Parameters:string Age:string",
    ),
    (
        "networking.k8s.io",
        "networkpolicies",
        "Name:string:name Pod-Selector:string Age:string",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "Name:string:name Holder:string Age:string",
    ),
];

fn spell(columns: &[super::Column]) -> String {
    columns
        .iter()
        .map(|c| {
            let mut s = format!("{}:{}", c.name.replace(' ', "_"), c.kind);
            if !c.format.is_empty() {
                s.push(':');
                s.push_str(&c.format);
            }
            if c.priority > 0 {
                s.push('*');
            }
            s
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn every_printer_has_kube_apiservers_columns() {
    assert_eq!(BUILTINS.len(), UPSTREAM.len(), "one entry per printer");
    for (group, resource, want) in UPSTREAM {
        let p = Printer::builtin(group, resource)
            .unwrap_or_else(|| panic!("no printer for {resource}.{group}"));
        assert_eq!(spell(p.columns()), *want, "{resource}.{group}");
        for c in p.columns() {
            assert!(
                !c.description.is_empty(),
                "{resource} {} has a description",
                c.name
            );
        }
    }
    assert_eq!(
        spell(DEFAULT_COLUMNS),
        "Name:string:name Created_At:date",
        "apiserver pkg/registry/rest/table.go"
    );
    // Descriptions are the API documentation's, verbatim.
    let pods = Printer::builtin("", "pods").unwrap();
    assert_eq!(
        pods.columns()[5].description,
        "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."
    );
    assert!(
        pods.columns()[0]
            .description
            .starts_with("Name must be unique within a namespace.")
    );
}

#[test]
fn rows_are_as_wide_as_their_columns_whatever_the_object() {
    let objects = [
        json!({}),
        json!({"metadata": {"name": "x", "resourceVersion": "5"}}),
        json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "9",
            "annotations": {"k8s.io/initial-events-end": "true"}}}),
        json!({"metadata": "no", "spec": [], "status": 7}),
        json!(null),
        json!("a string"),
    ];
    for b in BUILTINS {
        let p = Printer::builtin(b.group, b.resource).unwrap();
        for o in &objects {
            assert_eq!(
                p.print(o, &CLOCK).cells.len(),
                p.columns().len(),
                "{} on {o}",
                b.resource
            );
        }
    }
}

fn pod() -> Value {
    json!({
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": "web-1", "namespace": "default", "resourceVersion": "42",
            "creationTimestamp": ago(120), "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
        "status": {"phase": "Succeeded", "podIP": "10.0.0.1",
            "containerStatuses": [{"ready": false, "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]},
    })
}

fn view(include: IncludeObject) -> TableView {
    TableView::new(
        Printer::builtin("", "pods").unwrap(),
        MetaVersion::V1,
        include,
    )
}

fn parse(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("valid JSON")
}

#[test]
fn a_list_is_a_table_with_every_column_and_the_list_metadata() {
    let p = pod();
    let json = serde_json::to_vec(&p).unwrap();
    let v = view(IncludeObject::Metadata);
    let rows = [v.row(&p, &json, &CLOCK), v.row(&p, &json, &CLOCK)];
    let meta = ListMeta {
        resource_version: "77",
        continue_token: Some("abc.2"),
        remaining_item_count: Some(3),
    };
    let table = parse(&v.list(&meta, &rows));
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(
        table["metadata"],
        json!({"resourceVersion": "77", "continue": "abc.2", "remainingItemCount": 3})
    );
    assert_eq!(table["columnDefinitions"].as_array().unwrap().len(), 9);
    assert_eq!(table["columnDefinitions"][5]["name"], "IP");
    assert_eq!(table["columnDefinitions"][5]["priority"], 1);
    assert_eq!(table["rows"].as_array().unwrap().len(), 2);
    let row = &table["rows"][0];
    assert_eq!(
        row["cells"],
        json!([
            "web-1",
            "0/1",
            "Completed",
            "0",
            "2m",
            "10.0.0.1",
            "n1",
            "<none>",
            "<none>"
        ])
    );
    assert_eq!(
        row["conditions"],
        json!([{"type": "Completed", "status": "True", "reason": "Succeeded",
            "message": "The pod has completed successfully."}])
    );
    // includeObject=Metadata (the default): the object's metadata.
    assert_eq!(
        row["object"],
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": p["metadata"]})
    );
    let empty = parse(&v.list(
        &ListMeta {
            resource_version: "1",
            ..ListMeta::default()
        },
        &[],
    ));
    assert_eq!(empty["rows"], json!([]));
    assert_eq!(empty["metadata"], json!({"resourceVersion": "1"}));
}

#[test]
fn include_object_decides_what_each_row_carries() {
    let p = pod();
    let json = serde_json::to_vec(&p).unwrap();
    let object = parse(view(IncludeObject::Object).row(&p, &json, &CLOCK).json());
    assert_eq!(object["object"], p);
    let none = parse(view(IncludeObject::None).row(&p, &json, &CLOCK).json());
    assert_eq!(none["object"], Value::Null);
    assert!(none.as_object().unwrap().contains_key("object"));
    let beta = TableView::new(
        Printer::builtin("", "pods").unwrap(),
        MetaVersion::V1beta1,
        IncludeObject::Metadata,
    );
    let row = parse(beta.row(&p, &json, &CLOCK).json());
    assert_eq!(row["object"]["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(
        parse(&beta.single(&beta.row(&p, &json, &CLOCK), true))["apiVersion"],
        "meta.k8s.io/v1beta1"
    );
}

#[test]
fn the_initial_events_end_bookmark_keeps_its_metadata_unless_objects_were_asked() {
    let bookmark = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "50",
        "annotations": {"k8s.io/initial-events-end": "true"}}});
    let json = serde_json::to_vec(&bookmark).unwrap();
    let none = parse(
        view(IncludeObject::None)
            .row(&bookmark, &json, &CLOCK)
            .json(),
    );
    assert_eq!(none["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(
        none["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let object = parse(
        view(IncludeObject::Object)
            .row(&bookmark, &json, &CLOCK)
            .json(),
    );
    assert_eq!(object["object"], bookmark);
}

#[test]
fn watch_events_carry_one_row_and_headers_only_when_asked() {
    let p = pod();
    let json = serde_json::to_vec(&p).unwrap();
    let v = view(IncludeObject::None);
    let row = v.row(&p, &json, &CLOCK);
    assert_eq!(row.resource_version(), "42");
    let first = parse(&v.single(&row, true));
    let later = parse(&v.single(&row, false));
    assert_eq!(first["kind"], "Table");
    assert_eq!(first["metadata"], json!({"resourceVersion": "42"}));
    assert_eq!(first["columnDefinitions"].as_array().unwrap().len(), 9);
    assert_eq!(later["columnDefinitions"], Value::Null);
    assert_eq!(first["rows"], later["rows"]);
    assert_eq!(later["rows"].as_array().unwrap().len(), 1);
    // The row is shared bytes: encoding it again gives the same.
    assert_eq!(row, v.row(&p, &json, &CLOCK));
}

#[test]
fn partial_object_metadata_wraps_the_metadata() {
    let p = pod();
    assert_eq!(
        parse(&partial_object(MetaVersion::V1, &p)),
        json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": p["metadata"]})
    );
    let list = parse(&partial_list(
        MetaVersion::V1,
        &ListMeta {
            resource_version: "9",
            continue_token: None,
            remaining_item_count: None,
        },
        [&p, &json!({})],
    ));
    assert_eq!(list["kind"], "PartialObjectMetadataList");
    assert_eq!(list["metadata"], json!({"resourceVersion": "9"}));
    assert_eq!(list["items"][0]["metadata"]["name"], "web-1");
    assert_eq!(list["items"][1]["metadata"], json!({}));
}

#[test]
fn other_resources_get_name_and_created_at() {
    let role = json!({"metadata": {"name": "reader", "resourceVersion": "3",
        "creationTimestamp": "2024-05-06T07:08:09Z"}});
    let v = TableView::new(
        Printer::default_columns(),
        MetaVersion::V1,
        IncludeObject::None,
    );
    let json = serde_json::to_vec(&role).unwrap();
    let table = parse(&v.single(&v.row(&role, &json, &CLOCK), true));
    assert_eq!(table["columnDefinitions"][1]["name"], "Created At");
    assert_eq!(
        table["rows"][0]["cells"],
        json!(["reader", "2024-05-06T07:08:09Z"])
    );
}

/// Validates `value` against `$defs/{name}` of `proto/kubefan.schema.json`.
fn validate(name: &str, value: &Value) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/proto/kubefan.schema.json"
    ))
    .expect("the schema is readable");
    let mut schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
    schema.as_object_mut().unwrap().remove("oneOf");
    schema["$ref"] = Value::String(format!("#/$defs/{name}"));
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "{name} violates the schema: {errors:?}\n{value}"
    );
}

#[test]
fn tables_and_partial_metadata_follow_the_protocol_schema() {
    let p = pod();
    let json = serde_json::to_vec(&p).unwrap();
    let bookmark = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "50",
        "annotations": {"k8s.io/initial-events-end": "true"}}});
    let bookmark_json = serde_json::to_vec(&bookmark).unwrap();
    for include in [
        IncludeObject::None,
        IncludeObject::Metadata,
        IncludeObject::Object,
    ] {
        let v = view(include);
        let rows = [
            v.row(&p, &json, &CLOCK),
            v.row(&bookmark, &bookmark_json, &CLOCK),
        ];
        let meta = ListMeta {
            resource_version: "77",
            continue_token: Some("abc.2"),
            remaining_item_count: Some(3),
        };
        validate("table", &parse(&v.list(&meta, &rows)));
        validate("table", &parse(&v.single(&rows[0], true)));
        validate("table", &parse(&v.single(&rows[1], false)));
    }
    validate(
        "partialObjectMetadata",
        &parse(&partial_object(MetaVersion::V1beta1, &p)),
    );
    validate(
        "partialObjectMetadataList",
        &parse(&partial_list(MetaVersion::V1, &ListMeta::default(), [&p])),
    );
    // And the schema catches a malformed table.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/proto/kubefan.schema.json"
    ))
    .unwrap();
    let mut schema: Value = serde_json::from_str(&text).unwrap();
    schema.as_object_mut().unwrap().remove("oneOf");
    schema["$ref"] = json!("#/$defs/table");
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(
        !validator.is_valid(&json!({"kind": "Table", "apiVersion": "meta.k8s.io/v2",
        "metadata": {}, "columnDefinitions": null, "rows": []}))
    );
}

#[test]
fn views_share_a_key_only_when_they_print_the_same_rows() {
    let pods = || Printer::builtin("", "pods").unwrap();
    let key = |p: Printer, v, i| TableView::new(p, v, i).key();
    assert_eq!(
        key(pods(), MetaVersion::V1, IncludeObject::None),
        key(pods(), MetaVersion::V1, IncludeObject::None)
    );
    assert_ne!(
        key(pods(), MetaVersion::V1, IncludeObject::None),
        key(pods(), MetaVersion::V1, IncludeObject::Object)
    );
    assert_ne!(
        key(pods(), MetaVersion::V1, IncludeObject::None),
        key(pods(), MetaVersion::V1beta1, IncludeObject::None)
    );
    assert_ne!(
        key(pods(), MetaVersion::V1, IncludeObject::None),
        key(
            Printer::builtin("", "nodes").unwrap(),
            MetaVersion::V1,
            IncludeObject::None
        )
    );
    let crd = |rv: &str| {
        json!({"metadata": {"name": "widgets.example.com", "resourceVersion": rv},
            "spec": {"group": "example.com", "names": {"plural": "widgets"},
                "versions": [{"name": "v1"}]}})
    };
    let widget = |rv: &str| Printer::for_crd(&crd(rv), "v1").unwrap();
    assert_eq!(widget("1").id(), widget("1").id());
    assert_ne!(
        widget("1").id(),
        widget("2").id(),
        "a changed CRD prints anew"
    );
}
