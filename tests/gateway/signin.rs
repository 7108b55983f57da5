//! Signing in in the browser (`--auth oidc`), driven as a browser drives
//! it (redirects followed by hand, cookies kept per site) against the
//! test issuer: the authorization-code flow with PKCE into a session
//! cookie, streams that outlive the id-token through refreshes and end
//! when the issuer stops refreshing, a session made on one replica used
//! on another, and every refusal.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::issuer::{Issuer, SigningKey};
use crate::oidc::{namespaces, oidc_config, oidc_env, team_sim};
use crate::support::{ClientView, SseClient, TestEnv, WAIT, spawn, validate_status};
use kubefan::config::Config;
use kubefan_sim::pod;

/// A browser: no automatic redirects, kubefan's cookies kept.
struct Browser {
    http: reqwest::Client,
    cookies: BTreeMap<String, String>,
    /// The last Set-Cookie lines kubefan sent, as sent.
    set_cookies: Vec<String>,
}

impl Browser {
    fn new(issuer: &Issuer) -> Browser {
        let ca = std::fs::read(&issuer.ca_file).unwrap();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
            .build()
            .unwrap();
        Browser {
            http,
            cookies: BTreeMap::new(),
            set_cookies: Vec::new(),
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// A request to kubefan (`env`), with its cookies; keeps what it sets.
    async fn send(&mut self, req: reqwest::RequestBuilder) -> reqwest::Response {
        let req = if self.cookies.is_empty() {
            req
        } else {
            req.header("cookie", self.cookie_header())
        };
        let resp = tokio::time::timeout(WAIT, req.send())
            .await
            .expect("answer in time")
            .expect("request");
        self.set_cookies = resp
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect();
        for line in &self.set_cookies {
            let pair = line.split(';').next().unwrap();
            let (name, value) = pair.split_once('=').unwrap();
            if value.is_empty() || line.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_string(), value.to_string());
            }
        }
        resp
    }

    async fn get(&mut self, env: &TestEnv, path: &str) -> reqwest::Response {
        let req = self.http.get(format!("{}{path}", env.base));
        self.send(req).await
    }

    async fn post(&mut self, env: &TestEnv, path: &str) -> reqwest::Response {
        let req = self.http.post(format!("{}{path}", env.base));
        self.send(req).await
    }

    /// The issuer's page (no kubefan cookies go there).
    async fn visit_issuer(&self, url: &str) -> reqwest::Response {
        tokio::time::timeout(WAIT, self.http.get(url).send())
            .await
            .expect("issuer answers")
            .expect("request")
    }
}

fn location(resp: &reqwest::Response) -> String {
    assert_eq!(resp.status(), 302, "a redirect");
    resp.headers()["location"].to_str().unwrap().to_string()
}

/// Starts a sign-in at kubefan: the issuer's authorization URL.
async fn start(browser: &mut Browser, env: &TestEnv, then: &str) -> String {
    let resp = browser.get(env, &format!("/login?then={then}")).await;
    location(&resp)
}

/// The issuer signs the user in: the callback URL it sends the browser to.
async fn at_issuer(browser: &Browser, authorize: &str) -> String {
    let resp = browser.visit_issuer(authorize).await;
    location(&resp)
}

/// The callback at kubefan, as a path.
async fn finish(browser: &mut Browser, env: &TestEnv, callback: &str) -> reqwest::Response {
    let path = callback.strip_prefix(&env.base).expect("back at kubefan");
    browser.get(env, path).await
}

/// A whole sign-in; where kubefan sends the browser after it.
async fn sign_in(browser: &mut Browser, env: &TestEnv, then: &str) -> String {
    let authorize = start(browser, env, then).await;
    let callback = at_issuer(browser, &authorize).await;
    location(&finish(browser, env, &callback).await)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Waits for the clock to reach `at` (Unix seconds): id-tokens age by the
/// wall clock, which is what is tested here.
async fn until(at: f64) {
    let left = at - unix_now();
    if left > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(left)).await;
    }
}

