//! `--auth request-header`: a front proxy's identity headers, over TLS
//! that kubefan serves, believed only from a client certificate of the
//! front-proxy CA with an allowed common name, the user and groups they
//! name authorized by the simulated cluster's RBAC; HTTP/1.1 (reqwest)
//! and HTTP/2 (the h2 crate); `request-header,kubernetes` together.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};

use crate::sse::seeded;
use crate::support::{
    Authority, ClientView, SseClient, TestEnv, WAIT, spawn, test_config, validate_status,
};
use kubefan::config::{AuthMethod, Config};
use kubefan_sim::{Sim, SimUser};

const ROLES: &str = "roles.rbac.authorization.k8s.io";
const ROLE_BINDINGS: &str = "rolebindings.rbac.authorization.k8s.io";
/// The common name the front proxy's certificate has, and kubefan allows.
const PROXY: &str = "front-proxy";

/// A Role that may read pods in `ns`.
fn pod_reader(ns: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "pod-reader", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]})
}

/// A RoleBinding of `pod-reader` in `ns` to `subject` (`kind`: User or Group).
fn binding(name: &str, ns: &str, kind: &str, subject: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}]})
}

/// Pods in default, web and batch; the group `team-web` may read web's,
/// the user `alice@example.com` batch's, the ServiceAccount-like user
/// `robot` (token `robot-token`, group `robots`) default's.
fn team_sim() -> Sim {
    let sim = seeded(18);
    for ns in ["default", "web", "batch"] {
        sim.create(ROLES, pod_reader(ns)).unwrap();
    }
    sim.create(
        ROLE_BINDINGS,
        binding("team-web", "web", "Group", "team-web"),
    )
    .unwrap();
    sim.create(
        ROLE_BINDINGS,
        binding("alice", "batch", "User", "alice@example.com"),
    )
    .unwrap();
    sim.create(
        ROLE_BINDINGS,
        binding("robots", "default", "Group", "robots"),
    )
    .unwrap();
    sim.set_users(vec![SimUser::new("robot-token", "robot", &["robots"])]);
    sim
}

/// The identity a proxy passes on: alice, in team-web.
const ALICE: &[(&str, &str)] = &[
    ("X-Remote-User", "alice@example.com"),
    ("X-Remote-Group", "team-web"),
];

/// The CAs and files of one test: kubefan's serving CA, the front-proxy CA
/// and another one.
struct Pki {
    dir: PathBuf,
    server_ca: Authority,
    proxy_ca: Authority,
    other_ca: Authority,
}

