//! Printers of the `apps` group: deployments, replicasets, statefulsets,
//! daemonsets (kubernetes `pkg/printers/internalversion/printers.go`,
//! v1.33: `printDeployment`, `printReplicaSet`, `printStatefulSet`,
//! `printDaemonSet`).
//!
//! `spec.replicas` is read with its API default (1) when absent: the API
//! server defaults it on every read, so that is what it prints.

use serde_json::Value;

use super::cell::Cell;
use super::column::{AGE, CONTAINERS, Column, IMAGES, NAME};
use super::format::{Clock, container_cells, format_label_selector, format_labels, label_selector};
use super::printer::Printed;
use super::read::{int_at, list_at, opt_int_at, str_at, time_at};
use super::swagger;

fn name(obj: &Value) -> Cell {
    Cell::from(str_at(obj, &["metadata", "name"]))
}

fn age(obj: &Value, clock: &Clock) -> Cell {
    Cell::Str(clock.since(time_at(obj, &["metadata", "creationTimestamp"])))
}

/// `spec.replicas`, defaulted to 1.
fn desired(obj: &Value) -> i64 {
    opt_int_at(obj, &["spec", "replicas"]).unwrap_or(1)
}

fn template_containers(obj: &Value) -> (Cell, Cell) {
    let (names, images) =
        container_cells(list_at(obj, &["spec", "template", "spec", "containers"]));
    (Cell::Str(names), Cell::Str(images))
}

pub(super) const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Ready", "string", "Number of the pod with ready state"),
    Column::new(
        "Up-to-date",
        "string",
        swagger::EXT_DEPLOYMENT_STATUS_UPDATED_REPLICAS,
    ),
    Column::new(
        "Available",
        "string",
        swagger::EXT_DEPLOYMENT_STATUS_AVAILABLE_REPLICAS,
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::wide("Selector", "string", swagger::EXT_DEPLOYMENT_SPEC_SELECTOR),
];

pub(super) fn print_deployment(d: &Value, clock: &Clock) -> Printed {
    let selector = match label_selector(d, &["spec", "selector"]) {
        Ok(sel) => sel.spell(),
        Err(()) => "<invalid>".to_string(),
    };
    let (containers, images) = template_containers(d);
    Printed::cells(vec![
        name(d),
        Cell::Str(format!(
            "{}/{}",
            int_at(d, &["status", "readyReplicas"]),
            desired(d)
        )),
        Cell::Int(int_at(d, &["status", "updatedReplicas"])),
        Cell::Int(int_at(d, &["status", "availableReplicas"])),
        age(d, clock),
        containers,
        images,
        Cell::Str(selector),
    ])
}

pub(super) const REPLICA_SET_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Desired", "integer", swagger::EXT_REPLICA_SET_SPEC_REPLICAS),
    Column::new(
        "Current",
        "integer",
        swagger::EXT_REPLICA_SET_STATUS_REPLICAS,
    ),
    Column::new(
        "Ready",
        "integer",
        swagger::EXT_REPLICA_SET_STATUS_READY_REPLICAS,
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::wide("Selector", "string", swagger::EXT_REPLICA_SET_SPEC_SELECTOR),
];

pub(super) fn print_replica_set(rs: &Value, clock: &Clock) -> Printed {
    let (containers, images) = template_containers(rs);
    Printed::cells(vec![
        name(rs),
        Cell::Int(desired(rs)),
        Cell::Int(int_at(rs, &["status", "replicas"])),
        Cell::Int(int_at(rs, &["status", "readyReplicas"])),
        age(rs, clock),
        containers,
        images,
        Cell::Str(format_label_selector(rs, &["spec", "selector"])),
    ])
}

pub(super) const STATEFUL_SET_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Ready", "string", "Number of the pod with ready state"),
    AGE,
    CONTAINERS,
    IMAGES,
];

pub(super) fn print_stateful_set(ss: &Value, clock: &Clock) -> Printed {
    let (containers, images) = template_containers(ss);
    Printed::cells(vec![
        name(ss),
        Cell::Str(format!(
            "{}/{}",
            int_at(ss, &["status", "readyReplicas"]),
            desired(ss)
        )),
        age(ss, clock),
        containers,
        images,
    ])
}

pub(super) const DAEMON_SET_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Desired",
        "integer",
        swagger::EXT_DAEMON_SET_STATUS_DESIRED_NUMBER_SCHEDULED,
    ),
    Column::new(
        "Current",
        "integer",
        swagger::EXT_DAEMON_SET_STATUS_CURRENT_NUMBER_SCHEDULED,
    ),
    Column::new(
        "Ready",
        "integer",
        swagger::EXT_DAEMON_SET_STATUS_NUMBER_READY,
    ),
    Column::new(
        "Up-to-date",
        "integer",
        swagger::EXT_DAEMON_SET_STATUS_UPDATED_NUMBER_SCHEDULED,
    ),
    Column::new(
        "Available",
        "integer",
        swagger::EXT_DAEMON_SET_STATUS_NUMBER_AVAILABLE,
    ),
    Column::new("Node Selector", "string", swagger::POD_SPEC_NODE_SELECTOR),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::wide("Selector", "string", swagger::EXT_DAEMON_SET_SPEC_SELECTOR),
];

pub(super) fn print_daemon_set(ds: &Value, clock: &Clock) -> Printed {
    let (containers, images) = template_containers(ds);
    let status = |field: &str| Cell::Int(int_at(ds, &["status", field]));
    Printed::cells(vec![
        name(ds),
        status("desiredNumberScheduled"),
        status("currentNumberScheduled"),
        status("numberReady"),
        status("updatedNumberScheduled"),
        status("numberAvailable"),
        Cell::Str(format_labels(
            ds,
            &["spec", "template", "spec", "nodeSelector"],
        )),
        age(ds, clock),
        containers,
        images,
        Cell::Str(format_label_selector(ds, &["spec", "selector"])),
    ])
}
