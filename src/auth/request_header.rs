//! `--auth request-header`: a front proxy (oauth2-proxy behind
//! ingress-nginx, say) signs people in and passes who they are in
//! headers; kubefan believes those headers only from a client that
//! presented a certificate of `--requestheader-client-ca-file` whose
//! common name `--requestheader-allowed-names` lists (any, when empty).
//!
//! kube-apiserver's front-proxy authenticator, followed rule by rule:
//! `k8s.io/apiserver/pkg/authentication/request/headerrequest/requestheader.go`
//! (`NewDynamicVerifyOptionsSecure`, `AuthenticateRequest`, `headerValue`,
//! `allHeaderValues`, `ClearAuthenticationHeaders`) wrapped in the x509
//! verifier of `k8s.io/apiserver/pkg/authentication/request/x509/x509.go`
//! (`Verifier.AuthenticateRequest`, `verifySubject`):
//! - no client certificate: not this authenticator's request (pass);
//! - a chain the client CA does not verify for client use (another CA,
//!   expired), or a common name not allowed: the headers are not
//!   believed; the request is left to the next authenticator, as if it
//!   carried no identity (kube-apiserver's union does the same with the
//!   verifier's error), and the headers are logged at debug only;
//! - a trusted client that names no user (the first non-empty of
//!   `--requestheader-username-headers`): pass;
//! - otherwise the user, with every non-empty value of every
//!   `--requestheader-group-headers` header as a group, and
//!   `system:authenticated` added as kube-apiserver's authenticator chain
//!   adds it; authorized by the cluster's RBAC like any other user.
//!
//! Where kubefan differs, on purpose:
//! - The chain is checked on every request (as kube-apiserver does), but
//!   the TLS handshake never fails for it (`crate::tls`).
//! - Extras (`--requestheader-extra-headers-prefix`) are removed from the
//!   request and not used: kubefan's authorizers (its local RBAC, and
//!   SubjectAccessReviews, which it sends with user, uid and groups, as it
//!   does for TokenReview users) read no extras.
//! - `--requestheader-group-separator` (kubefan's own) also splits each
//!   group value: oauth2-proxy joins a user's groups into one
//!   comma-separated `X-Auth-Request-Groups` value
//!   (`pkg/middleware/headers.go`, `flattenHeaders`), which kube-apiserver
//!   would read as one group.
//! - At most `--requestheader-max-groups` groups (401 beyond); the
//!   header bytes are already bounded by the middleware
//!   (`--max-header-bytes`' 16 KiB, 431 beyond), before anything here.
//! - Identity headers are removed from every request once it is
//!   authenticated, believed or not ([`RequestHeader::clear`]), so
//!   nothing after the middleware can mistake them for an identity.

use actix_web::http::header::{HeaderMap, HeaderName};
use rustls::pki_types::UnixTime;

use super::authenticate::Verdict;
use super::{ALL_AUTHENTICATED, Access, Error, Principal, User};
use crate::config::RequestHeaderConfig;
use crate::tls::{ClientCa, PeerCertificates};

/// The front-proxy authenticator (see the module documentation).
#[derive(Debug)]
pub struct RequestHeader {
    ca: ClientCa,
    allowed_names: Vec<String>,
    username_headers: Vec<HeaderName>,
    group_headers: Vec<HeaderName>,
    /// Lower-cased, compared with lower-cased header names.
    extra_prefixes: Vec<String>,
    group_separator: Option<char>,
    max_groups: usize,
}

impl RequestHeader {
    /// Reads the client CA; header names were checked with the
    /// configuration (`config::RequestHeaderConfig`).
    pub fn new(cfg: &RequestHeaderConfig) -> Result<RequestHeader, Error> {
        let file = cfg.client_ca_file.as_deref().ok_or_else(|| {
            Error::Setup("--auth request-header needs --requestheader-client-ca-file".into())
        })?;
        let ca = ClientCa::load(file).map_err(|err| Error::Setup(err.to_string()))?;
        let headers = |names: &[String]| -> Result<Vec<HeaderName>, Error> {
            names
                .iter()
                .map(|n| {
                    HeaderName::from_bytes(n.trim().as_bytes())
                        .map_err(|_| Error::Setup(format!("{n:?} is not a header name")))
                })
                .collect()
        };
        Ok(RequestHeader {
            ca,
            allowed_names: cfg.allowed_names.clone(),
            username_headers: headers(&cfg.username_headers)?,
            group_headers: headers(&cfg.group_headers)?,
            extra_prefixes: cfg
                .extra_headers_prefix
                .iter()
                .map(|p| p.trim().to_ascii_lowercase())
                .collect(),
            group_separator: cfg.group_separator,
            max_groups: cfg.max_groups,
        })
    }

