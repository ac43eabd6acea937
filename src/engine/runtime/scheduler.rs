//! The engine thread's scheduler (continuous batching, as vLLM's): requests wait in arrival order, run in a batch
//! of at most `max_num_seqs`, and every step is one forward pass over the tokens of many sequences — one decode
//! token (plus whatever a grammar forces) for each generating sequence, and chunks of prompts filling the rest of
//! a per-step token budget (`max_num_batched_tokens`: chunked prefill). New requests join at the next step and
//! finished ones leave at once.
//!
//! **KV memory** is the paged block pool ([`BlockManager`] over the model's [`PagedStore`]: host blocks for the
//! CPU engine, one device tensor per layer for candle's pass, on every device):
//! a sequence's prompt takes the cached blocks of its longest shared prefix (within its scope) and allocates the
//! rest as it goes. When a step needs a block and none is left, the latest-arrived running sequence is
//! preempted (its blocks freed, its full blocks left cached) and put back at the head of the queue, to be
//! recomputed from its tokens later with all its sampling state intact — never an error for a request that fits
//! alone.
//!
//! **Cancellation**: a request cancelled or whose client left is dropped at the start of the next step and its
//! blocks freed. **Sampling** of the sequences that got logits runs in parallel across them (grammar masks
//! included).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use serde::Serialize;
use tokio::sync::mpsc as tokio_mpsc;
use tokio_util::sync::CancellationToken;

use crate::engine::constraint::Constraint;
use crate::engine::error::{EngineError, Result};
use crate::engine::kv::blocks::{self, BlockManager, PrefixCacheStats, BLOCK_TOKENS};
use crate::engine::kv::{BatchSeq, KvDtype, PagedStore};
use crate::engine::model::Model;
use crate::engine::request::{FinishReason, GenerateEvent, GenerateRequest};
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

/// A request on its way to the engine thread.
pub(crate) struct Job {
    pub req: GenerateRequest,
    pub constraint: Option<Box<Constraint>>,
    pub cancel: CancellationToken,
    pub reply: tokio_mpsc::UnboundedSender<GenerateEvent>,
}

/// An embedding request for the model this scheduler runs (see `engine::decoder_embed`): run between steps.
pub(crate) struct EmbedJob {
    pub inputs: Vec<Vec<u32>>,
    pub pooling: crate::engine::encoder::Pooling,
    pub reply: tokio::sync::oneshot::Sender<Result<Vec<Vec<f32>>>>,
}

/// What the engine thread is asked to do.
pub(crate) enum Work {
    Generate(Box<Job>),
    Embed(EmbedJob),
}

/// Where a sequence's keys and values are.
enum Kv {
    /// Nothing held (waiting, preempted).
    None,
    /// Blocks of the pool, in position order, and the hashes of its registered full blocks.
    Paged { blocks: Vec<u32>, hashes: Vec<u64> },
}

struct Entry {
    seq: Sequence,
    kv: Kv,
    /// Positions whose keys and values are in the cache.
    computed: usize,
    /// Pending tokens are the output of its last step (fed whole, outside the prefill budget).
    decoding: bool,
    /// Speculative drafts fed after the pending tokens in this step (not part of the sequence's tokens).
    drafts: Vec<u32>,
    /// Prefix-cache use was counted (at the first admission; not again after a preemption).
    counted: bool,
}

/// The scheduler over one model, run on the engine thread until every handle is gone.
pub(crate) struct Scheduler {
    model: Model,
    tokenizer: Tokenizer,
    config: SchedulerConfig,
    jobs: mpsc::Receiver<Work>,
    waiting: VecDeque<Entry>,
    /// In arrival order.
    running: Vec<Entry>,
    store: PagedStore,
    manager: BlockManager,
    prefix: Arc<PrefixCacheStats>,
    stats: Arc<SchedulerStats>,
    /// What decode steps cost here: the price of a speculative draft token.
    cost: StepCost,
}

/// Before any verify step is measured: what one more token costs a single-token step, on the CPU engine (a
/// 2-core CPU is compute-bound even at one token: 0.5–0.7 measured by `cargo bench --bench verify_step`) and on
/// a GPU (bandwidth-bound decode).
const CPU_TOKEN_PRICE: f64 = 0.5;
const DEVICE_TOKEN_PRICE: f64 = 0.1;

