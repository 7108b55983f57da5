//! HTTPS for `kubefan sim`: a CA made at start, a serving certificate it
//! signs for the listen address (and `localhost`), and a front that takes
//! TLS on the listen address and passes each connection's bytes to the
//! simulator's plain HTTP server on a loopback port of its own.
//!
//! kubectl and client-go send a kubeconfig's bearer token only to an
//! https:// server (client-go's `tools/clientcmd/client_config.go`: the
//! user's credentials are read "only if we are secure"), so a simulator
//! that authorizes requests (`--authorization-mode RBAC`) serves TLS, and
//! the CA goes into the kubeconfig it writes. A front rather than TLS in
//! actix-web: actix-web's rustls feature brings actix-tls's own choice of
//! crypto provider, and two providers in one build make kube's client
//! panic (DESIGN.md); tokio-rustls with ring is the one kubefan uses.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::SimError;

/// A handshake not done in this long is dropped.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The TLS front, serving until its shutdown token is cancelled.
pub struct Front {
    pub addr: SocketAddr,
    /// The CA that signed the serving certificate (PEM).
    pub ca_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl Front {
    /// `https://ADDR`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Waits for the front's accept loop to end (after shutdown).
    pub async fn stopped(self) {
        let _ = self.task.await;
    }
}

fn internal(e: impl std::fmt::Display) -> SimError {
    SimError::Internal(format!("TLS set-up: {e}"))
}

/// A new CA and a certificate it signs for `listen`'s address and
/// `localhost`: (CA PEM, certificate chain, key).
fn certificates(
    listen: SocketAddr,
) -> Result<(String, Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), SimError> {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(internal)?;
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "kubefan sim CA");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    let ca_key = rcgen::KeyPair::generate().map_err(internal)?;
    let ca = rcgen::CertifiedIssuer::self_signed(ca, ca_key).map_err(internal)?;
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let ip = listen.ip();
    if !ip.is_unspecified() && !names.contains(&ip.to_string()) {
        names.push(ip.to_string());
    }
    let mut leaf = rcgen::CertificateParams::new(names).map_err(internal)?;
    leaf.distinguished_name
        .push(rcgen::DnType::CommonName, "kubefan sim");
    let key = rcgen::KeyPair::generate().map_err(internal)?;
    let cert = leaf.signed_by(&key, &*ca).map_err(internal)?;
    let chain = vec![cert.der().clone()];
    let key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).map_err(internal)?;
    Ok((ca.pem(), chain, key))
}

/// Serves TLS on `listen`, each connection passed to `backend`.
pub async fn front(
    listen: SocketAddr,
    backend: SocketAddr,
    shutdown: CancellationToken,
) -> Result<Front, SimError> {
    let (ca_pem, chain, key) = certificates(listen)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(internal)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(internal)?;
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let tcp = tokio::select! {
                _ = shutdown.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        tracing::debug!(error = %e, "accept failed");
                        continue;
                    }
                },
            };
            let (acceptor, shutdown) = (acceptor.clone(), shutdown.clone());
            tokio::spawn(async move {
                let Ok(Ok(mut tls)) =
                    tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
                else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(backend).await else {
                    return;
                };
                tokio::select! {
                    _ = shutdown.cancelled() => {}
                    _ = tokio::io::copy_bidirectional(&mut tls, &mut plain) => {}
                }
            });
        }
    });
    Ok(Front { addr, ca_pem, task })
}
