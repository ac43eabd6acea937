//! The engine's scheduler (continuous batching, as vLLM's): requests wait in arrival order, run in a batch of at
//! most `max_num_seqs`, and every step is one forward pass over the tokens of many sequences — one decode token
//! (plus whatever a grammar forces) for each generating sequence, and chunks of prompts filling the rest of a
//! per-step token budget (`max_num_batched_tokens`: chunked prefill). New requests join at the next step and
//! finished ones leave at once.
//!
//! It decides and keeps the books, and never touches the model: [`Scheduler::schedule`] returns a typed
//! [`SchedulerOutput`], a [`ModelRunner`](super::runner::ModelRunner) runs it, and [`Scheduler::update`] takes its
//! [`RunnerOutput`] back (tokens appended and sent, finishes, statistics, blocks registered for reuse).
//!
//! **KV memory** is the paged block pool's bookkeeping ([`BlockManager`]; the bytes live in the runner's store):
//! a sequence's prompt takes the cached blocks of its longest shared prefix (within its scope) and allocates the
//! rest as it goes. When a step needs a block and none is left, the latest-arrived running sequence is
//! preempted (its blocks freed, its full blocks left cached) and put back at the head of the queue, to be
//! recomputed from its tokens later with all its sampling state intact — never an error for a request that fits
//! alone.
//!
//! **Cancellation**: a request cancelled or whose client left is dropped at the start of the next step and its
//! blocks freed.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;

use crate::engine::error::{EngineError, Result};
use crate::engine::kv::blocks::{self, BlockManager, PrefixCacheStats, BLOCK_TOKENS};
use crate::engine::kv::KvDtype;
use crate::engine::request::FinishReason;
use crate::engine::runtime::schedule_output::{
    Phase, RunnerOutput, ScheduledSeq, SchedulerOutput, SeqId, StepFailed,
};
use crate::engine::runtime::sequence::{Outcome, Sequence};
use crate::engine::speculative::{SpeculativeConfig, StepCost, MAX_SPECULATIVE_TOKENS};
use crate::text::tokenizer::Tokenizer;

/// How the scheduler batches (vLLM's names).
#[derive(Debug, Clone, Serialize)]
pub struct SchedulerConfig {
    /// Sequences generating at once.
    pub max_num_seqs: usize,
    /// Tokens fed per step (decode tokens first, prompt chunks in what is left).
    pub max_num_batched_tokens: usize,
    /// Memory for the KV cache (the CPU engine's block pool; on candle's backends, kept sequences).
    pub kv_cache_bytes: usize,
    /// What the KV cache keeps keys and values as (vLLM's `--kv-cache-dtype`; `auto` is f16 on the CPU engine).
    pub kv_cache_dtype: KvDtype,
    /// Whether full blocks of a prompt are kept and shared with later prompts that start the same way.
    pub prefix_caching: bool,
    /// Speculative decoding: drafts verified in the batched step (the paged store only).
    pub speculative: SpeculativeConfig,
    /// The window served (prompt and output together; vLLM's `--max-model-len`): at most the model's own
    /// context length (`None`: the model's).
    pub max_model_len: Option<usize>,
}

/// Defaults for a CPU: enough sequences that 50 clients all start within a few steps, and prompt chunks small
/// enough that prompts finish their prefill in small groups (a step of 256 tokens takes ~0.6 s for SmolLM2 on 2
/// cores; at 50 clients 256 gave TTFT p50 1.8 s where 512 gave 2.4 s, at the same throughput).
pub const DEFAULT_MAX_NUM_SEQS: usize = 64;
pub const DEFAULT_MAX_NUM_BATCHED_TOKENS: usize = 256;
pub const DEFAULT_KV_CACHE_BYTES: usize = 1 << 30;

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_num_seqs: DEFAULT_MAX_NUM_SEQS,
            max_num_batched_tokens: DEFAULT_MAX_NUM_BATCHED_TOKENS,
            kv_cache_bytes: DEFAULT_KV_CACHE_BYTES,
            kv_cache_dtype: KvDtype::Auto,
            prefix_caching: true,
            speculative: SpeculativeConfig::default(),
            max_model_len: None,
        }
    }
}

