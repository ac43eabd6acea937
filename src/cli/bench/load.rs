//! `agentd bench load`: many concurrent streaming chat clients against `agentd serve` over loopback — an
//! in-process server on the local engine (default), or any server given with `--url` — some of them hanging up
//! after their first token. Reports throughput, TTFT and end-to-end percentiles, failures, and (in-process)
//! resident memory before and after.

use std::time::Duration;

use agentd::bench::loadgen::{self, LoadOptions};
use agentd::bench::stats;
use agentd::server::{self, AppState, ServerOptions};
use anyhow::Context;
use serde::Serialize;

use crate::cli::engine_args::EngineArgs;

#[derive(Debug, clap::Args)]
pub struct LoadBenchArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// A running server's root (`http://127.0.0.1:8080`) instead of an in-process one.
    #[arg(long)]
    pub url: Option<String>,
    #[arg(long, env = "AGENTD_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Concurrent clients.
    #[arg(long, default_value_t = 50)]
    pub clients: usize,
    /// Requests per client, one after the other.
    #[arg(long, default_value_t = 2)]
    pub requests: usize,
    #[arg(long, default_value_t = 32)]
    pub max_tokens: u32,
    /// Every n-th request hangs up after its first token (0: none).
    #[arg(long, default_value_t = 5)]
    pub disconnect_every: usize,
    /// Replies of exactly --max-tokens tokens (sends `ignore_eos`, which vLLM and llama.cpp's server accept).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Report {
    target: String,
    model: String,
    clients: usize,
    requests_per_client: usize,
    max_tokens: u32,
    disconnect_every: usize,
    ignore_eos: bool,
    summary: loadgen::LoadSummary,
    rss_before_mb: Option<f64>,
    rss_after_mb: Option<f64>,
    failures: Vec<String>,
}

pub fn run(args: LoadBenchArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (root, model, state) = match &args.url {
        Some(url) => {
            let root = url
                .trim_end_matches('/')
                .trim_end_matches("/v1")
                .to_string();
            (root, args.engine.model.clone(), None)
        }
        None => {
            let (provider, model) = args.engine.provider()?;
            let state = AppState::new(
                provider,
                ServerOptions {
                    max_queue: 100_000,
                    ..ServerOptions::default()
                },
            );
            (String::new(), model, Some(state))
        }
    };
    runtime.block_on(async move {
        let (root, stop) = match state {
            Some(state) => {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let root = format!("http://{}", listener.local_addr()?);
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                tokio::spawn(server::serve(listener, state, async move {
                    let _ = rx.await;
                }));
                (root, Some(tx))
            }
            None => (root, None),
        };
        let opts = LoadOptions {
            root: root.clone(),
            api_key: args.api_key.clone(),
            model: model.clone(),
            clients: args.clients,
            requests_per_client: args.requests,
            max_tokens: args.max_tokens,
            disconnect_every: args.disconnect_every,
            timeout: Duration::from_secs(1800),
            ignore_eos: args.ignore_eos,
        };
        let in_process = stop.is_some();
        let rss_before = in_process.then(stats::rss_mb).flatten();
        let report = loadgen::run(opts).await;
        let rss_after = in_process.then(stats::rss_mb).flatten();
        if let Some(tx) = stop {
            let _ = tx.send(());
        }
        let out = Report {
            target: root,
            model,
            clients: args.clients,
            requests_per_client: args.requests,
            max_tokens: args.max_tokens,
            disconnect_every: args.disconnect_every,
            ignore_eos: args.ignore_eos,
            summary: report.summary(),
            rss_before_mb: rss_before,
            rss_after_mb: rss_after,
            failures: report
                .failures()
                .iter()
                .filter_map(|o| o.error.clone())
                .collect(),
        };
        if args.json {
            println!("{}", serde_json::to_string_pretty(&out)?);
        } else {
            let s = &out.summary;
            println!("target          {} ({})", out.target, out.model);
            let hangups = match out.disconnect_every {
                0 => "none hang up".to_string(),
                n => format!("every {n}th hangs up after its first token"),
            };
            println!(
                "load            {} clients x {} requests, max_tokens {}, {hangups}",
                out.clients, out.requests_per_client, out.max_tokens
            );
            println!(
                "requests        {} sent, {} complete, {} hung up, {} failed",
                s.requests, s.completed, s.disconnected, s.failed
            );
            println!("wall            {:.1} s", s.wall_secs);
            println!(
                "throughput      {:.2} req/s, {:.1} output tok/s",
                s.requests_per_sec, s.output_tokens_per_sec
            );
            println!(
                "TTFT            p50 {:.3} s, p99 {:.3} s",
                s.ttft_p50, s.ttft_p99
            );
            println!(
                "e2e             p50 {:.3} s, p99 {:.3} s",
                s.e2e_p50, s.e2e_p99
            );
            if let (Some(a), Some(b)) = (out.rss_before_mb, out.rss_after_mb) {
                println!("rss             {a:.0} MiB before, {b:.0} MiB after");
            }
            for f in out.failures.iter().take(5) {
                println!("failure         {f}");
            }
        }
        if out.summary.failed > 0 {
            anyhow::bail!("{} requests failed", out.summary.failed);
        }
        anyhow::Ok(())
    })
}
