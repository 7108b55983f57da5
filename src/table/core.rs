//! Printers of the core group (besides pods and events): nodes,
//! namespaces, services, endpoints, configmaps, secrets, serviceaccounts,
//! persistentvolumes and persistentvolumeclaims (kubernetes
//! `pkg/printers/internalversion/printers.go`, v1.36: `printNode`,
//! `printNamespace`, `printService`, `printEndpoints`, `printConfigMap`,
//! `printSecret`, `printServiceAccount`, `printPersistentVolume`,
//! `printPersistentVolumeClaim`).
//!
//! Tables are always built wide, so the service and ingress address
//! columns are never elided to 16 characters (`loadBalancerStatusStringer`
//! with `wide` true).

use std::collections::BTreeSet;

use serde_json::Value;

use super::cell::Cell;
use super::column::{AGE, Column, NAME};
use super::format::{Clock, format_labels, join_host_port};
use super::printer::Printed;
use super::read::{
    bool_at, int_at, list_at, map_len, obj_at, opt_str_at, str_at, string_map, time_at,
};
use super::swagger;

fn name(obj: &Value) -> Cell {
    Cell::from(str_at(obj, &["metadata", "name"]))
}

fn age(obj: &Value, clock: &Clock) -> Cell {
    Cell::Str(clock.since(time_at(obj, &["metadata", "creationTimestamp"])))
}

fn deleting(obj: &Value) -> bool {
    time_at(obj, &["metadata", "deletionTimestamp"]).is_some()
}

pub(super) const NODE_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Status", "string", "The status of the node"),
    Column::new("Roles", "string", "The roles of the node"),
    AGE,
    Column::new(
        "Version",
        "string",
        swagger::NODE_SYSTEM_INFO_KUBELET_VERSION,
    ),
    Column::wide("Internal-IP", "string", swagger::NODE_STATUS_ADDRESSES),
    Column::wide("External-IP", "string", swagger::NODE_STATUS_ADDRESSES),
    Column::wide("OS-Image", "string", swagger::NODE_SYSTEM_INFO_OS_IMAGE),
    Column::wide(
        "Kernel-Version",
        "string",
        swagger::NODE_SYSTEM_INFO_KERNEL_VERSION,
    ),
    Column::wide(
        "Container-Runtime",
        "string",
        swagger::NODE_SYSTEM_INFO_CONTAINER_RUNTIME_VERSION,
    ),
];

/// `labelNodeRolePrefix`, `nodeLabelRole`.
const NODE_ROLE_PREFIX: &str = "node-role.kubernetes.io/";
const NODE_ROLE_LABEL: &str = "kubernetes.io/role";

/// `findNodeRoles`: `node-role.kubernetes.io/<role>` keys and
/// `kubernetes.io/role=<role>` values, sorted and unique.
fn node_roles(node: &Value) -> String {
    let roles: BTreeSet<&str> = string_map(node, &["metadata", "labels"])
        .into_iter()
        .filter_map(|(k, v)| match k.strip_prefix(NODE_ROLE_PREFIX) {
            Some(role) if !role.is_empty() => Some(role),
            Some(_) => None,
            None if k == NODE_ROLE_LABEL && !v.is_empty() => Some(v),
            None => None,
        })
        .collect();
    if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    }
}

/// The first address of a type, or `<none>`.
fn node_address(node: &Value, kind: &str) -> String {
    list_at(node, &["status", "addresses"])
        .iter()
        .find(|a| str_at(a, &["type"]) == kind)
        .map_or_else(
            || "<none>".to_string(),
            |a| str_at(a, &["address"]).to_string(),
        )
}

pub(super) fn print_node(node: &Value, clock: &Clock) -> Printed {
    // The condition map keeps the last condition of each type.
    let ready = list_at(node, &["status", "conditions"])
        .iter()
        .rev()
        .find(|c| str_at(c, &["type"]) == "Ready");
    let mut status = vec![match ready {
        Some(c) if str_at(c, &["status"]) == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if bool_at(node, &["spec", "unschedulable"]) {
        status.push("SchedulingDisabled");
    }
    let info = |field: &str| {
        let s = str_at(node, &["status", "nodeInfo", field]);
        if s.is_empty() { "<unknown>" } else { s }.to_string()
    };
    Printed::cells(vec![
        name(node),
        Cell::Str(status.join(",")),
        Cell::Str(node_roles(node)),
        age(node, clock),
        Cell::from(str_at(node, &["status", "nodeInfo", "kubeletVersion"])),
        Cell::Str(node_address(node, "InternalIP")),
        Cell::Str(node_address(node, "ExternalIP")),
        Cell::Str(info("osImage")),
        Cell::Str(kernel_version(node, info("kernelVersion"))),
        Cell::Str(info("containerRuntimeVersion")),
    ])
}

/// The kernel version, with the node's architecture after it when it has
/// one (`6.1.0 (amd64)`, `<unknown> (arm64)`): v1.36's `printNode`.
fn kernel_version(node: &Value, kernel: String) -> String {
    match str_at(node, &["status", "nodeInfo", "architecture"]) {
        "" => kernel,
        arch => format!("{kernel} ({arch})"),
    }
}

pub(super) const NAMESPACE_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Status", "string", "The status of the namespace"),
    AGE,
];

pub(super) fn print_namespace(ns: &Value, clock: &Clock) -> Printed {
    Printed::cells(vec![
        name(ns),
        Cell::from(str_at(ns, &["status", "phase"])),
        age(ns, clock),
    ])
}

pub(super) const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Type", "string", swagger::SERVICE_SPEC_TYPE),
    Column::new("Cluster-IP", "string", swagger::SERVICE_SPEC_CLUSTER_IP),
    Column::new("External-IP", "string", swagger::SERVICE_SPEC_EXTERNAL_IPS),
    Column::new("Port(s)", "string", swagger::SERVICE_SPEC_PORTS),
    AGE,
    Column::wide("Selector", "string", swagger::SERVICE_SPEC_SELECTOR),
];

