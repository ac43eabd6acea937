//! A Responses API request (`POST /v1/responses`, as Codex CLI and the `openai` SDK send it) → our
//! [`CompletionRequest`], checked field by field so every bad input is a 400 naming the field before any work is
//! queued. Stateless like Ollama's: the whole conversation comes in `input` (`store` is ignored, and a
//! `previous_response_id` is refused with a message saying so).
//!
//! `input`: a string (one user message) or items — `message` (roles `user`, `assistant`, `system`, `developer`;
//! content a string or `input_text` / `output_text` parts; the `type` may be left out), `function_call`,
//! `function_call_output`, `custom_tool_call` / `custom_tool_call_output` (a freeform tool, as a function with one
//! `input` string), `reasoning` (dropped: the model's own thinking is not sent back). `instructions` and
//! system/developer messages become the system prompt. `tools`: flat `function` tools and `custom` tools; other
//! built-in tool types (`web_search`, `file_search`, …) are not served and are left out with a warning.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::provider::{
    AssistantMessage, CompletionRequest, ContentBlock, Message, ResponseFormat, ToolChoice,
    ToolResultMessage, ToolSpec, UserMessage,
};
use crate::server::error::ApiError;
use crate::server::limits::RequestLimits;
use crate::server::request_fields::past_call;
use crate::server::request_fields::{check_constraint, sampling, thinking_level, SamplingFields};

/// The body of `POST /v1/responses` (fields this server does not use are accepted and ignored).
#[derive(Debug, Default, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ResponsesRequest {
    pub model: String,
    pub input: Option<Value>,
    pub instructions: Option<String>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub text: Option<TextOptions>,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    pub reasoning: Option<ReasoningOptions>,
    pub stream: Option<bool>,
    pub store: Option<bool>,
    pub previous_response_id: Option<String>,
    pub user: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub metadata: Option<Value>,
}

/// `text`: the output format.
#[derive(Debug, Default, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(default)]
pub struct TextOptions {
    pub format: Option<Value>,
}

/// `reasoning`.
#[derive(Debug, Default, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(default)]
pub struct ReasoningOptions {
    pub effort: Option<String>,
}

/// What the response echoes of the request.
#[derive(Debug, Clone, Default)]
pub struct Echo {
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub tools: Vec<Value>,
    pub tool_choice: Value,
    pub text_format: Value,
    pub parallel_tool_calls: bool,
    pub effort: Option<String>,
    pub metadata: Value,
    pub user: Option<String>,
    pub stream: bool,
}

/// Checks `req` and converts it. `model` is the canonical model id the caller resolved.
pub fn responses_request(
    req: ResponsesRequest,
    model: String,
    limits: &RequestLimits,
) -> Result<(CompletionRequest, Echo), ApiError> {
    if let Some(id) = req
        .previous_response_id
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        return Err(ApiError::invalid_param(
            "previous_response_id",
            format!(
                "previous_response_id `{id}` cannot be used: this server keeps no responses (it is stateless); \
                 send the whole conversation in `input`"
            ),
        ));
    }
    let mut system: Vec<String> = Vec::new();
    if let Some(i) = req.instructions.as_deref().filter(|s| !s.trim().is_empty()) {
        system.push(i.to_string());
    }
    let messages = match req.input {
        None | Some(Value::Null) => {
            return Err(ApiError::invalid_param("input", "`input` is required"))
        }
        Some(Value::String(s)) => vec![Message::User(UserMessage { content: s })],
        Some(Value::Array(items)) => {
            limits.check_messages(items.len())?;
            input_items(items, &mut system)?
        }
        Some(other) => {
            return Err(ApiError::invalid_param(
                "input",
                format!("`input` must be a string or an array of items, got {other}"),
            ))
        }
    };
    if messages.is_empty() {
        return Err(ApiError::invalid_param(
            "input",
            "`input` holds no message, call or call output",
        ));
    }
    let raw_tools = req.tools.unwrap_or_default();
    limits.check_tools(&raw_tools)?;
    let mut tools = Vec::new();
    let mut offered = Vec::new();
    for (i, t) in raw_tools.iter().enumerate() {
        let Some(chat_tool) =
            as_chat_tool(t).map_err(|m| ApiError::invalid_param(format!("tools[{i}]"), m))?
        else {
            let kind = t.get("type").and_then(Value::as_str).unwrap_or("?");
            let name = t.get("name").and_then(Value::as_str).unwrap_or("");
            tracing::debug!(
                kind,
                name,
                "a built-in tool type this server does not serve was left out"
            );
            continue;
        };
        tools.push(
            ToolSpec::from_openai(&chat_tool)
                .map_err(|e| ApiError::invalid_param(format!("tools[{i}]"), e.to_string()))?,
        );
        offered.push(t.clone());
    }
    let tool_choice = match &req.tool_choice {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::Object(o))
            if o.get("type").and_then(Value::as_str) == Some("allowed_tools") =>
        {
            ToolChoice::Auto
        }
        Some(v) => ToolChoice::from_openai(v)
            .map_err(|e| ApiError::invalid_param("tool_choice", e.to_string()))?,
    };
    let format = req.text.and_then(|t| t.format);
    let response_format = match &format {
        None | Some(Value::Null) => ResponseFormat::Text,
        Some(f) => ResponseFormat::from_openai(&as_chat_format(f))
            .map_err(|e| ApiError::invalid_param("text.format", e.to_string()))?,
    };
    if req.max_output_tokens == Some(0) {
        return Err(ApiError::invalid_param(
            "max_output_tokens",
            "max_output_tokens must be at least 1",
        ));
    }
    let effort = req.reasoning.and_then(|r| r.effort);
    let thinking = thinking_level(effort.as_deref(), None)
        .map_err(|e| ApiError::invalid_param("reasoning.effort", e.message))?;
    let sampling = sampling(SamplingFields {
        temperature: req.temperature,
        top_p: req.top_p,
        seed: req.seed,
        ..Default::default()
    })?;
    let request = CompletionRequest {
        model,
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages,
        tools,
        tool_choice,
        parallel_tool_calls: req.parallel_tool_calls,
        response_format,
        sampling,
        max_tokens: req.max_output_tokens,
        cache_key: req
            .prompt_cache_key
            .clone()
            .or_else(|| req.user.clone())
            .map(|k| format!("openai-user:{k}")),
        thinking,
        ..CompletionRequest::default()
    };
    check_constraint(&request)?;
    let echo = Echo {
        instructions: req.instructions,
        max_output_tokens: req.max_output_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        tools: offered,
        tool_choice: req.tool_choice.unwrap_or_else(|| json!("auto")),
        text_format: format.unwrap_or_else(|| json!({"type": "text"})),
        parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
        effort,
        metadata: req.metadata.unwrap_or_else(|| json!({})),
        user: req.user,
        stream: req.stream.unwrap_or(false),
    };
    Ok((request, echo))
}

