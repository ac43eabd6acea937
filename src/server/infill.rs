//! llama.cpp's `POST /infill` (what llama.vscode and llama.vim call on every pause): `input_prefix`,
//! `input_suffix`, `input_extra` (`[{filename, text}]`, other files of the project), `prompt` (appended to the
//! prefix), `n_predict`, `n_indent`, `t_max_predict_ms`, `stop`, the sampling fields and `stream`. The answer is
//! llama.cpp's completion object (`content`, `stop`, `stop_type`, `tokens_predicted`, `tokens_evaluated`,
//! `tokens_cached`, `timings`); streamed, one `data:` object per piece and a last one with `stop: true`.
//! `n_probs: N` adds llama.cpp's `completion_probabilities` (per generated token its `id`, `token`, `bytes`,
//! `logprob` and its `N` most likely alternatives in `top_logprobs`, from the full distribution before
//! sampling) to each piece, or all of them to the answer when not streamed.
//!
//! Fields llama.cpp takes that change nothing here (`cache_prompt`, `samplers`, `t_max_prompt_ms`, `id_slot`,
//! `return_tokens`, `post_sampling_probs`, …) are accepted and ignored. A newer request for the same document cancels this one
//! ([`super::typing`]): it answers 409 with what it had written.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::metrics::{Finished, RequestTimer};
use super::openai::convert::MAX_TOP_LOGPROBS;
use super::openai::types::StopField;
use super::timings::LlamaTimings;
use super::typing::{document_key, Turn};
use super::{parse_json, request_fields, sse, AppState};
use crate::provider::{
    Infill, InfillFile, ProviderEvent, RawCompletionRequest, RawPrompt, StopReason, TokenLogprob,
    Usage,
};

/// At most this many `input_extra` files.
const MAX_EXTRA_FILES: usize = 256;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
struct InfillRequest {
    #[serde(default)]
    model: String,
    #[serde(default)]
    input_prefix: String,
    #[serde(default)]
    input_suffix: String,
    #[serde(default)]
    #[schema(value_type = Vec<Object>)]
    input_extra: Vec<InfillFile>,
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    n_predict: Option<i64>,
    #[serde(default)]
    n_indent: Option<usize>,
    #[serde(default)]
    t_max_predict_ms: Option<u64>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stop: Option<StopField>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_k: Option<i64>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    min_p: Option<f32>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    repeat_penalty: Option<f32>,
    #[serde(default)]
    presence_penalty: Option<f32>,
    #[serde(default)]
    frequency_penalty: Option<f32>,
    #[serde(default)]
    n_probs: Option<u32>,
}

/// What the last object of an answer repeats.
struct Head {
    model: String,
    n_predict: i64,
}

/// `POST /infill`.
#[utoipa::path(post, path = "/infill", tag = "llama.cpp", request_body = InfillRequest,
    responses((status = 200, description = "The middle; with `stream: true` server-sent pieces",
               content((Object = "application/json"), (crate::server::openapi::SseEvent = "text/event-stream"))),
              crate::server::openapi::BusyError, crate::server::openapi::OpenAiErrors))]
