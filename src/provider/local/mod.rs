//! [`LocalProvider`]: the provider over the in-process engine actor. A request is rendered with the model's chat
//! template, tokenized, and generated on the engine thread; text streams token by token; usage is exact
//! (`input` is the length of the very token sequence the engine was given, `output` the tokens it sampled,
//! `cached_input` the prefix it reused from the request's `cache_key`, or by content, within its `cache_scope`).
//! Cancellation reaches the engine, which stops within one prefill chunk or one token.
//!
//! Tools, `tool_choice` and `response_format` become the engine's [`ConstraintSpec`]: every tool call is
//! grammar-constrained to a known tool and its arguments schema, so calls from this provider are always valid.
//! The engine's output assembler turns the generated text into content and tool calls as it streams, so
//! `tool_call_delta` events carry argument fragments as they are sampled, not all at the end.
//!
//! The same engine answers raw-text completions, tokenizing and detokenizing (`raw`), so the server reaches the
//! model only through [`Provider`].

mod calls;
mod convert;
mod embed;
mod infill;
mod raw;

pub use convert::{engine_error, sampling_params};
pub use embed::EncoderProvider;

use tokio_util::sync::CancellationToken;

use super::assemble::Assembler;
use super::events::{spawn_stream, EventSender};
use super::prompt::render_prompt;
use super::{
    CompletionRequest, EmbedRequest, Embeddings, EngineLoad, ModelDescriptor, PrefixCacheCounts,
    Provider, ProviderError, ProviderStream, RawCompletionRequest, ResponseFormat,
    SpecDecodeCounts, StopReason, TokenCount, TokenLogprob, TokenizeRequest, Tokenized, ToolChoice,
    TopLogprob, Usage,
};
use crate::engine::{
    ConstraintSpec, Engine, FinishReason, GenerateEvent, GenerateRequest, GenerateSummary,
    OutputAssembler, OutputDelta, ReasoningPiece, ReasoningSplitter, TokenLogprob as EngineLogprob,
};
use calls::CallMap;

/// How long a cancelled request waits for the engine's final (exact) usage before it ends without it.
const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_millis(250);

/// The local engine as a [`Provider`]. Cheap to clone.
#[derive(Clone)]
pub struct LocalProvider {
    engine: Engine,
    /// What identifies the loaded weights (see [`Provider::model_identity`]).
    identity: std::sync::Arc<str>,
}

impl LocalProvider {
    pub fn new(engine: Engine) -> Self {
        let identity = weights_identity(&engine).into();
        Self { engine, identity }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The prompt tokens the engine would be given for `request` (what `input` usage counts).
    pub fn prompt_tokens(&self, request: &CompletionRequest) -> Result<Vec<u32>, ProviderError> {
        render_prompt(
            self.engine.template(),
            self.engine.tokenizer(),
            self.engine.tool_call_format(),
            request,
        )
    }

    fn descriptor(&self) -> ModelDescriptor {
        let info = self.engine.info();
        ModelDescriptor {
            id: info.name.clone(),
            context_window: info.context_length as u64,
            max_output_tokens: info.context_length as u64,
            device: Some(info.device.clone()),
        }
    }

    /// The log-probability entry of token `id`, with texts for it and its alternatives.
    fn logprob_entry(&self, id: u32, lp: &EngineLogprob) -> TokenLogprob {
        let tokenizer = self.engine.tokenizer();
        let piece = |t: u32| {
            let bytes = tokenizer.token_bytes(t);
            (String::from_utf8_lossy(&bytes).into_owned(), bytes)
        };
        let (token, bytes) = piece(id);
        TokenLogprob {
            id: Some(id),
            token,
            bytes,
            logprob: lp.logprob,
            top: lp
                .top
                .iter()
                .map(|&(t, logprob)| {
                    let (token, bytes) = piece(t);
                    TopLogprob {
                        id: Some(t),
                        token,
                        bytes,
                        logprob,
                    }
                })
                .collect(),
        }
    }

    /// Whether `name` (empty: the default) is this engine's model, by name or manifest alias.
    fn serves(&self, name: &str) -> bool {
        let info = self.engine.info();
        name.is_empty()
            || name == info.name
            || info.manifest.as_ref().is_some_and(|m| m.answers_to(name))
    }
}

#[async_trait::async_trait]
impl Provider for LocalProvider {
    fn stream(&self, request: CompletionRequest, cancel: CancellationToken) -> ProviderStream {
        let this = self.clone();
        spawn_stream(cancel, move |tx, cancel| async move {
            this.run(request, tx, cancel).await
        })
    }

