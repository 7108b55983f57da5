//! A user: who a request comes from, as the cluster's authorizers see
//! one (kube-apiserver's `user.Info`), whichever authenticator named it:
//! the API server (TokenReview) or an OpenID Connect issuer.

/// A user name and the groups it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub username: String,
    pub uid: Option<String>,
    pub groups: Vec<String>,
}

/// The group kube-apiserver adds to every authenticated user
/// (`k8s.io/apiserver/pkg/authentication/user.AllAuthenticated`).
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
