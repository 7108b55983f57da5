//! Printers of the core group (besides pods and events): nodes,
//! namespaces, services, endpoints, configmaps, secrets, serviceaccounts,
//! persistentvolumes and persistentvolumeclaims (kubernetes
//! `pkg/printers/internalversion/printers.go`, v1.33: `printNode`,
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
        Cell::Str(info("kernelVersion")),
        Cell::Str(info("containerRuntimeVersion")),
    ])
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

pub(super) const SERVICE_ACCOUNT_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Secrets", "string", swagger::SERVICE_ACCOUNT_SECRETS),
    AGE,
];

pub(super) fn print_service_account(sa: &Value, clock: &Clock) -> Printed {
    Printed::cells(vec![
        name(sa),
        Cell::Int(list_at(sa, &["secrets"]).len() as i64),
        age(sa, clock),
    ])
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
