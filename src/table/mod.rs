//! Server-side tables for the Kubernetes face: what `kubectl get` shows.
//!
//! kubectl asks for `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`
//! and prints the columns and cells the server computed; without them it
//! shows only NAME and AGE. This module owns everything about tables that
//! does not touch HTTP: negotiating the output ([`negotiate()`],
//! [`IncludeObject`]), the printers that turn an object's JSON into cells
//! ([`Printer`], [`Printers`]), and the bytes of a `Table`, its rows and
//! `PartialObjectMetadata(List)` ([`TableView`], [`partial_object`],
//! [`partial_list`]). Handlers decide when to call them; the hub's views
//! encode and share the rows.
//!
//! Facts are ported from Kubernetes and each file names its source:
//! printers from kubernetes `pkg/printers/internalversion/printers.go`
//! (v1.36) for pods, nodes, namespaces, services, endpoints,
//! endpointslices, deployments, replicasets, statefulsets, daemonsets,
//! jobs, cronjobs, configmaps, secrets, events (`v1` and
//! `events.k8s.io/v1`), ingresses, persistentvolumes,
//! persistentvolumeclaims and serviceaccounts, and also
//! replicationcontrollers, poddisruptionbudgets, role bindings,
//! storageclasses, priorityclasses, ingressclasses, networkpolicies and
//! leases; CRD columns from
//! apiextensions-apiserver's table convertor with client-go's JSONPath;
//! `Name`/`Created At` for anything else, as apiserver's default table
//! convertor. Cells are computed from JSON, never a typed decode: a
//! malformed field reads as unset and gets the printer's fallback.
//! `goldens` checks every printer, cell by cell, against the tables a real
//! kube-apiserver v1.36.2 printed for the fixtures in `tests/goldens/`.
//!
//! # Layout
//! - [`negotiate`](negotiate()): `Accept` and `includeObject`.
//! - `printer`: [`Printer`], [`Printers`] (built-in, CRD, default).
//! - `pod`, `core`, `apps`, `batch`, `network`, `events`, `cluster`:
//!   built-in printers.
//! - `crd`, `jsonpath`: `additionalPrinterColumns`.
//! - `encode`: [`TableView`], [`Row`], partial metadata.
//! - `format`, `cell`, `column`, `read`, `swagger`: how values are spelled.
//! - `goldens` (tests): the recorded tables of a real kube-apiserver.
//!
//! # Use
//! ```text
//! let n = table::negotiate(req.headers().get("Accept"))?;         // 406 on error
//! if let Output::Table(version) = n.output.check(is_list)? {
//!     let include = IncludeObject::parse(query.get("includeObject"))?; // 400 on error
//!     let view = TableView::new(printers.printer(group, version_of_resource, plural), version, include);
//!     let rows: Vec<Row> = objects.map(|o| view.row(&value, &o.json(), &Clock::new(SystemTime::now()))).collect();
//!     body = view.list(&ListMeta { resource_version, continue_token, remaining_item_count }, &rows);
//!     // watch: event object = view.single(&row, first_event_of_stream)
//! }
//! ```

mod apps;
mod batch;
mod cell;
mod cluster;
mod column;
mod core;
mod crd;
mod encode;
mod events;
mod format;
#[cfg(test)]
mod goldens;
mod jsonpath;
mod negotiate;
mod network;
mod pod;
mod printer;
mod read;
mod swagger;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

pub use cell::Cell;
pub use column::Column;
pub use encode::{ListMeta, Row, TableView, partial_list, partial_object};
pub use format::Clock;
pub use negotiate::{IncludeObject, MetaVersion, Negotiated, Output, negotiate};
pub use printer::{Completed, Printed, Printer, Printers};

/// A table request kubefan must refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// 406: no clause of `Accept` can be served, or the conversion does not
    /// fit the request.
    #[error("{0}")]
    NotAcceptable(String),
    /// 400: a bad `includeObject`.
    #[error("{0}")]
    BadRequest(String),
}

impl Error {
    /// The HTTP status of the `Status` answer.
    pub fn code(&self) -> u16 {
        match self {
            Error::NotAcceptable(_) => 406,
            Error::BadRequest(_) => 400,
        }
    }

    /// The `Status` reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::NotAcceptable(_) => "NotAcceptable",
            Error::BadRequest(_) => "BadRequest",
        }
    }
}