    /// The client CA, which the TLS listener hints to clients.
    pub fn client_ca(&self) -> &ClientCa {
        &self.ca
    }

    /// Who the proxy says sent the request, if the connection's client is
    /// the proxy (see the module documentation).
    pub(super) fn authenticate(
        &self,
        headers: &HeaderMap,
        client: Option<&PeerCertificates>,
    ) -> Verdict {
        if let Err(why) = self.trusted(client) {
            if self.username(headers).is_some() {
                tracing::debug!(reason = %why, "identity headers from a client that is not the trusted front proxy ignored");
            }
            return Verdict::Pass(Error::RequestHeader(why));
        }
        let Some(username) = self.username(headers) else {
            return Verdict::Pass(Error::RequestHeader(format!(
                "the front proxy named no user ({})",
                names(&self.username_headers)
            )));
        };
        let mut groups = match self.groups(headers) {
            Ok(groups) => groups,
            Err(err) => return Verdict::Refused(err),
        };
        groups.push(ALL_AUTHENTICATED.to_string());
        let user = User {
            username: username.to_string(),
            uid: None,
            groups,
        };
        Verdict::Accepted(Principal::new(username.into(), None, Access::User(user)))
    }

    /// Whether `client` is the front proxy: a chain the client CA verifies
    /// for client use now, whose common name is allowed. The reason when
    /// not.
    fn trusted(&self, client: Option<&PeerCertificates>) -> Result<(), String> {
        let Some(chain) = client else {
            return Err("no client certificate was presented".into());
        };
        self.ca.verify(chain, UnixTime::now()).map_err(|err| {
            format!("the client certificate is not one of --requestheader-client-ca-file: {err}")
        })?;
        if self.allowed_names.is_empty() {
            return Ok(());
        }
        let name = common_name(chain).unwrap_or_default();
        if self.allowed_names.contains(&name) {
            Ok(())
        } else {
            Err(format!(
                "the client certificate's common name {name:?} is not in --requestheader-allowed-names"
            ))
        }
    }

    /// The first non-empty value of the username headers, in order
    /// (kube-apiserver's `headerValue`).
    fn username<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        self.username_headers.iter().find_map(|name| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
        })
    }

    /// Every non-empty value of every group header (kube-apiserver's
    /// `allHeaderValues`), split at the separator when one is set.
    fn groups(&self, headers: &HeaderMap) -> Result<Vec<String>, Error> {
        let mut groups = Vec::new();
        for name in &self.group_headers {
            for value in headers.get_all(name) {
                let Ok(value) = value.to_str() else {
                    return Err(Error::RequestHeader(format!(
                        "the front proxy sent a {name} header that is not visible ASCII"
                    )));
                };
                let sep = self.group_separator;
                let parts = value
                    .split(move |c| Some(c) == sep)
                    .map(move |g| if sep.is_some() { g.trim() } else { g });
                for group in parts.filter(|g| !g.is_empty()) {
                    if groups.len() == self.max_groups {
                        return Err(Error::RequestHeader(format!(
                            "the front proxy named more than {} groups (--requestheader-max-groups)",
                            self.max_groups
                        )));
                    }
                    groups.push(group.to_string());
                }
            }
        }
        Ok(groups)
    }

    /// Removes every identity header from `headers`: the username and
    /// group headers, and every header starting with an extras prefix
    /// (kube-apiserver's `ClearAuthenticationHeaders`).
    pub fn clear(&self, headers: &mut HeaderMap) {
        for name in self.username_headers.iter().chain(&self.group_headers) {
            headers.remove(name);
        }
        let extras: Vec<HeaderName> = headers
            .keys()
            .filter(|k| {
                self.extra_prefixes
                    .iter()
                    .any(|p| k.as_str().starts_with(p))
            })
            .cloned()
            .collect();
        for name in extras {
            headers.remove(name);
        }
    }
}

