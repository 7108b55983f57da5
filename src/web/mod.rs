//! The dashboard page at `/`: a real-time "pods on nodes" view that uses
//! only the public stream protocol (`EventSource` on `/stream/pods` and
//! `/stream/nodes` with `fields=` projections).
//!
//! The page, its stylesheet and its script are compiled into the binary
//! (`include_str!`): nothing is read from disk or fetched from a CDN at run
//! time. They are served as one HTML document, so that a page opened with
//! `?access_token=` needs no second authenticated request for its assets.
//! The Content-Security-Policy allows exactly that inline script and style
//! (by SHA-256 hash) and connections to this origin only; the script never
//! renders data as HTML (it builds elements and sets `textContent`).
//!
//! What the page does with the protocol (snapshot at its end marker,
//! deltas, RESET, resume with `Last-Event-ID`) is described at the top of
//! `dashboard.js`.

use std::sync::OnceLock;

use actix_web::HttpResponse;
use actix_web::http::header;
use sha2::{Digest, Sha256};

const TEMPLATE: &str = include_str!("dashboard.html");
const STYLE: &str = include_str!("dashboard.css");
const SCRIPT: &str = include_str!("dashboard.js");

/// The assembled page and the policy that admits its inline parts.
struct Page {
    html: String,
    csp: String,
}

fn page() -> &'static Page {
    static PAGE: OnceLock<Page> = OnceLock::new();
    PAGE.get_or_init(|| {
        let html = TEMPLATE
            .replacen("{{style}}", STYLE, 1)
            .replacen("{{script}}", SCRIPT, 1);
        let csp = format!(
            "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; \
             connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
             frame-ancestors 'none'",
            sha256_base64(SCRIPT),
            sha256_base64(STYLE)
        );
        Page { html, csp }
    })
}

/// `GET /`: the dashboard.
pub async fn dashboard() -> HttpResponse {
    let page = page();
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        // The page changes with the binary: always revalidate.
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::CONTENT_SECURITY_POLICY, page.csp.as_str()))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        // The page's URL may carry `access_token`: never send it onwards.
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .body(page.html.clone())
}

fn sha256_base64(text: &str) -> String {
    base64(&Sha256::digest(text.as_bytes()))
}

/// Standard base64 with padding (RFC 4648), for CSP hash sources.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want, "{input:?}");
        }
    }

    #[test]
    fn the_page_inlines_exactly_the_hashed_script_and_style() {
        let page = page();
        assert!(!page.html.contains("{{"), "a placeholder was left");
        // The hash covers the element's whole text: the assets must not end
        // their own element early.
        assert!(!SCRIPT.contains("</script"));
        assert!(!STYLE.contains("</style"));
        assert!(page.html.contains(&format!("<script>{SCRIPT}</script>")));
        assert!(page.html.contains(&format!("<style>{STYLE}</style>")));
        assert!(page.csp.contains(&sha256_base64(SCRIPT)));
        assert!(page.csp.contains(&sha256_base64(STYLE)));
    }

    #[test]
    fn the_script_never_renders_data_as_html() {
        for forbidden in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
        ] {
            assert!(!SCRIPT.contains(forbidden), "dashboard.js uses {forbidden}");
        }
    }
}
