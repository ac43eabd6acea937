//! `POST /v1/completions`: raw text completion (no chat template) through the provider's `stream_raw` — the
//! local engine, or a remote server that offers it. `prompt` is text, token ids, or a batch of either (one
//! choice per prompt, generated in turn); with `suffix` each text prompt is the text before the cursor and the
//! model fills in the middle from its FIM tokens; `logprobs` returns OpenAI's legacy shape (`tokens`, `token_logprobs`,
//! `top_logprobs`, `text_offset`); `echo` prepends the prompt; streaming follows the same rules as chat (first
//! piece decides the status, usage chunk, `[DONE]`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

use futures::channel::mpsc;
use futures::StreamExt;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::convert::MAX_TOP_LOGPROBS;
use super::types::{
    now_unix, response_id, CompletionChoice, CompletionLogprobs, CompletionResponse,
    CompletionsRequest, PromptField, StopField, UsageInfo,
};
use crate::provider::{
    ErrorKind, ErrorReason, Infill, Provider, ProviderEvent, RawCompletionRequest, RawPrompt,
    ResponseFormat, StopReason, TokenLogprob, Usage,
};
use crate::server::admission::Permit;
use crate::server::chat_answer::finished;
use crate::server::error::ApiError;
use crate::server::metrics::{Finished, RequestTimer};
use crate::server::timings::LlamaTimings;
use crate::server::{parse_json, request_fields, sse, AppState};

/// OpenAI's default `max_tokens` for completions.
const DEFAULT_MAX_TOKENS: u32 = 16;

/// A token's legacy log-probability entry: its text, its log-probability, the alternatives by text.
type LegacyLogprob = (String, f32, Map<String, Value>);

/// One step of the answer to a batch of prompts.
enum Step {
    Token {
        index: u32,
        text: String,
        /// The tokens behind `text` (several when some had no text of their own yet).
        logprobs: Vec<LegacyLogprob>,
    },
    Finish {
        index: u32,
        reason: &'static str,
        usage: Usage,
    },
    Fail(ApiError),
}

/// `POST /v1/completions`.
#[utoipa::path(post, path = "/v1/completions", tag = "openai",
    request_body = super::types::CompletionsRequest,
    responses(
        (status = 200, description = "The completion; with `stream: true` server-sent `text_completion` events \
                                      ending in `[DONE]`",
         content((super::types::CompletionResponse = "application/json"), (crate::server::openapi::SseEvent = "text/event-stream"))),
        crate::server::openapi::OpenAiErrors))]
