//! The measurement of `agentd bench engine`: prefill and decode tokens per second of the local engine on a
//! synthetic prompt of a given length, greedy, EOS ignored, over repetitions after a warm-up.
//!
//! Definitions: prefill tok/s = prompt tokens / prefill time; decode tok/s = (completion tokens − 1) / decode time
//! (the decode phase runs one forward pass per token after the first); time to first token as the engine reports
//! it. Each is summarised as a [`Spread`] (median, min, max).

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::stats::{peak_rss_mb, Spread};
use super::BenchError;
use crate::engine::{Engine, EngineError, GenerateRequest, SamplingParams};

/// What to measure. The caller checks the flags (`reps >= 1`, `gen_tokens >= 2`, `prompt_tokens >= 1`, and
/// that both fit in the context window); the engine should have prefix reuse off, or every repetition after the
/// first would prefill nothing.
#[derive(Debug, Clone)]
pub struct EngineBenchOptions {
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    pub reps: usize,
}

/// One repetition's figures (for a progress line).
#[derive(Debug, Clone, Copy)]
pub struct RepFigures {
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct EngineReport {
    pub model: String,
    pub device: String,
    pub threads: usize,
    pub weight_bytes: usize,
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    pub reps: usize,
    pub prefill_tok_s: Spread,
    pub decode_tok_s: Spread,
    pub ttft_s: Spread,
    pub peak_rss_mb: Option<f64>,
    /// Seconds from the start of loading to a ready engine (set by the caller that loaded it).
    pub load_s: Option<f64>,
}

const FILLER: &str = "The engine keeps the model on its own thread. Each request carries a reply channel and a \
cancellation token; prompts are rendered with the chat template and tokenized before they reach the model. \
fn main() { let xs: Vec<u32> = (0..10).collect(); println!(\"{:?}\", xs); } ";

/// Exactly `n` tokens of repeated filler text.
fn synthetic_prompt(engine: &Engine, n: usize) -> Result<Vec<u32>, BenchError> {
    let mut text = String::new();
    let mut prompt = Vec::new();
    while prompt.len() < n {
        text.push_str(FILLER);
        prompt = engine
            .tokenizer()
            .encode(&text, false)
            .map_err(EngineError::from)?;
    }
    prompt.truncate(n);
    Ok(prompt)
}

/// Runs the warm-up and `opts.reps` repetitions; `on_rep(index, figures)` after each.
pub fn measure(
    engine: &Engine,
    opts: &EngineBenchOptions,
    mut on_rep: impl FnMut(usize, RepFigures),
) -> Result<EngineReport, BenchError> {
    let prompt = synthetic_prompt(engine, opts.prompt_tokens)?;
    let request = || GenerateRequest {
        prompt: prompt.clone(),
        sampling: SamplingParams::greedy(),
        max_tokens: Some(opts.gen_tokens),
        ignore_eos: true,
        ..Default::default()
    };
    // Warm-up: page in the weights and grow the buffers once.
    let mut warm = request();
    warm.prompt.truncate(16);
    warm.max_tokens = Some(4);
    engine.generate_blocking(warm, CancellationToken::new(), |_| {})?;

    let (mut prefill, mut decode, mut ttft) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..opts.reps {
        let s = engine
            .generate_blocking(request(), CancellationToken::new(), |_| {})
            .map_err(|e| BenchError::engine_at(format!("repetition {rep}"), e))?;
        let figures = RepFigures {
            prefill_tok_s: s.prompt_tokens as f64 / s.prefill_secs,
            decode_tok_s: s.completion_tokens.saturating_sub(1) as f64 / s.decode_secs,
        };
        prefill.push(figures.prefill_tok_s);
        decode.push(figures.decode_tok_s);
        ttft.push(s.ttft_secs);
        on_rep(rep, figures);
    }
    let info = engine.info();
    Ok(EngineReport {
        model: info.name.clone(),
        device: info.device.clone(),
        threads: crate::engine::cpu_threads(),
        weight_bytes: info.weight_bytes,
        prompt_tokens: opts.prompt_tokens,
        gen_tokens: opts.gen_tokens,
        reps: opts.reps,
        prefill_tok_s: Spread::of(&prefill).ok_or(BenchError::NoMeasurements)?,
        decode_tok_s: Spread::of(&decode).ok_or(BenchError::NoMeasurements)?,
        ttft_s: Spread::of(&ttft).ok_or(BenchError::NoMeasurements)?,
        peak_rss_mb: peak_rss_mb(),
        load_s: None,
    })
}
