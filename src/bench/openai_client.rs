//! A minimal streaming Chat Completions client for benchmarks: it sends one request, reads the event stream
//! itself and stamps every chunk the moment it arrives, so first-token, tool-name and complete-call times are
//! measured at the wire, not after a provider's assembly. No retries (a bench must see failures), no schema
//! rewriting; the request body is the one [`request_body`] builds from a [`CompletionRequest`] with the remote
//! provider's wire format, so a bench prompt is byte for byte what agentd's agent would send.
//!
//! SSE framing and chunk shapes are the remote provider's ([`SseParser`], [`wire::Chunk`]); tool calls are
//! checked with the provider's own [`check_tool_call`].

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Map, Value};

use super::metrics::{CallRecord, RequestSample, ServerTimings};
use super::BenchError;
use crate::provider::remote::sse::SseParser;
use crate::provider::remote::wire::{self, Chunk};
use crate::provider::remote::Compat;
use crate::provider::{check_tool_call, CompletionRequest, ToolSpec};

/// The streaming `/chat/completions` body for `request` on `model`. `session` goes into OpenAI's `user` field,
/// which agentd's server uses as the KV-prefix cache key (`openai:{user}`) and other servers accept and ignore.
///
/// One change to the provider's wire format: an assistant message that only calls tools carries `content: ""`
/// instead of `null`, because llama-cpp-python's server rejects `null` (HTTP 500), while OpenAI, vLLM and
/// agentd read both alike.
pub fn request_body(request: &CompletionRequest, model: &str, session: Option<&str>) -> Value {
    let mut body = wire::chat_body(request, model, &Compat::default());
    if let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) {
        for m in messages {
            if m.get("role").and_then(Value::as_str) == Some("assistant")
                && m.get("content").is_some_and(Value::is_null)
            {
                m["content"] = Value::String(String::new());
            }
        }
    }
    if let (Some(session), Value::Object(map)) = (session, &mut body) {
        map.insert("user".into(), session.into());
    }
    body
}

/// One OpenAI-compatible endpoint. Cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub struct ChatClient {
    http: reqwest::Client,
    base: String,
    api_key: Option<String>,
    timeout: Duration,
}

