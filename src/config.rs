//! `configs/*.toml` → a validated [`Config`]: which provider answers (the local engine or a remote
//! OpenAI-compatible server such as vLLM), the engine's settings, and the remote's. Unknown keys, bad values and
//! a missing `[remote]` section are errors that name the file and the setting; nothing is loaded or sent until
//! the whole file is valid.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::provider::RemoteConfig;
#[cfg(feature = "local")]
use crate::{
    engine::{
        DeviceSpec, EngineOptions, KvDtype, Pooling, SpeculativeConfig, WeightFormat,
        DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS,
    },
    model_files::fetch::{FetchOptions, ModelSelector},
};
#[cfg(not(feature = "local"))]
use unread::{
    Unread as KvDtype, Unread as Pooling, Unread as SpeculativeConfig,
    DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS,
};

/// What `provider = "local"` gets from a build without the engine.
pub const NO_LOCAL_ENGINE: &str = "this agentd was built without the local engine (the `local` feature): \
     set provider = \"remote\" with a [remote] section (or pass --remote URL) to use an OpenAI-compatible server";

/// A build without the engine still reads every `[engine]` key (a file stays valid in both builds) but keeps the
/// values the engine alone would interpret as they are, unread.
#[cfg(not(feature = "local"))]
mod unread {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    #[serde(transparent)]
    pub struct Unread(Option<toml::Value>);

    pub const DEFAULT_MAX_NUM_SEQS: usize = 0;
    pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: usize = 0;
}

/// Why a configuration cannot be used. Fix the file; the message names the setting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not TOML, an unknown key, or a value of the wrong type.
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },
    /// Well-formed but unusable.
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
}

/// Which provider answers completions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// The in-process engine (`[engine]`).
    #[default]
    Local,
    /// An OpenAI-compatible server (`[remote]`).
    Remote,
}

/// The whole configuration file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub provider: ProviderKind,
    pub engine: EngineConfig,
    /// Required when `provider = "remote"`.
    pub remote: Option<RemoteConfig>,
    /// The response cache (`[cache] enabled, path`).
    pub cache: crate::provider::response_cache::CacheConfig,
    /// More models for `serve` beside `[engine].model` (`[[models]]`), each loaded at start or on first use.
    pub models: Vec<ModelEntry>,
    /// How many models stay loaded, and for how long (`[router]`).
    pub router: RouterConfig,
}

/// One more model a server offers (`[[models]]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// A known model name or a GGUF file or model folder path.
    pub model: String,
    /// The name requests use instead of the model's own.
    #[serde(default)]
    pub name: Option<String>,
    /// Its window, at most its own (as `[engine].max_model_len` for the first model).
    #[serde(default)]
    pub max_model_len: Option<usize>,
    /// Load it when the server starts (else on first use).
    #[serde(default = "yes")]
    pub preload: bool,
}

fn yes() -> bool {
    true
}

/// How many models a server keeps loaded (`[router]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouterConfig {
    /// Models loaded at once; the least recently used idle one is unloaded for another (0: no limit).
    pub max_loaded: usize,
    /// Memory all loaded models may take (weights and KV caches): a size like `8GiB` (`None`: no budget).
    pub memory: Option<String>,
    /// Seconds an idle model stays loaded (`None`: until it is unloaded for another, or by hand).
    pub idle_unload_secs: Option<f64>,
    /// Offer every model in the cache too, loaded on first use.
    pub available: bool,
    /// Requests that may wait for one model to load; more get 503.
    pub max_waiting: usize,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            max_loaded: 3,
            memory: None,
            idle_unload_secs: None,
            available: false,
            max_waiting: 256,
        }
    }
}

impl RouterConfig {
    /// The router's options, checked.
    pub fn options(&self) -> Result<crate::provider::RouterOptions, String> {
        let memory_budget = self
            .memory
            .as_deref()
            .map(|m| parse_bytes(m).map(|b| b as u64))
            .transpose()
            .map_err(|e| format!("router.memory: {e}"))?;
        let idle_unload = match self.idle_unload_secs {
            None => None,
            Some(s) if s.is_finite() && s >= 0.0 => Some(std::time::Duration::from_secs_f64(s)),
            Some(s) => return Err(format!("router.idle_unload_secs must be >= 0, got {s}")),
        };
        Ok(crate::provider::RouterOptions {
            max_loaded: self.max_loaded,
            memory_budget,
            idle_unload,
            max_waiting: self.max_waiting.max(1),
        })
    }
}

