//! A chat answer as one stream of [`Piece`]s, from the configured [`Provider`] (the local engine through
//! `LocalProvider`, or a remote vLLM): the only path from the server to a model. Dropping a piece stream
//! cancels the generation behind it.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::usage::{TokenLogprobOut, TopLogprobOut, UsageInfo};
use crate::provider::{
    CompletionRequest, ErrorKind, ErrorReason, Provider, ProviderEvent, StopReason, TokenLogprob,
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
        /// The server's account of where the time went, when the provider measured it.
        timings: Option<crate::provider::Timings>,
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

/// What a door asks the provider for: a chat completion, or a completion of raw text.
#[derive(Debug, Clone)]
pub enum Ask {
    Chat(CompletionRequest),
    Raw(crate::provider::RawCompletionRequest),
}

impl From<CompletionRequest> for Ask {
    fn from(r: CompletionRequest) -> Self {
        Ask::Chat(r)
    }
}

impl From<crate::provider::RawCompletionRequest> for Ask {
    fn from(r: crate::provider::RawCompletionRequest) -> Self {
        Ask::Raw(r)
    }
}

/// The answer from a provider.
pub fn from_provider(
    provider: Arc<dyn Provider>,
    ask: impl Into<Ask>,
    cancel: CancellationToken,
) -> PieceStream {
    let events = match ask.into() {
        Ask::Chat(request) => provider.stream(request, cancel.clone()),
        Ask::Raw(request) => provider.stream_raw(request, cancel.clone()),
    };
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
        ProviderEvent::Logprobs { entries } => Some(Piece::Logprobs(logprob_entries(entries))),
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
            usage: UsageInfo::from_usage(&usage),
            timings: usage.timings,
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

/// A provider's log-probability entries in OpenAI's shape.
pub fn logprob_entries(entries: Vec<TokenLogprob>) -> Vec<TokenLogprobOut> {
    entries
        .into_iter()
        .map(|e| TokenLogprobOut {
            token: e.token,
            logprob: e.logprob,
            bytes: e.bytes,
            top_logprobs: e
                .top
                .into_iter()
                .map(|t| TopLogprobOut {
                    token: t.token,
                    logprob: t.logprob,
                    bytes: t.bytes,
                })
                .collect(),
        })
        .collect()
}
