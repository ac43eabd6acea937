//! The local engine's raw side: completions of raw text or token ids (no chat template, no tools) and fill-in-the-middle (`infill.rs`), tokenizing
//! and detokenizing — what the server's `/v1/completions`, `/tokenize` and `/detokenize` ask the provider for.
//! Also [`EngineEvents`], the generation-event reader both completion kinds share (cancellation with a grace
//! period for the engine's exact usage).

use super::{engine_error, sampling_params};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::super::assemble::Assembler;
use super::super::events::EventSender;
use super::super::prompt::render_prompt;
use super::super::{
    ProviderError, RawCompletionRequest, RawPrompt, StopReason, TokenizeInput, Tokenized, Usage,
};
use super::infill::{InfillPlan, InfillWatch};
use super::{LocalProvider, CANCEL_GRACE};
use crate::engine::{ConstraintSpec, FinishReason, GenerateEvent, GenerateRequest};
use crate::schema::ResponseFormat;

/// The events of one engine job, read so that a cancel does not wait forever: a running job stops within a
/// token and reports exact usage; a job still queued behind another is only dropped when the engine reaches it,
/// so after a cancel the reader waits [`CANCEL_GRACE`], not longer.
pub(super) struct EngineEvents {
    rx: UnboundedReceiver<GenerateEvent>,
    cancelled_at: Option<tokio::time::Instant>,
}

impl EngineEvents {
    pub(super) fn new(rx: UnboundedReceiver<GenerateEvent>) -> Self {
        Self {
            rx,
            cancelled_at: None,
        }
    }

    /// The next event; `None` when the job ended without one (dropped, or the grace after a cancel ran out).
    pub(super) async fn next(&mut self, cancel: &CancellationToken) -> Option<GenerateEvent> {
        loop {
            match self.cancelled_at {
                None => tokio::select! {
                    ev = self.rx.recv() => return ev,
                    _ = cancel.cancelled() => {
                        self.cancelled_at = Some(tokio::time::Instant::now() + CANCEL_GRACE);
                    }
                },
                Some(deadline) => {
                    return tokio::time::timeout_at(deadline, self.rx.recv())
                        .await
                        .ok()
                        .flatten()
                }
            }
        }
    }
}

impl LocalProvider {
    /// `text` as token ids: special tokens parsed, and the model's BOS prepended where it wants one and
    /// `add_special_tokens` is set.
    fn text_tokens(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, ProviderError> {
        let tok = self.engine.tokenizer();
        let ids = tok.encode(text, true)?;
        Ok(match add_special_tokens {
            true => tok.with_bos(ids),
            false => ids,
        })
    }

    /// Tokenizes text, or a chat request rendered as a completion of it would be.
    pub(super) fn tokenize_now(&self, input: &TokenizeInput) -> Result<Tokenized, ProviderError> {
        let tokens = match input {
            TokenizeInput::Text {
                text,
                add_special_tokens,
            } => self.text_tokens(text, *add_special_tokens)?,
            TokenizeInput::Chat(request) => render_prompt(
                self.engine.template(),
                self.engine.tokenizer(),
                self.engine.tool_call_format(),
                request,
            )?,
        };
        let tokenizer = self.engine.tokenizer();
        let token_strs = tokens
            .iter()
            .map(|&id| String::from_utf8_lossy(&tokenizer.token_bytes(id)).into_owned())
            .collect();
        Ok(Tokenized {
            tokens,
            token_strs: Some(token_strs),
            max_model_len: self.engine.info().context_length as u64,
        })
    }

    /// The prompt of a raw request as token ids, checked: not empty, every id in the vocabulary.
    fn raw_prompt(&self, prompt: &RawPrompt) -> Result<Vec<u32>, ProviderError> {
        let invalid = |message: String| ProviderError::InvalidRequest {
            status: 400,
            message,
        };
        let ids = match prompt {
            RawPrompt::Text(text) => self.text_tokens(text, true)?,
            RawPrompt::Tokens(ids) => ids.clone(),
        };
        if ids.is_empty() {
            return Err(invalid("the prompt is empty".into()));
        }
        let vocab = self.engine.tokenizer().vocab_size();
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(invalid(format!(
                "token id {bad} is outside the vocabulary ({vocab} tokens)"
            )));
        }
        Ok(ids)
    }

