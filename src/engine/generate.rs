//! One generation: prefill the prompt, then sample, stream and stop — on the engine thread, over a sequence's
//! own KV state. Events go out through a callback so the actor can forward them to the request's channel.
//!
//! Under a grammar ([`Constraint`]) each step samples first and lets the grammar check the token; a rejected token
//! costs a full mask and a resample. Tokens the grammar then forces are emitted and fed to the model together with
//! the sampled one in a single forward pass. EOS ends the output only where the grammar accepts it, and a grammar
//! that can take nothing more ends it too.

use std::time::Instant;

use serde::Serialize;

use super::constraint::{Constraint, ConstraintSpec, ConstraintStats};
use super::detok::{StopMatcher, StopScan, Utf8Stream};
use super::error::{EngineError, Result};
use super::kv::SeqKv;
use super::model::Model;
use super::sampler::{logprobs, Sampler, SamplingParams};
use super::tokenizer::Tokenizer;

/// Within this many tokens of `max_tokens`, a constrained call in progress is watched: each step keeps a way to
/// close it in the budget left (see [`super::constraint::close`]), and a step that would lose the last one is
/// replaced by that close.
pub const CLOSE_WINDOW_TOKENS: usize = 64;

/// Prompt tokens fed to the model per forward pass during prefill. Cancellation is checked between chunks, so a
/// request whose client left frees the engine within one chunk (well under a second for small models on a CPU).
pub const PREFILL_CHUNK_TOKENS: usize = 256;

/// What to generate. The prompt is already tokenized (rendering and tokenizing happen outside the engine
/// thread so the model is never idle waiting for them).
#[derive(Debug, Clone, Default)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    /// `None`: until EOS, a stop string or a full context window.
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    /// Keep going through EOS (benchmarks).
    pub ignore_eos: bool,
    /// Return the chosen token's log-probability and this many alternatives.
    pub logprobs: Option<usize>,
    /// Tools, `tool_choice`, `response_format`: compiled into a grammar the output must follow. `ignore_eos` does
    /// not apply under a grammar.
    pub constraint: Option<ConstraintSpec>,
    /// Who may share KV prefixes with whom: the prefix cache reuses (by cache key or by content) only sequences
    /// left by requests of the same scope. `None` is a scope of its own (see [`super::prefix_cache`]).
    pub cache_scope: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-generation token.
    Eos,
    /// A stop string matched (it is not part of the text).
    StopString,
    /// `max_tokens` reached or the context window is full.
    Length,
    /// The request was cancelled or its receiver went away.
    Cancelled,
}

