//! Rendering a chat with tools into the prompt text, for every model.
//!
//! Templates that read `tools` (Qwen2.5's) get the tools in OpenAI shape and the transcript as is (with tool-call
//! arguments parsed into objects, as Hugging Face templates expect). Templates that know no tools (SmolLM2's) get
//! the format's tools block appended to the system message, past calls written into the assistant text in the
//! model's format, and tool results as `<tool_response>` user turns, so every model can use tools. With
//! `tool_choice: none` the tools are not shown at all.
//!
//! [`chat_prompt_tokens`] is the one way a chat becomes prompt ids (generation, token counts, `/tokenize`): it
//! renders under a [`ContentGuard`] so that only the template's markup can produce control tokens.

use serde_json::{Map, Value};

use crate::schema::ToolChoice;
use crate::schema::ToolSpec;
use crate::text::call_format::ToolCallFormat;
use crate::text::content_guard::ContentGuard;
use crate::text::error::Result;
use crate::text::template::ChatTemplate;
use crate::text::tokenizer::Tokenizer;

/// The prompt for `messages` (OpenAI-style: `role`, `content`, assistant `tool_calls`, `tool` results), ending
/// with the assistant's generation prompt.
pub fn render_chat(
    template: &ChatTemplate,
    messages: &[Value],
    tools: &[ToolSpec],
    tool_choice: &ToolChoice,
    format: ToolCallFormat,
    enable_thinking: Option<bool>,
) -> Result<String> {
    let shown: &[ToolSpec] = if *tool_choice == ToolChoice::None {
        &[]
    } else {
        tools
    };
    if template.supports_tools() {
        let messages: Vec<Value> = messages.iter().map(parse_call_arguments).collect();
        let openai: Vec<Value> = shown.iter().map(ToolSpec::to_openai).collect();
        return template.render(&messages, Some(&openai), true, enable_thinking);
    }
    let messages = inline_tools(messages, shown, format);
    template.render(&messages, None, true, enable_thinking)
}

/// The prompt ids for a chat: [`render_chat`], tokenized with the template's markup parsed into control tokens
/// while control-token texts inside the request's own strings (contents, tool calls and results, the system
/// prompt, tool descriptions) stay ordinary text (see [`ContentGuard`]). BOS is prepended when the tokenizer
/// wants one and the template did not write it. For a chat whose strings hold no control-token text the ids are
/// exactly `tokenizer.encode(&render_chat(..), true)`.
pub fn chat_prompt_tokens(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    messages: &[Value],
    tools: &[ToolSpec],
    tool_choice: &ToolChoice,
    format: ToolCallFormat,
    enable_thinking: Option<bool>,
) -> Result<Vec<u32>> {
    let guard = ContentGuard::new(
        tokenizer.control_texts(),
        messages,
        tools,
        template.source(),
    )?;
    let ids = if guard.is_empty() {
        let text = render_chat(
            template,
            messages,
            tools,
            tool_choice,
            format,
            enable_thinking,
        )?;
        tokenizer.encode(&text, true)?
    } else {
        let rendered = render_chat(
            template,
            &guard.hide_messages(messages),
            &guard.hide_tools(tools),
            tool_choice,
            format,
            enable_thinking,
        )?;
        let (text, literal) = guard.restore(&rendered);
        tokenizer.encode_with_literals(&text, &literal)?
    };
    Ok(tokenizer.with_bos(ids))
}

