//! The web page at `/`: one self-contained HTML document (its CSS and JS inlined, nothing fetched from anywhere
//! else) for chatting with the model over `/v1/chat/completions` and driving agent sessions over
//! `/v1/sessions`. The sources are `web/page.html`, `web/page.css` and `web/page.js`, embedded in the binary and
//! assembled once. The response carries a strict Content-Security-Policy: scripts and styles only by the hash of
//! the inlined ones, requests only to this origin, no frames, no forms elsewhere.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use sha2::{Digest, Sha256};

const HTML: &str = include_str!("web/page.html");
const CSS: &str = include_str!("web/page.css");
const JS: &str = include_str!("web/page.js");

/// The assembled page and its Content-Security-Policy.
struct Page {
    html: String,
    csp: String,
}

fn sha256_source(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

static PAGE: LazyLock<Page> = LazyLock::new(|| {
    let html = HTML
        .replacen("/*STYLE*/", CSS, 1)
        .replacen("/*SCRIPT*/", JS, 1);
    let csp = format!(
        "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; img-src 'self' data:; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        sha256_source(JS),
        sha256_source(CSS)
    );
    Page { html, csp }
});

/// `GET /`: the page.
#[utoipa::path(get, path = "/", tag = "server",
    responses((status = 200, description = "The chat page", content_type = "text/html", body = String)))]
pub async fn page() -> Response {
    answer_page()
}

/// `GET /index.html`: the page.
#[utoipa::path(get, path = "/index.html", tag = "server",
    responses((status = 200, description = "The chat page", content_type = "text/html", body = String)))]
pub async fn index_html() -> Response {
    answer_page()
}

fn answer_page() -> Response {
    let page = &*PAGE;
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, page.csp.as_str()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        page.html.clone(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_whole_small_and_hashed() {
        let page = &*PAGE;
        assert!(!page.html.contains("/*STYLE*/") && !page.html.contains("/*SCRIPT*/"));
        assert!(page.html.len() < 200 * 1024, "{} bytes", page.html.len());
        // Nothing from another origin.
        for needle in ["http://", "https://", "//cdn", "src=\""] {
            assert!(!page.html.contains(needle), "{needle}");
        }
        assert!(page.csp.contains(&sha256_source(JS)));
        assert!(page.csp.contains("connect-src 'self'"));
    }
}
