//! The OpenAI Chat Completions wire format: our [`CompletionRequest`] as the JSON body a server expects, and the
//! streamed chunks (and error bodies) it sends back.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::super::{
    CompletionRequest, ContentBlock, Message, RawCompletionRequest, RawPrompt, ResponseFormat,
    Sampling, TokenLogprob, ToolSpec, TopLogprob,
};
use super::config::{Compat, MaxTokensField};

/// The `messages` array: the system prompt first, assistant tool calls with their arguments as JSON text,
/// tool results as `tool` messages. Thinking is never sent back.
pub fn messages(request: &CompletionRequest) -> Vec<Value> {
    let mut out = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = &request.system {
        out.push(json!({"role": "system", "content": system}));
    }
    for m in &request.messages {
        out.push(match m {
            Message::User(u) => json!({"role": "user", "content": u.content}),
            Message::ToolResult(r) => json!({
                "role": "tool",
                "tool_call_id": r.tool_call_id,
                "content": r.content,
            }),
            Message::Assistant(a) => {
                let text: String = a
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                let calls: Vec<Value> = a
                    .tool_calls()
                    .into_iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments_text()},
                        })
                    })
                    .collect();
                let mut msg = Map::new();
                msg.insert("role".into(), "assistant".into());
                msg.insert(
                    "content".into(),
                    if text.is_empty() && !calls.is_empty() {
                        Value::Null
                    } else {
                        Value::String(text)
                    },
                );
                if !calls.is_empty() {
                    msg.insert("tool_calls".into(), Value::Array(calls));
                }
                Value::Object(msg)
            }
        });
    }
    out
}

/// The `tools` array.
pub fn tools(tools: &[ToolSpec]) -> Vec<Value> {
    tools
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters,
            }})
        })
        .collect()
}

/// The streaming `/chat/completions` body for `model`.
pub fn chat_body(request: &CompletionRequest, model: &str, compat: &Compat) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    body.insert("messages".into(), Value::Array(messages(request)));
    body.insert("stream".into(), true.into());
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if !request.tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools(&request.tools)));
        body.insert("tool_choice".into(), request.tool_choice.to_openai());
        if let Some(p) = request.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), p.into());
        }
    }
    put_format(&mut body, &request.response_format);
    if let Some(n) = request.max_tokens {
        let field = match compat.max_tokens_field {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        };
        body.insert(field.into(), n.into());
    }
    if let Some(k) = request.logprobs {
        body.insert("logprobs".into(), true.into());
        body.insert("top_logprobs".into(), k.into());
    }
    if request.ignore_eos {
        body.insert("ignore_eos".into(), true.into());
    }
    if request.prefill().is_some() {
        // vLLM's names: the last (assistant) message is continued, not closed and answered.
        body.insert("continue_final_message".into(), true.into());
        body.insert("add_generation_prompt".into(), false.into());
    }
    match request.thinking {
        None => {}
        // vLLM's Qwen3 / DeepSeek templates read `enable_thinking`; OpenAI reads `reasoning_effort`.
        Some(crate::provider::Thinking::Off) => {
            body.insert(
                "chat_template_kwargs".into(),
                json!({"enable_thinking": false}),
            );
        }
        Some(level) => {
            body.insert("reasoning_effort".into(), level.as_str().into());
            body.insert(
                "chat_template_kwargs".into(),
                json!({"enable_thinking": true}),
            );
        }
    }
    put_common(&mut body, &request.stop, &request.sampling);
    Value::Object(body)
}

/// The streaming `/completions` body (legacy raw-text completions) for `model`.
pub fn completions_body(request: &RawCompletionRequest, model: &str) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), model.into());
    let prompt = match (&request.prompt, &request.infill) {
        // Fill-in-the-middle goes as OpenAI's `suffix` (a server without it says so itself).
        (RawPrompt::Text(t), Some(infill)) => json!(format!("{}{t}", infill.prefix)),
        (RawPrompt::Text(t), None) => json!(t),
        (RawPrompt::Tokens(ids), _) => json!(ids),
    };
    body.insert("prompt".into(), prompt);
    if let Some(infill) = &request.infill {
        body.insert("suffix".into(), json!(infill.suffix));
    }
    body.insert("stream".into(), true.into());
    body.insert("stream_options".into(), json!({"include_usage": true}));
    if let Some(n) = request.max_tokens {
        body.insert("max_tokens".into(), n.into());
    }
    if let Some(k) = request.logprobs {
        body.insert("logprobs".into(), k.into());
    }
    if request.ignore_eos {
        body.insert("ignore_eos".into(), true.into());
    }
    put_format(&mut body, &request.response_format);
    put_common(&mut body, &request.stop, &request.sampling);
    Value::Object(body)
}

