//! Browser safety: no web page the user visits can reach the API (and through it the agent's tools).
//!
//! - **Host** (DNS rebinding): a request must name this server — a loopback name (`localhost`, `*.localhost`,
//!   `127.0.0.1`, `::1`), the bound address, or a name given with `--allowed-host`. A server bound to every
//!   interface (`0.0.0.0`, `::`) also accepts any IP literal: rebinding needs a domain name, and a page served
//!   from an IP literal is cross-origin anyway (see Origin). Anything else is 403.
//! - **Origin** (cross-site requests): a request that carries an `Origin` must come from this server itself
//!   (same scheme-less host and port as its `Host`) or from an origin listed with `--cors-origin`; those get CORS
//!   answers (preflight included). Any other origin — including `null` — is 403 before any work. Clients that
//!   are not browsers send no `Origin` and are not affected.
//! - **Content-Type** (simple-request smuggling): a `POST` with a body must say `application/json` (415
//!   otherwise), so a cross-site form or `text/plain` post cannot reach a JSON route even where `Origin` is
//!   missing — except on Ollama's `/api/*` routes for a request without `Origin` (no browser's), whose clients
//!   send JSON under other types.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::AppState;

/// Which hosts and origins may use the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrowserPolicy {
    /// Extra host names (`--allowed-host`), lower-case, without port.
    pub allowed_hosts: Vec<String>,
    /// Origins allowed to call cross-site (`--cors-origin`), e.g. `http://localhost:3000`; `*` allows any.
    pub cors_origins: Vec<String>,
    /// The address the server listens on (set by `serve`).
    pub bound: Option<SocketAddr>,
}

impl BrowserPolicy {
    /// Whether `host` (a `Host` header value, maybe with a port) names this server.
    pub fn host_allowed(&self, host: &str) -> bool {
        let name = host_name(host).to_ascii_lowercase();
        if name.is_empty() {
            return false;
        }
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        if self.allowed_hosts.iter().any(|h| h == &name) {
            return true;
        }
        let Ok(ip) = name.parse::<IpAddr>() else {
            return false;
        };
        ip.is_loopback()
            || self
                .bound
                .is_some_and(|b| b.ip() == ip || b.ip().is_unspecified())
    }

    /// Whether `origin` may call the server cross-site (listed with `--cors-origin`).
    pub fn cors_allowed(&self, origin: &str) -> bool {
        self.cors_origins
            .iter()
            .any(|o| o == "*" || o.trim_end_matches('/').eq_ignore_ascii_case(origin))
    }
}

/// The host part of a `Host` value: `[::1]:8080` → `::1`, `localhost:8080` → `localhost`.
fn host_name(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default();
    }
    match host.rsplit_once(':') {
        // One colon: `name:port`. More (a bare IPv6 literal): no port to strip.
        Some((name, port)) if !name.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

/// `scheme://host[:port]` of an `Origin` → `host[:port]` (what a same-origin request's `Host` says).
fn origin_authority(origin: &str) -> Option<&str> {
    let (_, rest) = origin.split_once("://")?;
    Some(rest.trim_end_matches('/'))
}

/// The request's `Host` (or, for HTTP/2, the URI's authority).
fn request_host(req: &Request) -> Option<String> {
    req.headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_string()))
}

/// Middleware: Host, Origin and Content-Type checks (see the module docs), and CORS for listed origins.
pub async fn browser_guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let policy = &state.options.browser;
    let host = request_host(&req);
    if let Some(h) = &host {
        if !policy.host_allowed(h) {
            return ApiError::forbidden(format!(
                "Host `{h}` is not one of this server's names; start it with --allowed-host {} to allow it",
                host_name(h)
            ))
            .into_response();
        }
    }
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut cors: Option<String> = None;
    if let Some(origin) = &origin {
        let same_origin = match (origin_authority(origin), &host) {
            (Some(a), Some(h)) => a.eq_ignore_ascii_case(h.trim()),
            _ => false,
        };
        if !same_origin {
            if !policy.cors_allowed(origin) {
                return ApiError::forbidden(format!(
                    "cross-origin requests from `{origin}` are refused; list the origin with --cors-origin to allow it"
                ))
                .into_response();
            }
            cors = Some(origin.clone());
        }
    }
    if req.method() == Method::OPTIONS {
        return match &cors {
            Some(origin) => preflight(origin, req.headers()),
            None => StatusCode::NO_CONTENT.into_response(),
        };
    }
    // Ollama's clients (and its documented `curl -d`) post JSON under any content type; without an `Origin` the
    // request is no browser's, so Ollama's routes take it as JSON.
    let lenient = origin.is_none() && req.uri().path().starts_with("/api/");
    if req.method() == Method::POST
        && has_body(req.headers())
        && !is_json(req.headers())
        && !lenient
    {
        return ApiError::unsupported_media_type(
            "the body must be JSON, sent with `Content-Type: application/json`",
        )
        .into_response();
    }
    let mut resp = next.run(req).await;
    if let Some(origin) = cors {
        add_cors(resp.headers_mut(), &origin);
    }
    resp
}

/// Whether the request carries (or may carry) a body.
fn has_body(headers: &HeaderMap) -> bool {
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match length {
        Some(n) => n > 0,
        None => headers.contains_key(header::TRANSFER_ENCODING),
    }
}

/// `application/json`, with or without parameters (`; charset=utf-8`), or a `+json` type.
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            let media = v.split(';').next().unwrap_or_default().trim();
            media.eq_ignore_ascii_case("application/json")
                || media.to_ascii_lowercase().ends_with("+json")
        })
        .unwrap_or(false)
}

/// The answer to a CORS preflight from an allowed origin.
fn preflight(origin: &str, request: &HeaderMap) -> Response {
    let mut resp = StatusCode::NO_CONTENT.into_response();
    let h = resp.headers_mut();
    add_cors(h, origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, DELETE, OPTIONS"),
    );
    let asked = request
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned()
        .unwrap_or_else(|| HeaderValue::from_static("authorization, content-type"));
    h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    resp
}

fn add_cors(headers: &mut HeaderMap, origin: &str) {
    if let Ok(v) = HeaderValue::from_str(origin) {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(bound: &str) -> BrowserPolicy {
        BrowserPolicy {
            allowed_hosts: vec!["box.lan".into()],
            cors_origins: vec!["http://localhost:3000".into()],
            bound: Some(bound.parse().unwrap()),
        }
    }

    #[test]
    fn hosts() {
        let p = policy("127.0.0.1:8080");
        for ok in [
            "localhost:8080",
            "LOCALHOST",
            "app.localhost:1",
            "127.0.0.1:8080",
            "[::1]:8080",
            "box.lan:8080",
        ] {
            assert!(p.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "10.0.0.5:8080",
            "",
            "localhost.evil.com",
        ] {
            assert!(!p.host_allowed(bad), "{bad}");
        }
        // Bound to every interface: IP literals are fine, names still need listing.
        let any = policy("0.0.0.0:8080");
        assert!(any.host_allowed("10.0.0.5:8080"));
        assert!(!any.host_allowed("evil.example"));
    }

    #[test]
    fn origins_and_names() {
        let p = policy("127.0.0.1:8080");
        assert!(p.cors_allowed("http://localhost:3000"));
        assert!(!p.cors_allowed("http://evil.example"));
        assert_eq!(host_name("[::1]:80"), "::1");
        assert_eq!(host_name("::1"), "::1");
        assert_eq!(
            origin_authority("http://localhost:8080"),
            Some("localhost:8080")
        );
        assert_eq!(origin_authority("null"), None);
    }
}
