//! Ollama's embedding routes over the same [`run`](crate::server::embeddings::run) as `/v1/embeddings`:
//! `POST /api/embed` (`input`: a string or strings; `truncate`, true by default, cuts an input over the window
//! and false refuses it; `dimensions` keeps the first N values and normalises again, as Ollama does;
//! `keep_alive`; `options` accepted) answering `{model, embeddings, total_duration, load_duration,
//! prompt_eval_count}`, and the older `POST /api/embeddings` (`prompt` → `{embedding}`). As in Ollama, an empty
//! `input` or `prompt` only loads the model and answers no vectors.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::request::keep_alive;
use super::{resolve, tagged, OllamaError};
use crate::provider::{EmbedInput, EmbedRequest};
use crate::server::embeddings::{l2_normalize, parse_input, run};
use crate::server::error::ApiError;
use crate::server::{parse_json, AppState};

#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct EmbedBody {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    input: Value,
    #[serde(default)]
    truncate: Option<bool>,
    #[serde(default)]
    dimensions: Option<usize>,
    #[serde(default)]
    keep_alive: Option<Value>,
    #[allow(dead_code, reason = "accepted: an encoder has no sampling options")]
    #[serde(default)]
    options: Option<Value>,
}

/// Whether `input` asks for no vector at all (Ollama then only loads the model).
fn is_empty(input: &Value) -> bool {
    match input {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// `POST /api/embed`.
#[utoipa::path(post, path = "/api/embed", tag = "ollama", request_body = EmbedBody,
    responses((status = 200, description = "One vector per input", body = EmbedAnswer), crate::server::openapi::OllamaErrors))]
pub async fn embed(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<EmbedAnswer>, OllamaError> {
    let started = Instant::now();
    let req: EmbedBody = parse_json(body, state.options.max_body_bytes)?;
    let model = resolve(&state, req.model.as_deref().unwrap_or_default())?;
    let keep = keep_alive(req.keep_alive.as_ref())?;
    if is_empty(&req.input) {
        state
            .provider
            .load_model(&model)
            .await
            .map_err(|e| ApiError::from_provider_error(&e))?;
        return Ok(Json(EmbedAnswer {
            model: tagged(&model),
            embeddings: Vec::new(),
            total_duration: None,
            load_duration: None,
            prompt_eval_count: None,
        }));
    }
    let inputs = parse_input(&req.input, "input")?;
    if inputs.iter().any(|i| matches!(i, EmbedInput::Tokens(_))) {
        return Err(ApiError::invalid_param(
            "input",
            "`input` must be a string or a list of strings",
        )
        .into());
    }
    let out = run(
        &state,
        EmbedRequest {
            model: model.clone(),
            inputs,
            truncate: req.truncate.unwrap_or(true),
            keep_alive: keep,
        },
    )
    .await?;
    let mut vectors = out.vectors;
    if let Some(d) = req.dimensions {
        let width = vectors.first().map_or(0, Vec::len);
        if d == 0 || d > width {
            return Err(ApiError::invalid_param(
                "dimensions",
                format!("dimensions must be between 1 and the model's {width}"),
            )
            .into());
        }
        for v in &mut vectors {
            v.truncate(d);
            l2_normalize(v);
        }
    }
    Ok(Json(EmbedAnswer {
        model: tagged(&model),
        embeddings: vectors,
        total_duration: Some(started.elapsed().as_nanos() as u64),
        load_duration: Some((out.load_secs * 1e9) as u64),
        prompt_eval_count: Some(out.prompt_tokens),
    }))
}

/// `/api/embed`'s answer. Typed: f32 values serialise in their own shortest form (through `json!` they would be
/// widened to f64 and written with twice the digits).
#[derive(Serialize, utoipa::ToSchema)]
pub struct EmbedAnswer {
    model: String,
    embeddings: Vec<Vec<f32>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_duration: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    load_duration: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_eval_count: Option<u64>,
}

/// `/api/embeddings`' answer.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LegacyAnswer {
    embedding: Vec<f32>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct LegacyBody {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    keep_alive: Option<Value>,
    #[allow(dead_code, reason = "accepted: an encoder has no sampling options")]
    #[serde(default)]
    options: Option<Value>,
}

/// `POST /api/embeddings` (Ollama's older route).
#[utoipa::path(post, path = "/api/embeddings", tag = "ollama", request_body = LegacyBody,
    responses((status = 200, description = "The vector of `prompt`", body = LegacyAnswer), crate::server::openapi::OllamaErrors))]
pub async fn embeddings(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<LegacyAnswer>, OllamaError> {
    let req: LegacyBody = parse_json(body, state.options.max_body_bytes)?;
    let model = resolve(&state, req.model.as_deref().unwrap_or_default())?;
    let keep = keep_alive(req.keep_alive.as_ref())?;
    let prompt = req.prompt.unwrap_or_default();
    if prompt.is_empty() {
        state
            .provider
            .load_model(&model)
            .await
            .map_err(|e| ApiError::from_provider_error(&e))?;
        return Ok(Json(LegacyAnswer {
            embedding: Vec::new(),
        }));
    }
    let out = run(
        &state,
        EmbedRequest {
            model,
            inputs: vec![EmbedInput::Text(prompt)],
            truncate: true,
            keep_alive: keep,
        },
    )
    .await?;
    let embedding = out.vectors.into_iter().next().unwrap_or_default();
    Ok(Json(LegacyAnswer { embedding }))
}
