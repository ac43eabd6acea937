//! The backend a coding session talks to: the in-process engine (default), an OpenAI-compatible server
//! (`--remote URL`, or `provider = "remote"` in `--config`), or — for tests only — the scripted provider named
//! by `AGENTD_SCRIPTED_PROVIDER`. Every failure to get one is exit code 3 with a message naming what to fix.

use std::sync::Arc;

use agentd::config::{Config, ProviderKind};
use agentd::provider::{LocalProvider, Provider, ProviderError, RemoteConfig, RemoteProvider};
use anyhow::Context as _;

use super::{scripted, AgentArgs, Failure};
use crate::cli::engine_args::EngineArgs;

/// Which kind of backend answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendKind {
    Local,
    Remote { base_url: String },
    Scripted,
}

/// A ready provider and what it is.
#[derive(Clone)]
pub struct Backend {
    pub provider: Arc<dyn Provider>,
    pub kind: BackendKind,
    /// The model requests name (the provider's default when empty).
    pub model: String,
    /// How to load another local model (`/model NAME`, RPC `set_model`); `None` unless local.
    pub engine_args: Option<EngineArgs>,
}

impl Backend {
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
        if self.model.is_empty() {
            self.provider
                .models()
                .first()
                .map(|m| m.id.clone())
                .unwrap_or_default()
        } else {
            self.model.clone()
        }
    }

    /// A short description for the status line and `get_state`.
    pub fn describe(&self) -> String {
        match &self.kind {
            BackendKind::Local => "local".into(),
            BackendKind::Remote { base_url } => format!("remote {base_url}"),
            BackendKind::Scripted => "scripted".into(),
        }
    }

    /// Switches to `name`: a model the provider already serves, or (local engine) another known model or a GGUF
    /// file, loaded now.
    pub async fn switch_model(&mut self, name: &str) -> anyhow::Result<()> {
        let name = name.trim();
        let served = self.provider.models();
        if let Some(m) = served.iter().find(|m| m.id == name) {
            self.model = m.id.clone();
            return Ok(());
        }
        let Some(args) = self.engine_args.clone() else {
            let ids: Vec<String> = served.into_iter().map(|m| m.id).collect();
            anyhow::bail!("unknown model `{name}`; available: {}", ids.join(", "));
        };
        let mut args = args;
        if std::path::Path::new(name).is_file() {
            args.model_path = Some(name.into());
        } else {
            // Only known models are loaded by name (an unknown one is not looked for on the network).
            let manifest =
                agentd::engine::manifest::find(name).map_err(|e| anyhow::anyhow!("{e}"))?;
            if manifest.name == self.model {
                return Ok(());
            }
            args.model = manifest.name;
            args.model_path = None;
        }
        let engine = tokio::task::spawn_blocking(move || args.load())
            .await
            .context("the model-loading task failed")?
            .with_context(|| format!("loading model `{name}`"))?;
        let provider = LocalProvider::new(engine);
        self.model = provider
            .models()
            .first()
            .map(|m| m.id.clone())
            .unwrap_or_default();
        self.provider = Arc::new(provider);
        Ok(())
    }
}

