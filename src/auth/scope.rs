//! What a Kubernetes principal's open streams follow (`hub::scope`): its
//! access, as `auth::rbac` keeps it current, and its credential, which a
//! later TokenReview may revoke.

use std::sync::Arc;

use super::Verb;
use super::kubernetes::Credential;
use super::rbac::UserAccess;
use super::rbac::access::Namespaces;
use crate::epoch::Epoch;
use crate::hub::Denial;
use crate::hub::scope::{Scope, ScopeSource};

fn revoked() -> Denial {
    Denial {
        code: 401,
        reason: "Unauthorized",
        message:
            "token no longer accepted by the Kubernetes API server; reconnect with a fresh one"
                .into(),
    }
}

/// A stream under `--authorization rbac`: the namespaces the user's RBAC
/// grants for `verb` on the resource, now.
pub struct RbacScope {
    pub access: Arc<UserAccess>,
    pub credential: Option<Arc<Credential>>,
    pub verb: Verb,
    pub group: String,
    pub resource: String,
    /// Whether the resource is namespaced: grants in namespaces alone
    /// grant nothing of a cluster-scoped one.
    pub namespaced: bool,
}

impl ScopeSource for RbacScope {
    /// Moves when the user's access set changes, and when the credential
    /// is revoked (the reviewer moves it then too).
    fn changes(&self) -> &Epoch {
        self.access.changes()
    }

    fn scope(&self) -> Scope {
        if self.credential.as_ref().is_some_and(|c| c.is_revoked()) {
            return Scope::Denied(revoked());
        }
        let access = self.access.current();
        match access.namespaces(self.verb, &self.group, &self.resource) {
            Namespaces::All => Scope::All,
            Namespaces::Only(names) if self.namespaced => Scope::Only(names.into_iter().collect()),
            Namespaces::Only(_) | Namespaces::Nothing => Scope::Denied(Denial {
                code: 403,
                reason: "Forbidden",
                message: format!(
                    "{} may no longer {} {}",
                    self.access.identity().user(),
                    self.verb.as_str(),
                    qualified(&self.group, &self.resource)
                ),
            }),
        }
    }
}

/// A stream under `--authorization review`: what it was allowed when it
/// started, until its credential is revoked.
pub struct CredentialScope {
    pub credential: Arc<Credential>,
}

impl ScopeSource for CredentialScope {
    fn changes(&self) -> &Epoch {
        self.credential.changes()
    }

    fn scope(&self) -> Scope {
        if self.credential.is_revoked() {
            Scope::Denied(revoked())
        } else {
            Scope::All
        }
    }
}

/// `pods`, or `deployments.apps`.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}