    /// Exact: the length of the rendered, tokenized prompt.
    async fn count_tokens(&self, request: &CompletionRequest) -> Result<TokenCount, ProviderError> {
        let this = self.clone();
        let request = request.clone();
        let tokens = tokio::task::spawn_blocking(move || this.prompt_tokens(&request))
            .await
            .map_err(|e| ProviderError::Internal(format!("the tokenizing task failed: {e}")))??;
        Ok(TokenCount {
            tokens: tokens.len() as u64,
            exact: true,
        })
    }

    fn models(&self) -> Vec<ModelDescriptor> {
        vec![self.descriptor()]
    }

    fn resolve_model(&self, name: &str) -> Option<String> {
        self.serves(name).then(|| self.engine.info().name.clone())
    }

    fn describe(&self) -> String {
        "local".into()
    }

    /// The scheduler's batch: up to `max_num_seqs` sequences generate at once.
    fn concurrency(&self) -> Option<usize> {
        Some(self.engine.scheduler_config().max_num_seqs)
    }

    fn engine_load(&self) -> Option<EngineLoad> {
        use std::sync::atomic::Ordering::Relaxed;
        let s = self.engine.scheduler_stats();
        Some(EngineLoad {
            running: s.running.load(Relaxed),
            waiting: s.waiting.load(Relaxed),
            kv_cache_usage: self.engine.prefix_cache_stats().usage(),
            preemptions: s.preemptions.load(Relaxed),
            spec: SpecDecodeCounts {
                drafts: s.spec_drafts.load(Relaxed),
                draft_tokens: s.spec_draft_tokens.load(Relaxed),
                accepted_tokens: s.spec_accepted_tokens.load(Relaxed),
                accepted_per_pos: s
                    .spec_accepted_per_pos
                    .iter()
                    .map(|n| n.load(Relaxed))
                    .collect(),
            },
        })
    }

    fn model_identity(&self, model: &str) -> String {
        format!("{model}|{}", self.identity)
    }

    fn supports_logprobs(&self) -> bool {
        true
    }

    fn prefix_cache(&self) -> Option<PrefixCacheCounts> {
        let (queries, hits, evictions) = self.engine.prefix_cache_stats().snapshot();
        Some(PrefixCacheCounts {
            queries,
            hits,
            evictions,
        })
    }

    fn stream_raw(
        &self,
        request: RawCompletionRequest,
        cancel: CancellationToken,
    ) -> ProviderStream {
        let this = self.clone();
        spawn_stream(cancel, move |tx, cancel| async move {
            this.run_raw(request, tx, cancel).await
        })
    }

    async fn tokenize(&self, request: TokenizeRequest) -> Result<Tokenized, ProviderError> {
        self.check_model(&request.model)?;
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.tokenize_now(&request.input))
            .await
            .map_err(|e| ProviderError::Internal(format!("the tokenizing task failed: {e}")))?
    }

    async fn embed(&self, request: EmbedRequest) -> Result<Embeddings, ProviderError> {
        self.embed_pooled(request).await
    }

