//! TLS serving: the certificate kubefan presents, read from PEM files
//! (`--tls-cert-file`, `--tls-key-file`: typically a cert-manager Secret
//! mounted as files) and re-read when they change, and the rustls server
//! configuration built on it.
//!
//! rustls runs with ring, the provider kube's client already uses: a second
//! provider in the build makes kube's client set-up panic (DESIGN.md), and
//! `deny.toml` bans aws-lc. The provider is named here, not taken from a
//! process-wide default.
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

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

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
    /// then `http/1.1`, this certificate (as it is at each handshake).
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, Error> {
        let mut cfg = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(self.clone())));
        cfg.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(cfg))
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
