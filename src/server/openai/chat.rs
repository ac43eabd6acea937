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
use futures::StreamExt;

use super::convert::{self, ChatOptions};
use super::source::{self, Piece, PieceStream};
use super::types::{
    now_unix, response_id, ChatChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChoiceLogprobs, ChunkChoice, ChunkDelta, FunctionOut, ResponseMessage,
    ToolCallOut, UsageInfo,
};
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
    let req: ChatCompletionRequest = parse_json(body, state.options.max_body_bytes)?;
    let model = state.resolve_model(&req.model)?;
    let (request, opts) = convert::chat_request(req, model.clone())?;
    if opts.logprobs.is_some() && !state.provider.supports_logprobs() {
        return Err(ApiError::invalid_param(
            "logprobs",
            "logprobs are not available from this server's provider",
        ));
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
    let answer = Answer {
        id: response_id("chatcmpl"),
        created: now_unix(),
        model,
        opts,
    };
    if opts.stream {
        let stream = ChatStream {
            answer,
            pieces,
            pending: Some(first),
            logprobs: Vec::new(),
            timer,
            _permit: permit,
            started: false,
            done: false,
        };
        Ok(sse::response(stream.into_events()))
    } else {
        collect(answer, first, pieces, &mut timer)
            .await
            .map(|r| axum::Json(r).into_response())
    }
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
