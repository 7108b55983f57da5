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
//! - With auth on, the bearer token from a file, inlined as `token`.
//!   Without auth, the user `anonymous` (no password): client-go prompts
//!   for a username on a TLS server when its user entry holds nothing that
//!   identifies a user (`canIdentifyUser` in client-go's
//!   `tools/clientcmd/client_config.go`), and kubefan without auth ignores
//!   credentials.
//!
//! The kubeconfig format is client-go's (`clientcmd/api/v1`): one cluster,
//! one user, one context, made current.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use base64::Engine;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

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
    #[error("--token-file {0} is empty")]
    EmptyToken(PathBuf),
    #[error("--server {0:?} is not an http:// or https:// URL")]
    Server(String),
}

/// What the kubeconfig says.
#[derive(Debug, Clone, Default)]
pub struct Kubeconfig {
    /// The cluster, user and context name.
    pub name: String,
    pub server: String,
    /// PEM certificates clients trust for `server`.
    pub ca_pem: Option<String>,
    pub token: Option<String>,
    /// No auth: the user is `anonymous` (see the module documentation).
    pub anonymous: bool,
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

/// The bearer token in `path`, without surrounding whitespace.
pub fn read_token(path: &Path) -> Result<String, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        flag: "--token-file",
        path: path.to_path_buf(),
        source,
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(Error::EmptyToken(path.to_path_buf()));
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
        let mut user = serde_json::json!({});
        if let Some(token) = &self.token {
            user["token"] = token.clone().into();
        } else if self.anonymous {
            user["username"] = "anonymous".into();
        }
        let doc = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.name, "cluster": cluster}],
            "users": [{"name": self.name, "user": user}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": self.name}}],
            "current-context": self.name,
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
            token: Some("t0ken".into()),
            anonymous: false,
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
            read_token(&dir.join("empty")),
            Err(Error::EmptyToken(_))
        ));
        let _ = std::fs::remove_dir_all(dir);
    }
}
