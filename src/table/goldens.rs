//! kubefan's tables against kube-apiserver's own, recorded from a real one.
//!
//! `tests/goldens/recorded/` holds, per resource, the `Table` a real
//! kube-apiserver (the version is in each file) answered for the fixtures in
//! `tests/goldens/fixtures/`, and the events of a table watch of them;
//! `conformance/goldens/record.py` made them (README, "Recorded tables").
//! Each row carries its object (`includeObject=Object`), so kubefan prints
//! the very objects the server printed, and each answer carries the second
//! the server printed it in: kubefan's [`Clock`] is pinned to that second,
//! so ages and "ago" cells compare exactly (both sides truncate to whole
//! seconds, and the object times are whole seconds).
//!
//! The comparison goes through [`TableView`], the same encoder the
//! Kubernetes face answers with, and compares the whole `Table`: its
//! columns (name, type, format, description, priority), then each row's
//! cells by column, its conditions and its object.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde_json::Value;
use time::OffsetDateTime;

use super::{Clock, IncludeObject, ListMeta, MetaVersion, Printers, Row, TableView};

fn recorded_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/recorded")
}

/// Every recording, by file name.
fn goldens() -> Vec<(String, Value)> {
    let mut files: Vec<_> = std::fs::read_dir(recorded_dir())
        .expect("tests/goldens/recorded exists")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("a readable recording");
            let name = path
                .file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            let golden = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, golden)
        })
        .collect()
}

fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The view the Kubernetes face would use for this resource.
fn view_of(golden: &Value) -> TableView {
    let printers = Printers::new();
    if let Some(crd) = golden.get("crd").filter(|c| c.is_object()) {
        printers.apply_crd(crd);
    }
    let printer = printers.printer(
        str_of(golden, "group"),
        str_of(golden, "version"),
        str_of(golden, "resource"),
    );
    TableView::new(printer, MetaVersion::V1, IncludeObject::Object)
}

/// kubefan's clock, pinned to the second an answer was printed in.
fn clock_of(recording: &Value) -> Clock {
    let at = recording["at"].as_i64().expect("a recording's `at`");
    Clock::at(OffsetDateTime::from_unix_timestamp(at).expect("a valid `at`"))
}

fn row_of(view: &TableView, recorded_row: &Value, clock: &Clock) -> Row {
    let object = &recorded_row["object"];
    let json = serde_json::to_vec(object).expect("an object encodes");
    view.row(object, &json, clock)
}

/// `value[key]` as a slice (empty when absent or not an array).
fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value[key].as_array().map_or(&[], Vec::as_slice)
}

/// Appends a line to `out` if the two have different lengths.
fn compare_len(out: &mut String, what: &str, noun: &str, theirs: &[Value], ours: &[Value]) {
    if theirs.len() != ours.len() {
        let (a, b) = (theirs.len(), ours.len());
        let _ = writeln!(out, "{what}: {a} {noun} != {b} {noun}");
    }
}

/// Appends to `out` every way `ours` differs from `theirs` (two `Table`s).
fn compare_tables(what: &str, theirs: &Value, ours: &Value, out: &mut String) {
    for key in ["kind", "apiVersion", "metadata"] {
        if theirs[key] != ours[key] {
            let _ = writeln!(out, "{what}: {key} {} != {}", theirs[key], ours[key]);
        }
    }
    let present = |t: &Value| {
        if t["columnDefinitions"].is_null() {
            "null"
        } else {
            "present"
        }
    };
    if present(theirs) != present(ours) {
        let _ = writeln!(
            out,
            "{what}: columnDefinitions {} != {}",
            present(theirs),
            present(ours)
        );
    }
    let (their_columns, our_columns) = (
        array(theirs, "columnDefinitions"),
        array(ours, "columnDefinitions"),
    );
    compare_len(out, what, "columns", their_columns, our_columns);
    for (i, (their, our)) in their_columns.iter().zip(our_columns).enumerate() {
        for field in ["name", "type", "format", "description", "priority"] {
            if their[field] != our[field] {
                let _ = writeln!(
                    out,
                    "{what}: column {i} ({}) {field}:\n    kube-apiserver {}\n    kubefan        {}",
                    their["name"], their[field], our[field]
                );
            }
        }
    }
    let (their_rows, our_rows) = (array(theirs, "rows"), array(ours, "rows"));
    compare_len(out, what, "rows", their_rows, our_rows);
    for (their, our) in their_rows.iter().zip(our_rows) {
        let name = their["object"]["metadata"]["name"].as_str().unwrap_or("?");
        let (their_cells, our_cells) = (array(their, "cells"), array(our, "cells"));
        compare_len(
            out,
            &format!("{what}: {name}"),
            "cells",
            their_cells,
            our_cells,
        );
        for (i, (their_cell, our_cell)) in their_cells.iter().zip(our_cells).enumerate() {
            if their_cell != our_cell {
                let column = their_columns.get(i).map_or(&Value::Null, |c| &c["name"]);
                let _ = writeln!(
                    out,
                    "{what}: {name}: {column}: kube-apiserver {their_cell}, kubefan {our_cell}"
                );
            }
        }
        for key in ["conditions", "object"] {
            if their[key] != our[key] {
                let _ = writeln!(out, "{what}: {name}: {key} {} != {}", their[key], our[key]);
            }
        }
    }
}

