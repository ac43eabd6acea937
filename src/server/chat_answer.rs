//! One model answer for every door that speaks a chat-like API (OpenAI Chat Completions and Responses,
//! Anthropic Messages): a place in the admission queue, the wait for the first piece that decides between an
//! HTTP error and a 200, the metrics, and then either the whole answer folded into a [`Collected`] or a stream of
//! the door's own events ([`stream`], through its [`Render`]).
//!
//! A streamed answer that gets a slot at once starts as a plain answer would: a failure before its first piece
//! (within [`FIRST_PIECE_WAIT`]) is an HTTP error with its status. A request that has to wait gets its SSE
//! headers at once and keep-alive comments while it waits and prefills, so no proxy drops it (a prompt longer
//! than the context window is still a 400, checked before it queues); a failure after that is the door's error
//! event. A client that goes away drops the stream, which cancels the generation and frees the slot.

use std::time::Duration;

use axum::response::Response;
use futures::StreamExt;

use super::admission::Permit;
use super::error::ApiError;
use super::metrics::{Finished, RequestTimer};
use super::source::{self, Ask, Piece, PieceStream};
use super::usage::{TokenLogprobOut, UsageInfo};
use super::AppState;
use crate::provider::CompletionRequest;

/// How long a streamed answer that got a slot at once may wait for its first piece before the response starts
/// anyway (with keep-alive comments): a failure within it is still an HTTP error with its status.
pub const FIRST_PIECE_WAIT: Duration = Duration::from_secs(5);

/// A whole answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Collected {
    pub text: String,
    pub reasoning: String,
    pub calls: Vec<CollectedCall>,
    pub logprobs: Vec<TokenLogprobOut>,
    /// OpenAI's `finish_reason` (`stop`, `length`, `tool_calls`).
    pub reason: &'static str,
    pub usage: UsageInfo,
    /// The server's account of where the time went, when the provider measured it.
    pub timings: Option<crate::provider::Timings>,
}

/// A tool call of a whole answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectedCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// The metrics label of a `finish_reason`.
pub fn finished(reason: &str) -> Finished {
    match reason {
        "length" => Finished::Length,
        _ => Finished::Stop,
    }
}

/// Counts `piece` in the request's metrics (output tokens, the end).
fn observe(timer: &mut RequestTimer, piece: &Piece) {
    match piece {
        Piece::Text(_) | Piece::Reasoning(_) | Piece::ToolStart { .. } | Piece::ToolArgs { .. } => {
            timer.output()
        }
        Piece::Finish {
            reason,
            usage,
            timings,
        } => {
            if let Some(t) = timings {
                timer.timings(t);
            }
            timer.finish(
                finished(reason),
                usage.prompt_tokens,
                usage.completion_tokens,
            )
        }
        Piece::Fail(_) => timer.finish(Finished::Error, 0, 0),
        Piece::Logprobs(_) => {}
    }
}

/// The whole answer to `request` (waits for a slot; 503 when the queue is full).
pub async fn complete(
    state: &AppState,
    request: impl Into<Ask>,
    timer: &mut RequestTimer,
) -> Result<Collected, ApiError> {
    let permit = state.admit().await?;
    timer.admitted(permit.queued());
    let cancel = state.shutdown.child_token();
    let mut pieces = source::from_provider(state.provider.clone(), request, cancel);
    let mut out = Collected::default();
    loop {
        let piece = pieces.next().await.unwrap_or_else(|| {
            Piece::Fail(ApiError::internal("the answer ended without a result"))
        });
        observe(timer, &piece);
        match piece {
            Piece::Text(t) => out.text.push_str(&t),
            Piece::Reasoning(t) => out.reasoning.push_str(&t),
            Piece::ToolStart { id, name, .. } => out.calls.push(CollectedCall {
                id,
                name,
                arguments: String::new(),
            }),
            Piece::ToolArgs { index, fragment } => {
                if let Some(call) = out.calls.get_mut(index) {
                    call.arguments.push_str(&fragment);
                }
            }
            Piece::Logprobs(entries) => out.logprobs.extend(entries),
            Piece::Finish {
                reason,
                usage,
                timings,
            } => {
                out.reason = reason;
                out.usage = usage;
                out.timings = timings;
                drop(permit);
                return Ok(out);
            }
            Piece::Fail(e) => return Err(e),
        }
    }
}

