//! An Anthropic Messages request (`POST /v1/messages`, as Claude Code and the `anthropic` SDK send it) → our
//! [`CompletionRequest`], checked field by field (a 400 names the field). `system` (a string or text blocks),
//! `messages` with `text` / `tool_use` / `tool_result` / `thinking` blocks (a thinking block is the model's own
//! and is not sent back; `cache_control` is accepted and ignored), `tools` with `input_schema` (server tools such
//! as `web_search_…` are not served and are left out with a warning), `tool_choice` (`auto` / `any` / `tool` /
//! `none`, `disable_parallel_tool_use`), `stop_sequences`, `temperature` / `top_p` / `top_k`, `thinking`,
//! `output_config.format` (structured outputs, held by the grammar like Chat Completions' `response_format`).

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::provider::{
    AssistantMessage, CompletionRequest, ContentBlock, Message, ResponseFormat, Thinking, ToolCall,
    ToolChoice, ToolResultMessage, ToolSpec, UserMessage,
};
use crate::server::error::ApiError;
use crate::server::limits::RequestLimits;
use crate::server::request_fields::{check_constraint, sampling, SamplingFields};

/// The body of `POST /v1/messages` (and of `/v1/messages/count_tokens`, where `max_tokens` is not needed).
#[derive(Debug, Default, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(default)]
pub struct MessagesRequest {
    pub model: String,
    pub max_tokens: Option<u32>,
    pub messages: Vec<AnthropicMessage>,
    pub system: Option<Value>,
    pub stop_sequences: Option<Vec<String>>,
    pub stream: Option<bool>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub thinking: Option<Value>,
    pub metadata: Option<Value>,
    /// `format` (structured outputs: `{"type": "json_schema", "schema": …}`) and `effort`.
    pub output_config: Option<Value>,
    /// The structured-outputs beta's name for `output_config.format`.
    pub output_format: Option<Value>,
}

/// One message: a role and a string or content blocks.
#[derive(Debug, Default, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(default)]
pub struct AnthropicMessage {
    pub role: String,
    pub content: Value,
}

/// Checks `req` and converts it; `count_only` (`count_tokens`) does not need `max_tokens`. `model` is the
/// served model the request's name resolved to.
pub fn messages_request(
    req: MessagesRequest,
    model: String,
    limits: &RequestLimits,
    count_only: bool,
) -> Result<(CompletionRequest, bool), ApiError> {
    limits.check_messages(req.messages.len())?;
    let max_tokens = match req.max_tokens {
        Some(0) => {
            return Err(ApiError::invalid_param(
                "max_tokens",
                "max_tokens must be at least 1",
            ))
        }
        Some(n) => Some(n),
        None if count_only => None,
        None => {
            return Err(ApiError::invalid_param(
                "max_tokens",
                "`max_tokens` is required",
            ))
        }
    };
    if req.messages.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "`messages` must hold at least one message",
        ));
    }
    let system = match &req.system {
        None | Some(Value::Null) => None,
        Some(v) => Some(text_blocks(v, "system")?).filter(|s| !s.is_empty()),
    };
    let (messages, more_system) = conversation(&req.messages)?;
    let system = match (system, more_system.is_empty()) {
        (s, true) => s,
        (None, false) => Some(more_system.join("\n\n")),
        (Some(s), false) => Some(format!("{s}\n\n{}", more_system.join("\n\n"))),
    };
    let raw_tools = req.tools.unwrap_or_default();
    limits.check_tools(&raw_tools)?;
    let mut tools = Vec::new();
    for (i, t) in raw_tools.iter().enumerate() {
        let param = format!("tools[{i}]");
        if t.get("type")
            .and_then(Value::as_str)
            .is_some_and(|k| k != "custom")
        {
            let kind = t.get("type").and_then(Value::as_str).unwrap_or("?");
            tracing::debug!(
                kind,
                "a server tool this server does not serve was left out"
            );
            continue;
        }
        let name = t
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid_param(&param, "a tool needs a `name`"))?;
        let chat = json!({"type": "function", "function": {
            "name": name,
            "description": t.get("description").cloned().unwrap_or(json!("")),
            "parameters": t.get("input_schema").cloned().unwrap_or(json!({"type": "object"})),
        }});
        tools.push(
            ToolSpec::from_openai(&chat)
                .map_err(|e| ApiError::invalid_param(&param, e.to_string()))?,
        );
    }
    let (tool_choice, parallel) = match &req.tool_choice {
        None | Some(Value::Null) => (ToolChoice::Auto, None),
        Some(v) => {
            let no_parallel =
                v.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true);
            let choice = match v.get("type").and_then(Value::as_str) {
                Some("auto") => ToolChoice::Auto,
                Some("any") => ToolChoice::Required,
                Some("none") => ToolChoice::None,
                Some("tool") => ToolChoice::Tool {
                    name: v
                        .get("name")
                        .and_then(Value::as_str)
                        .ok_or_else(|| ApiError::invalid_param("tool_choice.name", "`name` is required"))?
                        .to_string(),
                },
                _ => {
                    return Err(ApiError::invalid_param(
                        "tool_choice.type",
                        format!("tool_choice must be {{\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}}, got {v}"),
                    ))
                }
            };
            (choice, no_parallel.then_some(false))
        }
    };
    let thinking = match &req.thinking {
        None | Some(Value::Null) => None,
        Some(t) => match t.get("type").and_then(Value::as_str) {
            Some("enabled") => Some(Thinking::Medium),
            Some("disabled") => Some(Thinking::Off),
            // The model decides (Claude Code's default): the template's own default.
            Some("adaptive") => None,
            _ => {
                return Err(ApiError::invalid_param(
                    "thinking.type",
                    "thinking.type must be `enabled`, `disabled` or `adaptive`",
                ))
            }
        },
    };
    let stop = req.stop_sequences.unwrap_or_default();
    limits.check_stop(&stop)?;
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid_param(
            "stop_sequences",
            "stop sequences must not be empty",
        ));
    }
    let sampling = sampling(SamplingFields {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        ..Default::default()
    })?;
    let response_format = output_format(req.output_config.as_ref(), req.output_format.as_ref())?;
    let prefilled = matches!(messages.last(), Some(Message::Assistant(_)));
    let request = CompletionRequest {
        model,
        system,
        messages,
        tools,
        tool_choice,
        parallel_tool_calls: parallel,
        response_format,
        sampling,
        max_tokens,
        stop,
        cache_key: req
            .metadata
            .as_ref()
            .and_then(|m| m.get("user_id"))
            .and_then(Value::as_str)
            .map(|u| format!("openai-user:{}", user_scope(u))),
        thinking,
        // A last message of the assistant's is a prefill the reply continues (the Messages API's rule).
        continue_final_message: prefilled,
        ..CompletionRequest::default()
    };
    check_constraint(&request)?;
    Ok((request, req.stream.unwrap_or(false)))
}

