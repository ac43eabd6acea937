//! Ollama's API (`/api/*`), what GitHub Copilot's and JetBrains' local-model providers, Open WebUI and the
//! `ollama` libraries speak: a thin translation onto the same provider requests as the other doors (so
//! constrained tool calls, `format` schemas, admission and metrics behave the same), with Ollama's shapes —
//! JSON lines when streaming (the default), `{"error": "…"}` on failure, durations in nanoseconds.
//!
//! | route | what |
//! |---|---|
//! | `POST /api/chat` | a chat turn: tools and tool calls (arguments as objects), `format`, `options`, `keep_alive`, `think` ([`chat`]) |
//! | `POST /api/generate` | a prompt (templated, or `raw`), `system`, `format`, `options`; an empty prompt loads the model (with `keep_alive: 0`, unloads it) |
//! | `GET /api/tags`, `GET /api/ps` | every servable model; the loaded ones with their expiry ([`models`]) |
//! | `POST /api/show` | a model's details, `model_info` (architecture, context length) and capabilities |
//! | `POST /api/pull` | fetches a known model into the cache and serves it (JSON-lines progress) |
//! | `POST /api/embed`, `/api/embeddings` | vectors of an embedding model ([`embed`]) |
//! | `GET /api/version` | the Ollama API version this door follows |
//!
//! Model names may carry Ollama's tag (`qwen2.5-coder-0.5b-instruct:latest`): `:latest` is the model itself.

mod chat;
mod embed;
mod models;
mod request;

use axum::body::{to_bytes, Body};
use axum::extract::Request;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(chat::chat))
        .routes(routes!(chat::generate))
        .routes(routes!(models::tags))
        .routes(routes!(models::ps))
        .routes(routes!(models::show))
        .routes(routes!(models::pull))
        .routes(routes!(models::version))
        .routes(routes!(embed::embed))
        .routes(routes!(embed::embeddings))
}

/// An [`ApiError`] in Ollama's shape.
pub struct OllamaError(pub ApiError);

impl From<ApiError> for OllamaError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl IntoResponse for OllamaError {
    fn into_response(self) -> Response {
        let mut resp = self.0.clone().into_response();
        let body = ApiError::ollama_body(&self.0.message);
        resp.headers_mut().remove(CONTENT_LENGTH);
        *resp.body_mut() = Body::from(body);
        resp
    }
}

/// Middleware: the errors answered on `/api/*` before a handler runs (401, 403, 404, 413, 415) in Ollama's
/// shape too.
pub async fn error_shape(req: Request, next: Next) -> Response {
    let ollama = req.uri().path().starts_with("/api/");
    let resp = next.run(req).await;
    if !ollama || resp.status().is_success() {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = to_bytes(body, 1 << 20).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let message = match value.get("error") {
        Some(serde_json::Value::String(_)) => {
            return Response::from_parts(parts, Body::from(bytes))
        }
        Some(e) => e
            .get("message")
            .and_then(|m| m.as_str())
            .unwrap_or("request failed")
            .to_string(),
        None => String::from_utf8_lossy(&bytes).trim().to_string(),
    };
    parts.headers.remove(CONTENT_LENGTH);
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(ApiError::ollama_body(&message)))
}

/// The served model an Ollama name means: the name itself, or without its `:latest` tag; 404 in Ollama's words
/// otherwise.
fn resolve(state: &AppState, name: &str) -> Result<String, ApiError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(ApiError::invalid_param("model", "model is required"));
    }
    let bare = name.strip_suffix(":latest").unwrap_or(name);
    state
        .provider
        .resolve_model(name)
        .or_else(|| state.provider.resolve_model(bare))
        .ok_or_else(|| {
            let mut e = ApiError::unknown_model(name, &state.model_ids());
            e.message = format!(
                "model '{name}' not found (served: {})",
                state.model_ids().join(", ")
            );
            e
        })
}

/// Ollama's name for a served model.
fn tagged(id: &str) -> String {
    if id.contains(':') {
        id.to_string()
    } else {
        format!("{id}:latest")
    }
}

/// Now, as Ollama writes `created_at`.
fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

/// A JSON-lines response over `lines` (each a JSON value and a newline).
fn ndjson<S>(lines: S) -> Response
where
    S: futures::Stream<Item = String> + Send + 'static,
{
    use futures::StreamExt;
    let body = Body::from_stream(lines.map(Ok::<_, std::convert::Infallible>));
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    resp
}

/// One JSON line.
fn line(value: &serde_json::Value) -> String {
    let mut s = value.to_string();
    s.push('\n');
    s
}
