//! The authenticators, tried in turn on a request, as kube-apiserver's
//! union of request authenticators tries its own
//! (`k8s.io/apiserver/pkg/authentication/request/union`).
//!
//! The front proxy's (`request-header`) comes first: it reads no token,
//! only headers and the connection's client certificate, and takes a
//! request only from the proxy, which sends no token. Then each of the
//! others takes a token as its own, refuses it, or leaves it to the
//! next: the JWT verifier takes tokens of its issuers (any JWT when
//! `--jwt-issuer` is unset), the OIDC issuer those whose `iss` is its own
//! (kube-apiserver's `hasCorrectIssuer`), and TokenReview, last, any
//! token. Unlike kube-apiserver's union, the first to take a token
//! decides: an expired id-token is refused as expired instead of costing
//! a TokenReview that would refuse it anyway, and the 401 says why.
//!
//! A request with no token and no proxy identity is a signed-in session's
//! when it has the session cookie (`auth::session`): a token sent with a
//! request wins over the cookie.

use std::sync::Arc;

use actix_web::http::header::HeaderMap;

use super::{Auth, Authorizer, Error, Principal, jwt, oidc, request_header, token_from};
use crate::tls::PeerCertificates;

/// One authenticator of the chain.
pub(super) enum Authenticator {
    RequestHeader(Box<request_header::RequestHeader>),
    Jwt(Box<jwt::Verifier>),
    Oidc(Arc<oidc::Issuer>),
    /// TokenReview, by the cluster the request is for (its
    /// [`Authorizer`]'s reviewer).
    Kubernetes,
}

/// What one authenticator made of a request.
pub(super) enum Verdict {
    Accepted(Principal),
    Refused(Error),
    /// Not a request this authenticator takes (and why, for the 401 when
    /// no other takes it either): the next one is asked.
    Pass(Error),
}

impl Authenticator {
    async fn authenticate(
        &self,
        headers: &HeaderMap,
        token: Option<&str>,
        client: Option<&PeerCertificates>,
        cluster: &Authorizer,
    ) -> Verdict {
        match (self, token) {
            (Authenticator::RequestHeader(proxy), _) => proxy.authenticate(headers, client),
            // The cookie's name is put in by `Auth::authenticate`.
            (_, None) => Verdict::Pass(Error::NoToken(String::new())),
            (Authenticator::Jwt(verifier), Some(token)) => verifier.authenticate(token),
            (Authenticator::Oidc(issuer), Some(token)) => issuer.authenticate(token).await,
            (Authenticator::Kubernetes, Some(token)) => match cluster.token_reviewer() {
                Some(reviewer) => match reviewer.authenticate(token).await {
                    Ok(principal) => Verdict::Accepted(principal),
                    Err(err) => Verdict::Refused(err),
                },
                None => Verdict::Refused(Error::Setup("this cluster has no token reviewer".into())),
            },
        }
    }
}

impl Auth {
    /// Who sent a request with `headers` and `query` over a connection
    /// whose TLS client presented `client` (`None`: no certificate, or
    /// plain HTTP): 401-class errors for missing or invalid credentials. A
    /// Kubernetes token (`--auth kubernetes`) is reviewed by `cluster`,
    /// the cluster the request is for.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        query: &str,
        client: Option<&PeerCertificates>,
        cluster: &Authorizer,
    ) -> Result<Principal, Error> {
        if self.anonymous() {
            return Ok(Principal::anonymous());
        }
        let token = token_from(headers, query, &self.cookie);
        let mut passed = None;
        for authenticator in &self.authenticators {
            match authenticator
                .authenticate(headers, token.as_deref(), client, cluster)
                .await
            {
                Verdict::Accepted(principal) => return Ok(principal),
                Verdict::Refused(err) => return Err(err),
                Verdict::Pass(why) => {
                    passed.get_or_insert(why);
                }
            }
        }
        // No token: a signed-in session's cookie, if any.
        if token.is_none()
            && let Some(sessions) = &self.sessions
        {
            return sessions
                .authenticate(headers)
                .unwrap_or_else(|| Err(Error::NotSignedIn(self.cookie.clone())));
        }
        // One authenticator: its reason; several: no credentials, or none
        // took the token.
        Err(match (passed, self.authenticators.len()) {
            (Some(why), 1) if !matches!(why, Error::NoToken(_)) => why,
            _ if token.is_none() => Error::NoToken(self.cookie.clone()),
            _ => Error::NotAccepted(self.methods.clone()),
        })
    }

    /// Removes a front proxy's identity headers from a request once it is
    /// authenticated (`--auth request-header`; nothing otherwise).
    pub fn clear_identity_headers(&self, headers: &mut HeaderMap) {
        if let Some(proxy) = self.request_header() {
            proxy.clear(headers);
        }
    }
}
