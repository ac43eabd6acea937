//! `POST /v1/responses`: the OpenAI Responses API (what Codex CLI speaks), stateless, streamed and not, as a thin
//! translation onto the same provider request as Chat Completions ([`request`] in, [`response`] out), so
//! constrained tool calls, `text.format` schemas, exact usage and the admission queue work exactly as there.
//! Errors are OpenAI's shape (a 400 names the field); after a stream started, `response.failed`.

pub mod request;
pub mod response;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::server::error::ApiError;
use crate::server::{chat_answer, parse_json, AppState};
use request::{responses_request, ResponsesRequest};
use response::{Head, ResponseStream};

/// `POST /v1/responses`.
#[utoipa::path(post, path = "/v1/responses", tag = "openai",
    request_body = ResponsesRequest,
    responses(
        (status = 200, description = "A `response` object; with `stream: true` server-sent `response.*` events",
         content((Object = "application/json"), (crate::server::openapi::SseEvent = "text/event-stream"))),
        crate::server::openapi::OpenAiErrors))]
pub async fn responses(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let mut timer = state.metrics.timer();
    let limits = state.options.limits.clone();
    let max_body = state.options.max_body_bytes;
    let resolver = state.clone();
    let (mut request, echo, model) = state
        .cpu_bound(move || {
            let req: ResponsesRequest = parse_json(body, max_body)?;
            let model = resolver.resolve_model(&req.model)?;
            let (request, echo) = responses_request(req, model.clone(), &limits)?;
            Ok((request, echo, model))
        })
        .await?;
    timer.model(&model);
    state.complete_request(&mut request);
    let stream = echo.stream;
    let head = Head {
        id: format!("resp_{}", uuid::Uuid::new_v4().simple()),
        created_at: super::types::now_unix(),
        model,
        echo,
    };
    if stream {
        return chat_answer::stream(state, request, ResponseStream::new(head), timer).await;
    }
    let done = chat_answer::complete(&state, request, &mut timer).await?;
    Ok(axum::Json(response::collected(&head, done)).into_response())
}
