//! One request's generation as a state machine the scheduler drives one step at a time: it holds everything
//! that belongs to the sequence alone — its tokens so far, sampler and seed, stop strings, logprobs, llguidance
//! matcher, UTF-8 and stop-string buffers, timings and reply channel. A step has two halves: the runner turns
//! the logits of its last token into the next tokens to feed (the sampled one and whatever the grammar forces
//! after it: [`Sequence::sample`]), and the scheduler appends them and sends their events ([`Sequence::apply`]).
//!
//! Under a grammar ([`Constraint`]) each step samples first and lets the grammar check the token; a rejected token
//! costs a full mask and a resample. EOS ends the output only where the grammar accepts it, and a grammar that can
//! take nothing more ends it too. Within [`CLOSE_WINDOW_TOKENS`] of `max_tokens` a call in progress keeps a way to
//! close in the budget left (see [`crate::engine::constraint::close`]).
//!
//! Which positions are in the KV cache is the scheduler's business: the sequence only says which tokens exist
//! (prompt + generated). A preempted sequence keeps all of this state and is recomputed from its tokens.

use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::engine::constraint::Constraint;
use crate::engine::error::{EngineError, Result};
use crate::engine::request::{
    FinishReason, GenerateEvent, GenerateRequest, GenerateSummary, TokenEvent, TokenLogprob,
    CLOSE_WINDOW_TOKENS,
};
use crate::engine::runtime::schedule_output::SampledRow;
use crate::engine::sampler::{logprobs, Sampler};
use crate::engine::speculative::{Drafter, SpeculativeConfig};
use crate::text::detok::{StopMatcher, StopScan, Utf8Stream};
use crate::text::tokenizer::Tokenizer;

/// What a step left the sequence doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// New tokens are waiting to be fed.
    Continue,
    /// Generation ended.
    Finished(FinishReason),
}

/// A request being generated.
pub struct Sequence {
    req: GenerateRequest,
    constraint: Option<Box<Constraint>>,
    cancel: CancellationToken,
    reply: UnboundedSender<GenerateEvent>,
    sampler: Sampler,
    eos: Vec<u32>,
    max_new: usize,
    /// The prompt, then every generated token.
    tokens: Vec<u32>,
    utf8: Utf8Stream,
    stops: StopMatcher,
    out: GenerateSummary,
    close_plan: Option<Vec<u32>>,
    /// When the engine took the request.
    created: Instant,
    started: Option<Instant>,
    decode_start: Option<Instant>,
    /// Speculative decoding's drafts (none when it is off).
    drafter: Option<Drafter>,
}

impl Sequence {
    /// A sequence for `req` (already validated against the context length `ctx_len`).
    pub fn new(
        req: GenerateRequest,
        constraint: Option<Box<Constraint>>,
        cancel: CancellationToken,
        reply: UnboundedSender<GenerateEvent>,
        tokenizer: &Tokenizer,
        ctx_len: usize,
        spec: &SpeculativeConfig,
    ) -> Result<Self> {
        crate::engine::request::validate(&req, ctx_len)?;
        let sampler = Sampler::new(req.sampling.clone())?;
        let max_new = req
            .max_tokens
            .unwrap_or(usize::MAX)
            .min(ctx_len - req.prompt.len());
        let out = crate::engine::request::cancelled_before_start(&req);
        let eos = [tokenizer.eos_ids(), &req.stop_tokens].concat();
        Ok(Self {
            tokens: req.prompt.clone(),
            stops: StopMatcher::new(req.stop.clone()),
            req,
            constraint,
            cancel,
            reply,
            sampler,
            eos,
            max_new,
            utf8: Utf8Stream::default(),
            out,
            close_plan: None,
            created: Instant::now(),
            started: None,
            decode_start: None,
            drafter: Drafter::new(spec, tokenizer.blank_tokens()),
        })
    }

