//! `agentd bench engine`: prefill and decode tokens per second on a synthetic prompt of a given length.

use agentd::engine::generate::GenerateRequest;
use agentd::engine::sampler::SamplingParams;
use anyhow::{bail, Context};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::cli::engine_args::EngineArgs;
use agentd::bench::stats::{peak_rss_mb, Spread};

#[derive(Debug, clap::Args)]
pub struct EngineBenchArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    #[arg(long, default_value_t = 500)]
    pub prompt_tokens: usize,
    #[arg(long, default_value_t = 128)]
    pub gen_tokens: usize,
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Report {
    model: String,
    device: String,
    threads: usize,
    weight_bytes: usize,
    prompt_tokens: usize,
    gen_tokens: usize,
    reps: usize,
    prefill_tok_s: Spread,
    decode_tok_s: Spread,
    ttft_s: Spread,
    peak_rss_mb: Option<f64>,
}

const FILLER: &str = "The engine keeps the model on its own thread. Each request carries a reply channel and a \
cancellation token; prompts are rendered with the chat template and tokenized before they reach the model. \
fn main() { let xs: Vec<u32> = (0..10).collect(); println!(\"{:?}\", xs); } ";

pub fn run(args: EngineBenchArgs) -> anyhow::Result<()> {
    if args.reps == 0 || args.gen_tokens < 2 || args.prompt_tokens == 0 {
        bail!("--reps must be >= 1, --gen-tokens >= 2 and --prompt-tokens >= 1");
    }
    // Every repetition sends the same prompt: with prefix reuse on, all but the first would prefill nothing.
    let mut options = args.engine.options()?;
    options.prefix_cache_bytes = 0;
    let engine = agentd::engine::Engine::load(options).context("loading the model")?;
    let ctx = engine.info().context_length;
    if args.prompt_tokens + args.gen_tokens > ctx {
        bail!(
            "--prompt-tokens + --gen-tokens = {} exceeds the model's context window of {ctx} tokens",
            args.prompt_tokens + args.gen_tokens
        );
    }
    let mut text = String::new();
    let mut prompt = Vec::new();
    while prompt.len() < args.prompt_tokens {
        text.push_str(FILLER);
        prompt = engine.tokenizer().encode(&text, false)?;
    }
    prompt.truncate(args.prompt_tokens);
    let request = || GenerateRequest {
        prompt: prompt.clone(),
        sampling: SamplingParams::greedy(),
        max_tokens: Some(args.gen_tokens),
        ignore_eos: true,
        ..Default::default()
    };
    // Warm-up: page in the weights and grow the buffers once.
    let mut warm = request();
    warm.prompt.truncate(16);
    warm.max_tokens = Some(4);
    engine.generate_blocking(warm, CancellationToken::new(), |_| {})?;

    let (mut prefill, mut decode, mut ttft) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..args.reps {
        let s = engine
            .generate_blocking(request(), CancellationToken::new(), |_| {})
            .with_context(|| format!("repetition {rep}"))?;
        prefill.push(s.prompt_tokens as f64 / s.prefill_secs);
        // The decode phase runs one forward pass per token after the first.
        decode.push((s.completion_tokens - 1) as f64 / s.decode_secs);
        ttft.push(s.ttft_secs);
        if !args.json {
            eprintln!(
                "rep {}: prefill {:.1} tok/s, decode {:.1} tok/s",
                rep + 1,
                prefill[rep],
                decode[rep]
            );
        }
    }
    let info = engine.info();
    let report = Report {
        model: info.name.clone(),
        device: info.device.clone(),
        threads: agentd::engine::device::cpu_threads(),
        weight_bytes: info.weight_bytes,
        prompt_tokens: args.prompt_tokens,
        gen_tokens: args.gen_tokens,
        reps: args.reps,
        prefill_tok_s: Spread::of(&prefill).context("no measurements")?,
        decode_tok_s: Spread::of(&decode).context("no measurements")?,
        ttft_s: Spread::of(&ttft).context("no measurements")?,
        peak_rss_mb: peak_rss_mb(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} on {} — {} prompt + {} generated tokens, {} reps",
            report.model, report.device, report.prompt_tokens, report.gen_tokens, report.reps
        );
        for (name, s) in [
            ("prefill tok/s", report.prefill_tok_s),
            ("decode tok/s", report.decode_tok_s),
        ] {
            println!(
                "  {name:<14} median {:>8.1}  min {:>8.1}  max {:>8.1}",
                s.median, s.min, s.max
            );
        }
        println!(
            "  weights {:.1} MB, peak RSS {:.0} MB",
            report.weight_bytes as f64 / 1e6,
            report.peak_rss_mb.unwrap_or(f64::NAN)
        );
    }
    Ok(())
}
