//! `agentd bench engine`: prefill and decode tokens per second on a synthetic prompt of a given length. Flags
//! and printing; the measurement is `agentd::bench::engine`.

use agentd::bench::engine::{self, EngineBenchOptions};
use anyhow::{bail, Context};

use crate::cli::engine_args::EngineArgs;

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

pub fn run(args: EngineBenchArgs) -> anyhow::Result<()> {
    if args.reps == 0 || args.gen_tokens < 2 || args.prompt_tokens == 0 {
        bail!("--reps must be >= 1, --gen-tokens >= 2 and --prompt-tokens >= 1");
    }
    // Every repetition sends the same prompt: with prefix reuse on, all but the first would prefill nothing.
    let mut options = args.engine.options()?;
    options.scheduler.prefix_caching = false;
    let engine = agentd::engine::Engine::load(options).context("loading the model")?;
    let ctx = engine.info().context_length;
    if args.prompt_tokens + args.gen_tokens > ctx {
        bail!(
            "--prompt-tokens + --gen-tokens = {} exceeds the model's context window of {ctx} tokens",
            args.prompt_tokens + args.gen_tokens
        );
    }
    let opts = EngineBenchOptions {
        prompt_tokens: args.prompt_tokens,
        gen_tokens: args.gen_tokens,
        reps: args.reps,
    };
    let report = engine::measure(&engine, &opts, |rep, f| {
        if !args.json {
            eprintln!(
                "rep {}: prefill {:.1} tok/s, decode {:.1} tok/s",
                rep + 1,
                f.prefill_tok_s,
                f.decode_tok_s
            );
        }
    })?;
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