    /// The prompt, then every token generated so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn prompt_len(&self) -> usize {
        self.req.prompt.len()
    }

    pub fn generated(&self) -> usize {
        self.tokens.len() - self.req.prompt.len()
    }

    /// Who may share KV prefixes with this sequence.
    pub fn scope(&self) -> Option<&str> {
        self.req.cache_scope.as_deref()
    }

    /// Whether the request was cancelled or its client left.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled() || self.reply.is_closed()
    }

    /// Marks the first time the sequence is scheduled (the start of its prefill) and how many prompt tokens
    /// came from the prefix cache then.
    pub fn start(&mut self, cached_tokens: usize) {
        if self.started.is_none() {
            let now = Instant::now();
            self.started = Some(now);
            self.out.queue_secs = (now - self.created).as_secs_f64();
            self.out.cached_tokens = cached_tokens;
        }
    }

    fn send(&self, ev: GenerateEvent) -> bool {
        self.reply.send(ev).is_ok()
    }

    /// Samples the logits of the last token of [`tokens`](Self::tokens) followed by `lookahead` (tokens
    /// sampled earlier in this step, not appended yet): the sampled token and whatever the grammar forces after
    /// it, and whether that ends the output. Advances the sampler and the grammar; appends nothing.
    pub fn sample_row(&mut self, logits: &mut [f32], lookahead: &[u32]) -> Result<SampledRow> {
        let now = Instant::now();
        let started = *self.started.get_or_insert(now);
        if self.decode_start.is_none() {
            self.decode_start = Some(now);
            self.out.prefill_secs = (now - started).as_secs_f64();
        }
        let ended = |end| SampledRow {
            tokens: Vec::new(),
            logprob: None,
            closing: false,
            end: Some(end),
        };
        if self.max_new == 0 {
            return Ok(ended(FinishReason::Length));
        }
        let generated = self.generated() + lookahead.len();
        let remaining = self.max_new.saturating_sub(generated);
        if let Some(c) = self.constraint.as_deref_mut() {
            if remaining <= CLOSE_WINDOW_TOKENS && self.close_plan.is_none() {
                self.close_plan = match c.in_call()? {
                    true => c.shortest_close(remaining)?,
                    // Ending here is a way out (between calls, in text, after a document).
                    false => Some(Vec::new()),
                };
                if self.close_plan.is_none() && generated == 0 {
                    // Nothing generated yet and no output the grammar accepts fits in the budget (a required
                    // call longer than `max_tokens`): start nothing rather than a call that will be cut.
                    c.stats.ended_before_call = true;
                    return Ok(ended(FinishReason::Length));
                }
            }
        }
        let prompt_len = self.req.prompt.len();
        // Only a verify step's later rows see tokens not appended yet.
        let joined;
        let context: &[u32] = match lookahead.is_empty() {
            true => &self.tokens,
            false => {
                joined = [self.tokens.as_slice(), lookahead].concat();
                &joined
            }
        };
        self.sampler.adjust(logits, context, &context[prompt_len..]);
        let tok = match self.constraint.as_deref_mut() {
            Some(c) => c.sample(&mut self.sampler, logits)?,
            None => self.sampler.pick(logits).ok_or_else(|| {
                EngineError::Tokenizer("every logit is -inf; nothing can be sampled".into())
            })?,
        };
        if generated == 0 {
            self.out.ttft_secs = started.elapsed().as_secs_f64();
        }
        let mut lp = self.req.logprobs.map(|n| {
            let (logprob, top) = logprobs(logits, tok, n);
            TokenLogprob { logprob, top }
        });
        let ends = match self.constraint.as_deref() {
            Some(c) => c.is_eos(tok),
            None => self.eos.contains(&tok) && !self.req.ignore_eos,
        };
        if ends {
            return Ok(ended(FinishReason::Eos));
        }
        // The sampled token, then whatever the grammar forces after it (within the token budget).
        let mut batch = vec![tok];
        let mut closing = false;
        if let Some(c) = self.constraint.as_deref_mut() {
            let room = self.max_new.saturating_sub(generated + 1);
            batch.extend(c.commit(tok, room)?);
            if remaining <= CLOSE_WINDOW_TOKENS {
                let after = remaining.saturating_sub(batch.len());
                if !c.in_call()? {
                    self.close_plan = Some(Vec::new());
                } else if let Some(next) = c.shortest_close(after)? {
                    self.close_plan = Some(next);
                } else if let Some(plan) = self.close_plan.take() {
                    // This step would leave a call (or document) that can no longer close in budget: undo it,
                    // then close what is open, or — where nothing was open (between calls, after text) — end
                    // there instead of opening a call that would be cut.
                    c.rollback(batch.len())?;
                    c.force(&plan)?;
                    match plan.is_empty() {
                        true => c.stats.ended_before_call = true,
                        false => c.stats.closed_call = true,
                    }
                    c.stats.close_tokens = plan.len();
                    batch = plan;
                    lp = None;
                    closing = true;
                }
            }
        }
        let end = if closing || generated + batch.len() >= self.max_new {
            Some(FinishReason::Length)
        } else if self.constraint.as_deref().is_some_and(|c| c.is_finished()) {
            Some(FinishReason::Eos)
        } else {
            None
        };
        Ok(SampledRow {
            tokens: batch,
            logprob: lp,
            closing,
            end,
        })
    }

    /// Appends a sampled row: emits a token event per token (text held back while UTF-8 or a stop string is
    /// pending) and says whether the output ended — a stop string, a client gone, the row's own end, or
    /// `max_tokens` reached.
    pub fn append(&mut self, row: SampledRow, tokenizer: &Tokenizer) -> Outcome {
        let mut lp = row.logprob;
        for t in row.tokens {
            self.tokens.push(t);
            let text = self.utf8.push(&tokenizer.token_bytes(t));
            let (text, stopped) = match self.stops.push(&text) {
                StopScan::Emit(t) => (t, false),
                StopScan::Stopped(t) => (t, true),
            };
            if !self.send(GenerateEvent::Token(TokenEvent {
                id: t,
                text,
                logprob: lp.take(),
                closes_call: row.closing,
            })) {
                return Outcome::Finished(FinishReason::Cancelled);
            }
            if stopped {
                return Outcome::Finished(FinishReason::StopString);
            }
        }
        match row.end {
            Some(end) => Outcome::Finished(end),
            None if self.generated() >= self.max_new => Outcome::Finished(FinishReason::Length),
            None => Outcome::Continue,
        }
    }

    /// Draft tokens to verify after the pending ones (speculative decoding), at most `limit`, when verifying one
    /// more token costs `price` of a step (see [`super::speculative::Drafter`]): the drafter's lookup, cut where
    /// the output would end anyway (an end-of-generation token, `max_tokens`) and where the grammar, if there is
    /// one, rejects a token — a grammar-invalid draft is never verified.
    pub fn propose(&mut self, limit: usize, price: f64) -> Result<Vec<u32>> {
        // Verifying k drafts yields up to k + 1 tokens.
        let room = self.max_new.saturating_sub(self.generated() + 1);
        let Some(d) = self.drafter.as_mut() else {
            return Ok(Vec::new());
        };
        let mut drafts = d.propose(&self.tokens, limit.min(room), price);
        if let Some(cut) = drafts.iter().position(|t| self.eos.contains(t)) {
            drafts.truncate(cut);
        }
        if let (Some(c), false) = (self.constraint.as_deref_mut(), drafts.is_empty()) {
            let valid = c.valid_prefix(&drafts)?;
            drafts.truncate(valid);
        }
        Ok(drafts)
    }

    /// Samples the logits of the last pending token and of each draft fed after it (`rows`: `1 + drafts.len()`
    /// rows of the vocabulary, in position order) as plain decoding would have: row 0 as by
    /// [`sample_row`](Self::sample_row); while the tokens sampled so far equal the drafts, the next row holds the
    /// model's own logits for the next position and is sampled in turn; the first token that differs from its
    /// draft ends the step (it is kept — its logits were valid). [`apply`](Self::apply) appends the rows.
    ///
    /// Sampled output keeps plain decoding's distribution, and with a seed its very tokens: every position is
    /// sampled from the model's own distribution with the same random draws, and a draft only counts where the
    /// sample equals it. For a draft with probability 1 (a lookup) that is the standard rejection rule: accept
    /// with probability p(draft), else sample from p without the draft.
    pub fn sample(&mut self, rows: &mut [f32], drafts: &[u32]) -> Result<Vec<SampledRow>> {
        let n_rows = drafts.len() + 1;
        if rows.is_empty() || !rows.len().is_multiple_of(n_rows) {
            return Err(EngineError::Internal(format!(
                "{} logits for {n_rows} rows",
                rows.len()
            )));
        }
        let vocab = rows.len() / n_rows;
        let mut sampled = Vec::new();
        let mut new: Vec<u32> = Vec::new();
        let mut row = 0;
        loop {
            let r = self.sample_row(&mut rows[row * vocab..(row + 1) * vocab], &new)?;
            new.extend_from_slice(&r.tokens);
            let ended = r.end.is_some();
            sampled.push(r);
            if ended || new.len() > drafts.len() || new != drafts[..new.len()] {
                return Ok(sampled);
            }
            row = new.len();
        }
    }

    /// Appends the rows [`sample`](Self::sample) gave for a step that fed `drafts` after the pending tokens,
    /// until the output ends. Returns the outcome and how many drafts were confirmed: the fed positions whose
    /// keys and values stay valid.
    pub fn apply(
        &mut self,
        rows: Vec<SampledRow>,
        drafts: &[u32],
        tokenizer: &Tokenizer,
    ) -> (Outcome, usize) {
        let base = self.tokens.len();
        let mut outcome = Outcome::Continue;
        for row in rows {
            outcome = self.append(row, tokenizer);
            if outcome != Outcome::Continue {
                break;
            }
        }
        let produced = &self.tokens[base..];
        let accepted = match self.drafter.as_mut() {
            Some(d) => d.record(drafts, produced),
            None => 0,
        };
        (outcome, accepted)
    }

    /// Ends the generation with `finish` and sends the summary (exact usage: the whole prompt, every token
    /// generated; text held back at the end goes into `trailing_text`).
    pub fn finish(mut self, finish: FinishReason) {
        if finish != FinishReason::StopString {
            let tail = self.utf8.finish();
            let (StopScan::Emit(t) | StopScan::Stopped(t)) = self.stops.push(&tail);
            self.out.trailing_text.push_str(&t);
            self.out.trailing_text.push_str(&self.stops.finish());
        }
        self.out.finish = finish;
        self.out.completion_tokens = self.generated();
        match (self.started, self.decode_start) {
            (_, Some(d)) => self.out.decode_secs = d.elapsed().as_secs_f64(),
            (Some(s), None) => self.out.prefill_secs = s.elapsed().as_secs_f64(),
            (None, None) => {}
        }
        self.out.constraint = self.constraint.map(|mut c| std::mem::take(&mut c.stats));
        self.out.speculative = self.drafter.map(|d| d.stats);
        let _ = self.reply.send(GenerateEvent::Done(self.out));
    }

    /// Ends the generation with an error.
    pub fn fail(self, error: EngineError) {
        let _ = self.reply.send(GenerateEvent::Error(error));
    }
}
