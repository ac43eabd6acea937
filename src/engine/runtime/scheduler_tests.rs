//! The scheduler driven by a fake runner, no model: admission, chunked prefill, prefix reuse, preemption and
//! recompute, speculative accept/reject and cancellation, each checked to the token and the block.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc as tokio_mpsc;
use tokio_util::sync::CancellationToken;

use crate::engine::kv::blocks::{PrefixCacheStats, BLOCK_TOKENS};
use crate::engine::request::{FinishReason, GenerateEvent, GenerateRequest, GenerateSummary};
use crate::engine::runtime::runner::ModelRunner;
use crate::engine::runtime::schedule_output::{
    Phase, RunnerOutput, SampledRow, ScheduledSeq, SchedulerOutput, SeqId, StepFailed,
};
use crate::engine::runtime::scheduler::{Scheduler, SchedulerConfig, SchedulerStats};
use crate::engine::runtime::sequence::Sequence;
use crate::engine::speculative::SpeculativeConfig;
use crate::text::tokenizer::Tokenizer;

const VOCAB: usize = 1 << 16;
const EOS: u32 = 0;
const CTX: usize = 4096;
/// Tokens a fake rejection answers with (never in a prompt or a draft).
const REJECTED: u32 = 999;

/// The fake model's next token for sequence `id` at position `pos`.
type TokenFn = fn(SeqId, usize) -> u32;

/// A different token for every sequence and position: no draft ever matches it.
fn unique(id: SeqId, pos: usize) -> u32 {
    10_000 + id as u32 * 1_000 + pos as u32
}

/// The cycle `100..108`, whatever the sequence: prompt lookup drafts it.
fn cycle(_: SeqId, pos: usize) -> u32 {
    100 + (pos % 8) as u32
}

/// Answers every step with `token_fn`'s tokens, accepting at most `accept` drafts per verify, and checks that
/// each fed sequence's cached positions hold its own tokens (a block table pointing at the wrong bytes fails).
struct FakeRunner {
    token_fn: TokenFn,
    accept: usize,
    /// Every step asked for.
    steps: Vec<SchedulerOutput>,
    /// What each block holds, per position.
    kv: HashMap<u32, [Option<u32>; BLOCK_TOKENS]>,
}

impl FakeRunner {
    fn rows(&self, s: &ScheduledSeq) -> Vec<SampledRow> {
        if s.logits == 0 {
            return Vec::new();
        }
        // The position of the first token this step produces.
        let next = s.pos + s.tokens.len() - s.drafts.len();
        let k = self.accept.min(s.drafts.len());
        let mut rows: Vec<SampledRow> = s.drafts[..k]
            .iter()
            .map(|&t| SampledRow::token(t))
            .collect();
        let own = match k < s.drafts.len() {
            true => REJECTED,
            false => (self.token_fn)(s.id, next + k),
        };
        rows.push(SampledRow::token(own));
        rows
    }
}

impl ModelRunner for FakeRunner {
    fn execute(
        &mut self,
        output: &SchedulerOutput,
        seqs: &mut [&mut Sequence],
    ) -> Result<RunnerOutput, StepFailed> {
        assert_eq!(seqs.len(), output.scheduled.len());
        for (s, seq) in output.scheduled.iter().zip(seqs.iter()) {
            assert!(s.blocks.len() * BLOCK_TOKENS >= s.pos + s.tokens.len());
            for p in 0..s.pos {
                let held = self
                    .kv
                    .get(&s.blocks[p / BLOCK_TOKENS])
                    .map(|b| b[p % BLOCK_TOKENS]);
                assert_eq!(
                    held,
                    Some(Some(seq.tokens()[p])),
                    "sequence {} position {p}",
                    s.id
                );
            }
            for (j, &t) in s.tokens.iter().enumerate() {
                let p = s.pos + j;
                self.kv
                    .entry(s.blocks[p / BLOCK_TOKENS])
                    .or_insert([None; BLOCK_TOKENS])[p % BLOCK_TOKENS] = Some(t);
            }
        }
        self.steps.push(output.clone());
        Ok(RunnerOutput {
            sampled: output.scheduled.iter().map(|s| Ok(self.rows(s))).collect(),
            forward_secs: None,
        })
    }
}

/// One request's receiving end.
struct Client {
    id: SeqId,
    rx: tokio_mpsc::UnboundedReceiver<GenerateEvent>,
    cancel: CancellationToken,
    tokens: Vec<u32>,
    done: Option<GenerateSummary>,
}

impl Client {
    /// Reads what has arrived.
    fn drain(&mut self) {
        while let Ok(ev) = self.rx.try_recv() {
            match ev {
                GenerateEvent::Token(t) => self.tokens.push(t.id),
                GenerateEvent::Done(s) => self.done = Some(s),
                GenerateEvent::Error(e) => panic!("sequence {}: {e}", self.id),
            }
        }
    }

