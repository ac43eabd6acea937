//! How the model changes files: through JSON tool calls (`edit`, `write`: the default for capable models and
//! remote servers), or by writing **file blocks** in its reply (Aider's "whole" format, which Aider uses for small
//! models): a file's path on a line of its own, then its new text in a fenced code block; a fenced `bash` block is
//! a command to run. Small models write correct code in a fenced block far more often than inside a JSON string
//! (README's agent table), and the tool-call section the chat template adds for JSON tools pulls them away from it.
//!
//! With blocks, the session offers the model no JSON tools. The harness asks this module for the calls a
//! reply's text makes ([`text_calls`]): each file block becomes a `write_block` call (placed in the file by its
//! matching lines, so a block holding only the fixed function keeps the rest), each `bash` block a `bash` call.
//! They run like any call (approvals, loop rules, events, the session file); what the model sees next is its own
//! text and the results as a user message ([`convert_to_llm`]), after two worked examples that show the format
//! (Aider's example messages; not stored in the session).

use serde_json::json;

use crate::provider::{AssistantMessage, ContentBlock, Message, ToolCall};
use crate::tools::write_block::{NEXT_STEP, WRITE_BLOCK};
use crate::transcript::AgentMessage;

/// Ids of calls made in text start with this, so the conversion can tell them from tool calls.
pub const TEXT_CALL_PREFIX: &str = "text_";

/// The tools a blocks session runs from text and does not offer as JSON tools.
pub fn hidden_tools() -> Vec<String> {
    crate::tools::registry::BUILTIN_TOOL_NAMES
        .iter()
        .map(|n| n.to_string())
        .chain([WRITE_BLOCK.to_string(), "recall".to_string()])
        .collect()
}

/// The system prompt's instructions for file blocks (in place of the tool guidelines).
pub fn instructions(bash: bool) -> String {
    let mut s = String::from(
        "You are agentd, a coding assistant working in a project folder. You act by writing blocks:\n\
         - To create or change a file, write its path on a line of its own, then its complete new content in a \
         fenced code block.\n",
    );
    if bash {
        s.push_str(
            "- To run a shell command, write it in a ```bash block; you will see its output.\n",
        );
    }
    s.push_str(
        "Keep what the task does not mention and change only what the task asks. When the task is done, reply \
         with a one-line summary and no blocks.",
    );
    s
}

/// The user message for `prompt` with `files` (path, text) shown first, as the examples show them.
pub fn prompt_with_files(prompt: &str, files: &[(String, String)]) -> String {
    if files.is_empty() {
        return prompt.to_string();
    }
    let mut s = String::from("Files:\n\n");
    for (path, text) in files {
        s.push_str(&fenced(path, text));
        s.push_str("\n\n");
    }
    s.push_str("Task: ");
    s.push_str(prompt.trim());
    s
}

fn fenced(path: &str, text: &str) -> String {
    let mut body = text.to_string();
    if !body.ends_with('\n') {
        body.push('\n');
    }
    format!("{path}\n```\n{body}```")
}

/// The worked examples shown before the conversation: a fix in a file the task shows, and a new file. No command
/// example: small models then write blocks without a path, or files named like the example's.
pub fn examples() -> Vec<Message> {
    let [shapes, fixed] = EXAMPLE_CODE;
    vec![
        Message::user(prompt_with_files(
            "square(x) in shapes.py should return x times x. Fix it.",
            &[("shapes.py".into(), shapes.into())],
        )),
        assistant_text(&fenced_lang("shapes.py", "python", fixed)),
        Message::user(prompt_with_files(
            "Create a file todo.txt that says: buy milk",
            &[("notes.md".into(), "# Notes\n".into())],
        )),
        assistant_text(&fenced("todo.txt", "buy milk\n")),
    ]
}

/// The example's file before and after its fix.
const EXAMPLE_CODE: [&str; 2] = [
    "def square(x):\n    return x + x\n\n\ndef cube(x):\n    return x * x * x\n",
    "def square(x):\n    return x * x\n\n\ndef cube(x):\n    return x * x * x\n",
];

/// Whether a block's `content` is the examples' code: a confused small model writes it into the task's files.
pub fn is_example(content: &str) -> bool {
    let content = content.trim();
    EXAMPLE_CODE.iter().any(|e| e.trim() == content)
}

fn fenced_lang(path: &str, lang: &str, text: &str) -> String {
    format!("{path}\n```{lang}\n{text}```")
}