pub async fn infill(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let mut timer = state.metrics.timer();
    let req: InfillRequest = parse_json(body, state.options.max_body_bytes)?;
    let model = state.resolve_model(&req.model)?;
    timer.model(&model);
    if req.input_extra.len() > MAX_EXTRA_FILES {
        return Err(ApiError::invalid_param(
            "input_extra",
            format!("at most {MAX_EXTRA_FILES} files"),
        ));
    }
    let max_tokens = match req.n_predict {
        None | Some(-1) => None,
        Some(n) if n > 0 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
        Some(n) => {
            return Err(ApiError::invalid_param(
                "n_predict",
                format!("n_predict must be -1 (no limit) or at least 1, got {n}"),
            ))
        }
    };
    let sampling = request_fields::sampling(request_fields::SamplingFields {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        min_p: req.min_p,
        seed: req.seed,
        presence_penalty: req.presence_penalty,
        frequency_penalty: req.frequency_penalty,
        repetition_penalty: req.repeat_penalty,
        logit_bias: None,
    })?
    .or(&state.options.generation_defaults);
    let stop = request_fields::stop_list(
        req.stop.map(StopField::into_vec).unwrap_or_default(),
        &state.options.limits,
    )?;
    let n_probs = req.n_probs.unwrap_or(0);
    if n_probs > MAX_TOP_LOGPROBS {
        return Err(ApiError::invalid_param(
            "n_probs",
            format!("n_probs must be at most {MAX_TOP_LOGPROBS}"),
        ));
    }
    let key = document_key(&model, &req.input_prefix, &req.input_suffix);
    let request = RawCompletionRequest {
        model: model.clone(),
        prompt: RawPrompt::Text(req.prompt),
        sampling,
        max_tokens,
        stop,
        ignore_eos: false,
        logprobs: (n_probs > 0).then_some(n_probs as usize),
        cache_scope: Some(state.cache_scope(None)),
        keep_alive: None,
        response_format: Default::default(),
        infill: Some(Infill {
            prefix: req.input_prefix,
            suffix: req.input_suffix,
            extra: req.input_extra,
            n_indent: req.n_indent.unwrap_or(0),
            t_max_predict_ms: req.t_max_predict_ms.filter(|&t| t > 0),
        }),
    };
    let head = Head {
        model,
        n_predict: req.n_predict.unwrap_or(-1),
    };
    let turn = state.typing.begin(key, state.shutdown.child_token());
    let permit = state.admit().await?;
    timer.admitted(permit.queued());
    let mut events = state.provider.stream_raw(request, turn.cancel.clone());
    if req.stream {
        // The first piece decides the status: an error before any text is an HTTP error. Token
        // probabilities that come before it go with it.
        let mut before = Vec::new();
        let first = loop {
            match events.next().await {
                Some(ProviderEvent::Error {
                    kind,
                    message,
                    usage,
                    ..
                }) => {
                    record(&mut timer, &usage, Finished::Error);
                    return Err(failure(&turn, kind, &message, ""));
                }
                Some(ev @ (ProviderEvent::TextDelta { .. } | ProviderEvent::Done { .. })) => {
                    break ev
                }
                Some(ev @ ProviderEvent::Logprobs { .. }) => before.push(ev),
                Some(_) => continue,
                None => return Err(ApiError::internal("the answer ended without a result")),
            }
        };
        before.push(first);
        let events = Box::pin(futures::stream::iter(before).chain(events));
        let stream = async_stream(events, head, timer, turn, permit);
        return Ok(sse::response(stream));
    }
    let mut content = String::new();
    let mut probs = Vec::new();
    while let Some(ev) = events.next().await {
        match ev {
            ProviderEvent::TextDelta { delta } => content.push_str(&delta),
            ProviderEvent::Logprobs { entries } => probs.extend(entries),
            ProviderEvent::Done {
                stop_reason, usage, ..
            } => {
                record(&mut timer, &usage, Finished::Stop);
                let mut last = last_object(&head, content, stop_reason, &usage);
                if n_probs > 0 {
                    last["completion_probabilities"] = probabilities(probs);
                }
                return Ok(Json(last).into_response());
            }
            ProviderEvent::Error {
                kind,
                message,
                usage,
                ..
            } => {
                record(&mut timer, &usage, Finished::Error);
                return Err(failure(&turn, kind, &message, &content));
            }
            _ => {}
        }
    }
    Err(ApiError::internal("the answer ended without a result"))
}

fn record(timer: &mut RequestTimer, usage: &Usage, finished: Finished) {
    if let Some(t) = &usage.timings {
        timer.timings(t);
    }
    timer.finish(finished, usage.input, usage.output);
}

/// The error of a request that did not finish: 409 when a newer request for the document replaced it.
fn failure(
    turn: &Turn,
    kind: crate::provider::ErrorKind,
    message: &str,
    content: &str,
) -> ApiError {
    if turn.cancel.is_cancelled() {
        return ApiError::conflict(format!(
            "superseded by a newer request for the same document (it had written {} bytes)",
            content.len()
        ));
    }
    ApiError::from_provider(kind, message)
}