/// Why blocks could not be had.
struct NoBlocks;

impl Scheduler {
    pub fn new(
        model: Model,
        tokenizer: Tokenizer,
        config: SchedulerConfig,
        jobs: mpsc::Receiver<Work>,
        prefix: Arc<PrefixCacheStats>,
        stats: Arc<SchedulerStats>,
    ) -> Result<Self> {
        let n_blocks =
            (config.kv_cache_bytes / model.paged_block_bytes(config.kv_cache_dtype)?).max(1);
        let store = model.new_paged_store(n_blocks, config.kv_cache_dtype)?;
        let manager = BlockManager::new(n_blocks, config.prefix_caching, prefix.clone());
        let cost = StepCost::new(match model.cpu_engine() {
            Some(_) => CPU_TOKEN_PRICE,
            None => DEVICE_TOKEN_PRICE,
        });
        Ok(Self {
            cost,
            model,
            tokenizer,
            config,
            jobs,
            waiting: VecDeque::new(),
            running: Vec::new(),
            store,
            manager,
            prefix,
            stats,
        })
    }

    /// Runs until every engine handle is dropped and no work is left.
    pub fn run(mut self) {
        while self.intake() {
            self.reap_cancelled();
            let plan = self.schedule();
            self.publish();
            if !plan.is_empty() {
                self.execute(&plan);
            }
            self.publish();
        }
    }

    fn publish(&self) {
        self.stats
            .running
            .store(self.running.len() as u64, Ordering::Relaxed);
        self.stats
            .waiting
            .store(self.waiting.len() as u64, Ordering::Relaxed);
    }

    /// Takes new requests: blocks while there is nothing to do. `false` when the handles are gone and no work
    /// is left.
    fn intake(&mut self) -> bool {
        if self.running.is_empty() && self.waiting.is_empty() {
            match self.jobs.recv() {
                Ok(work) => self.take(work),
                Err(_) => return false,
            }
        }
        while let Ok(work) = self.jobs.try_recv() {
            self.take(work);
        }
        self.publish();
        true
    }

    fn take(&mut self, work: Work) {
        match work {
            Work::Generate(job) => self.accept(*job),
            Work::Embed(job) => {
                // A client that left wants nothing; otherwise the pass runs now, between steps.
                if !job.reply.is_closed() {
                    let _ = job.reply.send(self.model.embed(&job.inputs, job.pooling));
                }
            }
        }
    }

    fn accept(&mut self, job: Job) {
        let Job {
            req,
            constraint,
            cancel,
            reply,
        } = job;
        if reply.is_closed() {
            return;
        }
        let trained = self.model.config.context_length;
        let ctx = self
            .config
            .max_model_len
            .map_or(trained, |n| n.min(trained));
        let spec = self.config.speculative.clone();
        match Sequence::new(
            req,
            constraint,
            cancel,
            reply.clone(),
            &self.tokenizer,
            ctx,
            &spec,
        ) {
            Ok(seq) => self.waiting.push_back(Entry {
                seq,
                kv: Kv::None,
                computed: 0,
                decoding: false,
                drafts: Vec::new(),
                counted: false,
            }),
            Err(e) => {
                let _ = reply.send(GenerateEvent::Error(e));
            }
        }
    }

    /// Ends every cancelled request, running or waiting, and frees what it held.
    fn reap_cancelled(&mut self) {
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
        e.drafts.clear();
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
    fn preempt(&mut self, i: usize) {
        let mut e = self.running.remove(i);
        self.release(&mut e);
        self.stats.preemptions.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            tokens = e.seq.tokens().len(),
            "KV pool full: preempted a sequence for recompute"
        );
        self.waiting.push_front(e);
    }

