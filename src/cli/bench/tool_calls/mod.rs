//! `agentd bench tool-calls`: tool-call latency of any OpenAI-compatible endpoint (agentd in-process with
//! `--local` or over HTTP, vLLM, the llama.cpp Python server, …): time to first token, to the tool call's name,
//! to the complete call; inter-token latency, output tok/s, and the share of calls whose arguments validate, as
//! p50/p90/p99 over repetitions after a warm-up. `--compare URL2` runs the two endpoints alternately (A B A B …)
//! and reports pair-by-pair ratios, so a noisy machine does not decide the comparison.
//!
//! Files here: this one (flags, the run), `client` (the endpoints, `--local`), `report` (table, JSON, plot). The
//! workloads, the measuring client and the arithmetic are the library's `agentd::bench` (`tool_calls`).

mod client;
mod report;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentd::bench::tool_calls::{self, EndpointInfo, RequestSettings, RunPlan, Scenario, Target};
use agentd::bench::{ChatClient, Side};
use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::engine_args::EngineArgs;

pub(super) use client::resolve_model;

/// `--scenario` (the library's [`Scenario`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ScenarioArg {
    /// One named tool call on a short prompt (the llama.cpp anchor's request).
    Forced,
    /// tool_choice auto over the coding tools.
    Auto,
    /// A scripted 10-turn coding session whose transcript grows with real tool results.
    Agent,
    /// An edit as one SEARCH/REPLACE block quoting 16 lines of the file in the prompt (copy-heavy: speculative
    /// decoding).
    Edit,
    /// The whole file in the prompt rewritten in one fenced block (copy-heavy).
    Rewrite,
    /// Open-ended text without tools (the control for speculative decoding).
    Chat,
}

impl From<ScenarioArg> for Scenario {
    fn from(s: ScenarioArg) -> Self {
        match s {
            ScenarioArg::Forced => Scenario::Forced,
            ScenarioArg::Auto => Scenario::Auto,
            ScenarioArg::Agent => Scenario::Agent,
            ScenarioArg::Edit => Scenario::Edit,
            ScenarioArg::Rewrite => Scenario::Rewrite,
            ScenarioArg::Chat => Scenario::Chat,
        }
    }
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["endpoint", "local"])))]
pub struct ToolCallsBenchArgs {
    /// The API root of an OpenAI-compatible server (usually ending in /v1), e.g. http://127.0.0.1:8093/v1.
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// Start agentd's own server in this process on a loopback port and bench it over HTTP.
    #[arg(long)]
    local: bool,
    /// The model to ask for (default: the first one the server lists). With --local: the model to load (a known
    /// name or a GGUF file; default: agentd's default model).
    #[arg(long)]
    model: Option<String>,
    /// --local: a GGUF file or a Hugging Face model folder to load.
    #[arg(
        long,
        value_name = "FILE.gguf|DIR",
        conflicts_with = "model",
        requires = "local"
    )]
    model_path: Option<PathBuf>,
    /// --local: the device (auto | cpu | cuda | cuda:N | metal).
    #[arg(long, default_value = "auto")]
    device: String,
    /// --local: how quantized weights are kept (auto | native | q8_0).
    #[cfg(feature = "local")]
    #[arg(long, default_value = "auto")]
    weights: agentd::engine::WeightFormat,
    /// --local: use only the model cache; fetch nothing.
    #[arg(long)]
    offline: bool,
    /// --local: a Jinja chat template file used instead of the model's own.
    #[arg(long, value_name = "FILE.jinja")]
    chat_template: Option<PathBuf>,
    /// forced: one named tool call on a short prompt; auto: tool_choice auto over the coding tools; agent: a
    /// scripted 10-turn session whose transcript grows with real tool results.
    #[arg(long, value_enum, default_value = "forced")]
    scenario: ScenarioArg,
    /// Measured repetitions: requests, or sessions for `agent` [default: 20; 3 for agent].
    #[arg(long)]
    reps: Option<usize>,
    /// Repetitions run first and left out of the figures.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Repetitions in flight at once (on each endpoint in turn).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Print the report (every request included) as JSON instead of the table; `--json=FILE` writes it to FILE
    /// and still prints the table.
    #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
    json: Option<PathBuf>,
    /// Write an SVG plot of per-turn latency against transcript length (agent scenario).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// A second endpoint, run alternately with the first (A B A B …); ratios are A/B.
    #[arg(long, value_name = "URL2")]
    compare: Option<String>,
    /// The model to ask the --compare endpoint for (default: the first one it lists).
    #[arg(long)]
    compare_model: Option<String>,
    /// Sent to both endpoints as `Authorization: Bearer KEY`.
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// --local: the scheduler's flags (batching, KV memory, speculative decoding).
    #[command(flatten)]
    batch: crate::cli::engine_args::BatchArgs,
    /// Most tokens per reply (default 128; 1024 for edit and rewrite, 320 for chat).
    #[arg(long)]
    max_tokens: Option<u32>,
    /// Send identical prompts (no random nonce at the start of the system message): shows what a server's
    /// prompt-prefix cache gives. Without it every prompt is cold.
    #[arg(long)]
    warm: bool,
    /// Seconds before one request counts as failed.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