impl SchedulerConfig {
    /// Checks the settings against each other.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.max_num_seqs == 0 {
            return Err("max_num_seqs must be at least 1".into());
        }
        if self.max_num_batched_tokens < self.max_num_seqs {
            return Err(format!(
                "max_num_batched_tokens ({}) must be at least max_num_seqs ({}): every running sequence \
                 decodes a token per step",
                self.max_num_batched_tokens, self.max_num_seqs
            ));
        }
        if self.kv_cache_bytes == 0 {
            return Err("kv_cache_bytes must be more than 0".into());
        }
        if self.max_model_len == Some(0) {
            return Err("max_model_len must be at least 1".into());
        }
        self.speculative.validate()
    }

    /// The window served for a model whose own context length is `trained`; an error when `max_model_len` asks
    /// for more than the model has (vLLM refuses that too).
    pub fn served_context(&self, trained: usize) -> std::result::Result<usize, String> {
        match self.max_model_len {
            Some(n) if n > trained => Err(format!(
                "max_model_len ({n}) is larger than the model's context length ({trained})"
            )),
            Some(n) => Ok(n),
            None => Ok(trained),
        }
    }
}

/// Live counts of the scheduler (for `/metrics`).
#[derive(Debug, Default)]
pub struct SchedulerStats {
    /// Sequences in the running batch.
    pub running: AtomicU64,
    /// Requests queued in the engine (including preempted ones).
    pub waiting: AtomicU64,
    /// Sequences preempted because the KV pool ran out.
    pub preemptions: AtomicU64,
    /// Forward passes run.
    pub steps: AtomicU64,
    /// Tokens fed, over all steps.
    pub batched_tokens: AtomicU64,
    /// Speculative decoding: verify steps that carried drafts, per sequence (vLLM's `num_drafts`).
    pub spec_drafts: AtomicU64,
    /// Draft tokens verified.
    pub spec_draft_tokens: AtomicU64,
    /// Draft tokens accepted.
    pub spec_accepted_tokens: AtomicU64,
    /// Draft tokens accepted at each position of a draft (the first, the second, …).
    pub spec_accepted_per_pos: [AtomicU64; MAX_SPECULATIVE_TOKENS],
}

/// Where a sequence's keys and values are.
enum Kv {
    /// Nothing held (waiting, preempted).
    None,
    /// Blocks of the pool, in position order, and the hashes of its registered full blocks.
    Paged { blocks: Vec<u32>, hashes: Vec<u64> },
}

impl Kv {
    fn blocks(&self) -> &[u32] {
        match self {
            Kv::Paged { blocks, .. } => blocks,
            Kv::None => &[],
        }
    }
}

struct Entry {
    id: SeqId,
    seq: Sequence,
    kv: Kv,
    /// Positions whose keys and values are in the cache.
    computed: usize,
    /// Pending tokens are the output of its last step (fed whole, outside the prefill budget).
    decoding: bool,
    /// Prefix-cache use was counted (at the first admission; not again after a preemption).
    counted: bool,
}

/// The scheduler over one model's KV pool: the queue, the running batch and who owns which block.
pub(crate) struct Scheduler {
    config: SchedulerConfig,
    /// Turns appended tokens into text.
    tokenizer: Tokenizer,
    waiting: VecDeque<Entry>,
    /// In arrival order.
    running: Vec<Entry>,
    manager: BlockManager,
    prefix: Arc<PrefixCacheStats>,
    stats: Arc<SchedulerStats>,
    /// What decode steps cost here: the price of a speculative draft token.
    cost: StepCost,
    next_id: SeqId,
}

/// Why blocks could not be had.
struct NoBlocks;

impl Scheduler {
    /// A scheduler over a pool of `n_blocks` blocks, where one more token costs a single-token step
    /// `token_price` of it before any step is measured.
    pub fn new(
        config: SchedulerConfig,
        n_blocks: usize,
        token_price: f64,
        tokenizer: Tokenizer,
        prefix: Arc<PrefixCacheStats>,
        stats: Arc<SchedulerStats>,
    ) -> Self {
        let manager = BlockManager::new(n_blocks, config.prefix_caching, prefix.clone());
        Self {
            config,
            tokenizer,
            waiting: VecDeque::new(),
            running: Vec::new(),
            manager,
            prefix,
            stats,
            cost: StepCost::new(token_price),
            next_id: 0,
        }
    }

    /// Queues a new request's sequence; returns its id.
    pub fn add(&mut self, seq: Sequence) -> SeqId {
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push_back(Entry {
            id,
            seq,
            kv: Kv::None,
            computed: 0,
            decoding: false,
            counted: false,
        });
        id
    }