#[derive(Debug, Clone, Serialize)]
pub struct TokenLogprob {
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// One generated token and the text it completes (may be empty while UTF-8 or a stop string is pending).
#[derive(Debug, Clone, Serialize)]
pub struct TokenEvent {
    pub id: u32,
    pub text: String,
    pub logprob: Option<TokenLogprob>,
    /// Part of an early close: `max_tokens` was about to cut a call and the engine closed it with the shortest
    /// completion the grammar allows (the generation then ends with `length`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub closes_call: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GenerateSummary {
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens whose KV state was reused rather than computed.
    pub cached_tokens: usize,
    /// Text held back at the end (an incomplete UTF-8 tail or a stop-string prefix that never completed).
    pub trailing_text: String,
    pub prefill_secs: f64,
    pub decode_secs: f64,
    /// From the start of prefill to the first sampled token.
    pub ttft_secs: f64,
    /// What the grammar cost, when there was one.
    pub constraint: Option<ConstraintStats>,
}

#[derive(Debug)]
pub enum GenerateEvent {
    Token(TokenEvent),
    Done(GenerateSummary),
    Error(EngineError),
}

/// Checks a request against the model before any work is done.
pub fn validate(req: &GenerateRequest, context_length: usize) -> Result<()> {
    if req.prompt.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    if req.prompt.len() >= context_length {
        return Err(EngineError::PromptTooLong {
            tokens: req.prompt.len(),
            limit: context_length,
        });
    }
    req.sampling.validate()
}

/// Runs one request to completion. `cancelled` is asked between prefill chunks and after every decoded token;
/// `emit` returns `false` when nobody listens any more (treated as a cancel too). A cancelled request ends with
/// [`FinishReason::Cancelled`] and exact usage (the whole prompt, the tokens generated so far); the prompt
/// positions already prefilled stay in `kv`. Errors are returned, not emitted; the caller turns them into an
/// event.
pub fn run(
    model: &Model,
    tokenizer: &Tokenizer,
    req: &GenerateRequest,
    kv: &mut SeqKv,
    cancelled: &dyn Fn() -> bool,
    mut constraint: Option<&mut Constraint>,
    emit: &mut dyn FnMut(GenerateEvent) -> bool,
) -> Result<GenerateSummary> {
    let ctx_len = model.config.context_length;
    validate(req, ctx_len)?;
    let mut sampler = Sampler::new(req.sampling.clone())?;
    let eos = tokenizer.eos_ids().to_vec();
    let max_new = req
        .max_tokens
        .unwrap_or(usize::MAX)
        .min(ctx_len - req.prompt.len());

    // Reuse whatever prefix of the prompt the sequence already holds; always recompute at least one token
    // so there are logits to sample from.
    let common = kv_common_prefix(kv, &req.prompt);
    kv.truncate(common);

    let start = Instant::now();
    let mut context: Vec<u32> = req.prompt.clone();
    let mut generated: Vec<u32> = Vec::new();
    let mut utf8 = Utf8Stream::default();
    let mut stops = StopMatcher::new(req.stop.clone());
    let mut out = GenerateSummary {
        finish: FinishReason::Length,
        prompt_tokens: req.prompt.len(),
        completion_tokens: 0,
        cached_tokens: common,
        trailing_text: String::new(),
        prefill_secs: 0.0,
        decode_secs: 0.0,
        ttft_secs: 0.0,
        constraint: None,
    };
    let mut prefilled = None;
    for chunk in req.prompt[common..].chunks(PREFILL_CHUNK_TOKENS) {
        if cancelled() {
            out.finish = FinishReason::Cancelled;
            out.prefill_secs = start.elapsed().as_secs_f64();
            return Ok(out);
        }
        prefilled = Some(model.forward(chunk, kv)?);
    }
    let mut logits = prefilled
        .ok_or_else(|| EngineError::Internal("prefill had no prompt token to compute".into()))?;
    out.prefill_secs = start.elapsed().as_secs_f64();
    let decode_start = Instant::now();
    let mut finish = FinishReason::Length;
    // A close of the call in progress that fits the budget left (inside the close window only).
    let mut close_plan: Option<Vec<u32>> = None;
    'decode: loop {
        if max_new == 0 {
            break;
        }
        let remaining = max_new - generated.len();
        if let Some(c) = constraint.as_deref_mut() {
            if remaining <= CLOSE_WINDOW_TOKENS && close_plan.is_none() && c.in_call()? {
                close_plan = c.shortest_close(remaining)?;
            }
        }
        let mut l = logits.to_vec1::<f32>()?;
        sampler.adjust(&mut l, &context, &generated);
        let tok = match constraint.as_deref_mut() {
            Some(c) => c.sample(&mut sampler, &mut l)?,
            None => sampler.pick(&l).ok_or_else(|| {
                EngineError::Tokenizer("every logit is -inf; nothing can be sampled".into())
            })?,
        };
        if generated.is_empty() {
            out.ttft_secs = start.elapsed().as_secs_f64();
        }
        let lp = req.logprobs.map(|n| {
            let (logprob, top) = logprobs(&l, tok, n);
            TokenLogprob { logprob, top }
        });
        let ends = match constraint.as_deref() {
            Some(c) => c.is_eos(tok),
            None => eos.contains(&tok) && !req.ignore_eos,
        };
        if ends {
            finish = FinishReason::Eos;
            break;
        }
        // The sampled token, then whatever the grammar forces after it (within the token budget).
        let mut batch = vec![tok];
        let mut lp = lp;
        let mut closing = false;
        if let Some(c) = constraint.as_deref_mut() {
            let room = max_new.saturating_sub(generated.len() + 1);
            batch.extend(c.commit(tok, room)?);
            if remaining <= CLOSE_WINDOW_TOKENS {
                let after = remaining.saturating_sub(batch.len());
                if !c.in_call()? {
                    close_plan = None;
                } else if let Some(next) = c.shortest_close(after)? {
                    close_plan = Some(next);
                } else if let Some(plan) = close_plan.take() {
                    // This step would leave a call that can no longer close in budget: undo it and close.
                    c.rollback(batch.len())?;
                    c.force(&plan)?;
                    c.stats.closed_call = true;
                    c.stats.close_tokens = plan.len();
                    batch = plan;
                    lp = None;
                    closing = true;
                }
            }
        }
        for &t in &batch {
            generated.push(t);
            context.push(t);
            let text = utf8.push(&tokenizer.token_bytes(t));
            let (text, stopped) = match stops.push(&text) {
                StopScan::Emit(t) => (t, false),
                StopScan::Stopped(t) => (t, true),
            };
            if !emit(GenerateEvent::Token(TokenEvent {
                id: t,
                text,
                logprob: lp.take(),
                closes_call: closing,
            })) {
                finish = FinishReason::Cancelled;
                break 'decode;
            }
            if stopped {
                finish = FinishReason::StopString;
                break 'decode;
            }
        }
        if closing || generated.len() >= max_new {
            finish = FinishReason::Length;
            break;
        }
        if constraint.as_deref().is_some_and(|c| c.is_finished()) {
            finish = FinishReason::Eos;
            break;
        }
        if cancelled() {
            finish = FinishReason::Cancelled;
            break;
        }
        logits = model.forward(&batch, kv)?;
    }
    if finish != FinishReason::StopString {
        let tail = utf8.finish();
        let (StopScan::Emit(t) | StopScan::Stopped(t)) = stops.push(&tail);
        out.trailing_text.push_str(&t);
        out.trailing_text.push_str(&stops.finish());
    }
    out.finish = finish;
    out.completion_tokens = generated.len();
    out.decode_secs = decode_start.elapsed().as_secs_f64();
    out.constraint = constraint.map(|c| std::mem::take(&mut c.stats));
    Ok(out)
}

/// The summary of a request cancelled while it waited for the engine: nothing computed, nothing generated.
pub fn cancelled_before_start(req: &GenerateRequest) -> GenerateSummary {
    GenerateSummary {
        finish: FinishReason::Cancelled,
        prompt_tokens: req.prompt.len(),
        completion_tokens: 0,
        cached_tokens: 0,
        trailing_text: String::new(),
        prefill_secs: 0.0,
        decode_secs: 0.0,
        ttft_secs: 0.0,
        constraint: None,
    }
}

/// Longest common prefix between the tokens `kv` holds and `prompt`, leaving at least one prompt token to
/// compute.
fn kv_common_prefix(kv: &SeqKv, prompt: &[u32]) -> usize {
    let held = kv.tokens();
    let n = held.iter().zip(prompt).take_while(|(a, b)| a == b).count();
    n.min(prompt.len().saturating_sub(1))
}
