//! Printers of the `batch` group: jobs and cronjobs (kubernetes
//! `pkg/printers/internalversion/printers.go`, v1.33: `printJob`,
//! `printCronJob`).

use serde_json::Value;

use super::cell::Cell;
use super::column::{AGE, CONTAINERS, Column, IMAGES, NAME};
use super::format::{Clock, bool_ptr, container_cells, format_label_selector, human_duration};
use super::printer::Printed;
use super::read::{int_at, list_at, opt_bool_at, opt_int_at, opt_str_at, str_at, time_at};
use super::swagger;

fn name(obj: &Value) -> Cell {
    Cell::from(str_at(obj, &["metadata", "name"]))
}

fn age(obj: &Value, clock: &Clock) -> Cell {
    Cell::Str(clock.since(time_at(obj, &["metadata", "creationTimestamp"])))
}

pub(super) const JOB_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Status", "string", "Status of the job."),
    Column::new("Completions", "string", swagger::JOB_STATUS_SUCCEEDED),
    Column::new("Duration", "string", "Time required to complete the job."),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::wide("Selector", "string", swagger::JOB_SPEC_SELECTOR),
];

/// `hasJobCondition`: the first condition of the type decides.
fn has_condition(job: &Value, kind: &str) -> bool {
    list_at(job, &["status", "conditions"])
        .iter()
        .find(|c| str_at(c, &["type"]) == kind)
        .is_some_and(|c| str_at(c, &["status"]) == "True")
}

pub(super) fn print_job(job: &Value, clock: &Clock) -> Printed {
    let succeeded = int_at(job, &["status", "succeeded"]);
    let completions = match opt_int_at(job, &["spec", "completions"]) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match opt_int_at(job, &["spec", "parallelism"]).unwrap_or(0) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let start = time_at(job, &["status", "startTime"]);
    let completion = time_at(job, &["status", "completionTime"]);
    let duration = match (start, completion) {
        (None, _) => String::new(),
        (Some(start), None) => human_duration((clock.now() - start).whole_nanoseconds()),
        (Some(start), Some(end)) => human_duration((end - start).whole_nanoseconds()),
    };
    let status = if has_condition(job, "Complete") {
        "Complete"
    } else if has_condition(job, "Failed") {
        "Failed"
    } else if time_at(job, &["metadata", "deletionTimestamp"]).is_some() {
        "Terminating"
    } else if has_condition(job, "Suspended") {
        "Suspended"
    } else if has_condition(job, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (containers, images) =
        container_cells(list_at(job, &["spec", "template", "spec", "containers"]));
    Printed::cells(vec![
        name(job),
        Cell::from(status),
        Cell::Str(completions),
        Cell::Str(duration),
        age(job, clock),
        Cell::Str(containers),
        Cell::Str(images),
        Cell::Str(format_label_selector(job, &["spec", "selector"])),
    ])
}

pub(super) const CRON_JOB_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Schedule", "string", swagger::CRON_JOB_SPEC_SCHEDULE),
    Column::new("Timezone", "string", swagger::CRON_JOB_SPEC_TIME_ZONE),
    Column::new("Suspend", "boolean", swagger::CRON_JOB_SPEC_SUSPEND),
    Column::new("Active", "integer", swagger::CRON_JOB_STATUS_ACTIVE),
    Column::new(
        "Last Schedule",
        "string",
        swagger::CRON_JOB_STATUS_LAST_SCHEDULE_TIME,
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::wide("Selector", "string", swagger::JOB_SPEC_SELECTOR),
];

/// `spec.suspend` is read with its API default (false) when absent.
pub(super) fn print_cron_job(cj: &Value, clock: &Clock) -> Printed {
    let last_schedule = match time_at(cj, &["status", "lastScheduleTime"]) {
        None => "<none>".to_string(),
        t => clock.since(t),
    };
    let template = [
        "spec",
        "jobTemplate",
        "spec",
        "template",
        "spec",
        "containers",
    ];
    let (containers, images) = container_cells(list_at(cj, &template));
    Printed::cells(vec![
        name(cj),
        Cell::from(str_at(cj, &["spec", "schedule"])),
        Cell::from(opt_str_at(cj, &["spec", "timeZone"]).unwrap_or("<none>")),
        Cell::Str(bool_ptr(Some(
            opt_bool_at(cj, &["spec", "suspend"]).unwrap_or(false),
        ))),
        Cell::Int(list_at(cj, &["status", "active"]).len() as i64),
        Cell::Str(last_schedule),
        age(cj, clock),
        Cell::Str(containers),
        Cell::Str(images),
        Cell::Str(format_label_selector(
            cj,
            &["spec", "jobTemplate", "spec", "selector"],
        )),
    ])
}