/// The subject common name of the chain's end-entity certificate: the
/// last CN attribute, as Go's `pkix.Name.FillFromRDNSequence` leaves
/// `CommonName`. `None` when it has none or does not parse.
pub fn common_name(chain: &PeerCertificates) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(chain.end_entity().as_ref()).ok()?;
    cert.subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok())
        .last()
        .map(str::to_string)
}

fn names(headers: &[HeaderName]) -> String {
    headers
        .iter()
        .map(HeaderName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::HeaderValue;
    use std::path::PathBuf;
    use std::sync::Arc;

    struct Ca(rcgen::CertifiedIssuer<'static, rcgen::KeyPair>);

    impl Ca {
        fn new(name: &str) -> Ca {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
            let key = rcgen::KeyPair::generate().unwrap();
            Ca(rcgen::CertifiedIssuer::self_signed(params, key).unwrap())
        }

        /// A client certificate with these common names and key usages.
        fn client(&self, cns: &[&str], usage: rcgen::ExtendedKeyUsagePurpose) -> PeerCertificates {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            for cn in cns {
                params
                    .distinguished_name
                    .push(rcgen::DnType::CommonName, *cn);
            }
            params.extended_key_usages = vec![usage];
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = params.signed_by(&key, &*self.0).unwrap();
            PeerCertificates(Arc::new([cert.der().clone()]))
        }

        fn file(&self) -> PathBuf {
            let path = std::env::temp_dir().join(format!(
                "kubefan-front-proxy-ca-{}-{}.crt",
                std::process::id(),
                uuid::Uuid::new_v4()
            ));
            std::fs::write(&path, self.0.pem()).unwrap();
            path
        }
    }

    fn proxy(ca: &Ca, tune: impl FnOnce(&mut RequestHeaderConfig)) -> RequestHeader {
        let file = ca.file();
        let mut cfg = RequestHeaderConfig {
            client_ca_file: Some(file.clone()),
            allowed_names: vec!["front-proxy".into()],
            ..RequestHeaderConfig::default()
        };
        tune(&mut cfg);
        let proxy = RequestHeader::new(&cfg).unwrap();
        let _ = std::fs::remove_file(file);
        proxy
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn user(verdict: Verdict) -> User {
        match verdict {
            Verdict::Accepted(p) => match p.access() {
                Access::User(user) => user.clone(),
                other => panic!("not a user: {other:?}"),
            },
            Verdict::Refused(err) => panic!("refused: {err}"),
            Verdict::Pass(why) => panic!("passed: {why}"),
        }
    }

    fn passed(verdict: Verdict) -> String {
        match verdict {
            Verdict::Pass(why) => why.to_string(),
            Verdict::Accepted(p) => panic!("accepted {}", p.name()),
            Verdict::Refused(err) => panic!("refused: {err}"),
        }
    }

    use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};

    #[test]
    fn the_user_and_groups_come_from_the_headers_as_kube_apiserver_reads_them() {
        let ca = Ca::new("front-proxy-ca");
        let proxy = proxy(&ca, |cfg| {
            cfg.username_headers = vec!["X-Remote-User".into(), "X-Auth-Request-User".into()];
            cfg.group_headers = vec!["X-Remote-Group".into(), "X-Other-Group".into()];
        });
        let client = ca.client(&["front-proxy"], ClientAuth);
        let h = headers(&[
            ("x-remote-user", ""),
            ("X-Auth-Request-User", "alice"),
            ("X-Remote-Group", "team-web"),
            ("X-Remote-Group", ""),
            ("X-Other-Group", "ops,dev"),
            ("X-Remote-Group", "team-b"),
        ]);
        let got = user(proxy.authenticate(&h, Some(&client)));
        assert_eq!(got.username, "alice", "the first non-empty username wins");
        assert_eq!(got.uid, None);
        assert_eq!(
            got.groups,
            ["team-web", "team-b", "ops,dev", ALL_AUTHENTICATED],
            "every non-empty value of every group header, in header order; no splitting"
        );
    }

    #[test]
    fn a_separator_splits_joined_groups_and_too_many_are_refused() {
        let ca = Ca::new("front-proxy-ca");
        let proxy = proxy(&ca, |cfg| {
            cfg.group_headers = vec!["X-Auth-Request-Groups".into()];
            cfg.group_separator = Some(',');
            cfg.max_groups = 3;
        });
        let client = ca.client(&["front-proxy"], ClientAuth);
        let h = headers(&[
            ("X-Remote-User", "alice"),
            ("X-Auth-Request-Groups", "a, b,,c"),
        ]);
        assert_eq!(
            user(proxy.authenticate(&h, Some(&client))).groups,
            ["a", "b", "c", ALL_AUTHENTICATED]
        );
        let h = headers(&[
            ("X-Remote-User", "alice"),
            ("X-Auth-Request-Groups", "a,b,c,d"),
        ]);
        match proxy.authenticate(&h, Some(&client)) {
            Verdict::Refused(err) => {
                assert!(err.to_string().contains("more than 3 groups"), "{err}")
            }
            _ => panic!("four groups accepted past a bound of three"),
        }
    }

    #[test]
    fn headers_are_believed_only_from_the_allowed_names_of_the_client_ca() {
        let ca = Ca::new("front-proxy-ca");
        let other = Ca::new("someone-else");
        let proxy = proxy(&ca, |_| {});
        let h = headers(&[
            ("X-Remote-User", "admin"),
            ("X-Remote-Group", "system:masters"),
        ]);

        let why = passed(proxy.authenticate(&h, None));
        assert!(why.contains("no client certificate"), "{why}");
        let foreign = other.client(&["front-proxy"], ClientAuth);
        let why = passed(proxy.authenticate(&h, Some(&foreign)));
        assert!(
            why.contains("not one of --requestheader-client-ca-file"),
            "{why}"
        );
        let stranger = ca.client(&["not-the-proxy"], ClientAuth);
        let why = passed(proxy.authenticate(&h, Some(&stranger)));
        assert!(why.contains("\"not-the-proxy\" is not in"), "{why}");
        let server_only = ca.client(&["front-proxy"], ServerAuth);
        let why = passed(proxy.authenticate(&h, Some(&server_only)));
        assert!(
            why.contains("not one of"),
            "a server-only certificate: {why}"
        );

        // Go's pkix.Name keeps the last CN.
        let two = ca.client(&["not-the-proxy", "front-proxy"], ClientAuth);
        assert_eq!(common_name(&two).as_deref(), Some("front-proxy"));
        assert_eq!(user(proxy.authenticate(&h, Some(&two))).username, "admin");

        // No allowed names: any certificate of the CA.
        let any = self::proxy(&ca, |cfg| cfg.allowed_names.clear());
        assert_eq!(
            user(any.authenticate(&h, Some(&stranger))).username,
            "admin"
        );
    }

    #[test]
    fn a_trusted_proxy_that_names_no_user_leaves_the_request_to_the_next_authenticator() {
        let ca = Ca::new("front-proxy-ca");
        let proxy = proxy(&ca, |_| {});
        let client = ca.client(&["front-proxy"], ClientAuth);
        let why = passed(proxy.authenticate(&headers(&[("X-Remote-Group", "g")]), Some(&client)));
        assert!(why.contains("named no user (x-remote-user)"), "{why}");
    }

    #[test]
    fn identity_headers_are_cleared_and_others_kept() {
        let ca = Ca::new("front-proxy-ca");
        let proxy = proxy(&ca, |_| {});
        let mut h = headers(&[
            ("X-Remote-User", "alice"),
            ("X-Remote-Group", "a"),
            ("X-Remote-Group", "b"),
            ("X-Remote-Extra-Scopes", "openid"),
            ("X-Remote-Extra-Acme.com%2Fproject", "p"),
            ("Authorization", "Bearer t"),
            ("X-Remote-Userx", "kept"),
        ]);
        proxy.clear(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(h.contains_key("authorization") && h.contains_key("x-remote-userx"));
    }
}
