//! Counting a request's prompt tokens for a remote model, best source first: the server's `/tokenize` (vLLM's,
//! at the server root, taking chat messages), else the local tokenizer and chat template of the same model
//! (`remote.tokenizer`), else [`estimate_tokens`] marked `exact: false`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};

use super::super::local::render_prompt;
use super::super::{
    estimate_tokens, model_or_default, CompletionRequest, ProviderError, TokenCount,
};
use super::{wire, Shared};
use crate::engine::constraint::format::ToolCallFormat;
use crate::engine::fetch::{self, FetchOptions, ModelSelector};
use crate::engine::gguf::GgufFile;
use crate::engine::template::ChatTemplate;
use crate::engine::tokenizer::Tokenizer;

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
        let resolved = fetch::resolve(&ModelSelector::parse(spec), &FetchOptions::default())
            .map_err(ProviderError::Engine)?;
        let gguf = GgufFile::open(&resolved.path).map_err(ProviderError::Engine)?;
        let tokenizer = Tokenizer::from_gguf(&gguf).map_err(ProviderError::Engine)?;
        // The same template the engine uses for this file.
        let template = ChatTemplate::from_gguf_metadata(&gguf).map_err(ProviderError::Engine)?;
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

/// vLLM's `POST /tokenize` with chat messages. A 404 or 405 marks the endpoint missing for good.
async fn server_count(shared: &Shared, request: &CompletionRequest) -> Result<u64, ProviderError> {
    let url = shared.root_endpoint("tokenize");
    let model = model_or_default(request, &shared.models());
    let mut body = json!({
        "model": model,
        "messages": wire::messages(request),
        "add_generation_prompt": true,
    });
    if !request.tools.is_empty() {
        body["tools"] = Value::Array(wire::tools(&request.tools));
    }
    let mut req = shared
        .client
        .post(url.clone())
        .headers(shared.resolved.headers.clone())
        .json(&body);
    if let Some(key) = &shared.resolved.api_key {
        req = req.bearer_auth(key);
    }
    let resp = tokio::time::timeout(shared.resolved.request, req.send())
        .await
        .map_err(|_| ProviderError::Timeout {
            what: super::super::TimeoutKind::Request,
            after: shared.resolved.request,
        })?
        .map_err(|e| ProviderError::Connect {
            url: url.to_string(),
            message: super::http::error_chain(&e),
        })?;
    let status = resp.status().as_u16();
    if status == 404 || status == 405 {
        shared.tokenize_missing.store(true, Ordering::Relaxed);
    }
    let text = resp
        .text()
        .await
        .map_err(|e| ProviderError::Protocol(e.to_string()))?;
    if !(200..300).contains(&status) {
        return Err(super::http::classify(
            status,
            wire::error_message(&text),
            &url,
            &model,
            1,
        ));
    }
    let v: Value = serde_json::from_str(&text).map_err(|e| {
        ProviderError::Protocol(format!(
            "/tokenize answered something that is not JSON: {e}"
        ))
    })?;
    v.get("count")
        .and_then(Value::as_u64)
        .or_else(|| {
            v.get("tokens")
                .and_then(Value::as_array)
                .map(|t| t.len() as u64)
        })
        .ok_or_else(|| ProviderError::Protocol("/tokenize answered without `count`".into()))
}