    /// Picks this step's work: `(index in running, tokens to feed)`.
    fn schedule(&mut self) -> Vec<(usize, usize)> {
        let mut budget = self.config.max_num_batched_tokens;
        let mut plan = Vec::new();
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
            let need = e.seq.tokens().len() - e.computed;
            e.drafts.clear();
            if e.decoding {
                let spare = budget.saturating_sub(need + later);
                if spare > 0 {
                    match e.seq.propose(spare, price) {
                        Ok(d) => e.drafts = d,
                        Err(err) => {
                            let e = self.running.remove(i);
                            self.end(e, Err(err));
                            continue;
                        }
                    }
                }
                // Drafts never cost a block another sequence needs: without room for them they are dropped.
                let with = e.computed + need + e.drafts.len();
                if !e.drafts.is_empty() && Self::ensure(&mut self.manager, e, with).is_err() {
                    e.drafts.clear();
                }
            }
            let n = if e.decoding { need } else { need.min(budget) };
            if n == 0 {
                i += 1;
                continue;
            }
            let positions = e.computed + n;
            if Self::ensure(&mut self.manager, e, positions).is_ok() {
                let n = n + e.drafts.len();
                plan.push((i, n));
                budget = budget.saturating_sub(n);
                i += 1;
                continue;
            }
            // Out of blocks: preempt the latest arrival (this one, if it is the latest).
            let last = self.running.len() - 1;
            if last > i || i > 0 {
                self.preempt(last);
                continue;
            }
            // Alone and still out of blocks: it fills the whole pool.
            let e = self.running.remove(i);
            let how = if e.decoding {
                Ok(FinishReason::Length)
            } else {
                Err(self.too_big(e.seq.tokens().len()))
            };
            self.end(e, how);
        }
        // Then waiting requests, first come first served, while there is room.
        while budget > 0 && self.running.len() < self.config.max_num_seqs {
            let Some(mut e) = self.waiting.pop_front() else {
                break;
            };
            self.attach(&mut e);
            let n = (e.seq.tokens().len() - e.computed).min(budget);
            let positions = e.computed + n;
            if Self::ensure(&mut self.manager, &mut e, positions).is_err() {
                let alone = self.running.is_empty();
                self.release(&mut e);
                if alone {
                    let err = self.too_big(e.seq.tokens().len());
                    self.end(e, Err(err));
                    continue;
                }
                self.waiting.push_front(e);
                break;
            }
            self.running.push(e);
            plan.push((self.running.len() - 1, n));
            budget = budget.saturating_sub(n);
        }
        plan
    }

    fn too_big(&self, tokens: usize) -> EngineError {
        EngineError::KvCacheTooSmall {
            tokens,
            capacity: self.manager.total() * BLOCK_TOKENS,
        }
    }

    /// Runs one forward pass over the plan, then samples every sequence that got logits (verifying its drafts),
    /// then records what is in the cache.
    fn execute(&mut self, plan: &[(usize, usize)]) {
        let fed: usize = plan.iter().map(|p| p.1).sum();
        self.stats.steps.fetch_add(1, Ordering::Relaxed);
        self.stats
            .batched_tokens
            .fetch_add(fed as u64, Ordering::Relaxed);
        // A panic inside a tensor op must not take the engine down with it: report it as an error.
        let started = std::time::Instant::now();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.forward(plan)));
        // Decode steps (no prompt chunk) teach the cost model what a token costs.
        if plan.iter().all(|&(i, _)| self.running[i].decoding) {
            self.cost.observe(fed, started.elapsed().as_secs_f64());
        }
        let logits = match outcome {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => return self.fail_plan(plan, &e.to_string()),
            Err(_) => return self.fail_plan(plan, "the engine panicked during generation"),
        };
        // Sampling, in parallel across the sequences that got logits: each running entry paired with its own.
        let mut by_index: Vec<Option<Vec<f32>>> = vec![None; self.running.len()];
        for (&(i, _), l) in plan.iter().zip(logits) {
            if !l.is_empty() {
                by_index[i] = Some(l);
            }
        }
        // Sampling, in parallel across the sequences that got logits, on the model's threads (the CPU engine's
        // own pool: its workers are the ones spinning for the next step, not a second pool's).
        let tokenizer = &self.tokenizer;
        // Per sequence: its index, entry and logits, and what sampling them gave.
        type Slot<'a> = (
            usize,
            &'a mut Entry,
            Vec<f32>,
            Option<Result<(Outcome, usize)>>,
        );
        let work: Vec<Mutex<Slot>> = self
            .running
            .iter_mut()
            .zip(by_index)
            .enumerate()
            .filter_map(|(i, (e, l))| l.map(|l| Mutex::new((i, e, l, None))))
            .collect();
        let step = |k: usize| {
            let mut w = work[k].lock().unwrap_or_else(|e| e.into_inner());
            let (_, e, l, out) = &mut *w;
            *out = Some(e.seq.verify(l, &e.drafts, tokenizer));
        };
        if work.len() > 1 {
            self.model.parallel_for(work.len(), &step);
        } else {
            (0..work.len()).for_each(step);
        }
        let results: Vec<(usize, Result<(Outcome, usize)>)> = work
            .into_iter()
            .filter_map(|w| {
                let (i, _, _, out) = w.into_inner().unwrap_or_else(|e| e.into_inner());
                out.map(|r| (i, r))
            })
            .collect();
        let mut accepted = vec![0; self.running.len()];
        let mut ended = Vec::new();
        for (i, r) in results {
            match r {
                Ok((outcome, a)) => {
                    accepted[i] = a;
                    match outcome {
                        Outcome::Continue => self.running[i].decoding = true,
                        Outcome::Finished(f) => ended.push((i, Ok(f))),
                    }
                }
                Err(e) => ended.push((i, Err(e))),
            }
        }
        // Positions computed (fed drafts count up to the last one confirmed; the keys and values past it are
        // overwritten when those positions are fed again), full blocks registered for reuse.
        for &(i, n) in plan {
            let e = &mut self.running[i];
            let drafts = std::mem::take(&mut e.drafts);
            if !drafts.is_empty() {
                self.stats.spec_drafts.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .spec_draft_tokens
                    .fetch_add(drafts.len() as u64, Ordering::Relaxed);
                self.stats
                    .spec_accepted_tokens
                    .fetch_add(accepted[i] as u64, Ordering::Relaxed);
                for pos in &self.stats.spec_accepted_per_pos[..accepted[i]] {
                    pos.fetch_add(1, Ordering::Relaxed);
                }
            }
            let before = e.computed;
            e.computed += n - drafts.len() + accepted[i];
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
        for (i, how) in ended.into_iter().rev() {
            let e = self.running.remove(i);
            self.end(e, how);
        }
    }

    /// The forward pass of a plan: per planned sequence, the logits of its last pending token and of each of its
    /// drafts, row after row (empty when it is mid-prompt).
    fn forward(&mut self, plan: &[(usize, usize)]) -> Result<Vec<Vec<f32>>> {
        let running = &self.running;
        // A sequence with drafts feeds its pending tokens, then the drafts.
        let fed_with_drafts: Vec<Vec<u32>> = running
            .iter()
            .map(|e| match e.drafts.is_empty() {
                true => Vec::new(),
                false => [&e.seq.tokens()[e.computed..], &e.drafts].concat(),
            })
            .collect();
        let batch: Vec<BatchSeq> = plan
            .iter()
            .map(|&(i, n)| {
                let e = &running[i];
                let blocks = match &e.kv {
                    Kv::Paged { blocks, .. } => blocks.as_slice(),
                    _ => &[],
                };
                let all = e.seq.tokens().len();
                let tokens: &[u32] = match e.drafts.is_empty() {
                    true => &e.seq.tokens()[e.computed..e.computed + n],
                    false => fed_with_drafts[i].as_slice(),
                };
                BatchSeq {
                    tokens,
                    blocks,
                    pos: e.computed,
                    logits: match e.computed + n - e.drafts.len() == all {
                        true => 1 + e.drafts.len(),
                        false => 0,
                    },
                }
            })
            .collect();
        self.model.forward_batch(&mut self.store, &batch)
    }

    /// Ends every sequence of a failed step with the error.
    fn fail_plan(&mut self, plan: &[(usize, usize)], message: &str) {
        tracing::error!(error = message, "a forward pass failed");
        let mut idx: Vec<usize> = plan.iter().map(|p| p.0).collect();
        idx.sort_unstable();
        for i in idx.into_iter().rev() {
            let e = self.running.remove(i);
            self.end(e, Err(EngineError::Internal(message.to_string())));
        }
    }
}
