//! The pod printer: READY, STATUS and RESTARTS as kube-apiserver derives
//! them (kubernetes `pkg/printers/internalversion/printers.go`, `printPod`,
//! v1.36).
//!
//! STATUS starts as the phase (or `status.reason`), becomes
//! `SchedulingGated`, then `Init:…` while init containers run (`Init:N/M`,
//! `Init:<waiting reason>`, `Init:<terminated reason>`, `Init:ExitCode:N`,
//! `Init:Signal:N`), then the reason of the last container (in reverse
//! order, so the first container wins) that waits or terminated
//! (`CrashLoopBackOff`, `Completed`, `Error`, `ExitCode:N`, `Signal:N`);
//! `Completed` with a container still running reads `Running` (the pod
//! ready), else the reason of a container that exited non-zero if any
//! (v1.36), else `NotReady`; a pod being deleted reads `Terminating`, or `Unknown` when
//! its node was lost. Restartable init containers (sidecars) count towards
//! READY and, once the pod is initialized, towards RESTARTS.

use serde_json::Value;

use super::cell::Cell;
use super::column::{AGE, Column, NAME};
use super::format::Clock;
use super::printer::{Completed, Printed};
use super::read::{at, bool_at, int_at, list_at, obj_at, opt_bool_at, str_at, time_at};
use super::swagger;

pub(super) const COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Ready",
        "string",
        "The aggregate readiness state of this pod for accepting traffic.",
    ),
    Column::new(
        "Status",
        "string",
        "The aggregate status of the containers in this pod.",
    ),
    Column::new(
        "Restarts",
        "string",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    Column::wide("IP", "string", swagger::POD_STATUS_POD_IP),
    Column::wide("Node", "string", swagger::POD_SPEC_NODE_NAME),
    Column::wide(
        "Nominated Node",
        "string",
        swagger::POD_STATUS_NOMINATED_NODE_NAME,
    ),
    Column::wide(
        "Readiness Gates",
        "string",
        swagger::POD_SPEC_READINESS_GATES,
    ),
];

/// `node.NodeUnreachablePodReason`.
const NODE_UNREACHABLE_POD_REASON: &str = "NodeLost";

/// `podutil.IsRestartableInitContainer`: `restartPolicy: Always`.
fn restartable(container: Option<&Value>) -> bool {
    container.is_some_and(|c| str_at(c, &["restartPolicy"]) == "Always")
}

/// A container state (`waiting`, `running`, `terminated`) if set.
fn state<'a>(status: &'a Value, which: &str) -> Option<&'a Value> {
    at(status, &["state", which]).filter(|s| s.is_object())
}

/// `lastState.terminated.finishedAt`, if the container terminated before.
fn last_termination(status: &Value) -> Option<Option<time::OffsetDateTime>> {
    obj_at(status, &["lastState", "terminated"])?;
    Some(time_at(status, &["lastState", "terminated", "finishedAt"]))
}

/// Keeps the later of two restart dates (`metav1.Time.Before`, the zero
/// time being before any other).
fn later(current: &mut Option<time::OffsetDateTime>, candidate: Option<time::OffsetDateTime>) {
    if candidate > *current {
        *current = candidate;
    }
}

/// `hasPodReadyCondition`.
fn pod_ready(conditions: &[Value]) -> bool {
    conditions
        .iter()
        .any(|c| str_at(c, &["type"]) == "Ready" && str_at(c, &["status"]) == "True")
}

/// `isPodInitializedConditionTrue`: the first `Initialized` condition.
fn initialized(conditions: &[Value]) -> bool {
    conditions
        .iter()
        .find(|c| str_at(c, &["type"]) == "Initialized")
        .is_some_and(|c| str_at(c, &["status"]) == "True")
}

