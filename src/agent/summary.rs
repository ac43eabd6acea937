//! The text side of compaction: the summarisation prompt (Pi's sections: Goal, Constraints & Preferences,
//! Progress, Key Decisions, Next Steps, Critical Context), the transcript serialised as plain text so the model
//! summarises it instead of continuing it, the file lists and grounding pointers carried from one summary to the
//! next, and the deterministic summary used when the model cannot be asked (truncation).

use std::collections::BTreeSet;

use crate::provider::{ContentBlock, ToolCall};
use crate::transcript::AgentMessage;

/// The sections every summary has, in order.
pub const SECTIONS: [&str; 6] = [
    "Goal",
    "Constraints & Preferences",
    "Progress",
    "Key Decisions",
    "Next Steps",
    "Critical Context",
];

/// The summariser's system prompt.
pub const SUMMARY_SYSTEM_PROMPT: &str = "You write context checkpoints. You read a conversation between a user and \
an AI coding assistant and write a structured summary that another model will use to carry on with the work. Do not \
continue the conversation, do not answer questions asked in it and do not call tools: output only the summary.";

const FORMAT: &str = "## Goal
What the user wants to achieve (several items if the session covers several tasks).

## Constraints & Preferences
- Requirements, constraints and preferences the user stated, or \"(none)\".

## Progress
### Done
- [x] Work that is finished.
### In Progress
- [ ] Work under way.
### Blocked
- What stands in the way, if anything.

## Key Decisions
- **Decision**: the reason for it.

## Next Steps
1. What should happen next, in order.

## Critical Context
- Data, names, error messages and references needed to continue, or \"(none)\".

Keep each section short. Keep exact file paths, function names and error messages.";

/// The instructions for a branch summary (Pi's `branch_summary`): what happened on a branch the user left.
pub const BRANCH_INSTRUCTIONS: &str = "The conversation above is a branch the user has left to go back to an \
earlier point of the session. Summarise it for the assistant that carries on from that earlier point: what was \
asked and attempted, what was found, which files were read or changed (exact paths), commands run and errors seen, \
and how it ended. Write a few short bullet points and nothing else.";

/// The instructions after the serialised conversation.
pub fn instructions(update: bool, split_turn: bool, focus: Option<&str>) -> String {
    let mut text = if update {
        "The conversation above is NEW. Merge it into the earlier summary given in <previous-summary>: keep \
         everything from it that still matters, add the new progress, decisions and context, move finished items \
         from In Progress to Done, and rewrite Next Steps. Use exactly these sections:\n\n"
            .to_string()
    } else {
        "Summarise the conversation above as a checkpoint for carrying on with the work. Use exactly these \
         sections:\n\n"
            .to_string()
    };
    text.push_str(FORMAT);
    if split_turn {
        text.push_str(
            "\n\nThe last messages above begin a turn that is still going on; its later messages are kept \
             verbatim after your summary. Say under In Progress what that turn is doing.",
        );
    }
    if let Some(f) = focus.map(str::trim).filter(|f| !f.is_empty()) {
        text.push_str(&format!("\n\nFocus especially on: {f}"));
    }
    text
}

/// The whole user message of a summarisation request.
pub fn prompt(conversation: &str, previous: Option<&str>, instructions: &str) -> String {
    let mut text = format!("<conversation>\n{conversation}\n</conversation>\n\n");
    if let Some(p) = previous.filter(|p| !p.trim().is_empty()) {
        text.push_str(&format!(
            "<previous-summary>\n{}\n</previous-summary>\n\n",
            p.trim()
        ));
    }
    text.push_str(instructions);
    text
}

/// A tool call as `name(key="value", n=3)`, long string values shortened.
pub fn render_call(call: &ToolCall) -> String {
    let args = match &call.arguments {
        serde_json::Value::Object(map) => map
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    serde_json::Value::String(s) if s.chars().count() > 80 => {
                        let short: String = s.chars().take(80).collect();
                        format!("{:?}", format!("{short}…"))
                    }
                    other => other.to_string(),
                };
                format!("{k}={value}")
            })
            .collect::<Vec<_>>()
            .join(", "),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    };
    format!("{}({args})", call.name)
}

/// `text` cut to `max` characters with a note of what was left out.
fn clip(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}\n[… {} more characters]", n - max)
}