    fn finish(&mut self) -> Option<FinishReason> {
        self.drain();
        self.done.as_ref().map(|d| d.finish)
    }
}

struct Harness {
    sched: Scheduler,
    runner: FakeRunner,
    tokenizer: Tokenizer,
    stats: Arc<SchedulerStats>,
}

impl Harness {
    fn new(config: SchedulerConfig, n_blocks: usize, token_fn: TokenFn, accept: usize) -> Self {
        let tokenizer = Tokenizer::for_ids(VOCAB, EOS);
        let stats = Arc::new(SchedulerStats::default());
        // A free draft token: drafts as long as the lookup and the budget allow.
        let sched = Scheduler::new(
            config,
            n_blocks,
            0.0,
            tokenizer.clone(),
            Arc::new(PrefixCacheStats::default()),
            stats.clone(),
        );
        let runner = FakeRunner {
            token_fn,
            accept,
            steps: Vec::new(),
            kv: HashMap::new(),
        };
        Self {
            sched,
            runner,
            tokenizer,
            stats,
        }
    }

    fn submit(&mut self, prompt: Vec<u32>, max_tokens: usize, spec: &SpeculativeConfig) -> Client {
        let (tx, rx) = tokio_mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let req = GenerateRequest {
            prompt,
            max_tokens: Some(max_tokens),
            ..GenerateRequest::default()
        };
        let seq = Sequence::new(req, None, cancel.clone(), tx, &self.tokenizer, CTX, spec).unwrap();
        let id = self.sched.add(seq);
        Client {
            id,
            rx,
            cancel,
            tokens: Vec::new(),
            done: None,
        }
    }

    /// One step as the engine loop runs it.
    fn step(&mut self) -> SchedulerOutput {
        self.sched.reap_cancelled();
        let output = self.sched.schedule();
        if !output.is_empty() {
            let result = {
                let mut seqs = self.sched.scheduled_sequences(&output).unwrap();
                self.runner.execute(&output, &mut seqs)
            };
            self.sched.update(&output, result);
        }
        output
    }

    /// Steps until nothing is left; returns how many steps ran.
    fn run(&mut self) -> usize {
        let mut n = 0;
        while !self.sched.is_idle() {
            self.step();
            n += 1;
            assert!(n < 1_000, "the scheduler does not finish");
        }
        n
    }

    fn used_blocks(&self) -> usize {
        self.sched.manager.used()
    }
}

fn config(max_num_seqs: usize, max_num_batched_tokens: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_num_seqs,
        max_num_batched_tokens,
        ..SchedulerConfig::default()
    }
}

fn off() -> SpeculativeConfig {
    SpeculativeConfig::off()
}

/// `n` prompt tokens starting at `first`.
fn prompt(first: u32, n: usize) -> Vec<u32> {
    (first..first + n as u32).collect()
}

/// (id, phase, tokens fed, position, logit rows) of each scheduled sequence.
fn shape(out: &SchedulerOutput) -> Vec<(SeqId, Phase, usize, usize, usize)> {
    out.scheduled
        .iter()
        .map(|s| (s.id, s.phase, s.tokens.len(), s.pos, s.logits))
        .collect()
}

#[test]
fn admission_stops_at_max_num_seqs_and_the_token_budget() {
    let mut h = Harness::new(config(2, 40), 64, unique, 0);
    let mut clients: Vec<Client> = (0..3)
        .map(|i| h.submit(prompt(1 + 100 * i, 30), 2, &off()))
        .collect();

    let first = h.step();
    // The first prompt whole, the second in what is left of the budget, the third not at all (two running).
    assert_eq!(
        shape(&first),
        [(0, Phase::Prefill, 30, 0, 1), (1, Phase::Prefill, 10, 0, 0)]
    );
    assert_eq!((h.sched.running.len(), h.sched.waiting.len()), (2, 1));

    let second = h.step();
    // The first decodes, the second's prompt goes on; the third still waits for a free slot.
    assert_eq!(
        shape(&second),
        [(0, Phase::Decode, 1, 30, 1), (1, Phase::Prefill, 20, 10, 1)]
    );
    assert_eq!(second.num_tokens(), 21);
    // The first had its two tokens and left: the third gets its slot.
    let third = h.step();
    assert_eq!(
        shape(&third),
        [(1, Phase::Decode, 1, 30, 1), (2, Phase::Prefill, 30, 0, 1)]
    );
    assert_eq!(h.run(), 1);
    for c in &mut clients {
        assert_eq!(c.finish(), Some(FinishReason::Length));
        assert_eq!(c.tokens, [unique(c.id, 30), unique(c.id, 31)]);
    }
    assert_eq!(h.stats.steps.load(Ordering::Relaxed), 4);
    assert_eq!(
        h.stats.batched_tokens.load(Ordering::Relaxed),
        40 + 21 + 31 + 1
    );
    assert_eq!(h.used_blocks(), 0);
}

