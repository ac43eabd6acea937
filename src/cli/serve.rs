//! `agentd serve`: the OpenAI-compatible HTTP API (and agent sessions) on the local engine — the embedded
//! default model unless told otherwise, fetched on first use — or in front of a remote OpenAI-compatible server
//! (`--config configs/remote-vllm.toml`). Binds 127.0.0.1 unless `--host` says otherwise; stops on Ctrl-C or
//! SIGTERM, letting in-flight requests finish for `--shutdown-grace` seconds.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentd::config::{Config, ProviderKind};
#[cfg(feature = "local")]
use agentd::engine::WeightFormat;
use agentd::provider::response_cache::CacheStats;
use agentd::provider::{Provider, RemoteProvider};
use agentd::server::browser_safety::BrowserPolicy;
use agentd::server::limits::RequestLimits;
use agentd::server::sessions::SessionOptions;
use agentd::server::{self, AppState, ServerOptions};
use anyhow::Context;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A known model name (`agentd model list`), a GGUF path, a Hugging Face model folder, or `org/name` in the
    /// local hf-hub cache (default: the config's, else the embedded default model). Repeat it to serve several
    /// models, each loaded at start in its own engine; the first is the default.
    #[arg(long, env = "AGENTD_MODEL", action = clap::ArgAction::Append)]
    pub model: Vec<String>,
    /// Offer every model in the cache too (`agentd model list`), loaded on first use.
    #[arg(long)]
    pub models_available: bool,
    /// Models loaded at once; the least recently used idle one is unloaded for another (default 3; 0: no
    /// limit).
    #[arg(long, value_name = "N")]
    pub max_loaded_models: Option<usize>,
    /// Memory all loaded models may take (weights and KV caches), like 8GiB; idle models are unloaded for room.
    #[arg(long, value_name = "SIZE")]
    pub models_memory: Option<String>,
    /// Seconds an idle model stays loaded (default: until it is unloaded for another or by hand; Ollama's
    /// `keep_alive` overrides it per request).
    #[arg(long, value_name = "SECS")]
    pub idle_unload_secs: Option<f64>,
    /// A GGUF file or a Hugging Face model folder to load (the same as `--model PATH`; every model-loading
    /// command takes it).
    #[arg(long, value_name = "FILE.gguf|DIR", conflicts_with = "model")]
    pub model_path: Option<PathBuf>,
    /// auto | cpu | cuda | cuda:N | metal (default: the config's, else auto).
    #[arg(long, env = "AGENTD_DEVICE")]
    pub device: Option<String>,
    /// How quantized weights are kept: auto | native | q8_0.
    #[cfg(feature = "local")]
    #[arg(long)]
    pub weights: Option<WeightFormat>,
    /// A Jinja chat template file used instead of the model's own (vLLM's `--chat-template`).
    #[arg(long, value_name = "FILE.jinja")]
    pub chat_template: Option<PathBuf>,
    /// Use only the model cache; fetch nothing.
    #[arg(long)]
    pub offline: bool,
    /// Serve embeddings (/v1/embeddings, /api/embed, /embedding) from the chat models too: their final hidden
    /// states pooled by mean (every token), last (the last token) or cls (the first token), then L2-normalised
    /// (llama.cpp's `--pooling`). Without it a chat model refuses embedding requests.
    #[cfg(feature = "local")]
    #[arg(long, value_name = "mean|last|cls")]
    pub pooling: Option<agentd::engine::Pooling>,
    /// The address to bind. 127.0.0.1 keeps the server private to this machine.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port (0: any free port; the chosen one is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on every route except /health, /version and /metrics.
    #[arg(long, env = "AGENTD_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// A configuration file (`configs/default.toml`, `configs/remote-vllm.toml`): the provider and its settings.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Answer repeated temperature-0 requests from the response cache (`[cache]` in the config file); hits show
    /// on /metrics.
    #[arg(long)]
    pub cache: bool,
    /// Requests that may wait for the model beyond the running ones; more get 503 with Retry-After.
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// Requests admitted to generate at once (default: the local engine's --max-num-seqs, 64 in front of a
    /// remote server).
    #[arg(long)]
    pub max_running: Option<usize>,
    #[command(flatten)]
    pub batch: crate::cli::engine_args::BatchArgs,
    /// Largest accepted request body, in bytes (larger: 413).
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Seconds in-flight requests may run after Ctrl-C / SIGTERM before they are cancelled.
    #[arg(long, default_value_t = 10.0)]
    pub shutdown_grace: f64,
    /// Where agent sessions' JSONL files go (default: $AGENTD_HOME/sessions/<workspace>/).
    #[arg(long, value_name = "DIR")]
    pub sessions_dir: Option<PathBuf>,
    /// The workspace of agent sessions that name none (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Agent sessions kept live at once; beyond it the least recently used idle one is closed (its file stays).
    #[arg(long, default_value_t = 64)]
    pub max_sessions: usize,
    /// Seconds an idle agent session stays live before it is closed (it can be resumed from its file).
    #[arg(long, default_value_t = 1800)]
    pub session_idle_secs: u64,
    /// Seconds a `bash` call of an agent session may run when it names no timeout (default 120).
    #[arg(long, value_name = "SECS")]
    pub bash_timeout: Option<f64>,
    /// Another name this server answers to in `Host` (loopback names and the bound address always work).
    /// Repeatable.
    #[arg(long, value_name = "NAME")]
    pub allowed_host: Vec<String>,
    /// A web origin allowed to call the API from a browser (`http://localhost:3000`; `*` for any). Repeatable.
    #[arg(long, value_name = "ORIGIN")]
    pub cors_origin: Vec<String>,
    /// Allow agent sessions with tools that write files or run commands although no --api-key is set. Without
    /// a key anyone who can reach the port could run commands as you.
    #[arg(long)]
    pub allow_exec_without_key: bool,
    /// Sampling for requests that leave it out, as JSON (vLLM's flag): `{"temperature": 0}`; keys temperature,
    /// top_p, top_k, min_p, presence_penalty, frequency_penalty, repetition_penalty, seed. Repeatable (merged).
    #[arg(long, value_name = "JSON")]
    pub override_generation_config: Vec<String>,
    /// Another model name to answer to: `NAME=MODEL` (`claude-sonnet-4-5=qwen2.5-coder-0.5b-instruct`).
    /// Repeatable. A name nobody mapped still reaches the model when the server serves only one.
    #[arg(long, value_name = "NAME=MODEL")]
    pub model_alias: Vec<String>,
}