/// Structured outputs: `output_config.format` (or the beta's top-level `output_format`) as the response format
/// the grammar holds the reply to — one JSON document of the schema, sent back as the text block. Also checks
/// `output_config.effort`, which has no counterpart here (the template's own thinking default stands, as with
/// `thinking: adaptive`).
fn output_format(config: Option<&Value>, beta: Option<&Value>) -> Result<ResponseFormat, ApiError> {
    let config = config.filter(|c| !c.is_null());
    if let Some(c) = config {
        if !c.is_object() {
            return Err(ApiError::invalid_param(
                "output_config",
                "output_config must be an object",
            ));
        }
        match c.get("effort") {
            None | Some(Value::Null) => {}
            Some(Value::String(e))
                if ["low", "medium", "high", "xhigh", "max"].contains(&e.as_str()) => {}
            Some(other) => {
                return Err(ApiError::invalid_param(
                    "output_config.effort",
                    format!(
                        "output_config.effort must be `low`, `medium`, `high`, `xhigh` or `max`, got {other}"
                    ),
                ))
            }
        }
    }
    let (format, param) = match (config.and_then(|c| c.get("format")), beta) {
        (Some(f), _) if !f.is_null() => (f, "output_config.format"),
        (_, Some(f)) if !f.is_null() => (f, "output_format"),
        _ => return Ok(ResponseFormat::Text),
    };
    match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => {}
        _ => {
            return Err(ApiError::invalid_param(
                format!("{param}.type"),
                format!(
                    "{param} must be {{\"type\": \"json_schema\", \"schema\": …}}, got {format}"
                ),
            ))
        }
    }
    let schema = format
        .get("schema")
        .filter(|s| s.is_object())
        .ok_or_else(|| {
            ApiError::invalid_param(
                format!("{param}.schema"),
                format!("{param}.schema must be a JSON Schema object"),
            )
        })?;
    ResponseFormat::from_openai(&json!({"type": "json_schema", "json_schema": {
        "name": "output", "schema": schema, "strict": true}}))
    .map_err(|e| ApiError::invalid_param(format!("{param}.schema"), e.to_string()))
}

