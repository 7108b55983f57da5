//! The token cookie: a page trades its bearer token once for a cookie
//! holding it, so the token stops travelling in URLs (which end up in browser history, proxy
//! and ingress access logs, and `Referer` headers).
//!
//! `POST /session` with the token as `Authorization: Bearer` (the
//! middleware authenticates it like any request) answers 204 with the
//! token in the `--auth-cookie` cookie: `HttpOnly` (scripts cannot read
//! it), `SameSite=Strict` (no other site's page sends it), `Secure` when
//! the request came over HTTPS, `Path=/`, and a `Max-Age` no longer than
//! the token's own lifetime (a JWT's `exp`; a Kubernetes token, whose
//! lifetime TokenReview does not tell, gets [`UNKNOWN_LIFETIME`], and is
//! reviewed again anyway while streams are open). `DELETE /session` clears
//! it (the token itself stays valid: nothing is revoked). Streams and
//! requests then authenticate with the cookie as before.
//!
//! This is not a session: the cookie is the token. Signing in with the
//! OpenID Connect issuer makes a real one (`crate::signin`,
//! `auth::session`).

use std::time::{Duration, SystemTime};

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};

use crate::auth::{self, Principal};
use crate::status::ApiError;
use crate::transport::state::AppState;

/// The longest a session cookie lives when the token's lifetime is unknown.
pub const UNKNOWN_LIFETIME: Duration = Duration::from_secs(3600);

/// `POST /session`: the bearer token, as a session cookie.
pub async fn create(
    req: HttpRequest,
    state: web::Data<AppState>,
    principal: Principal,
) -> Result<HttpResponse, ApiError> {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(auth::bearer_token)
        .ok_or_else(|| {
            ApiError::BadRequest(
                "send the token to trade as Authorization: Bearer (not in the URL)".into(),
            )
        })?;
    if !token
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b';' && b != b',' && b != b'"')
    {
        return Err(ApiError::BadRequest(
            "the token has characters a cookie cannot carry".into(),
        ));
    }
    let lifetime = match principal.expires() {
        Some(expires) => expires
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            .min(UNKNOWN_LIFETIME * 24),
        None => UNKNOWN_LIFETIME,
    };
    let cookie = cookie(&req, state.auth.cookie_name(), token, lifetime);
    Ok(HttpResponse::NoContent()
        .insert_header((header::SET_COOKIE, cookie))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .finish())
}

/// `DELETE /session`: the cookie, cleared.
pub async fn delete(req: HttpRequest, state: web::Data<AppState>) -> HttpResponse {
    let cookie = cookie(&req, state.auth.cookie_name(), "", Duration::ZERO);
    HttpResponse::NoContent()
        .insert_header((header::SET_COOKIE, cookie))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .finish()
}

fn cookie(req: &HttpRequest, name: &str, value: &str, lifetime: Duration) -> String {
    let secure = if req.connection_info().scheme() == "https" {
        "; Secure"
    } else {
        ""
    };
    format!(
        "{name}={value}; Max-Age={}; Path=/; HttpOnly; SameSite=Strict{secure}",
        lifetime.as_secs()
    )
}
