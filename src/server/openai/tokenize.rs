//! vLLM's `POST /tokenize` and `POST /detokenize` (at the server root, as vLLM serves them).
//!
//! `/tokenize` takes either `{"prompt": text, "add_special_tokens": true}` or chat `{"messages": […], "tools":
//! […]}`; chat messages are rendered exactly as `/v1/chat/completions` renders them (template, injected tools,
//! generation prompt, BOS), so `count` equals the `prompt_tokens` a chat completion of the same messages
//! reports. The answer is `{"count", "max_model_len", "tokens"}` plus `token_strs` when `return_token_strs`.
//! `/detokenize` takes `{"tokens": […]}` and answers `{"prompt": text}`. Both go through the provider (the local
//! engine's tokenizer, or a remote vLLM's own `/tokenize` and `/detokenize`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::convert;
use super::types::ChatCompletionRequest;
use crate::provider::{TokenizeInput, TokenizeRequest};
use crate::server::error::ApiError;
use crate::server::{parse_json, parse_value, AppState};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct TokenizePrompt {
    #[serde(default)]
    model: String,
    prompt: String,
    #[serde(default)]
    add_special_tokens: Option<bool>,
    #[serde(default)]
    return_token_strs: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct TokenizeChatExtras {
    #[serde(default)]
    add_generation_prompt: Option<bool>,
    #[serde(default)]
    continue_final_message: Option<bool>,
    #[serde(default)]
    return_token_strs: Option<bool>,
}

/// The body of `/tokenize`: a prompt, or chat messages (then rendered as `/v1/chat/completions` renders them).
/// The handler reads the body as either, by whether it has `messages`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // the body's shape for the OpenAPI document
enum TokenizeBody {
    Prompt(TokenizePrompt),
    Chat(Box<ChatCompletionRequest>),
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TokenizeResponse {
    pub count: usize,
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_strs: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct DetokenizeRequest {
    #[serde(default)]
    model: String,
    tokens: Vec<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DetokenizeResponse {
    pub prompt: String,
}

/// `POST /tokenize`.
#[utoipa::path(post, path = "/tokenize", tag = "openai", request_body = TokenizeBody,
    responses((status = 200, description = "The prompt's tokens", body = TokenizeResponse), crate::server::openapi::OpenAiErrors))]
pub async fn tokenize(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let value: Value = parse_json(body, state.options.max_body_bytes)?;
    let (request, strs) = if value.get("messages").is_some() {
        let extras: TokenizeChatExtras = parse_value(value.clone())?;
        // Without a generation prompt the only rendering is one that continues the last message.
        if extras.add_generation_prompt == Some(false)
            && extras.continue_final_message != Some(true)
        {
            return Err(ApiError::invalid_param(
                "add_generation_prompt",
                "add_generation_prompt = false is supported only with continue_final_message = true",
            ));
        }
        let chat: ChatCompletionRequest = parse_value(value)?;
        let model = state.resolve_model(&chat.model)?;
        let (request, _) = convert::chat_request(chat, model.clone(), &state.options.limits)?;
        let tokenize = TokenizeRequest {
            model,
            input: TokenizeInput::Chat(Box::new(request)),
        };
        (tokenize, extras.return_token_strs.unwrap_or(false))
    } else {
        let p: TokenizePrompt = parse_value(value)?;
        let model = state.resolve_model(&p.model)?;
        let tokenize = TokenizeRequest {
            model,
            input: TokenizeInput::Text {
                text: p.prompt,
                add_special_tokens: p.add_special_tokens.unwrap_or(true),
            },
        };
        (tokenize, p.return_token_strs.unwrap_or(false))
    };
    let _cpu = state
        .cpu
        .acquire()
        .await
        .map_err(|_| ApiError::unavailable("the server is shutting down", 1))?;
    let tokenized = state
        .provider
        .tokenize(request)
        .await
        .map_err(|e| ApiError::from_optional_feature(&e))?;
    Ok(Json(TokenizeResponse {
        count: tokenized.tokens.len(),
        max_model_len: tokenized.max_model_len as usize,
        token_strs: if strs { tokenized.token_strs } else { None },
        tokens: tokenized.tokens,
    }))
}

/// `POST /detokenize`.
#[utoipa::path(post, path = "/detokenize", tag = "openai", request_body = DetokenizeRequest,
    responses((status = 200, description = "The tokens' text", body = DetokenizeResponse), crate::server::openapi::OpenAiErrors))]
pub async fn detokenize(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    let req: DetokenizeRequest = parse_json(body, state.options.max_body_bytes)?;
    let model = state.resolve_model(&req.model)?;
    let prompt = state
        .provider
        .detokenize(&model, &req.tokens)
        .await
        .map_err(|e| match e {
            crate::provider::ProviderError::Unsupported(_) => ApiError::from_optional_feature(&e),
            other => ApiError::from_provider_error(&other).with_param("tokens"),
        })?;
    Ok(Json(DetokenizeResponse { prompt }))
}
