//! `POST /api/chat` and `POST /api/generate`: one answer, streamed as JSON lines (the default) or whole. A line
//! per piece of text (`message.content`, or `response` for generate), of thinking (`thinking`), and per tool
//! call once its arguments are complete (Ollama sends them whole, as an object); the last line says `done` with
//! `done_reason` and the durations: total, load (waiting for the model to load), prompt evaluation and
//! generation, with their token counts. An empty conversation or prompt only loads the model (`keep_alive: 0`
//! unloads it).

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::request::{self, ChatRequest, GenerateRequest};
use super::{line, ndjson, now_rfc3339, resolve, OllamaError};
use crate::provider::{Infill, KeepAlive, RawCompletionRequest, RawPrompt, Timings};
use crate::server::chat_answer::{self, Collected, Render};
use crate::server::error::ApiError;
use crate::server::source::{Ask, Piece};
use crate::server::usage::UsageInfo;
use crate::server::{parse_json, AppState};

/// Which route answers: a chat message, or generate's `response` text.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Chat,
    Generate,
}

/// What every line of one answer repeats, and when the request arrived.
struct Head {
    /// The model name as the client sent it (Ollama echoes it).
    model: String,
    shape: Shape,
    arrived: Instant,
}

impl Head {
    /// A line of the answer: `fields` (the message or the response text) and `done`.
    fn line(&self, mut fields: Map<String, Value>, done: bool) -> Value {
        fields.insert("model".into(), json!(self.model));
        fields.insert("created_at".into(), json!(now_rfc3339()));
        fields.insert("done".into(), json!(done));
        Value::Object(fields)
    }

    /// The text (or thinking) of a piece, as this route writes it.
    fn text(&self, content: &str, thinking: Option<&str>) -> Map<String, Value> {
        let mut m = Map::new();
        match self.shape {
            Shape::Chat => {
                let mut message = json!({"role": "assistant", "content": content});
                if let Some(t) = thinking {
                    message["thinking"] = json!(t);
                }
                m.insert("message".into(), message);
            }
            Shape::Generate => {
                m.insert("response".into(), json!(content));
                if let Some(t) = thinking {
                    m.insert("thinking".into(), json!(t));
                }
            }
        }
        m
    }

    /// The closing fields: `done_reason` and the durations (nanoseconds) with their counts.
    fn closing(
        &self,
        reason: &str,
        usage: &UsageInfo,
        timings: Option<&Timings>,
    ) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert(
            "done_reason".into(),
            json!(if reason == "length" { "length" } else { "stop" }),
        );
        let total = self.arrived.elapsed().as_nanos() as u64;
        m.insert("total_duration".into(), json!(total));
        let t = timings.copied().unwrap_or_default();
        m.insert("load_duration".into(), json!(t.load_ns));
        m.insert("prompt_eval_count".into(), json!(usage.prompt_tokens));
        m.insert("prompt_eval_duration".into(), json!(t.prefill_ns));
        m.insert("eval_count".into(), json!(usage.completion_tokens));
        m.insert("eval_duration".into(), json!(t.decode_ns));
        m
    }
}

/// A tool call as Ollama writes it: arguments as an object.
fn tool_call(index: usize, id: &str, name: &str, arguments: &str) -> Value {
    let args: Value = match serde_json::from_str(arguments) {
        Ok(v @ Value::Object(_)) => v,
        Ok(Value::Null) | Err(_) if arguments.trim().is_empty() => json!({}),
        Ok(other) => other,
        Err(_) => Value::String(arguments.to_string()),
    };
    json!({"id": id, "function": {"index": index, "name": name, "arguments": args}})
}

/// A streamed answer as JSON lines.
struct Lines {
    head: Head,
    /// The tool call being written: (index, id, name, arguments so far).
    call: Option<(usize, String, String, String)>,
}

impl Lines {
    /// The line of the call whose arguments are complete, if one is open.
    fn flush_call(&mut self) -> Option<String> {
        let (index, id, name, args) = self.call.take()?;
        let message = json!({"role": "assistant", "content": "",
                             "tool_calls": [tool_call(index, &id, &name, &args)]});
        let mut m = Map::new();
        m.insert("message".into(), message);
        Some(line(&self.head.line(m, false)))
    }
}

