//! [`CachingProvider`]: a [`Provider`] wrapper that answers repeated temperature-0 requests from the
//! [`ResponseCache`]. Requests at any other temperature (or none set) go straight through. A completion is stored
//! only when it ended with `done`; a hit replays the stored events, so the consumer sees the very stream it saw
//! the first time.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::{CacheStats, ResponseCache};
#[cfg(feature = "local")]
use crate::provider::LocalProvider;
use crate::provider::{
    CompletionRequest, ModelDescriptor, Provider, ProviderError, ProviderEvent, ProviderStream,
    TokenCount,
};

/// The prompt part of a cache key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptKey {
    /// The exact prompt token ids (the local engine: the rendered, tokenized prompt).
    Tokens(Vec<u32>),
    /// The canonical JSON of the system prompt and messages (providers whose tokenizer we do not run).
    Canonical(String),
}

/// Computes the prompt key of a request.
pub type PromptKeyer =
    Arc<dyn Fn(&CompletionRequest) -> Result<PromptKey, ProviderError> + Send + Sync>;

/// A provider answering repeated temperature-0 requests from a cache. Cheap to clone.
#[derive(Clone)]
pub struct CachingProvider {
    inner: Arc<dyn Provider>,
    cache: Arc<ResponseCache>,
    keyer: PromptKeyer,
    stats: Arc<CacheStats>,
}

impl CachingProvider {
    /// Keys by the canonical request JSON (for remote and scripted providers).
    pub fn new(inner: Arc<dyn Provider>, cache: Arc<ResponseCache>) -> Self {
        let keyer: PromptKeyer = Arc::new(|r: &CompletionRequest| {
            Ok(PromptKey::Canonical(canonical(&json!({
                "system": r.system,
                "messages": r.messages,
            }))))
        });
        Self::with_keyer(inner, cache, keyer)
    }

    /// Keys by the exact prompt tokens the engine would be given.
    #[cfg(feature = "local")]
    pub fn local(inner: LocalProvider, cache: Arc<ResponseCache>) -> Self {
        let tokenizer = inner.clone();
        let keyer: PromptKeyer = Arc::new(move |r: &CompletionRequest| {
            tokenizer.prompt_tokens(r).map(PromptKey::Tokens)
        });
        Self::with_keyer(Arc::new(inner), cache, keyer)
    }

    pub fn with_keyer(
        inner: Arc<dyn Provider>,
        cache: Arc<ResponseCache>,
        keyer: PromptKeyer,
    ) -> Self {
        Self {
            inner,
            cache,
            keyer,
            stats: Arc::default(),
        }
    }

    /// Hit, miss, bypass, store and error counters.
    pub fn stats(&self) -> &Arc<CacheStats> {
        &self.stats
    }

    pub fn cache(&self) -> &Arc<ResponseCache> {
        &self.cache
    }

    /// The model a request resolves to (the inner provider's default when it names none).
    fn model_of(&self, request: &CompletionRequest) -> String {
        crate::provider::named_or_default(&request.model, &self.inner.models())
    }

    /// Looks `request` up; `None` on a miss or any cache failure (counted and logged).
    async fn lookup(
        &self,
        request: &CompletionRequest,
        model: &str,
    ) -> (Option<String>, Option<Vec<ProviderEvent>>) {
        let keyer = self.keyer.clone();
        let (req, m) = (request.clone(), self.inner.model_identity(model));
        let key =
            match tokio::task::spawn_blocking(move || keyer(&req).map(|p| cache_key(&m, &p, &req)))
                .await
            {
                Ok(Ok(k)) => k,
                Ok(Err(e)) => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "cannot compute the response cache key");
                    return (None, None);
                }
                Err(e) => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "the cache key task failed");
                    return (None, None);
                }
            };
        let (cache, k) = (self.cache.clone(), key.clone());
        let found = match tokio::task::spawn_blocking(move || cache.get(&k)).await {
            Ok(Ok(found)) => {
                found.filter(|events| events.last().is_some_and(ProviderEvent::is_terminal))
            }
            Ok(Err(e)) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "response cache lookup failed");
                None
            }
            Err(e) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "the cache lookup task failed");
                None
            }
        };
        (Some(key), found)
    }
}

/// Whether a request may be answered from the cache: only at temperature 0 (greedy, deterministic).
pub fn cacheable(request: &CompletionRequest) -> bool {
    request.sampling.temperature.is_some_and(|t| t == 0.0)
}

