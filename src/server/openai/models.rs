//! `GET /v1/models` (also `/models`) and `GET /v1/models/{id}`: every model the server can serve, in OpenAI's
//! list shape with vLLM's `max_model_len` (the context window) so clients can size their prompts, and llama.cpp's
//! router `status` (`loaded`, `loading`, `unloaded`, `failed`). `POST /models/load` and `POST /models/unload`
//! (`{"model": NAME}`) load a model now or unload it.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::types::now_unix;
use crate::server::error::ApiError;
use crate::server::{parse_json, AppState};

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    pub root: String,
    pub parent: Option<String>,
    pub max_model_len: u64,
    /// Where the model runs (the local engine's device); absent in front of a remote server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Whether it is in memory (llama.cpp's router shape).
    pub status: CardStatus,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CardStatus {
    /// `loaded`, `loading`, `unloaded` or `failed`.
    pub value: &'static str,
    /// Why the last load failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

fn cards(state: &AppState) -> Vec<ModelCard> {
    let created = now_unix();
    state
        .provider
        .model_states()
        .into_iter()
        .map(|s| {
            let m = s.model;
            let error = match &s.state {
                crate::provider::ModelState::Failed { message } => Some(message.clone()),
                _ => None,
            };
            ModelCard {
                root: m.id.clone(),
                id: m.id,
                object: "model",
                created,
                owned_by: "agentd",
                parent: None,
                max_model_len: m.context_window,
                device: m.device,
                status: CardStatus {
                    value: s.state.as_str(),
                    error,
                },
            }
        })
        .collect()
}

/// `GET /v1/models`.
#[utoipa::path(get, path = "/v1/models", tag = "openai",
    responses((status = 200, description = "The served models", body = ModelList), crate::server::openapi::OpenAiErrors))]
pub async fn list(State(state): State<AppState>) -> Json<ModelList> {
    list_models(&state)
}

/// `GET /models`: the same list, where llama.cpp's router serves it.
#[utoipa::path(get, path = "/models", tag = "llama.cpp",
    responses((status = 200, description = "The served models", body = ModelList), crate::server::openapi::OpenAiErrors))]
pub async fn list_llama_cpp(State(state): State<AppState>) -> Json<ModelList> {
    list_models(&state)
}

fn list_models(state: &AppState) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: cards(state),
    })
}

/// `GET /v1/models/{id}`: 404 for a model this server does not serve.
#[utoipa::path(get, path = "/v1/models/{id}", tag = "openai",
    params(("id" = String, Path, description = "A served model's name")),
    responses((status = 200, description = "The model", body = ModelCard), crate::server::openapi::OpenAiErrors))]
pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    let canonical = state.resolve_model(&id)?;
    cards(&state)
        .into_iter()
        .find(|c| c.id == canonical)
        .map(Json)
        .ok_or_else(|| ApiError::unknown_model(&id, &state.model_ids()))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ModelName {
    model: String,
}

/// `POST /models/load {"model"}`: loads it now (waits until it is loaded); 404 for a model not served.
#[utoipa::path(post, path = "/models/load", tag = "llama.cpp", request_body = ModelName,
    responses((status = 200, description = "Loaded", body = ModelDone), crate::server::openapi::OpenAiErrors))]
pub async fn load(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ModelDone>, ApiError> {
    let id = named_model(&state, body)?;
    let done = state.provider.load_model(&id).await;
    answer(id, done)
}

/// `POST /models/unload {"model"}`: unloads it (requests still running finish first).
#[utoipa::path(post, path = "/models/unload", tag = "llama.cpp", request_body = ModelName,
    responses((status = 200, description = "Unloaded", body = ModelDone), crate::server::openapi::OpenAiErrors))]
pub async fn unload(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ModelDone>, ApiError> {
    let id = named_model(&state, body)?;
    let done = state.provider.unload_model(&id).await;
    answer(id, done)
}

/// The served model a load or unload body names.
fn named_model(state: &AppState, body: Result<Bytes, BytesRejection>) -> Result<String, ApiError> {
    let req: ModelName = parse_json(body, state.options.max_body_bytes)?;
    state.resolve_model(&req.model)
}

fn answer(
    id: String,
    done: Result<(), crate::provider::ProviderError>,
) -> Result<Json<ModelDone>, ApiError> {
    done.map_err(|e| ApiError::from_provider(e.kind(), &e.to_string()))?;
    Ok(Json(ModelDone {
        success: true,
        model: id,
    }))
}

/// The answer of `/models/load` and `/models/unload`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ModelDone {
    pub success: bool,
    pub model: String,
}
