//! The LLM boundary (pi-ai's role): the agent talks to a model only through [`Provider`], so the same agent runs
//! on the local engine ([`LocalProvider`]), on any OpenAI-compatible server such as vLLM ([`RemoteProvider`]),
//! or on a script in tests ([`ScriptedProvider`]).
//!
//! **Errors are data.** [`Provider::stream`] never fails and never panics: every stream is `start`, deltas, then
//! exactly one `done` or `error` event (see [`ProviderEvent`]). A failure before or during generation ends the
//! stream with `error { reason: error }`, a cancellation with `error { reason: aborted }`; the error's
//! [`ErrorKind`] says what went wrong. Invalid tool calls are data too (see [`ToolCall::invalid`]).

mod assemble;
mod events;
pub mod json_tail;
#[cfg(feature = "local")]
pub mod local;
pub mod prompt;
pub mod remote;
pub mod response_cache;
pub mod router;
pub mod scripted;
pub mod types;

use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use crate::schema::{ResponseFormat, ToolChoice, ToolSpec};
pub use assemble::check_tool_call;
pub use events::{collect, Completion, CompletionError};
#[cfg(feature = "local")]
pub use local::{EncoderProvider, LocalProvider};
pub use remote::{RemoteConfig, RemoteProvider};
pub use router::{ModelRouter, ModelSpec, RouterOptions};
pub use scripted::{ScriptStep, ScriptedProvider, ScriptedReply};
pub use types::*;

/// The events of one completion; see [`ProviderEvent`] for the order they come in.
pub type ProviderStream = Pin<Box<dyn futures::Stream<Item = ProviderEvent> + Send>>;

