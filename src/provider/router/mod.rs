//! Several models behind one [`Provider`]: each request goes to the model its `model` names, which is loaded on
//! first use (the requests for it wait, a bounded number of them) and unloaded when it has been idle past its
//! keep-alive, or to make room under `max_loaded` and the memory budget (the least recently used idle model
//! first). A model that fails to load fails the requests for it and nothing else.
//!
//! The router decides and counts; loading is a [`Loader`] it is given (the local engine's, a test's scripted
//! provider), run on a blocking thread. Each loaded model keeps its own provider — for the local engine its own
//! engine thread, KV pool and scheduler — and in-flight requests hold it, so unloading never cuts one short.

mod slot;

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::events::{spawn_stream, EventSender};
use super::{
    CompletionRequest, ErrorReason, KeepAlive, ModelDescriptor, ModelStatus, Provider,
    ProviderError, ProviderEvent, ProviderStream, RawCompletionRequest, TokenCount,
    TokenizeRequest, Tokenized, Usage,
};
use slot::{Lease, Slot};

/// Loads a model: blocking work (reading weights, starting an engine thread).
pub type Loader = Arc<dyn Fn() -> Result<Arc<dyn Provider>, ProviderError> + Send + Sync>;

/// Fetches the model a name means into the cache and describes it: blocking work (a download).
pub type Puller = Arc<dyn Fn(&str) -> Result<ModelSpec, ProviderError> + Send + Sync>;

/// A model the router can serve.
#[derive(Clone)]
pub struct ModelSpec {
    /// The name requests use (and `/v1/models` lists).
    pub id: String,
    /// Other names it answers to (a manifest's aliases).
    pub aliases: Vec<String>,
    /// Its window before it is loaded (0: unknown until then).
    pub context_window: u64,
    /// What it takes in memory once loaded (weights and KV cache; 0: unknown), for the memory budget.
    pub size_bytes: u64,
    /// Load it when the router starts.
    pub preload: bool,
    /// What it is, for model lists.
    pub details: Option<super::ModelDetails>,
    pub loader: Loader,
}

impl std::fmt::Debug for ModelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSpec")
            .field("id", &self.id)
            .field("aliases", &self.aliases)
            .field("context_window", &self.context_window)
            .field("size_bytes", &self.size_bytes)
            .field("preload", &self.preload)
            .finish_non_exhaustive()
    }
}

/// How many models stay loaded, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterOptions {
    /// Models loaded at once (0: no limit).
    pub max_loaded: usize,
    /// Memory all loaded models may take together, in bytes (`None`: no budget).
    pub memory_budget: Option<u64>,
    /// How long an idle model stays loaded when its requests said nothing (`None`: until evicted).
    pub idle_unload: Option<Duration>,
    /// Requests that may wait for one model to finish loading; more get a `busy` error.
    pub max_waiting: usize,
}

impl Default for RouterOptions {
    fn default() -> Self {
        Self {
            max_loaded: 3,
            memory_budget: None,
            idle_unload: None,
            max_waiting: 256,
        }
    }
}

pub(crate) struct Shared {
    /// One per model; models pulled while serving are added.
    slots: std::sync::RwLock<Vec<Arc<Slot>>>,
    options: RouterOptions,
    puller: Option<Puller>,
}

impl Shared {
    /// The models now (a snapshot).
    fn slots(&self) -> Vec<Arc<Slot>> {
        self.slots.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// See the module docs. Cheap to clone.
#[derive(Clone)]
pub struct ModelRouter {
    shared: Arc<Shared>,
}

/// How often idle models are looked at.
const SWEEP_EVERY: Duration = Duration::from_millis(500);

impl ModelRouter {
    /// A router over `models` (the first is the default). Models marked `preload` start loading now, and idle
    /// ones are unloaded by a task on the current runtime (when there is one).
    pub fn new(models: Vec<ModelSpec>, options: RouterOptions) -> Result<Self, ProviderError> {
        Self::with_puller(models, options, None)
    }

    /// [`new`](Self::new), with a way to fetch models by name while serving ([`Provider::pull_model`]).
    pub fn with_puller(
        models: Vec<ModelSpec>,
        options: RouterOptions,
        puller: Option<Puller>,
    ) -> Result<Self, ProviderError> {
        if models.is_empty() {
            return Err(ProviderError::Config("no model to serve".into()));
        }
        for (i, m) in models.iter().enumerate() {
            if models[..i].iter().any(|o| o.id == m.id) {
                return Err(ProviderError::Config(format!(
                    "the model `{}` is named twice",
                    m.id
                )));
            }
        }
        let shared = Arc::new(Shared {
            slots: std::sync::RwLock::new(
                models.into_iter().map(|m| Arc::new(Slot::new(m))).collect(),
            ),
            options,
            puller,
        });
        let router = Self { shared };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&router.shared);
            handle.spawn(sweep(weak));
        }
        Ok(router)
    }

    /// Whether `id` is to be loaded when the server starts (see [`ModelSpec::preload`]).
    pub fn preloads(&self, id: &str) -> bool {
        self.shared
            .slots()
            .iter()
            .any(|s| s.spec.id == id && s.spec.preload)
    }

