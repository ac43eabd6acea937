//! The embedding doors over [`Provider::embed`](crate::provider::Provider::embed): OpenAI's
//! `POST /v1/embeddings` and llama.cpp's `POST /embedding` and `/embeddings` (Ollama's are in
//! `ollama/embed.rs`, over the same [`run`]).
//!
//! `/v1/embeddings` takes `input` as a string, a list of strings, a list of token ids or a list of such lists;
//! `encoding_format` `float` (the default) or `base64` (the vector's little-endian f32 bytes, as OpenAI sends
//! them); `dimensions` only when it is the model's own; and, beyond OpenAI, `truncate: true` to cut an input
//! longer than the window instead of refusing it. The answer is OpenAI's list with `usage`. llama.cpp's door
//! takes `content` (or `input`), a string or a list, and `embd_normalize` (2, L2, the default; or -1, the
//! model's own vectors) and answers `[{"index", "embedding": [[…]]}]`, one pooled vector per input.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::provider::{EmbedInput, EmbedRequest, Embeddings, KeepAlive};
use crate::server::error::ApiError;
use crate::server::metrics::Finished;
use crate::server::{parse_json, AppState};

/// Runs an embedding request on the model it names (empty: the default) once admitted.
/// It counts on /metrics as vLLM counts pooling requests: a finished request, its latency and its prompt
/// tokens, under its model.
pub async fn run(state: &AppState, request: EmbedRequest) -> Result<Embeddings, ApiError> {
    let mut timer = state.metrics.timer();
    let mut request = request;
    request.model = state.resolve_model(&request.model)?;
    timer.model(&request.model);
    let permit = state.admit().await?;
    timer.admitted(permit.queued());
    let answer = state.provider.embed(request).await;
    match &answer {
        Ok(e) => timer.finish(Finished::Stop, e.prompt_tokens, 0),
        Err(_) => timer.finish(Finished::Error, 0, 0),
    }
    answer.map_err(|e| ApiError::from_provider_error(&e))
}

/// A request's `input` (or llama.cpp's `content`): a string, strings, token ids, or lists of token ids.
pub fn parse_input(value: &Value, param: &str) -> Result<Vec<EmbedInput>, ApiError> {
    let bad = |message: String| ApiError::invalid_param(param, message);
    let tokens = |items: &[Value]| -> Result<Vec<u32>, ApiError> {
        items
            .iter()
            .map(|t| {
                t.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| bad(format!("`{param}` holds {t}, which is not a token id")))
            })
            .collect()
    };
    match value {
        Value::String(s) => Ok(vec![EmbedInput::Text(s.clone())]),
        Value::Array(items) if items.is_empty() => {
            Err(bad(format!("`{param}` is empty: give at least one text")))
        }
        Value::Array(items) if items.iter().all(Value::is_string) => Ok(items
            .iter()
            .map(|s| EmbedInput::Text(s.as_str().unwrap_or_default().to_string()))
            .collect()),
        Value::Array(items) if items.iter().all(Value::is_number) => {
            Ok(vec![EmbedInput::Tokens(tokens(items)?)])
        }
        Value::Array(items) if items.iter().all(Value::is_array) => items
            .iter()
            .map(|i| Ok(EmbedInput::Tokens(tokens(i.as_array().map_or(&[], |a| a))?)))
            .collect(),
        Value::Null => Err(bad(format!("`{param}` is required"))),
        _ => Err(bad(format!(
            "`{param}` must be a string, a list of strings, a list of token ids or a list of such lists"
        ))),
    }
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct OpenAiRequest {
    #[serde(default)]
    model: String,
    #[serde(default)]
    input: Value,
    #[serde(default)]
    encoding_format: Option<String>,
    #[serde(default)]
    dimensions: Option<u64>,
    #[serde(default)]
    truncate: bool,
    #[allow(
        dead_code,
        reason = "accepted and ignored, as OpenAI's field for abuse tracking"
    )]
    #[serde(default)]
    user: Option<String>,
}

/// `POST /v1/embeddings`.
#[utoipa::path(post, path = "/v1/embeddings", tag = "openai", request_body = OpenAiRequest,
    responses((status = 200, description = "One vector per input", body = List), crate::server::openapi::OpenAiErrors))]
pub async fn openai(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<List>, ApiError> {
    let req: OpenAiRequest = parse_json(body, state.options.max_body_bytes)?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "encoding_format",
                format!("encoding_format `{other}` is not one of float, base64"),
            ))
        }
    };
    let inputs = parse_input(&req.input, "input")?;
    let out = run(
        &state,
        EmbedRequest {
            model: req.model,
            inputs,
            truncate: req.truncate,
            keep_alive: None,
        },
    )
    .await?;
    let width = out.vectors.first().map_or(0, Vec::len);
    if let Some(d) = req.dimensions.filter(|&d| d as usize != width) {
        return Err(ApiError::invalid_param(
            "dimensions",
            format!("this model makes vectors of {width} dimensions; it cannot make {d}"),
        ));
    }
    let data = out
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| Item {
            object: "embedding",
            index,
            embedding: match base64 {
                true => Vector::Base64(encode_base64(&v)),
                false => Vector::Float(v),
            },
        })
        .collect();
    Ok(Json(List {
        object: "list",
        data,
        model: out.model,
        usage: Counted {
            prompt_tokens: out.prompt_tokens,
            total_tokens: out.prompt_tokens,
        },
    }))
}

