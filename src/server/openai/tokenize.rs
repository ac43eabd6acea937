//! vLLM's `POST /tokenize` and `POST /detokenize` (at the server root, as vLLM serves them).
//!
//! `/tokenize` takes either `{"prompt": text, "add_special_tokens": true}` or chat `{"messages": […], "tools":
//! […]}`; chat messages are rendered exactly as `/v1/chat/completions` renders them (template, injected tools,
//! generation prompt, BOS), so `count` equals the `prompt_tokens` a chat completion of the same messages
//! reports. The answer is `{"count", "max_model_len", "tokens"}` plus `token_strs` when `return_token_strs`.
//! `/detokenize` takes `{"tokens": […]}` and answers `{"prompt": text}`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::convert;
use super::types::ChatCompletionRequest;
use crate::engine::Engine;
use crate::provider::local::render_prompt;
use crate::server::error::ApiError;
use crate::server::{parse_json, parse_value, AppState};

#[derive(Debug, Deserialize)]
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

#[derive(Debug, Serialize)]
pub struct TokenizeResponse {
    pub count: usize,
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_strs: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct DetokenizeRequest {
    #[serde(default)]
    model: String,
    tokens: Vec<u32>,
}

#[derive(Debug, Serialize)]
pub struct DetokenizeResponse {
    pub prompt: String,
}

fn local_engine(state: &AppState) -> Result<Engine, ApiError> {
    state.engine.clone().ok_or_else(|| {
        ApiError::not_implemented(
            "tokenizing needs the local engine; this server fronts a remote provider",
        )
    })
}

/// `POST /tokenize`.
pub async fn tokenize(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let value: Value = parse_json(body, state.options.max_body_bytes)?;
    let engine = local_engine(&state)?;
    let (tokens, strs) = if value.get("messages").is_some() {
        let extras: TokenizeChatExtras = parse_value(value.clone())?;
        if extras.add_generation_prompt == Some(false)
            || extras.continue_final_message == Some(true)
        {
            return Err(ApiError::invalid_param(
                "add_generation_prompt",
                "only add_generation_prompt = true (and continue_final_message = false) is supported",
            ));
        }
        let chat: ChatCompletionRequest = parse_value(value)?;
        let model = state.resolve_model(&chat.model)?;
        let (request, _) = convert::chat_request(chat, model)?;
        let e = engine.clone();
        let tokens = tokio::task::spawn_blocking(move || {
            render_prompt(e.template(), e.tokenizer(), e.tool_call_format(), &request)
        })
        .await
        .map_err(|e| ApiError::internal(format!("the tokenizing task failed: {e}")))?
        .map_err(|e| ApiError::from_provider_error(&e))?;
        (tokens, extras.return_token_strs.unwrap_or(false))
    } else {
        let p: TokenizePrompt = parse_value(value)?;
        state.resolve_model(&p.model)?;
        let tok = engine.tokenizer();
        let mut ids = tok.encode(&p.prompt, true).map_err(ApiError::from_engine)?;
        if p.add_special_tokens.unwrap_or(true) {
            if let Some(bos) = tok.bos_id().filter(|_| tok.add_bos()) {
                if ids.first() != Some(&bos) {
                    ids.insert(0, bos);
                }
            }
        }
        (ids, p.return_token_strs.unwrap_or(false))
    };
    let token_strs = strs.then(|| {
        tokens
            .iter()
            .map(|&id| String::from_utf8_lossy(&engine.tokenizer().token_bytes(id)).into_owned())
            .collect()
    });
    Ok(Json(TokenizeResponse {
        count: tokens.len(),
        max_model_len: engine.info().context_length,
        tokens,
        token_strs,
    }))
}

/// `POST /detokenize`.
pub async fn detokenize(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    let req: DetokenizeRequest = parse_json(body, state.options.max_body_bytes)?;
    let engine = local_engine(&state)?;
    state.resolve_model(&req.model)?;
    let prompt = engine
        .tokenizer()
        .decode(&req.tokens, false)
        .map_err(|e| ApiError::invalid_param("tokens", e.to_string()))?;
    Ok(Json(DetokenizeResponse { prompt }))
}