    /// The slot `name` means (empty: the default model).
    fn slot(&self, name: &str) -> Result<Arc<Slot>, ProviderError> {
        let slots = self.shared.slots();
        if name.is_empty() {
            return Ok(slots[0].clone());
        }
        slots
            .iter()
            .find(|s| s.spec.id == name)
            .or_else(|| {
                slots
                    .iter()
                    .find(|s| s.spec.aliases.iter().any(|a| a == name))
            })
            .cloned()
            .ok_or_else(|| ProviderError::UnknownModel {
                model: name.to_string(),
                message: format!(
                    "this server serves: {}",
                    slots
                        .iter()
                        .map(|s| s.spec.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
    }

    /// The loaded provider of `name`, loading it first when needed; the lease counts the request in flight.
    async fn acquire(
        &self,
        name: &str,
        cancel: Option<&CancellationToken>,
    ) -> Result<Lease, ProviderError> {
        let slot = self.slot(name)?;
        slot.acquire(&self.shared, cancel).await
    }

    /// Every model's state (see [`Provider::model_states`]).
    fn states(&self) -> Vec<ModelStatus> {
        self.shared.slots().iter().map(|s| s.status()).collect()
    }
}

/// Unloads models whose keep-alive ran out, until the router is gone.
async fn sweep(shared: Weak<Shared>) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let now = Instant::now();
        for slot in shared.slots() {
            slot.unload_if_expired(now);
        }
    }
}

impl Shared {
    /// Unloads least recently used idle models (not `keep`) until one more model of `size` bytes fits; `false`
    /// when that is not possible (every other loaded model is busy).
    fn make_room(&self, keep: &Slot, size: u64) -> bool {
        loop {
            let all = self.slots();
            let loaded: Vec<&Arc<Slot>> = all
                .iter()
                .filter(|s| !std::ptr::eq(s.as_ref(), keep) && s.holds_memory())
                .collect();
            let used: u64 = loaded.iter().map(|s| s.spec.size_bytes).sum();
            let over_count =
                self.options.max_loaded > 0 && loaded.len() + 1 > self.options.max_loaded;
            let over_budget = self
                .options
                .memory_budget
                .is_some_and(|b| used + size > b && !loaded.is_empty());
            if !over_count && !over_budget {
                return true;
            }
            let victim = loaded
                .iter()
                .filter_map(|s| s.idle_since().map(|t| (t, *s)))
                .min_by_key(|(t, _)| *t);
            match victim {
                Some((_, s)) => s.unload(),
                None => return false,
            }
        }
    }
}

/// Forwards `inner`'s events to `tx`, holding `lease` until the stream ends; the time the request waited for
/// its model (`waited`, when it had to load) goes into the usage's timings.
async fn forward(
    mut inner: ProviderStream,
    lease: Lease,
    keep_alive: Option<KeepAlive>,
    waited: std::time::Duration,
    tx: &EventSender,
) {
    while let Some(mut ev) = inner.next().await {
        if let ProviderEvent::Done { usage, .. } = &mut ev {
            let timings = usage.timings.get_or_insert_with(Default::default);
            timings.load_ns = super::Timings::ns(waited.as_secs_f64());
        }
        let terminal = ev.is_terminal();
        if tx.unbounded_send(ev).is_err() || terminal {
            break;
        }
    }
    lease.release(keep_alive);
}

fn error_event(e: &ProviderError) -> ProviderEvent {
    ProviderEvent::Error {
        reason: ErrorReason::Error,
        kind: e.kind(),
        message: e.to_string(),
        usage: Usage::default(),
        partial: Default::default(),
    }
}

impl ModelRouter {
    /// Runs one request on `model` once it is loaded: waits for the model (its load time becomes the answer's
    /// `load_ns`), starts the request on its provider and forwards the events, holding the model until the end.
    fn routed(
        &self,
        model: String,
        keep_alive: Option<KeepAlive>,
        cancel: CancellationToken,
        start: impl FnOnce(&dyn Provider, CancellationToken) -> ProviderStream + Send + 'static,
    ) -> ProviderStream {
        let router = self.clone();
        spawn_stream(cancel, move |tx, cancel| async move {
            let arrived = Instant::now();
            let lease = match router.acquire(&model, Some(&cancel)).await {
                Ok(l) => l,
                Err(e) => {
                    let _ = tx.unbounded_send(error_event(&e));
                    return;
                }
            };
            let inner = start(lease.provider().as_ref(), cancel);
            forward(inner, lease, keep_alive, arrived.elapsed(), &tx).await;
        })
    }
}

#[async_trait::async_trait]
impl Provider for ModelRouter {
    fn stream(&self, request: CompletionRequest, cancel: CancellationToken) -> ProviderStream {
        let (model, keep_alive) = (request.model.clone(), request.keep_alive);
        self.routed(model, keep_alive, cancel, move |provider, cancel| {
            // The loaded provider serves this one model: it is its default.
            let mut request = request;
            request.model.clear();
            provider.stream(request, cancel)
        })
    }

    fn stream_raw(
        &self,
        request: RawCompletionRequest,
        cancel: CancellationToken,
    ) -> ProviderStream {
        let (model, keep_alive) = (request.model.clone(), request.keep_alive);
        self.routed(model, keep_alive, cancel, move |provider, cancel| {
            let mut request = request;
            request.model.clear();
            provider.stream_raw(request, cancel)
        })
    }

    async fn count_tokens(&self, request: &CompletionRequest) -> Result<TokenCount, ProviderError> {
        let lease = self.acquire(&request.model, None).await?;
        let mut request = request.clone();
        request.model.clear();
        let counted = lease.provider().count_tokens(&request).await;
        lease.release(None);
        counted
    }

    fn models(&self) -> Vec<ModelDescriptor> {
        self.states().into_iter().map(|s| s.model).collect()
    }

    fn model_states(&self) -> Vec<ModelStatus> {
        self.states()
    }

    fn resolve_model(&self, name: &str) -> Option<String> {
        self.slot(name).ok().map(|s| s.spec.id.clone())
    }

    fn describe(&self) -> String {
        match self.shared.slots().as_slice() {
            [one] => one
                .loaded_provider()
                .map_or_else(|| "local".into(), |p| p.describe()),
            many => format!("local ({} models)", many.len()),
        }
    }

    fn concurrency(&self) -> Option<usize> {
        self.shared
            .slots()
            .iter()
            .filter_map(|s| s.loaded_provider().and_then(|p| p.concurrency()))
            .max()
    }

    fn model_identity(&self, model: &str) -> String {
        match self.slot(model).ok().and_then(|s| s.loaded_provider()) {
            Some(p) => p.model_identity(""),
            None => model.to_string(),
        }
    }

    fn supports_logprobs(&self) -> bool {
        true
    }

    fn prefix_cache(&self) -> Option<super::PrefixCacheCounts> {
        let counts: Vec<super::PrefixCacheCounts> = self
            .shared
            .slots()
            .iter()
            .filter_map(|s| s.loaded_provider().and_then(|p| p.prefix_cache()))
            .collect();
        (!counts.is_empty()).then(|| super::PrefixCacheCounts {
            queries: counts.iter().map(|c| c.queries).sum(),
            hits: counts.iter().map(|c| c.hits).sum(),
            evictions: counts.iter().map(|c| c.evictions).sum(),
        })
    }

    fn engine_load(&self) -> Option<super::EngineLoad> {
        self.shared.slots()[0]
            .loaded_provider()
            .and_then(|p| p.engine_load())
    }

    async fn tokenize(&self, request: TokenizeRequest) -> Result<Tokenized, ProviderError> {
        let lease = self.acquire(&request.model, None).await?;
        let mut request = request;
        request.model.clear();
        let out = lease.provider().tokenize(request).await;
        lease.release(None);
        out
    }

    async fn detokenize(&self, model: &str, tokens: &[u32]) -> Result<String, ProviderError> {
        let lease = self.acquire(model, None).await?;
        let out = lease.provider().detokenize("", tokens).await;
        lease.release(None);
        out
    }

    /// On the model the request names, once it is loaded; the wait for it is the answer's `load_secs`.
    async fn embed(
        &self,
        request: super::EmbedRequest,
    ) -> Result<super::Embeddings, ProviderError> {
        let arrived = Instant::now();
        let lease = self.acquire(&request.model, None).await?;
        let waited = arrived.elapsed().as_secs_f64();
        let keep_alive = request.keep_alive;
        let mut request = request;
        request.model.clear();
        let out = lease.provider().embed(request).await;
        lease.release(keep_alive);
        out.map(|mut e| {
            e.load_secs = waited;
            e
        })
    }

    async fn load_model(&self, name: &str) -> Result<(), ProviderError> {
        self.acquire(name, None).await?.release(None);
        Ok(())
    }

    async fn unload_model(&self, name: &str) -> Result<(), ProviderError> {
        self.slot(name)?.unload();
        Ok(())
    }

    async fn pull_model(&self, name: &str) -> Result<ModelStatus, ProviderError> {
        let Some(puller) = self.shared.puller.clone() else {
            return Err(ProviderError::Unsupported(format!(
                "this server cannot fetch models (asked for `{name}`)"
            )));
        };
        let wanted = name.to_string();
        let spec = tokio::task::spawn_blocking(move || puller(&wanted))
            .await
            .map_err(|e| ProviderError::Internal(format!("the pulling task failed: {e}")))??;
        let id = spec.id.clone();
        {
            let mut slots = self.shared.slots.write().unwrap_or_else(|p| p.into_inner());
            match slots.iter().position(|s| s.spec.id == id) {
                // Not in memory: described afresh (its file is there now).
                Some(i) if !slots[i].holds_memory() => slots[i] = Arc::new(Slot::new(spec)),
                Some(_) => {}
                None => slots.push(Arc::new(Slot::new(spec))),
            }
        }
        Ok(self.slot(&id)?.status())
    }
}

impl std::fmt::Debug for ModelRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRouter")
            .field("models", &self.shared.slots().len())
            .finish()
    }
}

#[cfg(test)]
mod tests;