/// The text of a string or of `text` blocks (other blocks refused).
fn text_blocks(v: &Value, param: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut parts = Vec::new();
            for (j, b) in blocks.iter().enumerate() {
                match (
                    b.get("type").and_then(Value::as_str),
                    b.get("text").and_then(Value::as_str),
                ) {
                    (Some("text"), Some(t)) => parts.push(t.to_string()),
                    (kind, _) => {
                        return Err(ApiError::invalid_param(
                            format!("{param}[{j}]"),
                            format!(
                                "block type `{}` is not supported here (only text)",
                                kind.unwrap_or("?")
                            ),
                        ))
                    }
                }
            }
            Ok(parts.join("\n\n"))
        }
        other => Err(ApiError::invalid_param(
            param,
            format!("expected a string or text blocks, got {other}"),
        )),
    }
}

/// The part of `metadata.user_id` that names who may share cached prefixes. Claude Code sends a JSON object of
/// `device_id`, `account_uuid` and a `session_id` new on every run: the session is left out, so the runs of one
/// user share the prefill of its 19k-token system prompt (each would recompute it otherwise), while different
/// devices and accounts stay apart. Any other id is used as it is.
fn user_scope(user_id: &str) -> String {
    match serde_json::from_str::<Value>(user_id) {
        Ok(Value::Object(mut map)) if map.contains_key("session_id") => {
            map.remove("session_id");
            Value::Object(map).to_string()
        }
        _ => user_id.to_string(),
    }
}

/// The conversation — user text, tool results (answering earlier `tool_use` blocks) and assistant turns — and the
/// text of `system` messages among them (Claude Code sends some; they join the system prompt).
fn conversation(list: &[AnthropicMessage]) -> Result<(Vec<Message>, Vec<String>), ApiError> {
    let mut out: Vec<Message> = Vec::new();
    let mut system: Vec<String> = Vec::new();
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, m) in list.iter().enumerate() {
        let param = format!("messages[{i}].content");
        let blocks: Vec<Value> = match &m.content {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(b) => b.clone(),
            other => {
                return Err(ApiError::invalid_param(
                    &param,
                    format!("content must be a string or blocks, got {other}"),
                ))
            }
        };
        match m.role.as_str() {
            "system" => system.push(text_blocks(&m.content, &param)?),
            "user" => {
                let mut text: Vec<String> = Vec::new();
                for (j, b) in blocks.iter().enumerate() {
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => text.push(b.get("text").and_then(Value::as_str).unwrap_or("").to_string()),
                        Some("tool_result") => {
                            let id = b
                                .get("tool_use_id")
                                .and_then(Value::as_str)
                                .ok_or_else(|| {
                                    ApiError::invalid_param(format!("{param}[{j}].tool_use_id"), "`tool_use_id` is required")
                                })?
                                .to_string();
                            let content = match b.get("content") {
                                None | Some(Value::Null) => String::new(),
                                Some(v) => result_text(v, &format!("{param}[{j}].content"))?,
                            };
                            out.push(Message::ToolResult(ToolResultMessage {
                                tool_name: names.get(&id).cloned().unwrap_or_default(),
                                tool_call_id: id,
                                content,
                                is_error: b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                            }));
                        }
                        kind => {
                            return Err(ApiError::invalid_param(
                                format!("{param}[{j}].type"),
                                format!(
                                    "block type `{}` is not supported in a user message (text, tool_result)",
                                    kind.unwrap_or("?")
                                ),
                            ))
                        }
                    }
                }
                if !text.is_empty() {
                    out.push(Message::User(UserMessage {
                        content: text.join("\n\n"),
                    }));
                }
            }
            "assistant" => {
                let mut content = Vec::new();
                for (j, b) in blocks.iter().enumerate() {
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            let text = b.get("text").and_then(Value::as_str).unwrap_or("").to_string();
                            if !text.is_empty() {
                                content.push(ContentBlock::Text { text });
                            }
                        }
                        Some("tool_use") => {
                            let field = |k: &str| {
                                b.get(k).and_then(Value::as_str).map(str::to_string).ok_or_else(|| {
                                    ApiError::invalid_param(format!("{param}[{j}].{k}"), format!("`{k}` is required"))
                                })
                            };
                            let (id, name) = (field("id")?, field("name")?);
                            names.insert(id.clone(), name.clone());
                            let input = b.get("input").cloned().unwrap_or(json!({}));
                            content.push(ContentBlock::ToolCall(ToolCall::new(id, name, input)));
                        }
                        // The model's own thinking is not sent back to it.
                        Some("thinking" | "redacted_thinking") => {}
                        kind => {
                            return Err(ApiError::invalid_param(
                                format!("{param}[{j}].type"),
                                format!(
                                    "block type `{}` is not supported in an assistant message (text, tool_use, thinking)",
                                    kind.unwrap_or("?")
                                ),
                            ))
                        }
                    }
                }
                out.push(Message::Assistant(AssistantMessage { content }));
            }
            other => {
                return Err(ApiError::invalid_param(
                    format!("messages[{i}].role"),
                    format!("role `{other}` is not one of user, assistant, system"),
                ))
            }
        }
    }
    Ok((out, system))
}

