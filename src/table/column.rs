//! Column definitions (`metav1.TableColumnDefinition`).
//!
//! kube-apiserver always builds tables "wide" (kubernetes
//! `pkg/printers/storage/storage.go`, `TableConvertor.ConvertToTable`:
//! `GenerateOptions{Wide: true}`): every column is sent, and `priority: 1`
//! marks the ones kubectl shows only with `-o wide`.

use std::borrow::Cow;

use super::cell::write_json_string;
use super::swagger;

/// One column of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: Cow<'static, str>,
    /// `string`, `integer`, `number`, `boolean` or `date` (OpenAPI types).
    pub kind: Cow<'static, str>,
    /// `name` for the column that holds the object's name; often empty.
    pub format: Cow<'static, str>,
    pub description: Cow<'static, str>,
    /// 0: always shown; above 0: shown by `kubectl get -o wide`.
    pub priority: i32,
}

impl Column {
    pub(super) const fn new(
        name: &'static str,
        kind: &'static str,
        description: &'static str,
    ) -> Column {
        Column::full(name, kind, "", description, 0)
    }

    /// A `-o wide` column (priority 1).
    pub(super) const fn wide(
        name: &'static str,
        kind: &'static str,
        description: &'static str,
    ) -> Column {
        Column::full(name, kind, "", description, 1)
    }

    pub(super) const fn full(
        name: &'static str,
        kind: &'static str,
        format: &'static str,
        description: &'static str,
        priority: i32,
    ) -> Column {
        Column {
            name: Cow::Borrowed(name),
            kind: Cow::Borrowed(kind),
            format: Cow::Borrowed(format),
            description: Cow::Borrowed(description),
            priority,
        }
    }

    /// Appends the column definition as JSON, fields in Go's order.
    pub(super) fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"name\":");
        write_json_string(&self.name, out);
        out.extend_from_slice(b",\"type\":");
        write_json_string(&self.kind, out);
        out.extend_from_slice(b",\"format\":");
        write_json_string(&self.format, out);
        out.extend_from_slice(b",\"description\":");
        write_json_string(&self.description, out);
        out.extend_from_slice(b",\"priority\":");
        out.extend_from_slice(self.priority.to_string().as_bytes());
        out.push(b'}');
    }
}

/// `columnDefinitions` as a JSON array.
pub(super) fn columns_json(columns: &[Column]) -> Vec<u8> {
    let mut out = Vec::with_capacity(columns.len() * 200);
    out.push(b'[');
    for (i, c) in columns.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        c.write_json(&mut out);
    }
    out.push(b']');
    out
}

// Columns most printers share.

/// `{Name: "Name", Type: "string", Format: "name", Description: ObjectMeta name}`.
pub(super) const NAME: Column =
    Column::full("Name", "string", "name", swagger::OBJECT_META_NAME, 0);
/// `{Name: "Age", Type: "string", Description: ObjectMeta creationTimestamp}`.
pub(super) const AGE: Column =
    Column::new("Age", "string", swagger::OBJECT_META_CREATION_TIMESTAMP);
pub(super) const CONTAINERS: Column = Column::wide(
    "Containers",
    "string",
    "Names of each container in the template.",
);
pub(super) const IMAGES: Column = Column::wide(
    "Images",
    "string",
    "Images referenced by each container in the template.",
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_definitions_encode_every_field() {
        let json: serde_json::Value =
            serde_json::from_slice(&columns_json(&[NAME, IMAGES])).expect("columns encode as JSON");
        assert_eq!(json[0]["name"], "Name");
        assert_eq!(json[0]["format"], "name");
        assert_eq!(json[0]["priority"], 0);
        assert_eq!(json[1]["type"], "string");
        assert_eq!(json[1]["format"], "");
        assert_eq!(json[1]["priority"], 1);
    }
}