fn secret_file() -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("kubefan-signin-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("session-secret");
    let mut secret = [0u8; 48];
    rand::fill(&mut secret);
    std::fs::write(&path, secret).unwrap();
    path
}

fn signin_config(issuer: &Issuer, secret: Option<PathBuf>) -> Config {
    let mut cfg = oidc_config(issuer);
    cfg.auth.sign_in.session_secret_file = secret;
    cfg
}

async fn issuer_for_alice() -> (Issuer, SigningKey) {
    let key = SigningKey::rsa("rsa-private.pem", "k1");
    let issuer = Issuer::start(&[&key]).await;
    issuer.sign_in_as("alice@example.com", &["team-web"]);
    (issuer, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_in_browser_streams_past_the_id_tokens_life_until_the_issuer_stops_refreshing() {
    let (issuer, _key) = issuer_for_alice().await;
    issuer.set_id_token_ttl(6);
    let mut cfg = signin_config(&issuer, None);
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let env = oidc_env(team_sim(), cfg).await;
    let mut browser = Browser::new(&issuer);

    let signed_in_at = unix_now();
    let then = sign_in(&mut browser, &env, "/?namespace=web").await;
    assert_eq!(then, "/?namespace=web");
    let set = browser.set_cookies.join("\n");
    assert!(set.contains("kubefan_session="), "{set}");
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(set.contains(attribute), "{attribute} in {set}");
    }
    assert!(!set.contains("Secure"), "no Secure over plain http: {set}");
    assert!(
        set.contains("kubefan_signin=; Max-Age=0"),
        "the sign-in cookie is cleared: {set}"
    );
    let me: Value = browser.get(&env, "/session").await.json().await.unwrap();
    assert_eq!(me["signedIn"], true);
    assert_eq!(me["user"], "alice@example.com");
    assert_eq!(me["refreshable"], true);

    // The session authenticates as alice, whose group RBAC binds in web.
    let resp = browser.get(&env, "/api/v1/namespaces/batch/pods").await;
    assert_eq!(resp.status(), 403);
    let mut sse = SseClient::new(browser.get(&env, "/stream/pods").await);
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        view.apply(&sse.next().await.expect("snapshot"));
    }
    assert_eq!(namespaces(&view).into_iter().collect::<Vec<_>>(), ["web"]);

    // Too early to refresh: the issuer is not asked.
    let resp = browser.post(&env, "/session/refresh").await;
    assert_eq!(resp.status(), 200);
    let refreshes = || {
        issuer
            .counts()
            .refreshes
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert_eq!(refreshes(), 0);
    // In the second half of its life: refreshed, and the stream's end moves.
    until(signed_in_at + 3.5).await;
    let resp = browser.post(&env, "/session/refresh").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(refreshes(), 1);
    let first_expiry = signed_in_at + 6.0;
    until(first_expiry + 1.0).await;
    env.sim
        .create("pods", pod("after-the-first-token").ns("web").build())
        .unwrap();
    loop {
        let ev = tokio::time::timeout(WAIT, sse.next())
            .await
            .expect("the stream goes on")
            .expect("not ended");
        assert_ne!(
            ev.event, "ERROR",
            "the refreshed session's stream goes on: {:?}",
            ev.data
        );
        view.apply(&ev);
        if view
            .objects
            .keys()
            .any(|k| k.contains("after-the-first-token"))
        {
            break;
        }
    }

    // The issuer stops refreshing (the user was disabled): the refresh is
    // refused, the cookie cleared, and the stream ends with the token.
    issuer.revoke_refresh_tokens();
    until(first_expiry + 4.0).await;
    let resp = browser.post(&env, "/session/refresh").await;
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    validate_status(&body);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("no longer refreshes"),
        "{body}"
    );
    assert!(
        !browser.cookies.contains_key("kubefan_session"),
        "the cookie is cleared"
    );
    let error = sse.until_error(&mut view).await;
    assert_eq!(error.data["object"]["code"], 401);
    assert!(
        unix_now() < first_expiry + 3.5 + 6.0 + 1.0,
        "within one id-token lifetime"
    );
    let resp = browser.get(&env, "/stream/pods").await;
    assert_eq!(resp.status(), 401);
    // Two refreshes answered (one too early to ask the issuer), one session
    // ended.
    let metrics = env.metrics().await;
    assert_eq!(signins(&metrics, "Refresh", "Ok"), 2, "{metrics}");
    assert_eq!(signins(&metrics, "Refresh", "Ended"), 1, "{metrics}");
    env.stop().await;
}