/// The output constraint in vLLM's fields: `response_format` for JSON, `structured_outputs` for the rest (its
/// `grammar` takes Lark with the guidance backend).
fn put_format(body: &mut Map<String, Value>, format: &ResponseFormat) {
    match format {
        ResponseFormat::Text => {}
        ResponseFormat::JsonObject => {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        } => {
            body.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}),
            );
        }
        ResponseFormat::Regex { pattern } => {
            body.insert("structured_outputs".into(), json!({"regex": pattern}));
        }
        ResponseFormat::Choice { choices } => {
            body.insert("structured_outputs".into(), json!({"choice": choices}));
        }
        ResponseFormat::Grammar { lark } => {
            body.insert("structured_outputs".into(), json!({"grammar": lark}));
        }
    }
}

/// Stop strings and the sampling settings that are set.
fn put_common(body: &mut Map<String, Value>, stop: &[String], s: &Sampling) {
    if !stop.is_empty() {
        body.insert("stop".into(), json!(stop));
    }
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            body.insert(k.into(), v);
        }
    };
    put("temperature", s.temperature.map(|v| json!(v)));
    put("top_p", s.top_p.map(|v| json!(v)));
    put("presence_penalty", s.presence_penalty.map(|v| json!(v)));
    put("frequency_penalty", s.frequency_penalty.map(|v| json!(v)));
    put("seed", s.seed.map(|v| json!(v)));
    put("logit_bias", s.logit_bias.as_ref().map(|m| json!(m)));
    // vLLM's extensions; sent only when set, since OpenAI itself rejects them.
    put("top_k", s.top_k.map(|v| json!(v)));
    put("min_p", s.min_p.map(|v| json!(v)));
    put("repetition_penalty", s.repetition_penalty.map(|v| json!(v)));
}

/// One streamed chunk (`chat.completion.chunk`), or an error object a server sends mid-stream.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Chunk {
    pub choices: Vec<ChunkChoice>,
    pub usage: Option<WireUsage>,
    /// `{"error": {...}}` (OpenAI, vLLM mid-stream).
    pub error: Option<WireError>,
    /// `"error"` when the chunk itself is vLLM's error object (`{"object": "error", "message": ...}`).
    pub object: Option<String>,
    pub message: Option<String>,
    pub code: Option<Value>,
    /// llama.cpp's (and agentd's) server-side timings, on the last chunk.
    pub timings: Option<WireTimings>,
}

/// llama.cpp's `timings` object, the fields read here; agentd adds `queue_ms` and `load_ms`.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(default)]
pub struct WireTimings {
    pub prompt_ms: Option<f64>,
    pub predicted_ms: Option<f64>,
    pub queue_ms: Option<f64>,
    pub load_ms: Option<f64>,
}

impl WireTimings {
    /// As the provider's timings (a field the server did not send is 0).
    pub fn to_timings(self) -> crate::provider::Timings {
        let ns = |ms: Option<f64>| (ms.unwrap_or(0.0).max(0.0) * 1e6) as u64;
        crate::provider::Timings {
            load_ns: ns(self.load_ms),
            queue_ns: ns(self.queue_ms),
            prefill_ns: ns(self.prompt_ms),
            decode_ns: ns(self.predicted_ms),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<String>,
    /// Present when the request asked for `logprobs`.
    pub logprobs: Option<ChoiceLogprobs>,
}

/// A chat choice's `logprobs`: one entry per token of this chunk.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChoiceLogprobs {
    pub content: Option<Vec<WireTokenLogprob>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct WireTokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Option<Vec<u8>>,
    pub top_logprobs: Vec<WireTopLogprob>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct WireTopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Option<Vec<u8>>,
}

impl WireTokenLogprob {
    pub fn into_entry(self) -> TokenLogprob {
        let bytes = |b: Option<Vec<u8>>, t: &str| b.unwrap_or_else(|| t.as_bytes().to_vec());
        TokenLogprob {
            id: None,
            bytes: bytes(self.bytes, &self.token),
            token: self.token,
            logprob: self.logprob,
            top: self
                .top_logprobs
                .into_iter()
                .map(|t| TopLogprob {
                    id: None,
                    bytes: bytes(t.bytes, &t.token),
                    token: t.token,
                    logprob: t.logprob,
                })
                .collect(),
        }
    }
}

/// One streamed chunk of a legacy `/completions` response.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TextChunk {
    pub choices: Vec<TextChoice>,
    pub usage: Option<WireUsage>,
    pub error: Option<WireError>,
    pub object: Option<String>,
    pub message: Option<String>,
    pub timings: Option<WireTimings>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TextChoice {
    pub index: u32,
    pub text: String,
    pub finish_reason: Option<String>,
    pub logprobs: Option<TextLogprobs>,
}

/// The legacy `logprobs` shape: parallel arrays.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TextLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f32>>,
    pub top_logprobs: Vec<Option<Map<String, Value>>>,
}