/// The list: every row printed at the recording's second, as one `Table`.
fn compare_list(file: &str, golden: &Value, out: &mut String) {
    let view = view_of(golden);
    let recording = &golden["list"];
    let theirs = &recording["table"];
    let clock = clock_of(recording);
    let rows: Vec<Row> = theirs["rows"]
        .as_array()
        .expect("recorded rows")
        .iter()
        .map(|row| row_of(&view, row, &clock))
        .collect();
    let meta = ListMeta {
        resource_version: str_of(&theirs["metadata"], "resourceVersion"),
        ..ListMeta::default()
    };
    let ours: Value = serde_json::from_slice(&view.list(&meta, &rows)).expect("kubefan's JSON");
    compare_tables(&format!("{file} list"), theirs, &ours, out);
}

/// The watch: each event's one-row `Table`, column definitions on the first
/// event only.
fn compare_watch(file: &str, golden: &Value, out: &mut String) {
    let view = view_of(golden);
    let recording = &golden["watch"];
    let clock = clock_of(recording);
    for (i, event) in recording["events"]
        .as_array()
        .expect("recorded events")
        .iter()
        .enumerate()
    {
        let theirs = &event["object"];
        let [recorded_row] = theirs["rows"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
        else {
            let _ = writeln!(out, "{file} watch event {i}: not one row");
            continue;
        };
        let row = row_of(&view, recorded_row, &clock);
        let ours: Value =
            serde_json::from_slice(&view.single(&row, i == 0)).expect("kubefan's JSON");
        compare_tables(
            &format!("{file} watch event {i} ({})", event["type"]),
            theirs,
            &ours,
            out,
        );
    }
}

#[test]
fn kubefans_tables_equal_the_tables_a_real_kube_apiserver_printed() {
    let goldens = goldens();
    // Every printer kind has a recording (and the default convertor, and CRDs).
    assert!(
        goldens.len() >= 33,
        "{} recordings in {:?}",
        goldens.len(),
        recorded_dir()
    );
    let mut out = String::new();
    let mut rows = 0;
    for (file, golden) in &goldens {
        assert!(
            str_of(golden, "server").starts_with("v1."),
            "{file}: no server version"
        );
        rows += golden["list"]["table"]["rows"]
            .as_array()
            .map_or(0, Vec::len);
        compare_list(file, golden, &mut out);
        compare_watch(file, golden, &mut out);
    }
    assert!(rows >= 80, "only {rows} recorded rows");
    assert!(
        out.is_empty(),
        "kubefan's tables differ from kube-apiserver's:\n{out}"
    );
}

#[test]
fn a_changed_cell_is_found() {
    // The comparison itself can fail: one cell changed in a copy of a
    // recording is reported by its row and column.
    let (file, mut golden) = goldens()
        .into_iter()
        .find(|(file, _)| file == "core.pods.json")
        .expect("the pods recording");
    let rows = golden["list"]["table"]["rows"]
        .as_array_mut()
        .expect("rows");
    let cell = &mut rows[0]["cells"][2];
    *cell = Value::String("Imagined".into());
    let mut out = String::new();
    compare_list(&file, &golden, &mut out);
    assert!(
        out.contains("\"Status\": kube-apiserver \"Imagined\""),
        "{out}"
    );
}
