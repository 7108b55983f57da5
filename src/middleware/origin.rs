//! A request's host and origin: the loopback listener's host check
//! (DNS rebinding), same-origin WebSocket upgrades, and CORS headers for
//! the listed origins.

use actix_web::dev::ServiceRequest;
use actix_web::http::header::{self, HeaderMap, HeaderValue};

/// The `Origin` header, unless absent. `null` (a sandboxed frame, a
/// `file:` page, some redirects) is an origin like any other: never the
/// gateway's own, and never listed (`config::Error::NullOrigin`).
pub(super) fn origin(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .filter(|o| !o.is_empty())
        .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
}

/// The host name a request was sent to, its port aside (the `Host`
/// header, else HTTP/2's `:authority`): lowercase, without a trailing
/// dot, an IPv6 address without its brackets. `None` for a request that
/// names none (an HTTP/1.0 client's; a browser always does).
pub(super) fn request_host(req: &ServiceRequest) -> Option<String> {
    let authority = match req.headers().get(header::HOST) {
        Some(host) => host.to_str().unwrap_or("?").to_string(),
        None => req.uri().authority()?.as_str().to_string(),
    };
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => match authority.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => &authority,
        },
    };
    Some(host.trim_end_matches('.').to_ascii_lowercase())
}

/// Whether `host` ([`request_host`]) is a loopback name or address
/// (`localhost` and its subdomains, RFC 6761, which browsers resolve to
/// loopback themselves), or one of `allowed`.
pub(super) fn host_allowed(host: &str, allowed: &[String]) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
        || allowed.iter().any(|a| a == host)
}

/// Whether `origin` (`scheme://host[:port]`) names the host the request
/// was sent to (its `Host` header).
pub(super) fn same_origin(origin: &str, headers: &HeaderMap) -> bool {
    let Some(authority) = origin.split_once("://").map(|(_, a)| a) else {
        return false;
    };
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|host| host.eq_ignore_ascii_case(authority))
}

/// CORS headers for a listed origin: that origin, with credentials.
pub(super) fn cors(headers: &mut HeaderMap, origin: Option<&str>) {
    let Some(value) = origin.and_then(|o| HeaderValue::from_str(o).ok()) else {
        return;
    };
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
        HeaderValue::from_static("true"),
    );
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("Retry-After, WWW-Authenticate"),
    );
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_origin_compares_the_host_header() {
        let mut h = HeaderMap::new();
        h.insert(
            header::HOST,
            HeaderValue::from_static("kubefan.example:8080"),
        );
        assert!(same_origin("http://kubefan.example:8080", &h));
        assert!(same_origin("https://KUBEFAN.example:8080", &h));
        assert!(!same_origin("http://evil.example", &h));
        assert!(!same_origin("kubefan.example:8080", &h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert_eq!(origin(&h).as_deref(), Some("null"));
        assert!(!same_origin("null", &h));
    }

    #[test]
    fn loopback_hosts_and_the_listed_ones_are_allowed() {
        let host = |value: &'static str| {
            let req = actix_web::test::TestRequest::default()
                .insert_header((header::HOST, value))
                .to_srv_request();
            request_host(&req).unwrap()
        };
        let allowed = ["dash.internal".to_string()];
        for yes in [
            "localhost:8080",
            "LOCALHOST",
            "app.localhost:8080",
            "localhost.",
            "127.0.0.1:8080",
            "127.1.2.3",
            "[::1]:8080",
            "dash.internal:9000",
        ] {
            assert!(host_allowed(&host(yes), &allowed), "{yes}");
        }
        for no in [
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "10.0.0.1:8080",
            "[::2]:8080",
            "dash.internal.evil",
            "",
        ] {
            assert!(!host_allowed(&host(no), &allowed), "{no}");
        }
    }
}