pub async fn completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let mut timer = state.metrics.timer();
    let req: CompletionsRequest = parse_json(body, state.options.max_body_bytes)?;
    let model = state.resolve_model(&req.model)?;
    timer.model(&model);
    if req.n.unwrap_or(1) != 1 {
        return Err(ApiError::invalid_param("n", "only n = 1 is supported"));
    }
    if req.best_of.unwrap_or(1) != 1 {
        return Err(ApiError::invalid_param(
            "best_of",
            "only best_of = 1 is supported",
        ));
    }
    if req.logprobs.is_some_and(|k| k > MAX_TOP_LOGPROBS) {
        return Err(ApiError::invalid_param(
            "logprobs",
            format!("logprobs must be at most {MAX_TOP_LOGPROBS}"),
        ));
    }
    let stream = req.stream.unwrap_or(false);
    if req.stream_options.is_some() && !stream {
        return Err(ApiError::invalid_param(
            "stream_options",
            "`stream_options` is only allowed when `stream` is true",
        ));
    }
    let max_tokens = req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens == 0 {
        return Err(ApiError::invalid_param(
            "max_tokens",
            "max_tokens must be at least 1",
        ));
    }
    let sampling = request_fields::sampling(request_fields::SamplingFields {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        min_p: req.min_p,
        seed: req.seed,
        presence_penalty: req.presence_penalty,
        frequency_penalty: req.frequency_penalty,
        repetition_penalty: req.repetition_penalty,
        logit_bias: req.logit_bias,
    })?
    .or(&state.options.generation_defaults);
    let prompts = prompt_list(req.prompt)?;
    // `suffix`: each text prompt is the text before the cursor, the model fills in up to the suffix.
    let suffix = req.suffix.clone().filter(|s| !s.is_empty());
    if suffix.is_some() && prompts.iter().any(|p| matches!(p, RawPrompt::Tokens(_))) {
        return Err(ApiError::invalid_param(
            "suffix",
            "`suffix` goes with text prompts, not token ids",
        ));
    }
    state.options.limits.check_prompts(prompts.len())?;
    let echo = req.echo.unwrap_or(false);
    let mut echoed = Vec::with_capacity(prompts.len());
    for p in &prompts {
        echoed.push(match p {
            _ if !echo => String::new(),
            RawPrompt::Text(t) => t.clone(),
            RawPrompt::Tokens(ids) => state
                .provider
                .detokenize(&model, ids)
                .await
                .map_err(|e| ApiError::from_optional_feature(&e))?,
        });
    }
    let stop = request_fields::stop_list(
        req.stop.map(StopField::into_vec).unwrap_or_default(),
        &state.options.limits,
    )?;
    let response_format = match &req.response_format {
        None | Some(Value::Null) => ResponseFormat::Text,
        Some(v) => ResponseFormat::from_openai(v)
            .map_err(|e| ApiError::invalid_param("response_format", e.to_string()))?,
    };
    let response_format = req.constraint.raw_format(response_format)?;
    let scope = state.cache_scope(req.user.as_deref());
    let requests: Vec<RawCompletionRequest> = prompts
        .into_iter()
        .map(|prompt| {
            let (prompt, infill) = match (prompt, &suffix) {
                (RawPrompt::Text(prefix), Some(suffix)) => (
                    RawPrompt::Text(String::new()),
                    Some(Infill {
                        prefix,
                        suffix: suffix.clone(),
                        ..Infill::default()
                    }),
                ),
                (prompt, _) => (prompt, None),
            };
            (prompt, infill)
        })
        .map(|(prompt, infill)| RawCompletionRequest {
            model: model.clone(),
            prompt,
            infill,
            sampling: sampling.clone(),
            max_tokens: Some(max_tokens),
            stop: stop.clone(),
            ignore_eos: req.ignore_eos.unwrap_or(false),
            logprobs: req.logprobs.map(|k| k as usize),
            cache_scope: Some(scope.clone()),
            keep_alive: None,
            response_format: response_format.clone(),
        })
        .collect();
    let permit = state.admit().await?;
    timer.admitted(permit.queued());
    let cancel = state.shutdown.child_token();
    let mut steps = generate_all(state.provider.clone(), requests, cancel);
    let first = match steps.next().await {
        Some(Step::Fail(e)) => {
            timer.finish(Finished::Error, 0, 0);
            return Err(e);
        }
        Some(s) => s,
        None => return Err(ApiError::internal("the answer ended without a result")),
    };
    let answer = Batch {
        id: response_id("cmpl"),
        created: now_unix(),
        model,
        logprobs: req.logprobs.is_some(),
        include_usage: stream && req.stream_options.is_some_and(|o| o.include_usage),
        echoed,
    };
    if stream {
        Ok(sse::response(stream_events(
            answer, first, steps, timer, permit,
        )))
    } else {
        collect(answer, first, steps, &mut timer)
            .await
            .map(|r| axum::Json(r).into_response())
    }
}

/// The prompts of the request (empty ones are refused here; ids outside the vocabulary by the provider).
fn prompt_list(prompt: PromptField) -> Result<Vec<RawPrompt>, ApiError> {
    let prompts: Vec<RawPrompt> = match prompt {
        PromptField::Text(t) => vec![RawPrompt::Text(t)],
        PromptField::Texts(ts) => ts.into_iter().map(RawPrompt::Text).collect(),
        PromptField::Tokens(ids) => vec![RawPrompt::Tokens(ids)],
        PromptField::TokenBatches(b) => b.into_iter().map(RawPrompt::Tokens).collect(),
    };
    if prompts.is_empty() {
        return Err(ApiError::invalid_param("prompt", "`prompt` is empty"));
    }
    let empty = |p: &RawPrompt| match p {
        RawPrompt::Text(t) => t.is_empty(),
        RawPrompt::Tokens(ids) => ids.is_empty(),
    };
    if prompts.iter().any(empty) {
        return Err(ApiError::invalid_param("prompt", "a prompt is empty"));
    }
    Ok(prompts)
}

/// A provider's log-probability entry in the legacy shape.
fn legacy_logprob(entry: TokenLogprob) -> LegacyLogprob {
    let top = entry
        .top
        .into_iter()
        .map(|t| (t.token, Value::from(f64::from(t.logprob))))
        .collect();
    (entry.token, entry.logprob, top)
}