/// llama.cpp's completion object with `stop: true`.
fn last_object(head: &Head, content: String, reason: StopReason, usage: &Usage) -> Value {
    let stop_type = match reason {
        StopReason::Length => "limit",
        _ => "eos",
    };
    json!({
        "index": 0,
        "content": content,
        "tokens": [],
        "id_slot": 0,
        "stop": true,
        "model": head.model,
        "tokens_predicted": usage.output,
        "tokens_evaluated": usage.input,
        "tokens_cached": usage.cached_input,
        "generation_settings": {"n_predict": head.n_predict},
        "prompt": "",
        "has_new_line": content.contains('\n'),
        "truncated": false,
        "stop_type": stop_type,
        "stopping_word": "",
        "timings": LlamaTimings::of(usage),
    })
}

/// llama.cpp's `completion_probabilities` of `entries`.
fn probabilities(entries: Vec<TokenLogprob>) -> Value {
    let one = |id: Option<u32>, token: String, bytes: Vec<u8>, logprob: f32| json!({"id": id, "token": token, "bytes": bytes, "logprob": logprob});
    Value::Array(
        entries
            .into_iter()
            .map(|e| {
                let top: Vec<Value> = e
                    .top
                    .into_iter()
                    .map(|t| one(t.id, t.token, t.bytes, t.logprob))
                    .collect();
                let mut v = one(e.id, e.token, e.bytes, e.logprob);
                v["top_logprobs"] = Value::Array(top);
                v
            })
            .collect(),
    )
}

/// The streamed answer: a `data:` object per piece, then the last one (or an error object).
fn async_stream(
    mut events: crate::provider::ProviderStream,
    head: Head,
    mut timer: RequestTimer,
    turn: Turn,
    permit: super::admission::Permit,
) -> impl futures::Stream<Item = Event> + Send {
    async_stream_impl(move |tx| async move {
        let _permit = permit;
        let mut content = String::new();
        // Tokens whose probabilities go with the next piece.
        let mut probs = Vec::new();
        while let Some(ev) = events.next().await {
            let event = match ev {
                ProviderEvent::Logprobs { entries } => {
                    probs.extend(entries);
                    continue;
                }
                ProviderEvent::TextDelta { delta } => {
                    content.push_str(&delta);
                    let mut piece =
                        json!({"index": 0, "content": delta, "tokens": [], "stop": false});
                    if !probs.is_empty() {
                        piece["completion_probabilities"] =
                            probabilities(std::mem::take(&mut probs));
                    }
                    sse::json_event(&piece)
                }
                ProviderEvent::Done {
                    stop_reason, usage, ..
                } => {
                    record(&mut timer, &usage, Finished::Stop);
                    // As llama.cpp: the text came in the pieces, the last object carries none.
                    let mut last =
                        last_object(&head, std::mem::take(&mut content), stop_reason, &usage);
                    last["content"] = Value::String(String::new());
                    if !probs.is_empty() {
                        last["completion_probabilities"] = probabilities(probs);
                    }
                    let _ = tx.unbounded_send(sse::json_event(&last));
                    return;
                }
                ProviderEvent::Error {
                    kind,
                    message,
                    usage,
                    ..
                } => {
                    record(&mut timer, &usage, Finished::Error);
                    let e = failure(&turn, kind, &message, &content);
                    let _ = tx.unbounded_send(sse::json_event(&e.body()));
                    return;
                }
                _ => continue,
            };
            if tx.unbounded_send(event).is_err() {
                return;
            }
        }
    })
}

/// A stream fed by `work` through a channel; dropping the stream drops the work.
fn async_stream_impl<F, Fut>(work: F) -> impl futures::Stream<Item = Event> + Send
where
    F: FnOnce(futures::channel::mpsc::UnboundedSender<Event>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = futures::channel::mpsc::unbounded();
    let task = tokio::spawn(work(tx));
    let abort = task.abort_handle();
    let guard = AbortOnDrop(abort);
    rx.map(move |e| {
        let _ = &guard;
        e
    })
}

struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