/// `loadBalancerStatusStringer` (wide): the ingress IPs, else hostnames,
/// sorted and unique, comma-separated.
pub(super) fn load_balancer_ingress(obj: &Value) -> String {
    let set: BTreeSet<&str> = list_at(obj, &["status", "loadBalancer", "ingress"])
        .iter()
        .filter_map(|i| match (str_at(i, &["ip"]), str_at(i, &["hostname"])) {
            ("", "") => None,
            ("", host) => Some(host),
            (ip, _) => Some(ip),
        })
        .collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

/// `getServiceExternalIP`.
fn service_external_ip(svc: &Value) -> String {
    let external: Vec<&str> = list_at(svc, &["spec", "externalIPs"])
        .iter()
        .map(|ip| ip.as_str().unwrap_or(""))
        .collect();
    match str_at(svc, &["spec", "type"]) {
        "ClusterIP" | "NodePort" => {
            if external.is_empty() {
                "<none>".to_string()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let lb = load_balancer_ingress(svc);
            if !external.is_empty() {
                let mut results: Vec<&str> = Vec::new();
                if !lb.is_empty() {
                    results.extend(lb.split(','));
                }
                results.extend(external);
                results.join(",")
            } else if !lb.is_empty() {
                lb
            } else {
                "<pending>".to_string()
            }
        }
        "ExternalName" => str_at(svc, &["spec", "externalName"]).to_string(),
        _ => "<unknown>".to_string(),
    }
}

/// `makePortString`: `port/protocol`, or `port:nodePort/protocol`.
fn service_ports(svc: &Value) -> String {
    list_at(svc, &["spec", "ports"])
        .iter()
        .map(|p| {
            let port = int_at(p, &["port"]);
            let protocol = str_at(p, &["protocol"]);
            match int_at(p, &["nodePort"]) {
                node_port if node_port > 0 => format!("{port}:{node_port}/{protocol}"),
                _ => format!("{port}/{protocol}"),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub(super) fn print_service(svc: &Value, clock: &Clock) -> Printed {
    // The internal ServiceSpec.ClusterIPs; clusterIP alone on objects
    // from servers older than dual-stack.
    let cluster_ip = list_at(svc, &["spec", "clusterIPs"])
        .first()
        .and_then(Value::as_str)
        .or_else(|| opt_str_at(svc, &["spec", "clusterIP"]).filter(|s| !s.is_empty()))
        .unwrap_or("<none>");
    let ports = service_ports(svc);
    Printed::cells(vec![
        name(svc),
        Cell::from(str_at(svc, &["spec", "type"])),
        Cell::from(cluster_ip),
        Cell::Str(service_external_ip(svc)),
        Cell::Str(if ports.is_empty() {
            "<none>".to_string()
        } else {
            ports
        }),
        age(svc, clock),
        Cell::Str(format_labels(svc, &["spec", "selector"])),
    ])
}

pub(super) const ENDPOINTS_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Endpoints", "string", swagger::ENDPOINTS_SUBSETS),
    AGE,
];

/// `formatEndpoints` with every port: up to three `ip:port` (or bare IPs
/// for subsets without ports), then `+ N more...`.
fn format_endpoints(ep: &Value) -> String {
    let subsets = list_at(ep, &["subsets"]);
    if subsets.is_empty() {
        return "<none>".to_string();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0usize;
    for ss in subsets {
        let addresses = list_at(ss, &["addresses"]);
        let ports = list_at(ss, &["ports"]);
        if ports.is_empty() {
            // Headless services may have no ports.
            count += addresses.len();
            for addr in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(str_at(addr, &["ip"]).to_string());
            }
            continue;
        }
        for port in ports {
            count += addresses.len();
            for addr in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(join_host_port(
                    str_at(addr, &["ip"]),
                    int_at(port, &["port"]),
                ));
            }
        }
    }
    let ret = list.join(",");
    if more {
        return format!("{ret} + {} more...", count - MAX);
    }
    ret
}

pub(super) fn print_endpoints(ep: &Value, clock: &Clock) -> Printed {
    Printed::cells(vec![
        name(ep),
        Cell::Str(format_endpoints(ep)),
        age(ep, clock),
    ])
}

pub(super) const CONFIG_MAP_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Data", "string", swagger::CONFIG_MAP_DATA),
    AGE,
];

pub(super) fn print_config_map(cm: &Value, clock: &Clock) -> Printed {
    let entries = map_len(cm, &["data"]) + map_len(cm, &["binaryData"]);
    Printed::cells(vec![name(cm), Cell::Int(entries as i64), age(cm, clock)])
}

pub(super) const SECRET_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Type", "string", swagger::SECRET_TYPE),
    Column::new("Data", "string", swagger::SECRET_DATA),
    AGE,
];

/// Counts the keys of `data`. Redaction blanks values and keeps keys, so
/// the count is the upstream's.
pub(super) fn print_secret(secret: &Value, clock: &Clock) -> Printed {
    Printed::cells(vec![
        name(secret),
        Cell::from(str_at(secret, &["type"])),
        Cell::Int(map_len(secret, &["data"]) as i64),
        age(secret, clock),
    ])
}

/// v1.36 prints no `Secrets` column (a count of legacy token secrets).
pub(super) const SERVICE_ACCOUNT_COLUMNS: &[Column] = &[NAME, AGE];

pub(super) fn print_service_account(sa: &Value, clock: &Clock) -> Printed {
    Printed::cells(vec![name(sa), age(sa, clock)])
}

/// `core.BetaStorageClassAnnotation`.
const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// `helper.GetAccessModesAsString`: RWO, ROX, RWX, RWOP in that order.
fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|v| v.as_str() == Some(m));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| has(mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// A `ResourceList` entry as `Quantity.String()`: the served (canonical)
/// string, or `0` for the zero quantity of a missing entry.
fn quantity(obj: &Value, path: &[&str]) -> String {
    match opt_str_at(obj, path) {
        Some(q) => q.to_string(),
        None => "0".to_string(),
    }
}

/// An optional string pointer printed as `<unset>` when nil.
fn unset_or(obj: &Value, path: &[&str]) -> String {
    opt_str_at(obj, path).unwrap_or("<unset>").to_string()
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj_at(obj, &["metadata", "annotations"])
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

pub(super) const PERSISTENT_VOLUME_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Capacity",
        "string",
        swagger::PERSISTENT_VOLUME_SPEC_CAPACITY,
    ),
    Column::new(
        "Access Modes",
        "string",
        swagger::PERSISTENT_VOLUME_SPEC_ACCESS_MODES,
    ),
    Column::new(
        "Reclaim Policy",
        "string",
        swagger::PERSISTENT_VOLUME_SPEC_PERSISTENT_VOLUME_RECLAIM_POLICY,
    ),
    Column::new("Status", "string", swagger::PERSISTENT_VOLUME_STATUS_PHASE),
    Column::new("Claim", "string", swagger::PERSISTENT_VOLUME_SPEC_CLAIM_REF),
    Column::new("StorageClass", "string", "StorageClass of the pv"),
    Column::new(
        "VolumeAttributesClass",
        "string",
        "VolumeAttributesClass of the pv",
    ),
    Column::new("Reason", "string", swagger::PERSISTENT_VOLUME_STATUS_REASON),
    AGE,
    Column::wide(
        "VolumeMode",
        "string",
        swagger::PERSISTENT_VOLUME_SPEC_VOLUME_MODE,
    ),
];

pub(super) fn print_persistent_volume(pv: &Value, clock: &Clock) -> Printed {
    let claim = match obj_at(pv, &["spec", "claimRef"]) {
        Some(_) => format!(
            "{}/{}",
            str_at(pv, &["spec", "claimRef", "namespace"]),
            str_at(pv, &["spec", "claimRef", "name"])
        ),
        None => String::new(),
    };
    let phase = if deleting(pv) {
        "Terminating"
    } else {
        str_at(pv, &["status", "phase"])
    };
    let class = annotation(pv, BETA_STORAGE_CLASS_ANNOTATION)
        .unwrap_or_else(|| str_at(pv, &["spec", "storageClassName"]));
    Printed::cells(vec![
        name(pv),
        Cell::Str(quantity(pv, &["spec", "capacity", "storage"])),
        Cell::Str(access_modes(list_at(pv, &["spec", "accessModes"]))),
        Cell::from(str_at(pv, &["spec", "persistentVolumeReclaimPolicy"])),
        Cell::from(phase),
        Cell::Str(claim),
        Cell::from(class),
        Cell::Str(unset_or(pv, &["spec", "volumeAttributesClassName"])),
        Cell::from(str_at(pv, &["status", "reason"])),
        age(pv, clock),
        Cell::Str(unset_or(pv, &["spec", "volumeMode"])),
    ])
}

pub(super) const PERSISTENT_VOLUME_CLAIM_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Status",
        "string",
        swagger::PERSISTENT_VOLUME_CLAIM_STATUS_PHASE,
    ),
    Column::new(
        "Volume",
        "string",
        swagger::PERSISTENT_VOLUME_CLAIM_SPEC_VOLUME_NAME,
    ),
    Column::new(
        "Capacity",
        "string",
        swagger::PERSISTENT_VOLUME_CLAIM_STATUS_CAPACITY,
    ),
    Column::new(
        "Access Modes",
        "string",
        swagger::PERSISTENT_VOLUME_CLAIM_STATUS_ACCESS_MODES,
    ),
    Column::new("StorageClass", "string", "StorageClass of the pvc"),
    Column::new(
        "VolumeAttributesClass",
        "string",
        "VolumeAttributesClass of the pvc",
    ),
    AGE,
    Column::wide(
        "VolumeMode",
        "string",
        swagger::PERSISTENT_VOLUME_CLAIM_SPEC_VOLUME_MODE,
    ),
];

