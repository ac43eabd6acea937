//! What the chat shows: the conversation as display items, built from the agent's events as they stream (or
//! from a restored session's messages), plus notices from the app itself.

use agentd::agent::{AgentEndReason, AgentEvent, AgentMessage};
use agentd::provider::{ContentBlock, StopReason};

/// How a notice looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    Info,
    Error,
}

/// One block of the transcript.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    User(String),
    Assistant {
        text: String,
        thinking: String,
    },
    Tool {
        id: String,
        name: String,
        /// The arguments in a few words (a path, a command).
        summary: String,
        output: String,
        is_error: bool,
        done: bool,
    },
    Bash {
        command: String,
        output: String,
        exit_code: Option<i32>,
        excluded: bool,
    },
    Notice {
        kind: NoticeKind,
        text: String,
    },
}

/// The display items, in order.
#[derive(Debug, Default)]
pub struct Transcript {
    pub items: Vec<Item>,
}

/// A short form of a tool call's arguments.
pub fn summarize_args(name: &str, args: &serde_json::Value) -> String {
    let field = |k: &str| args.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let s = match name {
        "read" | "write" | "edit" | "ls" => field("path"),
        "bash" => field("command"),
        "find" | "grep" => field("pattern").map(|p| match field("path") {
            Some(path) => format!("{p} in {path}"),
            None => p,
        }),
        _ => None,
    };
    let s = s.unwrap_or_else(|| {
        if args.is_null() {
            String::new()
        } else {
            args.to_string()
        }
    });
    let one_line = s.replace('\n', " ⏎ ");
    if one_line.chars().count() > 120 {
        let cut: String = one_line.chars().take(117).collect();
        format!("{cut}...")
    } else {
        one_line
    }
}

impl Transcript {
    pub fn clear(&mut self) {
        self.items.clear();
    }

    pub fn notice(&mut self, kind: NoticeKind, text: impl Into<String>) {
        self.items.push(Item::Notice {
            kind,
            text: text.into(),
        });
    }

    /// Rebuilds the items from a transcript (a resumed or forked session).
    pub fn load(&mut self, messages: &[AgentMessage]) {
        self.items.clear();
        for m in messages {
            match m {
                AgentMessage::User { content, .. } => self.items.push(Item::User(content.clone())),
                AgentMessage::Assistant(a) => {
                    self.push_assistant_content(&a.content);
                    for call in a.tool_calls() {
                        self.items.push(Item::Tool {
                            id: call.id.clone(),
                            name: call.name.clone(),
                            summary: summarize_args(&call.name, &call.arguments),
                            output: String::new(),
                            is_error: false,
                            done: false,
                        });
                    }
                }
                AgentMessage::ToolResult(r) => {
                    self.finish_tool(&r.tool_call_id, &r.content, r.is_error)
                }
                AgentMessage::BashExecution {
                    command,
                    output,
                    exit_code,
                    exclude_from_context,
                    ..
                } => self.items.push(Item::Bash {
                    command: command.clone(),
                    output: output.clone(),
                    exit_code: *exit_code,
                    excluded: *exclude_from_context,
                }),
                AgentMessage::CompactionSummary { tokens_before, .. } => self.notice(
                    NoticeKind::Info,
                    format!("(earlier messages were compacted; {tokens_before} tokens before)"),
                ),
                AgentMessage::BranchSummary { .. } => {
                    self.notice(NoticeKind::Info, "(summary of an abandoned branch)")
                }
                AgentMessage::Custom {
                    content, display, ..
                } => {
                    if *display {
                        self.notice(NoticeKind::Info, content.clone());
                    }
                }
            }
        }
    }

    fn push_assistant_content(&mut self, content: &[ContentBlock]) {
        let (text, thinking) = split_content(content);
        if !text.is_empty() || !thinking.is_empty() {
            self.items.push(Item::Assistant { text, thinking });
        }
    }

    fn finish_tool(&mut self, id: &str, output: &str, error: bool) {
        for item in self.items.iter_mut().rev() {
            if let Item::Tool {
                id: tid,
                output: out,
                is_error,
                done,
                ..
            } = item
            {
                if tid == id {
                    *out = output.to_string();
                    *is_error = error;
                    *done = true;
                    return;
                }
            }
        }
    }

