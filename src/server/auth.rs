//! The optional API key (`--api-key` or `AGENTD_API_KEY`), sent as `Authorization: Bearer <key>` or as
//! `x-api-key: <key>` (Anthropic's header). Every route needs it except the ones
//! monitoring scrapes without credentials, as on vLLM: `/health`, `/version`, `/metrics`, and the web page
//! (`/`, static: a browser cannot send a bearer key when it navigates; the page asks for the key and sends it
//! with every API call).

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::AppState;

/// Routes open without a key.
const OPEN: &[&str] = &["/health", "/version", "/metrics", "/", "/index.html"];

/// Middleware: 401 unless the request carries `Authorization: Bearer <key>` (when a key is configured).
pub async fn require_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let Some(key) = state.options.api_key.as_deref() else {
        return next.run(req).await;
    };
    if OPEN.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    // Bearer (OpenAI clients) or `x-api-key` (Anthropic clients: Claude Code, the `anthropic` SDK).
    let given = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .or_else(|| req.headers().get("x-api-key").and_then(|v| v.to_str().ok()))
        .map(str::trim);
    match given {
        Some(k) if same(k.as_bytes(), key.as_bytes()) => next.run(req).await,
        Some(_) => ApiError::unauthorized("Incorrect API key provided.").into_response(),
        None => ApiError::unauthorized(
            "Missing API key: send it as `Authorization: Bearer <key>` or `x-api-key: <key>`.",
        )
        .into_response(),
    }
}

/// Compares in time independent of where the first difference is.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn compares_keys() {
        assert!(super::same(b"sk-1", b"sk-1"));
        assert!(!super::same(b"sk-1", b"sk-2"));
        assert!(!super::same(b"sk-1", b"sk-10"));
    }
}
