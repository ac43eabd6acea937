//! Tokens of a remote model. Counting a request's prompt tokens, best source first: the server's `/tokenize`
//! (vLLM's, at the server root, taking chat messages), else the local tokenizer and chat template of the same
//! model (`remote.tokenizer`), else [`estimate_tokens`] marked `exact: false`. Also the server's own
//! `/tokenize` and `/detokenize` for the API routes of the same names.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};

use super::super::prompt::render_prompt;
use super::super::{
    estimate_tokens, model_or_default, named_or_default, CompletionRequest, ProviderError,
    TokenCount, TokenizeInput, TokenizeRequest, Tokenized,
};
use super::{wire, Shared};
use crate::model_files::fetch::{self, FetchOptions, ModelOrigin, ModelSelector};
use crate::text::{ChatTemplate, GgufMetadata, Tokenizer, ToolCallFormat};

/// A model's tokenizer and chat template, without its weights.
pub(super) struct LocalTokenizer {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    format: ToolCallFormat,
}

impl LocalTokenizer {
    /// Loads them from a known model name or a GGUF path (fetching a named model if it is not cached).
    /// The template is the GGUF's, as the engine renders it.
    fn load(spec: &str) -> Result<Self, ProviderError> {
        let resolved = fetch::resolve(&ModelSelector::parse(spec), &FetchOptions::default())?;
        if resolved.origin == ModelOrigin::Folder {
            // A folder's tokenizer would first be converted into a GGUF with its weights, the local engine's job.
            return Err(ProviderError::Engine(format!(
                "remote.tokenizer {spec} is a model folder: name its GGUF or a known model instead"
            )));
        }
        // The metadata alone: no tensor index, nothing of the weights.
        let gguf = GgufMetadata::open(&resolved.path)?;
        let tokenizer = Tokenizer::from_gguf(&gguf)?;
        // The same template the engine uses for this file.
        let template = ChatTemplate::from_gguf_metadata(&gguf)?;
        let format = resolved
            .manifest
            .as_ref()
            .and_then(|m| ToolCallFormat::from_name(&m.tool_call_format).ok())
            .unwrap_or_default();
        Ok(Self {
            tokenizer,
            template,
            format,
        })
    }
}

/// The count for `request`, from the best source available.
pub(super) async fn count(
    shared: &Arc<Shared>,
    request: &CompletionRequest,
) -> Result<TokenCount, ProviderError> {
    if shared.config.compat.tokenize_endpoint && !shared.tokenize_missing.load(Ordering::Relaxed) {
        match server_count(shared, request).await {
            Ok(n) => {
                return Ok(TokenCount {
                    tokens: n,
                    exact: true,
                })
            }
            // A wrong key is worth knowing about; anything else falls back to the next source.
            Err(e @ ProviderError::Auth { .. }) => return Err(e),
            Err(e) => tracing::debug!(error = %e, "the server's /tokenize gave no count"),
        }
    }
    if let Some(spec) = shared.config.tokenizer.clone() {
        let local = shared
            .local_tokenizer
            .get_or_init(|| async move {
                match tokio::task::spawn_blocking(move || LocalTokenizer::load(&spec)).await {
                    Ok(Ok(t)) => Some(Arc::new(t)),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "cannot load remote.tokenizer; token counts are estimates");
                        None
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "loading remote.tokenizer failed");
                        None
                    }
                }
            })
            .await
            .clone();
        if let Some(local) = local {
            let request = request.clone();
            let ids = tokio::task::spawn_blocking(move || {
                render_prompt(&local.template, &local.tokenizer, local.format, &request)
            })
            .await
            .map_err(|e| ProviderError::Internal(format!("the tokenizing task failed: {e}")))??;
            return Ok(TokenCount {
                tokens: ids.len() as u64,
                exact: true,
            });
        }
    }
    Ok(TokenCount {
        tokens: estimate_tokens(request),
        exact: false,
    })
}