pub(super) fn print_persistent_volume_claim(pvc: &Value, clock: &Clock) -> Printed {
    let phase = if deleting(pvc) {
        "Terminating"
    } else {
        str_at(pvc, &["status", "phase"])
    };
    let volume = str_at(pvc, &["spec", "volumeName"]);
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            quantity(pvc, &["status", "capacity", "storage"]),
            access_modes(list_at(pvc, &["status", "accessModes"])),
        )
    };
    let class = annotation(pvc, BETA_STORAGE_CLASS_ANNOTATION)
        .or_else(|| opt_str_at(pvc, &["spec", "storageClassName"]))
        .unwrap_or("");
    Printed::cells(vec![
        name(pvc),
        Cell::from(phase),
        Cell::from(volume),
        Cell::Str(capacity),
        Cell::Str(modes),
        Cell::from(class),
        Cell::Str(unset_or(pvc, &["spec", "volumeAttributesClassName"])),
        age(pvc, clock),
        Cell::Str(unset_or(pvc, &["spec", "volumeMode"])),
    ])
}

#[cfg(test)]
mod tests {
    //! Golden rows ported from kubernetes
    //! `pkg/printers/internalversion/printers_test.go` (`TestPrintNode*`,
    //! `TestPrintNamespace`, `TestPrintSecret`, `TestPrintServiceAccount`,
    //! `TestPrintService*`, `TestPrintEndpoint`, `TestPrintConfigMap`,
    //! `TestPrintPersistentVolume*`). Tables are always wide on the server,
    //! so the load-balancer column is checked unelided.

