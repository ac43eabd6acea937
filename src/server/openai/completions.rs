//! `POST /v1/completions`: raw text completion on the local engine (no chat template). `prompt` is text, token
//! ids, or a batch of either (one choice per prompt, generated in turn); `logprobs` returns OpenAI's legacy
//! shape (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`); `echo` prepends the prompt; streaming
//! follows the same rules as chat (first piece decides the status, usage chunk, `[DONE]`).

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use futures::channel::mpsc;
use futures::StreamExt;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::chat::finished;
use super::convert::{self, MAX_TOP_LOGPROBS};
use super::types::{
    now_unix, response_id, CompletionChoice, CompletionLogprobs, CompletionResponse,
    CompletionsRequest, PromptField, UsageInfo,
};
use crate::engine::generate::{FinishReason, GenerateEvent, GenerateRequest};
use crate::engine::Engine;
use crate::server::admission::Permit;
use crate::server::error::ApiError;
use crate::server::metrics::{Finished, RequestTimer};
use crate::server::{parse_json, sse, AppState};

/// OpenAI's default `max_tokens` for completions.
const DEFAULT_MAX_TOKENS: u32 = 16;

/// One step of the answer to a batch of prompts.
enum Step {
    Token {
        index: u32,
        text: String,
        logprob: Option<(String, f32, Map<String, Value>)>,
    },
    Finish {
        index: u32,
        reason: &'static str,
        prompt_tokens: u64,
        completion_tokens: u64,
    },
    Fail(ApiError),
}

/// `POST /v1/completions`.
pub async fn completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let mut timer = state.metrics.timer();
    let req: CompletionsRequest = parse_json(body, state.options.max_body_bytes)?;
    let Some(engine) = state.engine.clone() else {
        return Err(ApiError::not_implemented(
            "/v1/completions needs the local engine; this server fronts a remote provider",
        ));
    };
    let model = state.resolve_model(&req.model)?;
    if req.n.unwrap_or(1) != 1 {
        return Err(ApiError::invalid_param("n", "only n = 1 is supported"));
    }
    if req.best_of.unwrap_or(1) != 1 {
        return Err(ApiError::invalid_param(
            "best_of",
            "only best_of = 1 is supported",
        ));
    }
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::invalid_param(
            "suffix",
            "`suffix` is not supported",
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
    let sampling = convert::sampling(
        req.temperature,
        req.top_p,
        req.top_k,
        req.min_p,
        req.seed,
        req.presence_penalty,
        req.frequency_penalty,
        req.repetition_penalty,
    )?;
    let prompts = prompt_tokens(&engine, req.prompt)?;
    let echo = req.echo.unwrap_or(false);
    let echoed: Vec<String> = if echo {
        prompts
            .iter()
            .map(|p| {
                engine
                    .tokenizer()
                    .decode(p, false)
                    .map_err(ApiError::from_engine)
            })
            .collect::<Result<_, _>>()?
    } else {
        vec![String::new(); prompts.len()]
    };
    let stop = convert::stop_list(req.stop)?;
    let requests: Vec<GenerateRequest> = prompts
        .into_iter()
        .map(|prompt| GenerateRequest {
            prompt,
            sampling: sampling.to_engine(),
            max_tokens: Some(max_tokens as usize),
            stop: stop.clone(),
            ignore_eos: req.ignore_eos.unwrap_or(false),
            logprobs: req.logprobs.map(|k| k as usize),
            constraint: None,
        })
        .collect();
    let permit = state.admit().await?;
    timer.admitted(permit.queued());
    let cancel = state.shutdown.child_token();
    let mut steps = generate_all(engine, requests, cancel);
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

/// The token ids of each prompt (text is tokenized with special tokens parsed, and BOS where the model wants
/// one); ids outside the vocabulary are a 400.
fn prompt_tokens(engine: &Engine, prompt: PromptField) -> Result<Vec<Vec<u32>>, ApiError> {
    let tok = engine.tokenizer();
    let encode = |text: &str| -> Result<Vec<u32>, ApiError> {
        let mut ids = tok.encode(text, true).map_err(ApiError::from_engine)?;
        if let Some(bos) = tok.bos_id().filter(|_| tok.add_bos()) {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
            }
        }
        Ok(ids)
    };
    let prompts = match prompt {
        PromptField::Text(t) => vec![encode(&t)?],
        PromptField::Texts(ts) => ts.iter().map(|t| encode(t)).collect::<Result<_, _>>()?,
        PromptField::Tokens(ids) => vec![ids],
        PromptField::TokenBatches(b) => b,
    };
    if prompts.is_empty() {
        return Err(ApiError::invalid_param("prompt", "`prompt` is empty"));
    }
    let vocab = tok.vocab_size();
    for p in &prompts {
        if p.is_empty() {
            return Err(ApiError::invalid_param("prompt", "a prompt is empty"));
        }
        if let Some(bad) = p.iter().find(|&&id| id as usize >= vocab) {
            return Err(ApiError::invalid_param(
                "prompt",
                format!("token id {bad} is outside the vocabulary ({vocab} tokens)"),
            ));
        }
    }
    Ok(prompts)
}