#[test]
fn a_long_prompt_is_prefilled_in_chunks() {
    let mut h = Harness::new(config(4, 32), 64, unique, 0);
    let mut c = h.submit(prompt(1, 80), 2, &off());
    let chunks: Vec<(usize, usize, usize, usize, usize)> = (0..3)
        .map(|_| {
            let out = h.step();
            let s = &out.scheduled[0];
            (
                s.tokens.len(),
                s.pos,
                s.logits,
                s.blocks.len(),
                s.new_blocks,
            )
        })
        .collect();
    // 32 + 32 + 16 prompt tokens; logits only for the last chunk; blocks allocated as positions need them.
    assert_eq!(
        chunks,
        [(32, 0, 0, 2, 2), (32, 32, 0, 4, 2), (16, 64, 1, 5, 1)]
    );
    assert_eq!(h.run(), 1);
    assert_eq!(c.finish(), Some(FinishReason::Length));
    assert_eq!(c.tokens, [unique(0, 80), unique(0, 81)]);
}

#[test]
fn a_shared_full_block_prefix_is_reused() {
    let mut h = Harness::new(config(4, 256), 64, unique, 0);
    let shared = prompt(1, 2 * BLOCK_TOKENS);
    let mut a = h.submit([shared.clone(), prompt(500, 8)].concat(), 1, &off());
    let first = h.step();
    assert_eq!(shape(&first), [(0, Phase::Prefill, 40, 0, 1)]);
    let a_blocks = first.scheduled[0].blocks.clone();
    assert_eq!(a.finish(), Some(FinishReason::Length));
    assert!(h.sched.is_idle());

    let mut b = h.submit([shared, prompt(700, 5)].concat(), 1, &off());
    let out = h.step();
    // Only what follows the two cached blocks is fed; those blocks are the first request's.
    assert_eq!(shape(&out), [(1, Phase::Prefill, 5, 2 * BLOCK_TOKENS, 1)]);
    let s = &out.scheduled[0];
    assert_eq!(s.blocks[..2], a_blocks[..2]);
    assert_eq!((s.blocks.len(), s.new_blocks), (3, 1));
    assert_eq!(b.finish(), Some(FinishReason::Length));
    assert_eq!(
        b.done.as_ref().map(|d| d.cached_tokens),
        Some(2 * BLOCK_TOKENS)
    );
    assert_eq!(b.tokens, [unique(1, 37)]);
}

#[test]
fn a_preempted_sequence_is_recomputed_and_ends_the_same() {
    // Two sequences that each grow to three blocks, in a pool of four.
    let mut h = Harness::new(config(4, 64), 4, unique, 0);
    let mut clients = [
        h.submit(prompt(1, BLOCK_TOKENS), 20, &off()),
        h.submit(prompt(200, BLOCK_TOKENS), 20, &off()),
    ];
    let outputs: Vec<SchedulerOutput> = (0..23).map(|_| h.step()).collect();
    assert!(h.sched.is_idle());
    // At position 32 the first needs a third block: the later arrival is preempted.
    let preempted: Vec<(usize, Vec<SeqId>)> = outputs
        .iter()
        .enumerate()
        .filter(|(_, o)| !o.preempted.is_empty())
        .map(|(i, o)| (i, o.preempted.clone()))
        .collect();
    assert_eq!(preempted, [(17, vec![1])]);
    assert_eq!(shape(&outputs[17]), [(0, Phase::Decode, 1, 32, 1)]);
    // It waits until the first is done, then recomputes what its cached prompt block does not hold.
    assert_eq!(shape(&outputs[19]), [(0, Phase::Decode, 1, 34, 1)]);
    assert_eq!(shape(&outputs[20]), [(1, Phase::Prefill, 17, 16, 1)]);
    assert_eq!(outputs[20].scheduled[0].new_blocks, 2);
    assert_eq!(h.stats.preemptions.load(Ordering::Relaxed), 1);
    for c in &mut clients {
        assert_eq!(c.finish(), Some(FinishReason::Length));
        let want: Vec<u32> = (16..36).map(|p| unique(c.id, p)).collect();
        assert_eq!(c.tokens, want);
    }
    assert_eq!(h.used_blocks(), 0);
}

fn speculative() -> SpeculativeConfig {
    SpeculativeConfig {
        num_speculative_tokens: 4,
        ..SpeculativeConfig::default()
    }
}