    use serde_json::{Value, json};

    use super::super::test_support::{CLOCK, ago, cells, wide_cells};
    use super::*;

    fn node(name: &str, spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": spec, "status": status})
    }

    fn ready(status: &str) -> Value {
        json!({"type": "Ready", "status": status})
    }

    #[test]
    fn node_status_follows_ready_and_schedulability() {
        let cases = [
            (
                node("foo1", json!({}), json!({"conditions": [ready("True")]})),
                "Ready",
            ),
            (
                node(
                    "foo2",
                    json!({"unschedulable": true}),
                    json!({"conditions": [ready("True")]}),
                ),
                "Ready,SchedulingDisabled",
            ),
            (
                node(
                    "foo3",
                    json!({}),
                    json!({"conditions": [ready("True"), ready("True")]}),
                ),
                "Ready",
            ),
            (
                node("foo4", json!({}), json!({"conditions": [ready("False")]})),
                "NotReady",
            ),
            (
                node(
                    "foo5",
                    json!({"unschedulable": true}),
                    json!({"conditions": [ready("False")]}),
                ),
                "NotReady,SchedulingDisabled",
            ),
            (
                node(
                    "foo6",
                    json!({}),
                    json!({"conditions": [{"type": "InvalidValue", "status": "True"}]}),
                ),
                "Unknown",
            ),
            (
                node("foo7", json!({}), json!({"conditions": [{}]})),
                "Unknown",
            ),
            (
                node(
                    "foo8",
                    json!({"unschedulable": true}),
                    json!({"conditions": [{"type": "InvalidValue", "status": "True"}]}),
                ),
                "Unknown,SchedulingDisabled",
            ),
            (
                node(
                    "foo9",
                    json!({"unschedulable": true}),
                    json!({"conditions": [{}]}),
                ),
                "Unknown,SchedulingDisabled",
            ),
        ];
        for (n, status) in cases {
            let name = n["metadata"]["name"].clone();
            assert_eq!(
                cells(&print_node(&n, &CLOCK), 5),
                json!([name, status, "<none>", "<unknown>", ""])
            );
        }
    }

    #[test]
    fn node_roles_come_from_role_labels() {
        let n = json!({"metadata": {"name": "foo10", "labels": {
            "node-role.kubernetes.io/master": "", "node-role.kubernetes.io/control-plane": "",
            "node-role.kubernetes.io/proxy": "", "kubernetes.io/role": "node"}}});
        assert_eq!(
            cells(&print_node(&n, &CLOCK), 5),
            json!([
                "foo10",
                "Unknown",
                "control-plane,master,node,proxy",
                "<unknown>",
                ""
            ])
        );
        let n = json!({"metadata": {"name": "foo11", "labels": {"kubernetes.io/role": "node"}}});
        assert_eq!(cells(&print_node(&n, &CLOCK), 5)[2], "node");
        let n = json!({"metadata": {"name": "127.0.0.1"}, "status": {}});
        assert_eq!(
            cells(&print_node(&n, &CLOCK), 5),
            json!(["127.0.0.1", "Unknown", "<none>", "<unknown>", ""])
        );
    }

