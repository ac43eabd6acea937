//! `agentd bench fim`: completion as you type against one or more `/infill` servers, side by side in one run
//! (`--target agentd=http://127.0.0.1:8080 --target llama=http://127.0.0.1:8095`; without a target, an
//! in-process server on `--model`). The typing replay (`agentd::bench::fim::typing`) goes target after target
//! through the same files; `--quality N` also scores N held-out middles of Python's standard library on each
//! target and, with two targets, counts the middles that are identical.

use std::path::PathBuf;

use agentd::bench::fim::parity::{self, Parity};
use agentd::bench::fim::quality::{self, Mask, Scored};
use agentd::bench::fim::typing::{self, TypingOptions, TypingReport};
use agentd::bench::fim::InfillClient;
use agentd::server::{self, AppState, ServerOptions};
use anyhow::Context;
use serde::Serialize;

use crate::cli::engine_args::EngineArgs;

#[derive(Debug, clap::Args)]
pub struct FimBenchArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// `NAME=URL` of a server with `/infill` (repeat to compare); none: an in-process server on --model.
    #[arg(long = "target")]
    pub targets: Vec<String>,
    #[arg(long, env = "AGENTD_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Files to type through (default: four source files of this repository's `src/server/`).
    #[arg(long = "file")]
    pub files: Vec<PathBuf>,
    /// Lines typed per file.
    #[arg(long, default_value_t = 4)]
    pub lines: usize,
    #[arg(long, default_value_t = 4)]
    pub chars_per_pause: usize,
    /// Typing speed in characters per second.
    #[arg(long, default_value_t = 8.0)]
    pub cps: f64,
    #[arg(long, default_value_t = 32)]
    pub n_predict: u32,
    /// Let every request finish instead of hanging up on stale ones.
    #[arg(long)]
    pub no_cancel: bool,
    /// Also score this many held-out middles (0: none).
    #[arg(long, default_value_t = 0)]
    pub quality: usize,
    /// Where the held-out Python files come from.
    #[arg(long, default_value = "/usr/lib/python3.11")]
    pub quality_dir: PathBuf,
    #[arg(long, default_value = "python3")]
    pub python: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct TargetReport {
    name: String,
    url: String,
    typing: TypingReport,
    quality: Option<QualityReport>,
}

#[derive(Serialize)]
struct QualityReport {
    samples: usize,
    exact_first_line: usize,
    parses: usize,
    lines: usize,
    lines_exact: usize,
    blocks: usize,
    blocks_exact: usize,
    middles: Vec<Scored>,
}

#[derive(Serialize)]
struct Report {
    files: Vec<PathBuf>,
    targets: Vec<TargetReport>,
    /// With two targets and --quality: middles identical on both, and those where one is the start of the other
    /// (the same greedy tokens until one server's stop rules ended its middle).
    identical_middles: Option<usize>,
    agreeing_middles: Option<usize>,
    /// With two targets and --quality: per sample, the two middles token by token (see `bench::fim::parity`).
    parity: Option<Vec<Parity>>,
}