/// A source of completions.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// Starts a completion. The stream is lazy (nothing is sent before it is first polled), ends with exactly one
    /// terminal event, and stops the work behind it when `cancel` fires or when it is dropped.
    fn stream(&self, request: CompletionRequest, cancel: CancellationToken) -> ProviderStream;

    /// The size of `request`'s prompt as this provider's model would see it. `exact` says whether it is the
    /// model tokenizer's count (equal to the `input` usage of a completion of the same request) or an estimate.
    async fn count_tokens(&self, request: &CompletionRequest) -> Result<TokenCount, ProviderError>;

    /// The models this provider serves, with their context windows and output limits. The first is the
    /// default (used when a request's `model` is empty).
    fn models(&self) -> Vec<ModelDescriptor>;

    /// The provider this one wraps (a cache, an admission gate), if it only adds to another. Every method below
    /// passes through to it unless the wrapper overrides the method; on a provider that wraps nothing they have
    /// the defaults written on each.
    fn wrapped(&self) -> Option<&dyn Provider> {
        None
    }

    /// The id of the served model `name` means (empty: the default), or `None` when it serves no such model.
    /// The local engine also answers to its manifest's aliases.
    fn resolve_model(&self, name: &str) -> Option<String> {
        if let Some(inner) = self.wrapped() {
            return inner.resolve_model(name);
        }
        let models = self.models();
        if name.is_empty() {
            return models.first().map(|m| m.id.clone());
        }
        models.into_iter().find(|m| m.id == name).map(|m| m.id)
    }

    /// What this provider is, for people and session files: `local`, `remote <url>`, `scripted`.
    fn describe(&self) -> String {
        self.wrapped()
            .map_or_else(|| "provider".into(), |p| p.describe())
    }

    /// How many requests this provider serves at once (`None`: no known limit). The local engine batches up
    /// to its `max_num_seqs`.
    fn concurrency(&self) -> Option<usize> {
        self.wrapped().and_then(|p| p.concurrency())
    }

    /// What identifies the weights behind `model` (the response cache's key includes it): the model file's
    /// path, size, modification time, digest and weight format on the local engine; the model id elsewhere.
    fn model_identity(&self, model: &str) -> String {
        self.wrapped()
            .map_or_else(|| model.to_string(), |p| p.model_identity(model))
    }

    /// Whether completions can report `logprobs` (a request asking for them is refused otherwise).
    fn supports_logprobs(&self) -> bool {
        self.wrapped().is_some_and(|p| p.supports_logprobs())
    }

    /// The KV prefix-cache counters, when this provider keeps a prefix cache it can report.
    fn prefix_cache(&self) -> Option<PrefixCacheCounts> {
        self.wrapped().and_then(|p| p.prefix_cache())
    }

    /// The engine's scheduler gauges, when this provider batches on this machine.
    fn engine_load(&self) -> Option<EngineLoad> {
        self.wrapped().and_then(|p| p.engine_load())
    }

    /// Every model this provider can serve and whether it is in memory now (a provider that loads nothing on
    /// demand: all of [`models`](Self::models), loaded).
    fn model_states(&self) -> Vec<ModelStatus> {
        match self.wrapped() {
            Some(p) => p.model_states(),
            None => self.models().into_iter().map(ModelStatus::loaded).collect(),
        }
    }

    /// Loads `name` now (it is served already when this provider loads nothing on demand).
    async fn load_model(&self, name: &str) -> Result<(), ProviderError> {
        if let Some(p) = self.wrapped() {
            return p.load_model(name).await;
        }
        match self.resolve_model(name) {
            Some(_) => Ok(()),
            None => Err(ProviderError::UnknownModel {
                model: name.to_string(),
                message: "no such model".into(),
            }),
        }
    }

    /// Unloads `name` (its in-flight requests finish first); not possible where nothing loads on demand.
    async fn unload_model(&self, name: &str) -> Result<(), ProviderError> {
        match self.wrapped() {
            Some(p) => p.unload_model(name).await,
            None => Err(ProviderError::Unsupported(format!(
                "this provider serves `{name}` permanently; it cannot be unloaded"
            ))),
        }
    }

    /// Fetches the model `name` into the local cache (blocking for as long as that takes) and serves it from
    /// then on; its state after. Only where models are loaded on demand from a cache.
    async fn pull_model(&self, name: &str) -> Result<ModelStatus, ProviderError> {
        match self.wrapped() {
            Some(p) => p.pull_model(name).await,
            None => Err(ProviderError::Unsupported(format!(
                "this server cannot fetch models (asked for `{name}`)"
            ))),
        }
    }

    /// A raw-text completion (no chat template, no tools). Providers that cannot do it end the stream with an
    /// `unsupported` error.
    fn stream_raw(
        &self,
        request: RawCompletionRequest,
        cancel: CancellationToken,
    ) -> ProviderStream {
        match self.wrapped() {
            Some(p) => p.stream_raw(request, cancel),
            None => unsupported_stream("raw text completions are not available from this provider"),
        }
    }

    /// Tokenizes text or a rendered chat request with the model's own tokenizer.
    async fn tokenize(&self, request: TokenizeRequest) -> Result<Tokenized, ProviderError> {
        match self.wrapped() {
            Some(p) => p.tokenize(request).await,
            None => Err(ProviderError::Unsupported(
                "tokenizing is not available from this provider".into(),
            )),
        }
    }

    /// The text of `tokens` (special tokens included).
    async fn detokenize(&self, model: &str, tokens: &[u32]) -> Result<String, ProviderError> {
        match self.wrapped() {
            Some(p) => p.detokenize(model, tokens).await,
            None => Err(ProviderError::Unsupported(
                "detokenizing is not available from this provider".into(),
            )),
        }
    }

    /// One vector per input (see [`EmbedRequest`]). A model that cannot embed (a chat model) refuses with an
    /// invalid-request error naming it.
    async fn embed(&self, request: EmbedRequest) -> Result<Embeddings, ProviderError> {
        if let Some(p) = self.wrapped() {
            return p.embed(request).await;
        }
        let model = named_or_default(&request.model, &self.models());
        Err(cannot_embed(&model))
    }
}

