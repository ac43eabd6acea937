//! [`ScriptedProvider`]: deterministic completions for tests. Each request takes the next [`ScriptedReply`]
//! (text, thinking, tool calls, delays, a hang until cancelled, errors), which is streamed in small chunks
//! through the same assembly as the real providers, so tool calls are checked against the request's tools and
//! the events are exactly what a real provider would send. Every request is recorded.
//!
//! ```
//! # use agentd::provider::*;
//! let provider = ScriptedProvider::new([
//!     ScriptedReply::new().text("Let me look.").tool_call("read", r#"{"path": "a.rs"}"#),
//!     ScriptedReply::new().text("Done."),
//! ]);
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::assemble::Assembler;
use super::events::{spawn_stream, EventSender};
use super::{
    estimate_tokens, model_or_default, CompletionRequest, ErrorKind, ModelDescriptor, Provider,
    ProviderError, ProviderStream, StopReason, TokenCount, TokenLogprob, Usage,
};

/// One step of a scripted reply.
#[derive(Debug, Clone, PartialEq)]
pub enum ScriptStep {
    Text(String),
    Thinking(String),
    /// A tool call; `arguments` is the raw JSON text the "model" writes (it may be invalid on purpose).
    ToolCall {
        id: Option<String>,
        name: String,
        arguments: String,
    },
    /// Wait this long (a slow model); cancellation ends the wait.
    Delay(Duration),
    /// Wait until the request is cancelled (for abort tests).
    Hang,
    /// End the stream with this error.
    Fail {
        kind: ErrorKind,
        message: String,
    },
    /// Report these log-probabilities (for the text that follows), when the request asked for them.
    Logprobs(Vec<TokenLogprob>),
}

/// What the scripted model answers to one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScriptedReply {
    pub steps: Vec<ScriptStep>,
    /// `None`: `tool_use` when the reply has tool calls, else `stop`.
    pub stop_reason: Option<StopReason>,
    /// `None`: estimated (see [`estimate_tokens`]) from the request and the reply.
    pub usage: Option<Usage>,
}

impl ScriptedReply {
    pub fn new() -> Self {
        Self::default()
    }

    /// A reply that is just this text.
    pub fn text_only(text: impl Into<String>) -> Self {
        Self::new().text(text)
    }

    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.steps.push(ScriptStep::Text(text.into()));
        self
    }

    pub fn thinking(mut self, text: impl Into<String>) -> Self {
        self.steps.push(ScriptStep::Thinking(text.into()));
        self
    }

    /// A tool call with a generated id.
    pub fn tool_call(mut self, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        self.steps.push(ScriptStep::ToolCall {
            id: None,
            name: name.into(),
            arguments: arguments.into(),
        });
        self
    }

    /// A tool call with a given id.
    pub fn tool_call_with_id(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        self.steps.push(ScriptStep::ToolCall {
            id: Some(id.into()),
            name: name.into(),
            arguments: arguments.into(),
        });
        self
    }

    pub fn delay(mut self, d: Duration) -> Self {
        self.steps.push(ScriptStep::Delay(d));
        self
    }

    pub fn hang(mut self) -> Self {
        self.steps.push(ScriptStep::Hang);
        self
    }

    pub fn fail(mut self, kind: ErrorKind, message: impl Into<String>) -> Self {
        self.steps.push(ScriptStep::Fail {
            kind,
            message: message.into(),
        });
        self
    }

    /// The log-probabilities of the text that follows (sent only to a request that asks for `logprobs`; see
    /// [`ScriptedProvider::with_logprobs`]).
    pub fn logprobs(mut self, entries: Vec<TokenLogprob>) -> Self {
        self.steps.push(ScriptStep::Logprobs(entries));
        self
    }

    pub fn stop_reason(mut self, reason: StopReason) -> Self {
        self.stop_reason = Some(reason);
        self
    }

    pub fn usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }
}

struct Inner {
    replies: Mutex<VecDeque<ScriptedReply>>,
    requests: Mutex<Vec<CompletionRequest>>,
    chunk_chars: usize,
    chunk_delay: Duration,
    model: ModelDescriptor,
    /// Whether requests may ask for `logprobs` (the script's [`ScriptStep::Logprobs`]).
    logprobs: bool,
}