fn assistant_text(text: &str) -> Message {
    Message::Assistant(AssistantMessage {
        content: vec![ContentBlock::Text { text: text.into() }],
    })
}

/// One block of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    /// A file's new text (whole, or the part that changes).
    File { path: String, content: String },
    /// A shell command.
    Command(String),
}

/// Languages whose unnamed fenced block is a command to run.
const SHELLS: [&str; 5] = ["bash", "sh", "shell", "console", "zsh"];

/// The blocks of a reply, in order. A fence opened under a line that names a path (`calc.py`, `**src/a.rs**`,
/// `` `VERSION` ``, `File: x.toml`) or that carries a path in its info string (```` ```python calc.py ````) is a file
/// block; an unnamed `bash`/`sh` fence is a command (when `commands`); a fence never closed (the reply was cut)
/// and any other fence are text. `files` are the workspace's files: a bare word that names one counts as a path
/// even without a dot (`Makefile`).
pub fn parse_blocks(text: &str, files: &[String], commands: bool) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(info) = fence_open(lines[i]) else {
            i += 1;
            continue;
        };
        let Some(close) = (i + 1..lines.len()).find(|&k| lines[k].trim() == "```") else {
            break;
        };
        let body: String = lines[i + 1..close]
            .iter()
            .map(|l| format!("{l}\n"))
            .collect();
        let mut words = info.split_whitespace();
        let lang = words.next().unwrap_or("").to_ascii_lowercase();
        let info_path = words.next().and_then(|w| path_word(w, files)).or_else(|| {
            (lang.contains('.'))
                .then(|| path_word(&lang, files))
                .flatten()
        });
        let named = info_path.or_else(|| {
            // The line above the fence, or the one above a blank line.
            let above = (0..i).rev().find(|&k| !lines[k].trim().is_empty())?;
            (i - above <= 2)
                .then(|| path_line(lines[above], files))
                .flatten()
        });
        match named {
            Some(path) => out.push(Block::File {
                path,
                content: body,
            }),
            None if commands && SHELLS.contains(&lang.as_str()) && !body.trim().is_empty() => {
                out.push(Block::Command(body.trim_end().to_string()))
            }
            // A fenced block with no path line is text (an example, a quoted result), not a change.
            None => {}
        }
        i = close + 1;
    }
    if !text.contains("```") {
        out.extend(unfenced_new_file(&lines, files));
    }
    out
}

/// A reply that is only a new file's path and, on the lines below, a short text with no fence at all (small
/// models write `VERSION` then `1.2.3` so): that file's block. Only for a file that does not exist yet, so a
/// reply that starts with an existing file's name and explains it never overwrites it.
fn unfenced_new_file(lines: &[&str], files: &[String]) -> Option<Block> {
    const MAX_LINES: usize = 20;
    let first = lines.iter().position(|l| !l.trim().is_empty())?;
    let path = path_line(lines[first], files)?;
    if files.contains(&path) {
        return None;
    }
    let body: Vec<&str> = lines[first + 1..]
        .iter()
        .skip_while(|l| l.trim().is_empty())
        .copied()
        .collect();
    let body_len = body.iter().rposition(|l| !l.trim().is_empty())? + 1;
    (body_len <= MAX_LINES).then(|| Block::File {
        path,
        content: body[..body_len].iter().map(|l| format!("{l}\n")).collect(),
    })
}

/// The info string of an opening fence (```` ```python ```` → `python`), `None` for another line.
fn fence_open(line: &str) -> Option<&str> {
    let t = line.trim_start();
    if line.len() - t.len() > 3 {
        return None;
    }
    let rest = t.strip_prefix("```")?;
    (!rest.contains('`')).then(|| rest.trim())
}

/// The path a line names when it is nothing but a path (decorations aside).
fn path_line(line: &str, files: &[String]) -> Option<String> {
    let mut t = line.trim();
    for prefix in ["File:", "file:", "Path:", "path:", "Filename:", "filename:"] {
        if let Some(rest) = t.strip_prefix(prefix) {
            t = rest.trim();
        }
    }
    let t = t.trim_start_matches(['#', ' ']);
    path_word(t, files)
}

