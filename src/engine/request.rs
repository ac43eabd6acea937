//! What a generation is asked for and what it reports: the request, its token events and summary, and the checks
//! made before any work. The generation itself is a [`Sequence`](crate::engine::runtime::sequence::Sequence) driven by the scheduler.

use serde::Serialize;

use crate::engine::constraint::{ConstraintSpec, ConstraintStats};
use crate::engine::error::{EngineError, Result};
use crate::engine::sampler::SamplingParams;
use crate::engine::speculative::SpecStats;

/// Within this many tokens of `max_tokens`, a constrained call in progress is watched: each step keeps a way to
/// close it in the budget left (see [`super::constraint::close`]), and a step that would lose the last one is
/// replaced by that close.
pub const CLOSE_WINDOW_TOKENS: usize = 64;

/// What to generate. The prompt is already tokenized (rendering and tokenizing happen outside the engine
/// thread so the model is never idle waiting for them).
#[derive(Debug, Clone, Default)]
pub struct GenerateRequest {
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    /// `None`: until EOS, a stop string or a full context window.
    pub max_tokens: Option<usize>,
    pub stop: Vec<String>,
    /// Tokens that end the generation besides the model's EOS ids (a FIM model's file separator and padding).
    pub stop_tokens: Vec<u32>,
    /// Keep going through EOS (benchmarks).
    pub ignore_eos: bool,
    /// Return the chosen token's log-probability and this many alternatives.
    pub logprobs: Option<usize>,
    /// Tools, `tool_choice`, `response_format`: compiled into a grammar the output must follow. `ignore_eos` does
    /// not apply under a grammar.
    pub constraint: Option<ConstraintSpec>,
    /// Who may share KV prefixes with whom: the prefix cache reuses (by cache key or by content) only sequences
    /// left by requests of the same scope. `None` is a scope of its own (see `kv/blocks.rs`).
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
    /// From the engine taking the request to its first scheduled step (waiting for a batch slot or KV blocks).
    pub queue_secs: f64,
    pub prefill_secs: f64,
    pub decode_secs: f64,
    /// From the start of prefill to the first sampled token.
    pub ttft_secs: f64,
    /// What the grammar cost, when there was one.
    pub constraint: Option<ConstraintStats>,
    /// What speculative decoding drafted and got accepted, when it was on.
    pub speculative: Option<SpecStats>,
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

/// The summary of a request cancelled while it waited for the engine: nothing computed, nothing generated.
pub fn cancelled_before_start(req: &GenerateRequest) -> GenerateSummary {
    GenerateSummary {
        finish: FinishReason::Cancelled,
        prompt_tokens: req.prompt.len(),
        completion_tokens: 0,
        cached_tokens: 0,
        trailing_text: String::new(),
        queue_secs: 0.0,
        prefill_secs: 0.0,
        decode_secs: 0.0,
        ttft_secs: 0.0,
        constraint: None,
        speculative: None,
    }
}
