//! CRD printers: `additionalPrinterColumns` evaluated as
//! apiextensions-apiserver does (`pkg/registry/customresource/tableconvertor`,
//! `New` and `ConvertToTable`; `pkg/apiserver/helpers.go`,
//! `serveDefaultColumnsIfEmpty`).
//!
//! The columns are `Name` then the CRD's own, or `Age` (type `date`, path
//! `.metadata.creationTimestamp`) when it defines none. A cell is the first
//! result of the column's JSONPath (missing keys allowed): `string` columns
//! print it as text, `integer`, `number` and `boolean` columns keep JSON
//! values of their type (an `integer` column truncates a float), `date`
//! columns show the age of an RFC 3339 timestamp (`<invalid>` if it is
//! not one); anything else, or no result, is null.
//!
//! One deliberate difference: upstream drops a column whose JSONPath does
//! not parse, and every column after it (its CRD validation refuses such
//! paths, so only a CRD stored before that validation has one). kubefan
//! keeps the column with empty cells, logs the path once per CRD change,
//! and never fails the list.

use serde_json::Value;

use super::cell::Cell;
use super::column::{Column, NAME};
use super::format::Clock;
use super::jsonpath::{JsonPath, print_value};
use super::printer::Printed;
use super::read::{list_at, opt_int_at, opt_str_at, parse_time, str_at};
use super::swagger;

/// The `(spec.group, spec.names.plural)` a CRD defines.
pub(super) fn names(crd: &Value) -> Option<(String, String)> {
    let group = str_at(crd, &["spec", "group"]);
    let plural = str_at(crd, &["spec", "names", "plural"]);
    (!group.is_empty() && !plural.is_empty()).then(|| (group.to_string(), plural.to_string()))
}

/// The names of the CRD's versions.
pub(super) fn served_versions(crd: &Value) -> impl Iterator<Item = &str> {
    list_at(crd, &["spec", "versions"])
        .iter()
        .map(|v| str_at(v, &["name"]))
        .filter(|v| !v.is_empty())
}

struct CustomColumn {
    /// `None` when the JSONPath did not parse: the cells stay empty.
    path: Option<JsonPath>,
    kind: String,
}

/// One CRD version's printer.
pub(super) struct CustomColumns {
    columns: Vec<Column>,
    custom: Vec<CustomColumn>,
}

impl CustomColumns {
    pub(super) fn from_crd(crd: &Value, version: &str) -> Option<CustomColumns> {
        let spec = list_at(crd, &["spec", "versions"])
            .iter()
            .find(|v| str_at(v, &["name"]) == version)?;
        let declared = list_at(spec, &["additionalPrinterColumns"]);
        let age = serde_json::json!({
            "name": "Age",
            "type": "date",
            "description": swagger::OBJECT_META_CREATION_TIMESTAMP,
            "jsonPath": ".metadata.creationTimestamp",
        });
        let defined: Vec<&Value> = if declared.is_empty() {
            vec![&age]
        } else {
            declared.iter().collect()
        };
        let mut columns = vec![NAME];
        let mut custom = Vec::with_capacity(defined.len());
        for col in defined {
            let name = str_at(col, &["name"]).to_string();
            let kind = str_at(col, &["type"]).to_string();
            let json_path = str_at(col, &["jsonPath"]);
            let path = match JsonPath::parse(&format!("{{{json_path}}}")) {
                Ok(path) => Some(path),
                Err(e) => {
                    tracing::warn!(
                        crd = str_at(crd, &["metadata", "name"]),
                        version,
                        column = %name,
                        json_path,
                        error = %e,
                        "CRD printer column has a JSONPath kubefan cannot parse; its cells stay empty"
                    );
                    None
                }
            };
            let description = match opt_str_at(col, &["description"]) {
                Some(d) if !d.is_empty() => d.to_string(),
                _ => format!("Custom resource definition column (in JSONPath format): {json_path}"),
            };
            columns.push(Column {
                name: name.into(),
                kind: kind.clone().into(),
                format: str_at(col, &["format"]).to_string().into(),
                description: description.into(),
                priority: opt_int_at(col, &["priority"])
                    .and_then(|p| i32::try_from(p).ok())
                    .unwrap_or(0),
            });
            custom.push(CustomColumn { path, kind });
        }
        Some(CustomColumns { columns, custom })
    }

