//! The browser's side of signing in: the origin it reached kubefan at,
//! the redirect URI, where it may be sent after, and the cookies.

use std::time::Duration;

use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpRequest, HttpResponse};

use super::CALLBACK;
use crate::auth::oidc::Issuer;
use crate::auth::session::{MAX_SEALED, SESSION_COOKIE, SessionData, Sessions, unix_now};
use crate::status::ApiError;
use crate::transport::state::AppState;

/// `scheme://host` the browser reached kubefan at (the `X-Forwarded-*`
/// headers of a `--trusted-proxies` proxy, else kubefan's own listener and
/// the `Host` header), and whether cookies are `Secure` (https there, or
/// an https `--oidc-redirect-url`).
pub(super) fn origin(req: &HttpRequest, state: &AppState) -> Result<(String, bool), ApiError> {
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
pub(super) fn redirect_uri(issuer: &Issuer, origin: &str) -> String {
    match issuer.sign_in().redirect_url.as_deref() {
        Some(url) if url.starts_with('/') => format!("{origin}{url}"),
        Some(url) => url.to_string(),
        None => format!("{origin}{CALLBACK}"),
    }
}

/// A path of this gateway to go to after signing in; anything that could
/// leave its origin (`//host`, `/\host`, a scheme) is refused.
pub(super) fn local_target(then: Option<&str>) -> Result<String, ApiError> {
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

pub(super) fn cookie(name: &str, value: &str, max_age: Duration, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{name}={value}; Max-Age={}; Path=/; HttpOnly; SameSite=Lax{secure}",
        max_age.as_secs()
    ))
    .expect("sealed cookies are base64")
}

pub(super) fn redirect(to: &str) -> HttpResponse {
    HttpResponse::Found()
        .insert_header((header::LOCATION, to))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .finish()
}

/// Sets the session cookie: for the session's longest life when it can
/// be refreshed, else until its id-token expires.
pub(super) fn set_session(
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

pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
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
