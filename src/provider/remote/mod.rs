//! [`RemoteProvider`]: any OpenAI-compatible Chat Completions server, vLLM first (`vllm serve …
//! --enable-auto-tool-choice --tool-call-parser hermes`; see `configs/remote-vllm.toml`).
//!
//! Files: `config` (settings and their validation), `wire` (request JSON, chunk types), `http` (timeouts,
//! retries, error classification), `sse` (event-stream parsing), `chunks` (assembling tool-call deltas by
//! index), `stream` (one chat completion end to end), `raw` (one legacy `/completions` completion),
//! `tokenize` (`count_tokens`, the server's `/tokenize` and `/detokenize`), `fit` (`max_tokens` cut to what the
//! model's window leaves, since vLLM refuses more).
//!
//! Tool calls from a remote model are not constrained by us, so every call's final arguments are checked
//! against the tool's schema; a bad call arrives marked invalid (see [`ToolCall::invalid`](super::ToolCall))
//! for the agent to answer with an error result.

mod chunks;
pub mod config;
mod embed;
mod fit;
mod http;
mod raw;
pub mod sse;
mod stream;
mod tokenize;
pub mod wire;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, RwLock};

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

pub use config::{Compat, MaxTokensField, RemoteConfig, Retry, Timeouts};

use super::events::spawn_stream;
use super::{
    CompletionRequest, ModelDescriptor, Provider, ProviderError, ProviderStream,
    RawCompletionRequest, TokenCount, TokenizeRequest, Tokenized,
};
use config::Resolved;

/// State shared by every request of one provider.
pub(crate) struct Shared {
    config: RemoteConfig,
    resolved: Resolved,
    client: reqwest::Client,
    models: RwLock<Vec<ModelDescriptor>>,
    /// The server answered 404/405 to `/tokenize`: do not ask again.
    tokenize_missing: AtomicBool,
    local_tokenizer: tokio::sync::OnceCell<Option<Arc<tokenize::LocalTokenizer>>>,
}

