//! `kubefan kubeconfig`: a kubeconfig that points an ordinary Kubernetes
//! client (kubectl, client-go, `@kubernetes/client-node`, kube-rs) at
//! kubefan's Kubernetes face, with nothing to edit by hand.
//!
//! - The server URL: `https://` when TLS is on, else `http://`, at the
//!   `--listen` address (an unspecified address, `0.0.0.0` or `::`, becomes
//!   loopback), or the URL given (`--server`, for a Service or Ingress
//!   name).
//! - With TLS, the CA clients should trust, inlined as
//!   `certificate-authority-data` (verification stays on): `--tls-ca-file`,
//!   else the served chain itself, which clients accept as a trust anchor
//!   when it is self-signed (and Go clients always). `@kubernetes/client-node`
//!   refuses `http://` servers unless verification is off, so TLS is what it
//!   needs.
//! - The user, one of [`User`]:
//!   - with auth on, the bearer token from a file, inlined as `token`;
//!   - with `--oidc`, an exec credential plugin, kubelogin
//!     (`kubectl oidc-login get-token`), which signs the person in at the
//!     issuer and hands kubectl the id-token (see [`OidcLogin`]);
//!   - without auth, the user `anonymous` (no password): client-go prompts
//!     for a username on a TLS server when its user entry holds nothing
//!     that identifies a user (`canIdentifyUser` in client-go's
//!     `tools/clientcmd/client_config.go`), and kubefan without auth
//!     ignores credentials.
//!
//! The kubeconfig format is client-go's (`clientcmd/api/v1`): one cluster,
//! one user, one context, made current.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use base64::Engine;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::config::OidcConfig;

