//! The `Warning` headers the API server attaches to a resource's LIST
//! (`299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1
//! EndpointSlice"`), kept so kubefan's own answers for that resource carry
//! them as kube-apiserver's do (RFC 7234 section 5.5; kube-apiserver's
//! `k8s.io/apiserver/pkg/warning` and `endpoints/deprecation`).
//!
//! Each distinct text is interned once for the process's life, so a
//! response's headers borrow it: the API server sends a handful (one per
//! deprecated resource or version), and [`MAX_WARNINGS`] bounds what a
//! misbehaving one could make kubefan keep.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex, PoisonError};

use http1::HeaderMap;
use http1::header::WARNING;

/// Distinct warning texts kept; later ones are dropped (and logged).
pub const MAX_WARNINGS: usize = 64;
/// Longest warning kept, in bytes.
pub const MAX_WARNING_LEN: usize = 1024;

static INTERNED: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Mutex::default);

/// `text`, interned: `None` when too long or when [`MAX_WARNINGS`] others
/// are kept already.
fn intern(text: &str) -> Option<&'static str> {
    if text.len() > MAX_WARNING_LEN {
        return None;
    }
    let mut interned = INTERNED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(kept) = interned.get(text) {
        return Some(kept);
    }
    if interned.len() >= MAX_WARNINGS {
        tracing::warn!(warning = %text, "the API server sent more distinct warnings than kubefan keeps; this one is not passed on");
        return None;
    }
    let kept: &'static str = Box::leak(text.to_owned().into_boxed_str());
    interned.insert(kept);
    Some(kept)
}

/// The `Warning` header values of a response, in order, each once, as
/// header values that can be sent on (visible ASCII).
pub fn of(headers: &HeaderMap) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for value in headers.get_all(WARNING) {
        let Ok(text) = value.to_str() else { continue };
        if let Some(kept) = intern(text.trim())
            && !kept.is_empty()
            && !out.contains(&kept)
        {
            out.push(kept);
        }
    }
    out
}

/// The text of a `Warning` header value (`299 - "TEXT"`), unquoted, as
/// client-go's `ParseWarningHeader` reads it; the value as it is when it
/// has no quoted text.
pub fn text(warning: &str) -> String {
    let Some(start) = warning.find('"') else {
        return warning.to_string();
    };
    let mut out = String::new();
    let mut chars = warning[start + 1..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return out,
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    warning.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http1::HeaderValue;

    #[test]
    fn warnings_are_read_in_order_once_each_and_bounded_in_length() {
        let mut headers = HeaderMap::new();
        let deprecated = r#"299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice""#;
        headers.append(WARNING, HeaderValue::from_static(deprecated));
        headers.append(WARNING, HeaderValue::from_static(r#"299 - "another""#));
        headers.append(WARNING, HeaderValue::from_static(deprecated));
        let long = format!(r#"299 - "{}""#, "x".repeat(MAX_WARNING_LEN));
        headers.append(WARNING, HeaderValue::from_str(&long).unwrap());
        headers.append(WARNING, HeaderValue::from_bytes(b"299 - \"\xff\"").unwrap());
        assert_eq!(of(&headers), [deprecated, r#"299 - "another""#]);
        // The same text is the same interned string.
        assert!(std::ptr::eq(of(&headers)[0], of(&headers)[0]));
    }

    #[test]
    fn a_warnings_text_is_its_quoted_part_unescaped() {
        assert_eq!(
            text(
                r#"299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice""#
            ),
            "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"
        );
        assert_eq!(text(r#"299 - "say \"hi\"""#), r#"say "hi""#);
        assert_eq!(text("299 - unquoted"), "299 - unquoted");
        assert_eq!(text(r#"299 - "unterminated"#), r#"299 - "unterminated"#);
    }
}