/// Generates every request in turn through the provider; dropping the stream cancels the one running.
fn generate_all(
    provider: Arc<dyn Provider>,
    requests: Vec<RawCompletionRequest>,
    cancel: CancellationToken,
) -> impl futures::Stream<Item = Step> + Send + Unpin {
    let (tx, rx) = mpsc::unbounded::<Step>();
    let token = cancel.clone();
    tokio::spawn(async move {
        for (i, req) in requests.into_iter().enumerate() {
            let index = i as u32;
            let mut events = provider.stream_raw(req, token.clone());
            let mut pending: Vec<LegacyLogprob> = Vec::new();
            let mut finished = false;
            while let Some(ev) = events.next().await {
                let step = match ev {
                    ProviderEvent::Logprobs { entries } => {
                        pending.extend(entries.into_iter().map(legacy_logprob));
                        continue;
                    }
                    ProviderEvent::TextDelta { delta } => Step::Token {
                        index,
                        text: delta,
                        logprobs: std::mem::take(&mut pending),
                    },
                    ProviderEvent::Done {
                        stop_reason, usage, ..
                    } => {
                        finished = true;
                        if !pending.is_empty()
                            && tx
                                .unbounded_send(Step::Token {
                                    index,
                                    text: String::new(),
                                    logprobs: std::mem::take(&mut pending),
                                })
                                .is_err()
                        {
                            return;
                        }
                        Step::Finish {
                            index,
                            reason: if stop_reason == StopReason::Length {
                                "length"
                            } else {
                                "stop"
                            },
                            usage,
                        }
                    }
                    ProviderEvent::Error {
                        reason: ErrorReason::Aborted,
                        ..
                    } => Step::Fail(ApiError::unavailable("the request was cancelled", 1)),
                    // A refused request here is a refused prompt, unless the engine named a sampling field
                    // (a `logit_bias` token outside the vocabulary).
                    ProviderEvent::Error {
                        kind: ErrorKind::InvalidRequest,
                        message,
                        ..
                    } => Step::Fail({
                        let e = ApiError::from_provider(ErrorKind::InvalidRequest, &message);
                        match e.param {
                            Some(_) => e,
                            None => e.with_param("prompt"),
                        }
                    }),
                    ProviderEvent::Error {
                        kind: ErrorKind::Unsupported,
                        message,
                        ..
                    } => Step::Fail(ApiError::not_implemented(message)),
                    ProviderEvent::Error { kind, message, .. } => {
                        Step::Fail(ApiError::from_provider(kind, &message))
                    }
                    _ => continue,
                };
                let fail = matches!(step, Step::Fail(_));
                if tx.unbounded_send(step).is_err() || fail {
                    token.cancel();
                    return;
                }
                if finished {
                    break;
                }
            }
            if !finished {
                let _ = tx.unbounded_send(Step::Fail(ApiError::from_provider(
                    ErrorKind::Internal,
                    "the answer ended without a result",
                )));
                return;
            }
        }
    });
    let guard = cancel.drop_guard();
    rx.map(move |s| {
        let _ = &guard;
        s
    })
}

/// What every chunk repeats.
struct Batch {
    id: String,
    created: u64,
    model: String,
    logprobs: bool,
    include_usage: bool,
    echoed: Vec<String>,
}

impl Batch {
    fn response(
        &self,
        choices: Vec<CompletionChoice>,
        usage: Option<Option<UsageInfo>>,
    ) -> CompletionResponse {
        CompletionResponse {
            id: self.id.clone(),
            object: "text_completion",
            created: self.created,
            model: self.model.clone(),
            choices,
            usage,
            timings: None,
        }
    }
}

/// The usage of every prompt of a request together (their timings added up).
#[derive(Default)]
struct Totals {
    usage: Usage,
    finished: usize,
}

impl Totals {
    fn add(&mut self, u: &Usage) {
        let t = &mut self.usage;
        t.input += u.input;
        t.output += u.output;
        t.cached_input += u.cached_input;
        t.total += u.total;
        if let Some(ut) = &u.timings {
            let sum = t.timings.get_or_insert_with(Default::default);
            sum.load_ns += ut.load_ns;
            sum.queue_ns += ut.queue_ns;
            sum.prefill_ns += ut.prefill_ns;
            sum.decode_ns += ut.decode_ns;
        }
        self.finished += 1;
    }

    /// Records the request in `timer` as `finished`.
    fn record(&self, timer: &mut RequestTimer, finished: Finished) {
        if let Some(t) = &self.usage.timings {
            timer.timings(t);
        }
        timer.finish(finished, self.usage.input, self.usage.output);
    }
}

fn push_logprob(
    lp: &mut CompletionLogprobs,
    offset: usize,
    entry: (String, f32, Map<String, Value>),
) {
    lp.tokens.push(entry.0);
    lp.token_logprobs.push(Some(entry.1));
    lp.top_logprobs.push(Some(entry.2));
    lp.text_offset.push(offset);
}