    #[test]
    fn node_wide_columns_show_addresses_and_system_info() {
        let n = node(
            "foo1",
            json!({}),
            json!({"nodeInfo": {"osImage": "fake-os-image"},
                "addresses": [{"type": "ExternalIP", "address": "1.1.1.1"}]}),
        );
        assert_eq!(
            wide_cells(&print_node(&n, &CLOCK)),
            json!([
                "foo1",
                "Unknown",
                "<none>",
                "<unknown>",
                "",
                "<none>",
                "1.1.1.1",
                "fake-os-image",
                "<unknown>",
                "<unknown>"
            ])
        );
        let n = node(
            "foo2",
            json!({}),
            json!({"nodeInfo": {"kernelVersion": "fake-kernel-version", "containerRuntimeVersion": "foo://1.2.3"},
                "addresses": [{"type": "InternalIP", "address": "1.1.1.1"}]}),
        );
        assert_eq!(
            wide_cells(&print_node(&n, &CLOCK)),
            json!([
                "foo2",
                "Unknown",
                "<none>",
                "<unknown>",
                "",
                "1.1.1.1",
                "<none>",
                "<unknown>",
                "fake-kernel-version",
                "foo://1.2.3"
            ])
        );
        let n = node(
            "foo3",
            json!({}),
            json!({"addresses": [{"type": "ExternalIP", "address": "2.2.2.2"},
                {"type": "InternalIP", "address": "3.3.3.3"}, {"type": "ExternalIP", "address": "4.4.4.4"}]}),
        );
        let c = wide_cells(&print_node(&n, &CLOCK));
        assert_eq!((&c[5], &c[6]), (&json!("3.3.3.3"), &json!("2.2.2.2")));
        // v1.36: the architecture after the kernel version (its
        // printers_test.go cases "KernelVersion with Arch" and "KernelVersion
        // unknown with Arch").
        for (info, kernel) in [
            (
                json!({"kernelVersion": "fake-kernel-version", "architecture": "fake-arch-amd64"}),
                "fake-kernel-version (fake-arch-amd64)",
            ),
            (
                json!({"architecture": "fake-arch-arm64"}),
                "<unknown> (fake-arch-arm64)",
            ),
        ] {
            let n = node(
                "foo",
                json!({}),
                json!({"nodeInfo": info, "addresses": [{"type": "ExternalIP", "address": "1.1.1.1"}]}),
            );
            assert_eq!(
                wide_cells(&print_node(&n, &CLOCK)),
                json!([
                    "foo",
                    "Unknown",
                    "<none>",
                    "<unknown>",
                    "",
                    "<none>",
                    "1.1.1.1",
                    "<unknown>",
                    kernel,
                    "<unknown>"
                ])
            );
        }
        let n = json!({"metadata": {"name": "n", "creationTimestamp": ago(90)},
            "status": {"nodeInfo": {"kubeletVersion": "v1.33.1"}, "conditions": [ready("True")]}});
        assert_eq!(
            cells(&print_node(&n, &CLOCK), 5),
            json!(["n", "Ready", "<none>", "90s", "v1.33.1"])
        );
    }

    #[test]
    fn namespaces_secrets_and_service_accounts_print_counts_and_phases() {
        let ns = json!({"metadata": {"name": "namespace1", "creationTimestamp": ago(0)},
            "status": {"phase": "FooStatus"}});
        assert_eq!(
            wide_cells(&print_namespace(&ns, &CLOCK)),
            json!(["namespace1", "FooStatus", "0s"])
        );
        let ns = json!({"metadata": {"name": "namespace2"}});
        assert_eq!(
            wide_cells(&print_namespace(&ns, &CLOCK)),
            json!(["namespace2", "", "<unknown>"])
        );
        let secret = json!({"metadata": {"name": "secret1", "creationTimestamp": ago(0)},
            "type": "kubernetes.io/service-account-token", "data": {"token": ""}});
        assert_eq!(
            wide_cells(&print_secret(&secret, &CLOCK)),
            json!(["secret1", "kubernetes.io/service-account-token", 1, "0s"])
        );
        let secret = json!({"metadata": {"name": "secret1", "creationTimestamp": ago(0)},
            "type": "kubernetes.io/service-account-token"});
        assert_eq!(wide_cells(&print_secret(&secret, &CLOCK))[2], 0);
        // v1.36's TestPrintServiceAccount: no Secrets column, whatever it
        // lists.
        for secrets in [json!([]), json!([{"name": "Secret1"}, {"name": "Secret2"}])] {
            let sa = json!({"metadata": {"name": "sa1", "creationTimestamp": ago(0)}, "secrets": secrets});
            assert_eq!(
                wide_cells(&print_service_account(&sa, &CLOCK)),
                json!(["sa1", "0s"])
            );
        }
    }

    fn service(name: &str, spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": spec, "status": status})
    }