pub fn run(args: FimBenchArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut targets: Vec<(String, String)> = Vec::new();
    for t in &args.targets {
        let (name, url) = t
            .split_once('=')
            .with_context(|| format!("--target `{t}` is not NAME=URL"))?;
        targets.push((name.to_string(), url.to_string()));
    }
    let state = match targets.is_empty() {
        true => {
            let (provider, _) = args.engine.provider()?;
            Some(AppState::new(provider, ServerOptions::default()))
        }
        false => None,
    };
    let files = match args.files.is_empty() {
        false => args.files.clone(),
        true => default_files()?,
    };
    let opts = TypingOptions {
        files: files.clone(),
        lines_per_file: args.lines,
        chars_per_pause: args.chars_per_pause,
        cps: args.cps,
        n_predict: args.n_predict,
        cancel_stale: !args.no_cancel,
    };
    runtime.block_on(async move {
        let mut stop = None;
        if let Some(state) = state {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let root = format!("http://{}", listener.local_addr()?);
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            tokio::spawn(server::serve(listener, state, async move {
                let _ = rx.await;
            }));
            targets.push(("agentd".into(), root));
            stop = Some(tx);
        }
        let samples = match args.quality {
            0 => Vec::new(),
            n => quality::held_out(&args.quality_dir, n)?,
        };
        let mut reports = Vec::new();
        for (name, url) in &targets {
            let client = InfillClient::new(url, args.api_key.clone())?;
            let typing = typing::replay(&client, &opts).await?;
            let quality = match samples.is_empty() {
                true => None,
                false => {
                    let middles = quality::score(&client, &samples, &args.python).await?;
                    Some(summarize(&samples, middles))
                }
            };
            reports.push(TargetReport {
                name: name.clone(),
                url: client.url().to_string(),
                typing,
                quality,
            });
        }
        if let Some(tx) = stop {
            let _ = tx.send(());
        }
        let pairs: Option<Vec<(&str, &str)>> = match reports.as_slice() {
            [a, b] => match (&a.quality, &b.quality) {
                (Some(qa), Some(qb)) => Some(
                    qa.middles
                        .iter()
                        .zip(&qb.middles)
                        .map(|(x, y)| (x.middle.as_str(), y.middle.as_str()))
                        .collect(),
                ),
                _ => None,
            },
            _ => None,
        };
        let identical_middles = pairs
            .as_ref()
            .map(|p| p.iter().filter(|(x, y)| x == y).count());
        let agreeing_middles = pairs.as_ref().map(|p| {
            p.iter()
                .filter(|(x, y)| x.starts_with(y) || y.starts_with(x))
                .count()
        });
        let parity = match reports.as_slice() {
            [a, b] => match (&a.quality, &b.quality) {
                (Some(qa), Some(qb)) => Some(
                    qa.middles
                        .iter()
                        .zip(&qb.middles)
                        .map(|(x, y)| parity::compare(&x.tokens, &y.tokens))
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            },
            _ => None,
        };
        let report = Report {
            files,
            targets: reports,
            identical_middles,
            agreeing_middles,
            parity,
        };
        match args.json {
            true => println!("{}", serde_json::to_string_pretty(&report)?),
            false => print_table(&report, &opts),
        }
        anyhow::Ok(())
    })
}

/// Four files of this repository's server (in the current directory's checkout).
fn default_files() -> anyhow::Result<Vec<PathBuf>> {
    let files: Vec<PathBuf> = [
        "src/server/typing.rs",
        "src/server/timings.rs",
        "src/server/admission.rs",
        "src/server/limits.rs",
    ]
    .iter()
    .map(PathBuf::from)
    .filter(|p| p.is_file())
    .collect();
    anyhow::ensure!(
        !files.is_empty(),
        "no files to type through: run from agentd's checkout or pass --file"
    );
    Ok(files)
}

fn summarize(samples: &[quality::Sample], middles: Vec<Scored>) -> QualityReport {
    let of = |mask: Mask| {
        let (n, exact) = samples
            .iter()
            .zip(&middles)
            .filter(|(s, _)| s.mask == mask)
            .fold((0, 0), |(n, e), (_, m)| {
                (n + 1, e + m.exact_first_line as usize)
            });
        (n, exact)
    };
    let (lines, lines_exact) = of(Mask::Line);
    let (blocks, blocks_exact) = of(Mask::Block);
    QualityReport {
        samples: middles.len(),
        exact_first_line: middles.iter().filter(|m| m.exact_first_line).count(),
        parses: middles.iter().filter(|m| m.parses).count(),
        lines,
        lines_exact,
        blocks,
        blocks_exact,
        middles,
    }
}

fn print_table(report: &Report, opts: &TypingOptions) {
    println!(
        "typing: {} files, {} lines each, a request every {} chars at {} chars/s, n_predict {}, stale requests {}",
        report.files.len(),
        opts.lines_per_file,
        opts.chars_per_pause,
        opts.cps,
        opts.n_predict,
        if opts.cancel_stale { "cancelled" } else { "kept" }
    );
    println!(
        "{:<14} {:>5} {:>6} {:>9} {:>9} {:>10} {:>10} {:>7} {:>8}",
        "target",
        "reqs",
        "done",
        "cancelled",
        "ttft p50",
        "ttft p95",
        "total p50",
        "total p95",
        "cache"
    );
    let ms = |d: &Option<typing::Pcts>, p95: bool| match d {
        Some(d) => format!("{:.0} ms", if p95 { d.p95 } else { d.p50 }),
        None => "-".into(),
    };
    for t in &report.targets {
        let r = &t.typing;
        println!(
            "{:<14} {:>5} {:>6} {:>8.0}% {:>9} {:>9} {:>10} {:>10} {:>7.0}%",
            t.name,
            r.requests,
            r.completed,
            100.0 * r.cancelled as f64 / r.requests.max(1) as f64,
            ms(&r.ttft_ms, false),
            ms(&r.ttft_ms, true),
            ms(&r.total_ms, false),
            ms(&r.total_ms, true),
            100.0 * r.cache_hit_share
        );
        for e in &r.errors {
            println!("  error: {e}");
        }
    }
    for t in &report.targets {
        if let Some(q) = &t.quality {
            println!(
                "quality {:<14} first line exact {}/{} (lines {}/{}, blocks {}/{}), file parses {}/{}",
                t.name,
                q.exact_first_line,
                q.samples,
                q.lines_exact,
                q.lines,
                q.blocks_exact,
                q.blocks,
                q.parses,
                q.samples
            );
        }
    }
    if let (Some(n), Some(agree)) = (report.identical_middles, report.agreeing_middles) {
        let total = report.targets[0].quality.as_ref().map_or(0, |q| q.samples);
        println!(
            "middles identical on both targets: {n}/{total}; one the start of the other: {agree}/{total}"
        );
    }
    if let Some(parity) = &report.parity {
        let count = |f: &dyn Fn(&Parity) -> bool| parity.iter().filter(|p| f(p)).count();
        let same = count(&|p| matches!(p, Parity::Same { .. }));
        let tie = count(&|p| matches!(p, Parity::NearTie { .. }));
        let diverged = count(&|p| matches!(p, Parity::Diverged { .. }));
        let unknown = count(&|p| matches!(p, Parity::Unknown));
        println!(
            "greedy tokens, both targets: the same wherever both generated {same}/{n}; first difference a \
             near-tie (< {tie_nats} nats on either side) {tie}/{n}; a real divergence {diverged}/{n}; no \
             probabilities {unknown}/{n}",
            n = parity.len(),
            tie_nats = parity::NEAR_TIE,
        );
        let gap = |g: &Option<f64>| g.map_or("not listed".to_string(), |g| format!("{g:.3}"));
        for (i, p) in parity.iter().enumerate() {
            if let Parity::NearTie { at, gap_a, gap_b } | Parity::Diverged { at, gap_a, gap_b } = p
            {
                println!(
                    "  sample {i}: first difference at token {at}: {} gap {}, {} gap {}",
                    report.targets[0].name,
                    gap(gap_a),
                    report.targets[1].name,
                    gap(gap_b)
                );
            }
        }
    }
}