/// `word` as a relative path when it looks like one: decorations (`*`, `` ` ``, quotes, a trailing `:`) stripped,
/// no spaces, no `..` segment, not absolute, and either a workspace file or a name with an extension or a `/`.
pub(crate) fn path_word(word: &str, files: &[String]) -> Option<String> {
    let colon = word.trim().trim_end_matches(['*', '`']).ends_with(':');
    let w = word
        .trim()
        .trim_matches(|c: char| matches!(c, '*' | '`' | '"' | '\'' | '[' | ']'))
        .trim_end_matches(':')
        .trim_matches(|c: char| matches!(c, '*' | '`' | '"' | '\''));
    let w = w.strip_prefix("./").unwrap_or(w);
    if w.is_empty() || w.len() > 200 || w.contains(char::is_whitespace) || w.starts_with('/') {
        return None;
    }
    if w.split('/').any(|seg| seg.is_empty() || seg == "..") {
        return None;
    }
    if files.iter().any(|f| f == w) {
        return Some(w.to_string());
    }
    let name = w.rsplit('/').next().unwrap_or(w);
    let looks_like_file = name
        .rsplit_once('.')
        .is_some_and(|(stem, ext)| {
            !ext.is_empty() && ext.len() <= 10 && ext.chars().all(|c| c.is_ascii_alphanumeric())
                && (!stem.is_empty() || name.starts_with('.'))
        })
        || w.contains('/')
        // `VERSION`, `LICENSE`; not `NOTE:` before an example.
        || (!colon && name.len() >= 3 && name.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
    let plain = w
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | '+' | '@'));
    (looks_like_file && plain).then(|| w.to_string())
}

/// The calls a blocks reply's `text` makes: file blocks become `write_block` calls, `bash` blocks `bash` calls
/// (when `bash` runs). `files` lists the workspace's files.
pub fn text_calls(text: &str, files: &[String], bash: bool) -> Vec<ToolCall> {
    parse_blocks(text, files, bash)
        .into_iter()
        .map(|block| {
            let id = format!("{TEXT_CALL_PREFIX}{}", uuid::Uuid::new_v4().simple());
            match block {
                Block::File { path, content } => {
                    ToolCall::new(id, WRITE_BLOCK, json!({ "path": path, "content": content }))
                }
                Block::Command(command) => ToolCall::new(id, "bash", json!({ "command": command })),
            }
        })
        .collect()
}

/// What the model sees of a blocks session: the examples, then the transcript with the calls made in text left
/// out of the assistant messages (their text shows them) and their results as one user message per turn,
/// ending with what to do next.
pub fn convert(messages: &[AgentMessage]) -> Vec<Message> {
    {
        let mut out = examples();
        let mut results: Vec<String> = Vec::new();
        let mut commands: std::collections::HashMap<String, String> = Default::default();
        for m in crate::transcript::convert_to_llm(messages) {
            match m {
                Message::Assistant(mut a) => {
                    flush(&mut out, &mut results);
                    a.content.retain(|b| match b {
                        ContentBlock::ToolCall(c) if c.id.starts_with(TEXT_CALL_PREFIX) => {
                            if let Some(cmd) = c.arguments.get("command").and_then(|v| v.as_str()) {
                                commands.insert(c.id.clone(), cmd.to_string());
                            }
                            false
                        }
                        _ => true,
                    });
                    if a.content.is_empty() {
                        a.content.push(ContentBlock::Text {
                            text: String::new(),
                        });
                    }
                    out.push(Message::Assistant(a));
                }
                Message::ToolResult(r) if r.tool_call_id.starts_with(TEXT_CALL_PREFIX) => {
                    let text = match commands.get(&r.tool_call_id) {
                        Some(cmd) => format!("$ {cmd}\n{}", r.content.trim_end()),
                        None => r.content.trim_end().to_string(),
                    };
                    results.push(text);
                }
                other => {
                    flush(&mut out, &mut results);
                    out.push(other);
                }
            }
        }
        flush(&mut out, &mut results);
        out
    }
}

