//! Tolerant reads of an object's JSON, as the printers need them.
//!
//! kube-apiserver prints typed objects; kubefan holds JSON. A field that is
//! missing, `null` or of the wrong type reads here as the Go zero value of
//! its typed field (`""`, `0`, `false`, an empty list, a nil pointer), so a
//! malformed field gives the printer's fallback for an unset field and
//! never a failure.

use serde_json::{Map, Value};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The value at `path`, if every step is an object holding the next key.
pub(super) fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, key| v.as_object()?.get(*key))
}

/// A string field; `""` when absent or not a string.
pub(super) fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    at(v, path).and_then(Value::as_str).unwrap_or("")
}

/// A string pointer field: `None` when absent or not a string.
pub(super) fn opt_str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path).and_then(Value::as_str)
}

/// An integer field; 0 when absent or not an integer.
pub(super) fn int_at(v: &Value, path: &[&str]) -> i64 {
    at(v, path).and_then(Value::as_i64).unwrap_or(0)
}

/// An integer pointer field: `None` when absent or not an integer.
pub(super) fn opt_int_at(v: &Value, path: &[&str]) -> Option<i64> {
    at(v, path).and_then(Value::as_i64)
}

/// A boolean field; false when absent or not a boolean.
pub(super) fn bool_at(v: &Value, path: &[&str]) -> bool {
    at(v, path).and_then(Value::as_bool).unwrap_or(false)
}

/// A boolean pointer field: `None` when absent or not a boolean.
pub(super) fn opt_bool_at(v: &Value, path: &[&str]) -> Option<bool> {
    at(v, path).and_then(Value::as_bool)
}

/// A list field; empty when absent or not a list.
pub(super) fn list_at<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    at(v, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// A map or struct pointer field: `None` (Go's nil) unless it is an object.
pub(super) fn obj_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Map<String, Value>> {
    at(v, path).and_then(Value::as_object)
}

/// The number of entries of a map field (0 when absent or not a map).
pub(super) fn map_len(v: &Value, path: &[&str]) -> usize {
    obj_at(v, path).map_or(0, Map::len)
}

/// A `metav1.Time` or `metav1.MicroTime` field (RFC 3339). `None` is Go's
/// zero time: absent, `null`, or not a timestamp.
pub(super) fn time_at(v: &Value, path: &[&str]) -> Option<OffsetDateTime> {
    opt_str_at(v, path).and_then(parse_time)
}

/// Parses an RFC 3339 timestamp as `metav1.Time` does.
pub(super) fn parse_time(s: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(s, &Rfc3339).ok()
}

/// A string-to-string map field as sorted pairs, skipping non-string values.
pub(super) fn string_map<'a>(v: &'a Value, path: &[&str]) -> Vec<(&'a str, &'a str)> {
    obj_at(v, path).map_or_else(Vec::new, |m| {
        m.iter()
            .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn wrong_types_read_as_go_zero_values() {
        let v = json!({"a": {"s": 5, "n": "x", "b": "yes", "l": {}, "m": []}});
        assert_eq!(str_at(&v, &["a", "s"]), "");
        assert_eq!(int_at(&v, &["a", "n"]), 0);
        assert!(!bool_at(&v, &["a", "b"]));
        assert!(list_at(&v, &["a", "l"]).is_empty());
        assert!(obj_at(&v, &["a", "m"]).is_none());
        assert!(at(&v, &["a", "s", "deeper"]).is_none());
    }

    #[test]
    fn timestamps_parse_with_and_without_fractions() {
        let v = json!({"t": "2024-01-02T03:04:05Z", "m": "2024-01-02T03:04:05.123456Z", "bad": "yesterday"});
        assert_eq!(time_at(&v, &["t"]).unwrap().unix_timestamp(), 1704164645);
        assert_eq!(time_at(&v, &["m"]).unwrap().unix_timestamp(), 1704164645);
        assert!(time_at(&v, &["bad"]).is_none());
        assert!(time_at(&v, &["missing"]).is_none());
    }
}
