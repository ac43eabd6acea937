//! Does a model run the same on two devices? Teacher-forced logits of one GGUF on a reference (the CPU
//! engine) and a candidate (CUDA with our kernels, or candle's path anywhere), compared position by position,
//! then once more as one prefill chunk; the greedy token must agree wherever the reference's top two are
//! clearly apart. `agentd bench parity` prints this, and tests/suite/engine/cuda.rs asserts it.

use serde::Serialize;

use crate::engine::backend::Model;
use crate::engine::error::{EngineError, Result};
use crate::engine::sampler::argmax;

/// What to feed and how close is close enough.
#[derive(Debug, Clone)]
pub struct ParityOptions {
    /// Tokens fed one at a time (teacher forcing), then all at once.
    pub tokens: Vec<u32>,
    /// Largest |Δ| allowed on any logit. The engines quantize activations differently (the CPU engine to Q8
    /// as llama.cpp does, candle's CUDA kernels to Q8_1) and sum in other orders: on the synthetic models
    /// the CPU engine and candle's CPU path differ by up to 0.13 from llama.cpp.
    pub tolerance: f32,
}

impl ParityOptions {
    /// `n` token ids spread over the vocabulary (a fixed sequence, so runs compare).
    pub fn spread(n: usize, vocab: usize) -> Self {
        let tokens = (0..n)
            .map(|i| ((i as u64 * 2_654_435_761 + 17) % vocab.max(1) as u64) as u32)
            .collect();
        Self {
            tokens,
            tolerance: 0.25,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ParityReport {
    pub reference: String,
    pub candidate: String,
    pub positions: usize,
    pub tolerance: f32,
    /// Largest |Δ| over every logit at every position.
    pub max_abs_diff: f32,
    /// The reference's logits span (max − min, largest over positions), for scale.
    pub logit_span: f32,
    /// Positions whose reference top two differ by more than twice the tolerance, and how many of those gave
    /// the same argmax.
    pub argmax_compared: usize,
    pub argmax_agreed: usize,
    /// Largest |Δ| on the last position when every token goes in as one chunk.
    pub prefill_max_abs_diff: f32,
    pub passed: bool,
}

fn logits(
    model: &Model,
    tokens: &[u32],
    kv: &mut crate::engine::kv::standalone::StandaloneSeq,
) -> Result<Vec<f32>> {
    Ok(model.forward(tokens, kv)?.to_vec1()?)
}

/// Runs both models over `opts.tokens` and compares them.
pub fn compare(reference: &Model, candidate: &Model, opts: &ParityOptions) -> Result<ParityReport> {
    if opts.tokens.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    if reference.vocab_size != candidate.vocab_size {
        return Err(EngineError::Internal(format!(
            "vocabularies of {} and {} tokens",
            reference.vocab_size, candidate.vocab_size
        )));
    }
    let (mut kr, mut kc) = (reference.new_sequence(), candidate.new_sequence());
    let mut report = ParityReport {
        reference: describe(reference),
        candidate: describe(candidate),
        positions: opts.tokens.len(),
        tolerance: opts.tolerance,
        max_abs_diff: 0.0,
        logit_span: 0.0,
        argmax_compared: 0,
        argmax_agreed: 0,
        prefill_max_abs_diff: 0.0,
        passed: false,
    };
    for &t in &opts.tokens {
        let (r, c) = (
            logits(reference, &[t], &mut kr)?,
            logits(candidate, &[t], &mut kc)?,
        );
        report.max_abs_diff = report.max_abs_diff.max(max_abs_diff(&r, &c));
        let (lo, hi) = r
            .iter()
            .fold((f32::MAX, f32::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        report.logit_span = report.logit_span.max(hi - lo);
        if top_two_margin(&r) > 2.0 * opts.tolerance {
            report.argmax_compared += 1;
            report.argmax_agreed += usize::from(argmax(&r) == argmax(&c));
        }
    }
    let (mut fr, mut fc) = (reference.new_sequence(), candidate.new_sequence());
    let (r, c) = (
        logits(reference, &opts.tokens, &mut fr)?,
        logits(candidate, &opts.tokens, &mut fc)?,
    );
    report.prefill_max_abs_diff = max_abs_diff(&r, &c);
    report.passed = report.max_abs_diff <= opts.tolerance
        && report.prefill_max_abs_diff <= opts.tolerance
        && report.argmax_agreed == report.argmax_compared;
    Ok(report)
}

fn describe(m: &Model) -> String {
    let device = crate::engine::device::describe(m.device());
    match m.kernels() {
        None => format!("{device}, the CPU engine"),
        Some(k) => format!("{device}, candle's forward pass with {k:?} ops"),
    }
}

/// NaN anywhere counts as infinitely far.
fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| {
        let d = (x - y).abs();
        if d.is_nan() {
            f32::INFINITY
        } else {
            m.max(d)
        }
    })
}

fn top_two_margin(l: &[f32]) -> f32 {
    let (mut a, mut b) = (f32::MIN, f32::MIN);
    for &x in l {
        if x > a {
            b = a;
            a = x;
        } else if x > b {
            b = x;
        }
    }
    a - b
}
