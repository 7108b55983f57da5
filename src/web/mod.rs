//! The dashboard page at `/`, and kubefan's client library at `/lib/`.
//!
//! The dashboard is a real-time "pods on nodes" view that uses only the
//! public stream protocol, through the client library (`clients/js/`,
//! served here at `/lib/kubefan.js`): one multiplexed `/ws` socket for all
//! its watches, shared by every tab of the browser through the library's
//! SharedWorker (`/lib/kubefan-worker.js`).
//!
//! Everything is compiled into the binary (`include_str!`): nothing is read
//! from disk or fetched from a CDN at run time. The page, its stylesheet
//! and its script are served as one HTML document. The library's files
//! carry code and no data, so like the page they are served without
//! authentication (see [`is_public`]): a page opened with `?access_token=`
//! can import them, and so can a page on another origin (CORS `*`, no
//! credentials).
//!
//! The page's Content-Security-Policy allows exactly its inline script and
//! style (by SHA-256 hash), scripts and workers from this origin (the
//! library: kubefan serves nothing else as JavaScript, and every response
//! says `nosniff`), and connections to this origin only; the script never
//! renders data as HTML (it builds elements and sets `textContent`).
//!
//! What the page does with the protocol is described at the top of
//! `dashboard.js`, and what the library does in `clients/js/README.md`.

use std::sync::OnceLock;

use actix_web::http::header::{self, HeaderMap};
use actix_web::{HttpRequest, HttpResponse, web};
use sha2::{Digest, Sha256};

use crate::status::status_json;

const TEMPLATE: &str = include_str!("dashboard.html");
const STYLE: &str = include_str!("dashboard.css");
const SCRIPT: &str = include_str!("dashboard.js");
/// The page's icon (its logo): served at `/favicon.ico`, where browsers
/// ask for one on any page of the origin (a stream opened in a tab, say).
const FAVICON: &str = include_str!("favicon.svg");

/// Where the client library is served: a stable path, so that pages can
/// `import {connect} from '/lib/kubefan.js'` with no build step.
pub const LIB_PREFIX: &str = "/lib/";

const JAVASCRIPT: &str = "text/javascript; charset=utf-8";

/// The client library's files: name under [`LIB_PREFIX`], text, type.
const LIB: &[(&str, &str, &str)] = &[
    (
        "kubefan.js",
        include_str!("../../clients/js/kubefan.js"),
        JAVASCRIPT,
    ),
    (
        "kubefan-worker.js",
        include_str!("../../clients/js/kubefan-worker.js"),
        JAVASCRIPT,
    ),
    (
        "kubefan.d.ts",
        include_str!("../../clients/js/kubefan.d.ts"),
        "application/typescript; charset=utf-8",
    ),
];

/// A worker's own policy (a SharedWorker's script is its document): it
/// may import the library and connect to this origin, nothing else.
const WORKER_CSP: &str = "default-src 'none'; script-src 'self'; connect-src 'self'";

/// The routes of this module: `GET /` and `GET /lib/{file}`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(dashboard))
        .route("/favicon.ico", web::get().to(favicon))
        .service(
            web::resource("/lib/{file}")
                .route(web::get().to(library))
                .route(web::head().to(library)),
        );
}

/// Whether `path` is served to anyone, without a token: the page and the
/// library files, which hold code and never data. Everything else passes
/// the gate (`crate::gate`).
pub fn is_public(path: &str) -> bool {
    path == "/"
        || path == "/favicon.ico"
        || path
            .strip_prefix(LIB_PREFIX)
            .is_some_and(|file| LIB.iter().any(|(name, _, _)| *name == file))
}

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
            "default-src 'none'; script-src 'sha256-{}' 'self'; style-src 'sha256-{}'; \
             worker-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
             form-action 'none'; frame-ancestors 'none'",
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

/// `GET /favicon.ico`: the logo, as SVG (which browsers take at that
/// path when its type says so). Static and public, cached for a day.
pub async fn favicon() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("image/svg+xml")
        .insert_header((header::CACHE_CONTROL, "public, max-age=86400"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        // An SVG opened as a document could run script; this one has none
        // and may not.
        .insert_header((header::CONTENT_SECURITY_POLICY, "default-src 'none'"))
        .body(FAVICON)
}

/// One file of the client library, with the validator a cache needs.
struct Asset {
    name: &'static str,
    body: &'static str,
    content_type: &'static str,
    /// A strong validator: a digest of the body.
    etag: String,
}

fn assets() -> &'static [Asset] {
    static ASSETS: OnceLock<Vec<Asset>> = OnceLock::new();
    ASSETS.get_or_init(|| {
        LIB.iter()
            .map(|&(name, body, content_type)| Asset {
                name,
                body,
                content_type,
                etag: format!("\"{}\"", &hex(&Sha256::digest(body.as_bytes()))[..32]),
            })
            .collect()
    })
}