/// The local engine's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// A known model name (`agentd model list`) or a path to a GGUF file.
    pub model: String,
    /// `auto` | `cpu` | `cuda` | `cuda:N` | `metal`.
    pub device: String,
    /// CPU threads; 0 = one per core.
    pub threads: usize,
    /// How quantized weights are kept: `auto` | `native` | `q8_0`.
    pub weights: String,
    /// Use only the model cache; fetch nothing.
    pub offline: bool,
    /// Sequences generating at once in the scheduler's batch.
    pub max_num_seqs: usize,
    /// Tokens fed per forward pass (decode tokens first, prompt chunks in the rest).
    pub max_num_batched_tokens: usize,
    /// Memory for the KV cache: bytes, or a size like `512MiB`, `2GiB`.
    pub kv_cache_memory: String,
    /// What the KV cache keeps keys and values as: `auto` (f16 on the CPU engine, f32 on candle's devices),
    /// `f16`, `f32` or `q8_0` (vLLM's `kv_cache_dtype`).
    pub kv_cache_dtype: KvDtype,
    /// Keep and share the KV blocks of prompts that start the same way.
    pub prefix_caching: bool,
    /// Speculative decoding (`[engine.speculative]`: `method` = `ngram` | `off`, `num_speculative_tokens`,
    /// `prompt_lookup_min`, `prompt_lookup_max`; vLLM's `speculative_config` names).
    pub speculative: SpeculativeConfig,
    /// A Jinja chat template file used instead of the model's own.
    pub chat_template: Option<String>,
    /// The window served, prompt and output together (vLLM's `max_model_len`); at most the model's own context
    /// length. In front of a remote server it caps the window the server reports.
    pub max_model_len: Option<usize>,
    /// Serve embeddings from the chat models too, their final hidden states pooled this way (`mean`, `last`,
    /// `cls`; llama.cpp's `--pooling`) and L2-normalised; unset, a chat model refuses embedding requests.
    pub pooling: Option<Pooling>,
    /// Show a progress bar while a model is fetched (set by the command line, not the file).
    #[serde(skip)]
    pub progress: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            model: crate::model_files::manifest::DEFAULT_MODEL.into(),
            device: "auto".into(),
            threads: 0,
            weights: "auto".into(),
            offline: false,
            max_num_seqs: DEFAULT_MAX_NUM_SEQS,
            max_num_batched_tokens: DEFAULT_MAX_NUM_BATCHED_TOKENS,
            kv_cache_memory: "1GiB".into(),
            kv_cache_dtype: Default::default(),
            prefix_caching: true,
            speculative: Default::default(),
            chat_template: None,
            max_model_len: None,
            pooling: None,
            progress: false,
        }
    }
}

