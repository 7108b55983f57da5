//! Local RBAC: what each Kubernetes user may read, decided in-process from
//! the cluster's Roles, ClusterRoles, RoleBindings and ClusterRoleBindings
//! instead of one SubjectAccessReview per question, as Rancher's steve does
//! (`pkg/accesscontrol`: an index of the four kinds, an access set per user
//! and groups, cached).
//!
//! # What it owns
//! - [`Rbac`]: the index of the four RBAC kinds, fed by their informers
//!   ([`Rbac::apply`], [`Rbac::delete`], [`Rbac::replace`] on a relist), and
//!   the cache of access sets per (user, groups) ([`Rbac::access`],
//!   [`Rbac::hold`]).
//! - [`access::AccessSet`]: what one (user, groups) may `get`, `list` and
//!   `watch`: per (verb, API group, resource) every namespace, some
//!   namespaces, or single objects granted by `resourceNames`. Comparable.
//! - [`UserAccess`]: one (user, groups)'s access set kept current, shared
//!   by everyone holding it, with an [`Epoch`](crate::epoch::Epoch) that
//!   moves when the set changes.
//!
//! # What it leaves to others
//! No I/O and no HTTP. The informers that feed it, readiness (wait for
//! [`Rbac::synced`]), turning an access set into a stream's namespaces
//! (`hub::scope`), the answers to requests, and the SubjectAccessReview
//! fallback for clusters whose authorizers RBAC alone does not describe
//! belong to `auth` and `transport`.
//!
//! # Where the rules come from
//! Kubernetes' RBAC authorizer, followed exactly (kubernetes/kubernetes):
//! - Who a binding applies to, and which bindings count for a request:
//!   `appliesToUser` and `VisitRulesFor` in
//!   `pkg/registry/rbac/validation/rule.go`. Subjects match on `kind` and
//!   `name` only (their `apiGroup` is not compared); a ServiceAccount is the
//!   user `system:serviceaccount:NS:NAME`, its namespace defaulting to a
//!   RoleBinding's own, and matching nobody in a ClusterRoleBinding when
//!   empty. ClusterRoleBindings count for every request; RoleBindings only
//!   for requests in their namespace, so a collection across namespaces
//!   needs a ClusterRoleBinding, as kube-apiserver answers it.
//! - What a binding grants: `GetRoleReferenceRules` (same file): a `Role`
//!   in the binding's namespace (a ClusterRoleBinding's `Role` is never
//!   found), a `ClusterRole` by name, any other kind nothing. A binding to
//!   a role that does not exist grants nothing until the role appears.
//! - Whether a rule allows a request: `RuleAllows` in
//!   `plugin/pkg/auth/authorizer/rbac/rbac.go` and the matchers of
//!   `pkg/apis/rbac/v1/evaluation_helpers.go`: `*` in verbs, apiGroups and
//!   resources; `resource/subresource` and `*/subresource`; `resourceNames`
//!   match only requests that name the object (a `get`, or a `list`/`watch`
//!   with a `metadata.name` field selector, which
//!   `k8s.io/apiserver/pkg/endpoints/request/requestinfo.go` turns into a
//!   name). `nonResourceURLs` grant nothing to resource requests.
//! - Aggregated ClusterRoles: what `pkg/controller/clusterroleaggregation`
//!   converges to (see [`aggregation`]), added to the rules written in the
//!   object, so access follows a label change without waiting for the
//!   controller.
//!
//! # Invariants
//! - Less, never more: an object that does not parse is logged and grants
//!   nothing; it also takes away what its previous version granted.
//! - Every access set handed out or held equals evaluating the index as it
//!   is: the index and the cache change under one lock, and a change
//!   recomputes every held access set it may affect before the lock is
//!   released.
//! - A change recomputes each affected (user, groups) once, however many
//!   streams hold it, and only those whose user or groups appear in a
//!   changed binding, or in a binding of a role whose rules changed.

pub mod access;
pub mod aggregation;
mod cache;
pub mod identity;
mod index;
mod object;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;

use self::access::AccessSet;
use self::cache::{Cache, Refreshed};
pub use self::cache::{Refresh, UserAccess};
use self::identity::Identity;
use self::index::Index;
use self::object::ObjectKey;
use super::User;

/// The API group of the four kinds.
pub const GROUP: &str = "rbac.authorization.k8s.io";

