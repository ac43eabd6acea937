//! `POST /v1/chat/completions`, streamed and not.
//!
//! Order of work: parse and check the body (400s never queue), resolve the model (404), take a place in the
//! admission queue (503 when full), start the answer, and wait for its first piece: a failure there (a prompt
//! longer than the context window, a schema the engine cannot compile) is still an HTTP error with its status.
//! Only then does a stream start: a role chunk, content / reasoning / tool-call deltas (a call's first delta
//! carries `index`, `id`, `type` and `function.name`; argument fragments follow), a chunk with `finish_reason`,
//! the usage chunk (`choices: []`) when `stream_options.include_usage` is set, and `[DONE]`. A failure after
//! the stream started is sent as an `{"error": …}` event. A client that goes away drops the stream, which
//! cancels the generation and frees the slot.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use std::time::Duration;

use futures::StreamExt;

use super::convert::{self, ChatOptions};
use super::source::{self, Piece, PieceStream};
use super::types::{
    now_unix, response_id, ChatChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChoiceLogprobs, ChunkChoice, ChunkDelta, FunctionOut, ResponseMessage,
    ToolCallOut, UsageInfo,
};
use crate::provider::CompletionRequest;
use crate::server::admission::Permit;
use crate::server::error::ApiError;
use crate::server::metrics::{Finished, RequestTimer};
use crate::server::{parse_json, sse, AppState};

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let mut timer = state.metrics.timer();
    // Parsing up to the body limit and compiling schemas is CPU work: off the async workers, a few at a time.
    let limits = state.options.limits.clone();
    let max_body = state.options.max_body_bytes;
    let provider = state.provider.clone();
    let (mut request, opts, model) = state
        .cpu_bound(move || {
            let req: ChatCompletionRequest = parse_json(body, max_body)?;
            let model = match provider.resolve_model(&req.model) {
                Some(m) => m,
                None => return Err(unknown_model(provider.as_ref(), &req.model)),
            };
            let (request, opts) = convert::chat_request(req, model.clone(), &limits)?;
            Ok((request, opts, model))
        })
        .await?;
    request.sampling = request.sampling.or(&state.options.generation_defaults);
    if opts.logprobs.is_some() && !state.provider.supports_logprobs() {
        return Err(ApiError::invalid_param(
            "logprobs",
            "logprobs are not available from this server's provider",
        ));
    }
    let user = request
        .cache_key
        .as_deref()
        .and_then(|k| k.strip_prefix("openai-user:"));
    request.cache_scope = Some(state.cache_scope(user));
    let answer = Answer {
        id: response_id("chatcmpl"),
        created: now_unix(),
        model,
        opts,
    };
    if opts.stream {
        return stream(state, request, answer, timer).await;
    }
    let permit = state.admit().await?;
    timer.admitted(permit.queued());
    let cancel = state.shutdown.child_token();
    let mut pieces = source::from_provider(state.provider.clone(), request, cancel);
    // The first piece decides between an HTTP error and a 200.
    let first = match pieces.next().await {
        Some(Piece::Fail(e)) => {
            timer.finish(Finished::Error, 0, 0);
            return Err(e);
        }
        Some(p) => p,
        None => return Err(ApiError::internal("the answer ended without a result")),
    };
    let response = collect(answer, first, pieces, &mut timer).await;
    drop(permit);
    response.map(|r| axum::Json(r).into_response())
}

/// 404 naming the served models.
fn unknown_model(provider: &dyn crate::provider::Provider, name: &str) -> ApiError {
    let ids: Vec<String> = provider.models().into_iter().map(|m| m.id).collect();
    ApiError::unknown_model(name, &ids)
}

/// How long a streamed answer that got a slot at once may wait for its first piece before the response starts
/// anyway (with keep-alive comments): a failure within it is still an HTTP error with its status.
const FIRST_PIECE_WAIT: Duration = Duration::from_secs(5);