impl Pki {
    fn new() -> Pki {
        let dir = std::env::temp_dir().join(format!(
            "kubefan-front-proxy-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Pki {
            dir,
            server_ca: Authority::new("kubefan serving CA"),
            proxy_ca: Authority::new("front-proxy CA"),
            other_ca: Authority::new("some other CA"),
        }
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// TLS with a certificate of the serving CA; `methods`, the front
    /// proxy trusted by its CA and common name.
    fn config(&self, methods: &[AuthMethod]) -> Config {
        let mut cfg = test_config(&["pods"]);
        let (cert, key) = self.server_ca.leaf("kubefan");
        cfg.tls.cert_file = Some(self.write("tls.crt", &cert));
        cfg.tls.key_file = Some(self.write("tls.key", &key));
        cfg.auth.methods = methods.to_vec();
        cfg.auth.request_header.client_ca_file =
            Some(self.write("front-proxy-ca.crt", &self.proxy_ca.pem()));
        cfg.auth.request_header.allowed_names = vec![PROXY.into()];
        cfg
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Who connects: with which client certificate, if any.
#[derive(Clone, Copy)]
enum Client<'a> {
    None,
    Cert(&'a Authority, &'a str),
}

async fn env(pki: &Pki, methods: &[AuthMethod]) -> TestEnv {
    let env = spawn(team_sim(), pki.config(methods)).await;
    env.synced("pods").await;
    env
}

/// An HTTP/1.1 client (reqwest offers only HTTP/1.1 here) trusting the
/// serving CA, presenting `client`'s certificate.
fn https(pki: &Pki, client: Client<'_>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(
            reqwest::Certificate::from_pem(pki.server_ca.pem().as_bytes()).unwrap(),
        );
    if let Client::Cert(ca, name) = client {
        let (cert, key) = ca.leaf(name);
        let identity = reqwest::Identity::from_pem(format!("{cert}{key}").as_bytes()).unwrap();
        builder = builder.identity(identity);
    }
    builder.build().unwrap()
}

fn base(env: &TestEnv) -> String {
    format!("https://127.0.0.1:{}", env.app.local_addr().port())
}

async fn get(
    http: &reqwest::Client,
    env: &TestEnv,
    path: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = http.get(format!("{}{path}", base(env)));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    tokio::time::timeout(WAIT, req.send())
        .await
        .expect("response in time")
        .expect("request")
}

/// Asserts a 401 with a `Status` body whose message contains `why`.
async fn unauthorized(resp: reqwest::Response, why: &str) {
    assert_eq!(resp.status(), 401, "want 401 for {why:?}");
    let body: Value = resp.json().await.unwrap();
    validate_status(&body);
    let message = body["message"].as_str().unwrap();
    assert!(message.contains(why), "want {why:?} in {message:?}");
}

fn namespaces(view: &ClientView) -> BTreeSet<String> {
    view.objects
        .values()
        .map(|o| o["metadata"]["namespace"].as_str().unwrap().to_string())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// The namespaces of an all-namespace SSE stream's snapshot, over HTTP/1.1.
async fn streamed_namespaces(
    http: &reqwest::Client,
    env: &TestEnv,
    headers: &[(&str, &str)],
) -> BTreeSet<String> {
    let resp = get(http, env, "/stream/pods", headers).await;
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    let view = crate::support::first_snapshot(&mut sse).await;
    namespaces(&view)
}

/// A TLS connection speaking HTTP/2, presenting `client`'s certificate.
async fn h2_connect(
    pki: &Pki,
    addr: SocketAddr,
    client: Client<'_>,
) -> h2::client::SendRequest<Bytes> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pki.server_ca.pem().as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let mut cfg = match client {
        Client::None => builder.with_no_client_auth(),
        Client::Cert(ca, name) => {
            let (cert, key) = ca.leaf(name);
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio::time::timeout(
        WAIT,
        tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp),
    )
    .await
    .expect("handshake in time")
    .expect("handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (send, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    send
}

/// An HTTP/2 GET: its status and its body up to `until` (or its end).
async fn h2_get(
    send: &mut h2::client::SendRequest<Bytes>,
    path: &str,
    headers: &[(&str, &str)],
    until: &str,
) -> (u16, String) {
    let mut req = http::Request::get(format!("https://127.0.0.1{path}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let (response, _) = send.send_request(req.body(()).unwrap(), true).unwrap();
    tokio::time::timeout(WAIT, async {
        let response = response.await.unwrap();
        let status = response.status().as_u16();
        let mut body = response.into_body();
        let mut text = String::new();
        while !text.contains(until) {
            let Some(data) = body.data().await else { break };
            let data = data.unwrap();
            let _ = body.flow_control().release_capacity(data.len());
            text.push_str(&String::from_utf8_lossy(&data));
        }
        (status, text)
    })
    .await
    .expect("HTTP/2 response in time")
}

/// The namespaces named in `text` (`"namespace":"…"`).
fn named_namespaces(text: &str) -> BTreeSet<String> {
    text.split("\"namespace\":\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_proxy_names_the_user_and_groups_and_rbac_narrows_their_streams() {
    let pki = Pki::new();
    let env = env(&pki, &[AuthMethod::RequestHeader]).await;
    let proxy = https(&pki, Client::Cert(&pki.proxy_ca, PROXY));

    // HTTP/1.1: alice's own binding (batch) and her group's (web), not default.
    assert_eq!(
        streamed_namespaces(&proxy, &env, ALICE).await,
        set(&["batch", "web"])
    );
    let resp = get(&proxy, &env, "/api/v1/namespaces/default/pods", ALICE).await;
    assert_eq!(
        resp.status(),
        403,
        "authorized by RBAC, not refused as unknown"
    );
    // Another group through the same proxy: another view.
    let bob = [
        ("X-Remote-User", "bob@example.com"),
        ("X-Remote-Group", "team-web"),
    ];
    assert_eq!(streamed_namespaces(&proxy, &env, &bob).await, set(&["web"]));

    // HTTP/2: the same identity from the same certificate.
    let mut h2 = h2_connect(
        &pki,
        env.app.local_addr(),
        Client::Cert(&pki.proxy_ca, PROXY),
    )
    .await;
    let (status, text) = h2_get(&mut h2, "/stream/pods", ALICE, "k8s.io/initial-events-end").await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(named_namespaces(&text), set(&["batch", "web"]));
    let (status, _) = h2_get(
        &mut h2,
        "/api/v1/namespaces/default/pods",
        ALICE,
        "\"kind\"",
    )
    .await;
    assert_eq!(status, 403);

    // A trusted proxy that names nobody: no identity, and no other authenticator.
    let resp = get(
        &proxy,
        &env,
        "/api/v1/namespaces/web/pods",
        &[("X-Remote-Group", "team-web")],
    )
    .await;
    unauthorized(resp, "the front proxy named no user").await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_headers_from_anyone_but_the_front_proxy_are_never_believed() {
    let pki = Pki::new();
    let env = env(&pki, &[AuthMethod::RequestHeader]).await;
    let cases = [
        (Client::None, "no client certificate"),
        (
            Client::Cert(&pki.other_ca, PROXY),
            "not one of --requestheader-client-ca-file",
        ),
        (
            Client::Cert(&pki.proxy_ca, "not-the-proxy"),
            "is not in --requestheader-allowed-names",
        ),
    ];
    let admin = [
        ("X-Remote-User", "admin"),
        ("X-Remote-Group", "system:masters"),
    ];
    for (client, why) in cases {
        // HTTP/1.1: the handshake succeeds (a foreign certificate is no
        // identity, not a broken connection), the headers are ignored.
        let http = https(&pki, client);
        let resp = get(&http, &env, "/api/v1/namespaces/web/pods", ALICE).await;
        unauthorized(resp, why).await;
        let resp = get(&http, &env, "/stream/pods", &admin).await;
        unauthorized(resp, why).await;

        // HTTP/2 likewise.
        let mut h2 = h2_connect(&pki, env.app.local_addr(), client).await;
        let (status, text) = h2_get(&mut h2, "/stream/pods", ALICE, "\"code\"").await;
        assert_eq!(status, 401, "{why}: {text}");
        assert!(text.contains(why), "want {why:?} in {text}");
    }
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_header_is_refused_without_tls_on_kubefans_listener() {
    let pki = Pki::new();
    let mut cfg = pki.config(&[AuthMethod::RequestHeader]);
    cfg.tls.cert_file = None;
    cfg.tls.key_file = None;
    let err = cfg.validate().unwrap_err().to_string();
    assert!(
        err.contains("needs TLS") && err.contains("client certificate"),
        "{err}"
    );
    let sim = team_sim();
    let server = sim.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let client = kube::Client::try_from(server.client_config()).unwrap();
    let err = match kubefan::app::App::build(cfg, client).await {
        Ok(_) => panic!("plain HTTP with --auth request-header started"),
        Err(err) => err.to_string(),
    };
    assert!(err.contains("needs TLS"), "{err}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_kubernetes_too_clients_without_a_certificate_fall_through_to_token_review() {
    let pki = Pki::new();
    let env = env(&pki, &[AuthMethod::RequestHeader, AuthMethod::Kubernetes]).await;
    let direct = https(&pki, Client::None);

    // A service's token, reviewed by the API server.
    let robot = [("Authorization", "Bearer robot-token")];
    let resp = get(&direct, &env, "/api/v1/namespaces/default/pods", &robot).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(env.app.authorizer().token_reviews(), 1);

    // Headers beside a token, from a client that is not the proxy: the
    // token's user (robot, who may not read web), never alice.
    let mut both = robot.to_vec();
    both.extend_from_slice(ALICE);
    let resp = get(&direct, &env, "/api/v1/namespaces/web/pods", &both).await;
    assert_eq!(resp.status(), 403, "robot's rights, not alice's");
    // Neither a certificate nor a token: 401, saying how to authenticate.
    let resp = get(&direct, &env, "/api/v1/namespaces/web/pods", ALICE).await;
    unauthorized(resp, "no token").await;

    // Through the proxy: alice, without a TokenReview.
    let reviews = env.app.authorizer().token_reviews();
    let proxy = https(&pki, Client::Cert(&pki.proxy_ca, PROXY));
    let resp = get(&proxy, &env, "/api/v1/namespaces/web/pods", ALICE).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(env.app.authorizer().token_reviews(), reviews);
    // The proxy's own ServiceAccount token, when it names nobody: the token.
    let resp = get(&proxy, &env, "/api/v1/namespaces/default/pods", &robot).await;
    assert_eq!(resp.status(), 200);
    env.stop().await;
}