/// The messages as `[User]: …` / `[Assistant]: …` / `[Tool result read]: …` lines; tool results and shell output
/// longer than `max_result_chars` are cut.
pub fn serialize(messages: &[AgentMessage], max_result_chars: usize) -> String {
    let mut parts = Vec::new();
    for m in messages {
        match m {
            AgentMessage::User { content, .. } => parts.push(format!("[User]: {content}")),
            AgentMessage::Assistant(a) => {
                let mut texts = Vec::new();
                let mut calls = Vec::new();
                for b in &a.content {
                    match b {
                        ContentBlock::Text { text } if !text.trim().is_empty() => {
                            texts.push(text.as_str())
                        }
                        ContentBlock::ToolCall(c) => calls.push(render_call(c)),
                        _ => {}
                    }
                }
                if !texts.is_empty() {
                    parts.push(format!("[Assistant]: {}", texts.join("\n")));
                }
                if !calls.is_empty() {
                    parts.push(format!("[Assistant tool calls]: {}", calls.join("; ")));
                }
            }
            AgentMessage::ToolResult(r) => parts.push(format!(
                "[Tool result {}{}]: {}",
                r.tool_name,
                if r.is_error { " (error)" } else { "" },
                clip(&r.content, max_result_chars)
            )),
            AgentMessage::BashExecution {
                command,
                output,
                exclude_from_context,
                ..
            } if !exclude_from_context => parts.push(format!(
                "[User ran `{command}`]: {}",
                clip(output, max_result_chars)
            )),
            AgentMessage::BashExecution { .. } => {}
            AgentMessage::CompactionSummary { summary, .. } => {
                parts.push(format!("[Summary of earlier messages]: {summary}"))
            }
            AgentMessage::BranchSummary { summary, .. } => {
                parts.push(format!("[Summary of an abandoned branch]: {summary}"))
            }
            AgentMessage::Custom {
                content, display, ..
            } if *display => parts.push(format!("[Note]: {content}")),
            AgentMessage::Custom { .. } => {}
        }
    }
    parts.join("\n\n")
}

/// What a summary carries besides its prose: the file lists and the grounding pointers (each kept in a tagged
/// block so the next compaction can merge them exactly, whatever the model writes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Carried {
    pub body: String,
    pub read_files: BTreeSet<String>,
    pub modified_files: BTreeSet<String>,
    /// Pointer lines, oldest first.
    pub refs: Vec<String>,
}

const READ_TAG: &str = "read-files";
const MODIFIED_TAG: &str = "modified-files";
const REFS_TAG: &str = "recall-refs";
/// The line that opens the pointer block (not a pointer itself).
const REFS_INTRO: &str =
    "Tool results dropped from the context; call the `recall` tool with a ref to read one in full:";

/// Splits a summary into its prose and its carried blocks.
pub fn split(summary: &str) -> Carried {
    let mut body = summary.to_string();
    let mut take = |tag: &str| -> Vec<String> {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        let Some(start) = body.find(&open) else {
            return Vec::new();
        };
        let Some(len) = body[start..].find(&close) else {
            return Vec::new();
        };
        let inner = body[start + open.len()..start + len].to_string();
        body.replace_range(start..start + len + close.len(), "");
        inner
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && *l != REFS_INTRO)
            .map(str::to_string)
            .collect()
    };
    let read_files = take(READ_TAG).into_iter().collect();
    let modified_files = take(MODIFIED_TAG).into_iter().collect();
    let refs = take(REFS_TAG);
    Carried {
        body: body.trim().to_string(),
        read_files,
        modified_files,
        refs,
    }
}

/// The full summary: prose, the split-turn note, files read (and not modified), files modified, pointers.
pub fn compose(body: &str, split_request: Option<&str>, carried: &Carried) -> String {
    let mut out = body.trim().to_string();
    if let Some(request) = split_request {
        let quoted: Vec<String> = clip(request.trim(), 1_000)
            .lines()
            .map(|l| format!("> {l}"))
            .collect();
        let quoted = quoted.join("\n");
        out.push_str(&format!(
            "\n\n**Turn in progress (split by compaction).** The messages after this summary continue a turn that \
             began with the user's request:\n{quoted}"
        ));
    }
    let read: Vec<&str> = carried
        .read_files
        .iter()
        .filter(|f| !carried.modified_files.contains(*f))
        .map(String::as_str)
        .collect();
    if !read.is_empty() {
        out.push_str(&format!(
            "\n\n<{READ_TAG}>\n{}\n</{READ_TAG}>",
            read.join("\n")
        ));
    }
    if !carried.modified_files.is_empty() {
        let modified: Vec<&str> = carried.modified_files.iter().map(String::as_str).collect();
        out.push_str(&format!(
            "\n\n<{MODIFIED_TAG}>\n{}\n</{MODIFIED_TAG}>",
            modified.join("\n")
        ));
    }
    if !carried.refs.is_empty() {
        out.push_str(&format!(
            "\n\n<{REFS_TAG}>\n{REFS_INTRO}\n{}\n</{REFS_TAG}>",
            carried.refs.join("\n")
        ));
    }
    out
}

