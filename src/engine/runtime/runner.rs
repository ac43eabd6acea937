//! The model runner: executes a [`SchedulerOutput`] — one forward pass over every scheduled sequence's tokens
//! into the paged KV store, then the sampling of each sequence that got logits (grammar masks and speculative
//! verification included), in parallel across them. It decides nothing; what was sampled goes back to the
//! scheduler as a [`RunnerOutput`].

use std::sync::Mutex;
use std::time::Instant;

use crate::engine::backend::Model;
use crate::engine::encoder::Pooling;
use crate::engine::error::Result;
use crate::engine::kv::{BatchSeq, KvDtype, PagedStore};
use crate::engine::runtime::schedule_output::{
    RunnerOutput, SampledRow, SchedulerOutput, StepFailed,
};
use crate::engine::runtime::sequence::Sequence;

/// Runs the steps a scheduler plans.
pub(crate) trait ModelRunner {
    /// Runs `output` and samples every sequence that asked for logits. `seqs` are the scheduled sequences, in
    /// `output`'s order (their sampling state: sampler, grammar). An error fails the whole step.
    fn execute(
        &mut self,
        output: &SchedulerOutput,
        seqs: &mut [&mut Sequence],
    ) -> std::result::Result<RunnerOutput, StepFailed>;
}

/// Before any verify step is measured: what one more token costs a single-token step, on the CPU engine
/// (compute-bound even at one token) and on a GPU (bandwidth-bound decode).
const CPU_TOKEN_PRICE: f64 = 0.5;
const DEVICE_TOKEN_PRICE: f64 = 0.1;

/// The runner over a loaded model and its paged KV store (the bytes of the blocks the scheduler hands out).
pub(crate) struct PagedRunner {
    model: Model,
    store: PagedStore,
}

impl PagedRunner {
    /// A runner with a store of `n_blocks` blocks.
    pub fn new(model: Model, n_blocks: usize, dtype: KvDtype) -> Result<Self> {
        let store = model.new_paged_store(n_blocks, dtype)?;
        Ok(Self { model, store })
    }

    /// What one more token costs a single-token step here, before any step is measured.
    pub fn token_price(&self) -> f64 {
        match self.model.cpu_engine() {
            Some(_) => CPU_TOKEN_PRICE,
            None => DEVICE_TOKEN_PRICE,
        }
    }

    /// Embeddings of `inputs` (a pass of their own, run between steps).
    pub fn embed(&self, inputs: &[Vec<u32>], pooling: Pooling) -> Result<Vec<Vec<f32>>> {
        self.model.embed(inputs, pooling)
    }

    /// The forward pass: per scheduled sequence, the logits of its last pending token and of each of its drafts,
    /// row after row (empty when it is mid-prompt).
    fn forward(&mut self, output: &SchedulerOutput) -> Result<Vec<Vec<f32>>> {
        let batch: Vec<BatchSeq> = output
            .scheduled
            .iter()
            .map(|s| BatchSeq {
                tokens: &s.tokens,
                blocks: &s.blocks,
                pos: s.pos,
                logits: s.logits,
            })
            .collect();
        self.model.forward_batch(&mut self.store, &batch)
    }
}

impl ModelRunner for PagedRunner {
    fn execute(
        &mut self,
        output: &SchedulerOutput,
        seqs: &mut [&mut Sequence],
    ) -> std::result::Result<RunnerOutput, StepFailed> {
        // A panic inside a tensor op must not take the engine down with it: report it as an error.
        let started = Instant::now();
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.forward(output)));
        let forward_secs = started.elapsed().as_secs_f64();
        let logits = match outcome {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => return Err(StepFailed(e.to_string())),
            Err(_) => return Err(StepFailed("the engine panicked during generation".into())),
        };
        // Per sequence that got logits: its slot, sequence, logits and drafts, and what sampling them gave.
        type Slot<'a, 'b> = (
            usize,
            &'a mut Sequence,
            Vec<f32>,
            &'b [u32],
            Option<Result<Vec<SampledRow>>>,
        );
        let work: Vec<Mutex<Slot>> = seqs
            .iter_mut()
            .zip(logits)
            .zip(&output.scheduled)
            .enumerate()
            .filter(|(_, ((_, l), _))| !l.is_empty())
            .map(|(k, ((seq, l), s))| Mutex::new((k, &mut **seq, l, s.drafts.as_slice(), None)))
            .collect();
        // Sampling, in parallel across the sequences that got logits, on the model's threads (the CPU engine's
        // own pool: its workers are the ones spinning for the next step, not a second pool's).
        let step = |k: usize| {
            let mut w = work[k].lock().unwrap_or_else(|e| e.into_inner());
            let (_, seq, l, drafts, out) = &mut *w;
            *out = Some(seq.sample(l, drafts));
        };
        if work.len() > 1 {
            self.model.parallel_for(work.len(), &step);
        } else {
            (0..work.len()).for_each(step);
        }
        let mut sampled: Vec<Result<Vec<SampledRow>>> = (0..output.scheduled.len())
            .map(|_| Ok(Vec::new()))
            .collect();
        for w in work {
            let (k, _, _, _, out) = w.into_inner().unwrap_or_else(|e| e.into_inner());
            if let Some(r) = out {
                sampled[k] = r;
            }
        }
        Ok(RunnerOutput {
            sampled,
            forward_secs: Some(forward_secs),
        })
    }
}
