//! One streamed completion against the server: send (with retries), then read the event stream under the idle
//! timeout, chunk by chunk, until `[DONE]` (or the end of the body after a `finish_reason`). A server that
//! ignores `stream: true` and answers with one JSON completion is accepted too.

use std::sync::Arc;

use futures::StreamExt;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::super::assemble::Assembler;
use super::super::events::EventSender;
use super::super::{model_or_default, CompletionRequest, ProviderError, StopReason, TimeoutKind};
use super::chunks::ChunkState;
use super::sse::{truncate, SseParser};
use super::wire::{self, ChoiceLogprobs, Chunk, ChunkChoice, Delta, WireError, WireUsage};
use super::{fit, http, Shared};

/// Runs one request, sending its events to `tx`.
pub(super) async fn run(
    shared: Arc<Shared>,
    mut request: CompletionRequest,
    tx: EventSender,
    cancel: CancellationToken,
) {
    fit::max_tokens(&shared, &mut request).await;
    let model = model_or_default(&request, &shared.models());
    let mut out = Assembler::new(tx, request.tools.clone(), model.clone());
    let url = shared.endpoint("chat/completions");
    let body = wire::chat_body(&request, &model, &shared.config.compat);
    let response = match http::post(&shared, &url, &body, &model, &cancel).await {
        Ok(r) => r,
        Err(e) => {
            out.fail(&e, Default::default());
            return;
        }
    };
    out.start();
    let mut state = ChunkState::default();
    let is_json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let read = if is_json {
        read_json(&shared, response, &mut state, &mut out, &cancel).await
    } else {
        read_events(&shared, response, &mut state, &mut out, &cancel).await
    };
    let mut usage = state.usage.unwrap_or_default();
    if usage.timings.is_none() {
        usage.timings = state.timings;
    }
    match read {
        Ok(()) => {
            state.close_calls(&mut out);
            out.done(state.stop_reason().unwrap_or(StopReason::Stop), usage);
        }
        Err(e) => out.fail(&e, usage),
    }
}

/// Reads the event stream until `[DONE]`, applying each chat chunk.
async fn read_events(
    shared: &Shared,
    response: reqwest::Response,
    state: &mut ChunkState,
    out: &mut Assembler,
    cancel: &CancellationToken,
) -> Result<(), ProviderError> {
    read_sse(shared, response, cancel, |data| {
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            ProviderError::Protocol(format!(
                "a stream chunk is not valid JSON ({e}): {}",
                truncate(data, 300)
            ))
        })?;
        state.apply(chunk, out)?;
        Ok(state.finish_reason.is_some())
    })
    .await
}

/// Reads an event stream under the idle timeout, handing each event's data to `on_data` (which answers whether
/// the response is complete so far) until `[DONE]`. A body that ends without `[DONE]` is accepted only when
/// `on_data` last said complete; an `error` event is a server error.
pub(super) async fn read_sse(
    shared: &Shared,
    response: reqwest::Response,
    cancel: &CancellationToken,
    mut on_data: impl FnMut(&str) -> Result<bool, ProviderError>,
) -> Result<(), ProviderError> {
    let url = response.url().to_string();
    let mut body = response.bytes_stream();
    let mut sse = SseParser::new();
    let mut complete = false;
    loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
            r = tokio::time::timeout(shared.resolved.idle, body.next()) => r,
        };
        let (events, ended) = match next {
            Err(_) => {
                return Err(ProviderError::Timeout {
                    what: TimeoutKind::Idle,
                    after: shared.resolved.idle,
                })
            }
            Ok(Some(Ok(bytes))) => (sse.push(&bytes)?, false),
            Ok(Some(Err(e))) => {
                return Err(ProviderError::Connect {
                    url,
                    message: format!(
                        "the connection broke while streaming: {}",
                        http::error_chain(&e)
                    ),
                })
            }
            Ok(None) => (sse.finish()?, true),
        };
        for ev in events {
            let data = ev.data.trim();
            if data == "[DONE]" {
                return Ok(());
            }
            if ev.event == "error" {
                return Err(ProviderError::Server {
                    status: 500,
                    attempts: 1,
                    message: format!("error inside the stream: {}", wire::error_message(data)),
                });
            }
            complete = on_data(data)?;
        }
        if ended {
            return if complete {
                Ok(())
            } else {
                Err(ProviderError::Protocol(
                    "the stream ended before the response was complete (no finish_reason, no [DONE])"
                        .into(),
                ))
            };
        }
    }
}

/// A whole (non-streamed) chat completion.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FullResponse {
    choices: Vec<FullChoice>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
    object: Option<String>,
    message: Option<String>,
    code: Option<serde_json::Value>,
    timings: Option<super::wire::WireTimings>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FullChoice {
    index: u32,
    message: Delta,
    finish_reason: Option<String>,
    logprobs: Option<ChoiceLogprobs>,
}

/// Reads a JSON completion (a server that does not stream) as if it were one chunk.
async fn read_json(
    shared: &Shared,
    response: reqwest::Response,
    state: &mut ChunkState,
    out: &mut Assembler,
    cancel: &CancellationToken,
) -> Result<(), ProviderError> {
    let text = tokio::select! {
        _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
        r = tokio::time::timeout(shared.resolved.idle, response.text()) => r,
    };
    let text = match text {
        Err(_) => {
            return Err(ProviderError::Timeout {
                what: TimeoutKind::Idle,
                after: shared.resolved.idle,
            })
        }
        Ok(Err(e)) => {
            return Err(ProviderError::Protocol(format!(
                "reading the response: {}",
                http::error_chain(&e)
            )))
        }
        Ok(Ok(t)) => t,
    };
    let full: FullResponse = serde_json::from_str(&text).map_err(|e| {
        ProviderError::Protocol(format!(
            "the response is not a chat completion ({e}): {}",
            truncate(&text, 300)
        ))
    })?;
    if full.choices.is_empty() && full.error.is_none() && full.object.as_deref() != Some("error") {
        return Err(ProviderError::Protocol(format!(
            "the response has no choices: {}",
            truncate(&text, 300)
        )));
    }
    let chunk = Chunk {
        choices: full
            .choices
            .into_iter()
            .map(|c| ChunkChoice {
                index: c.index,
                delta: c.message,
                finish_reason: c.finish_reason,
                logprobs: c.logprobs,
            })
            .collect(),
        usage: full.usage,
        error: full.error,
        object: full.object,
        message: full.message,
        code: full.code,
        timings: full.timings,
    };
    state.apply(chunk, out)?;
    if state.finish_reason.is_none() {
        state.finish_reason = Some("stop".into());
    }
    Ok(())
}
