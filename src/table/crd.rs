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