/// OpenAI's answer. Typed: f32 values serialise in their own shortest form (through a `Value` they would be widened to
/// f64 and written with twice the digits).
#[derive(Serialize, utoipa::ToSchema)]
pub struct List {
    object: &'static str,
    data: Vec<Item>,
    model: String,
    usage: Counted,
}

/// One vector of [`List`].
#[derive(Serialize, utoipa::ToSchema)]
pub struct Item {
    object: &'static str,
    index: usize,
    embedding: Vector,
}

/// A vector as floats or as base64.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

/// OpenAI's `usage`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Counted {
    prompt_tokens: u64,
    total_tokens: u64,
}

/// A vector as OpenAI's base64: its f32 values' little-endian bytes.
pub fn encode_base64(v: &[f32]) -> String {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct LlamaCppRequest {
    #[serde(default)]
    model: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    embd_normalize: Option<i64>,
    #[serde(default)]
    truncate: bool,
}

/// llama.cpp's `POST /embedding`.
#[utoipa::path(post, path = "/embedding", tag = "llama.cpp", request_body = LlamaCppRequest,
    responses((status = 200, description = "One vector per input", body = Vec<LlamaCppItem>), crate::server::openapi::OpenAiErrors))]
pub async fn llama_cpp(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Vec<LlamaCppItem>>, ApiError> {
    llama_cpp_answer(state, body).await
}

/// llama.cpp's `POST /embeddings` (the same as `/embedding`).
#[utoipa::path(post, path = "/embeddings", tag = "llama.cpp", request_body = LlamaCppRequest,
    responses((status = 200, description = "One vector per input", body = Vec<LlamaCppItem>), crate::server::openapi::OpenAiErrors))]
pub async fn llama_cpp_plural(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Vec<LlamaCppItem>>, ApiError> {
    llama_cpp_answer(state, body).await
}

async fn llama_cpp_answer(
    state: AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Vec<LlamaCppItem>>, ApiError> {
    let req: LlamaCppRequest = parse_json(body, state.options.max_body_bytes)?;
    let normalize = match req.embd_normalize {
        None | Some(2) => true,
        Some(-1) => false,
        Some(other) => {
            return Err(ApiError::invalid_param(
                "embd_normalize",
                format!("embd_normalize {other} is not supported (2: L2, -1: none)"),
            ))
        }
    };
    let (value, param) = match (&req.content, &req.input) {
        (Some(c), _) => (c, "content"),
        (None, Some(i)) => (i, "input"),
        (None, None) => return Err(ApiError::invalid_param("content", "`content` is required")),
    };
    let inputs = parse_input(value, param)?;
    let out = run(
        &state,
        EmbedRequest {
            model: req.model,
            inputs,
            truncate: req.truncate,
            keep_alive: None::<KeepAlive>,
        },
    )
    .await?;
    let data = out
        .vectors
        .into_iter()
        .enumerate()
        .map(|(index, mut v)| {
            if normalize {
                l2_normalize(&mut v);
            }
            LlamaCppItem {
                index,
                embedding: [v],
            }
        })
        .collect();
    Ok(Json(data))
}

/// One vector of llama.cpp's answer.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LlamaCppItem {
    index: usize,
    /// llama.cpp nests a pooled vector in a list (unpooled, it lists one vector per token).
    #[schema(value_type = Vec<Vec<f32>>)]
    embedding: [Vec<f32>; 1],
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_input_shape_parses_and_bad_ones_name_the_field() {
        let text = |s: &str| EmbedInput::Text(s.into());
        assert_eq!(parse_input(&json!("a"), "input").unwrap(), [text("a")]);
        assert_eq!(
            parse_input(&json!(["a", "b"]), "input").unwrap(),
            [text("a"), text("b")]
        );
        assert_eq!(
            parse_input(&json!([101, 7592, 102]), "input").unwrap(),
            [EmbedInput::Tokens(vec![101, 7592, 102])]
        );
        assert_eq!(
            parse_input(&json!([[1, 2], [3]]), "input").unwrap(),
            [EmbedInput::Tokens(vec![1, 2]), EmbedInput::Tokens(vec![3])]
        );
        for bad in [
            json!([]),
            json!(null),
            json!(3),
            json!(["a", 1]),
            json!([-1]),
            json!([1.5]),
            json!([[1], "a"]),
            json!([5_000_000_000u64]),
        ] {
            let e = parse_input(&bad, "content").unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{bad}");
            assert_eq!(e.param.as_deref(), Some("content"), "{bad}");
        }
    }

    #[test]
    fn base64_is_little_endian_f32() {
        let b = encode_base64(&[1.0, -2.5]);
        let bytes = base64::engine::general_purpose::STANDARD.decode(b).unwrap();
        assert_eq!(
            bytes,
            [1f32.to_le_bytes(), (-2.5f32).to_le_bytes()].concat()
        );
    }
}