/// A streamed answer (503 when the queue is full). With a free slot it starts as a plain answer would: a failure
/// before the first piece (within [`FIRST_PIECE_WAIT`]) is an HTTP error. A request that has to wait gets its SSE headers at once and keep-alive
/// comments while it waits and prefills, so no proxy drops it (a prompt longer than the context window is still
/// a 400, checked before it queues); a failure after that is an `error` event.
async fn stream(
    state: AppState,
    request: CompletionRequest,
    answer: Answer,
    mut timer: RequestTimer,
) -> Result<Response, ApiError> {
    if state.draining.is_cancelled() {
        return Err(ApiError::unavailable("the server is shutting down", 1));
    }
    let shutdown = state.shutdown.clone();
    let provider = state.provider.clone();
    if let Some(permit) = state.admission.try_admit() {
        timer.admitted(permit.queued());
        let mut pieces = source::from_provider(provider, request, shutdown.child_token());
        let pending = match tokio::time::timeout(FIRST_PIECE_WAIT, pieces.next()).await {
            Ok(Some(Piece::Fail(e))) => {
                timer.finish(Finished::Error, 0, 0);
                return Err(e);
            }
            Ok(Some(p)) => Some(p),
            Ok(None) => return Err(ApiError::internal("the answer ended without a result")),
            Err(_) => None,
        };
        let stream = ChatStream {
            answer,
            pieces,
            pending,
            logprobs: Vec::new(),
            timer,
            _permit: permit,
            started: false,
            done: false,
        };
        return Ok(sse::response(stream.into_events()));
    }
    // Queued: the prompt's fit is checked now, while a 400 can still be sent (an admitted stream learns it from
    // the provider's first piece instead, without a second tokenization).
    check_fits(&state, &request).await?;
    let ticket = state.admission.enter()?;
    let events = futures::stream::once(async move {
        let permit = match ticket.wait(&shutdown).await {
            Ok(p) => p,
            Err(e) => {
                timer.finish(Finished::Error, 0, 0);
                return futures::stream::iter([sse::json_event(&e.body()), sse::done()]).boxed();
            }
        };
        timer.admitted(permit.queued());
        let pieces = source::from_provider(provider, request, shutdown.child_token());
        ChatStream {
            answer,
            pieces,
            pending: None,
            logprobs: Vec::new(),
            timer,
            _permit: permit,
            started: false,
            done: false,
        }
        .into_events()
        .boxed()
    })
    .flatten();
    Ok(sse::response(events))
}

/// 400 `context_length_exceeded` when the prompt alone fills the model's context window (known exactly from the
/// provider's own count; nothing is said when the provider only estimates).
async fn check_fits(state: &AppState, request: &CompletionRequest) -> Result<(), ApiError> {
    // Tokenizing before admission is CPU work: one per core at a time, like the other checks.
    let _cpu = state
        .cpu
        .acquire()
        .await
        .map_err(|_| ApiError::unavailable("the server is shutting down", 1))?;
    let Ok(count) = state.provider.count_tokens(request).await else {
        return Ok(());
    };
    let window = state
        .provider
        .models()
        .into_iter()
        .find(|m| m.id == request.model)
        .map_or(0, |m| m.context_window);
    if count.exact && window > 0 && count.tokens >= window {
        return Err(ApiError::bad_request(format!(
            "the prompt is {} tokens, but the model's context window is {window} tokens",
            count.tokens
        ))
        .with_code("context_length_exceeded"));
    }
    Ok(())
}

/// What every chunk of one answer repeats.
struct Answer {
    id: String,
    created: u64,
    model: String,
    opts: ChatOptions,
}

/// Folds the pieces into one `chat.completion`.
async fn collect(
    answer: Answer,
    first: Piece,
    mut pieces: PieceStream,
    timer: &mut RequestTimer,
) -> Result<ChatCompletionResponse, ApiError> {
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls: Vec<ToolCallOut> = Vec::new();
    let mut logprobs = ChoiceLogprobs::default();
    let mut next = Some(first);
    loop {
        let piece = match next.take() {
            Some(p) => p,
            None => match pieces.next().await {
                Some(p) => p,
                None => return Err(ApiError::internal("the answer ended without a result")),
            },
        };
        match piece {
            Piece::Text(t) => {
                timer.output();
                text.push_str(&t);
            }
            Piece::Reasoning(t) => {
                timer.output();
                reasoning.push_str(&t);
            }
            Piece::ToolStart { index, id, name } => {
                timer.output();
                calls.push(ToolCallOut {
                    index: None,
                    id: Some(id),
                    kind: Some("function"),
                    function: FunctionOut {
                        name: Some(name),
                        arguments: Some(String::new()),
                    },
                });
                debug_assert_eq!(index + 1, calls.len());
            }
            Piece::ToolArgs { index, fragment } => {
                timer.output();
                if let Some(FunctionOut {
                    arguments: Some(a), ..
                }) = calls.get_mut(index).map(|c| &mut c.function)
                {
                    a.push_str(&fragment);
                }
            }
            Piece::Logprobs(entries) => logprobs.content.extend(entries),
            Piece::Finish { reason, usage } => {
                timer.finish(
                    finished(reason),
                    usage.prompt_tokens,
                    usage.completion_tokens,
                );
                let content = if text.is_empty() && !calls.is_empty() {
                    None
                } else {
                    Some(text)
                };
                return Ok(ChatCompletionResponse {
                    id: answer.id,
                    object: "chat.completion",
                    created: answer.created,
                    model: answer.model,
                    choices: vec![ChatChoice {
                        index: 0,
                        message: ResponseMessage {
                            role: "assistant",
                            content,
                            reasoning_content: (!reasoning.is_empty()).then_some(reasoning),
                            tool_calls: calls,
                        },
                        logprobs: answer.opts.logprobs.map(|_| logprobs),
                        finish_reason: reason,
                    }],
                    usage,
                });
            }
            Piece::Fail(e) => {
                timer.finish(Finished::Error, 0, 0);
                return Err(e);
            }
        }
    }
}