/// A provider that plays back scripted replies, one per request, in order. Cheap to clone: clones share the
/// script and the record of requests, so a test can keep one while the agent owns another.
#[derive(Clone)]
pub struct ScriptedProvider {
    inner: Arc<Inner>,
}

impl ScriptedProvider {
    /// Replies streamed 4 characters at a time, with no delay between chunks.
    pub fn new(replies: impl IntoIterator<Item = ScriptedReply>) -> Self {
        Self::with_options(replies, 4, Duration::ZERO)
    }

    /// `chunk_chars` characters per delta (at least 1), `chunk_delay` between deltas.
    pub fn with_options(
        replies: impl IntoIterator<Item = ScriptedReply>,
        chunk_chars: usize,
        chunk_delay: Duration,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                replies: Mutex::new(replies.into_iter().collect()),
                requests: Mutex::new(Vec::new()),
                chunk_chars: chunk_chars.max(1),
                chunk_delay,
                model: ModelDescriptor {
                    id: "scripted".into(),
                    context_window: 32_768,
                    max_output_tokens: 4_096,
                    device: None,
                },
                logprobs: false,
            }),
        }
    }

    /// The same script on a "model" with a `window`-token context window (for compaction tests). Call it before
    /// the provider is cloned: requests recorded so far are not carried over.
    pub fn with_context_window(self, window: u64) -> Self {
        let mut model = self.inner.model.clone();
        model.context_window = window;
        model.max_output_tokens = model.max_output_tokens.min(window);
        let logprobs = self.inner.logprobs;
        self.rebuilt(model, logprobs)
    }

    /// The same script on a "model" that reports log-probabilities (its replies' [`ScriptStep::Logprobs`]). Call
    /// it before the provider is cloned, as [`with_context_window`](Self::with_context_window).
    pub fn with_logprobs(self) -> Self {
        let model = self.inner.model.clone();
        self.rebuilt(model, true)
    }

    fn rebuilt(self, model: ModelDescriptor, logprobs: bool) -> Self {
        let replies = std::mem::take(&mut *lock(&self.inner.replies));
        Self {
            inner: Arc::new(Inner {
                replies: Mutex::new(replies),
                requests: Mutex::new(Vec::new()),
                chunk_chars: self.inner.chunk_chars,
                chunk_delay: self.inner.chunk_delay,
                model,
                logprobs,
            }),
        }
    }

    /// Queues another reply.
    pub fn push(&self, reply: ScriptedReply) {
        lock(&self.inner.replies).push_back(reply);
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<CompletionRequest> {
        lock(&self.inner.requests).clone()
    }

    /// Replies not yet used.
    pub fn remaining(&self) -> usize {
        lock(&self.inner.replies).len()
    }
}

/// A poisoned lock only means a test panicked while holding it; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[async_trait::async_trait]
impl Provider for ScriptedProvider {
    fn stream(&self, request: CompletionRequest, cancel: CancellationToken) -> ProviderStream {
        let inner = self.inner.clone();
        spawn_stream(cancel, move |tx, cancel| play(inner, request, tx, cancel))
    }

    /// The estimate of [`estimate_tokens`], which is also what the replies report as `input` usage: exact for
    /// this provider's "model".
    async fn count_tokens(&self, request: &CompletionRequest) -> Result<TokenCount, ProviderError> {
        Ok(TokenCount {
            tokens: estimate_tokens(request),
            exact: true,
        })
    }

    fn models(&self) -> Vec<ModelDescriptor> {
        vec![self.inner.model.clone()]
    }

    fn describe(&self) -> String {
        "scripted".into()
    }

    fn supports_logprobs(&self) -> bool {
        self.inner.logprobs
    }
}