async fn collect(
    batch: Batch,
    first: Step,
    mut steps: impl futures::Stream<Item = Step> + Unpin,
    timer: &mut RequestTimer,
) -> Result<CompletionResponse, ApiError> {
    let n = batch.echoed.len();
    let mut choices: Vec<CompletionChoice> = batch
        .echoed
        .iter()
        .enumerate()
        .map(|(i, e)| CompletionChoice {
            index: i as u32,
            text: e.clone(),
            logprobs: batch.logprobs.then(CompletionLogprobs::default),
            finish_reason: None,
        })
        .collect();
    let mut totals = Totals::default();
    let mut next = Some(first);
    loop {
        let step = match next.take() {
            Some(s) => s,
            None => steps
                .next()
                .await
                .unwrap_or_else(|| Step::Fail(ApiError::internal("the answer ended early"))),
        };
        match step {
            Step::Token {
                index,
                text,
                logprobs,
            } => {
                timer.output();
                let c = &mut choices[index as usize];
                if let Some(lp) = c.logprobs.as_mut() {
                    for entry in logprobs {
                        push_logprob(lp, c.text.len(), entry);
                    }
                }
                c.text.push_str(&text);
            }
            Step::Finish {
                index,
                reason,
                usage,
            } => {
                choices[index as usize].finish_reason = Some(reason);
                totals.add(&usage);
                if totals.finished == n {
                    totals.record(timer, finished(reason));
                    let info = UsageInfo::from_usage(&totals.usage);
                    let mut response = batch.response(choices, Some(Some(info)));
                    response.timings = LlamaTimings::of(&totals.usage);
                    return Ok(response);
                }
            }
            Step::Fail(e) => {
                timer.finish(Finished::Error, totals.usage.input, totals.usage.output);
                return Err(e);
            }
        }
    }
}

fn stream_events(
    batch: Batch,
    first: Step,
    steps: impl futures::Stream<Item = Step> + Send + Unpin + 'static,
    timer: RequestTimer,
    permit: Permit,
) -> impl futures::Stream<Item = Event> + Send {
    struct S<St> {
        batch: Batch,
        steps: St,
        pending: Option<Step>,
        timer: RequestTimer,
        _permit: Permit,
        offsets: Vec<usize>,
        started: Vec<bool>,
        totals: Totals,
        done: bool,
    }
    let n = batch.echoed.len();
    let state = S {
        batch,
        steps,
        pending: Some(first),
        timer,
        _permit: permit,
        offsets: vec![0; n],
        started: vec![false; n],
        totals: Totals::default(),
        done: false,
    };
    futures::stream::unfold(state, move |mut s| async move {
        if s.done {
            return None;
        }
        let step = match s.pending.take() {
            Some(st) => st,
            None => s
                .steps
                .next()
                .await
                .unwrap_or_else(|| Step::Fail(ApiError::internal("the answer ended early"))),
        };
        let mut out = Vec::new();
        let choice = |index: u32, text: String, logprobs, finish_reason| CompletionChoice {
            index,
            text,
            logprobs,
            finish_reason,
        };
        let usage_field = s.batch.include_usage.then_some(None);
        match step {
            Step::Token {
                index,
                mut text,
                logprobs,
            } => {
                s.timer.output();
                let i = index as usize;
                if !s.started[i] {
                    s.started[i] = true;
                    text = format!("{}{text}", s.batch.echoed[i]);
                    s.offsets[i] = s.batch.echoed[i].len();
                }
                let lp = s.batch.logprobs.then(|| {
                    let mut lp = CompletionLogprobs::default();
                    for entry in logprobs {
                        push_logprob(&mut lp, s.offsets[i], entry);
                    }
                    lp
                });
                s.offsets[i] += text.len();
                let r = s
                    .batch
                    .response(vec![choice(index, text, lp, None)], usage_field);
                out.push(sse::json_event(&r));
            }
            Step::Finish {
                index,
                reason,
                usage,
            } => {
                s.totals.add(&usage);
                let mut r = s.batch.response(
                    vec![choice(index, String::new(), None, Some(reason))],
                    usage_field,
                );
                let last = s.totals.finished == n;
                if last && !s.batch.include_usage {
                    r.timings = LlamaTimings::of(&s.totals.usage);
                }
                out.push(sse::json_event(&r));
                if last {
                    s.done = true;
                    s.totals.record(&mut s.timer, finished(reason));
                    if s.batch.include_usage {
                        let info = UsageInfo::from_usage(&s.totals.usage);
                        let mut r = s.batch.response(Vec::new(), Some(Some(info)));
                        r.timings = LlamaTimings::of(&s.totals.usage);
                        out.push(sse::json_event(&r));
                    }
                    out.push(sse::done());
                }
            }
            Step::Fail(e) => {
                s.done = true;
                s.timer
                    .finish(Finished::Error, s.totals.usage.input, s.totals.usage.output);
                out.push(sse::json_event(&e.body()));
                out.push(sse::done());
            }
        }
        Some((futures::stream::iter(out), s))
    })
    .flatten()
}
