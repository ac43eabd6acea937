//! The OpenAI Chat Completions wire format: our [`CompletionRequest`] as the JSON body a server expects, and the
//! streamed chunks (and error bodies) it sends back.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::super::{
    CompletionRequest, ContentBlock, Message, ResponseFormat, ToolChoice, ToolSpec,
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
        body.insert(
            "tool_choice".into(),
            match &request.tool_choice {
                ToolChoice::Auto => "auto".into(),
                ToolChoice::None => "none".into(),
                ToolChoice::Required => "required".into(),
                ToolChoice::Tool { name } => {
                    json!({"type": "function", "function": {"name": name}})
                }
            },
        );
        if let Some(p) = request.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), p.into());
        }
    }
    match &request.response_format {
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
    }
    if let Some(n) = request.max_tokens {
        let field = match compat.max_tokens_field {
            MaxTokensField::MaxTokens => "max_tokens",
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
        };
        body.insert(field.into(), n.into());
    }
    if !request.stop.is_empty() {
        body.insert("stop".into(), json!(request.stop));
    }
    let s = &request.sampling;
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
    // vLLM's extensions; sent only when set, since OpenAI itself rejects them.
    put("top_k", s.top_k.map(|v| json!(v)));
    put("min_p", s.min_p.map(|v| json!(v)));
    put("repetition_penalty", s.repetition_penalty.map(|v| json!(v)));
    Value::Object(body)
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
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<String>,
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
