//! `agentd serve`: the OpenAI-compatible HTTP API (and agent sessions) on the local engine — the embedded
//! default model unless told otherwise, fetched on first use — or in front of a remote OpenAI-compatible server
//! (`--config configs/remote-vllm.toml`). Binds 127.0.0.1 unless `--host` says otherwise; stops on Ctrl-C or
//! SIGTERM, letting in-flight requests finish for `--shutdown-grace` seconds.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentd::config::{Config, ProviderKind};
use agentd::engine::fetch::ModelSelector;
use agentd::engine::model::WeightFormat;
use agentd::engine::Engine;
use agentd::provider::{Provider, RemoteProvider};
use agentd::server::sessions::SessionOptions;
use agentd::server::{self, AppState, ServerOptions};
use anyhow::Context;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A known model name (`agentd model list`) or a GGUF path (default: the config's, else the embedded
    /// default model).
    #[arg(long, env = "AGENTD_MODEL")]
    pub model: Option<String>,
    /// auto | cpu | cuda | cuda:N | metal (default: the config's, else auto).
    #[arg(long, env = "AGENTD_DEVICE")]
    pub device: Option<String>,
    /// How quantized weights are kept: auto | native | q8_0.
    #[arg(long)]
    pub weights: Option<WeightFormat>,
    /// Use only the model cache; fetch nothing.
    #[arg(long)]
    pub offline: bool,
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
    /// Requests that may wait for the model beyond the running ones; more get 503 with Retry-After.
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// Requests generating at once (default: 1 on the local engine, 64 in front of a remote server).
    #[arg(long)]
    pub max_running: Option<usize>,
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
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(m) = &args.model {
        config.provider = ProviderKind::Local;
        config.engine.model = m.clone();
    }
    if let Some(d) = &args.device {
        config.engine.device = d.clone();
    }
    if args.offline {
        config.engine.offline = true;
    }
    if !(args.shutdown_grace.is_finite() && args.shutdown_grace >= 0.0) {
        anyhow::bail!("--shutdown-grace must be a number of seconds >= 0");
    }
    let options = ServerOptions {
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        max_body_bytes: args.max_body_bytes,
        max_running: args.max_running,
        max_queue: args.max_queue,
        retry_after_secs: 1,
        shutdown_grace: Duration::from_secs_f64(args.shutdown_grace),
        sessions: SessionOptions {
            dir: args.sessions_dir.clone(),
            default_workspace: args.workspace.clone(),
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let state = match config.provider {
        ProviderKind::Local => {
            let mut opts = config
                .engine_options()
                .map_err(|e| anyhow::anyhow!("configuration: {e}"))?;
            opts.fetch.progress = true;
            if let Some(w) = args.weights {
                opts.weight_format = w;
            }
            if let ModelSelector::Name(n) = &opts.model {
                eprintln!("loading model {n} (fetched and cached on first use)…");
            }
            let engine = Engine::load(opts).context("loading the model")?;
            if let Some(note) = &engine.info().device_note {
                eprintln!("note: {note}");
            }
            let info = engine.info();
            eprintln!(
                "model {} ({}, {} context) on {} in {:.1}s",
                info.name, info.architecture, info.context_length, info.device, info.load_secs
            );
            AppState::local(engine, options)
        }
        ProviderKind::Remote => {
            let remote = config
                .remote
                .clone()
                .context("provider = \"remote\" needs a [remote] section")?;
            let provider = RemoteProvider::new(remote)?;
            if let Err(e) = runtime.block_on(provider.discover()) {
                eprintln!("warning: the remote server did not answer /models: {e}");
            }
            AppState::new(Arc::new(provider) as Arc<dyn Provider>, None, options)
        }
    };
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .with_context(|| format!("cannot bind {}:{}", args.host, args.port))?;
        let addr = listener.local_addr()?;
        // Scripts (and the Python tests) read this line to find the port.
        println!("agentd serving on http://{addr} (OpenAI API at http://{addr}/v1)");
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
