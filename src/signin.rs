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
use oauth2::basic::{
    BasicErrorResponse, BasicRevocationErrorResponse, BasicTokenIntrospectionResponse,
    BasicTokenType,
};
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, Client, ClientId, ClientSecret, CsrfToken,
    EndpointNotSet, EndpointSet, ExtraTokenFields, PkceCodeChallenge, PkceCodeVerifier,
    RedirectUrl, RefreshToken, RequestTokenError, Scope, StandardRevocableToken,
    StandardTokenResponse, TokenResponse, TokenUrl,
};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::auth::oidc::Issuer;
use crate::auth::session::{
    MAX_SEALED, PendingSignIn, SESSION_COOKIE, SIGNIN_COOKIE, SessionData, Sessions, at, cookie_of,
    random_id, unix_now,
};
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

/// The token endpoint's answer: the standard fields and the id-token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IdTokenField {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id_token: Option<String>,
}
impl ExtraTokenFields for IdTokenField {}
type Tokens = StandardTokenResponse<IdTokenField, BasicTokenType>;
type OAuth = Client<
    BasicErrorResponse,
    Tokens,
    BasicTokenIntrospectionResponse,
    StandardRevocableToken,
    BasicRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointSet,
>;

/// The issuer and sessions, or 404 when sign-in is not configured.
fn parts(state: &AppState) -> Result<(&Issuer, &Sessions), ApiError> {
    match (state.auth.oidc(), state.auth.sessions()) {
        (Some(issuer), Some(sessions)) => Ok((issuer, sessions)),
        _ => Err(ApiError::NotFound(
            "sign-in needs --auth oidc (with --oidc-issuer-url and --oidc-client-id)".into(),
        )),
    }
}

/// kubefan as the issuer's client, sending the browser back to
/// `redirect_uri`.
fn client(issuer: &Issuer, redirect_uri: &str) -> Result<OAuth, ApiError> {
    let provider = issuer.keys().provider().ok_or_else(|| {
        ApiError::Unavailable(format!(
            "the OIDC issuer {} is not reachable yet; try again shortly",
            issuer.config().issuer_url
        ))
    })?;
    let endpoint = |what: &str, url: &Option<String>| {
        url.clone().ok_or_else(|| {
            ApiError::Unavailable(format!(
                "the OIDC issuer's discovery document names no {what}"
            ))
        })
    };
    let bad = |e: oauth2::url::ParseError| ApiError::Unavailable(format!("issuer endpoint: {e}"));
    let mut client = Client::new(ClientId::new(issuer.config().client_id.clone()))
        .set_auth_uri(
            AuthUrl::new(endpoint(
                "authorization_endpoint",
                &provider.authorization_endpoint,
            )?)
            .map_err(bad)?,
        )
        .set_token_uri(
            TokenUrl::new(endpoint("token_endpoint", &provider.token_endpoint)?).map_err(bad)?,
        )
        .set_redirect_uri(
            RedirectUrl::new(redirect_uri.to_string())
                .map_err(|e| ApiError::BadRequest(format!("redirect URL: {e}")))?,
        );
    client = match issuer.client_secret() {
        Some(secret) => {
            client.set_client_secret(ClientSecret::new(secret.expose_secret().to_string()))
        }
        // A public client names itself in the request body.
        None => client.set_auth_type(AuthType::RequestBody),
    };
    Ok(client)
}

