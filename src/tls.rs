//! TLS serving: the certificate kubefan presents, read from PEM files
//! (`--tls-cert-file`, `--tls-key-file`: typically a cert-manager Secret
//! mounted as files) and re-read when they change, and the rustls server
//! configuration built on it.
//!
//! rustls runs with ring, the provider kube's client already uses: a second
//! provider in the build makes kube's client set-up panic (ARCHITECTURE.md,
//! "Dependencies' sharp edges"), and `deny.toml` bans aws-lc. The provider
//! is named here, not taken from a process-wide default.
//!
//! Client certificates (`--auth request-header`): [`ClientCa`] holds
//! `--requestheader-client-ca-file`. The handshake *asks* for a client
//! certificate (hinting that CA's name) but requires none, and accepts
//! whatever chain is presented once the client has proved it holds the
//! key (its CertificateVerify signature is checked); the chain itself is
//! checked against the CA per request, by `auth::request_header`. That is
//! kube-apiserver's split (`tls.RequestClientCert` in
//! `k8s.io/apiserver/pkg/server/secure_serving.go`, then the x509
//! verifier in `k8s.io/apiserver/pkg/authentication/request/x509`): a
//! certificate from another CA, or an expired one, is no identity but
//! does not break the connection, so the request falls to the other
//! authenticators (a bearer token) instead of failing its handshake. The
//! presented chain reaches requests as [`PeerCertificates`].
//!
//! Reloading: [`Certificate::watch`] reads both files once a second. When
//! their contents changed and form a valid pair, every handshake from then
//! on presents the new pair; connections already open keep the session
//! they negotiated, so no stream is dropped. A pair that does not load (a
//! key replaced before its certificate, a truncated file) keeps the old
//! certificate and is logged once per content, and is tried again as soon
//! as either file changes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use crate::lifecycle::Lifecycle;

/// How often the files are looked at.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// ALPN protocols offered, preferred first: HTTP/2, then HTTP/1.1.
pub const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// A certificate or key that cannot be served. Every message names the
/// flag and the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read --tls-{flag}-file {path}: {source}")]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--tls-cert-file {0} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    NoCertificate(PathBuf),
    #[error("--tls-{flag}-file {path}: malformed PEM: {reason}")]
    Pem {
        flag: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error(
        "--tls-key-file {0} holds no PEM private key (PKCS#8 PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)"
    )]
    NoKey(PathBuf),
    #[error("--tls-key-file {path}: unusable private key: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("--tls-cert-file {path}: not a usable certificate: {reason}")]
    Certificate { path: PathBuf, reason: String },
    #[error(
        "--tls-key-file {key} is not the private key of the certificate in --tls-cert-file {cert}"
    )]
    Mismatch { cert: PathBuf, key: PathBuf },
    #[error("TLS set-up: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("cannot read --requestheader-client-ca-file {path}: {source}")]
    ReadClientCa {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--requestheader-client-ca-file {path}: {reason}")]
    ClientCa { path: PathBuf, reason: String },
}

/// The certificate and key being served, and the files they come from.
pub struct Certificate {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<CertifiedKey>>,
    /// The two files' contents last looked at, loaded or refused.
    seen: Mutex<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Certificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificate")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
}