/// Parses a memory size: a number of bytes, or a number with `K`/`M`/`G`/`T` and an optional `iB`/`B` (powers
/// of 1024: `512MiB`, `2G`, `1.5GiB`).
pub fn parse_bytes(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("`{text}` is not a size (say 536870912, 512MiB or 2GiB)"))?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "`{other}` in `{text}` is not a size unit (B, KiB, MiB, GiB, TiB)"
            ))
        }
    };
    let bytes = value * scale as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > usize::MAX as f64 {
        return Err(format!("`{text}` is not a usable size"));
    }
    Ok(bytes as usize)
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// Parses and validates TOML text; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        config.validate(origin)?;
        Ok(config)
    }

    /// Checks every setting the chosen provider uses.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            origin: origin.to_string(),
            message,
        };
        self.router.options().map_err(invalid)?;
        for (i, m) in self.models.iter().enumerate() {
            if m.model.trim().is_empty() {
                return Err(invalid(format!("models[{i}].model is empty")));
            }
            if m.max_model_len == Some(0) {
                return Err(invalid(format!(
                    "models[{i}].max_model_len must be at least 1"
                )));
            }
        }
        match self.provider {
            #[cfg(feature = "local")]
            ProviderKind::Local => {
                self.engine_options().map_err(invalid)?;
            }
            #[cfg(not(feature = "local"))]
            ProviderKind::Local => return Err(invalid(NO_LOCAL_ENGINE.into())),
            ProviderKind::Remote => {
                let Some(remote) = &self.remote else {
                    return Err(invalid(
                        "provider = \"remote\" needs a [remote] section (base_url, model, …)"
                            .into(),
                    ));
                };
                remote.validate().map_err(|e| invalid(e.to_string()))?;
            }
        }
        Ok(())
    }

    /// The engine options `[engine]` describes.
    #[cfg(feature = "local")]
    pub fn engine_options(&self) -> Result<EngineOptions, String> {
        let e = &self.engine;
        if e.model.trim().is_empty() {
            return Err("engine.model is empty: name a known model or a GGUF path".into());
        }
        let device: DeviceSpec = e
            .device
            .parse()
            .map_err(|err| format!("engine.device: {err}"))?;
        let weight_format: WeightFormat = e
            .weights
            .parse()
            .map_err(|err| format!("engine.weights: {err}"))?;
        if e.threads > 4096 {
            return Err(format!(
                "engine.threads = {} is not a thread count",
                e.threads
            ));
        }
        let scheduler = crate::engine::SchedulerConfig {
            max_num_seqs: e.max_num_seqs,
            max_num_batched_tokens: e.max_num_batched_tokens,
            kv_cache_bytes: parse_bytes(&e.kv_cache_memory)
                .map_err(|err| format!("engine.kv_cache_memory: {err}"))?,
            kv_cache_dtype: e.kv_cache_dtype,
            prefix_caching: e.prefix_caching,
            speculative: e.speculative.clone(),
            max_model_len: e.max_model_len,
        };
        scheduler
            .validate()
            .map_err(|err| format!("engine: {err}"))?;
        Ok(EngineOptions {
            model: ModelSelector::parse(&e.model),
            device,
            weight_format,
            fetch: FetchOptions {
                offline: e.offline,
                progress: e.progress,
                ..FetchOptions::default()
            },
            scheduler,
            chat_template: e
                .chat_template
                .as_ref()
                .map(|path| {
                    std::fs::read_to_string(path)
                        .map_err(|err| format!("engine.chat_template: cannot read {path}: {err}"))
                })
                .transpose()?,
            kernels: None,
            pooling: e.pooling,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configs_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs")
    }

    #[test]
    fn shipped_configs_parse() {
        #[cfg(feature = "local")]
        {
            let local = Config::load(&configs_dir().join("default.toml")).unwrap();
            assert_eq!(local.provider, ProviderKind::Local);
            assert_eq!(local.engine, EngineConfig::default());
        }
        // Without the engine the local configuration parses, then is refused by name.
        #[cfg(not(feature = "local"))]
        {
            let err = Config::load(&configs_dir().join("default.toml")).unwrap_err();
            assert!(err.to_string().contains(NO_LOCAL_ENGINE), "{err}");
        }
        let remote = Config::load(&configs_dir().join("remote-vllm.toml")).unwrap();
        assert_eq!(remote.provider, ProviderKind::Remote);
        let r = remote.remote.unwrap();
        assert_eq!(r.base_url, "http://127.0.0.1:8000/v1");
        assert_eq!(
            r.compat.max_tokens_field,
            crate::provider::remote::MaxTokensField::MaxTokens
        );
        assert_eq!(r.retry.max_retries, 3);
    }

    #[test]
    fn errors_name_the_setting() {
        let cases = [
            ("provider = \"cloud\"", "unknown variant `cloud`"),
            ("[engine]\nmodle = \"x\"", "unknown field `modle`"),
            #[cfg(feature = "local")]
            ("[engine]\ndevice = \"tpu\"", "engine.device"),
            #[cfg(feature = "local")]
            ("[engine]\nweights = \"q2\"", "engine.weights"),
            #[cfg(not(feature = "local"))]
            ("[engine]\ndevice = \"cpu\"", "built without the local engine"),
            ("provider = \"remote\"", "needs a [remote] section"),
            ("provider = \"remote\"\n[remote]\nbase_url = \"http://h/v1\"", "remote.model"),
            (
                "provider = \"remote\"\n[remote]\nmodel = \"m\"\n[remote.compat]\nmax_tokens_field = \"limit\"",
                "unknown variant `limit`",
            ),
            (
                "provider = \"remote\"\n[remote]\nmodel = \"m\"\n[remote.timeouts]\nrequest_secs = -1",
                "request_secs",
            ),
        ];
        for (text, needle) in cases {
            let err = Config::from_toml(text, "test.toml")
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("test.toml"), "{err}");
            assert!(err.contains(needle), "{needle}: {err}");
        }
        let err = Config::load(Path::new("/nonexistent/agentd.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/agentd.toml"), "{err}");
    }
}