/// `scheme://host` the browser reached kubefan at (the `X-Forwarded-*`
/// headers of a `--trusted-proxies` proxy, else kubefan's own listener and
/// the `Host` header), and whether cookies are `Secure` (https there, or
/// an https `--oidc-redirect-url`).
fn origin(req: &HttpRequest, state: &AppState) -> Result<(String, bool), ApiError> {
    let headers = req.headers();
    let first = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let trusted = req.peer_addr().is_some_and(|peer| {
        state
            .limits
            .config()
            .trusted_proxies
            .iter()
            .any(|net| net.contains(&peer.ip()))
    });
    let own = if state.tls { "https" } else { "http" };
    let (scheme, host) = if trusted {
        (
            first("x-forwarded-proto").unwrap_or_else(|| own.to_string()),
            first("x-forwarded-host").or_else(|| first("host")),
        )
    } else {
        (own.to_string(), first("host"))
    };
    let host = host.ok_or_else(|| ApiError::BadRequest("no Host header".into()))?;
    let sane = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b));
    if !sane || !(scheme == "http" || scheme == "https") {
        return Err(ApiError::BadRequest(format!(
            "cannot tell this gateway's address from {scheme}://{host}"
        )));
    }
    // Behind an ingress that terminates TLS, a public https redirect URL
    // says the browser is on https too.
    let public_https = state.auth.oidc().is_some_and(|issuer| {
        issuer
            .sign_in()
            .redirect_url
            .as_deref()
            .is_some_and(|url| url.starts_with("https://"))
    });
    Ok((
        format!("{scheme}://{host}"),
        scheme == "https" || public_https,
    ))
}

/// The redirect URI: `--oidc-redirect-url` (a path is taken on the
/// request's origin), else [`CALLBACK`] on the request's origin.
fn redirect_uri(issuer: &Issuer, origin: &str) -> String {
    match issuer.sign_in().redirect_url.as_deref() {
        Some(url) if url.starts_with('/') => format!("{origin}{url}"),
        Some(url) => url.to_string(),
        None => format!("{origin}{CALLBACK}"),
    }
}

/// A path of this gateway to go to after signing in; anything that could
/// leave its origin (`//host`, `/\host`, a scheme) is refused.
fn local_target(then: Option<&str>) -> Result<String, ApiError> {
    let then = then.unwrap_or("/");
    let local = then.starts_with('/')
        && !then.starts_with("//")
        && !then.starts_with("/\\")
        && !then.chars().any(|c| c.is_control() || c == '\\');
    if !local {
        return Err(ApiError::BadRequest(format!(
            "then={then:?} is not a path of this gateway; only local paths (/...) are followed"
        )));
    }
    Ok(then.to_string())
}

fn cookie(name: &str, value: &str, max_age: Duration, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{name}={value}; Max-Age={}; Path=/; HttpOnly; SameSite=Lax{secure}",
        max_age.as_secs()
    ))
    .expect("sealed cookies are base64")
}

fn redirect(to: &str) -> HttpResponse {
    HttpResponse::Found()
        .insert_header((header::LOCATION, to))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .finish()
}

#[derive(Deserialize)]
pub struct LoginQuery {
    then: Option<String>,
}

