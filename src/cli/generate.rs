//! `agentd generate`: stream one completion of a prompt to stdout (chat-templated, or raw with `--raw`).

use std::io::Write;

use agentd::engine::generate::GenerateRequest;
use agentd::engine::sampler::SamplingParams;
use anyhow::Context;
use tokio_util::sync::CancellationToken;

use super::engine_args::EngineArgs;

#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Tokenize the prompt as given (special tokens parsed) instead of applying the chat template.
    #[arg(long)]
    pub raw: bool,
    /// A system message (chat mode only).
    #[arg(long, conflicts_with = "raw")]
    pub system: Option<String>,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// 0 disables.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub presence_penalty: f32,
    #[arg(long, default_value_t = 0.0)]
    pub frequency_penalty: f32,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop when this text is generated (it is not printed). Repeatable.
    #[arg(long)]
    pub stop: Vec<String>,
    /// Print token counts and speeds to stderr at the end.
    #[arg(long)]
    pub verbose: bool,
    pub prompt: String,
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let sampling = SamplingParams {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repetition_penalty: args.repeat_penalty,
        presence_penalty: args.presence_penalty,
        frequency_penalty: args.frequency_penalty,
        seed: args.seed,
        ..SamplingParams::default()
    };
    sampling.validate()?;
    let engine = args.engine.load()?;
    let text = if args.raw {
        args.prompt.clone()
    } else {
        let mut messages = Vec::new();
        if let Some(s) = &args.system {
            messages.push(serde_json::json!({"role": "system", "content": s}));
        }
        messages.push(serde_json::json!({"role": "user", "content": args.prompt}));
        engine.template().render(&messages, None, true)?
    };
    let prompt = engine.tokenizer().encode(&text, true)?;
    let req = GenerateRequest {
        prompt,
        sampling,
        max_tokens: Some(args.max_tokens),
        stop: args.stop.clone(),
        ..Default::default()
    };
    let cancel = CancellationToken::new();
    let ctrl_c = cancel.clone();
    // Ctrl-C stops the generation (within one token) instead of killing the process mid-line.
    let _ = ctrlc_watch(ctrl_c);
    let mut out = std::io::stdout().lock();
    let mut write_err = None;
    let summary = engine
        .generate_blocking(req, cancel, |t| {
            if write_err.is_none() {
                if let Err(e) = out.write_all(t.text.as_bytes()).and_then(|_| out.flush()) {
                    write_err = Some(e);
                }
            }
        })
        .context("generation failed")?;
    out.write_all(summary.trailing_text.as_bytes())?;
    writeln!(out)?;
    if let Some(e) = write_err {
        return Err(e).context("writing to stdout");
    }
    if args.verbose {
        eprintln!(
            "[{} prompt tokens, {} generated, finish {:?}; prefill {:.1} tok/s, decode {:.1} tok/s]",
            summary.prompt_tokens,
            summary.completion_tokens,
            summary.finish,
            summary.prompt_tokens as f64 / summary.prefill_secs.max(1e-9),
            summary.completion_tokens.saturating_sub(1) as f64 / summary.decode_secs.max(1e-9),
        );
    }
    Ok(())
}

/// Cancels `token` on Ctrl-C, on a small background runtime thread.
fn ctrlc_watch(token: CancellationToken) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("ctrl-c".into())
        .spawn(move || {
            rt.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    token.cancel();
                }
            })
        })?;
    Ok(())
}