    async fn detokenize(&self, model: &str, tokens: &[u32]) -> Result<String, ProviderError> {
        self.check_model(model)?;
        self.engine
            .tokenizer()
            .decode(tokens, false)
            .map_err(|e| ProviderError::InvalidRequest {
                status: 400,
                message: e.to_string(),
            })
    }
}

/// Path, size, modification time, manifest digest and weight format of the engine's model file.
fn weights_identity(engine: &Engine) -> String {
    let info = engine.info();
    let (size, mtime) = std::fs::metadata(&info.path)
        .map(|m| {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            (m.len(), mtime)
        })
        .unwrap_or((0, 0));
    let digest = info.manifest.as_ref().map_or("", |m| m.sha256.as_str());
    format!(
        "{}|{size}|{mtime}|{digest}|{}",
        info.path.display(),
        info.weight_format
    )
}

impl LocalProvider {
    /// `Err(UnknownModel)` unless `name` (empty: the default) is this engine's model.
    fn check_model(&self, name: &str) -> Result<(), ProviderError> {
        if self.serves(name) {
            return Ok(());
        }
        Err(ProviderError::UnknownModel {
            model: name.to_string(),
            message: format!("this engine serves `{}`", self.engine.info().name),
        })
    }

    async fn run(self, request: CompletionRequest, tx: EventSender, cancel: CancellationToken) {
        let model = self.engine.info().name.clone();
        let out = Assembler::new(tx, request.tools.clone(), model);
        let req = request.clone();
        let Some((prompt, mut out)) = self
            .prepare(&request.model, out, move |this| this.prompt_tokens(&req))
            .await
        else {
            return;
        };
        let input = prompt.len() as u64;
        out.start();
        // A reasoning model's think block: split off as thinking, and allowed before the grammar's part.
        let think = self.engine.think_block(&prompt);
        let mut reasoning = ReasoningSplitter::new(think.clone());
        let gen = GenerateRequest {
            prompt,
            sampling: sampling_params(&request.sampling),
            max_tokens: request.max_tokens.map(|n| n as usize),
            stop: request.stop.clone(),
            logprobs: request.logprobs,
            constraint: constraint_spec(&request).map(|spec| ConstraintSpec {
                reasoning: think,
                ..spec
            }),
            cache_scope: request.cache_scope.clone(),
            stop_tokens: Vec::new(),
            ignore_eos: request.ignore_eos,
        };
        let mut calls = CallMap::default();
        let mut assembler = self.engine.assembler(&gen);
        // The generation's own token: stopping it after a repeated call must not cancel the caller's.
        let generation = cancel.child_token();
        let mut events = raw::EngineEvents::new(self.engine.generate(gen, generation.clone()));
        let mut output = 0u64;
        loop {
            let Some(ev) = events.next(&cancel).await else {
                break;
            };
            match ev {
                GenerateEvent::Token(_) if calls.repeated => {}
                GenerateEvent::Token(t) => {
                    output += 1;
                    if let Some(lp) = &t.logprob {
                        out.logprobs(vec![self.logprob_entry(t.id, lp)]);
                    }
                    calls.closing |= t.closes_call;
                    let pieces = reasoning.push(&t.text);
                    if let Err(e) = feed_pieces(pieces, &mut assembler, &mut calls, &mut out) {
                        cancel.cancel();
                        return out.fail(&e, Usage::new(input, output, 0));
                    }
                    if calls.repeated {
                        // The model began repeating a call it already made in this message: stop it there.
                        tracing::debug!("a repeated tool call ended the output");
                        generation.cancel();
                    }
                }
                GenerateEvent::Done(s) if calls.repeated => {
                    let usage = summary_usage(&s);
                    return out.done(StopReason::Stop, usage);
                }
                GenerateEvent::Done(s) => {
                    let usage = summary_usage(&s);
                    // A call the limit cut and left open is marked as such (one closed early already is).
                    let cut_open = s.finish == FinishReason::Length && assembler.in_call();
                    calls.flush(&mut out);
                    let mut pieces = reasoning.push(&s.trailing_text);
                    pieces.extend(reasoning.finish());
                    let tail =
                        feed_pieces(pieces, &mut assembler, &mut calls, &mut out).and_then(|()| {
                            let deltas = assembler.finish(s.finish).map_err(engine_error)?;
                            apply(deltas, &mut calls, &mut out);
                            Ok(())
                        });
                    if cut_open {
                        if let Some(last) = calls.map.last().map(|(_, ours)| *ours) {
                            out.end_call_truncated(last, false);
                        }
                    }
                    if let Err(e) = tail {
                        return out.fail(&e, usage);
                    }
                    match s.finish {
                        FinishReason::Eos | FinishReason::StopString => {
                            out.done(StopReason::Stop, usage)
                        }
                        FinishReason::Length => out.done(StopReason::Length, usage),
                        FinishReason::Cancelled => out.fail(&ProviderError::Cancelled, usage),
                    }
                    return;
                }
                GenerateEvent::Error(e) => {
                    let usage = Usage::new(input, output, 0);
                    return out.fail(&engine_error(e), usage);
                }
            }
        }
        raw::ended_without_result(out, &cancel, Usage::new(input, output, 0));
    }
}

