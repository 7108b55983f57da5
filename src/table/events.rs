//! The event printer, for `v1` events and `events.k8s.io/v1` events alike
//! (kubernetes `pkg/printers/internalversion/printers.go`, v1.36:
//! `printEvent`).
//!
//! kube-apiserver stores both as the internal core `Event` and prints that;
//! `events.k8s.io/v1` fields map onto it as kubernetes
//! `pkg/apis/events/v1/conversion.go` (`Convert_v1_Event_To_core_Event`)
//! maps them: `regarding` is the involved object, `note` the message,
//! `deprecatedSource`, `deprecatedFirstTimestamp`, `deprecatedLastTimestamp`
//! and `deprecatedCount` the old fields.

use serde_json::Value;

use super::cell::Cell;
use super::column::Column;
use super::format::Clock;
use super::printer::Printed;
use super::read::{int_at, obj_at, str_at, time_at};
use super::swagger;

pub(super) const COLUMNS: &[Column] = &[
    Column::new("Last Seen", "string", swagger::EVENT_LAST_TIMESTAMP),
    Column::new("Type", "string", swagger::EVENT_TYPE),
    Column::new("Reason", "string", swagger::EVENT_REASON),
    Column::new("Object", "string", swagger::EVENT_INVOLVED_OBJECT),
    Column::wide("Subobject", "string", swagger::OBJECT_REFERENCE_FIELD_PATH),
    Column::wide("Source", "string", swagger::EVENT_SOURCE),
    Column::new("Message", "string", swagger::EVENT_MESSAGE),
    Column::wide("First Seen", "string", swagger::EVENT_FIRST_TIMESTAMP),
    Column::wide("Count", "string", swagger::EVENT_COUNT),
    Column::full("Name", "string", "name", swagger::OBJECT_META_NAME, 1),
];

/// Where each internal `Event` field lives in one API version's JSON.
struct Fields {
    involved_object: &'static str,
    source: &'static str,
    reporting_controller: &'static str,
    first_timestamp: &'static str,
    last_timestamp: &'static str,
    count: &'static str,
    message: &'static str,
}

const CORE_V1: Fields = Fields {
    involved_object: "involvedObject",
    source: "source",
    reporting_controller: "reportingComponent",
    first_timestamp: "firstTimestamp",
    last_timestamp: "lastTimestamp",
    count: "count",
    message: "message",
};

const EVENTS_V1: Fields = Fields {
    involved_object: "regarding",
    source: "deprecatedSource",
    reporting_controller: "reportingController",
    first_timestamp: "deprecatedFirstTimestamp",
    last_timestamp: "deprecatedLastTimestamp",
    count: "deprecatedCount",
    message: "note",
};

pub(super) fn print_core(event: &Value, clock: &Clock) -> Printed {
    print(event, clock, &CORE_V1)
}

pub(super) fn print_events_k8s_io(event: &Value, clock: &Clock) -> Printed {
    print(event, clock, &EVENTS_V1)
}

fn first_non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() { b } else { a }
}

fn print(event: &Value, clock: &Clock, f: &Fields) -> Printed {
    let first_seen = match time_at(event, &[f.first_timestamp]) {
        Some(t) => clock.since(Some(t)),
        None => clock.since(time_at(event, &["eventTime"])),
    };
    let mut last_seen = match time_at(event, &[f.last_timestamp]) {
        Some(t) => clock.since(Some(t)),
        None => first_seen.clone(),
    };
    let mut count = int_at(event, &[f.count]);
    if obj_at(event, &["series"]).is_some() {
        last_seen = clock.since(time_at(event, &["series", "lastObservedTime"]));
        count = int_at(event, &["series", "count"]);
    } else if count == 0 {
        // Singleton events have no count in the new API.
        count = 1;
    }
    let kind = str_at(event, &[f.involved_object, "kind"]).to_lowercase();
    let target = match str_at(event, &[f.involved_object, "name"]) {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    // formatEventSource: the source, else the reporting controller/instance.
    let component = first_non_empty(
        str_at(event, &[f.source, "component"]),
        str_at(event, &[f.reporting_controller]),
    );
    let instance = first_non_empty(
        str_at(event, &[f.source, "host"]),
        str_at(event, &["reportingInstance"]),
    );
    let source = if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    };
    Printed::cells(vec![
        Cell::Str(last_seen),
        Cell::from(str_at(event, &["type"])),
        Cell::from(str_at(event, &["reason"])),
        Cell::Str(target),
        Cell::from(str_at(event, &[f.involved_object, "fieldPath"])),
        Cell::Str(source),
        Cell::from(str_at(event, &[f.message]).trim()),
        Cell::Str(first_seen),
        Cell::Int(count),
        Cell::from(str_at(event, &["metadata", "name"])),
    ])
}

#[cfg(test)]
mod tests {
    //! Golden rows ported from kubernetes
    //! `pkg/printers/internalversion/printers_test.go` (`TestPrintEvent`),
    //! for `v1` events and the same events as `events.k8s.io/v1` serves them.

    use serde_json::{Value, json};

    use super::super::test_support::{CLOCK, ago, cells, wide_cells};
    use super::*;

    const DAY: i64 = 24 * 3600;

    fn core(extra: Value) -> Value {
        let mut e = json!({
            "source": {"component": "kubelet", "host": "Node1"},
            "involvedObject": {"kind": "Deployment", "name": "Deployment Name", "fieldPath": "spec.containers{foo}"},
            "reason": "Event Reason",
            "message": "Message Data",
            "type": "Warning",
        });
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        e
    }