async fn play(
    inner: Arc<Inner>,
    request: CompletionRequest,
    tx: EventSender,
    cancel: CancellationToken,
) {
    lock(&inner.requests).push(request.clone());
    let model = model_or_default(&request, std::slice::from_ref(&inner.model));
    let input = estimate_tokens(&request);
    let mut out = Assembler::new(tx, request.tools.clone(), model);
    let Some(reply) = lock(&inner.replies).pop_front() else {
        out.fail(
            &ProviderError::Internal("the scripted provider has no reply left".into()),
            Usage::default(),
        );
        return;
    };
    out.start();
    let mut produced_chars = 0usize;
    for step in reply.steps {
        let usage = Usage::new(input, (produced_chars as u64).div_ceil(4), 0);
        let result = match step {
            ScriptStep::Text(text) => {
                produced_chars += text.chars().count();
                chunked(&inner, &cancel, &text, |c| out.text(c)).await
            }
            ScriptStep::Thinking(text) => {
                produced_chars += text.chars().count();
                chunked(&inner, &cancel, &text, |c| out.thinking(c)).await
            }
            ScriptStep::ToolCall {
                id,
                name,
                arguments,
            } => {
                produced_chars += name.chars().count() + arguments.chars().count();
                let index = out.begin_call(id, &name);
                let r = chunked(&inner, &cancel, &arguments, |c| out.call_fragment(index, c)).await;
                if r.is_ok() {
                    out.end_call(index);
                }
                r
            }
            ScriptStep::Delay(d) => tokio::select! {
                _ = cancel.cancelled() => Err(ProviderError::Cancelled),
                _ = tokio::time::sleep(d) => Ok(()),
            },
            ScriptStep::Hang => {
                cancel.cancelled().await;
                Err(ProviderError::Cancelled)
            }
            ScriptStep::Fail { kind, message } => Err(scripted_error(kind, message)),
            ScriptStep::Logprobs(entries) => {
                if request.logprobs.is_some() {
                    out.logprobs(entries);
                }
                Ok(())
            }
        };
        if let Err(e) = result {
            out.fail(&e, usage);
            return;
        }
    }
    let usage = reply
        .usage
        .unwrap_or_else(|| Usage::new(input, (produced_chars as u64).div_ceil(4), 0));
    let stop = reply.stop_reason.unwrap_or(if out.call_count() > 0 {
        StopReason::ToolUse
    } else {
        StopReason::Stop
    });
    out.done(stop, usage);
}

/// Feeds `text` to `emit` in chunks, pausing between them and stopping on cancellation.
async fn chunked(
    inner: &Inner,
    cancel: &CancellationToken,
    text: &str,
    mut emit: impl FnMut(&str),
) -> Result<(), ProviderError> {
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(inner.chunk_chars) {
        if cancel.is_cancelled() {
            return Err(ProviderError::Cancelled);
        }
        let piece: String = piece.iter().collect();
        emit(&piece);
        if inner.chunk_delay.is_zero() {
            tokio::task::yield_now().await;
        } else {
            tokio::select! {
                _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
                _ = tokio::time::sleep(inner.chunk_delay) => {}
            }
        }
    }
    Ok(())
}

/// The [`ProviderError`] a scripted failure stands for.
fn scripted_error(kind: ErrorKind, message: String) -> ProviderError {
    match kind {
        ErrorKind::Connect => ProviderError::Connect {
            url: "scripted".into(),
            message,
        },
        ErrorKind::Auth => ProviderError::Auth {
            status: 401,
            message,
        },
        ErrorKind::UnknownModel => ProviderError::UnknownModel {
            model: "scripted".into(),
            message,
        },
        ErrorKind::NotFound => ProviderError::NotFound {
            url: "scripted".into(),
            message,
        },
        ErrorKind::RateLimited => ProviderError::RateLimited {
            attempts: 1,
            message,
        },
        ErrorKind::ContextOverflow => ProviderError::ContextOverflow { message },
        ErrorKind::InvalidRequest => ProviderError::InvalidRequest {
            status: 400,
            message,
        },
        ErrorKind::Server => ProviderError::Server {
            status: 500,
            attempts: 1,
            message,
        },
        ErrorKind::Timeout => ProviderError::Timeout {
            what: super::TimeoutKind::Idle,
            after: Duration::ZERO,
        },
        ErrorKind::Protocol => ProviderError::Protocol(message),
        ErrorKind::Engine => ProviderError::Engine(message),
        ErrorKind::Unsupported => ProviderError::Unsupported(message),
        ErrorKind::Config => ProviderError::Config(message),
        ErrorKind::Cancelled => ProviderError::Cancelled,
        ErrorKind::Internal => ProviderError::Internal(message),
    }
}
