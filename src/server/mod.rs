//! The HTTP server: an axum [`router`] over an [`AppState`] (tests build it around their own engine and bind
//! port 0), and [`serve`], which runs it until a shutdown signal and then drains: new requests get 503, in-flight
//! ones may finish for a grace period, and whatever is left is cancelled.
//!
//! Files: `openai/` (chat completions, the Responses API, completions, models, tokenize/detokenize, wire types),
//! `anthropic/` (the Messages API and `count_tokens`, Anthropic's error shape), `answer` (one model answer for
//! every chat-like door: admission, first-piece wait, whole or streamed through the door's renderer), `sessions/` (agent
//! sessions over HTTP), `admission` (the bounded queue in front of the model), `metrics` (Prometheus text under
//! vLLM's names), `auth` (bearer key), `error` (`ApiError` in OpenAI's shape), `sse` (event-stream helpers), `web` (the page
//! at `/`), `openapi` (`GET /openapi.json`, generated from the routes and types).

pub mod admission;
pub mod anthropic;
pub mod auth;
pub mod browser_safety;
pub mod chat_answer;
pub mod constraint_fields;
pub mod embeddings;
pub mod error;
pub mod infill;
pub mod limits;
pub mod metrics;
pub mod ollama;
pub mod openai;
pub mod openapi;
pub mod request_fields;
pub mod sessions;
pub mod source;
pub mod sse;
pub mod timings;
pub mod typing;
pub mod usage;
pub mod web;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{middleware, Json, Router};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::provider::response_cache::CacheStats;
use crate::provider::Provider;
use admission::{Admission, Permit};
use error::ApiError;
use metrics::Metrics;

/// How the server behaves (the `agentd serve` flags).
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Required as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Larger request bodies get 413.
    pub max_body_bytes: usize,
    /// Requests generating at once (`None`: the provider's own concurrency — the local engine's `max_num_seqs`
    /// — else 64).
    pub max_running: Option<usize>,
    /// Requests that may wait for a turn; beyond that, 503 with `Retry-After`.
    pub max_queue: usize,
    /// The `Retry-After` of a 503, in seconds.
    pub retry_after_secs: u64,
    /// After a shutdown signal, how long in-flight requests may still run before they are cancelled.
    pub shutdown_grace: Duration,
    /// Agent sessions: where their JSONL files go, the default workspace, how many may live at once.
    pub sessions: sessions::SessionOptions,
    /// Which hosts and origins may use the server (see [`browser_safety`]).
    pub browser: browser_safety::BrowserPolicy,
    /// Allow agent sessions whose tools write files or run commands on a server without an API key.
    pub allow_exec_without_key: bool,
    /// Bounds on what one request may ask for, checked before it is queued.
    pub limits: limits::RequestLimits,
    /// Model names mapped to served models (`--model-alias NAME=MODEL`): what a client like Claude Code asks for
    /// (`claude-sonnet-…`) and which served model answers.
    pub model_aliases: Vec<(String, String)>,
    /// Sampling for requests that leave a setting out (vLLM's `--override-generation-config`): a client that
    /// sends no temperature (Pi's coding agent) gets this one.
    pub generation_defaults: crate::provider::Sampling,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            api_key: None,
            max_body_bytes: 32 * 1024 * 1024,
            max_running: None,
            max_queue: 256,
            retry_after_secs: 1,
            shutdown_grace: Duration::from_secs(10),
            sessions: sessions::SessionOptions::default(),
            browser: browser_safety::BrowserPolicy::default(),
            allow_exec_without_key: false,
            limits: limits::RequestLimits::default(),
            generation_defaults: Default::default(),
            model_aliases: Vec::new(),
        }
    }
}

/// Everything a handler needs. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// Answers every model request: chat and raw completions, tokenizing, agent sessions. The server reaches
    /// the model only through it.
    pub provider: Arc<dyn Provider>,
    /// The response cache's counters, when the provider answers from it (for `/metrics`).
    pub cache: Option<Arc<CacheStats>>,
    pub admission: Arc<Admission>,
    pub metrics: Arc<Metrics>,
    pub options: Arc<ServerOptions>,
    /// Cancelled when in-flight work must stop (the grace period is over).
    pub shutdown: CancellationToken,
    /// Cancelled when the server stops taking new requests.
    pub draining: CancellationToken,
    pub sessions: Arc<sessions::Sessions>,
    /// Bounds the CPU work done before admission (parsing large bodies, compiling schemas, tokenizing) to one
    /// task per core, on the blocking pool: the async workers stay free for `/health` and streams.
    pub cpu: Arc<tokio::sync::Semaphore>,
    /// The fill-in-the-middle request in flight per document (a newer one cancels it).
    pub typing: Arc<typing::Typing>,
}