/// The flags, checked.
struct Config {
    args: ToolCallsBenchArgs,
    scenario: Scenario,
    reps: usize,
    max_tokens: u32,
}

impl Config {
    fn from_args(args: ToolCallsBenchArgs) -> anyhow::Result<Self> {
        let scenario = Scenario::from(args.scenario);
        let reps = args.reps.unwrap_or(match scenario {
            Scenario::Agent => 3,
            Scenario::Forced | Scenario::Auto => 20,
            Scenario::Edit | Scenario::Rewrite | Scenario::Chat => 5,
        });
        let max_tokens = args.max_tokens.unwrap_or(scenario.default_max_tokens());
        anyhow::ensure!(reps >= 1, "--reps must be at least 1");
        anyhow::ensure!(args.concurrency >= 1, "--concurrency must be at least 1");
        anyhow::ensure!(max_tokens >= 1, "--max-tokens must be at least 1");
        anyhow::ensure!(args.timeout >= 1, "--timeout must be at least 1 second");
        anyhow::ensure!(
            args.plot.is_none() || scenario == Scenario::Agent,
            "--plot draws latency per turn: it needs --scenario agent"
        );
        Ok(Self {
            args,
            scenario,
            reps,
            max_tokens,
        })
    }

    fn engine_args(&self) -> EngineArgs {
        let (model, model_path) = match (&self.args.model_path, &self.args.model) {
            (Some(p), _) => (String::new(), Some(p.clone())),
            (None, Some(m)) if Path::new(m).is_file() => (String::new(), Some(PathBuf::from(m))),
            (None, Some(m)) => (m.clone(), None),
            (None, None) => (
                agentd::model_files::manifest::DEFAULT_MODEL.to_string(),
                None,
            ),
        };
        EngineArgs {
            model,
            model_path,
            device: self.args.device.clone(),
            #[cfg(feature = "local")]
            weights: self.args.weights,
            offline: self.args.offline,
            chat_template: self.args.chat_template.clone(),
            batch: self.args.batch.clone(),
        }
    }
}

pub fn run(args: ToolCallsBenchArgs) -> anyhow::Result<()> {
    let config = Config::from_args(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_config(config))
}

fn progress(len: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{spinner} [{bar:40}] {pos}/{len} requests · {elapsed}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

async fn run_config(config: Config) -> anyhow::Result<()> {
    let args = &config.args;
    let timeout = Duration::from_secs(args.timeout);
    let local = if args.local {
        Some(client::start_local(config.engine_args()).await?)
    } else {
        None
    };
    let url_a = match (&local, &args.endpoint) {
        (Some(server), _) => server.base_url.clone(),
        (None, Some(url)) => url.clone(),
        (None, None) => anyhow::bail!("give --endpoint URL or --local"),
    };
    let client_a = ChatClient::new(&url_a, args.api_key.clone())?.with_timeout(timeout);
    let requested_a = if args.local {
        None
    } else {
        args.model.as_deref()
    };
    let model_a = client::resolve_model(&client_a, requested_a).await?;
    let mut endpoints = vec![EndpointInfo {
        side: Side::A,
        url: url_a,
        model: model_a.clone(),
        local: args.local,
    }];
    let b = match &args.compare {
        Some(url) => {
            let c = ChatClient::new(url, args.api_key.clone())?.with_timeout(timeout);
            let m = client::resolve_model(&c, args.compare_model.as_deref()).await?;
            endpoints.push(EndpointInfo {
                side: Side::B,
                url: url.clone(),
                model: m.clone(),
                local: false,
            });
            Some((c, m))
        }
        None => None,
    };

    let plan = RunPlan {
        scenario: config.scenario,
        reps: config.reps,
        warmup: args.warmup,
        concurrency: args.concurrency,
        settings: RequestSettings {
            max_tokens: config.max_tokens,
            nonce: !args.warm,
        },
    };
    let bar = progress(plan.total_requests(endpoints.len()) as u64);
    let tick = || bar.inc(1);
    let a = Target {
        client: &client_a,
        model: &model_a,
    };
    let b = b.as_ref().map(|(client, model)| Target { client, model });
    let report = tool_calls::run(&plan, endpoints, a, b, &tick).await?;
    bar.finish_and_clear();
    if let Some(path) = &args.plot {
        report::plot(&report, path)?;
        eprintln!("plot written to {}", path.display());
    }
    let json = serde_json::to_string_pretty(&report)?;
    match args.json.as_deref() {
        Some(path) if path == Path::new("-") => println!("{json}"),
        Some(path) => {
            std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
            print!("{}", report::table(&report));
        }
        None => print!("{}", report::table(&report)),
    }
    drop(local);
    Ok(())
}