/// How a door writes a streamed answer: server-sent events (OpenAI, Anthropic) or JSON lines (Ollama).
pub trait Render: Send + 'static {
    /// One unit of the stream: an SSE event, a line.
    type Frame: Send + 'static;

    /// The frames for one piece (the first piece comes right after [`Render::start`]). After a terminal piece
    /// ([`Piece::Finish`], [`Piece::Fail`]) the stream ends with whatever this returned.
    fn piece(&mut self, piece: Piece) -> Vec<Self::Frame>;

    /// The frames that open the stream, before the first piece.
    fn start(&mut self) -> Vec<Self::Frame> {
        Vec::new()
    }

    /// The frames for a request that failed while it waited for a slot (the stream's headers went out, but
    /// not [`Render::start`]'s frames).
    fn queue_failure(&mut self, error: &ApiError) -> Vec<Self::Frame> {
        self.piece(Piece::Fail(error.clone()))
    }

    /// The HTTP response carrying `frames`.
    fn response<S>(frames: S) -> Response
    where
        S: futures::Stream<Item = Self::Frame> + Send + 'static;
}

/// `request`'s answer as `render`'s events (see the module docs for when a failure is an HTTP error).
pub async fn stream<R: Render>(
    state: AppState,
    request: impl Into<Ask>,
    render: R,
    mut timer: RequestTimer,
) -> Result<Response, ApiError> {
    if state.draining.is_cancelled() {
        return Err(ApiError::unavailable("the server is shutting down", 1));
    }
    let request: Ask = request.into();
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
        let driver = Driver {
            render,
            pieces,
            pending,
            timer,
            _permit: permit,
            started: false,
            done: false,
        };
        return Ok(R::response(driver.into_events()));
    }
    // Queued: the prompt's fit is checked now, while a 400 can still be sent (an admitted stream learns it from
    // the provider's first piece instead, without a second tokenization).
    if let Ask::Chat(chat) = &request {
        check_fits(&state, chat).await?;
    }
    let ticket = state.admission.enter()?;
    let events = futures::stream::once(async move {
        let mut render = render;
        let permit = match ticket.wait(&shutdown).await {
            Ok(p) => p,
            Err(e) => {
                timer.finish(Finished::Error, 0, 0);
                return futures::stream::iter(render.queue_failure(&e)).boxed();
            }
        };
        timer.admitted(permit.queued());
        let pieces = source::from_provider(provider, request, shutdown.child_token());
        Driver {
            render,
            pieces,
            pending: None,
            timer,
            _permit: permit,
            started: false,
            done: false,
        }
        .into_events()
        .boxed()
    })
    .flatten();
    Ok(R::response(events))
}

/// 400 `context_length_exceeded` when the prompt alone fills the model's context window (known exactly from the
/// provider's own count; nothing is said when the provider only estimates).
pub async fn check_fits(state: &AppState, request: &CompletionRequest) -> Result<(), ApiError> {
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

/// One streamed answer: pieces in, the door's events out.
struct Driver<R: Render> {
    render: R,
    pieces: PieceStream,
    /// The piece read before the stream started.
    pending: Option<Piece>,
    timer: RequestTimer,
    /// Held until the stream ends or is dropped (the client went away).
    _permit: Permit,
    started: bool,
    done: bool,
}

impl<R: Render> Driver<R> {
    fn into_events(self) -> impl futures::Stream<Item = R::Frame> + Send {
        futures::stream::unfold(self, |mut d| async move {
            if d.done {
                return None;
            }
            let events = d.step().await;
            Some((futures::stream::iter(events), d))
        })
        .flatten()
    }

    async fn step(&mut self) -> Vec<R::Frame> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.extend(self.render.start());
        }
        let piece = match self.pending.take() {
            Some(p) => p,
            None => self.pieces.next().await.unwrap_or_else(|| {
                Piece::Fail(ApiError::internal("the answer ended without a result"))
            }),
        };
        observe(&mut self.timer, &piece);
        self.done = piece.is_terminal();
        out.extend(self.render.piece(piece));
        out
    }
}
