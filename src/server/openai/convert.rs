//! OpenAI requests → our [`CompletionRequest`], checked field by field so every bad input is a 400 that names
//! the field (`param`) before any work is queued: `n` other than 1, unsupported content parts, malformed tools,
//! a `tool_choice` naming no offered tool, an inadmissible `response_format` schema, out-of-range sampling.

use std::collections::HashMap;

use serde_json::Value;

use super::types::{ChatCompletionRequest, ChatMessage, Content, StopField};
use crate::provider::{
    AssistantMessage, CompletionRequest, ContentBlock, Message, ResponseFormat, ToolChoice,
    ToolResultMessage, ToolSpec, UserMessage,
};
use crate::server::error::ApiError;
use crate::server::limits::RequestLimits;
use crate::server::request_fields::{
    past_call, sampling, stop_list, thinking_level, SamplingFields,
};

/// The most alternatives `top_logprobs` may ask for (OpenAI's and vLLM's default limit).
pub const MAX_TOP_LOGPROBS: u32 = 20;

/// How the answer is to be delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChatOptions {
    pub stream: bool,
    pub include_usage: bool,
    /// `Some(k)`: return each token's log-probability and its `k` most likely alternatives.
    pub logprobs: Option<usize>,
}

/// vLLM's `continue_final_message`: allowed only with the last message the assistant's (with no tool calls) and
/// without `add_generation_prompt: true` (vLLM refuses both together too).
fn continue_final(req: &ChatCompletionRequest) -> Result<bool, ApiError> {
    if req.continue_final_message != Some(true) {
        return Ok(false);
    }
    if req.add_generation_prompt == Some(true) {
        return Err(ApiError::invalid_param(
            "continue_final_message",
            "continue_final_message and add_generation_prompt cannot both be true",
        ));
    }
    match req.messages.last() {
        Some(ChatMessage::Assistant { tool_calls, .. })
            if tool_calls.as_ref().is_none_or(|c| c.is_empty()) =>
        {
            Ok(true)
        }
        _ => Err(ApiError::invalid_param(
            "continue_final_message",
            "continue_final_message needs the last message to be the assistant's text",
        )),
    }
}