/// The transcript rewritten for a template without tool support.
pub fn inline_tools(messages: &[Value], tools: &[ToolSpec], format: ToolCallFormat) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    for message in messages {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        match role {
            "assistant" => {
                let mut text = content_text(message.get("content"));
                let calls = tool_calls_of(message);
                if !calls.is_empty() {
                    let rendered =
                        format.render_calls(calls.iter().map(|(n, a)| (n.as_str(), a.as_str())));
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&rendered);
                }
                out.push(with_content("assistant", text));
            }
            "tool" | "ipython" => {
                let result = format.render_tool_result(&content_text(message.get("content")));
                // Consecutive results share one user turn, as Qwen's template does.
                match out.last_mut() {
                    Some(prev) if prev.get("_tool_results").is_some() => {
                        let joined = format!(
                            "{}\n{result}",
                            prev.get("content").and_then(Value::as_str).unwrap_or("")
                        );
                        prev["content"] = Value::String(joined);
                    }
                    _ => {
                        let mut turn = with_content("user", result);
                        turn["_tool_results"] = Value::Bool(true);
                        out.push(turn);
                    }
                }
            }
            _ => out.push(message.clone()),
        }
    }
    for m in &mut out {
        if let Some(map) = m.as_object_mut() {
            map.remove("_tool_results");
        }
    }
    if !tools.is_empty() {
        let block = format.tools_prompt(tools);
        match out.first_mut() {
            Some(first) if first.get("role").and_then(Value::as_str) == Some("system") => {
                let text = content_text(first.get("content"));
                let joined = if text.is_empty() {
                    block
                } else {
                    format!("{text}\n\n{block}")
                };
                first["content"] = Value::String(joined);
            }
            _ => out.insert(0, with_content("system", block)),
        }
    }
    out
}

/// The text of a message `content`: a string, or the text parts of an array of content parts.
pub fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                _ => p.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// `(name, arguments JSON text)` of each call in an assistant message's `tool_calls`.
fn tool_calls_of(message: &Value) -> Vec<(String, String)> {
    let Some(calls) = message.get("tool_calls").and_then(Value::as_array) else {
        return Vec::new();
    };
    calls
        .iter()
        .map(|call| {
            let f = call.get("function").unwrap_or(call);
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let args = match f.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => "{}".into(),
            };
            (name, args)
        })
        .collect()
}

/// A copy of `message` whose tool-call `arguments` strings are parsed into JSON values (templates `tojson` them).
fn parse_call_arguments(message: &Value) -> Value {
    let mut m = message.clone();
    if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for call in calls {
            let target = if call.get("function").is_some() {
                &mut call["function"]
            } else {
                call
            };
            if let Some(Value::String(s)) = target.get("arguments") {
                if let Ok(parsed) = serde_json::from_str::<Value>(s) {
                    target["arguments"] = parsed;
                }
            }
        }
    }
    m
}

fn with_content(role: &str, content: String) -> Value {
    let mut map = Map::new();
    map.insert("role".into(), Value::String(role.into()));
    map.insert("content".into(), Value::String(content));
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool() -> ToolSpec {
        ToolSpec::new_unchecked("read", "Read a file", json!({"type": "object"}))
    }

    #[test]
    fn tools_block_joins_the_system_message() {
        let msgs = [
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "hi"}),
        ];
        let out = inline_tools(&msgs, &[tool()], ToolCallFormat::HERMES);
        let sys = out[0]["content"].as_str().unwrap();
        assert!(sys.starts_with("Be brief.\n\n# Tools"), "{sys}");
        assert!(sys.contains(r#""name": "read""#), "{sys}");
        let out = inline_tools(&msgs[1..], &[tool()], ToolCallFormat::HERMES);
        assert_eq!(out[0]["role"], "system");
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn calls_and_results_become_text() {
        let msgs = [
            json!({"role": "user", "content": "read a and b"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}},
                {"id": "2", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"b\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "1", "content": "A"}),
            json!({"role": "tool", "tool_call_id": "2", "content": "B"}),
        ];
        let out = inline_tools(&msgs, &[], ToolCallFormat::HERMES);
        assert_eq!(out.len(), 3);
        assert_eq!(
            out[1]["content"],
            "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a\"}}\n</tool_call>\n\
             <tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"b\"}}\n</tool_call>"
        );
        assert_eq!(
            out[2],
            json!({"role": "user", "content": "<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response>"})
        );
    }
}
