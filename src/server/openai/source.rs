//! Where a chat answer comes from, as one stream of [`Piece`]s: the configured [`Provider`] (the normal path:
//! the local engine through `LocalProvider`, or a remote vLLM), or — for requests that ask for `logprobs`, which
//! the provider boundary does not carry — the local engine directly, with the same prompt rendering, grammar
//! constraint and output assembly. Dropping a piece stream cancels the generation behind it.

use std::pin::Pin;
use std::sync::Arc;

use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::types::{TokenLogprobOut, TopLogprobOut, UsageInfo};
use crate::engine::constraint::assemble::OutputDelta;
use crate::engine::constraint::ConstraintSpec;
use crate::engine::generate::{FinishReason, GenerateEvent, GenerateRequest, TokenLogprob};
use crate::engine::tokenizer::Tokenizer;
use crate::engine::Engine;
use crate::provider::local::render_prompt;
use crate::provider::{
    CompletionRequest, ErrorKind, ErrorReason, Provider, ProviderEvent, StopReason,
};
use crate::server::error::ApiError;

/// One step of an answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    Reasoning(String),
    ToolStart {
        index: usize,
        id: String,
        name: String,
    },
    ToolArgs {
        index: usize,
        fragment: String,
    },
    /// Log-probabilities of the tokens behind the pieces that follow.
    Logprobs(Vec<TokenLogprobOut>),
    /// The answer is complete. `reason` is OpenAI's `finish_reason`.
    Finish {
        reason: &'static str,
        usage: UsageInfo,
    },
    /// The answer failed (before anything was produced this becomes the HTTP status).
    Fail(ApiError),
}

impl Piece {
    pub fn is_terminal(&self) -> bool {
        matches!(self, Piece::Finish { .. } | Piece::Fail(_))
    }
}

pub type PieceStream = Pin<Box<dyn Stream<Item = Piece> + Send>>;

/// Runs `work` as a task and streams what it sends; dropping the stream cancels `cancel`.
fn spawn_pieces<F, Fut>(cancel: CancellationToken, work: F) -> PieceStream
where
    F: FnOnce(mpsc::UnboundedSender<Piece>, CancellationToken) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded();
    tokio::spawn(work(tx, cancel.clone()));
    let guard = cancel.drop_guard();
    Box::pin(rx.map(move |p| {
        let _ = &guard;
        p
    }))
}

/// The answer from a provider.
pub fn from_provider(
    provider: Arc<dyn Provider>,
    request: CompletionRequest,
    cancel: CancellationToken,
) -> PieceStream {
    let events = provider.stream(request, cancel.clone());
    let guard = cancel.drop_guard();
    Box::pin(
        events
            .filter_map(|ev| async move { piece_of(ev) })
            .map(move |p| {
                let _ = &guard;
                p
            }),
    )
}

/// A provider event as a piece (`None` for events the wire does not show).
fn piece_of(ev: ProviderEvent) -> Option<Piece> {
    match ev {
        ProviderEvent::Start { .. } | ProviderEvent::ToolCallEnd { .. } => None,
        ProviderEvent::TextDelta { delta } => Some(Piece::Text(delta)),
        ProviderEvent::ThinkingDelta { delta } => Some(Piece::Reasoning(delta)),
        ProviderEvent::ToolCallStart { index, id, name } => {
            Some(Piece::ToolStart { index, id, name })
        }
        ProviderEvent::ToolCallDelta {
            index,
            arguments_fragment,
        } => Some(Piece::ToolArgs {
            index,
            fragment: arguments_fragment,
        }),
        ProviderEvent::Done {
            stop_reason, usage, ..
        } => Some(Piece::Finish {
            reason: match stop_reason {
                StopReason::ToolUse => "tool_calls",
                StopReason::Length => "length",
                _ => "stop",
            },
            usage: UsageInfo::new(usage.input, usage.output, usage.cached_input),
        }),
        ProviderEvent::Error {
            reason,
            kind,
            message,
            ..
        } => Some(Piece::Fail(match reason {
            ErrorReason::Aborted => ApiError::from_provider(ErrorKind::Cancelled, &message),
            ErrorReason::Error => ApiError::from_provider(kind, &message),
        })),
    }
}

/// The engine's constraint for `request` (`None`: plain text), as `LocalProvider` builds it.
pub fn constraint_spec(request: &CompletionRequest) -> Option<ConstraintSpec> {
    crate::provider::local::constraint_spec(request)
}

