//! The authenticators, tried in turn on a request's token, as
//! kube-apiserver's union of token authenticators tries its own
//! (`k8s.io/apiserver/pkg/authentication/request/union`).
//!
//! Each one takes a token as its own, refuses it, or leaves it to the
//! next: the JWT verifier takes tokens of its issuers (any JWT when
//! `--jwt-issuer` is unset), the OIDC issuer those whose `iss` is its own
//! (kube-apiserver's `hasCorrectIssuer`), and TokenReview, last, any
//! token. Unlike kube-apiserver's union, the first to take a token
//! decides: an expired id-token is refused as expired instead of costing
//! a TokenReview that would refuse it anyway, and the 401 says why.

use std::sync::Arc;

use actix_web::http::header::HeaderMap;

use super::{Auth, Error, Principal, jwt, kubernetes, oidc, token_from};

/// One authenticator of the chain.
pub(super) enum Authenticator {
    Jwt(Box<jwt::Verifier>),
    Oidc(Arc<oidc::Issuer>),
    Kubernetes(Arc<kubernetes::Reviewer>),
}

/// What one authenticator made of a token.
pub(super) enum Verdict {
    Accepted(Principal),
    Refused(Error),
    /// Not a token this authenticator takes (and why, for the 401 when no
    /// other takes it either): the next one is asked.
    Pass(Error),
}

impl Authenticator {
    async fn authenticate(&self, token: &str) -> Verdict {
        match self {
            Authenticator::Jwt(verifier) => verifier.authenticate(token),
            Authenticator::Oidc(issuer) => issuer.authenticate(token).await,
            Authenticator::Kubernetes(reviewer) => match reviewer.authenticate(token).await {
                Ok(principal) => Verdict::Accepted(principal),
                Err(err) => Verdict::Refused(err),
            },
        }
    }
}

impl Auth {
    /// Who sent `headers` and `query`: 401-class errors for a missing or
    /// invalid token.
    pub async fn authenticate(&self, headers: &HeaderMap, query: &str) -> Result<Principal, Error> {
        if self.anonymous() {
            return Ok(Principal::anonymous());
        }
        // A token sent with the request wins over a session cookie.
        let Some(token) = token_from(headers, query, &self.cookie) else {
            return match &self.sessions {
                Some(sessions) => sessions
                    .authenticate(headers)
                    .unwrap_or_else(|| Err(Error::NotSignedIn(self.cookie.clone()))),
                None => Err(Error::NoToken(self.cookie.clone())),
            };
        };
        let mut passed = None;
        for authenticator in &self.authenticators {
            match authenticator.authenticate(&token).await {
                Verdict::Accepted(principal) => return Ok(principal),
                Verdict::Refused(err) => return Err(err),
                Verdict::Pass(why) => {
                    passed.get_or_insert(why);
                }
            }
        }
        // One authenticator: its reason; several: none took it.
        Err(match (passed, self.authenticators.len()) {
            (Some(why), 1) => why,
            _ => Error::NotAccepted(self.methods.clone()),
        })
    }
}