impl Render for Lines {
    type Frame = String;

    fn response<S>(frames: S) -> Response
    where
        S: futures::Stream<Item = Self::Frame> + Send + 'static,
    {
        ndjson(frames)
    }

    fn piece(&mut self, piece: Piece) -> Vec<String> {
        match piece {
            Piece::Text(t) => {
                let mut out: Vec<String> = self.flush_call().into_iter().collect();
                out.push(line(&self.head.line(self.head.text(&t, None), false)));
                out
            }
            Piece::Reasoning(t) => vec![line(&self.head.line(self.head.text("", Some(&t)), false))],
            Piece::ToolStart { index, id, name } => {
                let out: Vec<String> = self.flush_call().into_iter().collect();
                self.call = Some((index, id, name, String::new()));
                out
            }
            Piece::ToolArgs { fragment, .. } => {
                if let Some(c) = self.call.as_mut() {
                    c.3.push_str(&fragment);
                }
                Vec::new()
            }
            Piece::Logprobs(_) => Vec::new(),
            Piece::Finish {
                reason,
                usage,
                timings,
            } => {
                let mut out: Vec<String> = self.flush_call().into_iter().collect();
                let mut fields = self.head.text("", None);
                fields.extend(self.head.closing(reason, &usage, timings.as_ref()));
                out.push(line(&self.head.line(fields, true)));
                out
            }
            Piece::Fail(e) => vec![line(&json!({"error": e.message}))],
        }
    }
}

/// The whole answer as one object.
fn whole(head: &Head, done: Collected) -> Value {
    let thinking = (!done.reasoning.is_empty()).then_some(done.reasoning.as_str());
    let mut fields = head.text(&done.text, thinking);
    if head.shape == Shape::Chat && !done.calls.is_empty() {
        let calls: Vec<Value> = done
            .calls
            .iter()
            .enumerate()
            .map(|(i, c)| tool_call(i, &c.id, &c.name, &c.arguments))
            .collect();
        if let Some(m) = fields.get_mut("message") {
            m["tool_calls"] = Value::Array(calls);
        }
    }
    fields.extend(head.closing(done.reason, &done.usage, done.timings.as_ref()));
    head.line(fields, true)
}

/// Loads (or with `keep_alive: 0` unloads) the model of an empty request: Ollama's way to warm or free one.
async fn load_only(
    state: &AppState,
    head: &Head,
    model: &str,
    keep: Option<KeepAlive>,
) -> Result<Response, OllamaError> {
    let provider_error = |e: crate::provider::ProviderError| {
        OllamaError(ApiError::from_provider(e.kind(), &e.to_string()))
    };
    let reason = if keep == Some(KeepAlive::Unload) {
        // A model loaded for good cannot be unloaded: still answered, as Ollama does for a model not loaded.
        let _ = state.provider.unload_model(model).await;
        "unload"
    } else {
        state
            .provider
            .load_model(model)
            .await
            .map_err(provider_error)?;
        "load"
    };
    let mut fields = head.text("", None);
    fields.insert("done_reason".into(), json!(reason));
    Ok(Json(head.line(fields, true)).into_response())
}

/// Answers `ask` streamed or whole.
async fn answer(
    state: AppState,
    ask: Ask,
    head: Head,
    stream: bool,
    mut timer: crate::server::metrics::RequestTimer,
) -> Result<Response, OllamaError> {
    if stream {
        let render = Lines { head, call: None };
        return Ok(chat_answer::stream(state, ask, render, timer).await?);
    }
    let done = chat_answer::complete(&state, ask, &mut timer).await?;
    Ok(Json(whole(&head, done)).into_response())
}

/// `POST /api/chat`.
#[utoipa::path(post, path = "/api/chat", tag = "ollama", request_body = super::request::ChatRequest,
    responses((status = 200, description = "The reply; streamed (the default) as JSON lines", content((Object = "application/json"), (Object = "application/x-ndjson"))), crate::server::openapi::OllamaErrors))]