/// `--model-alias NAME=MODEL` values as pairs.
pub fn model_aliases(values: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    values
        .iter()
        .map(|v| match v.split_once('=') {
            Some((name, model)) if !name.trim().is_empty() && !model.trim().is_empty() => {
                Ok((name.trim().to_string(), model.trim().to_string()))
            }
            _ => anyhow::bail!("--model-alias {v}: expected NAME=MODEL"),
        })
        .collect()
}

/// `--override-generation-config` values merged into one set of sampling defaults (checked like a request's).
pub fn generation_defaults(values: &[String]) -> anyhow::Result<agentd::provider::Sampling> {
    let mut merged = serde_json::Map::new();
    for v in values {
        let obj: serde_json::Map<String, serde_json::Value> = serde_json::from_str(v)
            .with_context(|| format!("--override-generation-config {v:?} is not a JSON object"))?;
        merged.extend(obj);
    }
    const KEYS: [&str; 8] = [
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "seed",
    ];
    if let Some(k) = merged.keys().find(|k| !KEYS.contains(&k.as_str())) {
        anyhow::bail!(
            "--override-generation-config: unknown key `{k}` (known: {})",
            KEYS.join(", ")
        );
    }
    let sampling: agentd::provider::Sampling =
        serde_json::from_value(serde_json::Value::Object(merged))
            .context("--override-generation-config")?;
    sampling
        .validate()
        .map_err(|e| anyhow::anyhow!("--override-generation-config: {e}"))?;
    Ok(sampling)
}