    #[test]
    fn load_balancer_services_show_ingress_ips_pending_and_external_ips() {
        let lb = |ingress: Value, ports: Value, external: Value| {
            service(
                "svc",
                json!({"clusterIPs": ["1.2.3.4"], "type": "LoadBalancer", "ports": ports,
                    "externalIPs": external, "selector": {"foo": "bar"}}),
                json!({"loadBalancer": {"ingress": ingress}}),
            )
        };
        let tcp80 = json!([{"port": 80, "protocol": "TCP"}]);
        let three = json!([{"port": 80, "protocol": "TCP"}, {"port": 8090, "protocol": "UDP"}, {"port": 8000, "protocol": "TCP"}]);
        let s = lb(
            json!([{"ip": "2.3.4.5"}, {"ip": "3.4.5.6"}]),
            tcp80.clone(),
            json!([]),
        );
        assert_eq!(
            wide_cells(&print_service(&s, &CLOCK)),
            json!([
                "svc",
                "LoadBalancer",
                "1.2.3.4",
                "2.3.4.5,3.4.5.6",
                "80/TCP",
                "<unknown>",
                "foo=bar"
            ])
        );
        let s = lb(
            json!([]),
            json!([{"port": 80, "protocol": "TCP"}, {"port": 8090, "protocol": "UDP"},
                {"port": 8000, "protocol": "TCP"}, {"port": 7777, "protocol": "SCTP"}]),
            json!([]),
        );
        let c = wide_cells(&print_service(&s, &CLOCK));
        assert_eq!(c[3], "<pending>");
        assert_eq!(c[4], "80/TCP,8090/UDP,8000/TCP,7777/SCTP");
        let s = lb(json!([{"ip": "2.3.4.5"}]), three.clone(), json!([]));
        assert_eq!(
            wide_cells(&print_service(&s, &CLOCK))[4],
            "80/TCP,8090/UDP,8000/TCP"
        );
        // Not elided: the server builds wide tables.
        let s = lb(
            json!([{"ip": "2.3.4.5"}, {"ip": "3.4.5.6"}, {"ip": "5.6.7.8", "hostname": "host5678"}]),
            three,
            json!([]),
        );
        assert_eq!(
            wide_cells(&print_service(&s, &CLOCK))[3],
            "2.3.4.5,3.4.5.6,5.6.7.8"
        );
        let s = lb(json!([]), tcp80.clone(), json!(["80.11.12.10"]));
        assert_eq!(wide_cells(&print_service(&s, &CLOCK))[3], "80.11.12.10");
        let s = lb(
            json!([{"ip": "3.4.5.6", "hostname": "test.cluster.com"}]),
            tcp80.clone(),
            json!(["80.11.12.10"]),
        );
        assert_eq!(
            wide_cells(&print_service(&s, &CLOCK))[3],
            "3.4.5.6,80.11.12.10"
        );
        let s = lb(
            json!([{"ip": "2.3.4.5", "hostname": "test.cluster.local"}, {"ip": "3.4.5.6", "hostname": "test.cluster.com"}]),
            tcp80,
            json!(["80.11.12.10", "80.11.12.11"]),
        );
        assert_eq!(
            wide_cells(&print_service(&s, &CLOCK))[3],
            "2.3.4.5,3.4.5.6,80.11.12.10,80.11.12.11"
        );
        let s = lb(
            json!([{"hostname": "lb.example.com"}]),
            json!([]),
            json!([]),
        );
        assert_eq!(wide_cells(&print_service(&s, &CLOCK))[3], "lb.example.com");
    }

    #[test]
    fn services_print_type_cluster_ip_ports_and_selector() {
        let s = service(
            "test1",
            json!({"type": "ClusterIP", "ports": [{"protocol": "tcp", "port": 2233}],
                "clusterIPs": ["10.9.8.7"], "selector": {"foo": "bar"}}),
            json!({}),
        );
        assert_eq!(
            wide_cells(&print_service(&s, &CLOCK)),
            json!([
                "test1",
                "ClusterIP",
                "10.9.8.7",
                "<none>",
                "2233/tcp",
                "<unknown>",
                "foo=bar"
            ])
        );
        let s = service(
            "test2",
            json!({"type": "NodePort", "ports": [{"protocol": "tcp", "port": 8888, "nodePort": 9999}],
                "clusterIPs": ["10.9.8.7"]}),
            json!({}),
        );
        assert_eq!(
            wide_cells(&print_service(&s, &CLOCK)),
            json!([
                "test2",
                "NodePort",
                "10.9.8.7",
                "<none>",
                "8888:9999/tcp",
                "<unknown>",
                "<none>"
            ])
        );
        let s = service(
            "test7",
            json!({"type": "ExternalName", "externalName": "my.database.example.com"}),
            json!({}),
        );
        assert_eq!(
            cells(&print_service(&s, &CLOCK), 6),
            json!([
                "test7",
                "ExternalName",
                "<none>",
                "my.database.example.com",
                "<none>",
                "<unknown>"
            ])
        );
        let headless = service(
            "headless",
            json!({"type": "ClusterIP", "clusterIP": "None", "clusterIPs": ["None"]}),
            json!({}),
        );
        assert_eq!(wide_cells(&print_service(&headless, &CLOCK))[2], "None");
        let untyped = service("odd", json!({}), json!({}));
        assert_eq!(wide_cells(&print_service(&untyped, &CLOCK))[3], "<unknown>");
    }

