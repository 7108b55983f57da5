//! `--auth oidc`: id-tokens of an OpenID Connect issuer (the test issuer
//! of `issuer.rs`, over HTTPS with a test CA), checked as kube-apiserver
//! checks them, the user and groups they name authorized by the simulated
//! cluster's RBAC, keys followed through a rotation, an issuer that is
//! down at start, and `oidc,kubernetes` together.

use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};

use crate::issuer::{Issuer, SigningKey};
use crate::sse::seeded;
use crate::support::{ClientView, SseClient, TestEnv, WAIT, spawn, test_config, validate_status};
use kubefan::config::{AuthMethod, Config, OidcConfig};
use kubefan_sim::{Sim, SimUser};

pub(crate) const CLIENT: &str = "kubefan";
const ROLES: &str = "roles.rbac.authorization.k8s.io";
const ROLE_BINDINGS: &str = "rolebindings.rbac.authorization.k8s.io";

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An id-token's claims as an issuer signs them for `email`, in `groups`,
/// valid for `ttl` seconds.
pub(crate) fn claims(issuer: &Issuer, email: &str, groups: &[&str], ttl: u64) -> Value {
    json!({
        "iss": issuer.url, "aud": CLIENT, "sub": format!("id-{email}"),
        "email": email, "email_verified": true, "groups": groups,
        "hd": "example.com", "iat": now(), "exp": now() + ttl,
    })
}

/// Users named by their email, groups prefixed `oidc:`, `hd` required.
pub(crate) fn oidc_config(issuer: &Issuer) -> Config {
    let mut cfg = test_config(&["pods"]);
    cfg.auth.set(AuthMethod::Oidc);
    cfg.auth.oidc = OidcConfig {
        issuer_url: issuer.url.clone(),
        client_id: CLIENT.into(),
        ca_file: Some(issuer.ca_file.clone()),
        username_claim: "email".into(),
        groups_claim: Some("groups".into()),
        groups_prefix: "oidc:".into(),
        required_claims: vec![("hd".into(), "example.com".into())],
        ..OidcConfig::default()
    };
    cfg
}

/// A Role that may read pods in `ns`.
fn pod_reader(ns: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "pod-reader", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]})
}

/// A RoleBinding of `pod-reader` in `ns` to the group `group`.
fn group_binding(name: &str, ns: &str, group: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]})
}

/// Pods in default, web and batch; `oidc:team-web` may read web's.
pub(crate) fn team_sim() -> Sim {
    let sim = seeded(18);
    for ns in ["default", "web", "batch"] {
        sim.create(ROLES, pod_reader(ns)).unwrap();
    }
    sim.create(
        ROLE_BINDINGS,
        group_binding("team-web", "web", "oidc:team-web"),
    )
    .unwrap();
    sim
}

/// The gateway, once it has read the issuer's keys.
pub(crate) async fn oidc_env(sim: Sim, cfg: Config) -> TestEnv {
    let env = spawn(sim, cfg).await;
    env.synced("pods").await;
    let keys = env.app.auth().oidc().expect("--auth oidc").keys();
    tokio::time::timeout(WAIT, keys.changes().until(|| keys.loaded()))
        .await
        .expect("the issuer's keys are read");
    env
}