/// The cache key: SHA-256 over the model's identity (on the local engine: the weights file's path, size,
/// modification time, digest and weight format — see [`Provider::model_identity`]), the prompt key, the tools'
/// schema hash and every setting that shapes the output (sampling, `max_tokens`, stop strings, `tool_choice`,
/// `response_format`, `parallel_tool_calls`, `logprobs`) and the request's `cache_scope` (tenants never replay
/// each other's answers).
pub fn cache_key(model: &str, prompt: &PromptKey, request: &CompletionRequest) -> String {
    let mut h = Sha256::new();
    h.update(b"agentd-response-cache/1\0");
    h.update(model.as_bytes());
    h.update(b"\0");
    match prompt {
        PromptKey::Tokens(ids) => {
            h.update(b"tokens\0");
            for id in ids {
                h.update(id.to_le_bytes());
            }
        }
        PromptKey::Canonical(text) => {
            h.update(b"json\0");
            h.update(text.as_bytes());
        }
    }
    h.update(b"\0tools\0");
    h.update(Sha256::digest(canonical(&json!(request.tools)).as_bytes()));
    h.update(b"\0settings\0");
    let settings = json!({
        "sampling": request.sampling,
        "max_tokens": request.max_tokens,
        "stop": request.stop,
        "tool_choice": request.tool_choice,
        "response_format": request.response_format,
        "parallel_tool_calls": request.parallel_tool_calls,
        "logprobs": request.logprobs,
        // A stored answer is another tenant's prompt's answer: it is only replayed within its scope.
        "cache_scope": request.cache_scope,
    });
    h.update(canonical(&settings).as_bytes());
    hex::encode(h.finalize())
}

/// JSON with object keys sorted at every depth, so equal values give equal text.
fn canonical(value: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sort(&map[k])))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(value).to_string()
}

#[async_trait::async_trait]
impl Provider for CachingProvider {
    fn stream(&self, request: CompletionRequest, cancel: CancellationToken) -> ProviderStream {
        if !cacheable(&request) {
            self.stats.bypassed.fetch_add(1, Ordering::Relaxed);
            return self.inner.stream(request, cancel);
        }
        let this = self.clone();
        let work = async move {
            let model = this.model_of(&request);
            let (key, found) = this.lookup(&request, &model).await;
            if let (Some(key), Some(events)) = (&key, found) {
                this.stats.hits.fetch_add(1, Ordering::Relaxed);
                tracing::info!(name: "cache.hit", model = %model, key = %key);
                return Box::pin(futures::stream::iter(events)) as ProviderStream;
            }
            this.stats.misses.fetch_add(1, Ordering::Relaxed);
            tracing::info!(name: "cache.miss", model = %model, key = key.as_deref().unwrap_or(""));
            let inner = this.inner.stream(request, cancel);
            let Some(key) = key else { return inner };
            let seen = Arc::new(Mutex::new(Vec::new()));
            let (cache, stats) = (this.cache.clone(), this.stats.clone());
            Box::pin(inner.then(move |ev| {
                let (seen, cache, stats) = (seen.clone(), cache.clone(), stats.clone());
                let (key, model) = (key.clone(), model.clone());
                async move {
                    let events = {
                        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                        seen.push(ev.clone());
                        matches!(ev, ProviderEvent::Done { .. }).then(|| std::mem::take(&mut *seen))
                    };
                    if let Some(events) = events {
                        let m = model.clone();
                        let k = key.clone();
                        match tokio::task::spawn_blocking(move || cache.put(&k, &m, &events)).await
                        {
                            Ok(Ok(())) => {
                                stats.stores.fetch_add(1, Ordering::Relaxed);
                                tracing::info!(name: "cache.store", model = %model, key = %key);
                            }
                            Ok(Err(e)) => {
                                stats.errors.fetch_add(1, Ordering::Relaxed);
                                tracing::warn!(error = %e, "could not store a response");
                            }
                            Err(e) => {
                                stats.errors.fetch_add(1, Ordering::Relaxed);
                                tracing::warn!(error = %e, "the cache store task failed");
                            }
                        }
                    }
                    ev
                }
            })) as ProviderStream
        };
        Box::pin(futures::stream::once(work).flatten())
    }

    async fn count_tokens(&self, request: &CompletionRequest) -> Result<TokenCount, ProviderError> {
        self.inner.count_tokens(request).await
    }

    fn models(&self) -> Vec<ModelDescriptor> {
        self.inner.models()
    }

    /// Everything else (raw completions, tokenizing, model information) passes through.
    fn wrapped(&self) -> Option<&dyn Provider> {
        Some(self.inner.as_ref())
    }
}
