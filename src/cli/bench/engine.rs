//! `agentd bench engine`: prefill and decode tokens per second on a synthetic prompt of a given length. Flags
//! and printing; the measurement is `agentd::bench::engine`. `--dummy ARCH:SIZE` measures a synthetic model of a
//! real shape (random weights, vLLM's `--load-format dummy`), written once to `$AGENTD_HOME/dummy/`.

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
    /// Measure a synthetic model of this shape instead (qwen2:0.5b, qwen2:7b, llama:8b, …; see
    /// `agentd model synth`): random weights in the Q4_K_M mix, no download beyond the tokenizer's model.
    #[arg(long, value_name = "ARCH:SIZE", conflicts_with_all = ["model", "model_path"])]
    pub dummy: Option<String>,
    /// With --dummy: the model whose tokenizer to copy (a known name or a GGUF path, such as one written by
    /// `agentd model vocab`). Default as for `agentd model synth`.
    #[arg(long, value_name = "MODEL", requires = "dummy")]
    pub tokenizer_from: Option<String>,
}

/// The synthetic checkpoint `spec` names, written to `$AGENTD_HOME/dummy/` unless it is there already.
pub(super) fn dummy_model(
    spec: &str,
    tokenizer_from: Option<&str>,
    offline: bool,
) -> anyhow::Result<std::path::PathBuf> {
    let spec = crate::cli::model_files::synth_spec(spec, "q4_k_m", 0)?;
    let source = crate::cli::model_files::tokenizer_source(spec.arch, tokenizer_from, offline)?;
    let vocab = source.get_array("tokenizer.ggml.tokens")?.len();
    let path = agentd::env::agentd_home()
        .join("dummy")
        .join(spec.file_name(vocab));
    if !path.is_file() {
        eprintln!("writing the synthetic model {}", path.display());
        agentd::engine::files::synth::write(&spec, &source, &path)?;
    }
    Ok(path)
}

pub fn run(args: EngineBenchArgs) -> anyhow::Result<()> {
    if args.reps == 0 || args.gen_tokens < 2 || args.prompt_tokens == 0 {
        bail!("--reps must be >= 1, --gen-tokens >= 2 and --prompt-tokens >= 1");
    }
    // Every repetition sends the same prompt: with prefix reuse on, all but the first would prefill nothing.
    let mut options = args.engine.options()?;
    options.scheduler.prefix_caching = false;
    if let Some(spec) = &args.dummy {
        let path = dummy_model(spec, args.tokenizer_from.as_deref(), args.engine.offline)?;
        options.model = agentd::model_files::fetch::ModelSelector::Path(path);
    }
    let started = std::time::Instant::now();
    let engine = agentd::engine::Engine::load(options).context("loading the model")?;
    let load_s = started.elapsed().as_secs_f64();
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
    let mut report = engine::measure(&engine, &opts, |rep, f| {
        if !args.json {
            eprintln!(
                "rep {}: prefill {:.1} tok/s, decode {:.1} tok/s",
                rep + 1,
                f.prefill_tok_s,
                f.decode_tok_s
            );
        }
    })?;
    report.load_s = Some(load_s);
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
        println!("  load {load_s:.2} s");
        println!(
            "  weights {:.1} MB, peak RSS {:.0} MB",
            report.weight_bytes as f64 / 1e6,
            report.peak_rss_mb.unwrap_or(f64::NAN)
        );
    }
    Ok(())
}