/// A flat Responses tool as a Chat Completions tool; `Ok(None)` for a built-in tool type this server does not
/// serve.
fn as_chat_tool(tool: &Value) -> Result<Option<Value>, String> {
    let kind = tool
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("function");
    let name = tool.get("name").cloned().unwrap_or(Value::Null);
    match kind {
        "function" => {
            if !name.is_string() {
                return Err("a function tool needs a `name`".into());
            }
            let mut function = Map::new();
            function.insert("name".into(), name);
            for key in ["description", "parameters", "strict"] {
                if let Some(v) = tool.get(key).filter(|v| !v.is_null()) {
                    function.insert(key.into(), v.clone());
                }
            }
            Ok(Some(json!({"type": "function", "function": function})))
        }
        // A freeform tool (Codex's `apply_patch`): one string argument holding the tool's input.
        "custom" => {
            if !name.is_string() {
                return Err("a custom tool needs a `name`".into());
            }
            Ok(Some(json!({"type": "function", "function": {
                "name": name,
                "description": tool.get("description").cloned().unwrap_or(json!("")),
                "parameters": {"type": "object",
                               "properties": {"input": {"type": "string", "description": "The tool's input."}},
                               "required": ["input"], "additionalProperties": false},
            }})))
        }
        _ => Ok(None),
    }
}

/// `text.format` as Chat Completions' `response_format`.
fn as_chat_format(format: &Value) -> Value {
    match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => {
            let mut inner = Map::new();
            for key in ["name", "schema", "strict", "description"] {
                if let Some(v) = format.get(key) {
                    inner.insert(key.into(), v.clone());
                }
            }
            json!({"type": "json_schema", "json_schema": inner})
        }
        _ => format.clone(),
    }
}

/// The text of a message's content: a string, or `input_text` / `output_text` / `text` parts.
fn content_text(content: &Value, param: &str) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for (j, p) in parts.iter().enumerate() {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or("");
                match (kind, p.get("text").and_then(Value::as_str)) {
                    ("input_text" | "output_text" | "text" | "summary_text", Some(t)) => {
                        if !text.is_empty() && !text.ends_with('\n') {
                            text.push('\n');
                        }
                        text.push_str(t);
                    }
                    ("refusal", _) => {}
                    _ => {
                        return Err(ApiError::invalid_param(
                            format!("{param}[{j}]"),
                            format!(
                                "content part type `{kind}` is not supported (only input_text and output_text)"
                            ),
                        ))
                    }
                }
            }
            Ok(text)
        }
        Value::Null => Ok(String::new()),
        other => Err(ApiError::invalid_param(
            param,
            format!("content must be a string or an array of parts, got {other}"),
        )),
    }
}