/// Asserts a 401 whose `Status` message contains `why`.
async fn refused(env: &TestEnv, token: &str, why: &str) {
    let resp = env.get_as("/api/v1/namespaces/web/pods", token).await;
    assert_eq!(resp.status(), 401, "{why}");
    let body: Value = resp.json().await.unwrap();
    validate_status(&body);
    let message = body["message"].as_str().unwrap();
    assert!(message.contains(why), "want {why:?} in {message:?}");
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

pub(crate) fn namespaces(view: &ClientView) -> BTreeSet<String> {
    view.objects
        .values()
        .map(|o| o["metadata"]["namespace"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn id_tokens_are_checked_as_kube_apiserver_checks_them() {
    let key = SigningKey::rsa("rsa-private.pem", "k1");
    let other = SigningKey::rsa("rsa2-private.pem", "k1");
    let issuer = Issuer::start(&[&key]).await;
    let env = oidc_env(team_sim(), oidc_config(&issuer)).await;
    let good = claims(&issuer, "alice@example.com", &["team-web"], 300);
    let resp = env
        .get_as("/api/v1/namespaces/web/pods", &key.sign(&good))
        .await;
    assert_eq!(resp.status(), 200);

    let with = |change: &dyn Fn(&mut Value)| {
        let mut c = good.clone();
        change(&mut c);
        key.sign(&c)
    };
    let cases: Vec<(String, &str)> = vec![
        (with(&|c| c["exp"] = json!(now() - 5)), "token expired"),
        (with(&|c| c["nbf"] = json!(now() + 600)), "not yet valid"),
        (with(&|c| c["aud"] = json!("someone-else")), "audience"),
        (with(&|c| c["aud"] = json!(["a", "b"])), "audience"),
        (
            with(&|c| c.as_object_mut().unwrap().remove("exp").map(drop).unwrap()),
            "missing claim \"exp\"",
        ),
        (
            with(&|c| {
                c.as_object_mut()
                    .unwrap()
                    .remove("email")
                    .map(drop)
                    .unwrap()
            }),
            "no \"email\" claim",
        ),
        (
            with(&|c| c["email_verified"] = json!(false)),
            "email is not verified",
        ),
        (
            with(&|c| c.as_object_mut().unwrap().remove("hd").map(drop).unwrap()),
            "lacks the claim \"hd\"",
        ),
        (
            with(&|c| c["hd"] = json!("evil.com")),
            "does not have the value",
        ),
        (with(&|c| c["groups"] = json!({"a": 1})), "neither a string"),
        // Another issuer's token, and a token of no issuer at all.
        (
            with(&|c| c["iss"] = json!("https://evil.example")),
            "issuer",
        ),
        (other.sign(&good), "signature"),
        ("not-a-token".into(), "malformed"),
        ("a.b.c".into(), "malformed"),
    ];
    for (token, why) in &cases {
        refused(&env, token, why).await;
    }

    // `alg: none`, unsigned.
    let none = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","typ":"JWT"}"#),
        b64(good.to_string().as_bytes())
    );
    refused(&env, &none, "signed with \"none\"").await;
    // Algorithm confusion: HS256 with the issuer's public key as the secret.
    let public = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/jwt/rsa-public.pem"
    ))
    .unwrap();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("k1".into());
    let confused = encode(&header, &good, &EncodingKey::from_secret(&public)).unwrap();
    refused(&env, &confused, "signed with \"HS256\"").await;
    // A `kid` the issuer never published.
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("made-up".into());
    let unknown = encode(&header, &good, &key.key).unwrap();
    refused(&env, &unknown, "unknown key id").await;

    // A user the cluster's RBAC does not bind: authenticated, then 403.
    let stranger = key.sign(&claims(&issuer, "mallory@example.com", &["other"], 300));
    let resp = env.get_as("/api/v1/namespaces/web/pods", &stranger).await;
    assert_eq!(resp.status(), 403);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("mallory@example.com may not list pods"),
        "{body}"
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_in_team_streams_what_rbac_grants_its_groups_until_the_token_expires() {
    let key = SigningKey::rsa("rsa-private.pem", "k1");
    let issuer = Issuer::start(&[&key]).await;
    let env = oidc_env(team_sim(), oidc_config(&issuer)).await;
    let token = key.sign(&claims(&issuer, "alice@example.com", &["team-web"], 4));

    // Narrowed to what the group may see, then widened by a new grant.
    let mut sse = SseClient::new(env.get_as("/stream/pods", &token).await);
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        view.apply(&sse.next().await.expect("snapshot"));
    }
    assert_eq!(namespaces(&view), BTreeSet::from(["web".to_string()]));
    env.sim
        .create(
            ROLE_BINDINGS,
            group_binding("team-batch", "batch", "oidc:team-web"),
        )
        .unwrap();
    // The token's 4 s run out: the stream ends with an ERROR.
    let error = sse.until_error(&mut view).await;
    assert!(
        namespaces(&view).contains("batch"),
        "the grant reached the open stream before the token expired"
    );
    assert_eq!(error.data["object"]["code"], 401);
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
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_keys_are_followed_and_made_up_key_ids_cost_the_issuer_one_fetch_per_window() {
    let old = SigningKey::rsa("rsa-private.pem", "2026-01");
    let new = SigningKey::rsa("rsa2-private.pem", "2026-02");
    let issuer = Issuer::start(&[&old]).await;
    let env = oidc_env(team_sim(), oidc_config(&issuer)).await;
    let claims = claims(&issuer, "alice@example.com", &["team-web"], 300);
    assert_eq!(
        env.get_as("/api/v1/namespaces/web/pods", &old.sign(&claims))
            .await
            .status(),
        200
    );

    // The issuer rotates: the new key's tokens are taken without a restart.
    issuer.publish(&[&new]);
    let before = issuer.jwks_fetches();
    assert_eq!(
        env.get_as("/api/v1/namespaces/web/pods", &new.sign(&claims))
            .await
            .status(),
        200
    );
    assert_eq!(
        issuer.jwks_fetches(),
        before + 1,
        "one fetch for the new kid"
    );

    // A flood of made-up kids, 200 at once: each refused, and at most one
    // fetch per 5 s window.
    let started = std::time::Instant::now();
    let before = issuer.jwks_fetches();
    let flood = (0..200).map(|i| {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(format!("made-up-{i}"));
        let token = encode(&header, &claims, &new.key).unwrap();
        let env = &env;
        async move {
            env.get_as("/api/v1/namespaces/web/pods", &token)
                .await
                .status()
        }
    });
    for status in futures::future::join_all(flood).await {
        assert_eq!(status, 401);
    }
    let discovered = issuer
        .counts()
        .discovery
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(discovered, 1, "the discovery document is read once");
    let windows = started.elapsed().as_secs() / 5 + 1;
    let fetched = issuer.jwks_fetches() - before;
    assert!(
        fetched <= windows,
        "{fetched} JWKS fetches for 200 made-up kids in {:?}",
        started.elapsed()
    );
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issuer_down_at_start_is_waited_for_with_tokens_refused_saying_so() {
    let key = SigningKey::rsa("rsa-private.pem", "k1");
    let issuer = Issuer::start(&[&key]).await;
    issuer.set_up(false);
    let env = spawn(team_sim(), oidc_config(&issuer)).await;
    env.synced("pods").await;
    let token = key.sign(&claims(&issuer, "alice@example.com", &["team-web"], 300));
    // kubefan serves; tokens get a 401 that says why.
    let keys = env.app.auth().oidc().unwrap().keys();
    tokio::time::timeout(WAIT, keys.changes().until(|| keys.last_error().is_some()))
        .await
        .expect("a first try at discovery");
    refused(&env, &token, "is not reachable yet").await;
    let ready = env.http.get(format!("{}/readyz", env.base)).send().await;
    assert_eq!(
        ready.unwrap().status(),
        200,
        "readiness does not wait for the issuer"
    );

    issuer.set_up(true);
    tokio::time::timeout(WAIT, keys.changes().until(|| keys.loaded()))
        .await
        .expect("discovery is retried");
    let resp = env.get_as("/api/v1/namespaces/web/pods", &token).await;
    assert_eq!(resp.status(), 200);
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_sign_in_with_oidc_while_services_bring_kubernetes_tokens() {
    let key = SigningKey::rsa("rsa-private.pem", "k1");
    let issuer = Issuer::start(&[&key]).await;
    let sim = team_sim();
    sim.set_users(vec![SimUser::new("robot-token", "robot", &["team"])]);
    sim.create(ROLE_BINDINGS, group_binding("robots", "batch", "team"))
        .unwrap();
    let mut cfg = oidc_config(&issuer);
    cfg.auth.methods = vec![AuthMethod::Oidc, AuthMethod::Kubernetes];
    let env = oidc_env(sim, cfg).await;

    let person = key.sign(&claims(&issuer, "alice@example.com", &["team-web"], 300));
    let resp = env.get_as("/api/v1/namespaces/web/pods", &person).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        env.app.authorizer().token_reviews(),
        0,
        "an id-token is not sent to TokenReview"
    );
    // An expired id-token is refused as expired, not sent to TokenReview.
    let mut stale = claims(&issuer, "alice@example.com", &["team-web"], 300);
    stale["exp"] = json!(now() - 5);
    refused(&env, &key.sign(&stale), "token expired").await;
    assert_eq!(env.app.authorizer().token_reviews(), 0);

    let resp = env
        .get_as("/api/v1/namespaces/batch/pods", "robot-token")
        .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(env.app.authorizer().token_reviews(), 1);
    let resp = env
        .get_as("/api/v1/namespaces/web/pods", "robot-token")
        .await;
    assert_eq!(resp.status(), 403);
    refused(&env, "nobody's-token", "not accepted").await;
    env.stop().await;
}