impl AppState {
    /// A server over `provider`.
    pub fn new(provider: Arc<dyn Provider>, options: ServerOptions) -> Self {
        let admission = Admission::new(
            options
                .max_running
                .or_else(|| provider.concurrency())
                .unwrap_or(64),
            options.max_queue,
            options.retry_after_secs,
        );
        let model = provider
            .models()
            .first()
            .map(|m| m.id.clone())
            .unwrap_or_default();
        let shutdown = CancellationToken::new();
        let sessions = sessions::Sessions::new(options.sessions.clone(), shutdown.clone());
        Self {
            provider,
            cache: None,
            admission,
            metrics: Metrics::new(model),
            options: Arc::new(options),
            shutdown,
            draining: CancellationToken::new(),
            sessions,
            cpu: Arc::new(tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get()),
            )),
            typing: Arc::default(),
        }
    }

    /// Runs `work` on the blocking pool, at most one such task per core at a time (see [`AppState::cpu`]).
    pub async fn cpu_bound<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let _permit = self
            .cpu
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::unavailable("the server is shutting down", 1))?;
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| ApiError::internal(format!("a request task failed: {e}")))?
    }

    /// Who may share cached KV prefixes (and cached responses) with a request of OpenAI `user` (`None`: the
    /// request named none): requests of one user, or every plain API request. Agent sessions have one scope each.
    pub fn cache_scope(&self, user: Option<&str>) -> String {
        match user {
            Some(u) => format!("api/user:{u}"),
            None => "api".into(),
        }
    }

    /// What the server adds to a chat-like request from any door: the generation defaults under the request's own
    /// sampling, and its prefix-cache scope (the user its `cache_key` names, else every plain API request).
    pub fn complete_request(&self, request: &mut crate::provider::CompletionRequest) {
        request.sampling = request.sampling.or(&self.options.generation_defaults);
        let user = request
            .cache_key
            .as_deref()
            .and_then(|k| k.strip_prefix("openai-user:"));
        request.cache_scope = Some(self.cache_scope(user));
    }

    /// Reports the response cache's counters on `/metrics`.
    pub fn with_cache_stats(mut self, stats: Option<Arc<CacheStats>>) -> Self {
        self.cache = stats;
        self
    }

    /// The ids of the served models.
    pub fn model_ids(&self) -> Vec<String> {
        self.provider.models().into_iter().map(|m| m.id).collect()
    }

    /// The canonical id of the model a request names (empty: the default), or 404.
    pub fn resolve_model(&self, name: &str) -> Result<String, ApiError> {
        match self.provider.resolve_model(name) {
            Some(id) => Ok(id),
            None if name.is_empty() => Err(ApiError::internal("the provider serves no model")),
            None => Err(ApiError::unknown_model(name, &self.model_ids())),
        }
    }

    /// Waits for a generation slot: 503 when the queue is full or the server is stopping.
    pub async fn admit(&self) -> Result<Permit, ApiError> {
        if self.draining.is_cancelled() {
            return Err(ApiError::unavailable("the server is shutting down", 1));
        }
        self.admission.admit(&self.shutdown).await
    }
}

/// Every route, each added to the router and to the OpenAPI document by the same `routes!` call.
pub fn api_routes() -> OpenApiRouter<AppState> {
    use openai::{chat, completions, models, responses, tokenize};
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(web::page))
        .routes(routes!(web::index_html))
        .routes(routes!(chat::chat_completions))
        .routes(routes!(completions::completions))
        .routes(routes!(responses::responses))
        .routes(routes!(anthropic::messages))
        .routes(routes!(anthropic::count_tokens))
        .routes(routes!(models::list))
        .routes(routes!(models::get))
        .routes(routes!(models::list_llama_cpp))
        .routes(routes!(models::load))
        .routes(routes!(models::unload))
        .routes(routes!(embeddings::openai))
        .routes(routes!(embeddings::llama_cpp))
        .routes(routes!(embeddings::llama_cpp_plural))
        .routes(routes!(infill::infill))
        .routes(routes!(tokenize::tokenize))
        .routes(routes!(tokenize::detokenize))
        .routes(routes!(health))
        .routes(routes!(version))
        .routes(routes!(metrics::metrics))
        .routes(routes!(openapi::openapi_json))
        .merge(sessions::routes())
        .merge(ollama::routes())
}