/// The conversation of `input` items; system and developer messages go to `system`.
fn input_items(items: Vec<Value>, system: &mut Vec<String>) -> Result<Vec<Message>, ApiError> {
    let mut out: Vec<Message> = Vec::new();
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, item) in items.into_iter().enumerate() {
        let param = |field: &str| format!("input[{i}].{field}");
        let kind =
            item.get("type")
                .and_then(Value::as_str)
                .unwrap_or(if item.get("role").is_some() {
                    "message"
                } else {
                    ""
                });
        let text_field = |key: &str| -> Result<String, ApiError> {
            item.get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| ApiError::invalid_param(param(key), format!("`{key}` is required")))
        };
        match kind {
            "message" => {
                let role = text_field("role")?;
                let text = content_text(item.get("content").unwrap_or(&Value::Null), &param("content"))?;
                match role.as_str() {
                    "system" | "developer" => system.push(text),
                    "user" => out.push(Message::User(UserMessage { content: text })),
                    "assistant" => push_assistant(&mut out, ContentBlock::Text { text }),
                    other => {
                        return Err(ApiError::invalid_param(
                            param("role"),
                            format!("role `{other}` is not one of user, assistant, system, developer"),
                        ))
                    }
                }
            }
            "function_call" | "custom_tool_call" => {
                let call_id = text_field("call_id")?;
                let name = text_field("name")?;
                let arguments = if kind == "function_call" {
                    item.get("arguments").cloned().unwrap_or(Value::Null)
                } else {
                    Value::String(json!({"input": item.get("input").cloned().unwrap_or(json!(""))}).to_string())
                };
                names.insert(call_id.clone(), name.clone());
                push_assistant(&mut out, ContentBlock::ToolCall(past_call(call_id, name, arguments)));
            }
            "function_call_output" | "custom_tool_call_output" => {
                let call_id = text_field("call_id")?;
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Array(_)) => content_text(v, &param("output"))?,
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                };
                out.push(Message::ToolResult(ToolResultMessage {
                    tool_name: names.get(&call_id).cloned().unwrap_or_default(),
                    tool_call_id: call_id,
                    content: output,
                    is_error: false,
                }));
            }
            // The model's earlier reasoning is not sent back to it (as on Chat Completions).
            "reasoning" => {}
            "item_reference" => {
                return Err(ApiError::invalid_param(
                    param("type"),
                    "item references need stored responses, which this server does not keep: send the item itself",
                ))
            }
            other => {
                return Err(ApiError::invalid_param(
                    param("type"),
                    format!(
                        "input item type `{other}` is not supported (message, function_call, \
                         function_call_output, custom_tool_call, custom_tool_call_output, reasoning)"
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// Adds `block` to the assistant message at the end of `out` (one assistant turn may be several items: text,
/// then calls), or starts one.
fn push_assistant(out: &mut Vec<Message>, block: ContentBlock) {
    if let Some(Message::Assistant(a)) = out.last_mut() {
        a.content.push(block);
        return;
    }
    out.push(Message::Assistant(AssistantMessage {
        content: vec![block],
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(body: Value) -> Result<CompletionRequest, ApiError> {
        let req: ResponsesRequest = serde_json::from_value(body).unwrap();
        responses_request(req, "m".into(), &RequestLimits::default()).map(|(r, _)| r)
    }

    #[test]
    fn items_become_a_conversation() {
        let r = convert(json!({
            "model": "m",
            "instructions": "Be brief.",
            "input": [
                {"role": "developer", "content": "Use tools."},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read a.txt"}]},
                {"type": "reasoning", "summary": []},
                {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{\"path\":\"a.txt\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "hello"},
            ],
            "tools": [{"type": "function", "name": "read", "parameters": {"type": "object",
                       "properties": {"path": {"type": "string"}}, "required": ["path"]}},
                      {"type": "web_search"}],
        }))
        .unwrap();
        assert_eq!(r.system.as_deref(), Some("Be brief.\n\nUse tools."));
        assert_eq!(r.messages.len(), 3);
        assert_eq!(r.tools.len(), 1, "web_search is not served");
        match &r.messages[2] {
            Message::ToolResult(t) => {
                assert_eq!(t.tool_name, "read");
                assert_eq!(t.content, "hello");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_input_names_the_field() {
        let e = convert(json!({"input": [{"type": "function_call", "name": "x"}]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[0].call_id"));
        let e = convert(json!({"input": "hi", "previous_response_id": "resp_1"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("previous_response_id"));
        let e = convert(json!({"input": [{"type": "bogus"}]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[0].type"));
        let e = convert(json!({})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input"));
        let e = convert(json!({"input": "x", "max_output_tokens": 0})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_output_tokens"));
        let e = convert(json!({"input": "x", "tool_choice": {"type": "function", "name": "nope"}}))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
    }

    #[test]
    fn json_schema_format_and_custom_tools() {
        let r = convert(json!({
            "input": "x",
            "text": {"format": {"type": "json_schema", "name": "o", "strict": true,
                                 "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
            "tools": [{"type": "custom", "name": "apply_patch", "description": "patch"}],
        }))
        .unwrap();
        assert!(matches!(
            r.response_format,
            ResponseFormat::JsonSchema { .. }
        ));
        assert_eq!(r.tools[0].name, "apply_patch");
    }
}