/// `--bash-timeout` as a duration (a positive number of seconds).
pub fn bash_timeout(secs: Option<f64>) -> anyhow::Result<Option<Duration>> {
    match secs {
        None => Ok(None),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Some(Duration::from_secs_f64(s))),
        Some(s) => anyhow::bail!("--bash-timeout must be a positive number of seconds, got {s}"),
    }
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    let mut models: Vec<String> = args.model.clone();
    if let Some(p) = &args.model_path {
        models.insert(0, crate::cli::engine_args::path_as_model(p));
    }
    if let Some((first, more)) = models.split_first() {
        config.provider = ProviderKind::Local;
        config.engine.model = first.clone();
        let entries = more.iter().map(|m| agentd::config::ModelEntry {
            model: m.clone(),
            name: None,
            max_model_len: None,
            preload: true,
        });
        config.models.splice(0..0, entries);
    }
    if args.models_available {
        config.router.available = true;
    }
    if let Some(n) = args.max_loaded_models {
        config.router.max_loaded = n;
    }
    if let Some(m) = &args.models_memory {
        config.router.memory = Some(m.clone());
    }
    if let Some(s) = args.idle_unload_secs {
        config.router.idle_unload_secs = Some(s);
    }
    if let Some(d) = &args.device {
        config.engine.device = d.clone();
    }
    if args.offline {
        config.engine.offline = true;
    }
    #[cfg(feature = "local")]
    if let Some(w) = args.weights {
        config.engine.weights = w.to_string();
    }
    #[cfg(feature = "local")]
    if let Some(p) = args.pooling {
        config.engine.pooling = Some(p);
    }
    if let Some(t) = &args.chat_template {
        config.engine.chat_template = Some(t.display().to_string());
    }
    if args.cache {
        config.cache.enabled = true;
    }
    args.batch.apply(&mut config.engine)?;
    config.engine.progress = true;
    if !(args.shutdown_grace.is_finite() && args.shutdown_grace >= 0.0) {
        anyhow::bail!("--shutdown-grace must be a number of seconds >= 0");
    }
    let options = ServerOptions {
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        max_body_bytes: args.max_body_bytes,
        max_running: args.max_running,
        max_queue: args.max_queue,
        generation_defaults: generation_defaults(&args.override_generation_config)?,
        model_aliases: model_aliases(&args.model_alias)?,
        retry_after_secs: 1,
        shutdown_grace: Duration::from_secs_f64(args.shutdown_grace),
        sessions: SessionOptions {
            dir: args.sessions_dir.clone(),
            default_workspace: args.workspace.clone(),
            max_live: args.max_sessions.max(1),
            idle_timeout: Duration::from_secs(args.session_idle_secs.max(1)),
            bash_timeout: bash_timeout(args.bash_timeout)?,
        },
        browser: BrowserPolicy {
            allowed_hosts: args
                .allowed_host
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
            cors_origins: args.cors_origin.clone(),
            bound: None,
        },
        allow_exec_without_key: args.allow_exec_without_key,
        limits: RequestLimits::default(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (provider, cache) = served_provider(&mut config, &runtime)?;
    let state = AppState::new(provider, options).with_cache_stats(cache);
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .with_context(|| format!("cannot bind {}:{}", args.host, args.port))?;
        let addr = listener.local_addr()?;
        // Scripts (and the Python tests) read this line to find the port.
        println!("agentd serving on http://{addr} (OpenAI API at http://{addr}/v1, Ollama API at http://{addr}/api)");
        eprintln!(
            "coding clients: `agentd clients --port {}{}` prints settings for Claude Code, Codex, Pi, aider, \
             Continue, OpenCode and Ollama's clients with this model's window",
            addr.port(),
            if args.api_key.is_some() { " --api-key KEY" } else { "" }
        );
        if args.api_key.is_none() && !addr.ip().is_loopback() {
            eprintln!("warning: listening on {addr} without --api-key: anyone who can reach it can use the model and its agent tools");
        }
        server::serve(listener, state, server::os_signal())
            .await
            .context("serving")?;
        eprintln!("agentd stopped");
        anyhow::Ok(())
    })
}

/// The provider served, and its response cache's counters.
type Served = (Arc<dyn Provider>, Option<Arc<CacheStats>>);

/// The provider `serve` serves and its response cache's counters: the model loaded (or the remote server asked
/// for its models) now. TEST-ONLY: the scripted provider stands in when its variable is set, as for `run`.
fn served_provider(
    config: &mut Config,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<Served> {
    if let Some(path) = crate::cli::agent_setup::scripted::script_path() {
        return Ok((crate::cli::agent_setup::scripted::load(&path)?, None));
    }
    if config.provider == ProviderKind::Remote {
        if let Some(remote) = config.remote.as_mut() {
            // The served provider is built after this, with the window the server reports.
            let probe = RemoteProvider::new(remote.clone())?;
            match runtime.block_on(probe.discover()) {
                Ok(models) => remote.learn(&models),
                Err(e) => eprintln!("warning: the remote server did not answer /models: {e}"),
            }
        }
    }
    let built = {
        // The router unloads idle models from a task on this runtime.
        let _entered = runtime.enter();
        agentd::app::backend::build_served(config).context("building the provider")?
    };
    if let Some(router) = &built.router {
        for status in router.model_states() {
            if !router.preloads(&status.model.id) {
                eprintln!("model {} is served, loaded on first use", status.model.id);
                continue;
            }
            eprintln!(
                "loading model {} (fetched and cached on first use)…",
                status.model.id
            );
            let started = std::time::Instant::now();
            runtime
                .block_on(router.load_model(&status.model.id))
                .with_context(|| format!("loading the model {}", status.model.id))?;
            let loaded = router
                .models()
                .into_iter()
                .find(|m| m.id == status.model.id);
            if let Some(m) = loaded {
                eprintln!(
                    "model {} ({} context) on {} in {:.1}s",
                    m.id,
                    m.context_window,
                    m.device.as_deref().unwrap_or("?"),
                    started.elapsed().as_secs_f64()
                );
            }
        }
    }
    #[cfg(feature = "local")]
    if let Some(local) = &built.local {
        let info = local.engine().info();
        if let Some(note) = &info.device_note {
            eprintln!("note: {note}");
        }
        eprintln!(
            "model {} ({}, {} context) on {} in {:.1}s",
            info.name, info.architecture, info.context_length, info.device, info.load_secs
        );
    }
    if let Some(cache) = &config.cache.enabled.then(|| config.cache.resolved_path()) {
        eprintln!("response cache: {}", cache.display());
    }
    Ok((built.provider, built.cache))
}
