//! [`GatedProvider`]: the server's provider as agent sessions see it. Each model call waits for a slot in the
//! admission queue (so agents and API clients share the engine fairly and the gauges count them) and is timed
//! into the metrics. A call refused by a full queue ends as a `rate_limited` error event, as a busy remote
//! server would answer; a call cancelled while queued ends as `aborted`.

use std::sync::Arc;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::provider::{
    AssistantMessage, CompletionRequest, ErrorKind, ErrorReason, ModelDescriptor, Provider,
    ProviderError, ProviderEvent, ProviderStream, StopReason, TokenCount, Usage,
};
use crate::server::admission::Admission;
use crate::server::metrics::{Finished, Metrics};

/// A provider whose streams queue for admission first.
pub struct GatedProvider {
    inner: Arc<dyn Provider>,
    admission: Arc<Admission>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
}

impl GatedProvider {
    pub fn new(
        inner: Arc<dyn Provider>,
        admission: Arc<Admission>,
        metrics: Arc<Metrics>,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            inner,
            admission,
            metrics,
            shutdown,
        }
    }
}

fn error_event(reason: ErrorReason, kind: ErrorKind, message: String) -> ProviderEvent {
    ProviderEvent::Error {
        reason,
        kind,
        message,
        usage: Usage::default(),
        partial: AssistantMessage::default(),
    }
}

#[async_trait::async_trait]
impl Provider for GatedProvider {
    fn stream(&self, request: CompletionRequest, cancel: CancellationToken) -> ProviderStream {
        let inner = self.inner.clone();
        let admission = self.admission.clone();
        let metrics = self.metrics.clone();
        let shutdown = self.shutdown.clone();
        Box::pin(
            futures::stream::once(async move {
                let mut timer = metrics.timer();
                timer.model(&request.model);
                let ticket = match admission.enter() {
                    Ok(t) => t,
                    Err(e) => {
                        timer.finish(Finished::Error, 0, 0);
                        let ev = error_event(ErrorReason::Error, ErrorKind::RateLimited, e.message);
                        return futures::stream::iter([ev]).boxed();
                    }
                };
                let permit = tokio::select! {
                    p = ticket.wait(&shutdown) => p,
                    () = cancel.cancelled() => {
                        let ev = error_event(ErrorReason::Aborted, ErrorKind::Cancelled, "cancelled".into());
                        return futures::stream::iter([ev]).boxed();
                    }
                };
                let permit = match permit {
                    Ok(p) => p,
                    Err(e) => {
                        timer.finish(Finished::Abort, 0, 0);
                        let ev = error_event(ErrorReason::Aborted, ErrorKind::Cancelled, e.message);
                        return futures::stream::iter([ev]).boxed();
                    }
                };
                timer.admitted(permit.queued());
                inner
                    .stream(request, cancel)
                    .map(move |ev| {
                        let _ = &permit;
                        match &ev {
                            ProviderEvent::TextDelta { .. }
                            | ProviderEvent::ThinkingDelta { .. }
                            | ProviderEvent::ToolCallStart { .. }
                            | ProviderEvent::ToolCallDelta { .. } => timer.output(),
                            ProviderEvent::Done {
                                stop_reason, usage, ..
                            } => {
                                if let Some(t) = &usage.timings {
                                    timer.timings(t);
                                }
                                timer.finish(
                                    if *stop_reason == StopReason::Length {
                                        Finished::Length
                                    } else {
                                        Finished::Stop
                                    },
                                    usage.input,
                                    usage.output,
                                )
                            }
                            ProviderEvent::Error { usage, reason, .. } => timer.finish(
                                if *reason == ErrorReason::Aborted {
                                    Finished::Abort
                                } else {
                                    Finished::Error
                                },
                                usage.input,
                                usage.output,
                            ),
                            _ => {}
                        }
                        ev
                    })
                    .boxed()
            })
            .flatten(),
        )
    }

    async fn count_tokens(&self, request: &CompletionRequest) -> Result<TokenCount, ProviderError> {
        self.inner.count_tokens(request).await
    }

    fn models(&self) -> Vec<ModelDescriptor> {
        self.inner.models()
    }

    /// Everything else (raw completions, tokenizing, model information) passes through.
    fn wrapped(&self) -> Option<&dyn Provider> {
        Some(self.inner.as_ref())
    }
}
