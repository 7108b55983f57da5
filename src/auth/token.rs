//! Where a request carries its token: `Authorization: Bearer`, the
//! `access_token` query parameter (EventSource cannot set headers), or a
//! cookie. Tokens are never logged.

use std::borrow::Cow;

use actix_web::http::header::{self, HeaderMap};

/// The query parameter a token may be sent in.
pub const TOKEN_PARAM: &str = "access_token";

/// The token of a request: `Authorization: Bearer`, else the
/// `access_token` query parameter, else the cookie.
pub fn token_from(headers: &HeaderMap, query: &str, cookie: &str) -> Option<String> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    if let Some(token) = bearer {
        return Some(token.to_string());
    }
    if let Some(token) = query_token(query) {
        return Some(token);
    }
    headers
        .get_all(header::COOKIE)
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| cookie_value(v, cookie))
}

/// `Bearer TOKEN` (scheme case-insensitive, as RFC 7235 says).
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Whether a query pair's key is `access_token`, read as the stream
/// parsers read keys: percent-decoded (`access%5Ftoken` is one too, and
/// must be neither ignored as a credential nor logged).
fn is_token_key(key: &str) -> bool {
    key == TOKEN_PARAM || (key.contains('%') && percent_decode(key).as_deref() == Some(TOKEN_PARAM))
}

/// The first non-empty `access_token` in a query string, percent-decoded.
pub fn query_token(query: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        if !is_token_key(key) || value.is_empty() {
            return None;
        }
        let decoded = percent_decode(value)?;
        (!decoded.is_empty()).then_some(decoded)
    })
}

/// The query string without `access_token` pairs, so that stream query
/// parsers (which refuse unknown parameters) never see the token.
pub fn strip_token(query: &str) -> Cow<'_, str> {
    let is_token = |pair: &&str| pair.split('=').next().is_some_and(is_token_key);
    if !query.split('&').any(|p| is_token(&p)) {
        return Cow::Borrowed(query);
    }
    Cow::Owned(
        query
            .split('&')
            .filter(|p| !p.is_empty() && !is_token(p))
            .collect::<Vec<_>>()
            .join("&"),
    )
}

pub(super) fn cookie_value(header: &str, name: &str) -> Option<String> {
    header.split(';').find_map(|pair| {
        let (key, value) = pair.trim().split_once('=')?;
        let value = value.trim().trim_matches('"');
        (key.trim() == name && !value.is_empty()).then(|| value.to_string())
    })
}

/// `application/x-www-form-urlencoded` decoding; `None` for invalid
/// escapes or non-UTF-8 results.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                // Two hex digits: from_str_radix alone would take `%+f`.
                let hex = bytes.get(i + 1..i + 3)?;
                if !hex.iter().all(u8::is_ascii_hexdigit) {
                    return None;
                }
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::HeaderValue;

    #[test]
    fn tokens_are_read_from_header_then_query_then_cookie() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; kubefan_token=from-cookie"),
        );
        assert_eq!(token_from(&h, "", "kubefan_token").unwrap(), "from-cookie");
        assert_eq!(
            token_from(&h, "namespace=x&access_token=q%2Eq", "kubefan_token").unwrap(),
            "q.q"
        );
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  from-header "),
        );
        assert_eq!(
            token_from(&h, "access_token=q", "kubefan_token").unwrap(),
            "from-header"
        );
        assert_eq!(token_from(&HeaderMap::new(), "access_token=", "c"), None);
        assert_eq!(token_from(&HeaderMap::new(), "access_token=%zz", "c"), None);
        assert_eq!(token_from(&HeaderMap::new(), "access_token=%+f", "c"), None);
        assert_eq!(token_from(&HeaderMap::new(), "access_token=a%", "c"), None);
        assert_eq!(bearer_token("Basic abc"), None);
    }

    #[test]
    fn the_token_is_stripped_from_stream_queries() {
        assert_eq!(strip_token("namespace=a"), "namespace=a");
        assert_eq!(
            strip_token("access_token=x&namespace=a&access_token"),
            "namespace=a"
        );
        assert_eq!(strip_token("access_token=x"), "");
        // Its key percent-encoded is still the token: stripped, and read.
        assert_eq!(
            strip_token("access%5Ftoken=secret&namespace=a&access%5ftoken"),
            "namespace=a"
        );
        assert_eq!(
            query_token("namespace=a&access%5Ftoken=q").as_deref(),
            Some("q")
        );
    }
}
