//! Printers of the `batch` group: jobs and cronjobs (kubernetes
//! `pkg/printers/internalversion/printers.go`, v1.36: `printJob`,
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

#[cfg(test)]
mod tests {
    //! Golden rows ported from kubernetes
    //! `pkg/printers/internalversion/printers_test.go` (`TestPrintJob`,
    //! `TestPrintJobList`, `TestPrintCronJob`, `TestPrintCronJobList`).

    use serde_json::{Value, json};

    use super::super::test_support::{CLOCK, ago, cells, wide_cells};
    use super::*;

    fn job(name: &str, created: i64, spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": name, "creationTimestamp": ago(created)}, "spec": spec, "status": status})
    }

    const TEN_YEARS: i64 = 10 * 365 * 24 * 3600;

    #[test]
    fn jobs_show_status_completions_and_duration() {
        let templated = json!({
            "completions": 2,
            "template": {"spec": {"containers": [
                {"name": "fake-job-container1", "image": "fake-job-image1"},
                {"name": "fake-job-container2", "image": "fake-job-image2"}]}},
            "selector": {"matchLabels": {"job-label": "job-label-value"}},
        });
        let j = job("job1", 0, templated.clone(), json!({"succeeded": 1}));
        assert_eq!(
            wide_cells(&print_job(&j, &CLOCK)),
            json!([
                "job1",
                "Running",
                "1/2",
                "",
                "0s",
                "fake-job-container1,fake-job-container2",
                "fake-job-image1,fake-job-image2",
                "job-label=job-label-value"
            ])
        );
        let j = job("job2", TEN_YEARS, json!({}), json!({"succeeded": 0}));
        assert_eq!(
            cells(&print_job(&j, &CLOCK), 5),
            json!(["job2", "Running", "0/1", "", "10y"])
        );
        // Duration from start to completion; start and completion in the future of creation.
        let j = job(
            "job3",
            TEN_YEARS,
            json!({}),
            json!({"startTime": ago(-60), "completionTime": ago(-31 * 60)}),
        );
        assert_eq!(
            cells(&print_job(&j, &CLOCK), 5),
            json!(["job3", "Running", "0/1", "30m", "10y"])
        );
        let j = job(
            "job4",
            TEN_YEARS,
            json!({}),
            json!({"startTime": ago(20 * 60)}),
        );
        assert_eq!(
            cells(&print_job(&j, &CLOCK), 5),
            json!(["job4", "Running", "0/1", "20m", "10y"])
        );
        for (name, condition, status) in [
            ("job5", "Complete", "Complete"),
            ("job6", "Failed", "Failed"),
            ("job7", "Suspended", "Suspended"),
            ("job8", "FailureTarget", "FailureTarget"),
        ] {
            let j = job(
                name,
                0,
                json!({}),
                json!({"conditions": [{"type": condition, "status": "True"}]}),
            );
            assert_eq!(
                cells(&print_job(&j, &CLOCK), 5),
                json!([name, status, "0/1", "", "0s"])
            );
        }
        let mut j = job("job9", 0, json!({}), json!({}));
        j["metadata"]["deletionTimestamp"] = json!(ago(0));
        assert_eq!(
            cells(&print_job(&j, &CLOCK), 5),
            json!(["job9", "Terminating", "0/1", "", "0s"])
        );
        let j = job(
            "job2",
            0,
            templated,
            json!({"succeeded": 2, "startTime": ago(20 * 60)}),
        );
        assert_eq!(
            cells(&print_job(&j, &CLOCK), 5),
            json!(["job2", "Running", "2/2", "20m", "0s"])
        );
        let j = job("par", 0, json!({"parallelism": 3}), json!({"succeeded": 1}));
        assert_eq!(cells(&print_job(&j, &CLOCK), 3)[2], "1/1 of 3");
        let j = job(
            "late",
            0,
            json!({}),
            json!({"conditions": [{"type": "Complete", "status": "False"}, {"type": "Complete", "status": "True"}]}),
        );
        assert_eq!(
            cells(&print_job(&j, &CLOCK), 2)[1],
            "Running",
            "the first condition of a type decides"
        );
    }

    fn cron_job(name: &str, created: i64, spec: Value, last: Option<i64>) -> Value {
        let status = match last {
            Some(s) => json!({"lastScheduleTime": ago(s)}),
            None => json!({}),
        };
        json!({"metadata": {"name": name, "creationTimestamp": ago(created)}, "spec": spec, "status": status})
    }

    #[test]
    fn cron_jobs_show_schedule_timezone_suspend_active_and_last_schedule() {
        let spec = |tz: Option<&str>| {
            let mut s = json!({"schedule": "0/5 * * * ?", "suspend": false, "jobTemplate": {"spec": {
                "completions": 2,
                "template": {"spec": {"containers": [
                    {"name": "fake-job-container1", "image": "fake-job-image1"},
                    {"name": "fake-job-container2", "image": "fake-job-image2"}]}},
                "selector": {"matchLabels": {"a": "b"}}}}});
            if let Some(tz) = tz {
                s["timeZone"] = json!(tz);
            }
            s
        };
        let cj = cron_job("cronjob1", 0, spec(None), Some(0));
        assert_eq!(
            wide_cells(&print_cron_job(&cj, &CLOCK)),
            json!([
                "cronjob1",
                "0/5 * * * ?",
                "<none>",
                "False",
                0,
                "0s",
                "0s",
                "fake-job-container1,fake-job-container2",
                "fake-job-image1,fake-job-image2",
                "a=b"
            ])
        );
        let cj = cron_job("cronjob1", 0, spec(Some("LOCAL")), Some(0));
        assert_eq!(
            cells(&print_cron_job(&cj, &CLOCK), 7),
            json!(["cronjob1", "0/5 * * * ?", "LOCAL", "False", 0, "0s", "0s"])
        );
        let cj = cron_job(
            "cronjob2",
            300,
            json!({"schedule": "0/5 * * * ?", "suspend": false}),
            Some(30),
        );
        assert_eq!(
            cells(&print_cron_job(&cj, &CLOCK), 7),
            json!(["cronjob2", "0/5 * * * ?", "<none>", "False", 0, "30s", "5m"])
        );
        let cj = cron_job(
            "cronjob3",
            300,
            json!({"schedule": "0/5 * * * ?", "suspend": false}),
            None,
        );
        assert_eq!(
            cells(&print_cron_job(&cj, &CLOCK), 7),
            json!([
                "cronjob3",
                "0/5 * * * ?",
                "<none>",
                "False",
                0,
                "<none>",
                "5m"
            ])
        );
        let mut active = cron_job(
            "busy",
            0,
            json!({"schedule": "* * * * *", "suspend": true}),
            None,
        );
        active["status"]["active"] = json!([{"name": "a"}, {"name": "b"}]);
        let c = cells(&print_cron_job(&active, &CLOCK), 5);
        assert_eq!((&c[3], &c[4]), (&json!("True"), &json!(2)));
    }
}