impl TextLogprobs {
    pub fn into_entries(self) -> Vec<TokenLogprob> {
        let mut tops = self.top_logprobs.into_iter();
        let mut lps = self.token_logprobs.into_iter();
        self.tokens
            .into_iter()
            .map(|token| {
                let logprob = lps.next().flatten().unwrap_or(f32::NEG_INFINITY);
                let top = tops
                    .next()
                    .flatten()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(t, v)| TopLogprob {
                        id: None,
                        bytes: t.as_bytes().to_vec(),
                        token: t,
                        logprob: v.as_f64().unwrap_or(f64::NEG_INFINITY) as f32,
                    })
                    .collect();
                TokenLogprob {
                    id: None,
                    bytes: token.as_bytes().to_vec(),
                    token,
                    logprob,
                    top,
                }
            })
            .collect()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Delta {
    pub content: Option<String>,
    /// vLLM's reasoning parsers (and DeepSeek's API).
    pub reasoning_content: Option<String>,
    /// The newer spelling of the same field.
    pub reasoning: Option<String>,
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ToolCallDelta {
    pub index: Option<u64>,
    pub id: Option<String>,
    pub function: Option<FunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct FunctionDelta {
    pub name: Option<String>,
    pub arguments: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct WireUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: Option<u64>,
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    /// Speculative decoding's draft tokens, where the server reports them (agentd, OpenAI's Predicted Outputs).
    #[serde(default)]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CompletionTokensDetails {
    pub accepted_prediction_tokens: Option<u64>,
    pub rejected_prediction_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PromptTokensDetails {
    pub cached_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct WireError {
    pub message: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub code: Option<Value>,
}

/// The human-readable message of an error body, whatever its shape (`{"error": {"message"}}`,
/// `{"error": "..."}`, vLLM's `{"object": "error", "message"}`, FastAPI's `{"detail"}`), else the text itself.
pub fn error_message(body: &str) -> String {
    let text = body.trim();
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        let candidates = [
            v.pointer("/error/message"),
            v.get("error").filter(|e| e.is_string()),
            v.get("message"),
            v.get("detail"),
        ];
        for c in candidates.into_iter().flatten() {
            match c {
                Value::String(s) => return s.clone(),
                Value::Null => {}
                other => return other.to_string(),
            }
        }
    }
    if text.is_empty() {
        "(empty response body)".into()
    } else {
        super::sse::truncate(text, 1_000).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::AssistantMessage;

    #[test]
    fn an_assistant_prefill_asks_vllm_to_continue_the_final_message() {
        let mut request = CompletionRequest::user("count to 5");
        let plain = chat_body(&request, "m", &Compat::default());
        assert_eq!(plain.get("continue_final_message"), None);
        request.messages.push(Message::Assistant(AssistantMessage {
            content: vec![ContentBlock::Text {
                text: "1, 2,".into(),
            }],
        }));
        // A last assistant message alone is answered with a new one (OpenAI's rule); the flag continues it.
        let answered = chat_body(&request, "m", &Compat::default());
        assert_eq!(answered.get("continue_final_message"), None);
        request.continue_final_message = true;
        let body = chat_body(&request, "m", &Compat::default());
        assert_eq!(body["continue_final_message"], json!(true));
        assert_eq!(body["add_generation_prompt"], json!(false));
        assert_eq!(
            body["messages"][1],
            json!({"role": "assistant", "content": "1, 2,"})
        );
    }
}
