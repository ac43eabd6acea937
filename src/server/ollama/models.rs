//! Ollama's model routes: `/api/tags` (every model the server can serve), `/api/ps` (those in memory, with when
//! they expire), `/api/show` (details, `model_info` and capabilities), `/api/pull` (fetch a known model into the
//! cache, JSON-lines progress) and `/api/version`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{line, ndjson, resolve, tagged, OllamaError};
use crate::provider::{ModelDetails, ModelState, ModelStatus};
use crate::server::error::ApiError;
use crate::server::{parse_json, AppState};

/// The Ollama API version these routes follow (clients check it for features such as tools).
pub const OLLAMA_API_VERSION: &str = "0.12.6";

/// `GET /api/version`.
#[utoipa::path(get, path = "/api/version", tag = "ollama", 
    responses((status = 200, description = "The Ollama API version this door follows", body = Object), crate::server::openapi::OllamaErrors))]
pub async fn version() -> Json<Value> {
    Json(json!({"version": OLLAMA_API_VERSION, "agentd": env!("CARGO_PKG_VERSION")}))
}

/// An RFC 3339 time from seconds since the epoch.
fn rfc3339(unix: u64) -> String {
    chrono::DateTime::from_timestamp(unix as i64, 0)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A weight count as Ollama writes it: `494.03M`, `1.54B`.
fn parameter_size(count: Option<u64>) -> String {
    match count {
        None | Some(0) => String::new(),
        Some(n) if n >= 1_000_000_000 => format!("{:.2}B", n as f64 / 1e9),
        Some(n) if n >= 1_000_000 => format!("{:.2}M", n as f64 / 1e6),
        Some(n) => format!("{:.2}K", n as f64 / 1e3),
    }
}

fn details(d: Option<&ModelDetails>) -> Value {
    let d = d.cloned().unwrap_or_default();
    json!({
        "parent_model": "",
        "format": "gguf",
        "family": d.family,
        "families": if d.family.is_empty() { vec![] } else { vec![d.family.clone()] },
        "parameter_size": parameter_size(d.parameter_count),
        "quantization_level": d.quantization,
    })
}

/// The server's generation defaults (`--override-generation-config`) as a Modelfile's `PARAMETER` lines.
fn parameters(defaults: &crate::provider::Sampling) -> String {
    let mut out = String::new();
    let mut put = |name: &str, value: Option<String>| {
        if let Some(v) = value {
            out.push_str(&format!("{name:<30} {v}\n"));
        }
    };
    put("temperature", defaults.temperature.map(|v| v.to_string()));
    put("top_p", defaults.top_p.map(|v| v.to_string()));
    put("top_k", defaults.top_k.map(|v| v.to_string()));
    put("min_p", defaults.min_p.map(|v| v.to_string()));
    put(
        "repeat_penalty",
        defaults.repetition_penalty.map(|v| v.to_string()),
    );
    put(
        "presence_penalty",
        defaults.presence_penalty.map(|v| v.to_string()),
    );
    put(
        "frequency_penalty",
        defaults.frequency_penalty.map(|v| v.to_string()),
    );
    put("seed", defaults.seed.map(|v| v.to_string()));
    out
}

fn digest(s: &ModelStatus) -> String {
    s.details
        .as_ref()
        .map(|d| d.digest.clone())
        .unwrap_or_default()
}

/// What a served model can do, in Ollama's words.
fn capabilities(details: Option<&ModelDetails>) -> Value {
    if details.is_some_and(|d| d.embedding_only) {
        return json!(["embedding"]);
    }
    // Every chat model calls tools here: the grammar holds its calls to their schemas.
    let mut caps = vec!["completion", "tools"];
    if details.is_some_and(|d| d.fill_in_middle) {
        caps.push("insert");
    }
    if details.is_some_and(|d| d.pooled_embeddings) {
        caps.push("embedding");
    }
    json!(caps)
}

fn listed(s: &ModelStatus) -> Value {
    let name = tagged(&s.model.id);
    let modified = s
        .details
        .as_ref()
        .and_then(|d| d.modified_unix)
        .unwrap_or_else(crate::env::now_unix);
    json!({
        "name": name,
        "model": name,
        "modified_at": rfc3339(modified),
        "size": s.details.as_ref().map_or(0, |d| d.file_bytes),
        "digest": digest(s),
        "details": details(s.details.as_ref()),
        "capabilities": capabilities(s.details.as_ref()),
    })
}

/// `GET /api/tags`: every model this server can serve.
#[utoipa::path(get, path = "/api/tags", tag = "ollama", 
    responses((status = 200, description = "Every servable model", body = Object), crate::server::openapi::OllamaErrors))]
pub async fn tags(State(state): State<AppState>) -> Json<Value> {
    let models: Vec<Value> = state.provider.model_states().iter().map(listed).collect();
    Json(json!({"models": models}))
}

/// `GET /api/ps`: the models in memory.
#[utoipa::path(get, path = "/api/ps", tag = "ollama", 
    responses((status = 200, description = "The loaded models and when they expire", body = Object), crate::server::openapi::OllamaErrors))]