/// The results gathered since the last assistant message, as one user message.
fn flush(out: &mut Vec<Message>, results: &mut Vec<String>) {
    if results.is_empty() {
        return;
    }
    // Two blocks in one reply may ask the same question: once is enough.
    let mut seen = std::collections::HashSet::new();
    let kept: Vec<String> = results
        .iter()
        .map(|r| {
            r.split("\n\n")
                .filter(|part| !part.starts_with("Next: ") || seen.insert(part.to_string()))
                .collect::<Vec<_>>()
                .join("\n\n")
        })
        .collect();
    let mut text = kept.join("\n\n");
    text.push_str("\n\n");
    text.push_str(NEXT_STEP);
    out.push(Message::user(text));
    results.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<String> {
        vec!["calc.py".into(), "Makefile".into()]
    }

    #[test]
    fn a_path_line_then_a_fence_is_a_file_block() {
        let text = "calc.py\n```python\ndef add(a, b):\n    return a + b\n```\nDone.";
        assert_eq!(
            parse_blocks(text, &files(), true),
            vec![Block::File {
                path: "calc.py".into(),
                content: "def add(a, b):\n    return a + b\n".into()
            }]
        );
    }

    #[test]
    fn decorated_paths_and_info_string_paths() {
        let cases = [
            "**src/app.py**\n```\nx\n```",
            "`src/app.py`:\n```py\nx\n```",
            "File: src/app.py\n\n```\nx\n```",
            "```python src/app.py\nx\n```",
            "### src/app.py\n```\nx\n```",
        ];
        for text in cases {
            assert_eq!(
                parse_blocks(text, &files(), true),
                vec![Block::File {
                    path: "src/app.py".into(),
                    content: "x\n".into()
                }],
                "{text}"
            );
        }
    }

    #[test]
    fn names_without_extension_need_to_be_known_or_look_like_files() {
        let block = |p: &str| format!("{p}\n```\nx\n```");
        assert_eq!(parse_blocks(&block("Makefile"), &files(), true).len(), 1);
        assert_eq!(parse_blocks(&block("VERSION"), &files(), true).len(), 1);
        for not_a_path in [
            "Here is the fix",
            "../etc/passwd",
            "/etc/passwd",
            "explanation",
            "NOTE:",
        ] {
            assert_eq!(
                parse_blocks(&block(not_a_path), &files(), true),
                vec![],
                "{not_a_path}"
            );
        }
    }

    #[test]
    fn bash_blocks_are_commands_and_unclosed_fences_are_dropped() {
        let text = "```bash\nwc -l data.csv\n```\nnotes.txt\n```\nunfinished";
        assert_eq!(
            parse_blocks(text, &files(), true),
            vec![Block::Command("wc -l data.csv".into())]
        );
        assert!(parse_blocks(text, &files(), false).is_empty());
        // A plain code block with no path stays text.
        assert!(parse_blocks("```python\nprint(1)\n```", &files(), true).is_empty());
    }

    #[test]
    fn a_bare_path_then_a_short_text_creates_that_new_file_only() {
        assert_eq!(
            parse_blocks("VERSION\n1.2.3", &files(), true),
            vec![Block::File {
                path: "VERSION".into(),
                content: "1.2.3\n".into()
            }]
        );
        // An existing file is never overwritten by a reply that merely starts with its name.
        assert!(parse_blocks("calc.py\nIt adds two numbers.", &files(), true).is_empty());
        // Prose is not a path.
        assert!(parse_blocks("The task is done.\nBye", &files(), true).is_empty());
        assert!(parse_blocks("notes.txt", &files(), true).is_empty());
    }

    #[test]
    fn several_blocks_in_order() {
        let text = "a.py\n```\n1\n```\n\nb.py\n```\n2\n```\n";
        let got = parse_blocks(text, &files(), true);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[1],
            Block::File {
                path: "b.py".into(),
                content: "2\n".into()
            }
        );
    }

    #[test]
    fn results_become_one_user_message_after_the_examples() {
        let call = ToolCall::new(
            format!("{TEXT_CALL_PREFIX}1"),
            WRITE_BLOCK,
            json!({"path": "a.py", "content": "x\n"}),
        );
        let turn = crate::transcript::AssistantTurn {
            content: vec![
                ContentBlock::Text {
                    text: "a.py\n```\nx\n```".into(),
                },
                ContentBlock::ToolCall(call.clone()),
            ],
            stop_reason: crate::provider::StopReason::Stop,
            usage: Default::default(),
            model: String::new(),
            error_message: None,
            timestamp: 0,
        };
        let messages = vec![
            AgentMessage::user("do it"),
            AgentMessage::Assistant(turn),
            AgentMessage::ToolResult(crate::transcript::ToolResult {
                tool_call_id: call.id.clone(),
                tool_name: WRITE_BLOCK.into(),
                content: "Wrote a.py.".into(),
                details: serde_json::Value::Null,
                is_error: false,
                timestamp: 0,
            }),
        ];
        let out = convert(&messages);
        let n = examples().len();
        assert_eq!(out.len(), n + 3);
        match &out[n + 1] {
            Message::Assistant(a) => assert_eq!(a.content.len(), 1),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            out[n + 2],
            Message::user(format!("Wrote a.py.\n\n{NEXT_STEP}"))
        );
    }
}
