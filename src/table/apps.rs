//! Printers of workload controllers: deployments, replicasets,
//! statefulsets, daemonsets (`apps`) and replicationcontrollers (core)
//! (kubernetes `pkg/printers/internalversion/printers.go`, v1.36:
//! `printDeployment`, `printReplicaSet`, `printStatefulSet`,
//! `printDaemonSet`, `printReplicationController`).
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

pub(super) const REPLICATION_CONTROLLER_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Desired", "integer", swagger::RC_SPEC_REPLICAS),
    Column::new("Current", "integer", swagger::RC_STATUS_REPLICAS),
    Column::new("Ready", "integer", swagger::RC_STATUS_READY_REPLICAS),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::wide("Selector", "string", swagger::RC_SPEC_SELECTOR),
];

/// The selector is a plain label map (`labels.FormatLabels`).
pub(super) fn print_replication_controller(rc: &Value, clock: &Clock) -> Printed {
    let (containers, images) = template_containers(rc);
    Printed::cells(vec![
        name(rc),
        Cell::Int(desired(rc)),
        Cell::Int(int_at(rc, &["status", "replicas"])),
        Cell::Int(int_at(rc, &["status", "readyReplicas"])),
        age(rc, clock),
        containers,
        images,
        Cell::Str(format_labels(rc, &["spec", "selector"])),
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

#[cfg(test)]
mod tests {
    //! Golden rows ported from kubernetes
    //! `pkg/printers/internalversion/printers_test.go` (`TestPrintDeployment`,
    //! `TestPrintDaemonSet`, `TestPrintReplicaSet`, `TestPrintStatefulSet`).

    use serde_json::{Value, json};

    use super::super::test_support::{CLOCK, ago, cells, wide_cells};
    use super::*;

    fn workload(name: &str, replicas: Option<i64>, status: Value) -> Value {
        let mut spec = json!({
            "template": {"spec": {"containers": [
                {"name": "fake-container1", "image": "fake-image1"},
                {"name": "fake-container2", "image": "fake-image2"}]}},
            "selector": {"matchLabels": {"foo": "bar"}},
        });
        if let Some(r) = replicas {
            spec["replicas"] = json!(r);
        }
        json!({"metadata": {"name": name, "creationTimestamp": ago(0)}, "spec": spec, "status": status})
    }

    #[test]
    fn deployments_show_ready_of_desired_updated_and_available() {
        let d = workload(
            "test1",
            Some(5),
            json!({"replicas": 10, "updatedReplicas": 2, "availableReplicas": 1, "unavailableReplicas": 4}),
        );
        assert_eq!(
            wide_cells(&print_deployment(&d, &CLOCK)),
            json!([
                "test1",
                "0/5",
                2,
                1,
                "0s",
                "fake-container1,fake-container2",
                "fake-image1,fake-image2",
                "foo=bar"
            ])
        );
        let defaulted = workload("d", None, json!({"readyReplicas": 1}));
        assert_eq!(cells(&print_deployment(&defaulted, &CLOCK), 2)[1], "1/1");
        let mut bad = workload("d", Some(1), json!({}));
        bad["spec"]["selector"] =
            json!({"matchExpressions": [{"key": "a", "operator": "Near", "values": ["b"]}]});
        assert_eq!(wide_cells(&print_deployment(&bad, &CLOCK))[7], "<invalid>");
        bad["spec"]["selector"] = json!(null);
        assert_eq!(wide_cells(&print_deployment(&bad, &CLOCK))[7], "");
    }

    #[test]
    fn daemon_sets_show_scheduling_counts_and_node_selector() {
        let ds = workload(
            "test1",
            None,
            json!({"currentNumberScheduled": 2, "desiredNumberScheduled": 3, "numberReady": 1,
                "updatedNumberScheduled": 2, "numberAvailable": 0}),
        );
        assert_eq!(
            wide_cells(&print_daemon_set(&ds, &CLOCK)),
            json!([
                "test1",
                3,
                2,
                1,
                2,
                0,
                "<none>",
                "0s",
                "fake-container1,fake-container2",
                "fake-image1,fake-image2",
                "foo=bar"
            ])
        );
        let mut placed = ds.clone();
        placed["spec"]["template"]["spec"]["nodeSelector"] =
            json!({"disk": "ssd", "arch": "arm64"});
        assert_eq!(
            wide_cells(&print_daemon_set(&placed, &CLOCK))[6],
            "arch=arm64,disk=ssd"
        );
    }

    #[test]
    fn replica_sets_show_desired_current_ready() {
        let rs = workload("test1", Some(5), json!({"replicas": 5, "readyReplicas": 2}));
        assert_eq!(
            wide_cells(&print_replica_set(&rs, &CLOCK)),
            json!([
                "test1",
                5,
                5,
                2,
                "0s",
                "fake-container1,fake-container2",
                "fake-image1,fake-image2",
                "foo=bar"
            ])
        );
        let mut no_selector = rs.clone();
        no_selector["spec"]
            .as_object_mut()
            .unwrap()
            .remove("selector");
        assert_eq!(
            wide_cells(&print_replica_set(&no_selector, &CLOCK))[7],
            "<none>"
        );
    }

    #[test]
    fn replication_controllers_show_desired_current_ready_and_label_selector() {
        let mut rc = workload("rc1", Some(5), json!({"replicas": 3, "readyReplicas": 1}));
        rc["spec"]["selector"] = json!({"a": "b"});
        rc["spec"]["template"]["spec"]["containers"] =
            json!([{"name": "test", "image": "test_image"}]);
        rc["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("creationTimestamp");
        assert_eq!(
            wide_cells(&print_replication_controller(&rc, &CLOCK)),
            json!(["rc1", 5, 3, 1, "<unknown>", "test", "test_image", "a=b"])
        );
        // A bookmark-like object: no template, no selector.
        let bare = json!({"metadata": {}, "spec": {"replicas": 0}});
        assert_eq!(
            wide_cells(&print_replication_controller(&bare, &CLOCK)),
            json!(["", 0, 0, 0, "<unknown>", "", "", "<none>"])
        );
    }

    #[test]
    fn stateful_sets_show_ready_of_desired() {
        let ss = workload("test1", Some(5), json!({"replicas": 5, "readyReplicas": 2}));
        assert_eq!(
            wide_cells(&print_stateful_set(&ss, &CLOCK)),
            json!([
                "test1",
                "2/5",
                "0s",
                "fake-container1,fake-container2",
                "fake-image1,fake-image2"
            ])
        );
    }
}
