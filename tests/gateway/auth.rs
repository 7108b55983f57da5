//! Authentication, authorization, origins and limits, end to end: JWT
//! (HMAC secret, PEM keys, JWKS) and Kubernetes (TokenReview and
//! SubjectAccessReview against the simulated API server) on SSE, WebSocket
//! and the Kubernetes face.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::{SinkExt, StreamExt};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::sse::{pods_of, seeded};
use crate::support::{
    ClientView, SseClient, SseEvent, TestEnv, WAIT, spawn, test_config, validate_def,
    validate_status,
};
use kubefan::config::{AuthMethod, AuthorizationMode, Config};
use kubefan_sim::{SimRule, SimUser, Subject, pod};

const SECRET: &str = "kubefan-test-secret";
const ISSUER: &str = "https://issuer.test";
const AUDIENCE: &str = "kubefan";

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/jwt")).join(name)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A file in a fresh directory under cargo's temporary directory for
/// integration tests (`target/tmp`, emptied by `cargo clean`): the gateway
/// reads it for as long as a test runs, so nothing removes it then, and
/// hundreds of runs left hundreds of directories in `/tmp`.
fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kubefan-auth-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// JWT mode with an HMAC secret, issuer and audience, no leeway.
pub(crate) fn jwt_config() -> Config {
    let mut cfg = test_config(&["pods"]);
    cfg.auth.set(AuthMethod::Jwt);
    cfg.auth.jwt.secret_file = Some(temp_file("secret", format!("{SECRET}\n").as_bytes()));
    cfg.auth.jwt.issuers = vec![ISSUER.into()];
    cfg.auth.jwt.audiences = vec![AUDIENCE.into()];
    cfg.auth.jwt.leeway = Duration::ZERO;
    cfg
}

/// Claims for `sub` granting `namespaces` and `resources`, valid for `ttl` seconds.
pub(crate) fn claims(sub: &str, namespaces: &[&str], resources: &[&str], ttl: u64) -> Value {
    json!({
        "sub": sub,
        "iss": ISSUER,
        "aud": AUDIENCE,
        "exp": now() + ttl,
        "kubefan/namespaces": namespaces,
        "kubefan/resources": resources,
    })
}

pub(crate) fn hs256(claims: &Value) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn signed(claims: &Value, alg: Algorithm, kid: Option<&str>, key: &EncodingKey) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_string);
    encode(&header, claims, key).unwrap()
}

fn pem_key(name: &str, alg: Algorithm) -> EncodingKey {
    let pem = std::fs::read(fixture(name)).unwrap();
    match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem).unwrap(),
        Algorithm::ES256 => EncodingKey::from_ec_pem(&pem).unwrap(),
        _ => EncodingKey::from_ed_pem(&pem).unwrap(),
    }
}

/// Where a request carries its token.
#[derive(Clone, Copy, Debug)]
enum Place {
    Header,
    Query,
    Cookie,
}

async fn get(env: &TestEnv, path: &str, token: Option<(&str, Place)>) -> reqwest::Response {
    let mut url = format!("{}{}", env.base, path);
    let mut req = env.http.get(&url);
    match token {
        Some((t, Place::Header)) => req = req.bearer_auth(t),
        Some((t, Place::Cookie)) => req = req.header("Cookie", format!("a=b; kubefan_token={t}")),
        Some((t, Place::Query)) => {
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str(&format!("access_token={t}"));
            req = env.http.get(&url);
        }
        None => {}
    }
    tokio::time::timeout(WAIT, req.send())
        .await
        .expect("response in time")
        .expect("request")
}

/// Asserts a refusal: status code, a `Status` body naming `reason`, and
/// the message containing `says`.
async fn refused(resp: reqwest::Response, code: u16, says: &str) -> reqwest::header::HeaderMap {
    assert_eq!(resp.status(), code, "{:?}", resp.headers());
    let headers = resp.headers().clone();
    let body: Value = resp.json().await.expect("a Status body");
    validate_status(&body);
    assert_eq!(body["code"], code);
    assert!(
        body["message"].as_str().unwrap().contains(says),
        "{body} should say {says:?}"
    );
    headers
}

async fn sse_ok(env: &TestEnv, path: &str, token: Option<(&str, Place)>) -> SseClient {
    let resp = get(env, path, token).await;
    assert_eq!(resp.status(), 200, "GET {path}");
    SseClient::new(resp)
}

/// Reads a stream's snapshot.
async fn snapshot(sse: &mut SseClient) -> ClientView {
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        view.apply(&sse.next().await.expect("snapshot"));
    }
    view
}

