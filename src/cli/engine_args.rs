//! Flags shared by every subcommand that loads a model: which model, which device, how weights are kept, how the
//! scheduler batches. A build without the engine (no `local` feature) keeps the flags that also mean something in
//! front of a remote server (the model's name, `--max-model-len`) and refuses to load a model.

use std::path::PathBuf;
use std::sync::Arc;

#[cfg(feature = "local")]
use agentd::engine::{
    DeviceSpec, Engine, EngineOptions, KvDtype, SchedulerConfig, SpecMethod, WeightFormat,
};
#[cfg(feature = "local")]
use agentd::model_files::fetch::FetchOptions;
use agentd::model_files::fetch::ModelSelector;
use agentd::provider::Provider;
#[cfg(feature = "local")]
use anyhow::Context;

#[derive(Debug, Clone, clap::Args)]
pub struct EngineArgs {
    /// A known model name (see `agentd model list`).
    #[arg(long, default_value = agentd::model_files::manifest::DEFAULT_MODEL, env = "AGENTD_MODEL")]
    pub model: String,
    /// A GGUF file, or a Hugging Face model folder (config.json, *.safetensors, tokenizer.json; converted once
    /// into the cache), to load instead of a named model. `--model org/name` also finds a folder in the local
    /// hf-hub cache.
    #[arg(long, value_name = "FILE.gguf|DIR", conflicts_with = "model")]
    pub model_path: Option<PathBuf>,
    /// auto | cpu | cuda | cuda:N | metal
    #[arg(long, default_value = "auto", env = "AGENTD_DEVICE")]
    pub device: String,
    /// How quantized weights are kept: auto (as stored; on the CPU our own engine and kernels), native (as
    /// stored, on candle's forward pass and kernels: the reference path), q8_0 (requantise everything to Q8_0).
    #[cfg(feature = "local")]
    #[arg(long, default_value = "auto")]
    pub weights: WeightFormat,
    /// Use only the model cache; fetch nothing.
    #[arg(long)]
    pub offline: bool,
    /// A Jinja chat template file used instead of the model's own (vLLM's `--chat-template`).
    #[arg(long, value_name = "FILE.jinja")]
    pub chat_template: Option<PathBuf>,
    #[command(flatten)]
    pub batch: BatchArgs,
}

/// The scheduler's flags (vLLM's names): how many sequences batch together, how many tokens a step feeds, how
/// much memory the KV cache has, and whether prompt prefixes are shared.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BatchArgs {
    /// Sequences generating at once (default 64).
    #[cfg(feature = "local")]
    #[arg(long)]
    pub max_num_seqs: Option<usize>,
    /// Tokens fed per forward pass: decode tokens first, prompt chunks in the rest (default 256).
    #[cfg(feature = "local")]
    #[arg(long)]
    pub max_num_batched_tokens: Option<usize>,
    /// Memory for the KV cache: bytes or a size like 512MiB, 2GiB (default 1GiB). Requests beyond it wait or
    /// are preempted and recomputed; a request that fits alone always completes.
    #[cfg(feature = "local")]
    #[arg(long, value_name = "SIZE")]
    pub kv_cache_memory: Option<String>,
    /// What the KV cache keeps keys and values as: auto (f16 on the CPU engine, f32 on CUDA/Metal), f16, f32, or
    /// q8_0 (34 bytes per 32 values). f16 holds twice the positions of f32 in the same memory.
    #[cfg(feature = "local")]
    #[arg(long, value_name = "auto|f16|f32|q8_0")]
    pub kv_cache_dtype: Option<KvDtype>,
    /// Do not keep or share the KV blocks of prompt prefixes.
    #[cfg(feature = "local")]
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Speculative decoding: ngram (drafts looked up in the sequence's own prompt and output, verified in the
    /// batch; the output is unchanged) or off (default ngram on the CPU engine and CUDA).
    #[cfg(feature = "local")]
    #[arg(long, value_name = "ngram|off")]
    pub speculative: Option<SpecMethod>,
    /// The most draft tokens verified per step (default 8).
    #[cfg(feature = "local")]
    #[arg(long)]
    pub num_speculative_tokens: Option<usize>,
    /// The shortest n-gram a draft lookup matches (default 2).
    #[cfg(feature = "local")]
    #[arg(long)]
    pub prompt_lookup_min: Option<usize>,
    /// The longest n-gram a draft lookup tries first (default 5).
    #[cfg(feature = "local")]
    #[arg(long)]
    pub prompt_lookup_max: Option<usize>,
    /// The window served, prompt and output together (vLLM's flag): at most the model's own context length
    /// (default: the model's). Requests that do not fit are refused or their max_tokens cut, as for the
    /// model's own window, and clients are told this window (`/v1/models`, `agentd clients`).
    #[arg(long, value_name = "TOKENS")]
    pub max_model_len: Option<usize>,
    /// vLLM's form of the settings above, as JSON: {"method": "ngram", "num_speculative_tokens": 8,
    /// "prompt_lookup_min": 2, "prompt_lookup_max": 5}; the single flags win over it.
    #[cfg(feature = "local")]
    #[arg(long, value_name = "JSON")]
    pub speculative_config: Option<String>,
}