/// `GET /lib/{file}`: a file of the client library. The path is stable and
/// the file changes with the binary, so caches revalidate every time
/// (`no-cache`), cheaply: an `If-None-Match` with the current `ETag` gets
/// 304 and no body.
pub async fn library(req: HttpRequest, file: web::Path<String>) -> HttpResponse {
    let Some(asset) = assets().iter().find(|a| a.name == file.as_str()) else {
        return HttpResponse::NotFound().json(status_json(
            404,
            "NotFound",
            &format!(
                "no file {:?} in the client library (it has: {})",
                file.as_str(),
                LIB.iter()
                    .map(|(n, _, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    };
    let fresh = matches_etag(req.headers(), &asset.etag);
    let mut resp = if fresh {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    resp.insert_header((header::ETAG, asset.etag.as_str()))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        // Code, not data, and no credentials: any page may import it.
        .insert_header((header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"))
        .insert_header((header::CONTENT_SECURITY_POLICY, WORKER_CSP));
    if asset.name == "kubefan.js" {
        // Deno and some editors find the types of a module by this header.
        resp.insert_header(("X-TypeScript-Types", "./kubefan.d.ts"));
    }
    if fresh {
        return resp.finish();
    }
    resp.content_type(asset.content_type).body(asset.body)
}

/// Whether `If-None-Match` names `etag` (or is `*`). Weak and strong forms
/// compare equal, as RFC 9110 §13.1.2 asks for this header.
fn matches_etag(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|tag| tag.trim())
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
        assert!(
            page.html
                .contains(&format!("<script type=\"module\">{SCRIPT}</script>"))
        );
        assert!(page.html.contains(&format!("<style>{STYLE}</style>")));
        assert!(page.csp.contains(&sha256_base64(SCRIPT)));
        assert!(page.csp.contains(&sha256_base64(STYLE)));
    }

    #[test]
    fn the_page_policy_admits_scripts_and_workers_of_this_origin_and_no_inline_code() {
        let csp = &page().csp;
        assert!(
            csp.contains(&format!(
                "script-src 'sha256-{}' 'self';",
                sha256_base64(SCRIPT)
            )),
            "{csp}"
        );
        assert!(csp.contains("worker-src 'self';"), "{csp}");
        assert!(csp.contains("connect-src 'self';"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
    }

    /// Every module the page and the worker import is one this module
    /// serves: a file missing from [`LIB`] would break the page at run time.
    #[test]
    fn every_import_of_the_page_and_the_library_is_served() {
        let sources = [("dashboard.js", SCRIPT, "./lib/")]
            .into_iter()
            .chain(LIB.iter().map(|&(name, body, _)| (name, body, "./")));
        let mut imports = 0;
        for (name, body, dir) in sources {
            for line in body.lines().filter(|l| l.starts_with("import ")) {
                let spec = line.split(['\'', '"']).nth(1).expect("a quoted specifier");
                let file = spec.strip_prefix(dir).unwrap_or_else(|| {
                    panic!("{name} imports {spec:?}, not a file under {LIB_PREFIX}")
                });
                assert!(
                    is_public(&format!("{LIB_PREFIX}{file}")),
                    "{name} imports {spec}"
                );
                imports += 1;
            }
        }
        assert_eq!(
            imports, 2,
            "the page imports the library, the worker imports it"
        );
    }

    #[test]
    fn only_the_page_and_the_library_files_are_public() {
        for path in [
            "/",
            "/lib/kubefan.js",
            "/lib/kubefan-worker.js",
            "/lib/kubefan.d.ts",
        ] {
            assert!(is_public(path), "{path}");
        }
        for path in [
            "/lib/",
            "/lib/other.js",
            "/lib/../metrics",
            "/ws",
            "/stream/pods",
            "/lib",
        ] {
            assert!(!is_public(path), "{path}");
        }
    }

    #[test]
    fn if_none_match_compares_weakly_and_accepts_lists_and_the_wildcard() {
        let etag = "\"abc\"";
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::IF_NONE_MATCH, v.parse().unwrap());
            matches_etag(&h, etag)
        };
        assert!(with("\"abc\""));
        assert!(with("W/\"abc\""));
        assert!(with("\"x\", W/\"abc\""));
        assert!(with("*"));
        assert!(!with("\"abcd\""));
        assert!(!with("abc"));
        assert!(!matches_etag(&HeaderMap::new(), etag));
    }

    #[test]
    fn the_scripts_never_render_data_as_html() {
        let scripts = [("dashboard.js", SCRIPT)]
            .into_iter()
            .chain(LIB.iter().map(|&(name, body, _)| (name, body)));
        for (name, body) in scripts {
            for forbidden in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(!body.contains(forbidden), "{name} uses {forbidden}");
            }
        }
    }
}
