//! One streamed raw-text completion against the server's legacy `/completions` (vLLM serves it): text or
//! token-id prompt, `logprobs` in the legacy shape, `ignore_eos`. Events are those of a chat completion
//! without tool calls.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::super::assemble::Assembler;
use super::super::events::EventSender;
use super::super::{named_or_default, ProviderError, RawCompletionRequest, StopReason, Usage};
use super::sse::truncate;
use super::stream::read_sse;
use super::wire::{self, TextChunk};
use super::{http, Shared};

/// Runs one raw completion, sending its events to `tx`.
pub(super) async fn run(
    shared: Arc<Shared>,
    request: RawCompletionRequest,
    tx: EventSender,
    cancel: CancellationToken,
) {
    let model = named_or_default(&request.model, &shared.models());
    let mut out = Assembler::new(tx, Vec::new(), model.clone());
    let url = shared.endpoint("completions");
    let body = wire::completions_body(&request, &model);
    let response = match http::post(&shared, &url, &body, &model, &cancel).await {
        Ok(r) => r,
        Err(ProviderError::NotFound { .. }) => {
            let e =
                ProviderError::Unsupported("the remote server has no /completions endpoint".into());
            return out.fail(&e, Usage::default());
        }
        Err(e) => return out.fail(&e, Usage::default()),
    };
    out.start();
    let mut finish: Option<String> = None;
    let mut usage = Usage::default();
    let read = read_sse(&shared, response, &cancel, |data| {
        let chunk: TextChunk = serde_json::from_str(data).map_err(|e| {
            ProviderError::Protocol(format!(
                "a stream chunk is not valid JSON ({e}): {}",
                truncate(data, 300)
            ))
        })?;
        if let Some(e) = &chunk.error {
            return Err(ProviderError::Server {
                status: 500,
                attempts: 1,
                message: e.message.clone().unwrap_or_else(|| "unknown error".into()),
            });
        }
        if chunk.object.as_deref() == Some("error") {
            return Err(ProviderError::Server {
                status: 500,
                attempts: 1,
                message: chunk.message.unwrap_or_else(|| "unknown error".into()),
            });
        }
        if let Some(u) = &chunk.usage {
            let timings = usage.timings;
            usage = Usage::new(u.prompt_tokens, u.completion_tokens, 0);
            usage.timings = timings;
        }
        if let Some(t) = chunk.timings {
            usage.timings = Some(t.to_timings());
        }
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(lp) = choice.logprobs {
                out.logprobs(lp.into_entries());
            }
            out.text(&choice.text);
            if choice.finish_reason.is_some() {
                finish = choice.finish_reason;
            }
        }
        Ok(finish.is_some())
    })
    .await;
    match read {
        Ok(()) => {
            let reason = match finish.as_deref() {
                Some("length") => StopReason::Length,
                _ => StopReason::Stop,
            };
            out.done(reason, usage);
        }
        Err(e) => out.fail(&e, usage),
    }
}
