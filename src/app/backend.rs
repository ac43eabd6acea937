//! The backend a coding session talks to: the in-process engine, an OpenAI-compatible server (vLLM, another
//! `agentd serve`), or a provider the caller built (the server's admission-gated one; a scripted one in tests).
//! Every provider made from a configuration goes through [`build_provider`], so the response cache and
//! the engine settings mean the same in every door. A failure to get a backend is [`AppError::Backend`] with a
//! message naming what to fix.

use std::sync::Arc;

use crate::config::{Config, ProviderKind};
use crate::provider::response_cache::{CacheStats, CachingProvider, ResponseCache};
use crate::provider::{Provider, ProviderError, RemoteConfig, RemoteProvider};

use super::local_engine::{self, LocalHandle};
use super::AppError;

/// Which kind of backend answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendKind {
    Local,
    Remote {
        base_url: String,
    },
    /// A provider the caller built (described by the label it gave).
    Given {
        label: String,
    },
}

/// A ready provider and what it is. Cheap to clone.
#[derive(Clone)]
pub struct Backend {
    pub provider: Arc<dyn Provider>,
    pub kind: BackendKind,
    /// The model requests name (the provider's default when empty).
    pub model: String,
    /// The response cache's counters, when the cache is on.
    pub cache: Option<Arc<CacheStats>>,
    /// Why the engine runs on another device than asked (for the user), if it does.
    pub device_note: Option<String>,
    /// The configuration the provider was built from: how to load another local model (`/model NAME`).
    config: Option<Config>,
}

impl Backend {
    /// A backend over a provider the caller built; `label` names it in `describe` (`"scripted"`, `"local"`).
    pub fn given(provider: Arc<dyn Provider>, model: impl Into<String>, label: &str) -> Self {
        let model = crate::provider::named_or_default(&model.into(), &provider.models());
        Self {
            provider,
            kind: BackendKind::Given {
                label: label.to_string(),
            },
            model,
            cache: None,
            device_note: None,
            config: None,
        }
    }

    /// Builds the backend `config` describes. Loads the model (local, off the async workers) or checks the
    /// server and settles its model (remote: the configured one, else the server's first) now, so a missing
    /// model or an unreachable server fails before any prompt is taken.
    pub async fn connect(mut config: Config) -> Result<Self, AppError> {
        if config.provider == ProviderKind::Remote {
            let mut remote = config
                .remote
                .clone()
                .ok_or_else(|| AppError::usage("provider = \"remote\" needs a [remote] section"))?;
            let base_url = remote.base_url.clone();
            if remote.model.trim().is_empty() {
                remote.model = first_served_model(&remote).await?;
            }
            let probe =
                RemoteProvider::new(remote.clone()).map_err(|e| AppError::usage(e.to_string()))?;
            let models = probe
                .discover()
                .await
                .map_err(|e| remote_failure(&base_url, e))?;
            remote.learn(&models);
            config.remote = Some(remote);
            let built = build_provider(&config)
                .map_err(|e| AppError::Backend(format!("remote server {base_url}: {e}")))?;
            let model = models.first().map(|m| m.id.clone()).unwrap_or_default();
            return Ok(Self {
                provider: built.provider,
                kind: BackendKind::Remote { base_url },
                model,
                cache: built.cache,
                device_note: None,
                config: Some(config),
            });
        }
        let cfg = config.clone();
        let built = tokio::task::spawn_blocking(move || build_provider(&cfg))
            .await
            .map_err(|e| AppError::Backend(format!("the model-loading task failed: {e}")))?
            .map_err(|e| AppError::Backend(format!("loading the model: {e}")))?;
        let device_note = built.local.as_ref().and_then(local_engine::device_note);
        let model = built
            .provider
            .models()
            .first()
            .map(|m| m.id.clone())
            .unwrap_or_default();
        Ok(Self {
            provider: built.provider,
            kind: BackendKind::Local,
            model,
            cache: built.cache,
            device_note,
            config: Some(config),
        })
    }

    /// Whether [`switch_model`](Self::switch_model) can load other known models (a local engine built from a
    /// configuration).
    pub fn can_load_models(&self) -> bool {
        self.kind == BackendKind::Local && self.config.is_some()
    }

    /// The context window of the current model, in tokens (0: unknown).
    pub fn context_window(&self) -> u64 {
        let models = self.provider.models();
        models
            .iter()
            .find(|m| m.id == self.model)
            .or(models.first())
            .map_or(0, |m| m.context_window)
    }

    /// The model's display name.
    pub fn model_name(&self) -> String {
        crate::provider::named_or_default(&self.model, &self.provider.models())
    }

    /// A short description for the status line, `get_state` and the session's `model_change` entries.
    pub fn describe(&self) -> String {
        match &self.kind {
            BackendKind::Local => "local".into(),
            BackendKind::Remote { base_url } => format!("remote {base_url}"),
            BackendKind::Given { label } => label.clone(),
        }
    }

    /// Switches to `name`: a model the provider already serves, or (local engine) another known model or a GGUF
    /// file, loaded now through the same configuration (cache included).
    pub async fn switch_model(&mut self, name: &str) -> Result<(), AppError> {
        let name = name.trim();
        if let Some(id) = self.provider.resolve_model(name) {
            self.model = id;
            return Ok(());
        }
        let local = self
            .config
            .clone()
            .filter(|c| c.provider == ProviderKind::Local && self.kind == BackendKind::Local);
        let Some(mut config) = local else {
            let ids: Vec<String> = self.provider.models().into_iter().map(|m| m.id).collect();
            return Err(AppError::usage(format!(
                "unknown model `{name}`; available: {}",
                ids.join(", ")
            )));
        };
        if !std::path::Path::new(name).is_file() {
            // Only known models are loaded by name (an unknown one is not looked for on the network).
            let manifest = crate::model_files::manifest::find(name)
                .map_err(|e| AppError::usage(e.to_string()))?;
            if manifest.name == self.model {
                return Ok(());
            }
            config.engine.model = manifest.name;
        } else {
            config.engine.model = name.to_string();
        }
        let switched = Self::connect(config)
            .await
            .map_err(|e| AppError::failed(format!("loading model `{name}`: {e}")))?;
        *self = switched;
        Ok(())
    }
}