/// A refresh whose id-token names other groups (the issuer took alice out
/// of team-web, whose RoleBinding let her see web) keeps nothing open
/// under the old ones: the stream opened with them ends with the old
/// id-token, not the refreshed one, and a stream opened anew is RBAC's
/// answer to the new groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_into_other_groups_ends_the_old_groups_streams_with_their_id_token() {
    let (issuer, _key) = issuer_for_alice().await;
    issuer.set_id_token_ttl(6);
    let env = oidc_env(team_sim(), signin_config(&issuer, None)).await;
    let mut browser = Browser::new(&issuer);
    let signed_in_at = unix_now();
    sign_in(&mut browser, &env, "/").await;
    let mut sse = SseClient::new(browser.get(&env, "/stream/pods").await);
    let mut view = ClientView::new();
    while view.snapshots == 0 {
        view.apply(&sse.next().await.expect("snapshot"));
    }
    assert_eq!(namespaces(&view).into_iter().collect::<Vec<_>>(), ["web"]);

    // Out of team-web, and refreshed into a long id-token.
    issuer.sign_in_as("alice@example.com", &[]);
    issuer.set_id_token_ttl(600);
    until(signed_in_at + 3.5).await;
    let resp = browser.post(&env, "/session/refresh").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        issuer
            .counts()
            .refreshes
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let error = sse.until_error(&mut view).await;
    assert_eq!(error.data["object"]["code"], 401, "{:?}", error.data);
    assert!(
        unix_now() < signed_in_at + 6.0 + 2.0,
        "ended with the first id-token (6 s), not the refreshed one (600 s)"
    );
    let resp = browser.get(&env, "/stream/pods").await;
    assert_eq!(resp.status(), 403, "team-web's rights went with the group");
    validate_status(&resp.json().await.unwrap());
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_made_on_one_replica_works_on_another_with_the_shared_secret() {
    let (issuer, _key) = issuer_for_alice().await;
    let secret = secret_file();
    let sim = team_sim();
    let a = oidc_env(sim.clone(), signin_config(&issuer, Some(secret.clone()))).await;
    let b = oidc_env(sim.clone(), signin_config(&issuer, Some(secret))).await;
    let other = oidc_env(sim, signin_config(&issuer, Some(secret_file()))).await;
    let mut browser = Browser::new(&issuer);
    sign_in(&mut browser, &a, "/").await;

    let resp = browser.get(&b, "/api/v1/namespaces/web/pods").await;
    assert_eq!(resp.status(), 200, "the session made on a works on b");
    let me: Value = browser.get(&b, "/session").await.json().await.unwrap();
    assert_eq!(me["user"], "alice@example.com");
    let resp = browser.post(&b, "/session/refresh").await;
    assert_eq!(resp.status(), 200);

    let resp = browser.get(&other, "/api/v1/namespaces/web/pods").await;
    assert_eq!(
        resp.status(),
        401,
        "a replica with another secret opens nothing"
    );
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("not one this gateway made"),
        "{body}"
    );
    for env in [a, b, other] {
        env.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_ins_that_do_not_add_up_are_refused_never_followed() {
    let (issuer, _key) = issuer_for_alice().await;
    let mut cfg = signin_config(&issuer, None);
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let env = oidc_env(team_sim(), cfg).await;
    let refused = |resp: reqwest::Response, why: &'static str| async move {
        assert_eq!(resp.status(), 400, "{why}");
        let body: Value = resp.json().await.unwrap();
        validate_status(&body);
        let message = body["message"].as_str().unwrap().to_string();
        assert!(message.contains(why), "want {why:?} in {message:?}");
    };

    // Somewhere else after signing in.
    let mut browser = Browser::new(&issuer);
    for then in [
        "//evil.example/",
        "https://evil.example/",
        "/%5Cevil.example",
    ] {
        let resp = browser.get(&env, &format!("/login?then={then}")).await;
        refused(resp, "not a path of this gateway").await;
    }
    // A callback this browser never started.
    let resp = browser.get(&env, "/oauth2/callback?code=x&state=y").await;
    refused(resp, "no sign-in in progress").await;

    // A state that is not the one started.
    let authorize = start(&mut browser, &env, "/").await;
    let callback = at_issuer(&browser, &authorize).await;
    let forged = callback.replace("state=", "state=forged");
    refused(
        finish(&mut browser, &env, &forged).await,
        "state does not match",
    )
    .await;

    // The code replayed, with the sign-in cookie of its first use.
    let authorize = start(&mut browser, &env, "/").await;
    let started = browser.cookies.clone();
    let callback = at_issuer(&browser, &authorize).await;
    assert_eq!(finish(&mut browser, &env, &callback).await.status(), 302);
    browser.cookies = started;
    let resp = finish(&mut browser, &env, &callback).await;
    refused(resp, "did not take the sign-in's code: invalid_grant").await;

    // The issuer refused the sign-in.
    let authorize = start(&mut browser, &env, "/").await;
    let state = authorize
        .split(['?', '&'])
        .find_map(|p| p.strip_prefix("state="))
        .unwrap()
        .to_string();
    let denied = format!("/oauth2/callback?error=access_denied&state={state}");
    refused(
        browser.get(&env, &denied).await,
        "did not sign you in: access_denied",
    )
    .await;

    // Signing out: the session cleared, the issuer told.
    sign_in(&mut browser, &env, "/").await;
    assert!(browser.cookies.contains_key("kubefan_session"));
    let resp = browser.get(&env, "/logout").await;
    let to = location(&resp);
    assert!(
        to.starts_with(&format!("{}/session/end?client_id=kubefan", issuer.url)),
        "{to}"
    );
    assert!(!browser.cookies.contains_key("kubefan_session"));
    let resp = browser.get(&env, "/stream/pods").await;
    assert_eq!(resp.status(), 401);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("sign in at /login"),
        "{body}"
    );

    // Each step counted by how it ended: what an operator watches for a
    // sign-in that fails for everyone (a wrong redirect URI, an issuer
    // down) or for someone (forged or stale callbacks).
    let metrics = env.metrics().await;
    for (step, result, n) in [
        ("Login", "Refused", 3),
        ("Login", "Ok", 4),
        ("Callback", "Refused", 4),
        ("Callback", "Ok", 2),
        ("Logout", "Ok", 1),
    ] {
        assert_eq!(
            signins(&metrics, step, result),
            n,
            "{step} {result}:\n{metrics}"
        );
    }
    env.stop().await;
}

