//! Signing in with the OpenID Connect issuer (`--auth oidc`), into a
//! session (`auth::session`):
//!
//! - `GET /login[?then=/path]`: starts the authorization-code flow with
//!   PKCE (S256), `state` and `nonce`; what the callback needs is sealed
//!   into a ten-minute cookie, so any replica can finish it.
//! - `GET /oauth2/callback`: checks `state`, exchanges the code (with the
//!   client secret, or PKCE alone for a public client), verifies the
//!   id-token as a bearer id-token is verified (`auth::oidc`) and its
//!   `nonce`, sets the session cookie, and goes to `then`.
//! - `GET /session`: who is signed in, until when (for the dashboard).
//! - `POST /session/refresh`: refreshes a session in the second half of its
//!   id-token's life with the refresh token, moving its streams' lease on
//!   this replica; a session the issuer no longer refreshes is ended (401).
//! - `GET|POST /logout`: clears the session, and signs out at the issuer
//!   when it has an `end_session_endpoint`.
//!
//! Cookies: `HttpOnly`, `SameSite=Lax` (the issuer's redirect back is a
//! cross-site navigation that must carry the sign-in cookie), `Path=/`,
//! `Secure` when kubefan serves TLS or the request came through a
//! `--trusted-proxies` proxy over https. Refusals are 400 with a `Status`:
//! a `state` that does not match, a code the issuer does not take (one
//! already used), a `then` outside kubefan's own origin.
//!
//! The OAuth 2.0 protocol is the `oauth2` crate's; the id-token check is
//! kubefan's own (`auth::oidc`), the one bearer id-tokens get.

use std::time::Duration;

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, ResponseError, web};
use oauth2::{
    AuthorizationCode, CsrfToken, PkceCodeChallenge, PkceCodeVerifier, RefreshToken,
    RequestTokenError, Scope,
};
use serde::Deserialize;
use serde_json::json;

mod browser;
mod issuer;

use browser::{
    constant_time_eq, cookie, local_target, origin, redirect, redirect_uri, set_session,
};
use issuer::{client, session_of, token_error};

use crate::auth::oidc::Issuer;
use crate::auth::session::{
    PendingSignIn, SESSION_COOKIE, SIGNIN_COOKIE, SessionData, Sessions, at, cookie_of, random_id,
    unix_now,
};
use crate::metrics::SignInStep;
use crate::status::ApiError;
use crate::transport::state::AppState;

/// How long a sign-in may take at the issuer.
const SIGNIN_LIFETIME: Duration = Duration::from_secs(600);
/// The callback's path, when `--oidc-redirect-url` does not say.
pub const CALLBACK: &str = "/oauth2/callback";

/// Paths that need no credentials: they are how one gets them.
pub fn is_open(path: &str) -> bool {
    matches!(path, "/login" | CALLBACK | "/logout" | "/session/refresh")
}

/// The issuer and sessions, or 404 when sign-in is not configured.
fn parts(state: &AppState) -> Result<(&Issuer, &Sessions), ApiError> {
    match (state.auth.oidc(), state.auth.sessions()) {
        (Some(issuer), Some(sessions)) => Ok((issuer, sessions)),
        _ => Err(ApiError::NotFound(
            "sign-in needs --auth oidc (with --oidc-issuer-url and --oidc-client-id)".into(),
        )),
    }
}

#[derive(Deserialize)]
pub struct LoginQuery {
    then: Option<String>,
}

/// A sign-in step's answer, counted in `kubefan_signins_total` by its
/// status.
fn counted(
    state: &AppState,
    step: SignInStep,
    answer: Result<HttpResponse, ApiError>,
) -> HttpResponse {
    let resp = answer.unwrap_or_else(|err| err.error_response());
    state.metrics.signin(step, resp.status().as_u16());
    resp
}

/// `GET /login`. While the issuer cannot be used, a browser (one that
/// accepts HTML) gets a page saying why and whether waiting helps
/// ([`unavailable_page`]); a script the same as a `Status`.
pub async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<LoginQuery>,
) -> HttpResponse {
    if let Some(issuer) = state.auth.oidc()
        && issuer.keys().provider().is_none()
        && accepts_html(&req)
    {
        let resp = unavailable_page(issuer);
        state
            .metrics
            .signin(SignInStep::Login, resp.status().as_u16());
        return resp;
    }
    let answer = start(&req, &state, &query).await;
    counted(&state, SignInStep::Login, answer)
}