/// Checks `req` and converts it. `model` is the canonical model id the caller resolved.
pub fn chat_request(
    req: ChatCompletionRequest,
    model: String,
    limits: &RequestLimits,
) -> Result<(CompletionRequest, ChatOptions), ApiError> {
    limits.check_messages(req.messages.len())?;
    if let Some(tools) = &req.tools {
        limits.check_tools(tools)?;
    }
    let constraint = req.constraint.clone();
    if let Some(n) = req.n {
        if n != 1 {
            return Err(ApiError::invalid_param(
                "n",
                format!("n = {n} is not supported: this server returns exactly one choice (n = 1)"),
            ));
        }
    }
    if req.messages.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "`messages` must hold at least one message",
        ));
    }
    let stream = req.stream.unwrap_or(false);
    if req.stream_options.is_some() && !stream {
        return Err(ApiError::invalid_param(
            "stream_options",
            "`stream_options` is only allowed when `stream` is true",
        ));
    }
    let logprobs = match (req.logprobs.unwrap_or(false), req.top_logprobs) {
        (false, Some(k)) if k > 0 => {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                "`logprobs` must be true when `top_logprobs` is set",
            ))
        }
        (_, Some(k)) if k > MAX_TOP_LOGPROBS => {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                format!("top_logprobs must be at most {MAX_TOP_LOGPROBS}, got {k}"),
            ))
        }
        (true, k) => Some(k.unwrap_or(0) as usize),
        (false, _) => None,
    };
    let continue_final_message = continue_final(&req)?;
    let (system, messages) = messages(req.messages)?;
    let tools = match req.tools {
        None => Vec::new(),
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(i, t)| {
                ToolSpec::from_openai(t)
                    .map_err(|e| ApiError::invalid_param(format!("tools[{i}]"), e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    let tool_choice = match &req.tool_choice {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(v) => ToolChoice::from_openai(v)
            .map_err(|e| ApiError::invalid_param("tool_choice", e.to_string()))?,
    };
    let response_format = match &req.response_format {
        None | Some(Value::Null) => ResponseFormat::Text,
        Some(v) => ResponseFormat::from_openai(v)
            .map_err(|e| ApiError::invalid_param("response_format", e.to_string()))?,
    };
    let max_tokens = req.max_completion_tokens.or(req.max_tokens);
    let field = if req.max_completion_tokens.is_some() {
        "max_completion_tokens"
    } else {
        "max_tokens"
    };
    if max_tokens == Some(0) {
        return Err(ApiError::invalid_param(
            field,
            format!("{field} must be at least 1"),
        ));
    }
    let sampling = sampling(SamplingFields {
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        min_p: req.min_p,
        seed: req.seed,
        presence_penalty: req.presence_penalty,
        frequency_penalty: req.frequency_penalty,
        repetition_penalty: req.repetition_penalty,
        logit_bias: req.logit_bias,
    })?;
    let mut request = CompletionRequest {
        model,
        system,
        messages,
        tools,
        tool_choice,
        parallel_tool_calls: req.parallel_tool_calls,
        response_format,
        sampling,
        max_tokens,
        stop: stop_list(
            req.stop.map(StopField::into_vec).unwrap_or_default(),
            limits,
        )?,
        cache_key: req.user.map(|u| format!("openai-user:{u}")),
        cache_scope: None,
        logprobs,
        ignore_eos: req.ignore_eos.unwrap_or(false),
        thinking: thinking_level(
            req.reasoning_effort.as_deref(),
            req.chat_template_kwargs.as_ref(),
        )?,
        continue_final_message,
        keep_alive: None,
    };
    constraint.apply(&mut request)?;
    Ok((
        request,
        ChatOptions {
            stream,
            include_usage: stream && req.stream_options.as_ref().is_some_and(|o| o.include_usage),
            logprobs,
        },
    ))
}

/// The text of a message's content (text parts only).
fn text_of(content: Content, param: &str) -> Result<String, ApiError> {
    match content {
        Content::Text(s) => Ok(s),
        Content::Parts(parts) => {
            let mut text = String::new();
            for (j, p) in parts.into_iter().enumerate() {
                match (p.kind.as_str(), p.text) {
                    ("text", Some(t)) => text.push_str(&t),
                    (kind, _) => {
                        return Err(ApiError::invalid_param(
                            format!("{param}[{j}]"),
                            format!(
                                "content part type `{kind}` is not supported (only `text` parts with a `text`)"
                            ),
                        ))
                    }
                }
            }
            Ok(text)
        }
    }
}

/// The system prompt (all system and developer messages, joined) and the conversation.
fn messages(list: Vec<ChatMessage>) -> Result<(Option<String>, Vec<Message>), ApiError> {
    let mut system: Vec<String> = Vec::new();
    let mut out: Vec<Message> = Vec::with_capacity(list.len());
    // Call id → tool name, for the results that answer them (a map: a long transcript stays linear).
    let mut call_names: HashMap<String, String> = HashMap::new();
    for (i, m) in list.into_iter().enumerate() {
        let param = format!("messages[{i}].content");
        match m {
            ChatMessage::System { content } | ChatMessage::Developer { content } => {
                system.push(text_of(content, &param)?)
            }
            ChatMessage::User { content } => out.push(Message::User(UserMessage {
                content: text_of(content, &param)?,
            })),
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => {
                let mut blocks = Vec::new();
                if let Some(c) = content {
                    let text = text_of(c, &param)?;
                    if !text.is_empty() {
                        blocks.push(ContentBlock::Text { text });
                    }
                }
                for (j, call) in tool_calls.unwrap_or_default().into_iter().enumerate() {
                    if call.kind.as_deref().is_some_and(|k| k != "function") {
                        return Err(ApiError::invalid_param(
                            format!("messages[{i}].tool_calls[{j}].type"),
                            "only `function` tool calls are supported",
                        ));
                    }
                    call_names.insert(call.id.clone(), call.function.name.clone());
                    blocks.push(ContentBlock::ToolCall(past_call(
                        call.id,
                        call.function.name,
                        call.function.arguments,
                    )));
                }
                out.push(Message::Assistant(AssistantMessage { content: blocks }));
            }
            ChatMessage::Tool {
                content,
                tool_call_id,
            } => {
                let tool_name = call_names.get(&tool_call_id).cloned().unwrap_or_default();
                out.push(Message::ToolResult(ToolResultMessage {
                    tool_call_id,
                    tool_name,
                    content: text_of(content, &param)?,
                    is_error: false,
                }));
            }
        }
    }
    let system = (!system.is_empty()).then(|| system.join("\n\n"));
    Ok((system, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;
    use serde_json::json;

    fn parse(v: Value) -> Result<(CompletionRequest, ChatOptions), ApiError> {
        chat_request(
            serde_json::from_value(v).unwrap(),
            "m".into(),
            &RequestLimits::default(),
        )
    }

    #[test]
    fn converts_a_tool_round_trip() {
        let (req, opts) = parse(json!({
            "model": "m", "stream": true, "stream_options": {"include_usage": true},
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "read a"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "hello"}
            ],
            "tools": [{"type": "function", "function": {"name": "read", "parameters":
                {"type": "object", "properties": {"path": {"type": "string"}}}}}],
            "tool_choice": {"type": "function", "function": {"name": "read"}},
            "max_completion_tokens": 7, "max_tokens": 9, "stop": "\n"
        }))
        .unwrap();
        assert_eq!(
            opts,
            ChatOptions {
                stream: true,
                include_usage: true,
                logprobs: None
            }
        );
        assert_eq!(req.system.as_deref(), Some("Be brief."));
        assert_eq!(req.max_tokens, Some(7));
        assert_eq!(req.stop, vec!["\n".to_string()]);
        assert_eq!(
            req.tool_choice,
            ToolChoice::Tool {
                name: "read".into()
            }
        );
        let call = ToolCall::new("call_1", "read", json!({"path": "a"}));
        assert_eq!(
            req.messages[1],
            Message::Assistant(AssistantMessage {
                content: vec![ContentBlock::ToolCall(call.clone())]
            })
        );
        assert_eq!(req.messages[2], Message::tool_result(&call, "hello", false));
    }

    #[test]
    fn rejects_bad_fields_naming_them() {
        let base = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let with = |k: &str, v: Value| {
            let mut b = base.clone();
            b[k] = v;
            b
        };
        let cases = [
            (with("n", json!(2)), "n"),
            (with("top_p", json!(3.0)), "top_p"),
            (with("temperature", json!(-1.0)), "temperature"),
            (with("top_k", json!(-5)), "top_k"),
            (with("max_tokens", json!(0)), "max_tokens"),
            (with("top_logprobs", json!(3)), "top_logprobs"),
            (
                with("stream_options", json!({"include_usage": true})),
                "stream_options",
            ),
            (with("tool_choice", json!("required")), "tool_choice"),
            (with("tool_choice", json!("sometimes")), "tool_choice"),
            (
                with("response_format", json!({"type": "xml"})),
                "response_format",
            ),
            (
                with(
                    "response_format",
                    json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}),
                ),
                "response_format",
            ),
            (
                with(
                    "tools",
                    json!([{"type": "function", "function": {"name": "bad name!"}}]),
                ),
                "tools[0]",
            ),
            (with("messages", json!([])), "messages"),
            (
                with(
                    "messages",
                    json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
                ),
                "messages[0].content[0]",
            ),
        ];
        for (body, param) in cases {
            let e = parse(body.clone())
                .err()
                .unwrap_or_else(|| panic!("{body}"));
            assert_eq!(e.status.as_u16(), 400, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
    }

    #[test]
    fn logprobs_and_unparseable_past_arguments() {
        let (req, opts) = parse(json!({"model": "m", "logprobs": true, "top_logprobs": 2, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}
        ]}))
        .unwrap();
        assert_eq!(opts.logprobs, Some(2));
        match &req.messages[1] {
            Message::Assistant(a) => assert_eq!(a.tool_calls()[0].arguments_text(), "{oops"),
            other => panic!("{other:?}"),
        }
    }
}