/// Generates every request in turn; dropping the stream cancels the one running.
fn generate_all(
    engine: Engine,
    requests: Vec<GenerateRequest>,
    cancel: CancellationToken,
) -> impl futures::Stream<Item = Step> + Send + Unpin {
    let (tx, rx) = mpsc::unbounded::<Step>();
    let token = cancel.clone();
    tokio::spawn(async move {
        for (i, req) in requests.into_iter().enumerate() {
            let index = i as u32;
            let mut events = engine.generate(req, None, token.clone());
            let mut finished = false;
            while let Some(ev) = events.recv().await {
                let step = match ev {
                    GenerateEvent::Token(t) => Step::Token {
                        index,
                        text: t.text,
                        logprob: t.logprob.map(|lp| {
                            let text = |id: u32| {
                                String::from_utf8_lossy(&engine.tokenizer().token_bytes(id))
                                    .into_owned()
                            };
                            let top = lp
                                .top
                                .iter()
                                .map(|&(id, l)| (text(id), Value::from(f64::from(l))))
                                .collect();
                            (text(t.id), lp.logprob, top)
                        }),
                    },
                    GenerateEvent::Done(s) if s.finish == FinishReason::Cancelled => {
                        Step::Fail(ApiError::unavailable("the request was cancelled", 1))
                    }
                    GenerateEvent::Done(s) => {
                        finished = true;
                        if !s.trailing_text.is_empty()
                            && tx
                                .unbounded_send(Step::Token {
                                    index,
                                    text: s.trailing_text.clone(),
                                    logprob: None,
                                })
                                .is_err()
                        {
                            return;
                        }
                        Step::Finish {
                            index,
                            reason: if s.finish == FinishReason::Length {
                                "length"
                            } else {
                                "stop"
                            },
                            prompt_tokens: s.prompt_tokens as u64,
                            completion_tokens: s.completion_tokens as u64,
                        }
                    }
                    GenerateEvent::Error(e) => Step::Fail(ApiError::from_engine(e)),
                };
                let fail = matches!(step, Step::Fail(_));
                if tx.unbounded_send(step).is_err() || fail {
                    token.cancel();
                    return;
                }
            }
            if !finished {
                let _ = tx.unbounded_send(Step::Fail(ApiError::unavailable(
                    "the request was cancelled",
                    1,
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
        }
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
    let (mut prompt, mut completion, mut done) = (0u64, 0u64, 0usize);
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
                logprob,
            } => {
                timer.output();
                let c = &mut choices[index as usize];
                if let (Some(lp), Some(entry)) = (c.logprobs.as_mut(), logprob) {
                    push_logprob(lp, c.text.len(), entry);
                }
                c.text.push_str(&text);
            }
            Step::Finish {
                index,
                reason,
                prompt_tokens,
                completion_tokens,
            } => {
                choices[index as usize].finish_reason = Some(reason);
                prompt += prompt_tokens;
                completion += completion_tokens;
                done += 1;
                if done == n {
                    timer.finish(finished(reason), prompt, completion);
                    let usage = UsageInfo::new(prompt, completion, 0);
                    return Ok(batch.response(choices, Some(Some(usage))));
                }
            }
            Step::Fail(e) => {
                timer.finish(Finished::Error, prompt, completion);
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
        usage: (u64, u64, usize),
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
        usage: (0, 0, 0),
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
                logprob,
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
                    if let Some(entry) = logprob {
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
                prompt_tokens,
                completion_tokens,
            } => {
                s.usage.0 += prompt_tokens;
                s.usage.1 += completion_tokens;
                s.usage.2 += 1;
                let r = s.batch.response(
                    vec![choice(index, String::new(), None, Some(reason))],
                    usage_field,
                );
                out.push(sse::json_event(&r));
                if s.usage.2 == n {
                    s.done = true;
                    s.timer.finish(finished(reason), s.usage.0, s.usage.1);
                    if s.batch.include_usage {
                        let usage = UsageInfo::new(s.usage.0, s.usage.1, 0);
                        out.push(sse::json_event(
                            &s.batch.response(Vec::new(), Some(Some(usage))),
                        ));
                    }
                    out.push(sse::done());
                }
            }
            Step::Fail(e) => {
                s.done = true;
                s.timer.finish(Finished::Error, s.usage.0, s.usage.1);
                out.push(sse::json_event(&e.body()));
                out.push(sse::done());
            }
        }
        Some((futures::stream::iter(out), s))
    })
    .flatten()
}