/// Whether the request is a browser's navigation (it accepts HTML).
fn accepts_html(req: &HttpRequest) -> bool {
    req.headers()
        .get_all(header::ACCEPT)
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/html"))
}

/// Sign-in while the issuer has not been discovered: 503, a page with the
/// last attempt's reason, and either "try again shortly" (the issuer did
/// not answer: `Retry-After`) or what the operator must change.
fn unavailable_page(issuer: &Issuer) -> HttpResponse {
    let keys = issuer.keys();
    // Not discovered, so not loaded: there is a blocker.
    let problem = keys.blocker().unwrap_or_default();
    let (advice, retry) = match &problem.fix {
        Some(fix) => (
            format!("Waiting will not help: the gateway's set-up must change: {fix}."),
            false,
        ),
        None => (
            "The identity provider has not answered. kubefan keeps trying: try again in a minute."
                .to_string(),
            true,
        ),
    };
    let reason = problem.reason;
    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>kubefan · sign-in unavailable</title>\
         <style>body{{font-family:system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem;line-height:1.5}}\
         code{{word-break:break-all}}</style></head><body>\
         <h1>Sign-in is not available</h1>\
         <p>kubefan cannot use the identity provider <code>{issuer}</code>.</p>\
         <p><strong>Why:</strong> <code>{reason}</code></p>\
         <p>{advice}</p>\
         <p><a href=\"login\">Try again</a></p></body></html>\n",
        issuer = html_escape(keys.issuer()),
        reason = html_escape(&reason),
        advice = html_escape(&advice),
    );
    let mut resp = HttpResponse::ServiceUnavailable();
    resp.content_type("text/html; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ));
    if retry {
        resp.insert_header((header::RETRY_AFTER, "30"));
    }
    resp.body(html)
}

/// `text` safe inside HTML text and attribute values.
fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