    /// Whether nothing is running or waiting.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// Updates the gauges of the running batch and the queue.
    pub fn publish(&self) {
        self.stats
            .running
            .store(self.running.len() as u64, Ordering::Relaxed);
        self.stats
            .waiting
            .store(self.waiting.len() as u64, Ordering::Relaxed);
    }

    /// Ends every cancelled request, running or waiting, and frees what it held.
    pub fn reap_cancelled(&mut self) {
        for i in (0..self.running.len()).rev() {
            if self.running[i].seq.is_cancelled() {
                let e = self.running.remove(i);
                self.end(e, Ok(FinishReason::Cancelled));
            }
        }
        for i in (0..self.waiting.len()).rev() {
            if self.waiting[i].seq.is_cancelled() {
                if let Some(e) = self.waiting.remove(i) {
                    self.end(e, Ok(FinishReason::Cancelled));
                }
            }
        }
    }

    /// Frees what `e` (already out of both queues) holds, updates the gauges, then sends its end — so a client
    /// that reads `/metrics` after its answer never sees itself still running.
    fn end(&mut self, mut e: Entry, how: Result<FinishReason>) {
        self.release(&mut e);
        self.publish();
        match how {
            Ok(finish) => e.seq.finish(finish),
            Err(err) => e.seq.fail(err),
        }
    }

    /// Gives `e`'s blocks back to the pool (full ones stay cached).
    fn release(&mut self, e: &mut Entry) {
        if let Kv::Paged { blocks, .. } = std::mem::replace(&mut e.kv, Kv::None) {
            self.manager.release(&blocks);
        }
        e.computed = 0;
        e.decoding = false;
    }

    /// Makes sure `e`'s blocks cover `positions` positions.
    fn ensure(
        manager: &mut BlockManager,
        e: &mut Entry,
        positions: usize,
    ) -> std::result::Result<(), NoBlocks> {
        let Kv::Paged { blocks, .. } = &mut e.kv else {
            return Ok(());
        };
        let need = positions
            .div_ceil(BLOCK_TOKENS)
            .saturating_sub(blocks.len());
        if manager.available() < need {
            return Err(NoBlocks);
        }
        for _ in 0..need {
            blocks.push(manager.allocate().ok_or(NoBlocks)?);
        }
        Ok(())
    }

    /// Takes `e`'s cached prefix (a fresh admission or a preempted sequence coming back).
    fn attach(&mut self, e: &mut Entry) {
        let tokens = e.seq.tokens();
        // At least one token is always computed, so there are logits to sample from.
        let limit = tokens.len() - 1;
        let hashes = blocks::chain(e.seq.scope(), tokens);
        let got = self.manager.lookup(&hashes, tokens, limit / BLOCK_TOKENS);
        e.computed = got.len() * BLOCK_TOKENS;
        e.kv = Kv::Paged {
            hashes: hashes[..got.len()].to_vec(),
            blocks: got,
        };
        if !e.counted {
            e.counted = true;
            self.prefix.record(e.seq.prompt_len(), e.computed);
            e.seq.start(e.computed);
        }
    }