/// The whole HTTP API.
pub fn router(state: AppState) -> Router {
    let (routes, _) = api_routes().split_for_parts();
    routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            browser_safety::browser_guard,
        ))
        .layer(DefaultBodyLimit::max(state.options.max_body_bytes))
        .layer(middleware::from_fn(anthropic::error_shape))
        .layer(middleware::from_fn(ollama::error_shape))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                ApiError::internal("internal error: the request handler panicked").into_response()
            },
        ))
        .with_state(state)
}

/// `GET /health`: 200 while serving, 503 once shutting down.
#[utoipa::path(get, path = "/health", tag = "server",
    responses((status = 200, description = "Serving"), (status = 503, description = "Shutting down")))]
async fn health(State(state): State<AppState>) -> StatusCode {
    if state.draining.is_cancelled() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

/// `GET /version`; `auth` says whether the API needs a key (the web page asks for one before calling).
#[utoipa::path(get, path = "/version", tag = "server",
    responses((status = 200, description = "agentd's version and whether the API needs a key", body = Object,
               example = json!({"version": "0.1.0", "auth": false}))))]
async fn version(State(state): State<AppState>) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "auth": state.options.api_key.is_some(),
    }))
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::not_found(format!("no route for {}", uri.path()))
}

async fn method_not_allowed(uri: Uri) -> ApiError {
    ApiError::method_not_allowed(format!("{} does not accept this method", uri.path()))
}

/// The request body as `T`: 413 beyond the body limit, 400 for malformed JSON, and 400 naming the field
/// (`param`) for a missing field or a value of the wrong type.
pub fn parse_json<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::payload_too_large(limit)
        } else {
            ApiError::bad_request(format!("cannot read the request body: {}", r.body_text()))
        }
    })?;
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(path_error)?;
    de.end()
        .map_err(|e| ApiError::bad_request(format!("malformed JSON: {e}")))?;
    Ok(value)
}

/// A JSON value as `T`, with [`parse_json`]'s errors.
pub fn parse_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(path_error)
}

fn path_error(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    if inner.is_syntax() || inner.is_eof() {
        return ApiError::bad_request(format!("malformed JSON: {inner}"));
    }
    if path == "." || path.is_empty() {
        ApiError::bad_request(format!("invalid request: {inner}"))
    } else {
        ApiError::invalid_param(path.clone(), format!("invalid `{path}`: {inner}"))
    }
}

/// Serves `state` on `listener` until `signal` resolves, then drains (see the module doc).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    signal: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut state = state;
    if let Ok(addr) = listener.local_addr() {
        let mut options = (*state.options).clone();
        options.browser.bound = Some(addr);
        state.options = Arc::new(options);
    }
    let shutdown = state.shutdown.clone();
    let draining = state.draining.clone();
    let grace = state.options.shutdown_grace;
    let sessions = state.sessions.clone();
    let sweeper = sessions.clone();
    let sweep = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(30));
        loop {
            every.tick().await;
            sweeper.sweep();
        }
    });
    let app = router(state);
    let drain = async move {
        signal.await;
        draining.cancel();
        tracing::info!(
            grace_secs = grace.as_secs_f64(),
            "shutting down: finishing in-flight requests"
        );
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(grace) => {}
                () = os_signal() => tracing::warn!("second signal: cancelling in-flight requests now"),
            }
            stop.cancel();
        });
        // Agent runs are not bounded by one HTTP response: abort them when the grace period ends.
        tokio::spawn(async move {
            shutdown.cancelled().await;
            sessions.abort_all();
        });
    };
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(drain)
        .await;
    sweep.abort();
    served
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn os_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// A response for `Result<Response, ApiError>` handlers.
pub type ApiResult = Result<Response, ApiError>;
