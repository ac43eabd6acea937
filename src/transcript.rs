//! The transcript that the agent keeps and the session store persists: what the model saw and said, plus our own
//! kinds of message (a shell command the user ran, compaction and branch summaries, custom entries) — and
//! `convert_to_llm`, which maps all of them to the three kinds a model understands (user, assistant, tool
//! result). It sits below both `agent` and `session` so neither imports the other for its data.

use serde::{Deserialize, Serialize};

use crate::env::now_ms;

use crate::provider::{
    AssistantMessage, ContentBlock, Message, StopReason, ToolCall, Usage, UserMessage,
};

/// One entry of the agent's transcript. Tagged by `role`, snake_case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum AgentMessage {
    User {
        content: String,
        #[serde(default)]
        timestamp: u64,
    },
    Assistant(AssistantTurn),
    ToolResult(ToolResult),
    /// A shell command the user ran themselves (`!cmd`); `exclude_from_context` keeps it out of the model's view
    /// (`!!cmd`).
    BashExecution {
        command: String,
        output: String,
        exit_code: Option<i32>,
        #[serde(default)]
        cancelled: bool,
        #[serde(default)]
        truncated: bool,
        #[serde(default)]
        exclude_from_context: bool,
        #[serde(default)]
        timestamp: u64,
    },
    /// The summary that replaced older messages after compaction.
    CompactionSummary {
        summary: String,
        tokens_before: u64,
        #[serde(default)]
        timestamp: u64,
    },
    /// A summary of a branch that was left (so the model knows what was tried there).
    BranchSummary {
        summary: String,
        from_id: String,
        #[serde(default)]
        timestamp: u64,
    },
    /// An application-defined message; shown to the model as user text when `display` is set.
    Custom {
        custom_type: String,
        content: String,
        #[serde(default)]
        display: bool,
        #[serde(default)]
        details: serde_json::Value,
        #[serde(default)]
        timestamp: u64,
    },
}

/// What the model produced in one turn, with how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantTurn {
    pub content: Vec<ContentBlock>,
    pub stop_reason: StopReason,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default)]
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default)]
    pub timestamp: u64,
}

impl AssistantTurn {
    pub fn text(&self) -> String {
        self.as_message().text()
    }

    pub fn tool_calls(&self) -> Vec<ToolCall> {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolCall(c) => Some(c.clone()),
                _ => None,
            })
            .collect()
    }

    pub fn as_message(&self) -> AssistantMessage {
        AssistantMessage {
            content: self.content.clone(),
        }
    }
}

/// The answer to one tool call: `content` for the model, `details` for people and logs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub tool_call_id: String,
    pub tool_name: String,
    pub content: String,
    #[serde(default)]
    pub details: serde_json::Value,
    #[serde(default)]
    pub is_error: bool,
    #[serde(default)]
    pub timestamp: u64,
}

impl AgentMessage {
    pub fn user(text: impl Into<String>) -> Self {
        AgentMessage::User {
            content: text.into(),
            timestamp: now_ms(),
        }
    }

    /// The assistant turn, if this is one.
    pub fn as_assistant(&self) -> Option<&AssistantTurn> {
        match self {
            AgentMessage::Assistant(a) => Some(a),
            _ => None,
        }
    }
}

/// The default mapping to what a model sees. Our own kinds become user messages with a short framing;
/// thinking blocks are never sent back; excluded shell runs and hidden custom messages are dropped.
pub fn convert_to_llm(messages: &[AgentMessage]) -> Vec<Message> {
    messages
        .iter()
        .filter_map(|m| match m {
            AgentMessage::User { content, .. } => Some(Message::User(UserMessage {
                content: content.clone(),
            })),
            AgentMessage::Assistant(a) => {
                let content: Vec<ContentBlock> = a
                    .content
                    .iter()
                    .filter(|b| !matches!(b, ContentBlock::Thinking { .. }))
                    .cloned()
                    .collect();
                // A failed turn with nothing in it carries nothing for the model.
                if content.is_empty() && matches!(a.stop_reason, StopReason::Error | StopReason::Aborted) {
                    return None;
                }
                Some(Message::Assistant(AssistantMessage { content }))
            }
            AgentMessage::ToolResult(r) => Some(Message::ToolResult(crate::provider::ToolResultMessage {
                tool_call_id: r.tool_call_id.clone(),
                tool_name: r.tool_name.clone(),
                content: r.content.clone(),
                is_error: r.is_error,
            })),
            AgentMessage::BashExecution {
                command,
                output,
                exit_code,
                cancelled,
                exclude_from_context,
                ..
            } => (!exclude_from_context).then(|| {
                let status = match (cancelled, exit_code) {
                    (true, _) => "(cancelled)".to_string(),
                    (false, Some(0)) => String::new(),
                    (false, Some(c)) => format!("(exit code {c})"),
                    (false, None) => "(killed)".to_string(),
                };
                Message::user(format!("I ran `{command}` {status}\n```\n{output}\n```").replace(" \n", "\n"))
            }),
            AgentMessage::CompactionSummary { summary, .. } => Some(Message::user(format!(
                "The conversation history before this point was compacted into the following summary:\n\
                 <summary>\n{summary}\n</summary>"
            ))),
            AgentMessage::BranchSummary { summary, .. } => Some(Message::user(format!(
                "The following is a summary of a branch that this conversation came back from:\n\
                 <summary>\n{summary}\n</summary>"
            ))),
            AgentMessage::Custom { content, display, .. } => display.then(|| Message::user(content.clone())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn own_kinds_map_to_user_messages_and_hidden_ones_drop() {
        let msgs = vec![
            AgentMessage::user("hi"),
            AgentMessage::BashExecution {
                command: "ls".into(),
                output: "a\nb".into(),
                exit_code: Some(0),
                cancelled: false,
                truncated: false,
                exclude_from_context: false,
                timestamp: 0,
            },
            AgentMessage::BashExecution {
                command: "secret".into(),
                output: "x".into(),
                exit_code: Some(0),
                cancelled: false,
                truncated: false,
                exclude_from_context: true,
                timestamp: 0,
            },
            AgentMessage::Custom {
                custom_type: "note".into(),
                content: "hidden".into(),
                display: false,
                details: json!(null),
                timestamp: 0,
            },
            AgentMessage::CompactionSummary {
                summary: "S".into(),
                tokens_before: 10,
                timestamp: 0,
            },
        ];
        let out = convert_to_llm(&msgs);
        assert_eq!(out.len(), 3);
        assert_eq!(out[1], Message::user("I ran `ls`\n```\na\nb\n```"));
        assert!(
            matches!(&out[2], Message::User(u) if u.content.contains("<summary>\nS\n</summary>"))
        );
    }

    #[test]
    fn serialises_with_role_tags() {
        let v = serde_json::to_value(AgentMessage::User {
            content: "x".into(),
            timestamp: 1,
        })
        .unwrap();
        assert_eq!(v, json!({"role": "user", "content": "x", "timestamp": 1}));
    }
}