impl ChatClient {
    /// `base_url` is the API root, usually ending in `/v1`. Sends nothing.
    pub fn new(base_url: &str, api_key: Option<String>) -> Result<Self, BenchError> {
        let base = base_url.trim_end_matches('/').to_string();
        reqwest::Url::parse(&base)
            .map_err(|e| BenchError::Config(format!("`{base_url}` is not a URL: {e}")))?;
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("agentd-bench/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| BenchError::Config(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            http,
            base,
            api_key,
            timeout: Duration::from_secs(600),
        })
    }

    /// The longest one streamed request may take before it is recorded as failed (default 600 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base)
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.post(self.url(path));
        match &self.api_key {
            Some(key) => req.bearer_auth(key),
            None => req,
        }
    }

    /// The ids of `GET /models`, in the server's order.
    pub async fn models(&self) -> Result<Vec<String>, BenchError> {
        let url = self.url("models");
        let mut req = self.http.get(&url);
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let resp = tokio::time::timeout(Duration::from_secs(30), req.send())
            .await
            .map_err(|_| BenchError::Connect {
                url: url.clone(),
                message: "no answer within 30 s".into(),
            })?
            .map_err(|e| BenchError::Connect {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| BenchError::Protocol {
            url: url.clone(),
            message: e.to_string(),
        })?;
        if !(200..300).contains(&status) {
            return Err(BenchError::Http {
                url,
                status,
                message: wire::error_message(&text),
            });
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| BenchError::Protocol {
            url: url.clone(),
            message: e.to_string(),
        })?;
        Ok(v.get("data")
            .and_then(Value::as_array)
            .map(|data| {
                data.iter()
                    .filter_map(|m| m.get("id").and_then(Value::as_str).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Sends `body` (with `stream: true` forced) and times the answer chunk by chunk. Calls are checked against
    /// `tools`. Never fails: a failure is a sample with [`RequestSample::error`] set.
    pub async fn stream_chat(&self, body: &Value, tools: &[ToolSpec]) -> RequestSample {
        let start = Instant::now();
        let mut body = body.clone();
        if let Value::Object(map) = &mut body {
            map.insert("stream".into(), true.into());
        }
        match tokio::time::timeout(self.timeout, self.stream_timed(&body, tools, start)).await {
            Ok(sample) => sample,
            Err(_) => RequestSample::failed(
                elapsed_ms(start),
                format!("no complete answer within {} s", self.timeout.as_secs()),
            ),
        }
    }

    async fn stream_timed(
        &self,
        body: &Value,
        tools: &[ToolSpec],
        start: Instant,
    ) -> RequestSample {
        let resp = match self.post("chat/completions").json(body).send().await {
            Ok(r) => r,
            Err(e) => return RequestSample::failed(elapsed_ms(start), format!("send: {e}")),
        };
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            return RequestSample::failed(
                elapsed_ms(start),
                format!("HTTP {}: {}", status.as_u16(), wire::error_message(&text)),
            );
        }
        let mut acc = Accumulator::default();
        let mut parser = SseParser::new();
        let mut stream = resp.bytes_stream();
        let mut done = false;
        while let Some(item) = stream.next().await {
            let now = elapsed_ms(start);
            let events = match item
                .map_err(|e| format!("reading the stream: {e}"))
                .and_then(|bytes| parser.push(&bytes).map_err(|e| e.to_string()))
            {
                Ok(events) => events,
                Err(e) => {
                    acc.error = Some(e);
                    break;
                }
            };
            if events.iter().any(|ev| acc.event(&ev.data, now)) {
                done = true;
                break;
            }
        }
        let end = elapsed_ms(start);
        if !done && acc.error.is_none() {
            match parser.finish() {
                Ok(events) => {
                    for ev in events {
                        if acc.event(&ev.data, end) {
                            break;
                        }
                    }
                }
                Err(e) => acc.error = Some(e.to_string()),
            }
        }
        acc.finish(end, tools)
    }
}

fn elapsed_ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// A call whose deltas are still arriving.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Folds the chunks of one stream into a [`RequestSample`].
#[derive(Debug, Default)]
struct Accumulator {
    sample: RequestSample,
    calls: Vec<PartialCall>,
    usage_output: Option<u64>,
    finish_at: Option<f64>,
    error: Option<String>,
}

impl Accumulator {
    /// One SSE `data` payload that arrived at `now`; `true` when the stream is over (`[DONE]` or an error).
    fn event(&mut self, data: &str, now: f64) -> bool {
        if data.trim() == "[DONE]" {
            return true;
        }
        let chunk: Chunk = match serde_json::from_str(data) {
            Ok(c) => c,
            Err(e) => {
                self.error = Some(format!("a chunk is not JSON ({e}): {data}"));
                return true;
            }
        };
        if chunk.error.is_some() || chunk.object.as_deref() == Some("error") {
            self.error = Some(format!(
                "error inside the stream: {}",
                wire::error_message(data)
            ));
            return true;
        }
        if let Some(t) = &chunk.timings {
            self.sample.server = Some(ServerTimings {
                queue_ms: t.queue_ms,
                prefill_ms: t.prompt_ms,
                decode_ms: t.predicted_ms,
            });
        }
        if let Some(u) = &chunk.usage {
            self.sample.prompt_tokens = Some(u.prompt_tokens);
            self.usage_output = Some(u.completion_tokens);
            self.sample.cached_prompt_tokens = u
                .prompt_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens);
            self.sample.drafts = u
                .completion_tokens_details
                .as_ref()
                .and_then(|d| Some((d.accepted_prediction_tokens?, d.rejected_prediction_tokens?)));
        }
        for choice in chunk.choices {
            let delta = choice.delta;
            let mut output = false;
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                self.sample.text.push_str(&text);
                output = true;
            }
            let reasoning = [delta.reasoning_content, delta.reasoning];
            output |= reasoning.iter().flatten().any(|r| !r.is_empty());
            for tc in delta.tool_calls.unwrap_or_default() {
                let slot = match tc.index {
                    Some(i) => usize::try_from(i).unwrap_or(usize::MAX),
                    None => self.calls.len().saturating_sub(1),
                };
                // A new index opens the next call; a gap in the indices is closed up.
                let slot = slot.min(self.calls.len());
                if slot == self.calls.len() {
                    self.calls.push(PartialCall::default());
                }
                let call = &mut self.calls[slot];
                if let Some(id) = tc.id.filter(|id| !id.is_empty()) {
                    if call.id.is_empty() {
                        call.id = id;
                    }
                }
                let Some(function) = tc.function else {
                    continue;
                };
                if let Some(name) = function.name.filter(|n| !n.is_empty()) {
                    // Some servers repeat the name on every delta: the first one counts.
                    if call.name.is_empty() {
                        call.name = name;
                    }
                    self.sample.tool_name_ms.get_or_insert(now);
                    output = true;
                }
                if let Some(args) = function.arguments.filter(|a| !a.is_empty()) {
                    call.arguments.push_str(&args);
                    output = true;
                }
            }
            if self.sample.call_complete_ms.is_none() && self.calls.first().is_some_and(closed) {
                self.sample.call_complete_ms = Some(now);
            }
            if output {
                self.sample.ttft_ms.get_or_insert(now);
                self.sample.chunk_times_ms.push(now);
            }
            if let Some(reason) = choice.finish_reason {
                self.sample.finish_reason = Some(reason);
                self.finish_at.get_or_insert(now);
            }
        }
        false
    }

    fn finish(mut self, end: f64, tools: &[ToolSpec]) -> RequestSample {
        let mut sample = std::mem::take(&mut self.sample);
        sample.total_ms = end;
        if let Some(e) = self.error {
            sample.error = Some(e);
            return sample;
        }
        sample.output_tokens_exact = self.usage_output.is_some();
        sample.output_tokens = self
            .usage_output
            .unwrap_or(sample.chunk_times_ms.len() as u64);
        if !self.calls.is_empty() && sample.call_complete_ms.is_none() {
            sample.call_complete_ms = Some(self.finish_at.unwrap_or(end));
        }
        sample.calls = self
            .calls
            .iter()
            .map(|c| {
                let checked = check_tool_call(tools, &c.id, &c.name, &c.arguments);
                CallRecord {
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                    valid: checked.invalid.is_none(),
                    problem: checked.invalid.map(|i| i.message),
                }
            })
            .collect();
        sample
    }
}

/// The call's arguments text is a whole JSON object already.
fn closed(call: &PartialCall) -> bool {
    let text = call.arguments.trim_end();
    text.ends_with('}') && serde_json::from_str::<Map<String, Value>>(text).is_ok()
}
