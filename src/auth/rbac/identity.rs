//! The part of a user RBAC reads: the user name and the groups, as
//! TokenReview returned them. Access sets are cached per identity; the
//! uid and extra fields do not take part (no RBAC subject names them).

use crate::auth::User;

/// A user name and its groups, sorted and without duplicates, so that the
/// same user with the same groups in another order is one cache key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity {
    user: String,
    groups: Vec<String>,
}

impl Identity {
    pub fn new<G: Into<String>>(
        user: impl Into<String>,
        groups: impl IntoIterator<Item = G>,
    ) -> Identity {
        let mut groups: Vec<String> = groups.into_iter().map(Into::into).collect();
        groups.sort();
        groups.dedup();
        Identity {
            user: user.into(),
            groups,
        }
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn groups(&self) -> &[String] {
        &self.groups
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups
            .binary_search_by(|g| g.as_str().cmp(group))
            .is_ok()
    }
}

impl From<&User> for Identity {
    fn from(user: &User) -> Identity {
        Identity::new(user.username.clone(), user.groups.iter().cloned())
    }
}

/// The user name Kubernetes gives a ServiceAccount's tokens
/// (`k8s.io/apiserver/pkg/authentication/serviceaccount.MakeUsername`).
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_groups_in_another_order_are_the_same_identity() {
        let a = Identity::new("ann", ["b", "a", "b"]);
        let b = Identity::new("ann", ["a", "b"]);
        assert_eq!(a, b);
        assert!(a.in_group("a") && !a.in_group("c"));
        assert_ne!(a, Identity::new("bob", ["a", "b"]));
    }
}