    /// Folds one agent event into the items.
    pub fn apply(&mut self, ev: &AgentEvent) {
        match ev {
            AgentEvent::MessageStart { message } => match message {
                AgentMessage::User { content, .. } => self.items.push(Item::User(content.clone())),
                AgentMessage::Assistant(_) => self.items.push(Item::Assistant {
                    text: String::new(),
                    thinking: String::new(),
                }),
                _ => {}
            },
            AgentEvent::MessageUpdate { message, .. } => {
                if let (AgentMessage::Assistant(a), Some(Item::Assistant { text, thinking })) =
                    (message, self.last_assistant())
                {
                    (*text, *thinking) = split_content(&a.content);
                }
            }
            AgentEvent::MessageEnd {
                message: AgentMessage::Assistant(a),
            } => {
                let (t, th) = split_content(&a.content);
                let empty = t.is_empty() && th.is_empty();
                if let Some(Item::Assistant { text, thinking }) = self.last_assistant() {
                    (*text, *thinking) = (t, th);
                }
                if empty {
                    // Nothing to show for a reply that was only tool calls (or failed at once).
                    if let Some(pos) = self
                        .items
                        .iter()
                        .rposition(|i| matches!(i, Item::Assistant { .. }))
                    {
                        self.items.remove(pos);
                    }
                }
                match a.stop_reason {
                    StopReason::Error => self.notice(
                        NoticeKind::Error,
                        format!(
                            "error: {}",
                            a.error_message
                                .as_deref()
                                .unwrap_or("the model call failed")
                        ),
                    ),
                    StopReason::Aborted => self.notice(NoticeKind::Error, "aborted"),
                    StopReason::Length => self.notice(
                        NoticeKind::Info,
                        "(the reply hit the output token limit, --max-tokens)",
                    ),
                    StopReason::Stop | StopReason::ToolUse => {}
                }
            }
            AgentEvent::ToolExecutionStart {
                tool_call_id,
                tool_name,
                args,
            } => self.items.push(Item::Tool {
                id: tool_call_id.clone(),
                name: tool_name.clone(),
                summary: summarize_args(tool_name, args),
                output: String::new(),
                is_error: false,
                done: false,
            }),
            AgentEvent::ToolExecutionUpdate {
                tool_call_id,
                partial,
                ..
            } => {
                for item in self.items.iter_mut().rev() {
                    if let Item::Tool { id, output, .. } = item {
                        if id == tool_call_id {
                            output.push_str(partial);
                            break;
                        }
                    }
                }
            }
            AgentEvent::ToolExecutionEnd {
                tool_call_id,
                result,
                is_error,
                ..
            } => self.finish_tool(tool_call_id, &result.content, *is_error),
            AgentEvent::Compaction {
                tokens_before,
                tokens_after,
                ..
            } => self.notice(
                NoticeKind::Info,
                format!("(context compacted: {tokens_before} → {tokens_after} tokens)"),
            ),
            AgentEvent::AgentEnd {
                reason: AgentEndReason::MaxTurns,
                ..
            } => self.notice(
                NoticeKind::Error,
                "stopped: the turn limit was reached (--max-turns)",
            ),
            _ => {}
        }
    }

    fn last_assistant(&mut self) -> Option<&mut Item> {
        self.items
            .iter_mut()
            .rev()
            .find(|i| matches!(i, Item::Assistant { .. }))
    }
}

/// The text and the thinking of an assistant message.
fn split_content(content: &[ContentBlock]) -> (String, String) {
    let mut text = String::new();
    let mut thinking = String::new();
    for b in content {
        match b {
            ContentBlock::Text { text: t } => text.push_str(t),
            ContentBlock::Thinking { thinking: t } => thinking.push_str(t),
            ContentBlock::ToolCall(_) => {}
        }
    }
    (text.trim().to_string(), thinking.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn args_are_summarised() {
        assert_eq!(
            summarize_args("read", &json!({"path": "src/a.rs"})),
            "src/a.rs"
        );
        assert_eq!(
            summarize_args("bash", &json!({"command": "ls\npwd"})),
            "ls ⏎ pwd"
        );
        assert_eq!(
            summarize_args("grep", &json!({"pattern": "fn", "path": "src"})),
            "fn in src"
        );
        assert_eq!(summarize_args("custom", &json!({"a": 1})), "{\"a\":1}");
    }
}