impl BatchArgs {
    /// Writes the single flags given into an `[engine]` config section.
    fn apply_flags(&self, engine: &mut agentd::config::EngineConfig) {
        if let Some(n) = self.max_model_len {
            engine.max_model_len = Some(n);
        }
        #[cfg(feature = "local")]
        self.apply_engine_flags(engine);
    }

    /// The flags only the engine reads.
    #[cfg(feature = "local")]
    fn apply_engine_flags(&self, engine: &mut agentd::config::EngineConfig) {
        if let Some(n) = self.max_num_seqs {
            engine.max_num_seqs = n;
        }
        if let Some(n) = self.max_num_batched_tokens {
            engine.max_num_batched_tokens = n;
        }
        if let Some(m) = &self.kv_cache_memory {
            engine.kv_cache_memory = m.clone();
        }
        if let Some(d) = self.kv_cache_dtype {
            engine.kv_cache_dtype = d;
        }
        if self.no_prefix_caching {
            engine.prefix_caching = false;
        }
        let spec = &mut engine.speculative;
        if let Some(m) = self.speculative {
            spec.method = m;
        }
        if let Some(n) = self.num_speculative_tokens {
            spec.num_speculative_tokens = n;
        }
        if let Some(n) = self.prompt_lookup_min {
            spec.prompt_lookup_min = n;
        }
        if let Some(n) = self.prompt_lookup_max {
            spec.prompt_lookup_max = n;
        }
    }

    /// Writes the flags given into an `[engine]` config section; a malformed `--speculative-config` is an error.
    pub fn apply(&self, engine: &mut agentd::config::EngineConfig) -> anyhow::Result<()> {
        #[cfg(feature = "local")]
        if let Some(json) = &self.speculative_config {
            engine.speculative = serde_json::from_str(json)
                .map_err(|e| anyhow::anyhow!("--speculative-config: {e}"))?;
        }
        self.apply_flags(engine);
        Ok(())
    }

    /// The scheduler settings these flags give over the defaults.
    #[cfg(feature = "local")]
    pub fn scheduler(&self) -> anyhow::Result<SchedulerConfig> {
        let mut engine = agentd::config::EngineConfig::default();
        self.apply(&mut engine)?;
        let config = SchedulerConfig {
            max_num_seqs: engine.max_num_seqs,
            max_num_batched_tokens: engine.max_num_batched_tokens,
            kv_cache_bytes: agentd::config::parse_bytes(&engine.kv_cache_memory)
                .map_err(|e| anyhow::anyhow!("--kv-cache-memory: {e}"))?,
            kv_cache_dtype: engine.kv_cache_dtype,
            prefix_caching: engine.prefix_caching,
            speculative: engine.speculative,
            max_model_len: engine.max_model_len,
        };
        config.validate().map_err(anyhow::Error::msg)?;
        Ok(config)
    }
}

/// `--model-path P` as the text a config's `engine.model` holds: a path stays a path when parsed back
/// (`./name`, never the known model `name`).
pub fn path_as_model(p: &std::path::Path) -> String {
    let text = p.display().to_string();
    match ModelSelector::parse(&text) {
        ModelSelector::Path(_) => text,
        ModelSelector::Name(_) => std::path::Path::new(".").join(p).display().to_string(),
    }
}

impl EngineArgs {
    #[cfg(feature = "local")]
    pub fn selector(&self) -> ModelSelector {
        match &self.model_path {
            Some(p) => ModelSelector::Path(p.clone()),
            None => ModelSelector::parse(&self.model),
        }
    }

    #[cfg(feature = "local")]
    pub fn options(&self) -> anyhow::Result<EngineOptions> {
        let device: DeviceSpec = self.device.parse()?;
        Ok(EngineOptions {
            model: self.selector(),
            device,
            weight_format: self.weights,
            fetch: FetchOptions {
                progress: true,
                offline: self.offline,
                ..FetchOptions::default()
            },
            scheduler: self.batch.scheduler()?,
            chat_template: self
                .chat_template
                .as_ref()
                .map(|p| {
                    std::fs::read_to_string(p)
                        .with_context(|| format!("reading the chat template {}", p.display()))
                })
                .transpose()?,
            kernels: None,
            pooling: None,
        })
    }

    /// Loads the engine, printing a device fallback note to stderr if there is one.
    #[cfg(feature = "local")]
    pub fn load(&self) -> anyhow::Result<Engine> {
        let engine = Engine::load(self.options()?).context("loading the model")?;
        if let Some(note) = &engine.info().device_note {
            eprintln!("note: {note}");
        }
        Ok(engine)
    }

    /// The loaded model behind the provider boundary, and its name: what the benches that serve it in-process
    /// ask. A build without the engine refuses (give those benches a server's URL).
    pub fn provider(&self) -> anyhow::Result<(Arc<dyn Provider>, String)> {
        #[cfg(feature = "local")]
        {
            let engine = self.load()?;
            let name = engine.info().name.clone();
            Ok((Arc::new(agentd::provider::LocalProvider::new(engine)), name))
        }
        #[cfg(not(feature = "local"))]
        anyhow::bail!("{}", agentd::config::NO_LOCAL_ENGINE)
    }
}
