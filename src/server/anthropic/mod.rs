//! The Anthropic Messages API (what Claude Code speaks): `POST /v1/messages`, streamed and not, and
//! `POST /v1/messages/count_tokens` — a thin translation onto the same provider request as Chat Completions
//! ([`request`] in, [`message`] out), so constrained tool calls, exact usage and the admission queue work as there.
//! Errors are Anthropic's shape (`{"type": "error", "error": {"type", "message"}}`), also for the 401, 404 and 413
//! the middleware answers on these paths ([`error_shape`]); the key may come as `x-api-key`.
//!
//! Model names: Claude Code sends its own (`claude-sonnet-…`). A name this server does not serve maps through
//! `--model-alias NAME=MODEL`, else to the served model when the server serves exactly one (vLLM and llama.cpp
//! serve whatever is loaded the same way); the answer echoes the name the client sent.

pub mod message;
pub mod request;

use axum::body::{to_bytes, Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::{chat_answer, parse_json, AppState};
use message::{Head, MessageStream};
use request::{messages_request, MessagesRequest};

/// An [`ApiError`] answered in Anthropic's shape.
pub struct AnthropicError(pub ApiError);

impl From<ApiError> for AnthropicError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl IntoResponse for AnthropicError {
    fn into_response(self) -> Response {
        let mut resp = self.0.clone().into_response();
        let body = self.0.anthropic_body().to_string();
        *resp.body_mut() = Body::from(body);
        resp
    }
}

/// Parses and converts the body (CPU work, off the async workers).
async fn convert(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
    count_only: bool,
) -> Result<(crate::provider::CompletionRequest, bool, String), ApiError> {
    let limits = state.options.limits.clone();
    let max_body = state.options.max_body_bytes;
    let resolver = state.clone();
    state
        .cpu_bound(move || {
            let req: MessagesRequest = parse_json(body, max_body)?;
            let asked = req.model.clone();
            let model = crate::server::request_fields::resolve_model_alias(&resolver, &asked)?;
            let (request, stream) = messages_request(req, model, &limits, count_only)?;
            Ok((request, stream, asked))
        })
        .await
}

/// `POST /v1/messages`.
#[utoipa::path(post, path = "/v1/messages", tag = "anthropic",
    request_body = MessagesRequest,
    responses(
        (status = 200, description = "A `message`; with `stream: true` server-sent `message_start` … `message_stop` \
                                      events",
         content((Object = "application/json"), (crate::server::openapi::SseEvent = "text/event-stream"))),
        crate::server::openapi::AnthropicErrors))]
pub async fn messages(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AnthropicError> {
    let mut timer = state.metrics.timer();
    let (mut request, stream, asked) = convert(&state, body, false).await?;
    timer.model(&request.model);
    state.complete_request(&mut request);
    let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
    if stream {
        let input_tokens = state
            .provider
            .count_tokens(&request)
            .await
            .map_or(0, |c| c.tokens);
        let head = Head {
            id,
            model: asked,
            input_tokens,
        };
        return Ok(chat_answer::stream(state, request, MessageStream::new(head), timer).await?);
    }
    let done = chat_answer::complete(&state, request, &mut timer).await?;
    let head = Head {
        id,
        model: asked,
        input_tokens: done.usage.prompt_tokens,
    };
    Ok(axum::Json(message::collected(&head, done)).into_response())
}

/// `POST /v1/messages/count_tokens`: the prompt's exact size in the model's tokens (`input_tokens`).
#[utoipa::path(post, path = "/v1/messages/count_tokens", tag = "anthropic",
    request_body = MessagesRequest,
    responses(
        (status = 200, description = "The prompt's size in the model's tokens", body = InputTokens),
        crate::server::openapi::AnthropicErrors))]
pub async fn count_tokens(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, AnthropicError> {
    let (request, _, _) = convert(&state, body, true).await?;
    let count = state
        .provider
        .count_tokens(&request)
        .await
        .map_err(|e| ApiError::from_provider_error(&e))?;
    Ok(axum::Json(InputTokens {
        input_tokens: count.tokens,
    })
    .into_response())
}

/// The answer of `count_tokens`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct InputTokens {
    pub input_tokens: u64,
}

/// Middleware: on the Anthropic paths, an error the rest of the stack answered in OpenAI's shape (a missing key,
/// a body too large, a route that does not exist) is rewritten into Anthropic's.
pub async fn error_shape(req: Request, next: Next) -> Response {
    let anthropic = req.uri().path().starts_with("/v1/messages");
    let resp = next.run(req).await;
    if !anthropic || resp.status().is_success() {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = to_bytes(body, 1 << 20).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    if value.get("type").and_then(|t| t.as_str()) == Some("error") {
        return Response::from_parts(parts, Body::from(bytes));
    }
    let message = value
        .pointer("/error/message")
        .and_then(|m| m.as_str())
        .unwrap_or("request failed")
        .to_string();
    let mut e = ApiError::bad_request(message);
    e.status = parts.status;
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(e.anthropic_body().to_string()))
}
