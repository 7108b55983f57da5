//! A minimal OpenID Connect issuer for the gateway's tests: the discovery
//! document and a JWKS over HTTPS (a test CA's certificate), keys that can
//! be rotated, a switch that makes it refuse connections, and counts of
//! what it was asked. Tokens are minted by the tests, so that every bad
//! token an issuer never mints (wrong audience, `alg: none`, algorithm
//! confusion) can be made too. (`web-test/oidc/` runs a real, certified
//! provider for the browser's sign-in.)

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::Authority;

/// A signing key and the `kid` it is published under.
#[derive(Clone)]
pub struct SigningKey {
    pub kid: String,
    pub key: EncodingKey,
    pub jwk: Jwk,
}

impl SigningKey {
    /// An RSA key from `tests/fixtures/jwt/<file>`.
    pub fn rsa(file: &str, kid: &str) -> SigningKey {
        let pem = std::fs::read(
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jwt")).join(file),
        )
        .unwrap();
        let key = EncodingKey::from_rsa_pem(&pem).unwrap();
        let mut jwk = Jwk::from_encoding_key(&key, Algorithm::RS256).unwrap();
        jwk.common.key_id = Some(kid.to_string());
        SigningKey {
            kid: kid.to_string(),
            key,
            jwk,
        }
    }

    /// `claims`, signed RS256 with this key and its `kid`.
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.kid.clone());
        encode(&header, claims, &self.key).unwrap()
    }
}

#[derive(Default)]
pub struct Counts {
    pub discovery: AtomicU64,
    pub jwks: AtomicU64,
}

struct State {
    up: AtomicBool,
    published: Mutex<Vec<Jwk>>,
    counts: Counts,
}

pub struct Issuer {
    pub url: String,
    /// The test CA's certificate, for `--oidc-ca-file`.
    pub ca_file: PathBuf,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Issuer {
    /// Serves on 127.0.0.1 (a free port), publishing `keys`.
    pub async fn start(keys: &[&SigningKey]) -> Issuer {
        let authority = Authority::new("kubefan test issuer CA");
        let (cert, key) = authority.leaf("issuer");
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("kubefan-issuer-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, authority.pem()).unwrap();

        use rustls::pki_types::pem::PemObject;
        let certs = rustls::pki_types::CertificateDer::pem_slice_iter(cert.as_bytes())
            .map(Result::unwrap)
            .collect();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let state = Arc::new(State {
            up: AtomicBool::new(true),
            published: Mutex::new(keys.iter().map(|k| k.jwk.clone()).collect()),
            counts: Counts::default(),
        });
        let (serving, issuer) = (state.clone(), url.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                if !serving.up.load(Ordering::Acquire) {
                    drop(socket);
                    continue;
                }
                let (acceptor, state, issuer) = (acceptor.clone(), serving.clone(), issuer.clone());
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(socket).await {
                        let _ = answer(tls, &state, &issuer).await;
                    }
                });
            }
        });
        Issuer {
            url,
            ca_file,
            state,
            task,
        }
    }

    /// Connections are refused (closed at once) while `up` is false.
    pub fn set_up(&self, up: bool) {
        self.state.up.store(up, Ordering::Release);
    }

    /// Publishes `keys` instead of the keys published so far.
    pub fn publish(&self, keys: &[&SigningKey]) {
        *self.state.published.lock().unwrap() = keys.iter().map(|k| k.jwk.clone()).collect();
    }

    pub fn counts(&self) -> &Counts {
        &self.state.counts
    }

    pub fn jwks_fetches(&self) -> u64 {
        self.state.counts.jwks.load(Ordering::Relaxed)
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request head and answers it, then closes.
async fn answer<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut tls: S,
    state: &State,
    issuer: &str,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = tls.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let (status, body) = match path {
        "/.well-known/openid-configuration" => {
            state.counts.discovery.fetch_add(1, Ordering::Relaxed);
            let doc = json!({
                "issuer": issuer,
                "jwks_uri": format!("{issuer}/jwks"),
                "authorization_endpoint": format!("{issuer}/auth"),
                "token_endpoint": format!("{issuer}/token"),
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
            });
            ("200 OK", doc.to_string())
        }
        "/jwks" => {
            state.counts.jwks.fetch_add(1, Ordering::Relaxed);
            let set = JwkSet {
                keys: state.published.lock().unwrap().clone(),
            };
            ("200 OK", serde_json::to_string(&set).unwrap())
        }
        _ => ("404 Not Found", "{}".to_string()),
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(resp.as_bytes()).await?;
    tls.shutdown().await
}