/// The refusal of an embedding request to a model that only generates text.
pub fn cannot_embed(model: &str) -> ProviderError {
    ProviderError::InvalidRequest {
        status: 400,
        message: format!(
            "the model `{model}` cannot make embeddings: it generates text and was loaded without a pooling; \
             serve it with `--pooling mean|last|cls` (its hidden states pooled), or serve an embedding model \
             (`agentd serve --model all-minilm-l6-v2`) and ask it"
        ),
    }
}

/// A stream that is only an `unsupported` error.
pub fn unsupported_stream(message: &str) -> ProviderStream {
    Box::pin(futures::stream::iter([ProviderEvent::Error {
        reason: ErrorReason::Error,
        kind: ErrorKind::Unsupported,
        message: message.to_string(),
        usage: Usage::default(),
        partial: AssistantMessage::default(),
    }]))
}

/// Every way a provider request can fail. What the caller should do is written on each variant.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The server could not be reached (refused, DNS, TLS). Check `base_url` and that the server runs.
    #[error("cannot reach {url}: {message}")]
    Connect { url: String, message: String },
    /// The server rejected the credentials (HTTP 401/403). Check the API key (`api_key` / `api_key_env`).
    #[error("authentication failed (HTTP {status}): {message} — check the API key")]
    Auth { status: u16, message: String },
    /// The server does not serve this model. Use one of the listed models.
    #[error("unknown model `{model}`: {message}")]
    UnknownModel { model: String, message: String },
    /// The URL does not exist on the server (HTTP 404 for a path). `base_url` usually has to end in `/v1`.
    #[error("{url} was not found on the server (HTTP 404): {message}")]
    NotFound { url: String, message: String },
    /// Too many requests, still after the retries. Wait and try again later.
    #[error("rate limited (HTTP 429) after {attempts} attempts: {message}")]
    RateLimited { attempts: u32, message: String },
    /// The prompt plus `max_tokens` does not fit the model's context window. Compact the context and retry.
    #[error("context window exceeded: {message}")]
    ContextOverflow { message: String },
    /// The server refused the request as malformed (HTTP 400/422). Fix the request; retrying will not help.
    #[error("invalid request (HTTP {status}): {message}")]
    InvalidRequest { status: u16, message: String },
    /// The server failed (HTTP 5xx), still after the retries.
    #[error("server error (HTTP {status}) after {attempts} attempts: {message}")]
    Server {
        status: u16,
        attempts: u32,
        message: String,
    },
    /// No response (`request`) or no data for too long while streaming (`idle`).
    #[error("{what} timeout: nothing received for {:.1}s", after.as_secs_f64())]
    Timeout { what: TimeoutKind, after: Duration },
    /// The server sent something that is not the OpenAI streaming protocol (malformed SSE or JSON).
    #[error("malformed response from the server: {0}")]
    Protocol(String),
    /// The local engine, or a model's text side (tokenizer, chat template), failed (its message).
    #[error("engine: {0}")]
    Engine(String),
    /// The request asks for something this provider cannot do (e.g. an unsupported tool schema).
    #[error("unsupported request: {0}")]
    Unsupported(String),
    /// The provider is misconfigured. Fix the configuration.
    #[error("provider configuration: {0}")]
    Config(String),
    /// The request was cancelled.
    #[error("cancelled")]
    Cancelled,
    /// A bug: an invariant broke inside the provider.
    #[error("internal provider error: {0}")]
    Internal(String),
    /// The model cannot take the request now (it is loading with too many requests waiting, or every loaded
    /// model is busy and none may be unloaded for it). Retry shortly.
    #[error("busy: {0}")]
    Busy(String),
    /// The model could not be loaded. The request cannot run; other models are unaffected.
    #[error("model `{model}` failed to load: {message}")]
    Load { model: String, message: String },
}

/// A name no manifest knows is an unknown model; anything else about finding the file an engine error.
impl From<crate::model_files::FilesError> for ProviderError {
    fn from(e: crate::model_files::FilesError) -> Self {
        match e {
            crate::model_files::FilesError::UnknownModel { name, known } => {
                ProviderError::UnknownModel {
                    model: name,
                    message: format!("known models: {}", known.join(", ")),
                }
            }
            other => ProviderError::Engine(other.to_string()),
        }
    }
}

