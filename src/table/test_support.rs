//! Helpers of the table tests: a fixed clock and cells as JSON.

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::format::Clock;
use super::printer::Printed;

/// 2024-06-01T12:00:00Z.
pub(super) const NOW: OffsetDateTime = match OffsetDateTime::from_unix_timestamp(1_717_243_200) {
    Ok(t) => t,
    Err(_) => panic!("a valid timestamp"),
};
pub(super) const CLOCK: Clock = Clock::at(NOW);

/// An RFC 3339 timestamp `secs` seconds before [`NOW`].
pub(super) fn ago(secs: i64) -> String {
    (NOW - time::Duration::seconds(secs))
        .format(&Rfc3339)
        .expect("formats")
}

/// The first `n` cells as a JSON array (the columns kubectl shows
/// without `-o wide`, for printers whose wide columns come last).
pub(super) fn cells(printed: &Printed, n: usize) -> Value {
    Value::Array(printed.cells.iter().take(n).map(|c| c.to_value()).collect())
}

/// Every cell as a JSON array.
pub(super) fn wide_cells(printed: &Printed) -> Value {
    cells(printed, usize::MAX)
}