    /// Puts running sequence `i` back at the head of the queue, its KV state freed, to be recomputed later.
    fn preempt(&mut self, i: usize) -> SeqId {
        let mut e = self.running.remove(i);
        self.release(&mut e);
        self.stats.preemptions.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            tokens = e.seq.tokens().len(),
            "KV pool full: preempted a sequence for recompute"
        );
        let id = e.id;
        self.waiting.push_front(e);
        id
    }

    /// What running sequence `i` feeds this step: `n` tokens from its first uncomputed position, then `drafts`.
    fn scheduled(&self, i: usize, n: usize, drafts: Vec<u32>, new_blocks: usize) -> ScheduledSeq {
        let e = &self.running[i];
        let tokens = e.seq.tokens();
        let last = e.computed + n == tokens.len();
        ScheduledSeq {
            id: e.id,
            phase: match e.decoding {
                true => Phase::Decode,
                false => Phase::Prefill,
            },
            tokens: [&tokens[e.computed..e.computed + n], &drafts].concat(),
            pos: e.computed,
            blocks: e.kv.blocks().to_vec(),
            new_blocks,
            logits: match last {
                true => 1 + drafts.len(),
                false => 0,
            },
            drafts,
        }
    }

    /// Picks this step's work: the decode tokens (and drafts) of every running sequence and prompt chunks within
    /// the budget, preempting where the pool runs out; then admits waiting requests while there is room.
    pub fn schedule(&mut self) -> SchedulerOutput {
        let mut budget = self.config.max_num_batched_tokens;
        let mut out = SchedulerOutput::default();
        // The decode tokens of every running sequence come first; drafts only take what they leave.
        let pending = |e: &Entry| match e.decoding {
            true => e.seq.tokens().len() - e.computed,
            false => 0,
        };
        let decoding = self.running.iter().filter(|e| e.decoding).count();
        let price = self.cost.price(decoding);
        // Running sequences first, in arrival order: decode tokens always (and drafts within the budget),
        // prompt chunks within the budget.
        let mut i = 0;
        while i < self.running.len() {
            let later: usize = self.running[i + 1..].iter().map(pending).sum();
            let e = &mut self.running[i];
            let held = e.kv.blocks().len();
            let need = e.seq.tokens().len() - e.computed;
            let mut drafts = Vec::new();
            if e.decoding {
                let spare = budget.saturating_sub(need + later);
                if spare > 0 {
                    match e.seq.propose(spare, price) {
                        Ok(d) => drafts = d,
                        Err(err) => {
                            let e = self.running.remove(i);
                            out.finished.push(e.id);
                            self.end(e, Err(err));
                            continue;
                        }
                    }
                }
                // Drafts never cost a block another sequence needs: without room for them they are dropped.
                let with = e.computed + need + drafts.len();
                if !drafts.is_empty() && Self::ensure(&mut self.manager, e, with).is_err() {
                    drafts.clear();
                }
            }
            let n = if e.decoding { need } else { need.min(budget) };
            if n == 0 {
                i += 1;
                continue;
            }
            let positions = e.computed + n;
            if Self::ensure(&mut self.manager, e, positions).is_ok() {
                let new_blocks = e.kv.blocks().len() - held;
                let s = self.scheduled(i, n, drafts, new_blocks);
                budget = budget.saturating_sub(s.tokens.len());
                out.scheduled.push(s);
                i += 1;
                continue;
            }
            // Out of blocks: preempt the latest arrival (this one, if it is the latest).
            let last = self.running.len() - 1;
            if last > i || i > 0 {
                let id = self.preempt(last);
                out.preempted.push(id);
                continue;
            }
            // Alone and still out of blocks: it fills the whole pool.
            let e = self.running.remove(i);
            let how = if e.decoding {
                Ok(FinishReason::Length)
            } else {
                Err(self.too_big(e.seq.tokens().len()))
            };
            out.finished.push(e.id);
            self.end(e, how);
        }
        // Then waiting requests, first come first served, while there is room.
        while budget > 0 && self.running.len() < self.config.max_num_seqs {
            let Some(mut e) = self.waiting.pop_front() else {
                break;
            };
            self.attach(&mut e);
            let held = e.kv.blocks().len();
            let n = (e.seq.tokens().len() - e.computed).min(budget);
            let positions = e.computed + n;
            if Self::ensure(&mut self.manager, &mut e, positions).is_err() {
                let alone = self.running.is_empty();
                self.release(&mut e);
                if alone {
                    let err = self.too_big(e.seq.tokens().len());
                    out.finished.push(e.id);
                    self.end(e, Err(err));
                    continue;
                }
                self.waiting.push_front(e);
                break;
            }
            let new_blocks = e.kv.blocks().len() - held;
            self.running.push(e);
            let s = self.scheduled(self.running.len() - 1, n, Vec::new(), new_blocks);
            budget = budget.saturating_sub(s.tokens.len());
            out.scheduled.push(s);
        }
        out
    }

    fn too_big(&self, tokens: usize) -> EngineError {
        EngineError::KvCacheTooSmall {
            tokens,
            capacity: self.manager.total() * BLOCK_TOKENS,
        }
    }

    /// The sequences `output` schedules, in its order, for the runner to sample (`None`: one is not running,
    /// which `schedule` never leaves).
    pub fn scheduled_sequences(&mut self, output: &SchedulerOutput) -> Option<Vec<&mut Sequence>> {
        let mut by_id: HashMap<SeqId, &mut Sequence> = self
            .running
            .iter_mut()
            .map(|e| (e.id, &mut e.seq))
            .collect();
        output
            .scheduled
            .iter()
            .map(|s| by_id.remove(&s.id))
            .collect()
    }

    fn position(&self, id: SeqId) -> Option<usize> {
        self.running.iter().position(|e| e.id == id)
    }

    /// Takes back what the runner made of `output`: appends and sends each sequence's sampled tokens, ends the
    /// ones that finished, counts the step and its drafts, records the positions now in the cache (fed drafts
    /// count up to the last one confirmed; the keys and values past it are overwritten when those positions are
    /// fed again) and registers full blocks for reuse.
    pub fn update(
        &mut self,
        output: &SchedulerOutput,
        result: std::result::Result<RunnerOutput, StepFailed>,
    ) {
        let fed = output.num_tokens();
        self.stats.steps.fetch_add(1, Ordering::Relaxed);
        self.stats
            .batched_tokens
            .fetch_add(fed as u64, Ordering::Relaxed);
        let result = match result {
            Ok(r) if r.sampled.len() == output.scheduled.len() => r,
            Ok(r) => {
                let message = format!(
                    "the runner answered for {} of {} sequences",
                    r.sampled.len(),
                    output.scheduled.len()
                );
                return self.fail_step(output, &message);
            }
            Err(StepFailed(message)) => return self.fail_step(output, &message),
        };
        // Decode steps (no prompt chunk) teach the cost model what a token costs.
        if let Some(secs) = result.forward_secs {
            if output.scheduled.iter().all(|s| s.phase == Phase::Decode) {
                self.cost.observe(fed, secs);
            }
        }
        let mut ended = Vec::new();
        for (s, sampled) in output.scheduled.iter().zip(result.sampled) {
            let Some(i) = self.position(s.id) else {
                continue;
            };
            let e = &mut self.running[i];
            let mut accepted = 0;
            if s.logits > 0 {
                match sampled {
                    Ok(rows) if rows.is_empty() => ended.push((
                        i,
                        Err(EngineError::Internal("no token sampled from logits".into())),
                    )),
                    Ok(rows) => {
                        let (outcome, a) = e.seq.apply(rows, &s.drafts, &self.tokenizer);
                        accepted = a;
                        match outcome {
                            Outcome::Continue => e.decoding = true,
                            Outcome::Finished(f) => ended.push((i, Ok(f))),
                        }
                    }
                    Err(err) => ended.push((i, Err(err))),
                }
            }
            if !s.drafts.is_empty() {
                self.stats.spec_drafts.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .spec_draft_tokens
                    .fetch_add(s.drafts.len() as u64, Ordering::Relaxed);
                self.stats
                    .spec_accepted_tokens
                    .fetch_add(accepted as u64, Ordering::Relaxed);
                for pos in &self.stats.spec_accepted_per_pos[..accepted] {
                    pos.fetch_add(1, Ordering::Relaxed);
                }
            }
            let before = e.computed;
            e.computed += s.tokens.len() - s.drafts.len() + accepted;
            if let Kv::Paged { blocks, hashes } = &mut e.kv {
                let tokens = e.seq.tokens();
                for b in before / BLOCK_TOKENS..e.computed / BLOCK_TOKENS {
                    if b < hashes.len() {
                        continue;
                    }
                    let parent = hashes
                        .last()
                        .copied()
                        .unwrap_or_else(|| blocks::root_hash(e.seq.scope()));
                    let span = &tokens[b * BLOCK_TOKENS..(b + 1) * BLOCK_TOKENS];
                    let h = blocks::block_hash(parent, span);
                    self.manager.register(blocks[b], h, span);
                    hashes.push(h);
                }
            }
        }
        ended.sort_by_key(|&(i, _)| i);
        for (i, how) in ended.into_iter().rev() {
            let e = self.running.remove(i);
            self.end(e, how);
        }
    }

    /// Ends every sequence of a failed step with the error.
    fn fail_step(&mut self, output: &SchedulerOutput, message: &str) {
        tracing::error!(error = message, "a forward pass failed");
        let mut idx: Vec<usize> = output
            .scheduled
            .iter()
            .filter_map(|s| self.position(s.id))
            .collect();
        idx.sort_unstable();
        for i in idx.into_iter().rev() {
            let e = self.running.remove(i);
            self.end(e, Err(EngineError::Internal(message.to_string())));
        }
    }
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