impl From<crate::text::TextError> for ProviderError {
    fn from(e: crate::text::TextError) -> Self {
        ProviderError::Engine(e.to_string())
    }
}

/// Which timeout fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutKind {
    /// Waiting for the response headers.
    Request,
    /// Waiting for the next chunk of a streaming response.
    Idle,
}

impl std::fmt::Display for TimeoutKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimeoutKind::Request => "request",
            TimeoutKind::Idle => "idle",
        })
    }
}

/// [`ProviderError`]'s variant as serialisable data (the `kind` of an `error` event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    Connect,
    Auth,
    UnknownModel,
    NotFound,
    RateLimited,
    ContextOverflow,
    InvalidRequest,
    Server,
    Timeout,
    Protocol,
    Engine,
    Unsupported,
    Config,
    Cancelled,
    Internal,
}

impl ProviderError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            ProviderError::Connect { .. } => ErrorKind::Connect,
            ProviderError::Auth { .. } => ErrorKind::Auth,
            ProviderError::UnknownModel { .. } => ErrorKind::UnknownModel,
            ProviderError::NotFound { .. } => ErrorKind::NotFound,
            ProviderError::RateLimited { .. } => ErrorKind::RateLimited,
            ProviderError::ContextOverflow { .. } => ErrorKind::ContextOverflow,
            ProviderError::InvalidRequest { .. } => ErrorKind::InvalidRequest,
            ProviderError::Server { .. } => ErrorKind::Server,
            ProviderError::Timeout { .. } => ErrorKind::Timeout,
            ProviderError::Protocol(_) => ErrorKind::Protocol,
            ProviderError::Engine(_) => ErrorKind::Engine,
            ProviderError::Unsupported(_) => ErrorKind::Unsupported,
            ProviderError::Config(_) => ErrorKind::Config,
            ProviderError::Cancelled => ErrorKind::Cancelled,
            ProviderError::Internal(_) => ErrorKind::Internal,
            ProviderError::Busy(_) => ErrorKind::RateLimited,
            ProviderError::Load { .. } => ErrorKind::Engine,
        }
    }
}

/// The model a request names, or the provider's default (its first model) when it names none.
pub(crate) fn model_or_default(request: &CompletionRequest, models: &[ModelDescriptor]) -> String {
    named_or_default(&request.model, models)
}

/// `name`, or the first of `models` (a provider's default) when `name` is empty.
pub fn named_or_default(name: &str, models: &[ModelDescriptor]) -> String {
    if name.is_empty() {
        models.first().map(|m| m.id.clone()).unwrap_or_default()
    } else {
        name.to_string()
    }
}

/// A tokenizer-free estimate of a request's prompt size: one token per 4 characters of every text the prompt
/// carries (system, messages, tool calls, tool schemas) plus 4 tokens of framing per message. Deterministic.
pub fn estimate_tokens(request: &CompletionRequest) -> u64 {
    let mut chars = request.system.as_deref().map_or(0, |s| s.chars().count());
    let mut messages = u64::from(request.system.is_some());
    for m in &request.messages {
        messages += 1;
        chars += match m {
            Message::User(u) => u.content.chars().count(),
            Message::ToolResult(r) => r.content.chars().count() + r.tool_name.chars().count(),
            Message::Assistant(a) => a
                .content
                .iter()
                .map(|b| match b {
                    ContentBlock::Text { text } => text.chars().count(),
                    ContentBlock::Thinking { .. } => 0,
                    ContentBlock::ToolCall(c) => {
                        c.name.chars().count() + c.arguments_text().chars().count()
                    }
                })
                .sum(),
        };
    }
    for t in &request.tools {
        chars += t.name.chars().count()
            + t.description.chars().count()
            + t.parameters.to_string().chars().count();
    }
    (chars as u64).div_ceil(4) + 4 * messages
}