/// A tool result's content: a string or text blocks (an image in a result is refused).
fn result_text(v: &Value, param: &str) -> Result<String, ApiError> {
    text_blocks(v, param)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(body: Value) -> Result<CompletionRequest, ApiError> {
        let req: MessagesRequest = serde_json::from_value(body).unwrap();
        messages_request(req, "m".into(), &RequestLimits::default(), false).map(|(r, _)| r)
    }

    #[test]
    fn a_tool_round_trip_becomes_calls_and_results() {
        let r = convert(json!({
            "model": "claude-x", "max_tokens": 100,
            "system": [{"type": "text", "text": "You are a coder.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "read a.txt"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "x"},
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.txt"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "hi"}]},
                    {"type": "text", "text": "and now?"}]},
            ],
            "tools": [{"name": "Read", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
                      {"type": "web_search_20250305", "name": "web_search"}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        }))
        .unwrap();
        assert_eq!(r.system.as_deref(), Some("You are a coder."));
        assert_eq!(r.messages.len(), 4);
        assert_eq!(r.tools.len(), 1);
        assert_eq!(r.tool_choice, ToolChoice::Required);
        assert_eq!(r.parallel_tool_calls, Some(false));
        match &r.messages[2] {
            Message::ToolResult(t) => {
                assert_eq!((t.tool_name.as_str(), t.content.as_str()), ("Read", "hi"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_session_id_in_user_id_does_not_split_the_prefix_cache() {
        let run = |session: &str| {
            let user =
                format!(r#"{{"device_id":"d1","account_uuid":"","session_id":"{session}"}}"#);
            user_scope(&user)
        };
        assert_eq!(run("a"), run("b"));
        assert!(run("a").contains("d1"));
        let other = user_scope(r#"{"device_id":"d2","account_uuid":"","session_id":"a"}"#);
        assert_ne!(run("a"), other);
        assert_eq!(user_scope("alice"), "alice");
    }

    #[test]
    fn bad_input_names_the_field() {
        let e = convert(json!({"messages": [{"role": "user", "content": "x"}]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        let e = convert(json!({"max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]}))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        let e = convert(json!({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]}))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].content[0].type"));
        let e = convert(
            json!({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                               "tool_choice": {"type": "tool"}}),
        )
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice.name"));
    }

    #[test]
    fn output_config_format_is_the_response_format() {
        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let body = |extra: Value| {
            let mut b = json!({"model": "claude-x", "max_tokens": 10,
                               "messages": [{"role": "user", "content": "x"}]});
            b.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            b
        };
        for extra in [
            json!({"output_config": {"format": {"type": "json_schema", "schema": schema}, "effort": "high"}}),
            json!({"output_format": {"type": "json_schema", "schema": schema}}),
        ] {
            let r = convert(body(extra.clone())).unwrap();
            assert!(
                matches!(&r.response_format, ResponseFormat::JsonSchema { schema: s, .. } if *s == schema),
                "{extra}: {:?}",
                r.response_format
            );
        }
        let r = convert(body(json!({"output_config": {"effort": "low"}}))).unwrap();
        assert_eq!(r.response_format, ResponseFormat::Text);
        for (extra, needle) in [
            (
                json!({"output_config": {"format": {"type": "xml"}}}),
                "output_config.format must be",
            ),
            (
                json!({"output_config": {"format": {"type": "json_schema"}}}),
                "output_config.format.schema",
            ),
            (
                json!({"output_format": {"type": "json_schema", "schema": 3}}),
                "output_format.schema",
            ),
            (
                json!({"output_config": {"effort": "enormous"}}),
                "output_config.effort",
            ),
            (
                json!({"output_config": "high"}),
                "output_config must be an object",
            ),
        ] {
            let e = convert(body(extra.clone())).unwrap_err();
            assert!(e.to_string().contains(needle), "{extra}: {e}");
        }
    }
}
