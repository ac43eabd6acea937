//! `GET /v1/models` and `GET /v1/models/{id}`: the provider's models in OpenAI's list shape, with vLLM's
//! `max_model_len` (the context window) so clients can size their prompts.

use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;

use super::types::now_unix;
use crate::server::error::ApiError;
use crate::server::AppState;

#[derive(Debug, Clone, Serialize)]
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
}

#[derive(Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

fn cards(state: &AppState) -> Vec<ModelCard> {
    let created = now_unix();
    state
        .provider
        .models()
        .into_iter()
        .map(|m| ModelCard {
            root: m.id.clone(),
            id: m.id,
            object: "model",
            created,
            owned_by: "agentd",
            parent: None,
            max_model_len: m.context_window,
            device: m.device,
        })
        .collect()
}

/// `GET /v1/models`.
pub async fn list(State(state): State<AppState>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: cards(&state),
    })
}

/// `GET /v1/models/{id}`: 404 for a model this server does not serve.
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