    #[test]
    fn endpoints_show_three_addresses_then_a_count() {
        let ep = |subsets: Value, created: i64| json!({"metadata": {"name": "ep", "creationTimestamp": ago(created)}, "subsets": subsets});
        assert_eq!(
            wide_cells(&print_endpoints(&ep(json!(null), 0), &CLOCK)),
            json!(["ep", "<none>", "0s"])
        );
        let no_ports = ep(
            json!([{"addresses": [{"ip": "1.2.3.4"}, {"ip": "5.6.7.8"}]}]),
            300,
        );
        assert_eq!(
            wide_cells(&print_endpoints(&no_ports, &CLOCK)),
            json!(["ep", "1.2.3.4,5.6.7.8", "5m"])
        );
        let one_port = ep(
            json!([{"addresses": [{"ip": "1.2.3.4"}, {"ip": "5.6.7.8"}], "ports": [{"port": 8001, "protocol": "tcp"}]}]),
            0,
        );
        assert_eq!(
            wide_cells(&print_endpoints(&one_port, &CLOCK))[1],
            "1.2.3.4:8001,5.6.7.8:8001"
        );
        let many = ep(
            json!([{"addresses": [{"ip": "1.2.3.4"}, {"ip": "5.6.7.8"}, {"ip": "9.8.7.6"}, {"ip": "6.6.6.6"}],
                "ports": [{"port": 8001, "protocol": "tcp"}]}]),
            0,
        );
        assert_eq!(
            wide_cells(&print_endpoints(&many, &CLOCK))[1],
            "1.2.3.4:8001,5.6.7.8:8001,9.8.7.6:8001 + 1 more..."
        );
    }

    #[test]
    fn config_maps_count_data_and_binary_data() {
        let cm = |extra: Value| {
            let mut v = json!({"metadata": {"name": "configmap", "creationTimestamp": ago(0)}});
            for (k, val) in extra.as_object().unwrap() {
                v[k] = val.clone();
            }
            v
        };
        assert_eq!(
            wide_cells(&print_config_map(&cm(json!({})), &CLOCK)),
            json!(["configmap", 0, "0s"])
        );
        assert_eq!(
            wide_cells(&print_config_map(
                &cm(json!({"data": {"foo": "bar"}})),
                &CLOCK
            ))[1],
            1
        );
        assert_eq!(
            wide_cells(&print_config_map(
                &cm(json!({"data": {"foo": "bar"}, "binaryData": {"bin": "YmluYXJ5"}})),
                &CLOCK
            ))[1],
            2
        );
    }