/// The metrics label of a `finish_reason`.
pub fn finished(reason: &str) -> Finished {
    match reason {
        "length" => Finished::Length,
        _ => Finished::Stop,
    }
}

/// The state of one streamed answer.
struct ChatStream {
    answer: Answer,
    pieces: PieceStream,
    /// The piece read before the stream started.
    pending: Option<Piece>,
    /// Log-probabilities waiting for the next chunk.
    logprobs: Vec<super::types::TokenLogprobOut>,
    timer: RequestTimer,
    /// Held until the stream ends or is dropped (the client went away).
    _permit: Permit,
    started: bool,
    done: bool,
}

impl ChatStream {
    fn into_events(self) -> impl futures::Stream<Item = Event> + Send {
        futures::stream::unfold(self, |mut s| async move {
            if s.done {
                return None;
            }
            let events = s.step().await;
            Some((futures::stream::iter(events), s))
        })
        .flatten()
    }

    fn chunk(&mut self, delta: ChunkDelta, finish_reason: Option<&'static str>) -> Event {
        let logprobs = self.answer.opts.logprobs.map(|_| ChoiceLogprobs {
            content: std::mem::take(&mut self.logprobs),
        });
        let chunk = ChatCompletionChunk {
            id: self.answer.id.clone(),
            object: "chat.completion.chunk",
            created: self.answer.created,
            model: self.answer.model.clone(),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                logprobs,
                finish_reason,
            }],
            usage: self.answer.opts.include_usage.then_some(None),
        };
        sse::json_event(&chunk)
    }

    /// The events for the next piece (several at the start and the end).
    async fn step(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(self.chunk(
                ChunkDelta {
                    role: Some("assistant"),
                    content: Some(String::new()),
                    ..ChunkDelta::default()
                },
                None,
            ));
        }
        let piece = match self.pending.take() {
            Some(p) => p,
            None => match self.pieces.next().await {
                Some(p) => p,
                None => Piece::Fail(ApiError::internal("the answer ended without a result")),
            },
        };
        let delta = match piece {
            Piece::Text(t) => ChunkDelta {
                content: Some(t),
                ..ChunkDelta::default()
            },
            Piece::Reasoning(t) => ChunkDelta {
                reasoning_content: Some(t),
                ..ChunkDelta::default()
            },
            Piece::ToolStart { index, id, name } => ChunkDelta {
                tool_calls: Some(vec![ToolCallOut {
                    index: Some(index),
                    id: Some(id),
                    kind: Some("function"),
                    function: FunctionOut {
                        name: Some(name),
                        arguments: Some(String::new()),
                    },
                }]),
                ..ChunkDelta::default()
            },
            Piece::ToolArgs { index, fragment } => ChunkDelta {
                tool_calls: Some(vec![ToolCallOut {
                    index: Some(index),
                    id: None,
                    kind: None,
                    function: FunctionOut {
                        name: None,
                        arguments: Some(fragment),
                    },
                }]),
                ..ChunkDelta::default()
            },
            Piece::Logprobs(entries) => {
                self.logprobs.extend(entries);
                return out;
            }
            Piece::Finish { reason, usage } => {
                self.done = true;
                self.timer.finish(
                    finished(reason),
                    usage.prompt_tokens,
                    usage.completion_tokens,
                );
                out.push(self.chunk(ChunkDelta::default(), Some(reason)));
                if self.answer.opts.include_usage {
                    out.push(sse::json_event(&self.usage_chunk(usage)));
                }
                out.push(sse::done());
                return out;
            }
            Piece::Fail(e) => {
                self.done = true;
                self.timer.finish(Finished::Error, 0, 0);
                out.push(sse::json_event(&e.body()));
                out.push(sse::done());
                return out;
            }
        };
        self.timer.output();
        out.push(self.chunk(delta, None));
        out
    }

    fn usage_chunk(&self, usage: UsageInfo) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.answer.id.clone(),
            object: "chat.completion.chunk",
            created: self.answer.created,
            model: self.answer.model.clone(),
            choices: Vec::new(),
            usage: Some(Some(usage)),
        }
    }
}