/// A kubeconfig that cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {flag} {path}: {source}")]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{flag} {path} holds no PEM certificate")]
    NoCertificate { flag: &'static str, path: PathBuf },
    #[error("{flag} {path} is empty")]
    Empty { flag: &'static str, path: PathBuf },
    #[error("--server {0:?} is not an http:// or https:// URL")]
    Server(String),
    #[error("--oidc needs {0}")]
    OidcMissing(&'static str),
    #[error("--oidc: {0}")]
    Oidc(crate::config::Error),
}

/// What the kubeconfig says.
#[derive(Debug, Clone, Default)]
pub struct Kubeconfig {
    /// The cluster, user and context name.
    pub name: String,
    pub server: String,
    /// PEM certificates clients trust for `server`.
    pub ca_pem: Option<String>,
    pub user: User,
    /// The gateway's named clusters (`--cluster`): one kubeconfig cluster
    /// and context each, `NAME-CLUSTER`, whose server is `server` with
    /// the cluster's `/clusters/CLUSTER` prefix (kubectl, client-go,
    /// client-node and kube-rs keep a server URL's path); the first is the
    /// current context. Empty: one, `NAME`, at `server`.
    pub clusters: Vec<String>,
    /// Every context's namespace (`--namespace`); `None`: kubectl's
    /// `default`.
    pub namespace: Option<String>,
}

/// How the kubeconfig's user proves who it is.
#[derive(Debug, Clone, Default)]
pub enum User {
    /// Nothing: the client must bring its own credentials.
    #[default]
    Unnamed,
    /// No auth: the user `anonymous` (see the module documentation).
    Anonymous,
    /// A bearer token, inlined.
    Token(String),
    /// A token from kubelogin, asked for on every kubectl start.
    OidcLogin(OidcLogin),
}

/// The kubelogin exec user, as kubelogin's README shows it
/// (github.com/int128/kubelogin, "Getting Started": `apiVersion:
/// client.authentication.k8s.io/v1`, `command: kubectl`, `args:
/// [oidc-login, get-token, --oidc-issuer-url=…, --oidc-client-id=…]`),
/// with two fields its example leaves out:
///
/// - `interactiveMode: IfAvailable`. client-go refuses a `v1` exec user
///   without one ("interactiveMode must be specified", kubectl 1.32), and
///   `kubectl config set-credentials` writes none. kubelogin's setup guide
///   (`docs/setup.md`, step 5) passes `--exec-interactive-mode=Never`;
///   we do not, because its password and keyboard grants read the
///   terminal on stdin (`docs/usage.md`; `term.ReadPassword(stdin)` in
///   its `pkg/infrastructure/reader`), which `Never` withholds.
///   `IfAvailable` gives the plugin stdin only when it is a terminal, so
///   in scripts it runs as under `Never`.
/// - `provideClusterInfo: false`: kubelogin reads only the API version
///   from `KUBERNETES_EXEC_INFO` (`pkg/credentialplugin/reader`), so the
///   cluster's CA need not be handed to it.
///
/// kubelogin's flags (`docs/usage.md`): `--oidc-extra-scope` once per
/// scope, `--oidc-client-secret`, `--certificate-authority-data` (base64
/// of PEM, for an issuer with a private CA: `--oidc-ca-file`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcLogin {
    pub issuer_url: String,
    pub client_id: String,
    pub extra_scopes: Vec<String>,
    /// For providers whose clients must be confidential; it is then in
    /// the kubeconfig, in the clear (`kubefan kubeconfig` says so).
    pub client_secret: Option<String>,
    /// PEM certificates kubelogin trusts for the issuer.
    pub issuer_ca_pem: Option<String>,
}

/// The exec credential API kubelogin answers with.
pub const EXEC_API_VERSION: &str = "client.authentication.k8s.io/v1";

impl OidcLogin {
    /// The kubelogin user for the issuer and client id of `oidc` (the
    /// gateway's `--oidc-*` flags), its CA from `--oidc-ca-file`.
    pub fn from_config(oidc: &OidcConfig) -> Result<OidcLogin, Error> {
        if oidc.issuer_url.is_empty() {
            return Err(Error::OidcMissing(
                "--oidc-issuer-url (the issuer kubelogin signs in at, as for --auth oidc)",
            ));
        }
        if oidc.client_id.is_empty() {
            return Err(Error::OidcMissing(
                "--oidc-client-id (the client kubelogin signs in as, as for --auth oidc)",
            ));
        }
        oidc.validate().map_err(Error::Oidc)?;
        let issuer_ca_pem = oidc
            .ca_file
            .as_deref()
            .map(|path| read_certificates("--oidc-ca-file", path))
            .transpose()?;
        Ok(OidcLogin {
            issuer_url: oidc.issuer_url.clone(),
            client_id: oidc.client_id.clone(),
            extra_scopes: Vec::new(),
            client_secret: None,
            issuer_ca_pem,
        })
    }

    /// `kubectl`'s arguments: the plugin, its command, its flags.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "oidc-login".to_string(),
            "get-token".to_string(),
            format!("--oidc-issuer-url={}", self.issuer_url),
            format!("--oidc-client-id={}", self.client_id),
        ];
        if let Some(secret) = &self.client_secret {
            args.push(format!("--oidc-client-secret={secret}"));
        }
        for scope in &self.extra_scopes {
            args.push(format!("--oidc-extra-scope={scope}"));
        }
        if let Some(pem) = &self.issuer_ca_pem {
            let engine = base64::engine::general_purpose::STANDARD;
            args.push(format!(
                "--certificate-authority-data={}",
                engine.encode(pem)
            ));
        }
        args
    }

    fn exec(&self) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": EXEC_API_VERSION,
            "command": "kubectl",
            "args": self.args(),
            "interactiveMode": "IfAvailable",
            "provideClusterInfo": false,
        })
    }
}

/// The URL kubefan serves at when it listens on `listen`.
pub fn server_url(listen: SocketAddr, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("{scheme}://{}", SocketAddr::new(ip, listen.port()))
}

/// Checks a `--server` URL.
pub fn check_server(url: &str) -> Result<String, Error> {
    let url = url.trim().trim_end_matches('/');
    if (url.starts_with("https://") || url.starts_with("http://")) && url.len() > "https://".len() {
        Ok(url.to_string())
    } else {
        Err(Error::Server(url.to_string()))
    }
}

/// The PEM certificates in `path` (named by `flag` in errors), re-encoded:
/// anything else in the file (a private key by mistake) is left out.
pub fn read_certificates(flag: &'static str, path: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(|source| Error::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })?;
    let certs: Vec<CertificateDer<'_>> = CertificateDer::pem_slice_iter(&bytes)
        .filter_map(Result::ok)
        .collect();
    if certs.is_empty() {
        return Err(Error::NoCertificate {
            flag,
            path: path.to_path_buf(),
        });
    }
    let engine = base64::engine::general_purpose::STANDARD;
    let mut pem = String::new();
    for cert in certs {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let body = engine.encode(cert.as_ref());
        for line in body.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    Ok(pem)
}

/// The secret (a bearer token, a client secret) in `path`, named by
/// `flag` in errors, without surrounding whitespace.
pub fn read_secret(flag: &'static str, path: &Path) -> Result<String, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(Error::Empty {
            flag,
            path: path.to_path_buf(),
        });
    }
    Ok(token.to_string())
}