    pub(super) fn columns(&self) -> Vec<Column> {
        self.columns.clone()
    }

    pub(super) fn print(&self, obj: &Value, clock: &Clock) -> Printed {
        let mut cells = Vec::with_capacity(1 + self.custom.len());
        cells.push(Cell::from(str_at(obj, &["metadata", "name"])));
        for col in &self.custom {
            let value = col.path.as_ref().and_then(|p| p.first(obj));
            cells.push(match value {
                None => Cell::Null,
                Some(v) if col.kind == "string" => Cell::Str(print_value(&v)),
                Some(v) => cell_for_json_value(&col.kind, &v, clock),
            });
        }
        Printed::cells(cells)
    }
}

/// `cellForJSONValue`.
fn cell_for_json_value(kind: &str, value: &Value, clock: &Clock) -> Cell {
    match (kind, value) {
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => Cell::Int(i),
            None => Cell::Int(n.as_f64().unwrap_or(0.0) as i64),
        },
        ("number", Value::Number(n)) => Cell::Float(n.as_f64().unwrap_or(0.0)),
        ("boolean", Value::Bool(b)) => Cell::Bool(*b),
        ("date", Value::String(s)) => {
            // metav1.Time.UnmarshalQueryParameter: "" and "null" are the zero time.
            if s.is_empty() || s == "null" {
                return Cell::from("<unknown>");
            }
            match parse_time(s) {
                Some(t) => Cell::Str(clock.since(Some(t))),
                None => Cell::from("<invalid>"),
            }
        }
        _ => Cell::Null,
    }
}

#[cfg(test)]
mod tests {
    //! Cases of apiextensions-apiserver `tableconvertor_test.go`
    //! (`Test_cellForJSONValue`, `Test_convertor_ConvertToTable`), through
    //! a CRD's JSON as the informer delivers it.

    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use serde_json::{Value, json};

    use super::super::printer::{Printer, Printers};
    use super::super::test_support::{CLOCK, ago, wide_cells};
    use super::*;