impl Shared {
    fn models(&self) -> Vec<ModelDescriptor> {
        self.models
            .read()
            .map(|m| m.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// `base_url/path`.
    fn endpoint(&self, path: &str) -> reqwest::Url {
        let mut url = self.resolved.base_url.clone();
        let joined = format!("{}/{path}", url.path().trim_end_matches('/'));
        url.set_path(&joined);
        url
    }

    /// `path` at the server root: the base URL without its trailing `/v1` (where vLLM serves `/tokenize`).
    fn root_endpoint(&self, path: &str) -> reqwest::Url {
        let mut url = self.resolved.base_url.clone();
        let base = url.path().trim_end_matches('/');
        let root = base.strip_suffix("/v1").unwrap_or(base);
        let joined = format!("{root}/{path}");
        url.set_path(&joined);
        url
    }
}

/// An OpenAI-compatible server as a [`Provider`]. Cheap to clone.
#[derive(Clone)]
pub struct RemoteProvider {
    shared: Arc<Shared>,
}

impl RemoteProvider {
    /// Validates `config` and builds the HTTP client. Sends nothing (see [`discover`](Self::discover)).
    pub fn new(config: RemoteConfig) -> Result<Self, ProviderError> {
        let resolved = config.resolve()?;
        let client = reqwest::Client::builder()
            .connect_timeout(resolved.connect)
            .tcp_nodelay(true)
            .user_agent(concat!("agentd/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ProviderError::Config(format!("cannot build the HTTP client: {e}")))?;
        let context_window = config.context_window.unwrap_or(0);
        let models = vec![ModelDescriptor {
            id: config.model.clone(),
            context_window,
            max_output_tokens: config.max_output_tokens.unwrap_or(context_window),
            device: None,
        }];
        Ok(Self {
            shared: Arc::new(Shared {
                config,
                resolved,
                client,
                models: RwLock::new(models),
                tokenize_missing: AtomicBool::new(false),
                local_tokenizer: tokio::sync::OnceCell::new(),
            }),
        })
    }

    pub fn config(&self) -> &RemoteConfig {
        &self.shared.config
    }

    /// Asks the server which models it serves (`GET /models`), checks that the configured model is one of them,
    /// and fills in context windows the config left out from vLLM's `max_model_len`. Returns the new
    /// [`models`](Provider::models). Errors: unreachable server, wrong key, unknown model (naming the served
    /// ones).
    pub async fn discover(&self) -> Result<Vec<ModelDescriptor>, ProviderError> {
        #[derive(Deserialize)]
        struct List {
            data: Vec<Entry>,
        }
        #[derive(Deserialize)]
        struct Entry {
            id: String,
            #[serde(default)]
            max_model_len: Option<u64>,
        }
        let shared = &self.shared;
        let url = shared.endpoint("models");
        let (status, text) = http::send(shared, shared.client.get(url.clone()), &url).await?;
        if !(200..300).contains(&status) {
            return Err(http::classify(
                status,
                wire::error_message(&text),
                &url,
                "",
                1,
            ));
        }
        let list: List = serde_json::from_str(&text).map_err(|e| {
            ProviderError::Protocol(format!("{url} did not answer a model list: {e}"))
        })?;
        let cfg = &shared.config;
        let Some(entry) = list.data.iter().find(|m| m.id == cfg.model) else {
            let served: Vec<&str> = list.data.iter().map(|m| m.id.as_str()).collect();
            return Err(ProviderError::UnknownModel {
                model: cfg.model.clone(),
                message: format!("the server serves: {}", served.join(", ")),
            });
        };
        let descriptor = |id: &str, len: Option<u64>, window: Option<u64>, out: Option<u64>| {
            let context_window = window.or(len).unwrap_or(0);
            ModelDescriptor {
                id: id.to_string(),
                context_window,
                max_output_tokens: out.unwrap_or(context_window),
                device: None,
            }
        };
        let mut models = vec![descriptor(
            &entry.id,
            entry.max_model_len,
            cfg.context_window,
            cfg.max_output_tokens,
        )];
        models.extend(
            list.data
                .iter()
                .filter(|m| m.id != cfg.model)
                .map(|m| descriptor(&m.id, m.max_model_len, None, None)),
        );
        match shared.models.write() {
            Ok(mut m) => *m = models.clone(),
            Err(p) => *p.into_inner() = models.clone(),
        }
        Ok(models)
    }
}

#[async_trait::async_trait]
impl Provider for RemoteProvider {
    fn stream(&self, request: CompletionRequest, cancel: CancellationToken) -> ProviderStream {
        let shared = self.shared.clone();
        spawn_stream(cancel, move |tx, cancel| {
            stream::run(shared, request, tx, cancel)
        })
    }

    /// The server's `/tokenize`, else the local `remote.tokenizer`, else an estimate (`exact: false`).
    async fn count_tokens(&self, request: &CompletionRequest) -> Result<TokenCount, ProviderError> {
        tokenize::count(&self.shared, request).await
    }

    fn models(&self) -> Vec<ModelDescriptor> {
        self.shared.models()
    }

    fn describe(&self) -> String {
        format!("remote {}", self.shared.config.base_url)
    }

    fn model_identity(&self, model: &str) -> String {
        format!("{model}|{}", self.shared.config.base_url)
    }

    fn supports_logprobs(&self) -> bool {
        true
    }

    fn stream_raw(
        &self,
        request: RawCompletionRequest,
        cancel: CancellationToken,
    ) -> ProviderStream {
        let shared = self.shared.clone();
        spawn_stream(cancel, move |tx, cancel| {
            raw::run(shared, request, tx, cancel)
        })
    }

    async fn tokenize(&self, request: TokenizeRequest) -> Result<Tokenized, ProviderError> {
        tokenize::tokenize(&self.shared, request).await
    }

    async fn detokenize(&self, model: &str, tokens: &[u32]) -> Result<String, ProviderError> {
        tokenize::detokenize(&self.shared, model, tokens).await
    }

    async fn embed(
        &self,
        request: super::EmbedRequest,
    ) -> Result<super::Embeddings, ProviderError> {
        embed::embed(&self.shared, request).await
    }
}