/// The reason a terminated container shows: its reason, else its signal or
/// exit code.
fn terminated_reason(terminated: &Value, prefix: &str) -> String {
    let reason = str_at(terminated, &["reason"]);
    if !reason.is_empty() {
        return format!("{prefix}{reason}");
    }
    let signal = int_at(terminated, &["signal"]);
    if signal != 0 {
        format!("{prefix}Signal:{signal}")
    } else {
        format!("{prefix}ExitCode:{}", int_at(terminated, &["exitCode"]))
    }
}

pub(super) fn print(pod: &Value, clock: &Clock) -> Printed {
    let spec_containers = list_at(pod, &["spec", "containers"]);
    let init_containers = list_at(pod, &["spec", "initContainers"]);
    let conditions = list_at(pod, &["status", "conditions"]);
    let phase = str_at(pod, &["status", "phase"]);

    let mut restarts: i64 = 0;
    let mut restartable_restarts: i64 = 0;
    let mut total = spec_containers.len();
    let mut ready = 0usize;
    let mut last_restart = None;
    let mut last_restartable_restart = None;

    let mut reason = phase.to_string();
    let status_reason = str_at(pod, &["status", "reason"]);
    if !status_reason.is_empty() {
        reason = status_reason.to_string();
    }
    // A pod carrying {type: PodScheduled, reason: SchedulingGated}.
    if conditions.iter().any(|c| {
        str_at(c, &["type"]) == "PodScheduled" && str_at(c, &["reason"]) == "SchedulingGated"
    }) {
        reason = "SchedulingGated".to_string();
    }

    let completed = match phase {
        "Succeeded" => Some(Completed {
            reason: "Succeeded",
            message: "The pod has completed successfully.",
        }),
        "Failed" => Some(Completed {
            reason: "Failed",
            message: "The pod failed.",
        }),
        _ => None,
    };

    let init_by_name = |name: &str| {
        init_containers
            .iter()
            .rev() // a Go map keeps the last container of a name
            .find(|c| str_at(c, &["name"]) == name)
    };
    total += init_containers
        .iter()
        .filter(|c| restartable(Some(c)))
        .count();

    let mut initializing = false;
    for (i, container) in list_at(pod, &["status", "initContainerStatuses"])
        .iter()
        .enumerate()
    {
        let count = int_at(container, &["restartCount"]);
        restarts += count;
        if let Some(finished) = last_termination(container) {
            later(&mut last_restart, finished);
        }
        let is_restartable = restartable(init_by_name(str_at(container, &["name"])));
        if is_restartable {
            restartable_restarts += count;
            if let Some(finished) = last_termination(container) {
                later(&mut last_restartable_restart, finished);
            }
        }
        let terminated = state(container, "terminated");
        let waiting = state(container, "waiting");
        if terminated.is_some_and(|t| int_at(t, &["exitCode"]) == 0) {
            continue;
        }
        if is_restartable && opt_bool_at(container, &["started"]) == Some(true) {
            if bool_at(container, &["ready"]) {
                ready += 1;
            }
            continue;
        }
        if let Some(terminated) = terminated {
            // initialization failed
            reason = terminated_reason(terminated, "Init:");
        } else if let Some(w) = waiting.filter(|w| {
            let r = str_at(w, &["reason"]);
            !r.is_empty() && r != "PodInitializing"
        }) {
            reason = format!("Init:{}", str_at(w, &["reason"]));
        } else {
            reason = format!("Init:{}/{}", i, init_containers.len());
        }
        initializing = true;
        break;
    }

    if !initializing || initialized(conditions) {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut has_running = false;
        // The reason of a container that ended with a non-zero exit code
        // (v1.36): a pod whose first container completed shows it.
        let mut error_reason = None;
        for container in list_at(pod, &["status", "containerStatuses"]).iter().rev() {
            restarts += int_at(container, &["restartCount"]);
            if let Some(finished) = last_termination(container) {
                later(&mut last_restart, finished);
            }
            let waiting_reason = state(container, "waiting").map(|w| str_at(w, &["reason"]));
            let terminated = state(container, "terminated");
            if let Some(r) = waiting_reason.filter(|r| !r.is_empty()) {
                reason = r.to_string();
            } else if let Some(t) = terminated {
                reason = terminated_reason(t, "");
                if int_at(t, &["exitCode"]) != 0 {
                    error_reason = Some(reason.clone());
                }
            } else if bool_at(container, &["ready"]) && state(container, "running").is_some() {
                has_running = true;
                ready += 1;
            }
        }
        // Back to "Running" if at least one container still runs and the
        // pod is ready; else the reason of one that failed, if any; else
        // "NotReady" while one still runs.
        if reason == "Completed" {
            if has_running && pod_ready(conditions) {
                reason = "Running".to_string();
            } else if let Some(error) = error_reason {
                reason = error;
            } else if has_running {
                reason = "NotReady".to_string();
            }
        }
    }

    let deleting = time_at(pod, &["metadata", "deletionTimestamp"]).is_some();
    if deleting && status_reason == NODE_UNREACHABLE_POD_REASON {
        reason = "Unknown".to_string();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".to_string();
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", clock.since(Some(t))),
        _ => restarts.to_string(),
    };

    let none_if_empty = |s: &str| {
        if s.is_empty() {
            "<none>".to_string()
        } else {
            s.to_string()
        }
    };
    // The internal PodStatus.PodIPs: podIP wins when set (v1 conversion).
    let ip = match str_at(pod, &["status", "podIP"]) {
        "" => list_at(pod, &["status", "podIPs"])
            .first()
            .map_or("", |p| str_at(p, &["ip"])),
        ip => ip,
    };
    let gates = list_at(pod, &["spec", "readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_conditions = gates
            .iter()
            .filter(|gate| {
                let wanted = str_at(gate, &["conditionType"]);
                conditions
                    .iter()
                    .find(|c| str_at(c, &["type"]) == wanted)
                    .is_some_and(|c| str_at(c, &["status"]) == "True")
            })
            .count();
        format!("{true_conditions}/{}", gates.len())
    };

    Printed {
        cells: vec![
            Cell::from(str_at(pod, &["metadata", "name"])),
            Cell::Str(format!("{ready}/{total}")),
            Cell::Str(reason),
            Cell::Str(restarts_cell),
            Cell::Str(clock.since(time_at(pod, &["metadata", "creationTimestamp"]))),
            Cell::Str(none_if_empty(ip)),
            Cell::Str(none_if_empty(str_at(pod, &["spec", "nodeName"]))),
            Cell::Str(none_if_empty(str_at(pod, &["status", "nominatedNodeName"]))),
            Cell::Str(readiness_gates),
        ],
        completed,
    }
}

#[cfg(test)]
mod tests {
    //! Golden rows ported from kubernetes
    //! `pkg/printers/internalversion/printers_test.go` (`TestPrintPod`,
    //! `TestPrintPodWithRestartableInitContainer`, `TestPrintPodwide`,
    //! `TestPrintPodConditions`, `TestPrintNonTerminatedPod`), the typed
    //! objects written as the JSON the API serves; plus the reasons those
    //! tests leave out.

    use serde_json::{Value, json};

    use super::super::test_support::{CLOCK, ago, cells, wide_cells};
    use super::*;

    fn short(pod: &Value) -> Value {
        cells(&print(pod, &CLOCK), 5)
    }

    fn running(ready: bool, restarts: i64) -> Value {
        json!({"ready": ready, "restartCount": restarts, "state": {"running": {}}})
    }

    fn pod(name: &str, containers: usize, status: Value) -> Value {
        json!({
            "metadata": {"name": name},
            "spec": {"containers": vec![json!({}); containers]},
            "status": status,
        })
    }

    #[test]
    fn ready_counts_running_ready_containers_and_restarts_add_up() {
        let p = pod(
            "test1",
            2,
            json!({"phase": "podPhase", "containerStatuses": [running(true, 3), {"restartCount": 3}]}),
        );
        assert_eq!(
            short(&p),
            json!(["test1", "1/2", "podPhase", "6", "<unknown>"])
        );
        // Ready is not enough for running.
        let p = pod(
            "test4",
            2,
            json!({"phase": "podPhase", "containerStatuses": [running(true, 3), {"ready": true, "restartCount": 3}]}),
        );
        assert_eq!(
            short(&p),
            json!(["test4", "1/2", "podPhase", "6", "<unknown>"])
        );
        let p = pod(
            "test5",
            2,
            json!({"reason": "podReason", "phase": "podPhase", "containerStatuses": [running(true, 3), {"ready": true, "restartCount": 3}]}),
        );
        assert_eq!(
            short(&p),
            json!(["test5", "1/2", "podReason", "6", "<unknown>"])
        );
    }

    #[test]
    fn waiting_and_terminated_reasons_override_the_phase_first_container_wins() {
        let p = pod(
            "test2",
            2,
            json!({"phase": "podPhase", "containerStatuses": [
                running(true, 3),
                {"state": {"waiting": {"reason": "ContainerWaitingReason"}}, "restartCount": 3}
            ]}),
        );
        assert_eq!(
            short(&p),
            json!(["test2", "1/2", "ContainerWaitingReason", "6", "<unknown>"])
        );
        let p = pod(
            "test3",
            2,
            json!({"phase": "podPhase", "containerStatuses": [
                {"state": {"waiting": {"reason": "ContainerWaitingReason"}}, "restartCount": 3},
                {"state": {"terminated": {"reason": "ContainerTerminatedReason"}}, "restartCount": 3}
            ]}),
        );
        assert_eq!(
            short(&p),
            json!(["test3", "0/2", "ContainerWaitingReason", "6", "<unknown>"])
        );
    }

    #[test]
    fn completed_with_a_running_container_reads_running_or_not_ready() {
        let statuses = json!([
            {"ready": true, "restartCount": 3, "state": {"terminated": {"reason": "Completed", "exitCode": 0}}},
            running(true, 3)
        ]);
        let p = pod(
            "test6",
            2,
            json!({"phase": "Running", "containerStatuses": statuses}),
        );
        assert_eq!(
            short(&p),
            json!(["test6", "1/2", "NotReady", "6", "<unknown>"])
        );
        let p = pod(
            "test6",
            2,
            json!({"phase": "Running", "containerStatuses": statuses,
                "conditions": [{"type": "Ready", "status": "True"}]}),
        );
        assert_eq!(
            short(&p),
            json!(["test6", "1/2", "Running", "6", "<unknown>"])
        );
        // v1.36: a pod whose first container completed and another failed
        // shows the failure, not "Completed" (or "NotReady" while a third
        // runs).
        for (others, status) in [
            (
                json!([{"state": {"terminated": {"reason": "Error", "exitCode": 1}}}]),
                "Error",
            ),
            (
                json!([{"state": {"terminated": {"exitCode": 2}}}]),
                "ExitCode:2",
            ),
            (
                json!([{"state": {"terminated": {"reason": "Error", "exitCode": 1}}}, running(true, 0)]),
                "Error",
            ),
            (
                json!([{"state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]),
                "Completed",
            ),
        ] {
            let mut statuses =
                vec![json!({"state": {"terminated": {"reason": "Completed", "exitCode": 0}}})];
            statuses.extend(others.as_array().unwrap().iter().cloned());
            let n = statuses.len();
            let p = pod(
                "test7",
                n,
                json!({"phase": "Running", "containerStatuses": statuses}),
            );
            assert_eq!(short(&p)[2], status, "{statuses:?}");
        }
    }

    #[test]
    fn init_containers_show_init_progress_and_restarts_with_their_age() {
        let ten_s = ago(10);
        let restarting = json!({"ready": false, "restartCount": 3, "state": {"running": {}},
            "lastState": {"terminated": {"finishedAt": ten_s}}});
        let waiting = json!({"ready": false, "state": {"waiting": {}}});
        let with_init = |name: &str,
                         inits: usize,
                         init_statuses: Value,
                         statuses: Value,
                         phase: &str| {
            json!({
                "metadata": {"name": name},
                "spec": {"initContainers": vec![json!({}); inits], "containers": [{}]},
                "status": {"phase": phase, "initContainerStatuses": init_statuses, "containerStatuses": statuses},
            })
        };
        let p = with_init(
            "test7",
            1,
            json!([restarting]),
            json!([waiting]),
            "podPhase",
        );
        assert_eq!(
            short(&p),
            json!(["test7", "0/1", "Init:0/1", "3 (10s ago)", "<unknown>"])
        );
        let p = with_init(
            "test8",
            2,
            json!([restarting, waiting]),
            json!([waiting]),
            "podPhase",
        );
        assert_eq!(
            short(&p),
            json!(["test8", "0/1", "Init:0/2", "3 (10s ago)", "<unknown>"])
        );
        let done = json!({"ready": false, "state": {"terminated": {}}});
        let p = with_init(
            "test9",
            2,
            json!([done, restarting]),
            json!([waiting]),
            "podPhase",
        );
        assert_eq!(
            short(&p),
            json!(["test9", "0/1", "Init:1/2", "3 (10s ago)", "<unknown>"])
        );
        let done_restarted = json!({"ready": false, "restartCount": 2, "state": {"terminated": {}},
            "lastState": {"terminated": {"finishedAt": ago(120)}}});
        let p = with_init(
            "test10",
            2,
            json!([done_restarted, restarting]),
            json!([waiting]),
            "podPhase",
        );
        assert_eq!(
            short(&p),
            json!(["test10", "0/1", "Init:1/2", "5 (10s ago)", "<unknown>"])
        );
        // Once initialized, only the app containers' restarts count.
        let app = json!({"ready": false, "restartCount": 4, "state": {"running": {}},
            "lastState": {"terminated": {"finishedAt": ago(20)}}});
        let p = with_init(
            "test11",
            1,
            json!([done_restarted]),
            json!([app]),
            "Running",
        );
        assert_eq!(
            short(&p),
            json!(["test11", "0/1", "Running", "4 (20s ago)", "<unknown>"])
        );
    }

    #[test]
    fn restarts_show_the_latest_restart() {
        let restarted = |count: i64, secs: i64| {
            json!({"ready": true, "restartCount": count, "state": {"running": {}},
                "lastState": {"terminated": {"finishedAt": ago(secs)}}})
        };
        let day = 24 * 3600;
        let p = pod(
            "test12",
            1,
            json!({"phase": "Running", "containerStatuses": [restarted(3, 5 * day)]}),
        );
        assert_eq!(
            short(&p),
            json!(["test12", "1/1", "Running", "3 (5d ago)", "<unknown>"])
        );
        let p = pod(
            "test13",
            2,
            json!({"phase": "Running", "containerStatuses": [running(true, 0), restarted(3, 10 * day)]}),
        );
        assert_eq!(
            short(&p),
            json!(["test13", "2/2", "Running", "3 (10d ago)", "<unknown>"])
        );
        let p = pod(
            "test14",
            2,
            json!({"phase": "Running", "containerStatuses": [restarted(6, 5 * day), restarted(3, 20 * day)]}),
        );
        assert_eq!(
            short(&p),
            json!(["test14", "2/2", "Running", "9 (5d ago)", "<unknown>"])
        );
    }

    #[test]
    fn scheduling_gated_pods_say_so() {
        let p = pod(
            "test15",
            2,
            json!({"phase": "podPhase", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
        );
        assert_eq!(
            short(&p),
            json!(["test15", "0/2", "SchedulingGated", "0", "<unknown>"])
        );
    }

    #[test]
    fn finished_pods_are_completed_rows_and_deleting_ones_terminating() {
        let succeeded = pod(
            "test16",
            1,
            json!({"phase": "Succeeded", "containerStatuses": [
                {"ready": false, "restartCount": 0, "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]}),
        );
        let printed = print(&succeeded, &CLOCK);
        assert_eq!(
            cells(&printed, 5),
            json!(["test16", "0/1", "Completed", "0", "<unknown>"])
        );
        assert_eq!(
            printed.completed,
            Some(Completed {
                reason: "Succeeded",
                message: "The pod has completed successfully."
            })
        );
        let failed = pod(
            "test17",
            1,
            json!({"phase": "Failed", "containerStatuses": [
                {"ready": false, "restartCount": 0, "state": {"terminated": {"reason": "Error", "exitCode": 1}}}]}),
        );
        let printed = print(&failed, &CLOCK);
        assert_eq!(
            cells(&printed, 5),
            json!(["test17", "0/1", "Error", "0", "<unknown>"])
        );
        assert_eq!(
            printed.completed.map(|c| c.message),
            Some("The pod failed.")
        );

        let deleting = |name: &str, status: Value| {
            let mut p = pod(name, 1, status);
            p["metadata"]["deletionTimestamp"] = json!(ago(10));
            p
        };
        let p = deleting(
            "test18",
            json!({"phase": "Succeeded", "containerStatuses": [
                {"state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]}),
        );
        assert_eq!(
            short(&p),
            json!(["test18", "0/1", "Completed", "0", "<unknown>"])
        );
        let p = deleting(
            "test19",
            json!({"phase": "Running", "containerStatuses": [{"ready": false, "state": {"running": {}}}]}),
        );
        assert_eq!(
            short(&p),
            json!(["test19", "0/1", "Terminating", "0", "<unknown>"])
        );
        let p = deleting("test20", json!({"phase": "Pending"}));
        assert_eq!(
            short(&p),
            json!(["test20", "0/1", "Terminating", "0", "<unknown>"])
        );
        // A pod on a lost node being deleted is Unknown.
        let p = deleting("lost", json!({"phase": "Running", "reason": "NodeLost"}));
        assert_eq!(
            short(&p),
            json!(["lost", "0/1", "Unknown", "0", "<unknown>"])
        );
    }

    #[test]
    fn crash_loops_exit_codes_and_signals_show_as_upstream() {
        let restarting = json!({"restartCount": 5, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"finishedAt": ago(300), "exitCode": 1}}});
        let p = pod(
            "crash",
            1,
            json!({"phase": "Running", "containerStatuses": [restarting]}),
        );
        assert_eq!(
            short(&p),
            json!([
                "crash",
                "0/1",
                "CrashLoopBackOff",
                "5 (5m ago)",
                "<unknown>"
            ])
        );
        let p = pod(
            "exit",
            1,
            json!({"phase": "Running", "containerStatuses": [{"state": {"terminated": {"exitCode": 2}}}]}),
        );
        assert_eq!(short(&p)[2], "ExitCode:2");
        let p = pod(
            "sig",
            1,
            json!({"phase": "Running", "containerStatuses": [{"state": {"terminated": {"signal": 9, "exitCode": 137}}}]}),
        );
        assert_eq!(short(&p)[2], "Signal:9");
        let init = |state: Value| {
            json!({"metadata": {"name": "i"}, "spec": {"initContainers": [{}], "containers": [{}]},
                "status": {"phase": "Pending", "initContainerStatuses": [{"state": state}]}})
        };
        assert_eq!(
            short(&init(json!({"terminated": {"exitCode": 3}})))[2],
            "Init:ExitCode:3"
        );
        assert_eq!(
            short(&init(
                json!({"terminated": {"signal": 15, "exitCode": 143}})
            ))[2],
            "Init:Signal:15"
        );
        // Exit code 0 is a finished init container, whatever its signal.
        assert_eq!(
            short(&init(json!({"terminated": {"signal": 15}})))[2],
            "Pending"
        );
        assert_eq!(
            short(&init(
                json!({"terminated": {"reason": "OOMKilled", "exitCode": 137}})
            ))[2],
            "Init:OOMKilled"
        );
        assert_eq!(
            short(&init(json!({"waiting": {"reason": "ImagePullBackOff"}})))[2],
            "Init:ImagePullBackOff"
        );
        assert_eq!(
            short(&init(json!({"waiting": {"reason": "PodInitializing"}})))[2],
            "Init:0/1"
        );
    }

    #[test]
    fn restartable_init_containers_count_towards_ready_and_restarts() {
        let sidecars = json!([
            {"name": "restartable-init-1", "restartPolicy": "Always"},
            {"name": "restartable-init-2", "restartPolicy": "Always"}
        ]);
        let sidecar_pod = |phase: &str, inits: Value, statuses: Value, initialized: &str| {
            json!({
                "metadata": {"name": "test1"},
                "spec": {"initContainers": sidecars, "containers": [{}]},
                "status": {"phase": phase, "initContainerStatuses": inits, "containerStatuses": statuses,
                    "conditions": [{"type": "Initialized", "status": initialized}]},
            })
        };
        let first = |started: bool| {
            json!({"name": "restartable-init-1", "ready": false, "restartCount": 3,
                "state": {"running": {}}, "started": started,
                "lastState": {"terminated": {"finishedAt": ago(10)}}})
        };
        let waiting_app = json!([{"ready": false, "restartCount": 0, "state": {"waiting": {}}}]);
        let p = sidecar_pod(
            "Pending",
            json!([first(false), {"name": "restartable-init-2", "ready": false, "state": {"waiting": {}}, "started": false}]),
            waiting_app.clone(),
            "False",
        );
        assert_eq!(
            short(&p),
            json!(["test1", "0/3", "Init:0/2", "3 (10s ago)", "<unknown>"])
        );
        let p = sidecar_pod(
            "Pending",
            json!([first(true), {"name": "restartable-init-2", "ready": false, "state": {"running": {}}, "started": false}]),
            waiting_app,
            "False",
        );
        assert_eq!(
            short(&p),
            json!(["test1", "0/3", "Init:1/2", "3 (10s ago)", "<unknown>"])
        );
        let app = json!([{"ready": true, "restartCount": 4, "state": {"running": {}},
            "lastState": {"terminated": {"finishedAt": ago(20)}}}]);
        let p = sidecar_pod(
            "Running",
            json!([first(true), {"name": "restartable-init-2", "ready": false, "state": {"running": {}}, "started": true}]),
            app,
            "True",
        );
        assert_eq!(
            short(&p),
            json!(["test1", "1/3", "Running", "7 (10s ago)", "<unknown>"])
        );
        let errored = |name: &str| json!({"name": name, "ready": false, "state": {"terminated": {"reason": "Error", "exitCode": 137}}, "started": false});
        let mut first_errored = errored("restartable-init-1");
        first_errored["restartCount"] = json!(3);
        first_errored["lastState"] = json!({"terminated": {"finishedAt": ago(10)}});
        let p = sidecar_pod(
            "Succeeded",
            json!([first_errored, errored("restartable-init-2")]),
            json!([{"ready": false, "restartCount": 4,
                "state": {"terminated": {"reason": "Completed", "exitCode": 0}},
                "lastState": {"terminated": {"finishedAt": ago(20)}}}]),
            "True",
        );
        let printed = print(&p, &CLOCK);
        assert_eq!(
            cells(&printed, 5),
            json!(["test1", "0/3", "Completed", "7 (10s ago)", "<unknown>"])
        );
        assert!(printed.completed.is_some());
        // Statuses of containers the spec does not have.
        let p = json!({
            "metadata": {"name": "test4"},
            "spec": {"initContainers": [{"name": "init1", "image": "initimage"},
                    {"name": "sidecar1", "image": "sidecarimage", "restartPolicy": "Always"}],
                "containers": [{"name": "container1", "image": "containerimage"}]},
            "status": {"phase": "Running",
                "initContainerStatuses": [{"name": "initinvalid"}, {"name": "init1"}, {"name": "sidecar1"}],
                "containerStatuses": [{"name": "containerinvalid"}, {"name": "container1"}]},
        });
        assert_eq!(
            short(&p),
            json!(["test4", "0/2", "Init:0/2", "0", "<unknown>"])
        );
    }

    #[test]
    fn wide_columns_show_ip_node_nominated_node_and_readiness_gates() {
        let gated = |ips: Value| {
            json!({
                "metadata": {"name": "test1"},
                "spec": {"containers": [{}, {}], "nodeName": "test1", "readinessGates": [
                    {"conditionType": "condition1"}, {"conditionType": "condition2"}, {"conditionType": "condition3"}]},
                "status": {"conditions": [{"type": "condition1", "status": "False"}, {"type": "condition2", "status": "True"}],
                    "phase": "podPhase", "podIPs": ips, "nominatedNodeName": "node1",
                    "containerStatuses": [running(true, 3), {"restartCount": 3}]},
            })
        };
        let want = json!([
            "test1",
            "1/2",
            "podPhase",
            "6",
            "<unknown>",
            "1.1.1.1",
            "test1",
            "node1",
            "1/3"
        ]);
        assert_eq!(
            wide_cells(&print(&gated(json!([{"ip": "1.1.1.1"}])), &CLOCK)),
            want
        );
        assert_eq!(
            wide_cells(&print(
                &gated(json!([{"ip": "1.1.1.1"}, {"ip": "2001:db8::"}])),
                &CLOCK
            )),
            want
        );
        let bare = pod(
            "test2",
            2,
            json!({"phase": "podPhase", "containerStatuses": [
                running(true, 3),
                {"state": {"waiting": {"reason": "ContainerWaitingReason"}}, "restartCount": 3}]}),
        );
        assert_eq!(
            wide_cells(&print(&bare, &CLOCK)),
            json!([
                "test2",
                "1/2",
                "ContainerWaitingReason",
                "6",
                "<unknown>",
                "<none>",
                "<none>",
                "<none>",
                "<none>"
            ])
        );
        // podIP alone (objects from older servers) is the IP too.
        let mut old = bare.clone();
        old["status"]["podIP"] = json!("10.0.0.7");
        assert_eq!(wide_cells(&print(&old, &CLOCK))[5], "10.0.0.7");
    }

    #[test]
    fn phases_print_with_completed_conditions_only_when_finished() {
        for (phase, completed) in [
            ("Running", false),
            ("Pending", false),
            ("Unknown", false),
            ("Succeeded", true),
            ("Failed", true),
        ] {
            let p = pod(
                "test",
                2,
                json!({"phase": phase, "containerStatuses": [running(true, 3), {"restartCount": 3}]}),
            );
            let printed = print(&p, &CLOCK);
            assert_eq!(
                cells(&printed, 5),
                json!(["test", "1/2", phase, "6", "<unknown>"])
            );
            assert_eq!(printed.completed.is_some(), completed, "{phase}");
        }
    }

    #[test]
    fn age_is_the_human_duration_since_creation() {
        let mut p = pod("aged", 1, json!({"phase": "Running"}));
        p["metadata"]["creationTimestamp"] = json!(ago(3 * 3600 + 5 * 60));
        assert_eq!(short(&p)[4], "3h5m");
    }

    #[test]
    fn malformed_fields_fall_back_instead_of_failing() {
        let p = json!({
            "metadata": {"name": 7, "creationTimestamp": "yesterday", "deletionTimestamp": 5},
            "spec": {"containers": "none", "initContainers": {}},
            "status": {"phase": ["x"], "containerStatuses": [{"restartCount": "many", "state": {"waiting": "soon"}}, 3],
                "conditions": "ready"},
        });
        assert_eq!(
            wide_cells(&print(&p, &CLOCK)),
            json!([
                "",
                "0/0",
                "",
                "0",
                "<unknown>",
                "<none>",
                "<none>",
                "<none>",
                "<none>"
            ])
        );
    }
}