    fn crd(columns: Value) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "blahs.example.istio.io", "resourceVersion": "7"},
            "spec": {"group": "example.istio.io", "names": {"plural": "blahs", "kind": "Blah"},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                    "additionalPrinterColumns": columns}]},
        })
    }

    fn col(name: &str, kind: &str, path: &str) -> Value {
        json!({"name": name, "type": kind, "jsonPath": path})
    }

    fn blah() -> Value {
        json!({
            "apiVersion": "example.istio.io/v1alpha1", "kind": "Blah",
            "metadata": {"name": "blah", "creationTimestamp": ago(12 * 3600 + 30 * 60)},
            "spec": {"servers": [{"hosts": ["foo"]}, {"hosts": ["bar", "baz"]}], "replicas": 3,
                "ratio": 0.5, "paused": false, "since": ago(90), "meta": {"k": "<v>"}},
        })
    }

    #[test]
    fn string_columns_print_values_and_json_for_lists() {
        let p = Printer::for_crd(
            &crd(json!([
                col("valueOnly", "string", ".spec.servers[0].hosts[0]"),
                col("single1", "string", ".spec.servers[0].hosts"),
                col("single2", "string", ".spec.servers[1].hosts"),
                col("multi", "string", ".spec.servers[*].hosts"),
                col("number", "string", ".spec.replicas"),
                col("map", "string", ".spec.meta"),
            ])),
            "v1alpha1",
        )
        .unwrap();
        assert_eq!(
            wide_cells(&p.print(&blah(), &CLOCK)),
            json!([
                "blah",
                "foo",
                "[\"foo\"]",
                "[\"bar\",\"baz\"]",
                "[\"foo\"]",
                "3",
                "{\"k\":\"\\u003cv\\u003e\"}"
            ])
        );
    }

    #[test]
    fn typed_columns_keep_json_types_and_dates_show_ages() {
        let p = Printer::for_crd(
            &crd(json!([
                col("Replicas", "integer", ".spec.replicas"),
                col("RatioInt", "integer", ".spec.ratio"),
                col("Ratio", "number", ".spec.ratio"),
                col("ReplicasNum", "number", ".spec.replicas"),
                col("Paused", "boolean", ".spec.paused"),
                col("Since", "date", ".spec.since"),
                col("Wrong", "boolean", ".spec.replicas"),
                col("Missing", "string", ".status.phase"),
                col("Odd", "unknown", ".spec.replicas"),
            ])),
            "v1alpha1",
        )
        .unwrap();
        let cells = wide_cells(&p.print(&blah(), &CLOCK));
        assert_eq!(
            cells,
            json!(["blah", 3, 0, 0.5, 3, false, "90s", null, null, null])
        );
        assert!(p.print(&blah(), &CLOCK).cells[4] == super::super::cell::Cell::Float(3.0));
    }

    #[test]
    fn dates_follow_cell_for_json_value() {
        let at = |s: &str| cell_for_json_value("date", &json!(s), &CLOCK).to_value();
        assert_eq!(at(&ago(12 * 3600 + 30 * 60)), json!("12h"));
        assert_eq!(at(&ago(-(12 * 3600 + 30 * 60))), json!("<invalid>"));
        assert_eq!(at(""), json!("<unknown>"));
        assert_eq!(at("not a date"), json!("<invalid>"));
        assert_eq!(cell_for_json_value("date", &json!(42), &CLOCK), Cell::Null);
        assert_eq!(
            cell_for_json_value("integer", &json!(3.25), &CLOCK),
            Cell::Int(3)
        );
        assert_eq!(
            cell_for_json_value("integer", &json!("foo"), &CLOCK),
            Cell::Null
        );
        assert_eq!(
            cell_for_json_value("number", &json!(42), &CLOCK),
            Cell::Float(42.0)
        );
        assert_eq!(
            cell_for_json_value("boolean", &json!(1), &CLOCK),
            Cell::Null
        );
    }

    #[test]
    fn crds_without_columns_print_name_and_age() {
        let p = Printer::for_crd(&crd(json!([])), "v1alpha1").unwrap();
        let defs: Vec<(String, String)> = p
            .columns()
            .iter()
            .map(|c| (c.name.to_string(), c.kind.to_string()))
            .collect();
        assert_eq!(
            defs,
            [
                ("Name".into(), "string".into()),
                ("Age".into(), "date".into())
            ]
        );
        assert_eq!(
            wide_cells(&p.print(&blah(), &CLOCK)),
            json!(["blah", "12h"])
        );
        assert!(Printer::for_crd(&crd(json!([])), "v2").is_none());
    }

    #[test]
    fn column_definitions_carry_priority_format_and_default_descriptions() {
        let p = Printer::for_crd(
            &crd(json!([
                {"name": "Ready", "type": "string", "jsonPath": ".status.ready", "priority": 1, "format": "byte"},
                {"name": "Host", "type": "string", "jsonPath": ".spec.host", "description": "the host"},
            ])),
            "v1alpha1",
        )
        .unwrap();
        let c = p.columns();
        assert_eq!((c[1].priority, &*c[1].format), (1, "byte"));
        assert_eq!(
            c[1].description,
            "Custom resource definition column (in JSONPath format): .status.ready"
        );
        assert_eq!(c[2].description, "the host");
    }

    /// A writer collecting log output for one test.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_bad_jsonpath_gives_an_empty_column_and_one_log_line() {
        let logs = Captured::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let definition = crd(json!([
            col("Broken", "string", ".spec.servers[?(@.hosts"),
            col("Replicas", "integer", ".spec.replicas"),
        ]));
        let printers = Printers::new();
        tracing::subscriber::with_default(subscriber, || {
            printers.apply_crd(&definition);
            // The same CRD again (a resync): not recompiled, not logged again.
            printers.apply_crd(&definition);
            for _ in 0..3 {
                let p = printers.printer("example.istio.io", "v1alpha1", "blahs");
                let names: Vec<&str> = p.columns().iter().map(|c| &*c.name).collect();
                assert_eq!(names, ["Name", "Broken", "Replicas"]);
                assert_eq!(
                    wide_cells(&p.print(&blah(), &CLOCK)),
                    json!(["blah", null, 3])
                );
            }
        });
        let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains("Broken") && text.contains(".spec.servers[?(@.hosts"),
            "{text}"
        );
    }
}