#[test]
fn drafts_rejected_after_two_are_rolled_back() {
    let mut h = Harness::new(config(4, 64), 64, cycle, 2);
    let cycle_prompt: Vec<u32> = (0..16).map(|p| cycle(0, p)).collect();
    let mut c = h.submit(cycle_prompt, 6, &speculative());
    assert_eq!(shape(&h.step()), [(0, Phase::Prefill, 16, 0, 1)]);

    let verify = h.step();
    let s = &verify.scheduled[0];
    // The pending token, then the four tokens the prompt says follow it.
    assert_eq!(s.drafts, [101, 102, 103, 104]);
    assert_eq!(
        (s.tokens.as_slice(), s.pos, s.logits),
        (&[100, 101, 102, 103, 104][..], 16, 5)
    );
    assert_eq!((s.blocks.len(), s.new_blocks), (2, 1));
    assert_eq!(h.stats.spec_drafts.load(Ordering::Relaxed), 1);
    assert_eq!(h.stats.spec_draft_tokens.load(Ordering::Relaxed), 4);
    assert_eq!(h.stats.spec_accepted_tokens.load(Ordering::Relaxed), 2);
    let per_pos: Vec<u64> = h.stats.spec_accepted_per_pos[..4]
        .iter()
        .map(|a| a.load(Ordering::Relaxed))
        .collect();
    assert_eq!(per_pos, [1, 1, 0, 0]);
    // Positions 19 and 20 held rejected drafts: the next step feeds from 19 again, the runner's own token.
    assert_eq!(h.sched.running[0].computed, 19);
    let next = h.step();
    assert_eq!(shape(&next), [(0, Phase::Decode, 1, 19, 1)]);
    assert_eq!(next.scheduled[0].tokens, [REJECTED]);
    assert_eq!(h.run(), 1);
    assert_eq!(c.finish(), Some(FinishReason::Length));
    assert_eq!(
        c.tokens,
        [100, 101, 102, REJECTED, cycle(0, 20), cycle(0, 21)]
    );
    assert_eq!(
        c.done
            .as_ref()
            .and_then(|d| d.speculative.as_ref())
            .map(|s| s.accepted_tokens),
        Some(2)
    );
}

#[test]
fn drafts_all_accepted_yield_a_bonus_token() {
    let mut h = Harness::new(config(4, 64), 64, cycle, usize::MAX);
    let cycle_prompt: Vec<u32> = (0..16).map(|p| cycle(0, p)).collect();
    let mut c = h.submit(cycle_prompt, 6, &speculative());
    h.step();
    let verify = h.step();
    assert_eq!(verify.scheduled[0].drafts, [101, 102, 103, 104]);
    // Four drafts confirmed and the model's own token after them: six tokens in two steps.
    assert!(h.sched.is_idle());
    assert_eq!(c.finish(), Some(FinishReason::Length));
    assert_eq!(c.tokens, [100, 101, 102, 103, 104, 105]);
    assert_eq!(h.stats.spec_accepted_tokens.load(Ordering::Relaxed), 4);
}

#[test]
fn a_cancelled_request_is_ended_and_its_blocks_returned() {
    let mut h = Harness::new(config(1, 64), 64, unique, 0);
    let mut running = h.submit(prompt(1, 40), 50, &off());
    let mut queued = h.submit(prompt(300, 20), 50, &off());
    h.step();
    // Three blocks for 40 prompt positions; the second waits (one slot).
    assert_eq!(h.used_blocks(), 3);
    assert_eq!((h.sched.running.len(), h.sched.waiting.len()), (1, 1));

    running.cancel.cancel();
    queued.cancel.cancel();
    let out = h.step();
    assert!(out.is_empty());
    assert!(h.sched.is_idle());
    assert_eq!(h.used_blocks(), 0);
    assert_eq!(running.finish(), Some(FinishReason::Cancelled));
    assert_eq!(running.tokens, [unique(0, 40)]);
    assert_eq!(queued.finish(), Some(FinishReason::Cancelled));
    assert_eq!(queued.tokens, Vec::<u32>::new());
}

#[test]
fn a_failed_step_ends_every_sequence_in_it() {
    let mut h = Harness::new(config(4, 64), 64, unique, 0);
    let mut c = h.submit(prompt(1, 20), 5, &off());
    let out = h.sched.schedule();
    assert_eq!(h.used_blocks(), 2);
    h.sched
        .update(&out, Err(StepFailed("the device went away".into())));
    assert!(h.sched.is_idle());
    assert_eq!(h.used_blocks(), 0);
    let got = c.rx.try_recv().ok().map(|ev| match ev {
        GenerateEvent::Error(e) => e.to_string(),
        _ => "another event".into(),
    });
    assert_eq!(
        got.as_deref(),
        Some("internal engine error: the device went away")
    );
}