impl Kubeconfig {
    /// The kubeconfig as YAML.
    pub fn to_yaml(&self) -> String {
        let engine = base64::engine::general_purpose::STANDARD;
        let mut cluster = serde_json::json!({ "server": self.server });
        if let Some(ca) = &self.ca_pem {
            cluster["certificate-authority-data"] = engine.encode(ca).into();
        }
        let user = match &self.user {
            User::Unnamed => serde_json::json!({}),
            User::Anonymous => serde_json::json!({ "username": "anonymous" }),
            User::Token(token) => serde_json::json!({ "token": token }),
            User::OidcLogin(login) => serde_json::json!({ "exec": login.exec() }),
        };
        let named: Vec<(String, String)> = match self.clusters.as_slice() {
            [] => vec![(self.name.clone(), self.server.clone())],
            clusters => clusters
                .iter()
                .map(|c| {
                    let server = format!("{}/clusters/{c}", self.server.trim_end_matches('/'));
                    (format!("{}-{c}", self.name), server)
                })
                .collect(),
        };
        let clusters: Vec<_> = named
            .iter()
            .map(|(name, server)| {
                let mut cluster = cluster.clone();
                cluster["server"] = server.clone().into();
                serde_json::json!({"name": name, "cluster": cluster})
            })
            .collect();
        let contexts: Vec<_> = named
            .iter()
            .map(|(name, _)| {
                let mut context = serde_json::json!({"cluster": name, "user": self.name});
                if let Some(ns) = &self.namespace {
                    context["namespace"] = ns.clone().into();
                }
                serde_json::json!({"name": name, "context": context})
            })
            .collect();
        let doc = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": clusters,
            "users": [{"name": self.name, "user": user}],
            "contexts": contexts,
            "current-context": named[0].0,
        });
        // Serializing a JSON value to YAML cannot fail.
        serde_norway::to_string(&doc).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_url_follows_the_listen_address_and_tls() {
        assert_eq!(
            server_url("127.0.0.1:8080".parse().unwrap(), false),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            server_url("0.0.0.0:8443".parse().unwrap(), true),
            "https://127.0.0.1:8443"
        );
        assert_eq!(
            server_url("[::]:8443".parse().unwrap(), true),
            "https://[::1]:8443"
        );
        assert_eq!(
            check_server("https://kubefan.example/").unwrap(),
            "https://kubefan.example"
        );
        assert!(check_server("kubefan.example:8443").is_err());
    }

    #[tokio::test]
    async fn kube_reads_the_kubeconfig_with_its_ca_and_token() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let dir = std::env::temp_dir().join(format!("kubefan-kc-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tls.crt");
        // A key beside the certificate is left out.
        std::fs::write(&path, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
        let ca = read_certificates("--tls-cert-file", &path).unwrap();
        assert!(!ca.contains("PRIVATE"), "{ca}");
        let kc = Kubeconfig {
            name: "kubefan".into(),
            server: "https://127.0.0.1:8443".into(),
            ca_pem: Some(ca.clone()),
            user: User::Token("t0ken".into()),
            clusters: Vec::new(),
            namespace: None,
        };
        let parsed = kube::config::Kubeconfig::from_yaml(&kc.to_yaml()).unwrap();
        let cluster = parsed.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:8443"));
        let data = cluster.certificate_authority_data.as_deref().unwrap();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap();
        assert_eq!(String::from_utf8(decoded).unwrap(), ca);
        assert_eq!(parsed.current_context.as_deref(), Some("kubefan"));
        let config = kube::Config::from_custom_kubeconfig(parsed, &Default::default())
            .await
            .unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:8443/");
        assert!(config.auth_info.token.is_some());

        let err = read_certificates("--tls-ca-file", &dir.join("none")).unwrap_err();
        assert!(err.to_string().contains("--tls-ca-file"), "{err}");
        std::fs::write(dir.join("empty"), " \n").unwrap();
        assert!(matches!(
            read_secret("--token-file", &dir.join("empty")),
            Err(Error::Empty { .. })
        ));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_context_per_cluster_reaches_it_under_its_path_with_one_user_and_namespace() {
        let kc = Kubeconfig {
            name: "kubefan".into(),
            server: "https://kubefan.example/".into(),
            ca_pem: None,
            user: User::Token("t0ken".into()),
            clusters: vec!["east".into(), "west".into()],
            namespace: Some("team-a".into()),
        };
        let parsed = kube::config::Kubeconfig::from_yaml(&kc.to_yaml()).unwrap();
        assert_eq!(parsed.auth_infos.len(), 1);
        assert_eq!(parsed.current_context.as_deref(), Some("kubefan-east"));
        for cluster in ["east", "west"] {
            let options = kube::config::KubeConfigOptions {
                context: Some(format!("kubefan-{cluster}")),
                ..Default::default()
            };
            let config = kube::Config::from_custom_kubeconfig(parsed.clone(), &options)
                .await
                .unwrap();
            assert_eq!(
                config.cluster_url.to_string(),
                format!("https://kubefan.example/clusters/{cluster}")
            );
            assert!(config.auth_info.token.is_some());
            // kubectl's `-n` default, as `--namespace` set it.
            assert_eq!(config.default_namespace, "team-a");
        }
    }

    fn oidc(issuer_url: &str, client_id: &str) -> OidcConfig {
        OidcConfig {
            issuer_url: issuer_url.into(),
            client_id: client_id.into(),
            ..OidcConfig::default()
        }
    }

    #[test]
    fn the_oidc_user_runs_kubelogin_with_the_gateways_issuer_and_client() {
        let dir = std::env::temp_dir().join(format!("kubefan-kc-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let ca = rcgen::CertificateParams::new(vec!["idp.example".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        std::fs::write(dir.join("idp-ca.pem"), ca.pem()).unwrap();
        let mut cfg = oidc("https://idp.example/realms/k8s", "kubefan");
        cfg.ca_file = Some(dir.join("idp-ca.pem"));
        let mut login = OidcLogin::from_config(&cfg).unwrap();
        login.extra_scopes = vec!["email".into(), "groups".into()];
        login.client_secret = Some("s3cret".into());
        let kc = Kubeconfig {
            name: "kubefan".into(),
            server: "https://kubefan.example".into(),
            ca_pem: None,
            user: User::OidcLogin(login),
            clusters: Vec::new(),
            namespace: None,
        };

        let parsed = kube::config::Kubeconfig::from_yaml(&kc.to_yaml()).unwrap();
        assert_eq!(parsed.auth_infos.len(), 1);
        assert_eq!(
            parsed.contexts[0].context.as_ref().unwrap().user.as_deref(),
            Some("kubefan")
        );
        let user = parsed.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_none() && user.username.is_none());
        let exec = user.exec.as_ref().expect("an exec user");
        assert_eq!(exec.api_version.as_deref(), Some(EXEC_API_VERSION));
        assert_eq!(exec.command.as_deref(), Some("kubectl"));
        assert!(matches!(
            exec.interactive_mode,
            Some(kube::config::ExecInteractiveMode::IfAvailable)
        ));
        assert!(!exec.provide_cluster_info);
        let ca_data = base64::engine::general_purpose::STANDARD
            .encode(read_certificates("--oidc-ca-file", &dir.join("idp-ca.pem")).unwrap());
        assert_eq!(
            exec.args.as_deref().unwrap(),
            [
                "oidc-login".to_string(),
                "get-token".into(),
                "--oidc-issuer-url=https://idp.example/realms/k8s".into(),
                "--oidc-client-id=kubefan".into(),
                "--oidc-client-secret=s3cret".into(),
                "--oidc-extra-scope=email".into(),
                "--oidc-extra-scope=groups".into(),
                format!("--certificate-authority-data={ca_data}"),
            ]
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_oidc_user_needs_an_https_issuer_and_a_client_id() {
        let err = |cfg: OidcConfig| OidcLogin::from_config(&cfg).unwrap_err().to_string();
        assert!(err(oidc("", "kubefan")).contains("--oidc needs --oidc-issuer-url"));
        assert!(err(oidc("https://idp.example", "")).contains("--oidc needs --oidc-client-id"));
        assert!(err(oidc("http://idp.example", "kubefan")).contains("must be https://"));
        let mut cfg = oidc("https://idp.example", "kubefan");
        cfg.ca_file = Some("/nonexistent/idp-ca.pem".into());
        assert!(err(cfg).contains("cannot read --oidc-ca-file"));
    }
}