/// `GET /login`.
pub async fn login(
    req: HttpRequest,
    state: web::Data<AppState>,
    query: web::Query<LoginQuery>,
) -> Result<HttpResponse, ApiError> {
    let (issuer, sessions) = parts(&state)?;
    let then = local_target(query.then.as_deref())?;
    let (origin, secure) = origin(&req, &state)?;
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
) -> Result<HttpResponse, ApiError> {
    let (issuer, sessions) = parts(&state)?;
    let (_, secure) = origin(&req, &state)?;
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

/// A session from the token endpoint's answer: its id-token verified (and
/// its nonce, at sign-in); on a refresh, the same subject as `before`,
/// whose refresh token stays if the issuer sent no new one.
async fn session_of(
    issuer: &Issuer,
    tokens: &Tokens,
    before: Option<&SessionData>,
    nonce: Option<&str>,
) -> Result<SessionData, ApiError> {
    let id_token = tokens.extra_fields().id_token.as_deref().ok_or_else(|| {
        ApiError::Status(
            502,
            "BadGateway",
            "the issuer's answer has no id_token (is openid among --oidc-scopes?)".into(),
        )
    })?;
    let verified = issuer.verify_claims(id_token).await.map_err(|e| {
        ApiError::Unauthorized(format!("the issuer's id-token is not accepted: {e}"))
    })?;
    if let Some(nonce) = nonce
        && verified.claim("nonce") != Some(nonce)
    {
        return Err(ApiError::BadRequest(
            "the id-token's nonce is not this sign-in's".into(),
        ));
    }
    let sub = verified.claim("sub").unwrap_or_default().to_string();
    if let Some(before) = before
        && before.sub != sub
    {
        return Err(ApiError::Unauthorized(
            "the refreshed id-token names another subject".into(),
        ));
    }
    let exp = verified.seconds("exp").unwrap_or(0);
    let iat = verified.seconds("iat").unwrap_or_else(unix_now).min(exp);
    Ok(SessionData {
        sid: before.map_or_else(random_id, |b| b.sid.clone()),
        sub,
        user: verified.user.username,
        groups: verified.user.groups,
        iat,
        exp,
        signed_in: before.map_or_else(unix_now, |b| b.signed_in),
        refresh: tokens
            .refresh_token()
            .map(|t| t.secret().clone())
            .or_else(|| before.and_then(|b| b.refresh.clone())),
    })
}

/// Sets the session cookie: for the session's longest life when it can
/// be refreshed, else until its id-token expires.
fn set_session(
    resp: &mut HttpResponse,
    sessions: &Sessions,
    session: &SessionData,
    secure: bool,
) -> Result<(), ApiError> {
    let sealed = sessions.seal(SESSION_COOKIE, session);
    if sealed.len() > MAX_SEALED {
        return Err(ApiError::Status(
            500,
            "InternalError",
            format!(
                "the session ({} groups) is {} bytes sealed, more than a cookie holds ({MAX_SEALED}); have the issuer send fewer groups",
                session.groups.len(),
                sealed.len()
            ),
        ));
    }
    let now = unix_now();
    let lifetime = match session.refresh {
        Some(_) => (session.signed_in + sessions.max_age().as_secs()).saturating_sub(now),
        None => session.exp.saturating_sub(now),
    };
    resp.headers_mut().append(
        header::SET_COOKIE,
        cookie(
            SESSION_COOKIE,
            &sealed,
            Duration::from_secs(lifetime),
            secure,
        ),
    );
    Ok(())
}

fn token_error<RE: std::error::Error + 'static>(
    what: &str,
    err: RequestTokenError<RE, BasicErrorResponse>,
) -> ApiError {
    match err {
        RequestTokenError::ServerResponse(resp) => ApiError::BadRequest(format!(
            "{what}: {}{}",
            resp.error(),
            resp.error_description()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        )),
        other => ApiError::Unavailable(format!("{what}: {other}")),
    }
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
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(body)
}

/// `POST /session/refresh`.
pub async fn refresh(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    match refreshed(&req, &state).await {
        Ok(resp) => resp,
        Err(Refusal::Ended(why, secure)) => {
            let mut resp = ApiError::Unauthorized(why).error_response();
            resp.headers_mut().append(
                header::SET_COOKIE,
                cookie(SESSION_COOKIE, "", Duration::ZERO, secure),
            );
            resp
        }
        Err(Refusal::Error(err)) => err.error_response(),
    }
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
        let client = client(issuer, &redirect_uri(issuer, &origin))?;
        let refreshed = client
            .exchange_refresh_token(&RefreshToken::new(token))
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
        session_of(issuer, &tokens, Some(&session), None).await?
    } else {
        session
    };
    sessions.extend(&fresh.sid, at(fresh.exp));
    let mut resp = HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(json!({
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
    resp
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_are_followed_after_signing_in() {
        assert_eq!(local_target(None).unwrap(), "/");
        assert_eq!(
            local_target(Some("/?namespace=web")).unwrap(),
            "/?namespace=web"
        );
        for bad in [
            "https://evil.example/",
            "//evil.example/",
            "/\\evil.example",
            "evil",
            "/a\\b",
            "/a\nb",
        ] {
            assert!(local_target(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn states_compare_in_constant_time_and_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
