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

use super::convert::{self, ChatOptions};
use super::types::{
    now_unix, response_id, ChatChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChoiceLogprobs, ChunkChoice, ChunkDelta, FunctionOut, ResponseMessage,
    ToolCallOut, UsageInfo,
};
use crate::server::chat_answer::{Collected, Render};
use crate::server::error::ApiError;
use crate::server::source::Piece;
use crate::server::timings::LlamaTimings;
use crate::server::{parse_json, sse, AppState};

/// `POST /v1/chat/completions`.
#[utoipa::path(post, path = "/v1/chat/completions", tag = "openai",
    request_body = ChatCompletionRequest,
    responses(
        (status = 200, description = "The answer; with `stream: true` server-sent `chat.completion.chunk` events \
                                      ending in `[DONE]`",
         content((ChatCompletionResponse = "application/json"), (crate::server::openapi::SseEvent = "text/event-stream"))),
        crate::server::openapi::OpenAiErrors))]
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
    timer.model(&model);
    state.complete_request(&mut request);
    if opts.logprobs.is_some() && !state.provider.supports_logprobs() {
        return Err(ApiError::invalid_param(
            "logprobs",
            "logprobs are not available from this server's provider",
        ));
    }
    let answer = Answer {
        id: response_id("chatcmpl"),
        created: now_unix(),
        model,
        opts,
    };
    if opts.stream {
        let render = ChatStream {
            answer,
            logprobs: Vec::new(),
        };
        return crate::server::chat_answer::stream(state, request, render, timer).await;
    }
    let done = crate::server::chat_answer::complete(&state, request, &mut timer).await?;
    Ok(axum::Json(response(answer, done)).into_response())
}

/// 404 naming the served models.
fn unknown_model(provider: &dyn crate::provider::Provider, name: &str) -> ApiError {
    let ids: Vec<String> = provider.models().into_iter().map(|m| m.id).collect();
    ApiError::unknown_model(name, &ids)
}

/// What every chunk of one answer repeats.
struct Answer {
    id: String,
    created: u64,
    model: String,
    opts: ChatOptions,
}

/// The whole answer as one `chat.completion`.
fn response(answer: Answer, done: Collected) -> ChatCompletionResponse {
    let calls: Vec<ToolCallOut> = done
        .calls
        .into_iter()
        .map(|c| ToolCallOut {
            index: None,
            id: Some(c.id),
            kind: Some("function"),
            function: FunctionOut {
                name: Some(c.name),
                arguments: Some(c.arguments),
            },
        })
        .collect();
    let content = if done.text.is_empty() && !calls.is_empty() {
        None
    } else {
        Some(done.text)
    };
    ChatCompletionResponse {
        id: answer.id,
        object: "chat.completion",
        created: answer.created,
        model: answer.model,
        choices: vec![ChatChoice {
            index: 0,
            message: ResponseMessage {
                role: "assistant",
                content,
                reasoning_content: (!done.reasoning.is_empty()).then_some(done.reasoning),
                tool_calls: calls,
            },
            logprobs: answer.opts.logprobs.map(|_| ChoiceLogprobs {
                content: done.logprobs,
            }),
            finish_reason: done.reason,
        }],
        timings: answer_timings(&done.usage, done.timings.as_ref()),
        usage: done.usage,
    }
}

/// How one streamed answer is written: a role chunk, content / reasoning / tool-call deltas, the
/// `finish_reason` chunk, the usage chunk when asked for, `[DONE]`; a failure as an `{"error": …}` event.
struct ChatStream {
    answer: Answer,
    /// Log-probabilities waiting for the next chunk.
    logprobs: Vec<super::types::TokenLogprobOut>,
}

impl ChatStream {
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
            timings: None,
        };
        sse::json_event(&chunk)
    }

    /// The chunk with `finish_reason`, carrying the timings.
    fn finish_chunk(&mut self, reason: &'static str, timings: Option<LlamaTimings>) -> Event {
        let logprobs = self.answer.opts.logprobs.map(|_| ChoiceLogprobs {
            content: std::mem::take(&mut self.logprobs),
        });
        sse::json_event(&ChatCompletionChunk {
            id: self.answer.id.clone(),
            object: "chat.completion.chunk",
            created: self.answer.created,
            model: self.answer.model.clone(),
            choices: vec![ChunkChoice {
                index: 0,
                delta: ChunkDelta::default(),
                logprobs,
                finish_reason: Some(reason),
            }],
            usage: None,
            timings,
        })
    }

    fn usage_chunk(&self, usage: UsageInfo) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.answer.id.clone(),
            object: "chat.completion.chunk",
            created: self.answer.created,
            model: self.answer.model.clone(),
            choices: Vec::new(),
            usage: Some(Some(usage)),
            timings: None,
        }
    }
}

impl Render for ChatStream {
    type Frame = axum::response::sse::Event;

    fn response<S>(frames: S) -> axum::response::Response
    where
        S: futures::Stream<Item = Self::Frame> + Send + 'static,
    {
        crate::server::sse::response(frames)
    }

    fn start(&mut self) -> Vec<Event> {
        vec![self.chunk(
            ChunkDelta {
                role: Some("assistant"),
                content: Some(String::new()),
                ..ChunkDelta::default()
            },
            None,
        )]
    }

    fn piece(&mut self, piece: Piece) -> Vec<Event> {
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
                return Vec::new();
            }
            Piece::Finish {
                reason,
                usage,
                timings,
            } => {
                // llama.cpp puts its timings on the chunk that ends the answer.
                let timings = answer_timings(&usage, timings.as_ref());
                let mut out = Vec::new();
                if self.answer.opts.include_usage {
                    out.push(self.chunk(ChunkDelta::default(), Some(reason)));
                    let mut last = self.usage_chunk(usage);
                    last.timings = timings;
                    out.push(sse::json_event(&last));
                } else {
                    out.push(self.finish_chunk(reason, timings));
                }
                out.push(sse::done());
                return out;
            }
            Piece::Fail(e) => return vec![sse::json_event(&e.body()), sse::done()],
        };
        vec![self.chunk(delta, None)]
    }
}

/// llama.cpp's timings of an answer whose usage is `usage` (`None` when the provider measured nothing).
fn answer_timings(usage: &UsageInfo, t: Option<&crate::provider::Timings>) -> Option<LlamaTimings> {
    let cached = usage
        .prompt_tokens_details
        .as_ref()
        .map_or(0, |d| d.cached_tokens);
    t.map(|t| LlamaTimings::new(usage.prompt_tokens, cached, usage.completion_tokens, t))
}
