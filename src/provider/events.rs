//! Turning a provider's work into a [`ProviderStream`] that keeps the stream contract whatever happens inside:
//! the work runs as a task started on the first poll, the stream ends right after its first terminal event,
//! a task that ends (or panics) without one still yields an `error` event, and dropping the stream cancels the
//! work. Also [`collect`], which folds a stream into its result.

use std::future::Future;

use futures::channel::mpsc;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::{
    AssistantMessage, ErrorKind, ErrorReason, ProviderEvent, ProviderStream, StopReason, Usage,
};

/// Where a provider task sends its events.
pub(crate) type EventSender = mpsc::UnboundedSender<ProviderEvent>;

/// Runs `work(sender, cancel)` as a task once the stream is first polled, and streams what it sends.
/// `cancel` is a child of the caller's token that is also cancelled when the stream is dropped.
pub(crate) fn spawn_stream<F, Fut>(cancel: CancellationToken, work: F) -> ProviderStream
where
    F: FnOnce(EventSender, CancellationToken) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let child = cancel.child_token();
    let guard = child.clone().drop_guard();
    let events = futures::stream::once(async move {
        let (tx, rx) = mpsc::unbounded();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(work(tx, child));
            }
            Err(_) => {
                let _ = tx.unbounded_send(internal_error(
                    "a provider stream must be polled inside a tokio runtime",
                ));
            }
        }
        rx
    })
    .flatten()
    // The guard lives as long as the stream: dropping the stream cancels the work.
    .map(move |ev| {
        let _ = &guard;
        ev
    });
    terminated(Box::pin(events))
}

/// Ends `inner` after its first terminal event, and adds an `error` event if it ends without one.
pub(crate) fn terminated(inner: ProviderStream) -> ProviderStream {
    Box::pin(futures::stream::unfold(
        (inner, false),
        |(mut inner, finished)| async move {
            if finished {
                return None;
            }
            match inner.next().await {
                Some(ev) => {
                    let done = ev.is_terminal();
                    Some((ev, (inner, done)))
                }
                None => Some((
                    internal_error("the provider ended the stream without a result"),
                    (inner, true),
                )),
            }
        },
    ))
}

/// A stream that fails at once (a request rejected before any work).
pub(crate) fn internal_error(message: &str) -> ProviderEvent {
    ProviderEvent::Error {
        reason: ErrorReason::Error,
        kind: ErrorKind::Internal,
        message: message.to_string(),
        usage: Usage::default(),
        partial: AssistantMessage::default(),
    }
}

/// The result of a whole stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// The final message (the partial one when the stream failed).
    pub message: AssistantMessage,
    /// `error` or `aborted` when the stream failed.
    pub stop_reason: StopReason,
    pub usage: Usage,
    pub error: Option<CompletionError>,
    /// Every event, in order.
    pub events: Vec<ProviderEvent>,
}

/// Why a collected stream failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionError {
    pub kind: ErrorKind,
    pub message: String,
}

/// Drains a stream into its [`Completion`].
pub async fn collect(mut stream: ProviderStream) -> Completion {
    let mut events = Vec::new();
    while let Some(ev) = stream.next().await {
        let terminal = ev.is_terminal();
        events.push(ev);
        if terminal {
            break;
        }
    }
    match events.last() {
        Some(ProviderEvent::Done {
            stop_reason,
            usage,
            message,
        }) => Completion {
            message: message.clone(),
            stop_reason: *stop_reason,
            usage: *usage,
            error: None,
            events,
        },
        Some(ProviderEvent::Error {
            reason,
            kind,
            message,
            usage,
            partial,
        }) => Completion {
            message: partial.clone(),
            stop_reason: match reason {
                ErrorReason::Error => StopReason::Error,
                ErrorReason::Aborted => StopReason::Aborted,
            },
            usage: *usage,
            error: Some(CompletionError {
                kind: *kind,
                message: message.clone(),
            }),
            events,
        },
        _ => Completion {
            message: AssistantMessage::default(),
            stop_reason: StopReason::Error,
            usage: Usage::default(),
            error: Some(CompletionError {
                kind: ErrorKind::Internal,
                message: "the stream ended without a result".into(),
            }),
            events,
        },
    }
}
