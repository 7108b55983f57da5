//! The event printer, for `v1` events and `events.k8s.io/v1` events alike
//! (kubernetes `pkg/printers/internalversion/printers.go`, v1.33:
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