/// `kubefan_signins_total{step,result}` in a `/metrics` text.
fn signins(metrics: &str, step: &str, result: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("kubefan_signins_total{"))
        .filter(|l| l.contains(&format!("step=\"{step}\"")))
        .filter(|l| l.contains(&format!("result=\"{result}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confidential_client_exchanges_the_code_with_its_secret() {
    let (issuer, _key) = issuer_for_alice().await;
    issuer.require_client_secret("s3cret");
    let dir = secret_file().parent().unwrap().to_path_buf();
    let with_secret = |secret: &str| {
        let path = dir.join(format!("client-secret-{secret}"));
        std::fs::write(&path, format!("{secret}\n")).unwrap();
        let mut cfg = signin_config(&issuer, None);
        cfg.auth.sign_in.client_secret_file = Some(path);
        cfg
    };
    let sim = team_sim();
    let right = oidc_env(sim.clone(), with_secret("s3cret")).await;
    let wrong = oidc_env(sim, with_secret("guess")).await;

    let mut browser = Browser::new(&issuer);
    assert_eq!(sign_in(&mut browser, &right, "/").await, "/");
    let resp = browser.get(&right, "/api/v1/namespaces/web/pods").await;
    assert_eq!(resp.status(), 200);

    let mut browser = Browser::new(&issuer);
    let authorize = start(&mut browser, &wrong, "/").await;
    let callback = at_issuer(&browser, &authorize).await;
    let resp = finish(&mut browser, &wrong, &callback).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("client authentication failed"),
        "{message}"
    );
    assert!(!browser.cookies.contains_key("kubefan_session"));
    right.stop().await;
    wrong.stop().await;
}

/// What `GET /login` (as a browser asks: HTML) and `GET /session` say
/// while the issuer cannot be used, and the issuer's readiness gauge.
async fn sign_in_state(env: &TestEnv) -> (reqwest::Response, Value, String) {
    // Not following the redirect to the issuer, once it is ready.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = tokio::time::timeout(
        WAIT,
        http.get(format!("{}/login", env.base))
            .header("accept", "text/html,application/xhtml+xml")
            .send(),
    )
    .await
    .unwrap()
    .unwrap();
    let session: Value = env
        .http
        .get(format!("{}/session", env.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    (login, session, env.metrics().await)
}

/// A set-up mistake no retry fixes (an issuer URL with a trailing slash
/// the issuer's own lacks; the issuer's CA not given) and an issuer that is
/// down are told apart: `/login` answers a page with the real reason and
/// whether waiting helps, `GET /session` says the same for scripts,
/// `kubefan_oidc_issuer_ready` is 0, and the log's WARN names the flag to
/// fix. Once the issuer answers, all of them say it is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_mistakes_are_named_with_whether_waiting_helps() {
    let (issuer, _key) = issuer_for_alice().await;
    let log = crate::support::access_log();
    let slash = format!("{}/", issuer.url);
    for (mistake, issuer_url, ca, why, fix) in [
        (
            "a trailing slash",
            slash.clone(),
            Some(issuer.ca_file.clone()),
            "names the issuer",
            "--oidc-issuer-url",
        ),
        (
            "no --oidc-ca-file",
            issuer.url.clone(),
            None,
            "certificate",
            "--oidc-ca-file",
        ),
    ] {
        let mut cfg = signin_config(&issuer, Some(secret_file()));
        // Its own listener: /metrics needs no token there.
        cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        cfg.auth.oidc.issuer_url = issuer_url.clone();
        cfg.auth.oidc.ca_file = ca;
        let env = spawn(team_sim(), cfg).await;
        let keys = env.app.auth().oidc().unwrap().keys();
        tokio::time::timeout(WAIT, keys.changes().until(|| keys.problem().is_some()))
            .await
            .expect("a first try at discovery");
        let (login, session, metrics) = sign_in_state(&env).await;
        assert_eq!(login.status(), 503, "{mistake}");
        assert!(login.headers().get("retry-after").is_none(), "{mistake}");
        let page = login.text().await.unwrap();
        assert!(page.starts_with("<!DOCTYPE html>"), "{mistake}: {page}");
        assert!(page.contains(why), "{mistake}: {page}");
        assert!(page.contains("Waiting will not help"), "{mistake}: {page}");
        assert!(page.contains(fix), "{mistake}: {page}");
        let state = &session["issuer"];
        assert_eq!(state["ready"], false, "{mistake}: {session}");
        assert_eq!(state["waitingHelps"], false, "{mistake}: {session}");
        assert!(
            state["reason"].as_str().unwrap().contains(why),
            "{mistake}: {session}"
        );
        assert!(
            state["fix"].as_str().unwrap().contains(fix),
            "{mistake}: {session}"
        );
        let gauge = format!("kubefan_oidc_issuer_ready{{issuer=\"{issuer_url}\"}} 0");
        assert!(metrics.contains(&gauge), "{mistake}: {metrics}");
        // A script (no HTML accepted) gets a Status saying the same.
        let status = env.get_json("/login").await;
        assert_eq!(status.0, 503, "{mistake}");
        let message = status.1["message"].as_str().unwrap();
        assert!(
            message.contains(why) && message.contains(fix),
            "{mistake}: {message}"
        );
        let warned = log
            .wait_for(&format!("naming {fix}"), |l| {
                l["issuer"] == issuer_url.as_str()
                    && l["fix"].as_str().is_some_and(|f| f.contains(fix))
            })
            .await;
        assert_eq!(warned["level"], "WARN", "{warned}");
        env.stop().await;
    }

    // Down: waiting helps, and the page says to try again.
    issuer.set_up(false);
    let mut cfg = signin_config(&issuer, Some(secret_file()));
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let env = spawn(team_sim(), cfg).await;
    let keys = env.app.auth().oidc().unwrap().keys();
    tokio::time::timeout(WAIT, keys.changes().until(|| keys.problem().is_some()))
        .await
        .expect("a first try at discovery");
    let (login, session, _) = sign_in_state(&env).await;
    assert_eq!(login.status(), 503);
    assert!(login.headers().get("retry-after").is_some());
    let page = login.text().await.unwrap();
    assert!(page.contains("kubefan keeps trying"), "{page}");
    assert!(!page.contains("Waiting will not help"), "{page}");
    assert_eq!(session["issuer"]["waitingHelps"], true, "{session}");
    assert_eq!(session["issuer"]["fix"], Value::Null, "{session}");

    issuer.set_up(true);
    tokio::time::timeout(WAIT, keys.changes().until(|| keys.loaded()))
        .await
        .expect("discovery is retried");
    let (login, session, metrics) = sign_in_state(&env).await;
    assert_eq!(login.status(), 302, "sign-in goes to the issuer");
    assert_eq!(session["issuer"]["ready"], true, "{session}");
    // Set with the keys, under the same lock.
    let gauge = format!("kubefan_oidc_issuer_ready{{issuer=\"{}\"}} 1", issuer.url);
    assert!(metrics.contains(&gauge), "{metrics}");
    env.stop().await;
}

/// A session refreshed on one replica reaches its streams on another
/// without a reconnect: `POST /session/refresh` answers a `renewal`, which
/// the page sends on its `/ws` socket (`renew`), and that socket's streams
/// run past the first id-token's expiry. The rotated refresh token is
/// spent once: the other replica, asked to refresh with the new cookie,
/// finds it not due and does not ask the issuer. A renewal is no session,
/// and a session is no renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_on_one_replica_renews_the_sessions_streams_on_another_and_spends_its_token_once()
{
    let (issuer, _key) = issuer_for_alice().await;
    issuer.set_id_token_ttl(6);
    let secret = secret_file();
    let sim = team_sim();
    let a = oidc_env(sim.clone(), signin_config(&issuer, Some(secret.clone()))).await;
    let b = oidc_env(sim, signin_config(&issuer, Some(secret))).await;
    let mut browser = Browser::new(&issuer);
    let signed_in_at = unix_now();
    sign_in(&mut browser, &a, "/").await;
    let refreshes = || {
        issuer
            .counts()
            .refreshes
            .load(std::sync::atomic::Ordering::Relaxed)
    };

    // The page's socket is on b.
    let mut ws = crate::ws::WsClient::connect_with(
        b.app.local_addr(),
        "/ws",
        &[("cookie", browser.cookie_header())],
    )
    .await;
    ws.subscribe(json!({"op": "subscribe", "id": "p", "resource": "pods", "namespace": "web"}))
        .await;
    loop {
        let msg = ws.next().await;
        if msg["type"] == "BOOKMARK" {
            break;
        }
    }

    // Refreshed on a, in the second half of the first id-token's life.
    until(signed_in_at + 3.5).await;
    let resp = browser.post(&a, "/session/refresh").await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(refreshes(), 1);
    let renewal = body["renewal"].as_str().expect("a renewal").to_string();
    // b, asked at once with the new cookie (the page's next refresh, or
    // another tab's after the lock), finds it not due: the rotated token
    // is not spent again.
    let resp = browser.post(&b, "/session/refresh").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(refreshes(), 1, "one refresh at the issuer for one session");

    // Neither stands for the other.
    let session = browser.cookies["kubefan_session"].clone();
    ws.send_json(json!({"op": "renew", "session": session}))
        .await;
    let refused = ws.next().await;
    assert_eq!(refused["type"], "ERROR", "{refused}");
    assert_eq!(refused["object"]["code"], 400, "{refused}");
    let as_cookie = b
        .http
        .get(format!("{}/api/v1/namespaces/web/pods", b.base))
        .header("cookie", format!("kubefan_session={renewal}"))
        .send()
        .await
        .unwrap();
    assert_eq!(as_cookie.status(), 401, "a renewal is no session");

    ws.send_json(json!({"op": "renew", "session": renewal}))
        .await;
    let renewed = ws.next().await;
    assert_eq!(renewed["type"], "RENEWED", "{renewed}");
    assert!(
        renewed["expiresInSeconds"].as_u64().unwrap() >= 4,
        "{renewed}"
    );

    // Past the first id-token's expiry, b's stream goes on.
    until(signed_in_at + 7.0).await;
    b.sim
        .create("pods", pod("after-the-first-token").ns("web").build())
        .unwrap();
    loop {
        let msg = ws.next().await;
        assert_ne!(msg["type"], "ERROR", "b's stream goes on: {msg}");
        if msg["type"] == "ADDED" && msg["object"]["metadata"]["name"] == "after-the-first-token" {
            break;
        }
    }
    for env in [a, b] {
        env.stop().await;
    }
}

/// Two refreshes of one session at once on one replica (two requests
/// carrying the same cookie: a page without Web Locks, a script) spend its
/// rotated refresh token once: the second waits for the first and is
/// answered with its result. Spent twice, the issuer would refuse the
/// second (it rotates refresh tokens), ending the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_refreshes_of_one_session_at_once_spend_its_refresh_token_once() {
    let (issuer, _key) = issuer_for_alice().await;
    issuer.set_id_token_ttl(4);
    let env = oidc_env(team_sim(), signin_config(&issuer, None)).await;
    let mut browser = Browser::new(&issuer);
    let signed_in_at = unix_now();
    sign_in(&mut browser, &env, "/").await;
    until(signed_in_at + 2.5).await;
    let cookie = browser.cookie_header();
    let refresh = || {
        browser
            .http
            .post(format!("{}/session/refresh", env.base))
            .header("cookie", cookie.clone())
            .send()
    };
    let (one, two) = tokio::time::timeout(WAIT, async { tokio::join!(refresh(), refresh()) })
        .await
        .expect("both answered");
    let (one, two) = (one.unwrap(), two.unwrap());
    assert_eq!((one.status().as_u16(), two.status().as_u16()), (200, 200));
    assert_eq!(
        issuer
            .counts()
            .refreshes
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "one refresh at the issuer"
    );
    let (one, two): (Value, Value) = (one.json().await.unwrap(), two.json().await.unwrap());
    assert_eq!(one["expires"], two["expires"], "the same refreshed session");
    env.stop().await;
}
