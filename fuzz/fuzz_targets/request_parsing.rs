//! Token extraction and stream query parsing, on arbitrary input: the
//! first line is an `Authorization` header, the second a query string, the
//! third a `Cookie` header. Nothing may panic, and a query stripped of its
//! token never yields one.

#![no_main]

use actix_web::http::header::{AUTHORIZATION, COOKIE, HeaderMap, HeaderValue};
use kubefan::auth;
use kubefan::selector::LabelSelector;
use kubefan::transport::parse_stream_query;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.splitn(3, '\n');
    let (authorization, query, cookie) = (
        lines.next().unwrap_or(""),
        lines.next().unwrap_or(""),
        lines.next().unwrap_or(""),
    );
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(authorization) {
        headers.insert(AUTHORIZATION, v);
    }
    if let Ok(v) = HeaderValue::from_str(cookie) {
        headers.insert(COOKIE, v);
    }
    let _ = auth::token_from(&headers, query, "kubefan_token");
    let stripped = auth::strip_token(query);
    assert!(auth::query_token(&stripped).is_none(), "{query:?} → {stripped:?}");
    let _ = parse_stream_query(&stripped);
    let _ = LabelSelector::parse(query);
});
