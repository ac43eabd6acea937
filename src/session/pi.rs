//! Reading session files written by Pi itself (its JSONL v3). The tree, the header and every entry type are the
//! same as ours; what differs is the message inside a `message` entry: Pi writes its own shapes (camelCase
//! fields and roles, content as arrays of blocks). [`normalize_entry`] rewrites such an entry's message (and a
//! `custom_message`'s array content) into ours before it is parsed, so `agentd chat --session FILE` continues a
//! Pi session. Messages already in our shape pass through unchanged.
//!
//! Pi's shapes: `user {content: string | [{type: text, text} | {type: image, data, mimeType}], timestamp}`,
//! `assistant {content: [{type: text} | {type: thinking, thinking} | {type: toolCall, id, name, arguments}],
//! api, provider, model, usage {input, output, cacheRead, cacheWrite, totalTokens, cost}, stopReason
//! (stop | length | toolUse | error | aborted), errorMessage?, timestamp}`, `toolResult {toolCallId, toolName,
//! content: blocks, details?, isError, timestamp}`, `bashExecution {command, output, exitCode?, cancelled,
//! truncated, fullOutputPath?, excludeFromContext?}`, `custom {customType, content, display, details?}` (v2's
//! `hookMessage`), `branchSummary {summary, fromId}`, `compactionSummary {summary, tokensBefore}`.

use serde_json::{json, Map, Value};

/// Rewrites a Pi `message` / `custom_message` entry in place (see the module docs).
pub fn normalize_entry(entry: &mut Value) {
    match entry.get("type").and_then(Value::as_str) {
        Some("message") => {
            if let Some(message) = entry.get_mut("message") {
                normalize_message(message);
            }
        }
        Some("custom_message") => {
            if let Some(content) = entry.get_mut("content") {
                *content = Value::String(blocks_text(content));
            }
        }
        _ => {}
    }
}

/// The text of a Pi content value: a string as is, text blocks joined, images named.
fn blocks_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            let parts: Vec<String> = blocks
                .iter()
                .filter_map(|b| match b.get("type").and_then(Value::as_str) {
                    Some("text") => b.get("text").and_then(Value::as_str).map(String::from),
                    Some("image") => Some(format!(
                        "[image: {}]",
                        b.get("mimeType")
                            .and_then(Value::as_str)
                            .unwrap_or("unknown type")
                    )),
                    _ => None,
                })
                .collect();
            parts.join("\n")
        }
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Moves `from` to `to` in `m` when present.
fn rename(m: &mut Map<String, Value>, from: &str, to: &str) {
    if let Some(v) = m.remove(from) {
        m.insert(to.to_string(), v);
    }
}

fn stop_reason(v: &Value) -> Value {
    match v.as_str() {
        Some("toolUse") => json!("tool_use"),
        Some(s) => json!(s),
        None => json!("stop"),
    }
}

fn usage(v: &Value) -> Value {
    let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
    // Ours already: leave it.
    if v.get("cached_input").is_some() || v.get("total").is_some() {
        return v.clone();
    }
    let (input, output) = (n("input"), n("output"));
    let total = match n("totalTokens") {
        0 => input + output,
        t => t,
    };
    json!({"input": input, "output": output, "cached_input": n("cacheRead"), "total": total})
}

fn content_block(b: &Value) -> Value {
    match b.get("type").and_then(Value::as_str) {
        Some("toolCall") => json!({
            "type": "tool_call",
            "id": b.get("id").cloned().unwrap_or(json!("")),
            "name": b.get("name").cloned().unwrap_or(json!("")),
            "arguments": b.get("arguments").cloned().unwrap_or(json!({})),
        }),
        Some("image") => json!({"type": "text", "text": blocks_text(&json!([b]))}),
        _ => b.clone(),
    }
}