impl Certificate {
    /// Reads the pair; any problem is an error naming the file and what is
    /// wrong with it.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Arc<Certificate>, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cert_pem = read("cert", cert_file)?;
        let key_pem = read("key", key_file)?;
        let key = certified_key(cert_file, &cert_pem, key_file, &key_pem, &provider)?;
        Ok(Arc::new(Certificate {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            provider,
            current: RwLock::new(Arc::new(key)),
            seen: Mutex::new((cert_pem, key_pem)),
        }))
    }

    /// The certificate chain served now (end-entity first), DER-encoded.
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.served().cert.clone()
    }

    fn served(&self) -> Arc<CertifiedKey> {
        // A poisoned lock still holds a whole Arc: nothing is written
        // under it but one assignment.
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Reads the files again. `Ok(true)`: a new pair is served from now
    /// on; `Ok(false)`: nothing changed since the last look; an error: the
    /// changed files do not load, and the old pair stays.
    pub fn reload(&self) -> Result<bool, Error> {
        let cert_pem = read("cert", &self.cert_file)?;
        let key_pem = read("key", &self.key_file)?;
        {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.0 == cert_pem && seen.1 == key_pem {
                return Ok(false);
            }
            *seen = (cert_pem.clone(), key_pem.clone());
        }
        let key = certified_key(
            &self.cert_file,
            &cert_pem,
            &self.key_file,
            &key_pem,
            &self.provider,
        )?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(key);
        Ok(true)
    }

    /// Re-reads the files once a second until shutdown (see the module
    /// documentation).
    pub fn watch(self: Arc<Self>, lifecycle: Arc<Lifecycle>) {
        tokio::spawn(async move {
            let mut last_error = None;
            loop {
                tokio::select! {
                    _ = lifecycle.shutting_down() => return,
                    _ = tokio::time::sleep(WATCH_INTERVAL) => {}
                }
                let cert = self.clone();
                let Ok(result) = tokio::task::spawn_blocking(move || cert.reload()).await else {
                    continue;
                };
                match result {
                    Ok(true) => {
                        last_error = None;
                        tracing::info!(cert = %self.cert_file.display(), key = %self.key_file.display(), "TLS certificate reloaded: new connections get it");
                    }
                    Ok(false) => {}
                    Err(err) => {
                        let text = err.to_string();
                        if last_error.as_ref() != Some(&text) {
                            tracing::warn!(error = %text, "TLS certificate not reloaded; still serving the previous one");
                            last_error = Some(text);
                        }
                    }
                }
            }
        });
    }

    /// The rustls server configuration: ring, TLS 1.2 and 1.3, ALPN `h2`
    /// then `http/1.1`, this certificate (as it is at each handshake);
    /// with `client_ca`, a client certificate asked for, not required
    /// (see the module documentation).
    pub fn server_config(
        self: &Arc<Self>,
        client_ca: Option<&ClientCa>,
    ) -> Result<Arc<rustls::ServerConfig>, Error> {
        let builder = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match client_ca {
            Some(ca) => {
                builder.with_client_cert_verifier(Arc::new(RequestClientCert(ca.verifier.clone())))
            }
            None => builder.with_no_client_auth(),
        };
        let mut cfg = builder.with_cert_resolver(Arc::new(Resolver(self.clone())));
        cfg.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(cfg))
    }
}

/// `--requestheader-client-ca-file`: the CAs whose client certificates
/// may send a front proxy's identity headers, and the verifier (webpki,
/// ring) that checks a presented chain against them for client use.
#[derive(Clone)]
pub struct ClientCa {
    file: PathBuf,
    verifier: Arc<dyn ClientCertVerifier>,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl ClientCa {
    /// Reads the PEM certificates of `file`; an error names the file and
    /// what is wrong with it.
    pub fn load(file: &Path) -> Result<ClientCa, Error> {
        let bad = |reason: String| Error::ClientCa {
            path: file.to_path_buf(),
            reason,
        };
        let pem = std::fs::read(file).map_err(|source| Error::ReadClientCa {
            path: file.to_path_buf(),
            source,
        })?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| bad(format!("malformed PEM: {err}")))?;
        if certs.is_empty() {
            return Err(bad(
                "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
            ));
        }
        let mut roots = rustls::RootCertStore::empty();
        for cert in certs {
            roots
                .add(cert)
                .map_err(|err| bad(format!("not a usable CA certificate: {err}")))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .allow_unauthenticated()
        .build()
        .map_err(|err| bad(err.to_string()))?;
        Ok(ClientCa {
            file: file.to_path_buf(),
            verifier,
        })
    }

    /// Checks `chain` (end-entity first, as the client sent it) against
    /// the CAs at `now`, for client authentication (an extended key usage,
    /// when present, must allow it).
    pub fn verify(&self, chain: &PeerCertificates, now: UnixTime) -> Result<(), rustls::Error> {
        let (end_entity, intermediates) = chain
            .0
            .split_first()
            .ok_or(rustls::Error::NoCertificatesPresented)?;
        self.verifier
            .verify_client_cert(end_entity, intermediates, now)
            .map(|_| ())
    }
}

/// The certificate chain a TLS client presented (end-entity first), its
/// key proven in the handshake but its issuer not yet checked: what a
/// connection carries to each of its requests ([`ClientCa::verify`]).
#[derive(Debug, Clone)]
pub struct PeerCertificates(pub Arc<[CertificateDer<'static>]>);

impl PeerCertificates {
    /// What the client of `session` presented, if anything.
    pub fn of(session: &rustls::ServerConnection) -> Option<PeerCertificates> {
        let chain = session.peer_certificates().filter(|c| !c.is_empty())?;
        Some(PeerCertificates(
            chain.iter().map(|c| c.clone().into_owned()).collect(),
        ))
    }

    /// The end-entity certificate.
    pub fn end_entity(&self) -> &CertificateDer<'static> {
        &self.0[0]
    }
}

/// The handshake's side of client certificates: asks for one, hinting
/// the client CA's names, requires none, and checks only that a client
/// presenting one holds its key; the chain is checked per request
/// ([`ClientCa::verify`], see the module documentation).
#[derive(Debug)]
struct RequestClientCert(Arc<dyn ClientCertVerifier>);

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.0.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // Not an identity yet: `ClientCa::verify` decides, per request.
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// Hands every handshake the pair served at that moment.
#[derive(Debug)]
struct Resolver(Arc<Certificate>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.served())
    }
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|source| Error::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })
}