/// The four RBAC kinds the index is fed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Role,
    RoleBinding,
    ClusterRole,
    ClusterRoleBinding,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::Role,
        Kind::RoleBinding,
        Kind::ClusterRole,
        Kind::ClusterRoleBinding,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Role => "Role",
            Kind::RoleBinding => "RoleBinding",
            Kind::ClusterRole => "ClusterRole",
            Kind::ClusterRoleBinding => "ClusterRoleBinding",
        }
    }

    /// The resource an informer watches for this kind (in [`GROUP`], `v1`).
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Role => "roles",
            Kind::RoleBinding => "rolebindings",
            Kind::ClusterRole => "clusterroles",
            Kind::ClusterRoleBinding => "clusterrolebindings",
        }
    }

    /// The kind an informer of `group`/`plural` feeds, if it is one of the
    /// four.
    pub fn for_resource(group: &str, plural: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|kind| group == GROUP && kind.plural() == plural)
    }

    pub fn namespaced(self) -> bool {
        matches!(self, Kind::Role | Kind::RoleBinding)
    }

    fn slot(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an RBAC object was ignored. Objects that do not parse are logged
/// where they arrive ([`Rbac::apply`], [`Rbac::replace`]) and never
/// returned to the informer: there is nothing it could do but log again.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no metadata.name")]
    NoName,
    #[error("no metadata.namespace (a {0} is namespaced)")]
    NoNamespace(Kind),
    #[error("not a {kind}: {source}")]
    Invalid {
        kind: Kind,
        source: serde_json::Error,
    },
}

/// What the index and the cache look like now, for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Moves on every change to what the index grants.
    pub generation: u64,
    /// Access sets computed since the start.
    pub computations: u64,
    /// (user, groups) with a cached access set.
    pub cached: usize,
    /// Of those, held by someone ([`Rbac::hold`]).
    pub held: usize,
    /// Objects currently ignored because they do not parse.
    pub ignored: usize,
}

/// The RBAC index and the access sets computed from it. One per gateway;
/// share it in an `Arc`. Every method takes one `std` mutex and awaits
/// nothing under it.
#[derive(Default)]
pub struct Rbac {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    index: Index,
    cache: Cache,
    generation: u64,
    /// Which kinds have had a full list ([`Rbac::replace`]).
    listed: [bool; 4],
}

impl Rbac {
    pub fn new() -> Rbac {
        Rbac::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An object of `kind` was added or modified (an informer's ADDED or
    /// MODIFIED). One that does not parse is logged and grants nothing,
    /// not even what its previous version granted.
    pub fn apply(&self, kind: Kind, object: &Value) -> Refresh {
        let Some((key, parsed)) = object::read(kind, object) else {
            return Refresh::default();
        };
        let refreshed = {
            let mut state = self.lock();
            let affected = state.index.put(kind, key, parsed);
            state.refresh(affected)
        };
        refreshed.announce()
    }

    /// The object of `kind` at `namespace`/`name` was deleted (`namespace`
    /// is ignored for the cluster-scoped kinds; a namespaced kind without
    /// one names nothing).
    pub fn delete(&self, kind: Kind, namespace: &str, name: &str) -> Refresh {
        if kind.namespaced() && namespace.is_empty() {
            return Refresh::default();
        }
        let key = ObjectKey::new(kind, namespace, name);
        let refreshed = {
            let mut state = self.lock();
            let affected = state.index.remove(kind, key);
            state.refresh(affected)
        };
        refreshed.announce()
    }

    /// Every object of `kind` is now `objects` (a relist): those not in it
    /// are gone. Recomputes only what the differences affect.
    pub fn replace<'a>(&self, kind: Kind, objects: impl IntoIterator<Item = &'a Value>) -> Refresh {
        let objects: Vec<_> = objects
            .into_iter()
            .filter_map(|object| object::read(kind, object))
            .collect();
        let refreshed = {
            let mut state = self.lock();
            state.listed[kind.slot()] = true;
            let affected = state.index.replace(kind, objects);
            state.refresh(affected)
        };
        refreshed.announce()
    }

    /// Whether every kind has been listed once: before that, access sets
    /// lack what the missing kinds grant, and must not be relied on.
    pub fn synced(&self) -> bool {
        self.lock().listed.iter().all(|listed| *listed)
    }

    /// What `user` may read now. Computed once per (user, groups) until a
    /// change affects it; for one answer. A stream that must follow
    /// changes holds a [`UserAccess`] instead ([`Rbac::hold`]).
    pub fn access(&self, user: &User) -> Arc<AccessSet> {
        let identity = Identity::from(user);
        let mut state = self.lock();
        let State { index, cache, .. } = &mut *state;
        cache.entry(&identity, index).current()
    }

    /// `user`'s access set, kept current while anyone holds the returned
    /// handle: one handle per (user, groups), shared by all its holders,
    /// recomputed once per change that affects it; its epoch moves when
    /// the set changes.
    pub fn hold(&self, user: &User) -> Arc<UserAccess> {
        let identity = Identity::from(user);
        let mut state = self.lock();
        let State { index, cache, .. } = &mut *state;
        cache.entry(&identity, index)
    }

    pub fn stats(&self) -> Stats {
        let state = self.lock();
        Stats {
            generation: state.generation,
            computations: state.cache.computations(),
            cached: state.cache.len(),
            held: state.cache.held(),
            ignored: state.index.ignored(),
        }
    }
}

impl State {
    /// Recomputes what `affected` touches; the epochs of the sets that
    /// changed are moved by [`Refreshed::announce`], after the lock.
    fn refresh(&mut self, affected: index::Affected) -> Refreshed {
        if affected.is_empty() {
            return Refreshed::default();
        }
        self.generation += 1;
        self.cache.refresh(&self.index, &affected)
    }
}