/// The log-probability entry of one token.
pub fn logprob_entry(tokenizer: &Tokenizer, id: u32, lp: &TokenLogprob) -> TokenLogprobOut {
    let piece = |t: u32| {
        let bytes = tokenizer.token_bytes(t);
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    };
    let (token, bytes) = piece(id);
    TokenLogprobOut {
        token,
        logprob: lp.logprob,
        bytes,
        top_logprobs: lp
            .top
            .iter()
            .map(|&(t, logprob)| {
                let (token, bytes) = piece(t);
                TopLogprobOut {
                    token,
                    logprob,
                    bytes,
                }
            })
            .collect(),
    }
}

/// The answer from the local engine directly, with `top` alternatives per token's log-probability.
pub fn from_engine(
    engine: Engine,
    request: CompletionRequest,
    top: usize,
    cancel: CancellationToken,
) -> PieceStream {
    spawn_pieces(cancel, move |tx, cancel| async move {
        let send = |p: Piece| tx.unbounded_send(p).is_ok();
        let rendering = engine.clone();
        let req = request.clone();
        let prompt = tokio::task::spawn_blocking(move || {
            render_prompt(
                rendering.template(),
                rendering.tokenizer(),
                rendering.tool_call_format(),
                &req,
            )
        })
        .await;
        let prompt = match prompt {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                send(Piece::Fail(ApiError::from_provider_error(&e)));
                return;
            }
            Err(e) => {
                send(Piece::Fail(ApiError::internal(format!(
                    "the tokenizing task failed: {e}"
                ))));
                return;
            }
        };
        let gen = GenerateRequest {
            prompt,
            sampling: request.sampling.to_engine(),
            max_tokens: request.max_tokens.map(|n| n as usize),
            stop: request.stop.clone(),
            logprobs: Some(top),
            constraint: constraint_spec(&request),
            ..GenerateRequest::default()
        };
        let mut assembler = engine.assembler(&gen);
        let mut events = engine.generate(gen, request.cache_key.clone(), cancel.clone());
        let forward = |deltas: Vec<OutputDelta>| -> bool {
            for d in deltas {
                let piece = match d {
                    OutputDelta::Content { text } => Piece::Text(text),
                    OutputDelta::ToolCallStart { index, id, name } => {
                        Piece::ToolStart { index, id, name }
                    }
                    OutputDelta::ToolCallArguments { index, fragment } => {
                        Piece::ToolArgs { index, fragment }
                    }
                    OutputDelta::ToolCallEnd { .. } | OutputDelta::ToolCallIncomplete { .. } => {
                        continue
                    }
                };
                if !send(piece) {
                    return false;
                }
            }
            true
        };
        while let Some(ev) = events.recv().await {
            match ev {
                GenerateEvent::Token(t) => {
                    if let Some(lp) = &t.logprob {
                        let entry = logprob_entry(engine.tokenizer(), t.id, lp);
                        if !send(Piece::Logprobs(vec![entry])) {
                            cancel.cancel();
                            return;
                        }
                    }
                    let deltas = match assembler.push(&t.text) {
                        Ok(d) => d,
                        Err(e) => {
                            cancel.cancel();
                            send(Piece::Fail(ApiError::from_engine(e)));
                            return;
                        }
                    };
                    if !forward(deltas) {
                        cancel.cancel();
                        return;
                    }
                }
                GenerateEvent::Done(s) => {
                    let tail = assembler.push(&s.trailing_text).and_then(|mut d| {
                        d.extend(assembler.finish(s.finish)?);
                        Ok(d)
                    });
                    match tail {
                        Ok(d) => {
                            if !forward(d) {
                                return;
                            }
                        }
                        Err(e) => {
                            send(Piece::Fail(ApiError::from_engine(e)));
                            return;
                        }
                    }
                    let usage = UsageInfo::new(
                        s.prompt_tokens as u64,
                        s.completion_tokens as u64,
                        s.cached_tokens as u64,
                    );
                    let complete_calls = assembler.tool_calls().len();
                    let reason = match s.finish {
                        FinishReason::Length => "length",
                        FinishReason::Cancelled => {
                            send(Piece::Fail(ApiError::from_provider(
                                ErrorKind::Cancelled,
                                "cancelled",
                            )));
                            return;
                        }
                        _ if complete_calls > 0 => "tool_calls",
                        _ => "stop",
                    };
                    send(Piece::Finish { reason, usage });
                    return;
                }
                GenerateEvent::Error(e) => {
                    send(Piece::Fail(ApiError::from_engine(e)));
                    return;
                }
            }
        }
        send(Piece::Fail(if cancel.is_cancelled() {
            ApiError::from_provider(ErrorKind::Cancelled, "cancelled")
        } else {
            ApiError::internal("the engine stopped without a result")
        }));
    })
}
