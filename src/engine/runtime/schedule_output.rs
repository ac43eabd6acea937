//! The typed hand-over of one step between the [`Scheduler`](super::scheduler::Scheduler) and a
//! [`ModelRunner`](super::runner::ModelRunner): what the scheduler decided ([`SchedulerOutput`]: which sequences
//! run, which tokens each feeds at which positions, its block table and drafts) and what the runner gave back
//! ([`RunnerOutput`]: the rows each sequence sampled). Plain data, so the scheduler can be driven without a model.

use crate::engine::error::Result;
use crate::engine::request::{FinishReason, TokenLogprob};

/// A sequence's id inside the scheduler (arrival order).
pub(crate) type SeqId = u64;

/// Why a sequence feeds tokens this step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// A chunk of its prompt (or of its tokens, recomputed after a preemption), within the step's budget.
    Prefill,
    /// The tokens its last step produced (and any drafts after them).
    Decode,
}

/// One sequence's work in a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScheduledSeq {
    pub id: SeqId,
    pub phase: Phase,
    /// The tokens fed, at positions `pos..`: pending tokens, then [`drafts`](Self::drafts).
    pub tokens: Vec<u32>,
    /// Positions already in the cache (the first fed token's position).
    pub pos: usize,
    /// Its blocks in position order, covering `pos + tokens.len()` positions.
    pub blocks: Vec<u32>,
    /// The blocks at the end of [`blocks`](Self::blocks) allocated this step.
    pub new_blocks: usize,
    /// Speculative drafts fed after the pending tokens (the tail of [`tokens`](Self::tokens)).
    pub drafts: Vec<u32>,
    /// Logit rows wanted: 0 mid-prompt, else the last pending token's and one per draft.
    pub logits: usize,
}

/// What one step runs, and what the scheduling of it changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SchedulerOutput {
    /// Running sequences first (arrival order), then the ones admitted this step.
    pub scheduled: Vec<ScheduledSeq>,
    /// Sequences put back in the queue for recompute because the KV pool ran out.
    pub preempted: Vec<SeqId>,
    /// Sequences that ended while scheduling (their prompt or output cannot fit the pool, a draft failed).
    pub finished: Vec<SeqId>,
}

impl SchedulerOutput {
    /// Whether there is nothing to run.
    pub fn is_empty(&self) -> bool {
        self.scheduled.is_empty()
    }

    /// Tokens fed in the step, drafts included.
    pub fn num_tokens(&self) -> usize {
        self.scheduled.iter().map(|s| s.tokens.len()).sum()
    }
}

/// One logit row sampled: the token picked and whatever a grammar forces after it, or the output's end.
#[derive(Debug, Clone, Default)]
pub(crate) struct SampledRow {
    /// To append, in order (empty when the row ends the output without a token, as an EOS does).
    pub tokens: Vec<u32>,
    /// The picked token's log-probability, when the request asks for them.
    pub logprob: Option<TokenLogprob>,
    /// The tokens close a call that could no longer finish within `max_tokens`.
    pub closing: bool,
    /// The output ends after these tokens.
    pub end: Option<FinishReason>,
}

impl SampledRow {
    /// A row that yields `token` and goes on.
    #[cfg(test)]
    pub fn token(token: u32) -> Self {
        Self {
            tokens: vec![token],
            ..Self::default()
        }
    }
}

/// What the runner gives back for a [`SchedulerOutput`] it ran.
#[derive(Debug, Default)]
pub(crate) struct RunnerOutput {
    /// Per scheduled sequence, in order: the rows it sampled (none mid-prompt), or why sampling failed.
    pub sampled: Vec<Result<Vec<SampledRow>>>,
    /// How long the forward pass took (`None`: not measured); decode steps teach the scheduler what a token costs.
    pub forward_secs: Option<f64>,
}

/// A step that produced nothing (the forward pass failed or panicked): every sequence in it ends with this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepFailed(pub String);