/// Builds the backend the flags ask for. Loads the model (local) or checks the server (remote) now, so a
/// missing model or an unreachable server fails before any prompt is taken.
pub async fn build(args: &AgentArgs) -> anyhow::Result<Backend> {
    if let Some(path) = scripted::script_path() {
        let provider = scripted::load(&path).map_err(|e| Failure::usage(format!("{e:#}")))?;
        return Ok(Backend {
            provider,
            kind: BackendKind::Scripted,
            model: args.model.clone().unwrap_or_default(),
            engine_args: None,
        });
    }
    let config = match &args.config {
        Some(path) => Some(Config::load(path).map_err(|e| Failure::usage(e.to_string()))?),
        None => None,
    };
    if let Some(url) = &args.remote {
        let mut remote = config
            .as_ref()
            .and_then(|c| c.remote.clone())
            .unwrap_or_default();
        remote.base_url = normalise_base_url(url);
        if args.api_key_env.is_some() {
            remote.api_key_env = args.api_key_env.clone();
        }
        if let Some(m) = &args.model {
            remote.model = m.clone();
        }
        return remote_backend(remote).await;
    }
    if let Some(cfg) = &config {
        if cfg.provider == ProviderKind::Remote {
            let mut remote = cfg.remote.clone().unwrap_or_default();
            if let Some(m) = &args.model {
                remote.model = m.clone();
            }
            return remote_backend(remote).await;
        }
    }
    let mut engine_args = EngineArgs {
        model: agentd::engine::manifest::DEFAULT_MODEL.to_string(),
        model_path: args.model_path.clone(),
        device: args.device.clone(),
        weights: args.weights,
        offline: args.offline,
    };
    if let Some(cfg) = &config {
        engine_args.model = cfg.engine.model.clone();
        engine_args.offline |= cfg.engine.offline;
        if args.device == "auto" {
            engine_args.device = cfg.engine.device.clone();
        }
    }
    if let Some(m) = &args.model {
        engine_args.model = m.clone();
    }
    let load_args = engine_args.clone();
    let engine = tokio::task::spawn_blocking(move || load_args.load())
        .await
        .context("the model-loading task failed")?
        .map_err(|e| Failure::backend(format!("{e:#}")))?;
    let provider = LocalProvider::new(engine);
    let model = provider
        .models()
        .first()
        .map(|m| m.id.clone())
        .unwrap_or_default();
    Ok(Backend {
        provider: Arc::new(provider),
        kind: BackendKind::Local,
        model,
        engine_args: Some(engine_args),
    })
}

/// `http://host:port` → `http://host:port/v1` (the OpenAI API root); a URL with a path is kept as given.
fn normalise_base_url(url: &str) -> String {
    let trimmed = url.trim().trim_end_matches('/');
    match reqwest::Url::parse(trimmed) {
        Ok(u) if u.path().is_empty() || u.path() == "/" => format!("{trimmed}/v1"),
        _ => trimmed.to_string(),
    }
}

/// Checks the server (its model list) and settles the model: the one asked for, else the server's first.
async fn remote_backend(mut remote: RemoteConfig) -> anyhow::Result<Backend> {
    let base_url = remote.base_url.clone();
    if remote.model.trim().is_empty() {
        remote.model = first_served_model(&remote).await?;
    }
    let provider = RemoteProvider::new(remote).map_err(|e| Failure::usage(e.to_string()))?;
    let models = provider
        .discover()
        .await
        .map_err(|e| remote_failure(&base_url, e))?;
    let model = models.first().map(|m| m.id.clone()).unwrap_or_default();
    Ok(Backend {
        provider: Arc::new(provider),
        kind: BackendKind::Remote { base_url },
        model,
        engine_args: None,
    })
}

fn remote_failure(base_url: &str, e: ProviderError) -> anyhow::Error {
    let hint = match &e {
        ProviderError::Connect { .. } | ProviderError::Timeout { .. } => {
            " (is the server running? start one with `agentd serve` or `vllm serve`)"
        }
        ProviderError::NotFound { .. } => {
            " (the URL should be the API root, usually ending in /v1)"
        }
        _ => "",
    };
    Failure::backend(format!("remote server {base_url}: {e}{hint}"))
}

/// Asks the server for its models (a placeholder model name lets the provider do the request) and takes the
/// first one.
async fn first_served_model(remote: &RemoteConfig) -> anyhow::Result<String> {
    let probe = RemoteConfig {
        model: "?".into(),
        ..remote.clone()
    };
    let provider = RemoteProvider::new(probe).map_err(|e| Failure::usage(e.to_string()))?;
    match provider.discover().await {
        Ok(models) => Ok(models.first().map(|m| m.id.clone()).unwrap_or_default()),
        Err(ProviderError::UnknownModel { message, .. }) => {
            // "the server serves: a, b": the first listed one.
            let served = message.rsplit(": ").next().unwrap_or_default();
            let first = served.split(", ").next().unwrap_or_default().trim();
            if first.is_empty() {
                Err(Failure::backend(format!(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_get_the_api_root() {
        assert_eq!(
            normalise_base_url("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(normalise_base_url("http://h:1/v1/"), "http://h:1/v1");
        assert_eq!(normalise_base_url("http://h/api"), "http://h/api");
    }
}