pub async fn ps(State(state): State<AppState>) -> Json<Value> {
    let models: Vec<Value> = state
        .provider
        .model_states()
        .iter()
        .filter(|s| s.state == ModelState::Loaded)
        .map(|s| {
            let mut v = listed(s);
            let expires = s
                .expires_at
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or_else(|| rfc3339(253_402_300_799), |d| rfc3339(d.as_secs()));
            let size = s.size_bytes.unwrap_or(0);
            let on_gpu = s
                .model
                .device
                .as_deref()
                .is_some_and(|d| d.contains("cuda") || d.contains("metal"));
            v["size"] = json!(size);
            v["expires_at"] = json!(expires);
            v["size_vram"] = json!(if on_gpu { size } else { 0 });
            v["context_length"] = json!(s.model.context_window);
            v
        })
        .collect();
    Json(json!({"models": models}))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct Named {
    #[serde(default)]
    model: Option<String>,
    /// The older field name.
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    stream: Option<bool>,
}

impl Named {
    fn name(&self) -> Result<&str, ApiError> {
        self.model
            .as_deref()
            .or(self.name.as_deref())
            .filter(|n| !n.trim().is_empty())
            .ok_or_else(|| ApiError::invalid_param("model", "model is required"))
    }
}

/// `POST /api/show {"model"}`.
#[utoipa::path(post, path = "/api/show", tag = "ollama", request_body = Named,
    responses((status = 200, description = "The model's details, `model_info` and capabilities", body = Object), crate::server::openapi::OllamaErrors))]
pub async fn show(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, OllamaError> {
    let req: Named = parse_json(body, state.options.max_body_bytes)?;
    let id = resolve(&state, req.name()?)?;
    let status = state
        .provider
        .model_states()
        .into_iter()
        .find(|s| s.model.id == id)
        .ok_or_else(|| ApiError::unknown_model(&id, &state.model_ids()))?;
    let family = status
        .details
        .as_ref()
        .map(|d| d.family.clone())
        .unwrap_or_default();
    let mut model_info = serde_json::Map::new();
    model_info.insert("general.architecture".into(), json!(family));
    model_info.insert("general.basename".into(), json!(id));
    if let Some(n) = status.details.as_ref().and_then(|d| d.parameter_count) {
        model_info.insert("general.parameter_count".into(), json!(n));
    }
    if !family.is_empty() {
        model_info.insert(
            format!("{family}.context_length"),
            json!(status.model.context_window),
        );
    }
    let modified = status
        .details
        .as_ref()
        .and_then(|d| d.modified_unix)
        .unwrap_or_else(crate::env::now_unix);
    let template = status
        .details
        .as_ref()
        .and_then(|d| d.template.clone())
        .unwrap_or_default();
    let parameters = parameters(&state.options.generation_defaults);
    let mut modelfile = format!("# served by agentd\nFROM {id}\n");
    for line in parameters.lines() {
        modelfile.push_str(&format!(
            "PARAMETER {}\n",
            line.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    Ok(Json(json!({
        "modelfile": modelfile,
        "parameters": parameters,
        "template": template,
        "details": details(status.details.as_ref()),
        "model_info": model_info,
        "capabilities": capabilities(status.details.as_ref()),
        "modified_at": rfc3339(modified),
    })))
}

/// `POST /api/pull {"model", "stream"?}`: fetches a model this server knows into its cache and serves it.
#[utoipa::path(post, path = "/api/pull", tag = "ollama", request_body = Named,
    responses((status = 200, description = "Progress; streamed (the default) as JSON lines", content((Object = "application/json"), (Object = "application/x-ndjson"))), crate::server::openapi::OllamaErrors))]
pub async fn pull(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OllamaError> {
    let req: Named = parse_json(body, state.options.max_body_bytes)?;
    let name = req.name()?.to_string();
    let bare = name.strip_suffix(":latest").unwrap_or(&name).to_string();
    let stream = req.stream.unwrap_or(true);
    let provider = state.provider.clone();
    let pulled = async move {
        provider
            .pull_model(&bare)
            .await
            .map_err(|e| ApiError::from_provider(e.kind(), &e.to_string()))
    };
    if !stream {
        pulled.await?;
        return Ok(Json(json!({"status": "success"})).into_response());
    }
    let lines = futures::stream::once(async move {
        let mut out = vec![line(&json!({"status": "pulling manifest"}))];
        match pulled.await {
            Ok(s) => {
                let d = s.details.clone().unwrap_or_default();
                let short: String = d.digest.chars().take(12).collect();
                out.push(line(&json!({"status": format!("pulling {short}"),
                    "digest": format!("sha256:{}", d.digest), "total": d.file_bytes,
                    "completed": d.file_bytes})));
                out.push(line(&json!({"status": "verifying sha256 digest"})));
                out.push(line(&json!({"status": "writing manifest"})));
                out.push(line(&json!({"status": "success"})));
            }
            Err(e) => out.push(line(&json!({"error": e.message}))),
        }
        futures::stream::iter(out)
    });
    use futures::StreamExt;
    Ok(ndjson(lines.flatten()))
}