pub async fn chat(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OllamaError> {
    let arrived = Instant::now();
    let mut timer = state.metrics.timer();
    let limits = state.options.limits.clone();
    let max_body = state.options.max_body_bytes;
    let resolver = state.clone();
    let (request, stream, asked, empty) = state
        .cpu_bound(move || {
            let req: ChatRequest = parse_json(body, max_body)?;
            let model = resolve(&resolver, &req.model)?;
            let (stream, asked, empty) = (
                req.stream.unwrap_or(true),
                req.model.clone(),
                req.messages.is_empty(),
            );
            Ok((
                request::chat_request(req, model, &limits)?,
                stream,
                asked,
                empty,
            ))
        })
        .await?;
    let head = Head {
        model: asked,
        shape: Shape::Chat,
        arrived,
    };
    if empty {
        return load_only(&state, &head, &request.model, request.keep_alive).await;
    }
    timer.model(&request.model);
    let mut request = request;
    state.complete_request(&mut request);
    answer(state, Ask::Chat(request), head, stream, timer).await
}

/// `POST /api/generate`.
#[utoipa::path(post, path = "/api/generate", tag = "ollama", request_body = super::request::GenerateRequest,
    responses((status = 200, description = "The completion; streamed (the default) as JSON lines", content((Object = "application/json"), (Object = "application/x-ndjson"))), crate::server::openapi::OllamaErrors))]
pub async fn generate(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OllamaError> {
    let arrived = Instant::now();
    let mut timer = state.metrics.timer();
    let req: GenerateRequest = parse_json(body, state.options.max_body_bytes)?;
    let model = resolve(&state, &req.model)?;
    timer.model(&model);
    if req.images.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err(
            ApiError::invalid_param("images", "this server's models read text only").into(),
        );
    }
    if req.template.as_deref().is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::invalid_param(
            "template",
            "a Go template in the request is not supported: each model is prompted with its own chat template \
             (or send `raw: true` with the whole prompt)",
        )
        .into());
    }
    if req
        .context
        .as_ref()
        .is_some_and(|c| c.as_array().is_none_or(|a| !a.is_empty()))
    {
        return Err(ApiError::invalid_param(
            "context",
            "`context` (token ids of an earlier reply) is not supported: send the conversation to /api/chat",
        )
        .into());
    }
    let head = Head {
        model: req.model.clone(),
        shape: Shape::Generate,
        arrived,
    };
    let stream = req.stream.unwrap_or(true);
    let prompt = req.prompt.clone().unwrap_or_default();
    // `suffix`: fill in the middle between the prompt and it, from the model's FIM tokens.
    let suffix = req.suffix.clone().filter(|s| !s.is_empty());
    if prompt.is_empty() && suffix.is_none() {
        let keep = request::keep_alive(req.keep_alive.as_ref())?;
        return load_only(&state, &head, &model, keep).await;
    }
    let ask = if req.raw || suffix.is_some() {
        // The raw prompt is held to `format` too.
        let format = crate::server::constraint_fields::ConstraintFields::default()
            .raw_format(request::format(req.format.as_ref())?)
            .map_err(|mut e| {
                e.param = Some("format".into());
                e
            })?;
        let opts = request::options(req.options.as_ref(), &state.options.limits)?;
        let (prompt, infill) = match suffix {
            Some(suffix) => (
                String::new(),
                Some(Infill {
                    prefix: prompt,
                    suffix,
                    ..Infill::default()
                }),
            ),
            None => (prompt, None),
        };
        Ask::Raw(RawCompletionRequest {
            model,
            prompt: RawPrompt::Text(prompt),
            infill,
            sampling: opts.sampling.or(&state.options.generation_defaults),
            max_tokens: opts.max_tokens,
            stop: opts.stop,
            ignore_eos: false,
            logprobs: None,
            cache_scope: Some(state.cache_scope(None)),
            keep_alive: request::keep_alive(req.keep_alive.as_ref())?,
            response_format: format,
        })
    } else {
        let mut r = request::generate_request(&req, model, &state.options.limits)?;
        state.complete_request(&mut r);
        Ask::Chat(r)
    };
    answer(state, ask, head, stream, timer).await
}
