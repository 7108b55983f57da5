//! The bytes of a `Table` (`meta.k8s.io/v1` or `v1beta1`), of its rows,
//! and of `PartialObjectMetadata(List)`.
//!
//! A row is encoded once per object version and view ([`TableView::row`])
//! and then only spliced: into a list page ([`TableView::list`]), or into
//! the one-row table a watch event carries ([`TableView::single`]).
//!
//! What kube-apiserver sends, and kubefan with it:
//! - a list: `{"kind":"Table","apiVersion":…,"metadata":{resourceVersion,
//!   continue, remainingItemCount},"columnDefinitions":[…],"rows":[…]}`
//!   with every column, `-o wide` ones included (priority 1);
//! - a watch event: `{"type":…,"object":<Table with one row>}`, whose
//!   `metadata.resourceVersion` is the object's; only the first event of a
//!   stream carries `columnDefinitions`, later ones `null`
//!   (apiserver `handlers/response.go`, `watchEmbeddedEncoder.doEncode`
//!   sets `NoHeaders` after the first object). `ERROR` events keep their
//!   `Status` unconverted.
//! - a row: `{"cells":[…],"conditions":[…]?,"object":…}` where `object` is
//!   `PartialObjectMetadata` (`includeObject=Metadata`, the default), the
//!   object itself (`Object`) or `null` (`None`); a bookmark carrying
//!   `k8s.io/initial-events-end` always gets its metadata unless `Object`
//!   was asked (`asTable`).
//!
//! # Ages and shared rows
//! Many cells depend on the time they are printed at (AGE, RESTARTS' "(5m
//! ago)", a job's DURATION, an event's LAST SEEN, CRD `date` columns).
//! kube-apiserver prints a LIST's rows at the time of the request, and a
//! watch event's row once, when the first watcher encodes the event, then
//! serves those cached bytes to every watcher with the same encoder
//! (`runtime.CacheableObject`, keyed by `watchEmbeddedEncoder.Identifier`,
//! which includes the table options): a watch row's AGE is its age when
//! the change happened. kubefan does the same: a watch event's row is
//! printed when the view encodes the event and shared, a list prints its
//! rows with the clock of the request.

use bytes::Bytes;
use serde_json::Value;

use super::cell::write_json_string;
use super::format::Clock;
use super::negotiate::{IncludeObject, MetaVersion};
use super::printer::Printer;
use super::read::str_at;

/// The annotation of the bookmark that ends a watch's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A list's `metadata`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListMeta<'a> {
    pub resource_version: &'a str,
    /// The `continue` token, when more pages follow.
    pub continue_token: Option<&'a str>,
    pub remaining_item_count: Option<u64>,
}

impl ListMeta<'_> {
    fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        let mut first = true;
        let mut sep = |out: &mut Vec<u8>| {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
        };
        if !self.resource_version.is_empty() {
            sep(out);
            out.extend_from_slice(b"\"resourceVersion\":");
            write_json_string(self.resource_version, out);
        }
        if let Some(token) = self.continue_token.filter(|t| !t.is_empty()) {
            sep(out);
            out.extend_from_slice(b"\"continue\":");
            write_json_string(token, out);
        }
        if let Some(n) = self.remaining_item_count {
            sep(out);
            out.extend_from_slice(b"\"remainingItemCount\":");
            out.extend_from_slice(n.to_string().as_bytes());
        }
        out.push(b'}');
    }
}

/// One row, encoded: shareable by every client of the same view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    json: Bytes,
    resource_version: Box<str>,
}

impl Row {
    /// `{"cells":[…],…}`.
    pub fn json(&self) -> &Bytes {
        &self.json
    }

    /// The object's `metadata.resourceVersion`.
    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// Bytes held (for byte-bounded caches).
    pub fn len(&self) -> usize {
        self.json.len() + self.resource_version.len()
    }

    pub fn is_empty(&self) -> bool {
        self.json.is_empty()
    }
}

/// A table request's view of a resource: how it prints, which `Table`
/// version, what each row's `object` holds. Rows of equal views are equal,
/// and views are equal when their [`TableView::key`]s are.
#[derive(Clone)]
pub struct TableView {
    printer: Printer,
    version: MetaVersion,
    include: IncludeObject,
}

impl std::fmt::Debug for TableView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.key())
    }
}

impl PartialEq for TableView {
    fn eq(&self, other: &TableView) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for TableView {}

impl std::hash::Hash for TableView {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

impl TableView {
    pub fn new(printer: Printer, version: MetaVersion, include: IncludeObject) -> TableView {
        TableView {
            printer,
            version,
            include,
        }
    }

    /// What decides the rows and tables this view prints: views are
    /// equal (one hub view) when these are.
    fn identity(&self) -> (&str, MetaVersion, IncludeObject) {
        (self.printer.id(), self.version, self.include)
    }