/// The `/tokenize` body for a chat request: messages, tools, the generation prompt.
fn chat_body(request: &CompletionRequest, model: &str) -> Value {
    let mut body = json!({
        "model": model,
        "messages": wire::messages(request),
        "add_generation_prompt": true,
    });
    if request.prefill().is_some() {
        body["add_generation_prompt"] = false.into();
        body["continue_final_message"] = true.into();
    }
    if !request.tools.is_empty() {
        body["tools"] = Value::Array(wire::tools(&request.tools));
    }
    body
}

/// vLLM's `POST /tokenize` with chat messages. A 404 or 405 marks the endpoint missing for good.
async fn server_count(shared: &Shared, request: &CompletionRequest) -> Result<u64, ProviderError> {
    let model = model_or_default(request, &shared.models());
    let v = post_root(shared, "tokenize", &chat_body(request, &model), &model).await?;
    v.get("count")
        .and_then(Value::as_u64)
        .or_else(|| {
            v.get("tokens")
                .and_then(Value::as_array)
                .map(|t| t.len() as u64)
        })
        .ok_or_else(|| ProviderError::Protocol("/tokenize answered without `count`".into()))
}

/// The server's own `/tokenize` (vLLM's): text or a rendered chat request. A server without it is
/// [`ProviderError::Unsupported`].
pub(super) async fn tokenize(
    shared: &Shared,
    request: TokenizeRequest,
) -> Result<Tokenized, ProviderError> {
    let model = named_or_default(&request.model, &shared.models());
    let body = match &request.input {
        TokenizeInput::Text {
            text,
            add_special_tokens,
        } => json!({"model": model, "prompt": text, "add_special_tokens": add_special_tokens,
                    "return_token_strs": true}),
        TokenizeInput::Chat(chat) => {
            let mut body = chat_body(chat, &model);
            body["return_token_strs"] = true.into();
            body
        }
    };
    let v = post_root(shared, "tokenize", &body, &model)
        .await
        .map_err(missing("tokenize"))?;
    #[derive(serde::Deserialize)]
    struct Answer {
        tokens: Vec<u32>,
        #[serde(default)]
        token_strs: Option<Vec<String>>,
        #[serde(default)]
        max_model_len: u64,
    }
    let a: Answer = serde_json::from_value(v)
        .map_err(|e| ProviderError::Protocol(format!("/tokenize answered {e}")))?;
    Ok(Tokenized {
        tokens: a.tokens,
        token_strs: a.token_strs,
        max_model_len: a.max_model_len,
    })
}

/// The server's own `/detokenize` (vLLM's).
pub(super) async fn detokenize(
    shared: &Shared,
    model: &str,
    tokens: &[u32],
) -> Result<String, ProviderError> {
    let body = json!({"model": model, "tokens": tokens});
    let v = post_root(shared, "detokenize", &body, model)
        .await
        .map_err(missing("detokenize"))?;
    v.get("prompt")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| ProviderError::Protocol("/detokenize answered without `prompt`".into()))
}

/// A 404/405 from a root endpoint means the server does not offer it.
fn missing(what: &'static str) -> impl Fn(ProviderError) -> ProviderError {
    move |e| match e {
        ProviderError::NotFound { .. } => {
            ProviderError::Unsupported(format!("the remote server has no /{what} endpoint"))
        }
        other => other,
    }
}

/// POSTs `body` to `path` at the server root (where vLLM serves `/tokenize` and `/detokenize`) and parses the
/// JSON answer. A 404 or 405 for `/tokenize` marks it missing for token counting.
async fn post_root(
    shared: &Shared,
    path: &str,
    body: &Value,
    model: &str,
) -> Result<Value, ProviderError> {
    let url = shared.root_endpoint(path);
    let (status, text) = super::http::post_json(shared, &url, body).await?;
    if (status == 404 || status == 405) && path == "tokenize" {
        shared.tokenize_missing.store(true, Ordering::Relaxed);
    }
    if status == 405 {
        return Err(ProviderError::NotFound {
            url: url.to_string(),
            message: wire::error_message(&text),
        });
    }
    if !(200..300).contains(&status) {
        return Err(super::http::classify(
            status,
            wire::error_message(&text),
            &url,
            model,
            1,
        ));
    }
    serde_json::from_str(&text).map_err(|e| {
        ProviderError::Protocol(format!("/{path} answered something that is not JSON: {e}"))
    })
}