/// Feeds generated text to the engine's output assembler and forwards what it assembles.
fn feed(
    assembler: &mut OutputAssembler,
    text: &str,
    calls: &mut CallMap,
    out: &mut Assembler,
) -> Result<(), ProviderError> {
    if text.is_empty() {
        return Ok(());
    }
    let deltas = assembler.push(text).map_err(engine_error)?;
    apply(deltas, calls, out);
    Ok(())
}

/// Forwards split output: reasoning as thinking, content to the output assembler.
fn feed_pieces(
    pieces: Vec<ReasoningPiece>,
    assembler: &mut OutputAssembler,
    calls: &mut CallMap,
    out: &mut Assembler,
) -> Result<(), ProviderError> {
    for piece in pieces {
        match piece {
            ReasoningPiece::Reasoning(text) => out.thinking(&text),
            ReasoningPiece::Content(text) => feed(assembler, &text, calls, out)?,
        }
    }
    Ok(())
}

/// Turns the engine's output deltas into provider events.
fn apply(deltas: Vec<OutputDelta>, calls: &mut CallMap, out: &mut Assembler) {
    for d in deltas {
        calls.take(d, out);
    }
}

/// The engine's constraint for `request` (`None`: plain text, nothing to constrain). The server uses it too, to
/// validate a request (400) before it is queued.
pub fn constraint_spec(request: &CompletionRequest) -> Option<ConstraintSpec> {
    if request.tools.is_empty()
        && request.response_format == ResponseFormat::Text
        && request.tool_choice == ToolChoice::Auto
    {
        return None;
    }
    Some(ConstraintSpec {
        tools: request.tools.clone(),
        tool_choice: request.tool_choice.clone(),
        parallel_tool_calls: request.parallel_tool_calls.unwrap_or(true),
        response_format: request.response_format.clone(),
        format: None,
        reasoning: None,
    })
}

/// The exact usage of a local generation: its prompt, output and reused tokens, and what speculative decoding
/// drafted and got accepted.
fn summary_usage(s: &GenerateSummary) -> Usage {
    let mut usage = Usage::new(
        s.prompt_tokens as u64,
        s.completion_tokens as u64,
        s.cached_tokens as u64,
    );
    if let Some(spec) = &s.speculative {
        usage.draft_tokens = spec.draft_tokens as u64;
        usage.accepted_draft_tokens = spec.accepted_tokens as u64;
    }
    usage.timings = Some(super::Timings {
        load_ns: 0,
        queue_ns: super::Timings::ns(s.queue_secs),
        prefill_ns: super::Timings::ns(s.prefill_secs),
        decode_ns: super::Timings::ns(s.decode_secs),
    });
    usage
}