    #[test]
    fn persistent_volumes_print_capacity_modes_claim_and_classes() {
        let pv = |name: &str,
                  modes: Value,
                  size: &str,
                  phase: &str,
                  class: Option<&str>,
                  vac: Option<&str>| {
            let mut spec = json!({"claimRef": {"name": "test", "namespace": "default"},
                "accessModes": modes, "capacity": {"storage": size}});
            if let Some(c) = class {
                spec["storageClassName"] = json!(c);
            }
            if let Some(v) = vac {
                spec["volumeAttributesClassName"] = json!(v);
            }
            json!({"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}})
        };
        let cases = [
            (
                pv("test1", json!(["ReadOnlyMany"]), "4Gi", "Bound", None, None),
                json!([
                    "test1",
                    "4Gi",
                    "ROX",
                    "",
                    "Bound",
                    "default/test",
                    "",
                    "<unset>",
                    "",
                    "<unknown>",
                    "<unset>"
                ]),
            ),
            (
                pv(
                    "test2",
                    json!(["ReadOnlyMany"]),
                    "4Gi",
                    "Failed",
                    None,
                    None,
                ),
                json!([
                    "test2",
                    "4Gi",
                    "ROX",
                    "",
                    "Failed",
                    "default/test",
                    "",
                    "<unset>",
                    "",
                    "<unknown>",
                    "<unset>"
                ]),
            ),
            (
                pv(
                    "test3",
                    json!(["ReadWriteMany"]),
                    "10Gi",
                    "Pending",
                    None,
                    None,
                ),
                json!([
                    "test3",
                    "10Gi",
                    "RWX",
                    "",
                    "Pending",
                    "default/test",
                    "",
                    "<unset>",
                    "",
                    "<unknown>",
                    "<unset>"
                ]),
            ),
            (
                pv(
                    "test4",
                    json!(["ReadWriteOnce"]),
                    "10Gi",
                    "Pending",
                    Some("my-scn"),
                    None,
                ),
                json!([
                    "test4",
                    "10Gi",
                    "RWO",
                    "",
                    "Pending",
                    "default/test",
                    "my-scn",
                    "<unset>",
                    "",
                    "<unknown>",
                    "<unset>"
                ]),
            ),
            (
                pv(
                    "test4",
                    json!(["ReadWriteOnce"]),
                    "10Gi",
                    "Pending",
                    Some("my-scn"),
                    Some("my-vacn"),
                ),
                json!([
                    "test4",
                    "10Gi",
                    "RWO",
                    "",
                    "Pending",
                    "default/test",
                    "my-scn",
                    "my-vacn",
                    "",
                    "<unknown>",
                    "<unset>"
                ]),
            ),
            (
                pv(
                    "test5",
                    json!(["ReadWriteOnce"]),
                    "10Gi",
                    "Available",
                    Some("my-scn"),
                    None,
                ),
                json!([
                    "test5",
                    "10Gi",
                    "RWO",
                    "",
                    "Available",
                    "default/test",
                    "my-scn",
                    "<unset>",
                    "",
                    "<unknown>",
                    "<unset>"
                ]),
            ),
            (
                pv(
                    "test6",
                    json!(["ReadWriteOnce"]),
                    "10Gi",
                    "Released",
                    Some("my-scn"),
                    None,
                ),
                json!([
                    "test6",
                    "10Gi",
                    "RWO",
                    "",
                    "Released",
                    "default/test",
                    "my-scn",
                    "<unset>",
                    "",
                    "<unknown>",
                    "<unset>"
                ]),
            ),
        ];
        for (pv, want) in cases {
            assert_eq!(wide_cells(&print_persistent_volume(&pv, &CLOCK)), want);
        }
        let mut all = pv(
            "t",
            json!([
                "ReadWriteOncePod",
                "ReadWriteMany",
                "ReadWriteOnce",
                "ReadWriteOnce"
            ]),
            "1Gi",
            "Bound",
            Some("spec-class"),
            None,
        );
        all["metadata"]["annotations"] = json!({"volume.beta.kubernetes.io/storage-class": "beta"});
        all["metadata"]["deletionTimestamp"] = json!(ago(1));
        all["spec"]["volumeMode"] = json!("Block");
        let c = wide_cells(&print_persistent_volume(&all, &CLOCK));
        assert_eq!(c[2], "RWO,RWX,RWOP");
        assert_eq!(c[4], "Terminating");
        assert_eq!(c[6], "beta");
        assert_eq!(c[10], "Block");
        let no_capacity = json!({"metadata": {"name": "u"}, "spec": {}});
        assert_eq!(
            wide_cells(&print_persistent_volume(&no_capacity, &CLOCK))[1],
            "0"
        );
    }

    #[test]
    fn persistent_volume_claims_show_capacity_once_bound_to_a_volume() {
        let pvc = |name: &str, spec: Value, phase: &str, modes: Value, size: &str| {
            json!({"metadata": {"name": name}, "spec": spec,
                "status": {"phase": phase, "accessModes": modes, "capacity": {"storage": size}}})
        };
        let cases = [
            (
                pvc(
                    "test1",
                    json!({"volumeName": "my-volume", "volumeMode": "Filesystem"}),
                    "Bound",
                    json!(["ReadOnlyMany"]),
                    "4Gi",
                ),
                json!([
                    "test1",
                    "Bound",
                    "my-volume",
                    "4Gi",
                    "ROX",
                    "",
                    "<unset>",
                    "<unknown>",
                    "Filesystem"
                ]),
            ),
            (
                pvc(
                    "test2",
                    json!({"volumeMode": "Filesystem"}),
                    "Lost",
                    json!(["ReadOnlyMany"]),
                    "4Gi",
                ),
                json!([
                    "test2",
                    "Lost",
                    "",
                    "",
                    "",
                    "",
                    "<unset>",
                    "<unknown>",
                    "Filesystem"
                ]),
            ),
            (
                pvc(
                    "test3",
                    json!({"volumeName": "my-volume", "volumeMode": "Filesystem"}),
                    "Pending",
                    json!(["ReadWriteMany"]),
                    "10Gi",
                ),
                json!([
                    "test3",
                    "Pending",
                    "my-volume",
                    "10Gi",
                    "RWX",
                    "",
                    "<unset>",
                    "<unknown>",
                    "Filesystem"
                ]),
            ),
            (
                pvc(
                    "test4",
                    json!({"volumeName": "my-volume", "storageClassName": "my-scn", "volumeMode": "Filesystem"}),
                    "Pending",
                    json!(["ReadWriteOnce"]),
                    "10Gi",
                ),
                json!([
                    "test4",
                    "Pending",
                    "my-volume",
                    "10Gi",
                    "RWO",
                    "my-scn",
                    "<unset>",
                    "<unknown>",
                    "Filesystem"
                ]),
            ),
            (
                pvc(
                    "test5",
                    json!({"volumeName": "my-volume", "storageClassName": "my-scn"}),
                    "Pending",
                    json!(["ReadWriteOnce"]),
                    "10Gi",
                ),
                json!([
                    "test5",
                    "Pending",
                    "my-volume",
                    "10Gi",
                    "RWO",
                    "my-scn",
                    "<unset>",
                    "<unknown>",
                    "<unset>"
                ]),
            ),
            (
                pvc(
                    "test5",
                    json!({"volumeName": "my-volume", "storageClassName": "my-scn", "volumeAttributesClassName": "my-vacn"}),
                    "Pending",
                    json!(["ReadWriteOnce"]),
                    "10Gi",
                ),
                json!([
                    "test5",
                    "Pending",
                    "my-volume",
                    "10Gi",
                    "RWO",
                    "my-scn",
                    "my-vacn",
                    "<unknown>",
                    "<unset>"
                ]),
            ),
        ];
        for (pvc, want) in cases {
            assert_eq!(
                wide_cells(&print_persistent_volume_claim(&pvc, &CLOCK)),
                want
            );
        }
    }
}