    /// Runs one raw completion, sending its events to `tx`.
    pub(super) async fn run_raw(
        self,
        request: RawCompletionRequest,
        tx: EventSender,
        cancel: CancellationToken,
    ) {
        let model = self.engine.info().name.clone();
        let out = Assembler::new(tx, Vec::new(), model);
        let raw = request.prompt.clone();
        let infill = request.infill.clone();
        let max_new = request.max_tokens;
        let Some((plan, mut out)) = self
            .prepare(&request.model, out, move |this| match &infill {
                None => Ok(InfillPlan {
                    tokens: this.raw_prompt(&raw)?,
                    stop_tokens: Vec::new(),
                    stop: Vec::new(),
                }),
                Some(infill) => {
                    let prompt = match &raw {
                        RawPrompt::Text(t) => t.as_str(),
                        RawPrompt::Tokens(_) => {
                            return Err(ProviderError::InvalidRequest {
                                status: 400,
                                message: "a fill-in-the-middle prompt is text, not token ids"
                                    .into(),
                            })
                        }
                    };
                    this.infill_plan(infill, prompt, max_new)
                }
            })
            .await
        else {
            return;
        };
        let input = plan.tokens.len() as u64;
        out.start();
        let mut stop = request.stop.clone();
        stop.extend(plan.stop);
        let gen = GenerateRequest {
            prompt: plan.tokens,
            sampling: sampling_params(&request.sampling),
            max_tokens: request.max_tokens.map(|n| n as usize),
            stop,
            stop_tokens: plan.stop_tokens,
            ignore_eos: request.ignore_eos,
            logprobs: request.logprobs,
            constraint: (request.response_format != ResponseFormat::Text).then(|| ConstraintSpec {
                response_format: request.response_format.clone(),
                ..ConstraintSpec::default()
            }),
            cache_scope: request.cache_scope.clone(),
        };
        // The middle's rules stop the generation with its own token, not the caller's.
        let generation = cancel.child_token();
        let mut watch = request.infill.as_ref().map(InfillWatch::new);
        let mut events = EngineEvents::new(self.engine.generate(gen, generation.clone()));
        let mut output = 0u64;
        while let Some(ev) = events.next(&cancel).await {
            match ev {
                GenerateEvent::Token(t) => {
                    output += 1;
                    if watch.as_ref().is_some_and(InfillWatch::stopped) {
                        continue;
                    }
                    if let Some(lp) = &t.logprob {
                        out.logprobs(vec![self.logprob_entry(t.id, lp)]);
                    }
                    match watch.as_mut() {
                        None => out.text(&t.text),
                        Some(w) => {
                            let (text, stop) = w.push(&t.text);
                            out.text(&text);
                            if stop {
                                generation.cancel();
                            }
                        }
                    }
                }
                GenerateEvent::Done(s) => {
                    let stopped_by_rule = watch.as_ref().is_some_and(InfillWatch::stopped);
                    match watch.as_mut() {
                        None => out.text(&s.trailing_text),
                        Some(w) => {
                            let (text, _) = w.push(&s.trailing_text);
                            out.text(&text);
                            out.text(&w.finish());
                        }
                    }
                    let usage = super::summary_usage(&s);
                    return match s.finish {
                        FinishReason::Eos | FinishReason::StopString => {
                            out.done(StopReason::Stop, usage)
                        }
                        FinishReason::Cancelled if stopped_by_rule && !cancel.is_cancelled() => {
                            out.done(StopReason::Stop, usage)
                        }
                        FinishReason::Length => out.done(StopReason::Length, usage),
                        FinishReason::Cancelled => out.fail(&ProviderError::Cancelled, usage),
                    };
                }
                GenerateEvent::Error(e) => {
                    let usage = Usage::new(input, output, 0);
                    return out.fail(&engine_error(e), usage);
                }
            }
        }
        ended_without_result(out, &cancel, Usage::new(input, output, 0));
    }

    /// Checks that `model` is this engine's and computes the prompt with `make` off the async workers (rendering
    /// and tokenizing a long transcript is CPU work). On failure the stream ends with the error and `None` is
    /// returned; on success the assembler comes back with the prompt.
    pub(super) async fn prepare<T: Send + 'static>(
        &self,
        model: &str,
        out: Assembler,
        make: impl FnOnce(&LocalProvider) -> Result<T, ProviderError> + Send + 'static,
    ) -> Option<(T, Assembler)> {
        if let Err(err) = self.check_model(model) {
            out.fail(&err, Usage::default());
            return None;
        }
        let this = self.clone();
        match tokio::task::spawn_blocking(move || make(&this)).await {
            Ok(Ok(prompt)) => Some((prompt, out)),
            Ok(Err(e)) => {
                out.fail(&e, Usage::default());
                None
            }
            Err(e) => {
                let err = ProviderError::Internal(format!("the tokenizing task failed: {e}"));
                out.fail(&err, Usage::default());
                None
            }
        }
    }
}

/// Ends a stream whose engine job stopped without its final event: cancelled (the engine drops a job cancelled
/// before it started without a word) or a bug.
pub(super) fn ended_without_result(out: Assembler, cancel: &CancellationToken, usage: Usage) {
    let err = if cancel.is_cancelled() {
        ProviderError::Cancelled
    } else {
        ProviderError::Internal("the engine stopped without a result".into())
    };
    out.fail(&err, usage);
}