async fn start(
    req: &HttpRequest,
    state: &AppState,
    query: &LoginQuery,
) -> Result<HttpResponse, ApiError> {
    let (issuer, sessions) = parts(state)?;
    let then = local_target(query.then.as_deref())?;
    let (origin, secure) = origin(req, state)?;
    let redirect_uri = redirect_uri(issuer, &origin);
    let client = client(issuer, &redirect_uri)?;
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let nonce = random_id();
    let mut request = client
        .authorize_url(CsrfToken::new_random)
        .set_pkce_challenge(challenge)
        .add_extra_param("nonce", nonce.clone())
        .add_scope(Scope::new("openid".into()));
    for scope in &issuer.sign_in().scopes {
        if scope != "openid" {
            request = request.add_scope(Scope::new(scope.clone()));
        }
    }
    let (url, csrf) = request.url();
    let pending = PendingSignIn {
        state: csrf.secret().clone(),
        nonce,
        verifier: verifier.secret().clone(),
        redirect_uri,
        then,
    };
    let sealed = sessions.seal(SIGNIN_COOKIE, &pending);
    let mut resp = redirect(url.as_str());
    resp.headers_mut().append(
        header::SET_COOKIE,
        cookie(SIGNIN_COOKIE, &sealed, SIGNIN_LIFETIME, secure),
    );
    Ok(resp)
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /oauth2/callback`.
pub async fn callback(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<CallbackQuery>,
) -> HttpResponse {
    let answer = finish(&req, &state, &query).await;
    counted(&state, SignInStep::Callback, answer)
}

async fn finish(
    req: &HttpRequest,
    state: &AppState,
    query: &CallbackQuery,
) -> Result<HttpResponse, ApiError> {
    let (issuer, sessions) = parts(state)?;
    let (_, secure) = origin(req, state)?;
    let pending: PendingSignIn = cookie_of(req.headers(), SIGNIN_COOKIE)
        .and_then(|sealed| sessions.open(SIGNIN_COOKIE, &sealed))
        .ok_or_else(|| {
            ApiError::BadRequest(
                "no sign-in in progress in this browser (or it took more than ten minutes): start again at /login".into(),
            )
        })?;
    if let Some(error) = &query.error {
        return Err(ApiError::BadRequest(format!(
            "the issuer did not sign you in: {error}{}",
            query
                .error_description
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default()
        )));
    }
    let given = query.state.as_deref().unwrap_or("");
    if !constant_time_eq(given.as_bytes(), pending.state.as_bytes()) {
        return Err(ApiError::BadRequest(
            "the sign-in's state does not match the one this browser started; start again at /login".into(),
        ));
    }
    let code = query
        .code
        .clone()
        .ok_or_else(|| ApiError::BadRequest("the callback has no code".into()))?;
    let client = client(issuer, &pending.redirect_uri)?;
    let tokens = client
        .exchange_code(AuthorizationCode::new(code))
        .set_pkce_verifier(PkceCodeVerifier::new(pending.verifier.clone()))
        .request_async(issuer.http())
        .await
        .map_err(|e| token_error("the issuer did not take the sign-in's code", e))?;
    let session = session_of(issuer, &tokens, None, Some(&pending.nonce)).await?;
    let mut resp = redirect(&pending.then);
    set_session(&mut resp, sessions, &session, secure)?;
    resp.headers_mut().append(
        header::SET_COOKIE,
        cookie(SIGNIN_COOKIE, "", Duration::ZERO, secure),
    );
    tracing::info!(user = %session.user, "signed in");
    Ok(resp)
}

/// `GET /session`: who is signed in.
pub async fn whoami(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let sign_in = state.auth.sessions().is_some();
    let session = state
        .auth
        .sessions()
        .and_then(|s| s.session_of(req.headers()))
        .and_then(Result::ok);
    let body = match session {
        Some(s) => json!({
            "signedIn": unix_now() < s.exp,
            "user": s.user,
            "groups": s.groups,
            "expires": httpdate::fmt_http_date(at(s.exp)),
            "expiresInSeconds": s.exp.saturating_sub(unix_now()),
            "refreshable": s.refresh.is_some(),
            "signIn": sign_in,
        }),
        None => json!({"signedIn": false, "signIn": sign_in}),
    };
    let mut body = body;
    // For scripts and the page: whether sign-in can work now, and if not,
    // why and whether waiting helps.
    if let Some(issuer) = state.auth.oidc() {
        let keys = issuer.keys();
        body["issuer"] = match keys.blocker() {
            None => json!({"url": keys.issuer(), "ready": true}),
            Some(p) => json!({"url": keys.issuer(), "ready": false,
                "waitingHelps": p.waiting_helps(), "reason": p.reason, "fix": p.fix}),
        };
    }
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(body)
}

/// `POST /session/refresh`.
pub async fn refresh(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let answer = match refreshed(&req, &state).await {
        Ok(resp) => Ok(resp),
        Err(Refusal::Ended(why, secure)) => {
            let mut resp = ApiError::Unauthorized(why).error_response();
            resp.headers_mut().append(
                header::SET_COOKIE,
                cookie(SESSION_COOKIE, "", Duration::ZERO, secure),
            );
            Ok(resp)
        }
        Err(Refusal::Error(err)) => Err(err),
    };
    counted(&state, SignInStep::Refresh, answer)
}

/// Why a refresh was refused: the session is over (its cookie is
/// cleared), or any other error.
enum Refusal {
    Ended(String, bool),
    Error(ApiError),
}

impl From<ApiError> for Refusal {
    fn from(err: ApiError) -> Refusal {
        Refusal::Error(err)
    }
}

async fn refreshed(req: &HttpRequest, state: &AppState) -> Result<HttpResponse, Refusal> {
    let (issuer, sessions) = parts(state)?;
    let (origin, secure) = origin(req, state)?;
    let session = match sessions.session_of(req.headers()) {
        Some(Ok(session)) => session,
        Some(Err(err)) => return Err(Refusal::Ended(err.to_string(), secure)),
        None => {
            return Err(ApiError::Unauthorized("not signed in: sign in at /login".into()).into());
        }
    };
    let now = unix_now();
    if now
        >= session
            .signed_in
            .saturating_add(sessions.max_age().as_secs())
    {
        return Err(Refusal::Ended(
            "the session is older than --session-max-age-hours; sign in again at /login".into(),
            secure,
        ));
    }
    let fresh = if session.due(now) {
        let Some(token) = session.refresh.clone() else {
            return Err(ApiError::Unauthorized(
                "the issuer gave this session no refresh token; sign in again at /login when it expires".into(),
            )
            .into());
        };
        // One refresh of a session at a time here; a request that still
        // carries the refresh token the last one spent gets its result.
        let _one = sessions.refreshing(&session.sid).await;
        if let Some(fresh) = sessions.rotated(&token) {
            return answer(sessions, fresh, now, secure);
        }
        let client = client(issuer, &redirect_uri(issuer, &origin))?;
        let refreshed = client
            .exchange_refresh_token(&RefreshToken::new(token.clone()))
            .request_async(issuer.http())
            .await;
        let tokens = match refreshed {
            Ok(tokens) => tokens,
            Err(RequestTokenError::ServerResponse(resp)) => {
                tracing::info!(user = %session.user, error = %resp.error(), "the issuer no longer refreshes a session");
                return Err(Refusal::Ended(
                    format!(
                        "the issuer no longer refreshes this session ({}); sign in again at /login",
                        resp.error()
                    ),
                    secure,
                ));
            }
            Err(other) => {
                return Err(ApiError::Unavailable(format!(
                    "the session could not be refreshed now: {other}"
                ))
                .into());
            }
        };
        let fresh = session_of(issuer, &tokens, Some(&session), None).await?;
        sessions.remember_rotation(&token, &fresh);
        fresh
    } else {
        session
    };
    answer(sessions, fresh, now, secure)
}

/// A refresh's answer: the session's leases here moved, its renewal for
/// other replicas, the cookie set again.
fn answer(
    sessions: &Sessions,
    fresh: SessionData,
    now: u64,
    secure: bool,
) -> Result<HttpResponse, Refusal> {
    sessions.extend(&fresh);
    let mut resp = HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(json!({
            // For the page's streams on other replicas (`/ws` `renew`).
            "renewal": sessions.renewal(&fresh),
            "user": fresh.user,
            "expires": httpdate::fmt_http_date(at(fresh.exp)),
            "expiresInSeconds": fresh.exp.saturating_sub(now),
        }));
    set_session(&mut resp, sessions, &fresh, secure)?;
    Ok(resp)
}

/// `GET|POST /logout`.
pub async fn logout(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let (origin, secure) = origin(&req, &state).unwrap_or(("".into(), false));
    let user = state
        .auth
        .sessions()
        .and_then(|s| s.session_of(req.headers()))
        .and_then(Result::ok)
        .map(|s| s.user);
    let end_session = state.auth.oidc().and_then(|issuer| {
        Some((
            issuer,
            issuer.keys().provider()?.end_session_endpoint.clone()?,
        ))
    });
    let target = match end_session {
        Some((issuer, endpoint)) if user.is_some() => {
            let mut url = oauth2::url::Url::parse(&endpoint).ok();
            if let Some(url) = &mut url {
                url.query_pairs_mut()
                    .append_pair("client_id", &issuer.config().client_id)
                    .append_pair("post_logout_redirect_uri", &format!("{origin}/"));
            }
            url.map_or_else(|| "/".to_string(), |u| u.to_string())
        }
        _ => "/".to_string(),
    };
    if let Some(user) = user {
        tracing::info!(%user, "signed out");
    }
    let mut resp = redirect(&target);
    let cleared = cookie(SESSION_COOKIE, "", Duration::ZERO, secure);
    resp.headers_mut().append(header::SET_COOKIE, cleared);
    let token = format!(
        "{}=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict",
        state.auth.cookie_name()
    );
    if let Ok(token) = HeaderValue::from_str(&token) {
        resp.headers_mut().append(header::SET_COOKIE, token);
    }
    state
        .metrics
        .signin(SignInStep::Logout, resp.status().as_u16());
    resp
}