    /// The same event as `events.k8s.io/v1` serves it.
    fn as_events_k8s_io(core: &Value) -> Value {
        let mut e = json!({});
        for (from, to) in [
            ("involvedObject", "regarding"),
            ("message", "note"),
            ("source", "deprecatedSource"),
            ("firstTimestamp", "deprecatedFirstTimestamp"),
            ("lastTimestamp", "deprecatedLastTimestamp"),
            ("count", "deprecatedCount"),
            ("reportingComponent", "reportingController"),
            ("reportingInstance", "reportingInstance"),
            ("eventTime", "eventTime"),
            ("series", "series"),
            ("reason", "reason"),
            ("type", "type"),
            ("metadata", "metadata"),
        ] {
            if let Some(v) = core.get(from) {
                e[to] = v.clone();
            }
        }
        e
    }

    fn both(event: Value, want: Value) {
        assert_eq!(wide_cells(&print_core(&event, &CLOCK)), want, "v1");
        assert_eq!(
            wide_cells(&print_events_k8s_io(&as_events_k8s_io(&event), &CLOCK)),
            want,
            "events.k8s.io/v1"
        );
    }

    #[test]
    fn events_show_last_seen_type_reason_object_and_message() {
        let e = json!({
            "source": {"component": "kubelet"},
            "involvedObject": {"kind": "Pod", "name": "Pod Name", "fieldPath": "spec.containers{foo}"},
            "reason": "Event Reason", "message": "Message Data",
            "firstTimestamp": ago(3 * DAY), "lastTimestamp": ago(2 * DAY),
            "count": 6, "type": "Normal", "metadata": {"name": "event1"},
        });
        assert_eq!(
            cells(&print_core(&e, &CLOCK), 4),
            json!(["2d", "Normal", "Event Reason", "pod/Pod Name"])
        );
        assert_eq!(wide_cells(&print_core(&e, &CLOCK))[6], "Message Data");
        both(
            core(
                json!({"firstTimestamp": ago(3 * DAY), "lastTimestamp": ago(2 * DAY), "count": 6,
                "metadata": {"name": "event2"}}),
            ),
            json!([
                "2d",
                "Warning",
                "Event Reason",
                "deployment/Deployment Name",
                "spec.containers{foo}",
                "kubelet, Node1",
                "Message Data",
                "3d",
                6,
                "event2"
            ]),
        );
    }

    #[test]
    fn missing_timestamps_fall_back_to_event_time_and_first_seen() {
        both(
            core(
                json!({"eventTime": "2024-05-29T12:00:00.000000Z", "lastTimestamp": ago(3 * DAY), "count": 1,
                "metadata": {"name": "event3"}}),
            ),
            json!([
                "3d",
                "Warning",
                "Event Reason",
                "deployment/Deployment Name",
                "spec.containers{foo}",
                "kubelet, Node1",
                "Message Data",
                "3d",
                1,
                "event3"
            ]),
        );
        both(
            core(
                json!({"eventTime": "2024-05-29T12:00:00.000000Z", "firstTimestamp": ago(3 * DAY), "count": 1,
                "metadata": {"name": "event4"}}),
            ),
            json!([
                "3d",
                "Warning",
                "Event Reason",
                "deployment/Deployment Name",
                "spec.containers{foo}",
                "kubelet, Node1",
                "Message Data",
                "3d",
                1,
                "event4"
            ]),
        );
        both(
            core(
                json!({"eventTime": "2024-05-29T12:00:00.000000Z", "count": 1, "metadata": {"name": "event5"}}),
            ),
            json!([
                "3d",
                "Warning",
                "Event Reason",
                "deployment/Deployment Name",
                "spec.containers{foo}",
                "kubelet, Node1",
                "Message Data",
                "3d",
                1,
                "event5"
            ]),
        );
    }

    #[test]
    fn series_and_singletons_count_as_upstream() {
        both(
            core(
                json!({"series": {"count": 2, "lastObservedTime": "2024-05-30T12:00:00.000000Z"},
                "eventTime": "2024-05-29T12:00:00.000000Z", "metadata": {"name": "event6"}}),
            ),
            json!([
                "2d",
                "Warning",
                "Event Reason",
                "deployment/Deployment Name",
                "spec.containers{foo}",
                "kubelet, Node1",
                "Message Data",
                "3d",
                2,
                "event6"
            ]),
        );
        both(
            core(
                json!({"eventTime": "2024-05-29T12:00:00.000000Z", "metadata": {"name": "event7"}}),
            ),
            json!([
                "3d",
                "Warning",
                "Event Reason",
                "deployment/Deployment Name",
                "spec.containers{foo}",
                "kubelet, Node1",
                "Message Data",
                "3d",
                1,
                "event7"
            ]),
        );
    }

    #[test]
    fn the_reporting_controller_stands_in_for_an_empty_source() {
        let mut e = core(
            json!({"reportingComponent": "kubelet", "reportingInstance": "test",
            "firstTimestamp": ago(3 * DAY), "lastTimestamp": ago(2 * DAY), "count": 6,
            "metadata": {"name": "event2"}}),
        );
        e.as_object_mut().unwrap().remove("source");
        both(
            e,
            json!([
                "2d",
                "Warning",
                "Event Reason",
                "deployment/Deployment Name",
                "spec.containers{foo}",
                "kubelet, test",
                "Message Data",
                "3d",
                6,
                "event2"
            ]),
        );
        let kindless = json!({"involvedObject": {"kind": "Node"}, "message": "  padded  "});
        let c = wide_cells(&print_core(&kindless, &CLOCK));
        assert_eq!(
            (&c[3], &c[6], &c[0]),
            (&json!("node"), &json!("padded"), &json!("<unknown>"))
        );
    }
}
