//! A minimal OpenID Connect issuer for the gateway's tests: the discovery
//! document and a JWKS over HTTPS (a test CA's certificate), keys that can
//! be rotated, a switch that makes it refuse connections, counts of what
//! it was asked, and an authorization endpoint that signs in whoever
//! `sign_in_as` names at once, with a token endpoint that checks PKCE,
//! takes each code once and rotates refresh tokens. Tokens are minted by the tests, so that every bad
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
    pub codes_exchanged: AtomicU64,
    pub refreshes: AtomicU64,
}

/// A code handed out and not yet exchanged.
struct Code {
    challenge: String,
    redirect_uri: String,
    nonce: String,
    email: String,
}

/// What the authorization and token endpoints keep.
struct Flows {
    /// Who the authorization endpoint signs in.
    sign_in_as: String,
    /// Users' claims by email (`groups`).
    groups: std::collections::HashMap<String, Vec<String>>,
    codes: std::collections::HashMap<String, Code>,
    /// Live refresh tokens, by token: the email they refresh.
    refresh: std::collections::HashMap<String, String>,
    id_token_ttl: u64,
    signer: Option<SigningKey>,
    /// A confidential client's secret, asked of the token endpoint by
    /// HTTP Basic (RFC 6749, 2.3.1); none: a public client.
    client_secret: Option<String>,
}

struct State {
    up: AtomicBool,
    published: Mutex<Vec<Jwk>>,
    counts: Counts,
    flows: Mutex<Flows>,
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
            flows: Mutex::new(Flows {
                sign_in_as: String::new(),
                groups: Default::default(),
                codes: Default::default(),
                refresh: Default::default(),
                id_token_ttl: 300,
                signer: keys.first().map(|k| (*k).clone()),
                client_secret: None,
            }),
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

    /// The authorization endpoint signs in `email`, in `groups`, from now.
    pub fn sign_in_as(&self, email: &str, groups: &[&str]) {
        let mut flows = self.state.flows.lock().unwrap();
        flows.sign_in_as = email.to_string();
        flows
            .groups
            .insert(email.into(), groups.iter().map(|g| g.to_string()).collect());
    }

    /// The lifetime of id-tokens issued from now.
    pub fn set_id_token_ttl(&self, secs: u64) {
        self.state.flows.lock().unwrap().id_token_ttl = secs;
    }

    /// The token endpoint asks for this client secret from now on.
    pub fn require_client_secret(&self, secret: &str) {
        self.state.flows.lock().unwrap().client_secret = Some(secret.to_string());
    }