    /// Names this view: equal keys print equal rows and tables.
    pub fn key(&self) -> String {
        format!(
            "table|{}|{}|{:?}",
            self.printer.id(),
            self.version.api_version(),
            self.include
        )
    }

    pub fn printer(&self) -> &Printer {
        &self.printer
    }

    pub fn version(&self) -> MetaVersion {
        self.version
    }

    pub fn include(&self) -> IncludeObject {
        self.include
    }

    /// Prints `object` as a row at `clock`. `json` is the same object
    /// encoded (the hub's `Obj::json()`): `includeObject=Object` splices it
    /// as it is.
    pub fn row(&self, object: &Value, json: &[u8], clock: &Clock) -> Row {
        let printed = self.printer.print(object, clock);
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"{\"cells\":[");
        for (i, cell) in printed.cells.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            cell.write_json(&mut out);
        }
        out.push(b']');
        if let Some(c) = printed.completed {
            out.extend_from_slice(
                b",\"conditions\":[{\"type\":\"Completed\",\"status\":\"True\",\"reason\":",
            );
            write_json_string(c.reason, &mut out);
            out.extend_from_slice(b",\"message\":");
            write_json_string(c.message, &mut out);
            out.extend_from_slice(b"}]");
        }
        out.extend_from_slice(b",\"object\":");
        let initial_events_end = object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(INITIAL_EVENTS_END))
            .and_then(Value::as_str)
            == Some("true");
        match self.include {
            IncludeObject::Object => out.extend_from_slice(json),
            IncludeObject::Metadata => write_partial(self.version, object, &mut out),
            IncludeObject::None if initial_events_end => {
                write_partial(self.version, object, &mut out)
            }
            IncludeObject::None => out.extend_from_slice(b"null"),
        }
        out.push(b'}');
        Row {
            json: out.into(),
            resource_version: str_at(object, &["metadata", "resourceVersion"]).into(),
        }
    }

    fn head(&self, out: &mut Vec<u8>, meta: &ListMeta, headers: bool) {
        out.extend_from_slice(b"{\"kind\":\"Table\",\"apiVersion\":\"");
        out.extend_from_slice(self.version.api_version().as_bytes());
        out.extend_from_slice(b"\",\"metadata\":");
        meta.write_json(out);
        out.extend_from_slice(b",\"columnDefinitions\":");
        if headers {
            out.extend_from_slice(self.printer.columns_json());
        } else {
            out.extend_from_slice(b"null");
        }
        out.extend_from_slice(b",\"rows\":[");
    }

    /// A list page as a `Table`, rows in the given order.
    pub fn list<'r>(&self, meta: &ListMeta, rows: impl IntoIterator<Item = &'r Row>) -> Bytes {
        let mut out = Vec::with_capacity(4096);
        self.head(&mut out, meta, true);
        for (i, row) in rows.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&row.json);
        }
        out.extend_from_slice(b"]}");
        out.into()
    }

    /// The one-row `Table` of a GET (`headers` true) or of a watch event
    /// (`headers` true only for the first event of a stream).
    pub fn single(&self, row: &Row, headers: bool) -> Bytes {
        let meta = ListMeta {
            resource_version: &row.resource_version,
            ..ListMeta::default()
        };
        let mut out = Vec::with_capacity(row.json.len() + 128);
        self.head(&mut out, &meta, headers);
        out.extend_from_slice(&row.json);
        out.extend_from_slice(b"]}");
        out.into()
    }
}

/// `{"kind":"PartialObjectMetadata","apiVersion":…,"metadata":…}`
/// (`meta.AsPartialObjectMetadata`: the whole `metadata`).
fn write_partial(version: MetaVersion, object: &Value, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"");
    out.extend_from_slice(version.api_version().as_bytes());
    out.extend_from_slice(b"\",\"metadata\":");
    match object.get("metadata").filter(|m| m.is_object()) {
        // Writing a Value to a Vec cannot fail.
        Some(m) => {
            let _ = serde_json::to_writer(&mut *out, m);
        }
        None => out.extend_from_slice(b"{}"),
    }
    out.push(b'}');
}

/// One object as `PartialObjectMetadata` (a GET or a watch event's object).
pub fn partial_object(version: MetaVersion, object: &Value) -> Bytes {
    let mut out = Vec::with_capacity(512);
    write_partial(version, object, &mut out);
    out.into()
}

/// A list page as `PartialObjectMetadataList`.
pub fn partial_list<'o>(
    version: MetaVersion,
    meta: &ListMeta,
    objects: impl IntoIterator<Item = &'o Value>,
) -> Bytes {
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(b"{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"");
    out.extend_from_slice(version.api_version().as_bytes());
    out.extend_from_slice(b"\",\"metadata\":");
    meta.write_json(&mut out);
    out.extend_from_slice(b",\"items\":[");
    for (i, object) in objects.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_partial(version, object, &mut out);
    }
    out.extend_from_slice(b"]}");
    out.into()
}