/// The error for a remote server that cannot be used, with a hint where one helps.
fn remote_failure(base_url: &str, e: ProviderError) -> AppError {
    let hint = match &e {
        ProviderError::Connect { .. } | ProviderError::Timeout { .. } => {
            " (is the server running? start one with `agentd serve` or `vllm serve`)"
        }
        ProviderError::NotFound { .. } => {
            " (the URL should be the API root, usually ending in /v1)"
        }
        _ => "",
    };
    AppError::Backend(format!("remote server {base_url}: {e}{hint}"))
}

/// Asks the server for its models (a placeholder model name lets the provider do the request) and takes the
/// first one.
async fn first_served_model(remote: &RemoteConfig) -> Result<String, AppError> {
    let probe = RemoteConfig {
        model: "?".into(),
        ..remote.clone()
    };
    let provider = RemoteProvider::new(probe).map_err(|e| AppError::usage(e.to_string()))?;
    match provider.discover().await {
        Ok(models) => Ok(models.first().map(|m| m.id.clone()).unwrap_or_default()),
        Err(ProviderError::UnknownModel { message, .. }) => {
            // "the server serves: a, b": the first listed one.
            let served = message.rsplit(": ").next().unwrap_or_default();
            let first = served.split(", ").next().unwrap_or_default().trim();
            if first.is_empty() {
                Err(AppError::Backend(format!(
                    "remote server {}: it serves no model",
                    remote.base_url
                )))
            } else {
                Ok(first.to_string())
            }
        }
        Err(e) => Err(remote_failure(&remote.base_url, e)),
    }
}

/// What [`build_provider`] made.
pub struct BuiltProvider {
    /// The provider to use: the engine or the remote server, behind the response cache when it is on.
    pub provider: Arc<dyn Provider>,
    /// The engine's own provider when `provider = "local"` (model information for people).
    pub local: Option<LocalHandle>,
    /// The response cache's counters when `[cache] enabled`.
    pub cache: Option<Arc<CacheStats>>,
    /// The local models' router when the provider serves several models ([`build_served`]).
    pub router: Option<crate::provider::ModelRouter>,
}

/// The provider `agentd serve` serves: for `local`, a router over every model the config offers
/// ([`super::model_catalog`]: each loaded at start or on first use, in its own engine), else as
/// [`build_provider`]. Call it inside a tokio runtime; the models marked to preload are loaded by
/// `ModelRouter::preload`, not here.
pub fn build_served(config: &Config) -> Result<BuiltProvider, ProviderError> {
    if config.provider != ProviderKind::Local {
        return build_provider(config);
    }
    let router = local_engine::router(config)?;
    let inner: Arc<dyn Provider> = Arc::new(router.clone());
    let (provider, cache) = with_cache(config, inner, None)?;
    Ok(BuiltProvider {
        provider,
        local: None,
        cache,
        router: Some(router),
    })
}

/// Builds the configured provider — the one place every door gets its provider from: loads the model for
/// `local` (setting the CPU thread count first; this blocks for as long as loading takes), or prepares the
/// client for `remote` (nothing is sent; call `RemoteProvider::discover` to check the server). With
/// `[cache] enabled` the provider answers repeated temperature-0 requests from the response cache.
pub fn build_provider(config: &Config) -> Result<BuiltProvider, ProviderError> {
    let (inner, local): (Arc<dyn Provider>, Option<LocalHandle>) = match config.provider {
        ProviderKind::Local => {
            let (provider, local) = local_engine::load(config)?;
            (provider, Some(local))
        }
        ProviderKind::Remote => {
            let mut remote = config.remote.clone().ok_or_else(|| {
                ProviderError::Config("provider = \"remote\" needs a [remote] section".into())
            })?;
            // `max_model_len` caps the window the server has (or reports) as it caps a local model's.
            if let Some(n) = config.engine.max_model_len {
                let n = n as u64;
                remote.context_window = Some(remote.context_window.map_or(n, |w| w.min(n)));
                remote.max_output_tokens = remote.max_output_tokens.map(|o| o.min(n));
            }
            (Arc::new(RemoteProvider::new(remote)?), None)
        }
    };
    let (provider, cache) = with_cache(config, inner, local.clone())?;
    Ok(BuiltProvider {
        provider,
        local,
        cache,
        router: None,
    })
}

/// A provider and its response cache's counters (when it has one).
type Cached = (Arc<dyn Provider>, Option<Arc<CacheStats>>);

/// `inner` behind the response cache when `[cache] enabled` (keyed by the prompt's exact tokens when `local`
/// is the engine's own provider, else by the request's canonical JSON), and the cache's counters.
fn with_cache(
    config: &Config,
    inner: Arc<dyn Provider>,
    local: Option<LocalHandle>,
) -> Result<Cached, ProviderError> {
    if !config.cache.enabled {
        return Ok((inner, None));
    }
    let path = config.cache.resolved_path();
    let cache = ResponseCache::open(&path).map_err(|e| ProviderError::Config(e.to_string()))?;
    let caching = match local {
        Some(l) => local_engine::caching(l, Arc::new(cache)),
        None => CachingProvider::new(inner, Arc::new(cache)),
    };
    let stats = caching.stats().clone();
    Ok((Arc::new(caching), Some(stats)))
}