/// Rewrites one Pi message into ours (see the module docs); ours pass through.
pub fn normalize_message(message: &mut Value) {
    let Some(m) = message.as_object_mut() else {
        return;
    };
    let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
    match role {
        "user" => {
            if let Some(c) = m.get_mut("content") {
                if !c.is_string() {
                    *c = Value::String(blocks_text(c));
                }
            }
        }
        "assistant" => {
            if let Some(Value::Array(blocks)) = m.get_mut("content") {
                *blocks = blocks.iter().map(content_block).collect();
            }
            if let Some(r) = m.remove("stopReason") {
                m.insert("stop_reason".into(), stop_reason(&r));
            }
            if !m.contains_key("stop_reason") {
                m.insert("stop_reason".into(), json!("stop"));
            }
            if let Some(u) = m.get("usage").map(usage) {
                m.insert("usage".into(), u);
            }
            rename(m, "errorMessage", "error_message");
            for pi_only in ["api", "provider"] {
                m.remove(pi_only);
            }
        }
        "toolResult" => {
            m.insert("role".into(), json!("tool_result"));
            rename(m, "toolCallId", "tool_call_id");
            rename(m, "toolName", "tool_name");
            rename(m, "isError", "is_error");
            if let Some(c) = m.get_mut("content") {
                *c = Value::String(blocks_text(c));
            }
            m.remove("usage");
        }
        "bashExecution" => {
            m.insert("role".into(), json!("bash_execution"));
            rename(m, "exitCode", "exit_code");
            rename(m, "excludeFromContext", "exclude_from_context");
            m.remove("fullOutputPath");
            if !m.contains_key("exit_code") {
                m.insert("exit_code".into(), Value::Null);
            }
        }
        "custom" | "hookMessage" => {
            m.insert("role".into(), json!("custom"));
            rename(m, "customType", "custom_type");
            if let Some(c) = m.get_mut("content") {
                *c = Value::String(blocks_text(c));
            }
        }
        "branchSummary" => {
            m.insert("role".into(), json!("branch_summary"));
            rename(m, "fromId", "from_id");
        }
        "compactionSummary" => {
            m.insert("role".into(), json!("compaction_summary"));
            rename(m, "tokensBefore", "tokens_before");
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::AgentMessage;

    fn ours(mut v: Value) -> AgentMessage {
        normalize_message(&mut v);
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    #[test]
    fn pi_messages_become_ours() {
        let user = ours(
            json!({"role": "user", "content": [{"type": "text", "text": "hi"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"}], "timestamp": 5}),
        );
        assert_eq!(
            user,
            AgentMessage::User {
                content: "hi\n[image: image/png]".into(),
                timestamp: 5
            }
        );
        let assistant = ours(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Reading."},
            {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {"path": "a.txt"}}],
            "api": "openai-completions", "provider": "openai", "model": "gpt-4o",
            "usage": {"input": 10, "output": 5, "cacheRead": 2, "cacheWrite": 0, "totalTokens": 15,
                      "cost": {"total": 0.1}},
            "stopReason": "toolUse", "timestamp": 6}));
        let AgentMessage::Assistant(turn) = assistant else {
            panic!()
        };
        assert_eq!(turn.stop_reason, crate::provider::StopReason::ToolUse);
        assert_eq!(turn.tool_calls()[0].name, "read");
        assert_eq!(turn.tool_calls()[0].arguments, json!({"path": "a.txt"}));
        assert_eq!(
            (turn.usage.input, turn.usage.cached_input, turn.usage.total),
            (10, 2, 15)
        );
        assert_eq!(turn.model, "gpt-4o");
        let result = ours(
            json!({"role": "toolResult", "toolCallId": "call_1", "toolName": "read",
            "content": [{"type": "text", "text": "alpha"}], "isError": false, "timestamp": 7}),
        );
        let AgentMessage::ToolResult(r) = result else {
            panic!()
        };
        assert_eq!(
            (r.tool_call_id.as_str(), r.content.as_str(), r.is_error),
            ("call_1", "alpha", false)
        );
        let bash = ours(
            json!({"role": "bashExecution", "command": "ls", "output": "a\n", "exitCode": 0,
            "cancelled": false, "truncated": false, "excludeFromContext": true, "timestamp": 8}),
        );
        assert!(matches!(
            bash,
            AgentMessage::BashExecution {
                exit_code: Some(0),
                exclude_from_context: true,
                ..
            }
        ));
        let summary =
            ours(json!({"role": "branchSummary", "summary": "s", "fromId": "abc", "timestamp": 9}));
        assert!(
            matches!(summary, AgentMessage::BranchSummary { ref from_id, .. } if from_id == "abc")
        );
        let hook = ours(
            json!({"role": "hookMessage", "customType": "note", "content": "x", "display": true}),
        );
        assert!(matches!(hook, AgentMessage::Custom { display: true, .. }));
        // Ours pass through.
        let mine = serde_json::to_value(AgentMessage::user("plain")).unwrap();
        let mut again = mine.clone();
        normalize_message(&mut again);
        assert_eq!(again, mine);
    }
}