/// Parses a PEM certificate chain and private key into a pair whose key
/// matches the end-entity certificate.
fn certified_key(
    cert_file: &Path,
    cert_pem: &[u8],
    key_file: &Path,
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, Error> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| Error::Pem {
            flag: "cert",
            path: cert_file.to_path_buf(),
            reason: err.to_string(),
        })?;
    if chain.is_empty() {
        return Err(Error::NoCertificate(cert_file.to_path_buf()));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|err| match err {
        pem::Error::NoItemsFound => Error::NoKey(key_file.to_path_buf()),
        err => Error::Pem {
            flag: "key",
            path: key_file.to_path_buf(),
            reason: err.to_string(),
        },
    })?;
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|err| Error::Key {
            path: key_file.to_path_buf(),
            reason: err.to_string(),
        })?;
    let pair = CertifiedKey::new(chain, signing_key);
    match pair.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(pair)
        }
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(Error::Mismatch {
                cert: cert_file.to_path_buf(),
                key: key_file.to_path_buf(),
            })
        }
        Err(err) => Err(Error::Certificate {
            path: cert_file.to_path_buf(),
            reason: err.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for `name` and its key, as PEM.
    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "kubefan-tls-{name}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn every_bad_pair_is_an_error_naming_the_file_and_the_problem() {
        let dir = temp_dir("bad");
        let (cert_a, key_a) = pair("a.example");
        let (_, key_b) = pair("b.example");
        let cert = write(&dir, "tls.crt", &cert_a);
        let key = write(&dir, "tls.key", &key_a);
        Certificate::load(&cert, &key).unwrap();

        let missing = dir.join("missing.crt");
        let err = Certificate::load(&missing, &key).unwrap_err();
        assert!(matches!(err, Error::Read { flag: "cert", .. }), "{err}");
        assert!(err.to_string().contains("missing.crt"), "{err}");

        let empty = write(&dir, "empty.crt", "not a certificate\n");
        let err = Certificate::load(&empty, &key).unwrap_err();
        assert!(matches!(err, Error::NoCertificate(_)), "{err}");
        assert!(err.to_string().contains("empty.crt"), "{err}");

        let truncated = write(&dir, "cut.crt", &cert_a[..cert_a.len() / 2]);
        let err = Certificate::load(&truncated, &key).unwrap_err();
        assert!(err.to_string().contains("cut.crt"), "{err}");

        let garbage = write(
            &dir,
            "garbage.crt",
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        );
        let err = Certificate::load(&garbage, &key).unwrap_err();
        assert!(err.to_string().contains("garbage.crt"), "{err}");

        let err = Certificate::load(&cert, &cert).unwrap_err();
        assert!(matches!(err, Error::NoKey(_)), "{err}");

        let other = write(&dir, "other.key", &key_b);
        let err = Certificate::load(&cert, &other).unwrap_err();
        assert!(matches!(err, Error::Mismatch { .. }), "{err}");
        assert!(
            err.to_string().contains("other.key") && err.to_string().contains("tls.crt"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_reload_takes_a_new_pair_and_keeps_the_old_one_when_the_new_is_bad() {
        let dir = temp_dir("reload");
        let (cert_a, key_a) = pair("a.example");
        let (cert_b, key_b) = pair("b.example");
        let cert = write(&dir, "tls.crt", &cert_a);
        let key = write(&dir, "tls.key", &key_a);
        let served = Certificate::load(&cert, &key).unwrap();
        let first = served.chain();
        assert!(!served.reload().unwrap(), "nothing changed");

        // The certificate first: a mismatched pair for a moment.
        write(&dir, "tls.crt", &cert_b);
        assert!(matches!(served.reload(), Err(Error::Mismatch { .. })));
        assert_eq!(served.chain(), first, "the old pair is still served");
        assert!(!served.reload().unwrap(), "a refused pair is not retried");

        write(&dir, "tls.key", &key_b);
        assert!(served.reload().unwrap());
        assert_ne!(served.chain(), first);
        let _ = std::fs::remove_dir_all(dir);
    }
}
