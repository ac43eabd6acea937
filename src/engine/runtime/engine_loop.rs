//! The engine thread's loop: takes requests off the channel (generation jobs become queued sequences, embedding
//! jobs run between steps), then each step asks the [`Scheduler`] what to run, has the [`PagedRunner`] run it and
//! hands the result back to the scheduler. Runs until every engine handle is gone and no work is left.

use std::sync::{mpsc, Arc};

use tokio::sync::mpsc as tokio_mpsc;
use tokio_util::sync::CancellationToken;

use crate::engine::backend::Model;
use crate::engine::constraint::Constraint;
use crate::engine::error::Result;
use crate::engine::kv::blocks::PrefixCacheStats;
use crate::engine::request::{GenerateEvent, GenerateRequest};
use crate::engine::runtime::runner::{ModelRunner, PagedRunner};
use crate::engine::runtime::schedule_output::StepFailed;
use crate::engine::runtime::scheduler::{Scheduler, SchedulerConfig, SchedulerStats};
use crate::engine::runtime::sequence::Sequence;
use crate::engine::speculative::SpeculativeConfig;
use crate::text::tokenizer::Tokenizer;

/// A request on its way to the engine thread.
pub(crate) struct Job {
    pub req: GenerateRequest,
    pub constraint: Option<Box<Constraint>>,
    pub cancel: CancellationToken,
    pub reply: tokio_mpsc::UnboundedSender<GenerateEvent>,
}

/// An embedding request for the model this thread runs (see `engine::decoder_embed`): run between steps.
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

/// The engine thread's state: the scheduler, the runner and the channel they serve.
pub(crate) struct EngineLoop {
    scheduler: Scheduler,
    runner: PagedRunner,
    jobs: mpsc::Receiver<Work>,
    tokenizer: Tokenizer,
    /// The window served: a request is validated against it.
    ctx_len: usize,
    speculative: SpeculativeConfig,
}

impl EngineLoop {
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
        let trained = model.config.context_length;
        let ctx_len = config.max_model_len.map_or(trained, |n| n.min(trained));
        let speculative = config.speculative.clone();
        let runner = PagedRunner::new(model, n_blocks, config.kv_cache_dtype)?;
        let scheduler = Scheduler::new(
            config,
            n_blocks,
            runner.token_price(),
            tokenizer.clone(),
            prefix,
            stats,
        );
        Ok(Self {
            scheduler,
            runner,
            jobs,
            tokenizer,
            ctx_len,
            speculative,
        })
    }

    /// Runs until every engine handle is dropped and no work is left.
    pub fn run(mut self) {
        while self.intake() {
            self.scheduler.reap_cancelled();
            let output = self.scheduler.schedule();
            self.scheduler.publish();
            if !output.is_empty() {
                let result = match self.scheduler.scheduled_sequences(&output) {
                    Some(mut seqs) => self.runner.execute(&output, &mut seqs),
                    None => Err(StepFailed("a scheduled sequence is not running".into())),
                };
                self.scheduler.update(&output, result);
            }
            self.scheduler.publish();
        }
    }

    /// Takes new requests: blocks while there is nothing to do. `false` when the handles are gone and no work
    /// is left.
    fn intake(&mut self) -> bool {
        if self.scheduler.is_idle() {
            match self.jobs.recv() {
                Ok(work) => self.take(work),
                Err(_) => return false,
            }
        }
        while let Ok(work) = self.jobs.try_recv() {
            self.take(work);
        }
        self.scheduler.publish();
        true
    }

    fn take(&mut self, work: Work) {
        match work {
            Work::Generate(job) => self.accept(*job),
            Work::Embed(job) => {
                // A client that left wants nothing; otherwise the pass runs now, between steps.
                if !job.reply.is_closed() {
                    let _ = job.reply.send(self.runner.embed(&job.inputs, job.pooling));
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
        match Sequence::new(
            req,
            constraint,
            cancel,
            reply.clone(),
            &self.tokenizer,
            self.ctx_len,
            &self.speculative,
        ) {
            Ok(seq) => {
                self.scheduler.add(seq);
            }
            Err(e) => {
                let _ = reply.send(GenerateEvent::Error(e));
            }
        }
    }
}