    /// Revokes every refresh token (the user was disabled).
    pub fn revoke_refresh_tokens(&self) {
        self.state.flows.lock().unwrap().refresh.clear();
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one request (head and body), answers it, then closes.
async fn answer<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut tls: S,
    state: &State,
    issuer: &str,
) -> std::io::Result<()> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = tls.read(&mut buf).await?;
        if n == 0 || data.len() > 65536 {
            return Ok(());
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while data.len() < head_end + length {
        let n = tls.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        data.extend_from_slice(&buf[..n]);
    }
    let body = &data[head_end..head_end + length];
    let target = head.split_whitespace().nth(1).unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let form = |bytes: &[u8]| -> std::collections::HashMap<String, String> {
        oauth2::url::form_urlencoded::parse(bytes)
            .into_owned()
            .collect()
    };
    let json_ok = |v: Value| ("200 OK", v.to_string(), None);
    let (status, body, location): (&str, String, Option<String>) = match path {
        "/.well-known/openid-configuration" => {
            state.counts.discovery.fetch_add(1, Ordering::Relaxed);
            json_ok(json!({
                "issuer": issuer,
                "jwks_uri": format!("{issuer}/jwks"),
                "authorization_endpoint": format!("{issuer}/auth"),
                "token_endpoint": format!("{issuer}/token"),
                "end_session_endpoint": format!("{issuer}/session/end"),
                "response_types_supported": ["code"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
            }))
        }
        "/jwks" => {
            state.counts.jwks.fetch_add(1, Ordering::Relaxed);
            let set = JwkSet {
                keys: state.published.lock().unwrap().clone(),
            };
            json_ok(serde_json::to_value(&set).unwrap())
        }
        "/auth" => {
            let q = form(query.as_bytes());
            let mut flows = state.flows.lock().unwrap();
            let code = uuid::Uuid::new_v4().to_string();
            let redirect_uri = q.get("redirect_uri").cloned().unwrap_or_default();
            let pkce = q.get("code_challenge_method").map(String::as_str) == Some("S256");
            if !pkce {
                let to = format!(
                    "{redirect_uri}?error=invalid_request&state={}",
                    q.get("state").cloned().unwrap_or_default()
                );
                ("302 Found", String::new(), Some(to))
            } else {
                let email = flows.sign_in_as.clone();
                flows.codes.insert(
                    code.clone(),
                    Code {
                        challenge: q.get("code_challenge").cloned().unwrap_or_default(),
                        redirect_uri: redirect_uri.clone(),
                        nonce: q.get("nonce").cloned().unwrap_or_default(),
                        email,
                    },
                );
                let state_param: String = oauth2::url::form_urlencoded::byte_serialize(
                    q.get("state").cloned().unwrap_or_default().as_bytes(),
                )
                .collect();
                let to = format!("{redirect_uri}?code={code}&state={state_param}");
                ("302 Found", String::new(), Some(to))
            }
        }
        "/token" => {
            let f = form(body);
            let mut flows = state.flows.lock().unwrap();
            let invalid = |why: &str| {
                (
                    "400 Bad Request",
                    json!({"error": "invalid_grant", "error_description": why}).to_string(),
                    None,
                )
            };
            let grant = f.get("grant_type").map(String::as_str);
            let basic = head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("authorization")
                    .then(|| v.trim().strip_prefix("Basic ").map(str::to_string))?
            });
            let authenticated = match &flows.client_secret {
                None => true,
                Some(secret) => {
                    use base64::Engine;
                    let want = base64::engine::general_purpose::STANDARD
                        .encode(format!("kubefan:{secret}"));
                    basic.as_deref() == Some(want.as_str())
                }
            };
            let granted = if !authenticated {
                Err("client authentication failed")
            } else {
                match grant {
                    Some("authorization_code") => {
                        state.counts.codes_exchanged.fetch_add(1, Ordering::Relaxed);
                        match flows
                            .codes
                            .remove(f.get("code").map(String::as_str).unwrap_or(""))
                        {
                            None => Err("the code is unknown or was used"),
                            Some(code) => {
                                use base64::Engine;
                                use sha2::Digest;
                                let verifier = f.get("code_verifier").cloned().unwrap_or_default();
                                let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
                                    .encode(sha2::Sha256::digest(verifier.as_bytes()));
                                if challenge != code.challenge {
                                    Err("PKCE verification failed")
                                } else if f.get("redirect_uri") != Some(&code.redirect_uri) {
                                    Err("redirect_uri differs")
                                } else {
                                    Ok((code.email, Some(code.nonce)))
                                }
                            }
                        }
                    }
                    Some("refresh_token") => {
                        state.counts.refreshes.fetch_add(1, Ordering::Relaxed);
                        match flows
                            .refresh
                            .remove(f.get("refresh_token").map(String::as_str).unwrap_or(""))
                        {
                            Some(email) => Ok((email, None)),
                            None => Err("the refresh token is unknown, used or revoked"),
                        }
                    }
                    _ => Err("unsupported grant"),
                }
            };
            match granted {
                Err(why) => invalid(why),
                Ok((email, nonce)) => {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_secs();
                    let mut claims = json!({
                        "iss": issuer, "aud": f.get("client_id").cloned().unwrap_or_else(|| "kubefan".into()),
                        "sub": format!("id-{email}"), "email": email, "email_verified": true,
                        "groups": flows.groups.get(&email).cloned().unwrap_or_default(),
                        "hd": "example.com", "iat": now, "exp": now + flows.id_token_ttl,
                    });
                    if let Some(nonce) = nonce {
                        claims["nonce"] = json!(nonce);
                    }
                    let id_token = flows.signer.as_ref().unwrap().sign(&claims);
                    let refresh = uuid::Uuid::new_v4().to_string();
                    flows.refresh.insert(refresh.clone(), email);
                    json_ok(json!({
                        "access_token": uuid::Uuid::new_v4().to_string(),
                        "token_type": "Bearer", "expires_in": flows.id_token_ttl,
                        "id_token": id_token, "refresh_token": refresh,
                    }))
                }
            }
        }
        _ => ("404 Not Found", "{}".to_string(), None),
    };
    let location = location
        .map(|l| format!("location: {l}\r\n"))
        .unwrap_or_default();
    let resp = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{location}connection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(resp.as_bytes()).await?;
    tls.shutdown().await
}