fn namespaces_of(view: &ClientView) -> Vec<String> {
    let mut ns: Vec<String> = view
        .objects
        .values()
        .map(|o| o["metadata"]["namespace"].as_str().unwrap().to_string())
        .collect();
    ns.dedup();
    ns
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_refuses_missing_malformed_forged_and_misaddressed_tokens() {
    let env = spawn(seeded(10), jwt_config()).await;
    env.synced("pods").await;
    let good = hs256(&claims("alice", &["*"], &["*"], 300));
    for place in [Place::Header, Place::Query, Place::Cookie] {
        let mut sse = sse_ok(&env, "/stream/pods", Some((&good, place))).await;
        assert_eq!(snapshot(&mut sse).await.objects.len(), 10, "{place:?}");
    }
    // The query parameter is not mistaken for a stream option.
    let mut sse = sse_ok(
        &env,
        "/stream/pods?namespace=web",
        Some((&good, Place::Query)),
    )
    .await;
    assert_eq!(namespaces_of(&snapshot(&mut sse).await), ["web"]);

    let headers = refused(get(&env, "/stream/pods", None).await, 401, "no token").await;
    assert!(
        headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    refused(
        get(&env, "/stream/pods", Some(("not.a.jwt", Place::Header))).await,
        401,
        "malformed",
    )
    .await;
    let forged = encode(
        &Header::new(Algorithm::HS256),
        &claims("alice", &["*"], &["*"], 300),
        &EncodingKey::from_secret(b"guessed"),
    )
    .unwrap();
    refused(
        get(&env, "/stream/pods", Some((&forged, Place::Header))).await,
        401,
        "signature",
    )
    .await;
    let mut c = claims("alice", &["*"], &["*"], 300);
    c["iss"] = json!("https://elsewhere.test");
    refused(
        get(&env, "/stream/pods", Some((&hs256(&c), Place::Header))).await,
        401,
        "issuer",
    )
    .await;
    let mut c = claims("alice", &["*"], &["*"], 300);
    c["aud"] = json!("someone-else");
    refused(
        get(&env, "/stream/pods", Some((&hs256(&c), Place::Header))).await,
        401,
        "audience",
    )
    .await;
    let mut c = claims("alice", &["*"], &["*"], 300);
    c["exp"] = json!(now() - 5);
    refused(
        get(&env, "/stream/pods", Some((&hs256(&c), Place::Cookie))).await,
        401,
        "expired",
    )
    .await;
    let mut c = claims("alice", &["*"], &["*"], 300);
    c["nbf"] = json!(now() + 120);
    refused(
        get(&env, "/stream/pods", Some((&hs256(&c), Place::Query))).await,
        401,
        "not yet valid",
    )
    .await;
    // An RS256 token is never checked against the HMAC secret.
    let rsa = signed(
        &claims("alice", &["*"], &["*"], 300),
        Algorithm::RS256,
        None,
        &pem_key("rsa-private.pem", Algorithm::RS256),
    );
    refused(
        get(&env, "/stream/pods", Some((&rsa, Place::Header))).await,
        401,
        "signature",
    )
    .await;

    // Probes stay open; everything else needs a token.
    assert_eq!(get(&env, "/healthz", None).await.status(), 200);
    assert_eq!(get(&env, "/readyz", None).await.status(), 200);
    for path in ["/metrics", "/api/v1/pods", "/api", "/ws", "/nowhere"] {
        assert_eq!(get(&env, path, None).await.status(), 401, "{path}");
    }
    let metrics = get(&env, "/metrics", Some((&good, Place::Header))).await;
    assert_eq!(metrics.status(), 200);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_keys_from_pem_files_and_a_reloaded_jwks_chosen_by_kid() {
    // PEM public keys: Ed25519 and RSA; an EC token has no key.
    let mut cfg = jwt_config();
    cfg.auth.jwt.secret_file = None;
    cfg.auth.jwt.public_key_files = vec![fixture("ed25519-public.pem"), fixture("rsa-public.pem")];
    let env = spawn(seeded(3), cfg).await;
    let c = claims("svc", &["*"], &["*"], 300);
    for (alg, key) in [
        (Algorithm::EdDSA, "ed25519-private.pem"),
        (Algorithm::RS256, "rsa-private.pem"),
    ] {
        let t = signed(&c, alg, None, &pem_key(key, alg));
        assert_eq!(
            get(&env, "/stream/pods", Some((&t, Place::Header)))
                .await
                .status(),
            200,
            "{alg:?}"
        );
    }
    let ec = signed(
        &c,
        Algorithm::ES256,
        None,
        &pem_key("ec256-private.pem", Algorithm::ES256),
    );
    refused(
        get(&env, "/stream/pods", Some((&ec, Place::Header))).await,
        401,
        "signature",
    )
    .await;
    env.stop().await;

    // A JWKS holding only the RSA key at first; the EC key is added later.
    let full: Value =
        serde_json::from_slice(&std::fs::read(fixture("jwks.json")).unwrap()).unwrap();
    let only_rsa = json!({"keys": full["keys"].as_array().unwrap().iter()
        .filter(|k| k["kid"] == "rsa-1").collect::<Vec<_>>()});
    let jwks = temp_file("jwks.json", only_rsa.to_string().as_bytes());
    let mut cfg = jwt_config();
    cfg.auth.jwt.secret_file = None;
    cfg.auth.jwt.jwks_file = Some(jwks.clone());
    let env = spawn(seeded(3), cfg).await;
    let rsa = signed(
        &c,
        Algorithm::RS256,
        Some("rsa-1"),
        &pem_key("rsa-private.pem", Algorithm::RS256),
    );
    let status = |t: String| {
        let env = &env;
        async move {
            get(env, "/stream/pods", Some((&t, Place::Header)))
                .await
                .status()
        }
    };
    assert_eq!(status(rsa.clone()).await, 200);
    let ec_key = pem_key("ec256-private.pem", Algorithm::ES256);
    let ec = signed(&c, Algorithm::ES256, Some("ec-1"), &ec_key);
    refused(
        get(&env, "/stream/pods", Some((&ec, Place::Header))).await,
        401,
        "unknown key id",
    )
    .await;
    // A known kid with the wrong key is a bad signature.
    let wrong = signed(
        &c,
        Algorithm::ES256,
        Some("ec-1"),
        &pem_key("other-ec256-private.pem", Algorithm::ES256),
    );
    std::fs::write(&jwks, full.to_string()).unwrap();
    // The file is re-read on use, at most once a second: poll, bounded.
    tokio::time::timeout(WAIT, async {
        while status(ec.clone()).await != 200 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the JWKS file was reloaded");
    assert_eq!(status(wrong).await, 401);
    assert_eq!(status(rsa).await, 200);
    env.stop().await;
}

fn kube_code(err: kube::Error) -> u16 {
    match err {
        kube::Error::Api(status) => status.code,
        other => panic!("expected an API error, got {other}"),
    }
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Opens a WebSocket with extra headers; the handshake's HTTP status on refusal.
async fn ws_connect(env: &TestEnv, path: &str, headers: &[(&str, String)]) -> Result<Ws, u16> {
    let mut req = format!("ws://{}{}", env.app.local_addr(), path)
        .into_client_request()
        .unwrap();
    for (k, v) in headers {
        let name: tokio_tungstenite::tungstenite::http::HeaderName = k.parse().unwrap();
        req.headers_mut()
            .insert(name, v.parse().expect("header value"));
    }
    match tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(req))
        .await
        .expect("handshake in time")
    {
        Ok((ws, _)) => Ok(ws),
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("WebSocket {path}: {e}"),
    }
}

/// The next JSON message, or the Close code.
async fn ws_next(ws: &mut Ws, def: &str) -> Result<Value, u16> {
    tokio::time::timeout(WAIT, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(text))) => {
                    let v: Value = serde_json::from_str(&text).unwrap();
                    validate_def(def, &v);
                    return Ok(v);
                }
                Some(Ok(Message::Close(frame))) => {
                    return Err(frame.map_or(1005, |f| u16::from(f.code)));
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return Err(0),
            }
        }
    })
    .await
    .expect("a message in time")
}

fn as_event(v: &Value) -> SseEvent {
    SseEvent {
        event: v["type"].as_str().unwrap().to_string(),
        id: v.get("id").map(|i| i.as_str().unwrap().to_string()),
        data: v.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_narrow_what_sse_ws_and_the_kube_face_serve() {
    let env = spawn(seeded(30), jwt_config()).await;
    env.synced("pods").await;
    let web = hs256(&claims("web-team", &["web"], &["pods"], 300));
    let t = Some((web.as_str(), Place::Header));

    // SSE: all namespaces narrow to the granted one.
    let mut sse = sse_ok(&env, "/stream/pods", t).await;
    let mut view = snapshot(&mut sse).await;
    assert_eq!(namespaces_of(&view), ["web"]);
    refused(
        get(&env, "/stream/pods?namespace=web,batch", t).await,
        403,
        "namespace \"batch\"",
    )
    .await;
    // Not granted: 403 whether the resource exists or not.
    refused(get(&env, "/stream/nodes", t).await, 403, "may not watch").await;
    refused(get(&env, "/stream/podz", t).await, 403, "may not watch").await;
    let all_resources = hs256(&claims("web-all", &["web"], &["*"], 300));
    let t_all = Some((all_resources.as_str(), Place::Header));
    refused(get(&env, "/stream/podz", t_all).await, 404, "podz").await;
    refused(
        get(&env, "/stream/nodes", t_all).await,
        403,
        "cluster-scoped",
    )
    .await;

    // WebSocket: an ungranted subscription is refused; the other flows.
    let auth = [("Authorization", format!("Bearer {web}"))];
    let mut ws = ws_connect(&env, "/ws", &auth).await.expect("upgrade");
    for (id, ns) in [("a", "web"), ("b", "batch")] {
        let msg = json!({"op": "subscribe", "id": id, "resource": "pods", "namespace": ns});
        ws.send(Message::text(msg.to_string())).await.unwrap();
    }
    let mut ws_view = ClientView::new();
    let mut refusal = None;
    while ws_view.snapshots == 0 || refusal.is_none() {
        let msg = ws_next(&mut ws, "muxMessage").await.expect("a message");
        match msg["sub"].as_str() {
            Some("b") => refusal = Some(msg),
            _ => ws_view.apply(&as_event(&msg)),
        }
    }
    let refusal = refusal.unwrap();
    assert_eq!(refusal["type"], "ERROR");
    assert_eq!(refusal["object"]["code"], 403);
    assert_eq!(
        ws_connect(&env, "/stream/nodes", &auth).await.err(),
        Some(403)
    );

    // The Kubernetes face, through kube-rs with the token in its kubeconfig.
    let client = env.kube_client(Some(&web)).await;
    let all: Api<Pod> = Api::all(client.clone());
    let listed = all.list(&ListParams::default()).await.unwrap();
    assert!(!listed.items.is_empty());
    assert!(
        listed
            .items
            .iter()
            .all(|p| p.metadata.namespace.as_deref() == Some("web"))
    );
    let batch: Api<Pod> = Api::namespaced(client.clone(), "batch");
    assert_eq!(
        kube_code(batch.list(&ListParams::default()).await.unwrap_err()),
        403
    );
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
    assert_eq!(
        kube_code(nodes.list(&ListParams::default()).await.unwrap_err()),
        403
    );

    // Changes elsewhere are not seen; those in "web" are, on every transport.
    env.sim
        .create("pods", pod("hidden").ns("batch").build())
        .unwrap();
    env.sim
        .create("pods", pod("seen").ns("web").build())
        .unwrap();
    let (objects, rv) = pods_of(&env.sim);
    let wanted: Vec<Value> = objects
        .into_iter()
        .filter(|o| o["metadata"]["namespace"] == "web")
        .collect();
    view.follow(&mut sse, rv).await;
    view.assert_matches(&wanted);
    while !ws_view.settled(rv) {
        let msg = ws_next(&mut ws, "muxMessage").await.expect("a message");
        ws_view.apply(&as_event(&msg));
    }
    ws_view.assert_matches(&wanted);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_ends_streams_and_a_fresh_token_resumes_without_reset() {
    let env = spawn(seeded(10), jwt_config()).await;
    env.synced("pods").await;
    let short = hs256(&claims("alice", &["*"], &["*"], 3));
    let mut sse = sse_ok(&env, "/stream/pods", Some((&short, Place::Query))).await;
    let mut view = snapshot(&mut sse).await;
    let mut ws = ws_connect(
        &env,
        "/stream/pods",
        &[("Authorization", format!("Bearer {short}"))],
    )
    .await
    .expect("upgrade");
    // A `/ws` socket with two subscriptions (parked with their view's
    // writer once caught up, which must hand them back at the deadline).
    let mut mux = ws_connect(&env, "/ws", &[("Authorization", format!("Bearer {short}"))])
        .await
        .expect("upgrade");
    for id in ["a", "b"] {
        let msg = json!({"op": "subscribe", "id": id, "resource": "pods"});
        mux.send(Message::text(msg.to_string())).await.unwrap();
    }
    let watch = get(
        &env,
        "/api/v1/pods?watch=1&allowWatchBookmarks=true",
        Some((&short, Place::Header)),
    )
    .await;
    assert_eq!(watch.status(), 200);
    env.sim
        .create("pods", pod("before-expiry").ns("web").build())
        .unwrap();
    // The SSE stream: changes, then an ERROR naming the reason, then the end.
    let error = sse.until_error(&mut view).await;
    assert_eq!(error.data["object"]["code"], 401);
    assert_eq!(error.data["object"]["reason"], "Unauthorized");
    assert!(
        error.data["object"]["message"]
            .as_str()
            .unwrap()
            .contains("token expired")
    );
    assert!(
        sse.next().await.is_none(),
        "the stream ends after the ERROR"
    );
    // The WebSocket: an ERROR, then Close 4001.
    let code = loop {
        match ws_next(&mut ws, "wsMessage").await {
            Ok(msg) if msg["type"] == "ERROR" => {
                assert_eq!(msg["object"]["code"], 401);
            }
            Ok(_) => {}
            Err(code) => break code,
        }
    };
    assert_eq!(code, 4001);
    // The `/ws` socket: an ERROR per subscription, then Close 4001.
    let mut expired = Vec::new();
    let code = loop {
        match ws_next(&mut mux, "muxMessage").await {
            Ok(msg) if msg["type"] == "ERROR" => {
                assert_eq!(msg["object"]["code"], 401, "{msg}");
                expired.push(msg["sub"].as_str().unwrap().to_string());
            }
            Ok(_) => {}
            Err(code) => break code,
        }
    };
    expired.sort();
    assert_eq!(expired, ["a", "b"]);
    assert_eq!(code, 4001);
    // The Kubernetes watch: an ERROR line with a 401 Status, then the end.
    let body = tokio::time::timeout(WAIT, watch.text())
        .await
        .expect("the watch ends")
        .unwrap();
    let last: Value = serde_json::from_str(body.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "ERROR");
    assert_eq!(last["object"]["code"], 401);

    // Reconnect with a fresh token and Last-Event-ID: only what was missed.
    env.sim
        .create("pods", pod("while-away").ns("web").build())
        .unwrap();
    let fresh = hs256(&claims("alice", &["*"], &["*"], 300));
    let last = view.last_id.clone().expect("an id was received");
    let resp = tokio::time::timeout(
        WAIT,
        env.http
            .get(format!("{}/stream/pods", env.base))
            .bearer_auth(&fresh)
            .header("Last-Event-ID", last)
            .send(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    view.resume();
    let (objects, rv) = pods_of(&env.sim);
    view.follow(&mut sse, rv).await;
    view.assert_matches(&objects);
    assert!(view.resets.is_empty(), "{:?}", view.resets);
    env.stop().await;
}

fn kube_mode_sim() -> kubefan_sim::Sim {
    let sim = seeded(20);
    sim.set_users(vec![
        SimUser::new("alice-token", "alice", &["devs"]),
        SimUser::new("bob-token", "bob", &[]),
        SimUser::new("olga-token", "olga", &["ops"]),
    ]);
    sim.set_rules(vec![
        SimRule::read(Subject::Group("devs".into()), &["pods"], &["web"]),
        SimRule::read(Subject::Group("ops".into()), &["*"], &["*"]),
    ]);
    sim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_mode_reviews_tokens_and_access_and_caches_the_answers() {
    let mut cfg = test_config(&["pods"]);
    cfg.auth.set(AuthMethod::Kubernetes);
    cfg.auth.authorization = AuthorizationMode::Review;
    cfg.auth.cache_ttl = Duration::from_secs(300);
    let env = spawn(kube_mode_sim(), cfg).await;
    env.synced("pods").await;
    let alice = Some(("alice-token", Place::Header));
    for _ in 0..3 {
        let mut sse = sse_ok(&env, "/stream/pods?namespace=web", alice).await;
        assert_eq!(namespaces_of(&snapshot(&mut sse).await), ["web"]);
    }
    let stats = env.sim.auth_stats();
    assert_eq!(
        (stats.token_reviews, stats.access_reviews),
        (1, 1),
        "repeated subscriptions reuse the cached reviews"
    );
    refused(
        get(&env, "/stream/pods", alice).await,
        403,
        "name the namespaces",
    )
    .await;
    refused(
        get(&env, "/stream/pods?namespace=batch", alice).await,
        403,
        "batch",
    )
    .await;
    refused(
        get(
            &env,
            "/stream/pods?namespace=web",
            Some(("bob-token", Place::Cookie)),
        )
        .await,
        403,
        "bob may not watch pods",
    )
    .await;
    refused(
        get(&env, "/stream/pods", Some(("stolen", Place::Query))).await,
        401,
        "not accepted",
    )
    .await;
    refused(get(&env, "/stream/pods", None).await, 401, "no token").await;
    // Unknown resources: 403 for alice, 404 for a cluster-wide reader.
    refused(
        get(&env, "/stream/podz?namespace=web", alice).await,
        403,
        "podz",
    )
    .await;
    let olga = Some(("olga-token", Place::Header));
    refused(get(&env, "/stream/podz", olga).await, 404, "podz").await;
    let mut sse = sse_ok(&env, "/stream/pods", olga).await;
    assert_eq!(snapshot(&mut sse).await.objects.len(), 20);

    // The Kubernetes face asks for `list` in the namespace.
    let client = env.kube_client(Some("alice-token")).await;
    let web: Api<Pod> = Api::namespaced(client.clone(), "web");
    let listed = web.list(&ListParams::default()).await.unwrap();
    assert!(!listed.items.is_empty());
    let all: Api<Pod> = Api::all(client);
    assert_eq!(
        kube_code(all.list(&ListParams::default()).await.unwrap_err()),
        403
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_are_checked_on_upgrades_and_cors_is_for_listed_origins_only() {
    let mut cfg = test_config(&["pods"]);
    cfg.allowed_origins = vec!["https://dash.example".into()];
    let env = spawn(seeded(3), cfg).await;
    env.synced("pods").await;
    let own = format!("http://{}", env.app.local_addr());
    for (origin, want) in [
        ("https://evil.example", Some(403)),
        ("https://dash.example", None),
        (own.as_str(), None),
    ] {
        let got = ws_connect(&env, "/stream/pods", &[("Origin", origin.to_string())])
            .await
            .err();
        assert_eq!(got, want, "{origin}");
    }
    // No Origin (not a browser): allowed.
    assert!(ws_connect(&env, "/ws", &[]).await.is_ok());

    let sse = |origin: &'static str| {
        env.http
            .get(format!("{}/stream/pods", env.base))
            .header("Origin", origin)
            .send()
    };
    let listed = sse("https://dash.example").await.unwrap();
    assert_eq!(listed.status(), 200);
    assert_eq!(
        listed.headers()["access-control-allow-origin"],
        "https://dash.example"
    );
    assert_eq!(listed.headers()["access-control-allow-credentials"], "true");
    let other = sse("https://evil.example").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none());

    let preflight = |origin: &'static str| {
        env.http
            .request(
                reqwest::Method::OPTIONS,
                format!("{}/stream/pods", env.base),
            )
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "GET")
            .header("Access-Control-Request-Headers", "authorization")
            .send()
    };
    let ok = preflight("https://dash.example").await.unwrap();
    assert_eq!(ok.status(), 204);
    assert!(
        ok.headers()["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .contains("Authorization")
    );
    assert_eq!(
        preflight("https://evil.example").await.unwrap().status(),
        403
    );
    env.stop().await;
}

/// Opens a subscriber that must keep receiving every event while others
/// are refused; returns it with its snapshot read.
async fn steady(env: &TestEnv, token: Option<(&str, Place)>) -> (SseClient, ClientView) {
    let mut sse = sse_ok(env, "/stream/pods", token).await;
    let view = snapshot(&mut sse).await;
    (sse, view)
}

async fn still_receives(env: &TestEnv, sse: &mut SseClient, view: &mut ClientView, name: &str) {
    env.sim.create("pods", pod(name).ns("web").build()).unwrap();
    let (objects, rv) = pods_of(&env.sim);
    view.follow(sse, rv).await;
    view.assert_matches(&objects);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_limit_is_answered_while_existing_subscribers_keep_receiving() {
    // Total connections: 503 with Retry-After.
    let mut cfg = test_config(&["pods"]);
    cfg.limits.max_connections = 2;
    let env = spawn(seeded(5), cfg).await;
    env.synced("pods").await;
    let (mut a, mut va) = steady(&env, None).await;
    let _b = steady(&env, None).await;
    let headers = refused(
        get(&env, "/stream/pods", None).await,
        503,
        "the most allowed",
    )
    .await;
    assert!(headers.contains_key("retry-after"));
    still_receives(&env, &mut a, &mut va, "total-1").await;
    env.stop().await;

    // Per principal: 429; another principal is served.
    let mut cfg = jwt_config();
    cfg.limits.max_per_principal = 1;
    let env = spawn(seeded(5), cfg).await;
    env.synced("pods").await;
    let alice = hs256(&claims("alice", &["*"], &["*"], 300));
    let bob = hs256(&claims("bob", &["*"], &["*"], 300));
    let (mut a, mut va) = steady(&env, Some((&alice, Place::Header))).await;
    let headers = refused(
        get(&env, "/stream/pods", Some((&alice, Place::Header))).await,
        429,
        "alice already has 1",
    )
    .await;
    assert!(headers.contains_key("retry-after"));
    let _b = steady(&env, Some((&bob, Place::Header))).await;
    still_receives(&env, &mut a, &mut va, "principal-1").await;
    env.stop().await;

    // Per client address: 429.
    let mut cfg = test_config(&["pods"]);
    cfg.limits.max_per_address = 1;
    let env = spawn(seeded(5), cfg).await;
    env.synced("pods").await;
    let (mut a, mut va) = steady(&env, None).await;
    let headers = refused(get(&env, "/stream/pods", None).await, 429, "your address").await;
    assert!(headers.contains_key("retry-after"));
    still_receives(&env, &mut a, &mut va, "address-1").await;
    env.stop().await;

    // New connections per second per address: 429 after the burst.
    let mut cfg = test_config(&["pods"]);
    cfg.limits.per_second_per_address = 2;
    let env = spawn(seeded(5), cfg).await;
    env.synced("pods").await;
    let (mut a, mut va) = steady(&env, None).await;
    let mut refusal = None;
    for _ in 0..3 {
        let resp = get(&env, "/api/v1/namespaces/web/pods", None).await;
        if resp.status() == 429 {
            refusal = Some(resp);
            break;
        }
    }
    let headers = refused(refusal.expect("refused within the burst"), 429, "a second").await;
    assert!(headers.contains_key("retry-after"));
    still_receives(&env, &mut a, &mut va, "rate-1").await;

    // Size bounds.
    let long = format!("/stream/pods?namespace={}", "a".repeat(9000));
    refused(get(&env, &long, None).await, 414, "request target").await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_the_address_limit_counts_each_forwarded_client() {
    let mut cfg = test_config(&["pods"]);
    cfg.limits.max_per_address = 1;
    cfg.limits.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    let env = spawn(seeded(5), cfg).await;
    env.synced("pods").await;
    let url = format!("http://{}/stream/pods", env.app.local_addr());
    let client = reqwest::Client::new();
    let open = |forwarded_for: &str| {
        client
            .get(&url)
            .header("X-Forwarded-For", forwarded_for)
            .send()
    };
    let first = open("198.51.100.7").await.unwrap();
    assert_eq!(first.status(), 200);
    // Another client behind the same proxy has a count of its own.
    let second = open("198.51.100.8").await.unwrap();
    assert_eq!(second.status(), 200);
    // The first one again, whatever it claims on the left: 429.
    let again = open("192.0.2.50, 198.51.100.7").await.unwrap();
    refused(again, 429, "your address").await;
    drop((first, second));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_headers_are_refused() {
    let env = spawn(seeded(1), test_config(&[])).await;
    let resp = env
        .http
        .get(format!("{}/api", env.base))
        .header("X-Padding", "x".repeat(20 << 10))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 431);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_loads_without_a_token_and_refusals_are_counted() {
    let env = spawn(seeded(3), jwt_config()).await;
    // The dashboard page carries no data: it loads, then asks for a token.
    let page = get(&env, "/", None).await;
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<html"));
    refused(get(&env, "/stream/pods", None).await, 401, "").await;
    refused(
        get(&env, "/stream/pods", Some(("not.a.jwt", Place::Header))).await,
        401,
        "",
    )
    .await;
    let admin = hs256(&claims("ops", &["*"], &["*"], 600));
    let metrics = env.metrics_with(Some(&admin)).await;
    assert!(
        metrics.contains("kubefan_auth_failures_total{kind=\"no_token\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("kubefan_auth_failures_total{kind=\"malformed\"} 1"),
        "{metrics}"
    );
    env.stop().await;
}

/// The client library the page imports is code, not data: anyone may load
/// it, at a stable path, with the same bytes as `clients/js/` (what npm
/// ships), a validator and CORS for pages on other origins. Nothing else
/// under `/lib/` and no stream is opened by that exception.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_library_loads_without_a_token_and_nothing_else_does() {
    let env = spawn(seeded(3), jwt_config()).await;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/js/");
    for (file, content_type) in [
        ("kubefan.js", "text/javascript; charset=utf-8"),
        ("kubefan-worker.js", "text/javascript; charset=utf-8"),
        ("kubefan.d.ts", "application/typescript; charset=utf-8"),
    ] {
        let resp = get(&env, &format!("/lib/{file}"), None).await;
        assert_eq!(resp.status(), 200, "{file}");
        let h = resp.headers().clone();
        assert_eq!(h["content-type"], content_type, "{file}");
        assert_eq!(h["cache-control"], "no-cache", "{file}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{file}");
        assert_eq!(h["access-control-allow-origin"], "*", "{file}");
        let etag = h["etag"].to_str().unwrap().to_string();
        assert!(etag.starts_with('"') && etag.len() > 10, "{etag}");
        let body = resp.text().await.unwrap();
        assert_eq!(
            body,
            std::fs::read_to_string(format!("{root}{file}")).unwrap()
        );

        // Revalidation: the same ETag gets 304 and no body.
        let again = tokio::time::timeout(
            WAIT,
            env.http
                .get(format!("{}/lib/{file}", env.base))
                .header("If-None-Match", format!("W/{etag}"))
                .send(),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(again.status(), 304, "{file}");
        assert_eq!(again.headers()["etag"], etag.as_str());
        assert!(again.bytes().await.unwrap().is_empty());
    }
    // The page admits the library and its SharedWorker, and no inline code
    // but its own.
    let page = get(&env, "/", None).await;
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("worker-src 'self'"), "{csp}");
    assert!(csp.contains("' 'self'; style-src"), "{csp}");
    assert!(!csp.contains("unsafe"), "{csp}");

    // The icon browsers ask for on any page: the logo, public.
    let icon = get(&env, "/favicon.ico", None).await;
    assert_eq!(icon.status(), 200);
    assert_eq!(icon.headers()["content-type"], "image/svg+xml");
    assert!(icon.text().await.unwrap().starts_with("<svg"));
    assert!(csp.contains("img-src 'self'"), "{csp}");

    // Anything else still needs a token.
    refused(get(&env, "/lib/other.js", None).await, 401, "").await;
    refused(get(&env, "/lib/", None).await, 401, "").await;
    refused(get(&env, "/ws", None).await, 401, "").await;
    let token = hs256(&claims("ops", &["*"], &["*"], 600));
    refused(
        get(&env, "/lib/other.js", Some((&token, Place::Header))).await,
        404,
        "no file \"other.js\" in the client library",
    )
    .await;
    env.stop().await;
}

/// A `continue` token opens only the list it was made for: another
/// resource, namespace, selector or caller gets 410 and no data; a token
/// kubefan did not issue gets 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_tokens_are_bound_to_their_caller_and_list() {
    let mut cfg = jwt_config();
    cfg.upstream.boot_resources = vec!["pods".into(), "nodes".into()];
    let env = spawn(seeded(30), cfg).await;
    env.synced("pods").await;
    env.synced("nodes").await;
    let alice = hs256(&claims("alice", &["*"], &["*"], 600));
    let bob = hs256(&claims("bob", &["*"], &["*"], 600));
    let bearer = |token: &str| Some((token.to_string(), Place::Header));
    let list = |path: String, token: Option<(String, Place)>| {
        let env = &env;
        async move {
            let token = token.as_ref().map(|(t, p)| (t.as_str(), *p));
            get(env, &path, token).await
        }
    };

    let first = list("/api/v1/pods?limit=2".into(), bearer(&alice)).await;
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.unwrap();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let (id, offset) = token.split_once('.').expect("id.offset");
    assert_eq!(offset, "2");
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "128 random bits: {token}"
    );

    // The owner goes on; the token may be used again (a retried page).
    for _ in 0..2 {
        let next = list(
            format!("/api/v1/pods?limit=2&continue={token}"),
            bearer(&alice),
        )
        .await;
        assert_eq!(next.status(), 200);
        let next: Value = next.json().await.unwrap();
        assert_eq!(next["kind"], "PodList");
        assert_eq!(next["items"].as_array().unwrap().len(), 2);
        assert_eq!(
            next["metadata"]["resourceVersion"],
            first["metadata"]["resourceVersion"]
        );
    }

    // Anywhere else: 410 Expired, no items.
    for (path, who) in [
        (format!("/api/v1/nodes?limit=5&continue={token}"), &alice),
        (
            format!("/api/v1/namespaces/default/pods?limit=2&continue={token}"),
            &alice,
        ),
        (
            format!("/api/v1/pods?limit=2&labelSelector=app%3Dweb&continue={token}"),
            &alice,
        ),
        (
            format!("/api/v1/pods?limit=2&fieldSelector=spec.nodeName%3Dnode-1&continue={token}"),
            &alice,
        ),
        (format!("/api/v1/pods?limit=2&continue={token}"), &bob),
    ] {
        let resp = list(path.clone(), bearer(who)).await;
        refused(resp, 410, "continue parameter is too old").await;
    }
    // The same caller with narrower rights is another caller.
    let narrowed = hs256(&claims("alice", &["web"], &["*"], 600));
    refused(
        list(
            format!("/api/v1/pods?limit=2&continue={token}"),
            bearer(&narrowed),
        )
        .await,
        410,
        "continue parameter",
    )
    .await;

    // Forged tokens: a guessed id is unknown (410); a counter, as tokens
    // once were, is not a token at all (400).
    let guessed = format!("{}.2", "0".repeat(32));
    refused(
        list(
            format!("/api/v1/pods?limit=2&continue={guessed}"),
            bearer(&alice),
        )
        .await,
        410,
        "continue parameter",
    )
    .await;
    refused(
        list("/api/v1/pods?limit=2&continue=0:1".into(), bearer(&alice)).await,
        400,
        "invalid continue token",
    )
    .await;
    env.stop().await;
}

/// `--metrics-listen`: Prometheus scrapes without a token on its own
/// listener, while the main one still asks for one; the process's own
/// figures are there beside kubefan's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_listen_serves_metrics_without_a_token_and_process_figures() {
    let mut cfg = jwt_config();
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let env = spawn(seeded(3), cfg).await;
    env.synced("pods").await;
    refused(get(&env, "/metrics", None).await, 401, "no token").await;
    let addr = env.app.metrics_addr().expect("a metrics listener");
    let resp = tokio::time::timeout(WAIT, env.http.get(format!("http://{addr}/metrics")).send())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    let value = |name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} not in\n{text}"))
    };
    assert!(value("process_resident_memory_bytes") > 1e6);
    assert!(value("process_open_fds") > 3.0);
    assert!(value("process_max_fds") >= value("process_open_fds"));
    assert!(value("process_cpu_seconds_total") > 0.0);
    assert!(value("process_start_time_seconds") > 1.7e9);
    assert!(text.contains("kubefan_informer_synced{resource=\"pods\"} 1"));
    // Only /metrics there.
    let other = env
        .http
        .get(format!("http://{addr}/stream/pods"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    env.stop().await;
}

/// The access log says who watched what, and for a stream what it
/// delivered and how it ended; it never holds a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_says_who_watched_what_and_never_holds_a_token() {
    let log = crate::support::access_log();
    let env = spawn(seeded(6), jwt_config()).await;
    env.synced("pods").await;
    let token = hs256(&claims("log-reader", &["web"], &["pods"], 600));
    let mut sse = sse_ok(
        &env,
        "/stream/pods?labelSelector=app%3Dweb",
        Some((&token, Place::Query)),
    )
    .await;
    let view = snapshot(&mut sse).await;
    let request = log
        .wait_for("for the stream request", |l| {
            l["principal"] == "log-reader" && l["message"] == "request"
        })
        .await;
    assert_eq!(request["verb"], "watch");
    assert_eq!(request["resource"], "pods");
    assert_eq!(request["namespaces"], "web");
    assert_eq!(request["status"], 200);
    assert_eq!(request["path"], "/stream/pods");
    assert_eq!(request["query"], "labelSelector=app%3Dweb");
    drop(sse);
    let ended = log
        .wait_for("for the stream's end", |l| {
            l["principal"] == "log-reader" && l["message"] == "stream ended"
        })
        .await;
    assert_eq!(ended["resource"], "pods");
    assert_eq!(ended["transport"], "Sse");
    assert_eq!(ended["events"], view.objects.len() as u64);
    assert!(ended["bytes"].as_u64().unwrap() > 0);
    assert_eq!(ended["ended"], "connection closed");

    // A refusal is logged too, without the token it carried.
    let bad = format!("{token}x");
    refused(
        get(&env, "/stream/pods", Some((&bad, Place::Query))).await,
        401,
        "signature",
    )
    .await;
    log.wait_for("for the refusal", |l| {
        l["message"] == "request" && l["status"] == 401 && l["principal"] == "-"
    })
    .await;
    let all = serde_json::to_string(&log.all()).unwrap();
    assert!(
        !all.contains(&token[20..]),
        "a token reached the access log"
    );
    env.stop().await;
}

/// A browser trades its token once for an HttpOnly, SameSite=Strict
/// cookie that lives no longer than the token, and streams with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_traded_once_for_a_session_cookie_that_lives_no_longer_than_it() {
    let env = spawn(seeded(4), jwt_config()).await;
    env.synced("pods").await;
    let token = hs256(&claims("carol", &["*"], &["*"], 600));
    let resp = tokio::time::timeout(
        WAIT,
        env.http
            .post(format!("{}/session", env.base))
            .bearer_auth(&token)
            .send(),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(resp.status(), 204);
    let cookie = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.starts_with(&format!("kubefan_token={token};")),
        "{cookie}"
    );
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie} lacks {attribute}");
    }
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    let max_age: u64 = cookie
        .split("Max-Age=")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!((590..=600).contains(&max_age), "{max_age}");
    // The cookie is all a stream needs.
    let session = cookie.split(';').next().unwrap().to_string();
    let resp = env
        .http
        .get(format!("{}/stream/pods", env.base))
        .header("Cookie", session)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut sse = SseClient::new(resp);
    assert!(!snapshot(&mut sse).await.objects.is_empty());
    // Only a token in the header is traded, not one in the URL.
    let resp = env
        .http
        .post(format!("{}/session?access_token={token}", env.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    // Ending it needs no credentials.
    let resp = env
        .http
        .delete(format!("{}/session", env.base))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let cleared = resp.headers()["set-cookie"].to_str().unwrap();
    assert!(cleared.starts_with("kubefan_token=;") && cleared.contains("Max-Age=0"));
    env.stop().await;
}