/// `[ref:ab12cd] read(path="src/lib.rs") — 240 lines`.
pub fn pointer(reference: &str, call: &str, content: &str, is_error: bool) -> String {
    let lines = content.lines().count();
    format!(
        "[ref:{reference}] {call} — {lines} line{}{}",
        if lines == 1 { "" } else { "s" },
        if is_error { " (error)" } else { "" }
    )
}

/// The `ref` of a pointer line.
pub fn pointer_ref(line: &str) -> Option<&str> {
    line.strip_prefix("[ref:")?.split(']').next()
}

/// Paths the messages' tool calls read (`read`) and modified (`write`, `edit`).
pub fn file_ops(
    messages: &[AgentMessage],
    read: &mut BTreeSet<String>,
    modified: &mut BTreeSet<String>,
) {
    for m in messages {
        let AgentMessage::Assistant(a) = m else {
            continue;
        };
        for c in a.tool_calls() {
            let Some(path) = c.arguments.get("path").and_then(|p| p.as_str()) else {
                continue;
            };
            match c.name.as_str() {
                "read" => {
                    read.insert(path.to_string());
                }
                "write" | "edit" => {
                    modified.insert(path.to_string());
                }
                _ => {}
            }
        }
    }
}

/// The summary used when the model is not asked (disabled) or failed: the earlier summary, then what was dropped,
/// with the user's requests quoted so the goal survives.
pub fn truncation_body(previous: Option<&str>, dropped: &[AgentMessage], why: &str) -> String {
    let mut out = String::new();
    if let Some(p) = previous.filter(|p| !p.trim().is_empty()) {
        out.push_str(p.trim());
        out.push_str("\n\n");
    }
    let requests: Vec<String> = dropped
        .iter()
        .filter_map(|m| match m {
            AgentMessage::User { content, .. } => Some(format!(
                "- {}",
                clip(content.trim(), 300).replace('\n', " ")
            )),
            _ => None,
        })
        .collect();
    out.push_str(&format!(
        "## Earlier messages (dropped without a summary: {why})\n{} earlier messages were removed to fit the context \
         window.",
        dropped.len()
    ));
    if !requests.is_empty() {
        let shown = &requests[requests.len().saturating_sub(10)..];
        out.push_str(&format!(
            "\nThe user's requests among them:\n{}",
            shown.join("\n")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn carried_blocks_round_trip() {
        let mut carried = Carried::default();
        carried.read_files.insert("a.rs".into());
        carried.read_files.insert("b.rs".into());
        carried.modified_files.insert("b.rs".into());
        carried
            .refs
            .push(pointer("ab12cd", r#"read(path="a.rs")"#, "x\ny", false));
        let s = compose("## Goal\nG", Some("fix it"), &carried);
        assert!(s.contains("<read-files>\na.rs\n</read-files>"), "{s}");
        assert!(
            s.contains("[ref:ab12cd] read(path=\"a.rs\") — 2 lines"),
            "{s}"
        );
        let back = split(&s);
        assert_eq!(back.modified_files, carried.modified_files);
        assert_eq!(back.read_files.iter().collect::<Vec<_>>(), vec!["a.rs"]);
        assert_eq!(back.refs, carried.refs);
        assert!(back.body.starts_with("## Goal\nG") && back.body.contains("> fix it"));
        assert_eq!(pointer_ref(&carried.refs[0]), Some("ab12cd"));
        let call = ToolCall::new("c", "read", json!({"path": "src/lib.rs", "limit": 5}));
        assert_eq!(render_call(&call), r#"read(path="src/lib.rs", limit=5)"#);
    }
}
