//! Session export: a session file's whole tree — every branch, not only the current path — as one self-contained
//! HTML page (inline CSS, no scripts, no external assets: it opens on an air-gapped machine) or as Markdown.
//! Messages, tool calls with their arguments and results, shell commands, compactions, branch summaries, labels
//! and model changes are all shown; the entries on the current path are marked.
//!
//! Branch points become sections (one per child, in file order); a straight run of entries is rendered without
//! nesting, so a long session does not nest deeply.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use super::AppError;
use crate::provider::ContentBlock;
use crate::session::entry::{EntryKind, SessionEntry};
use crate::session::tree::SessionTree;
use crate::transcript::AgentMessage;

/// What to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Html,
    Markdown,
}

impl ExportFormat {
    /// The file extension for this format.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Html => "html",
            Self::Markdown => "md",
        }
    }
}

/// Writes the session file `session` to `out`: Markdown for a `.md` file, HTML otherwise. Returns the format.
pub fn export_file(
    session: &std::path::Path,
    out: &std::path::Path,
) -> Result<ExportFormat, AppError> {
    let loaded = crate::session::file::load(session)?;
    let format = match out.extension().and_then(|e| e.to_str()) {
        Some("md") | Some("markdown") => ExportFormat::Markdown,
        _ => ExportFormat::Html,
    };
    let text = export(&loaded.tree, None, format);
    std::fs::write(out, text)
        .map_err(|e| AppError::usage(format!("cannot write {}: {e}", out.display())))?;
    Ok(format)
}

/// Renders `tree` (its current path ending at `leaf`, default the last entry) in `format`.
pub fn export(tree: &SessionTree, leaf: Option<&str>, format: ExportFormat) -> String {
    let view = View::new(tree, leaf);
    match format {
        ExportFormat::Html => view.html(),
        ExportFormat::Markdown => view.markdown(),
    }
}

struct View<'a> {
    tree: &'a SessionTree,
    on_path: HashSet<&'a str>,
    labels: HashMap<&'a str, &'a str>,
    children: HashMap<Option<&'a str>, Vec<usize>>,
    name: Option<String>,
    /// Tool names by call id (a result shows the name of the call it answers).
    calls: HashMap<&'a str, &'a str>,
}

impl<'a> View<'a> {
    fn new(tree: &'a SessionTree, leaf: Option<&str>) -> Self {
        // The last entry appended is on the current path (every append goes to the current leaf).
        let leaf = leaf.or_else(|| tree.last_id());
        let on_path = tree
            .path(leaf)
            .map(|p| p.iter().map(|e| e.id.as_str()).collect())
            .unwrap_or_default();
        let mut children: HashMap<Option<&str>, Vec<usize>> = HashMap::new();
        let mut name = None;
        let mut calls = HashMap::new();
        for (i, e) in tree.entries().iter().enumerate() {
            children.entry(e.parent_id.as_deref()).or_default().push(i);
            match &e.kind {
                EntryKind::SessionInfo { name: n } => name = n.clone(),
                EntryKind::Message {
                    message: AgentMessage::Assistant(turn),
                } => {
                    for b in &turn.content {
                        if let ContentBlock::ToolCall(c) = b {
                            calls.insert(c.id.as_str(), c.name.as_str());
                        }
                    }
                }
                _ => {}
            }
        }
        Self {
            tree,
            on_path,
            labels: tree.labels(),
            children,
            name,
            calls,
        }
    }

    fn entry(&self, i: usize) -> &'a SessionEntry {
        &self.tree.entries()[i]
    }

    fn kids(&self, id: Option<&'a str>) -> &[usize] {
        self.children.get(&id).map_or(&[], Vec::as_slice)
    }

    /// Walks the tree from `roots`: `item` for every entry, `open`/`close` around every branch of a branch point
    /// (given the branch's first entry, its number and how many there are), keeping straight runs flat.
    fn walk(
        &self,
        roots: &[usize],
        out: &mut String,
        item: &dyn Fn(&Self, &SessionEntry, &mut String),
        open: &dyn Fn(&Self, &SessionEntry, usize, usize, &mut String),
        close: &dyn Fn(&mut String),
    ) {
        enum Task {
            Open(usize, usize, usize),
            Run(usize),
            Close,
        }
        let branches = |stack: &mut Vec<Task>, kids: &[usize]| {
            for (n, &child) in kids.iter().enumerate().rev() {
                stack.push(Task::Close);
                stack.push(Task::Run(child));
                stack.push(Task::Open(child, n + 1, kids.len()));
            }
        };
        let mut stack = Vec::new();
        match roots {
            [only] => stack.push(Task::Run(*only)),
            many => branches(&mut stack, many),
        }
        while let Some(task) = stack.pop() {
            match task {
                Task::Open(i, n, total) => open(self, self.entry(i), n, total, out),
                Task::Close => close(out),
                Task::Run(mut at) => loop {
                    let e = self.entry(at);
                    item(self, e, out);
                    match self.kids(Some(e.id.as_str())) {
                        [] => break,
                        [only] => at = *only,
                        many => {
                            branches(&mut stack, many);
                            break;
                        }
                    }
                },
            }
        }
    }

    fn html(&self) -> String {
        let h = self.tree.header();
        let title = self
            .name
            .clone()
            .unwrap_or_else(|| format!("session {}", h.id));
        let mut out = String::with_capacity(16 * 1024);
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{}</title><style>{CSS}</style></head><body>\n<header><h1>{}</h1>\
             <p class=\"meta\">session <code>{}</code> · started {} · cwd <code>{}</code> · {} entries</p></header>\n<main>\n",
            esc(&title),
            esc(&title),
            esc(&h.id),
            esc(&h.timestamp),
            esc(&h.cwd),
            self.tree.len()
        );
        let roots = self.kids(None).to_vec();
        self.walk(
            &roots,
            &mut out,
            &|v, e, out| v.html_entry(e, out),
            &|v, e, n, total, out| {
                let mark = if v.on_path.contains(e.id.as_str()) {
                    " open class=\"branch on-path\""
                } else {
                    " class=\"branch\""
                };
                let _ = writeln!(
                    out,
                    "<details{mark}><summary>branch {n} of {total}{}</summary>",
                    if v.on_path.contains(e.id.as_str()) {
                        " · current path"
                    } else {
                        ""
                    }
                );
            },
            &|out| out.push_str("</details>\n"),
        );
        out.push_str("</main></body></html>\n");
        out
    }

    fn html_entry(&self, e: &SessionEntry, out: &mut String) {
        let path = if self.on_path.contains(e.id.as_str()) {
            " on-path"
        } else {
            ""
        };
        let label = self
            .labels
            .get(e.id.as_str())
            .map(|l| format!("<span class=\"label\">{}</span>", esc(l)))
            .unwrap_or_default();
        let open = |out: &mut String, kind: &str, who: &str| {
            let _ = write!(
                out,
                "<section class=\"entry {kind}{path}\" id=\"e-{}\"><div class=\"who\">{who}{label}\
                 <span class=\"id\">{}</span></div>",
                esc(&e.id),
                esc(&e.id)
            );
        };
        match &e.kind {
            EntryKind::Message { message } => match message {
                AgentMessage::User { content, .. } => {
                    open(out, "user", "user");
                    text_html(out, content);
                }
                AgentMessage::Assistant(turn) => {
                    let who = if turn.model.is_empty() {
                        "assistant".to_string()
                    } else {
                        format!("assistant · {}", esc(&turn.model))
                    };
                    open(out, "assistant", &who);
                    for b in &turn.content {
                        match b {
                            ContentBlock::Text { text } => text_html(out, text),
                            ContentBlock::Thinking { thinking } => {
                                out.push_str(
                                    "<details class=\"thinking\"><summary>thinking</summary>",
                                );
                                text_html(out, thinking);
                                out.push_str("</details>");
                            }
                            ContentBlock::ToolCall(c) => {
                                let args = serde_json::to_string_pretty(&c.arguments)
                                    .unwrap_or_else(|_| c.arguments.to_string());
                                let bad = c
                                    .invalid
                                    .as_ref()
                                    .map(|i| format!(" · invalid: {}", esc(i.message_for_model())))
                                    .unwrap_or_default();
                                let _ = write!(
                                    out,
                                    "<details class=\"call\" open><summary>tool call <b>{}</b> \
                                     <code>{}</code>{bad}</summary><pre>{}</pre></details>",
                                    esc(&c.name),
                                    esc(&c.id),
                                    esc(&args)
                                );
                            }
                        }
                    }
                    let u = &turn.usage;
                    let stop = serde_json::to_value(turn.stop_reason)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    let _ = write!(
                        out,
                        "<div class=\"usage\">{stop} · {} tokens in, {} out</div>",
                        u.input, u.output
                    );
                    if let Some(err) = &turn.error_message {
                        let _ = write!(out, "<div class=\"error\">{}</div>", esc(err));
                    }
                }
                AgentMessage::ToolResult(r) => {
                    let kind = if r.is_error { "result error" } else { "result" };
                    open(out, kind, "tool result");
                    let name = self
                        .calls
                        .get(r.tool_call_id.as_str())
                        .copied()
                        .unwrap_or(r.tool_name.as_str());
                    let _ = write!(
                        out,
                        "<details open><summary><b>{}</b> <code>{}</code>{}</summary><pre>{}</pre></details>",
                        esc(name),
                        esc(&r.tool_call_id),
                        if r.is_error { " · error" } else { "" },
                        esc(&r.content)
                    );
                }
                AgentMessage::BashExecution {
                    command,
                    output,
                    exit_code,
                    ..
                } => {
                    open(out, "bash", "shell");
                    let _ = write!(
                        out,
                        "<pre class=\"cmd\">$ {}</pre><pre>{}</pre><div class=\"usage\">exit {}</div>",
                        esc(command),
                        esc(output),
                        exit_code.map_or("—".to_string(), |c| c.to_string())
                    );
                }
                AgentMessage::CompactionSummary {
                    summary,
                    tokens_before,
                    ..
                } => {
                    open(
                        out,
                        "note",
                        &format!("compaction summary · {tokens_before} tokens before"),
                    );
                    text_html(out, summary);
                }
                AgentMessage::BranchSummary { summary, .. } => {
                    open(out, "note", "branch summary");
                    text_html(out, summary);
                }
                AgentMessage::Custom {
                    custom_type,
                    content,
                    ..
                } => {
                    open(out, "note", &esc(custom_type));
                    text_html(out, content);
                }
            },
            EntryKind::Compaction {
                summary,
                first_kept_entry_id,
                tokens_before,
                ..
            } => {
                open(
                    out,
                    "note",
                    &format!(
                        "compaction · {tokens_before} tokens before · kept from <a href=\"#e-{0}\">{0}</a>",
                        esc(first_kept_entry_id)
                    ),
                );
                text_html(out, summary);
            }
            EntryKind::BranchSummary {
                from_id, summary, ..
            } => {
                open(
                    out,
                    "note",
                    &format!(
                        "branch summary · left <a href=\"#e-{0}\">{0}</a>",
                        esc(from_id)
                    ),
                );
                text_html(out, summary);
            }
            EntryKind::ModelChange { provider, model_id } => {
                open(
                    out,
                    "meta",
                    &format!("model → {} ({})", esc(model_id), esc(provider)),
                );
            }
            EntryKind::ThinkingLevelChange { thinking_level } => {
                open(out, "meta", &format!("thinking → {}", esc(thinking_level)));
            }
            EntryKind::Label { target_id, label } => {
                open(
                    out,
                    "meta",
                    &format!(
                        "label {} on <a href=\"#e-{1}\">{1}</a>",
                        esc(label.as_deref().unwrap_or("(cleared)")),
                        esc(target_id)
                    ),
                );
            }
            EntryKind::Custom { custom_type, .. } => {
                open(out, "meta", &format!("custom · {}", esc(custom_type)));
            }
            EntryKind::CustomMessage {
                custom_type,
                content,
                ..
            } => {
                open(out, "note", &esc(custom_type));
                text_html(out, content);
            }
            EntryKind::SessionInfo { name } => {
                open(
                    out,
                    "meta",
                    &format!("name → {}", esc(name.as_deref().unwrap_or("(none)"))),
                );
            }
        }
        out.push_str("</section>\n");
    }

    fn markdown(&self) -> String {
        let h = self.tree.header();
        let title = self
            .name
            .clone()
            .unwrap_or_else(|| format!("session {}", h.id));
        let mut out = format!(
            "# {title}\n\nsession `{}` · started {} · cwd `{}` · {} entries\n\n",
            h.id,
            h.timestamp,
            h.cwd,
            self.tree.len()
        );
        let roots = self.kids(None).to_vec();
        self.walk(
            &roots,
            &mut out,
            &|v, e, out| v.md_entry(e, out),
            &|v, e, n, total, out| {
                let here = if v.on_path.contains(e.id.as_str()) {
                    " (current path)"
                } else {
                    ""
                };
                let _ = write!(out, "\n---\n\n## Branch {n} of {total}{here}\n\n");
            },
            &|out| out.push_str("\n---\n\n"),
        );
        out
    }

    fn md_entry(&self, e: &SessionEntry, out: &mut String) {
        let mark = if self.on_path.contains(e.id.as_str()) {
            ""
        } else {
            " (other branch)"
        };
        let label = self
            .labels
            .get(e.id.as_str())
            .map(|l| format!(" [{l}]"))
            .unwrap_or_default();
        let head = |out: &mut String, who: &str| {
            let _ = write!(out, "### {who}{label}{mark} `{}`\n\n", e.id);
        };
        match &e.kind {
            EntryKind::Message { message } => match message {
                AgentMessage::User { content, .. } => {
                    head(out, "User");
                    let _ = write!(out, "{content}\n\n");
                }
                AgentMessage::Assistant(turn) => {
                    head(out, "Assistant");
                    for b in &turn.content {
                        match b {
                            ContentBlock::Text { text } => {
                                let _ = write!(out, "{text}\n\n");
                            }
                            ContentBlock::Thinking { thinking } => {
                                let _ = write!(
                                    out,
                                    "> thinking: {}\n\n",
                                    thinking.replace('\n', "\n> ")
                                );
                            }
                            ContentBlock::ToolCall(c) => {
                                let args = serde_json::to_string_pretty(&c.arguments)
                                    .unwrap_or_else(|_| c.arguments.to_string());
                                let _ = write!(
                                    out,
                                    "Tool call **{}** `{}`:\n\n{}\n\n",
                                    c.name,
                                    c.id,
                                    fence("json", &args)
                                );
                            }
                        }
                    }
                }
                AgentMessage::ToolResult(r) => {
                    head(
                        out,
                        &format!(
                            "Tool result: {}{}",
                            r.tool_name,
                            if r.is_error { " (error)" } else { "" }
                        ),
                    );
                    let _ = write!(out, "{}\n\n", fence("", &r.content));
                }
                AgentMessage::BashExecution {
                    command, output, ..
                } => {
                    head(out, "Shell");
                    let _ = write!(out, "{}\n\n", fence("", &format!("$ {command}\n{output}")));
                }
                AgentMessage::CompactionSummary { summary, .. } => {
                    head(out, "Compaction summary");
                    let _ = write!(out, "{summary}\n\n");
                }
                AgentMessage::BranchSummary { summary, .. } => {
                    head(out, "Branch summary");
                    let _ = write!(out, "{summary}\n\n");
                }
                AgentMessage::Custom {
                    custom_type,
                    content,
                    ..
                } => {
                    head(out, custom_type);
                    let _ = write!(out, "{content}\n\n");
                }
            },
            EntryKind::Compaction {
                summary,
                tokens_before,
                ..
            } => {
                head(out, &format!("Compaction ({tokens_before} tokens before)"));
                let _ = write!(out, "{summary}\n\n");
            }
            EntryKind::BranchSummary { summary, .. } => {
                head(out, "Branch summary");
                let _ = write!(out, "{summary}\n\n");
            }
            EntryKind::CustomMessage {
                custom_type,
                content,
                ..
            } => {
                head(out, custom_type);
                let _ = write!(out, "{content}\n\n");
            }
            EntryKind::ModelChange { model_id, .. } => {
                let _ = write!(out, "_model → {model_id}_\n\n");
            }
            EntryKind::ThinkingLevelChange { thinking_level } => {
                let _ = write!(out, "_thinking → {thinking_level}_\n\n");
            }
            EntryKind::Label { .. } | EntryKind::Custom { .. } | EntryKind::SessionInfo { .. } => {}
        }
    }
}

/// A fenced code block whose fence is longer than any backtick run inside.
fn fence(lang: &str, body: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let f = "`".repeat((longest + 1).max(3));
    format!("{f}{lang}\n{body}\n{f}")
}

/// Text with its fenced code blocks as `<pre><code>` and the rest as pre-wrapped paragraphs, all escaped.
fn text_html(out: &mut String, text: &str) {
    let mut in_code = false;
    let mut buf = String::new();
    let flush = |out: &mut String, buf: &mut String, code: bool| {
        if buf.is_empty() {
            return;
        }
        if code {
            let _ = write!(
                out,
                "<pre><code>{}</code></pre>",
                esc(buf.trim_end_matches('\n'))
            );
        } else if !buf.trim().is_empty() {
            let _ = write!(
                out,
                "<div class=\"text\">{}</div>",
                esc(buf.trim_matches('\n'))
            );
        }
        buf.clear();
    };
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            flush(out, &mut buf, in_code);
            in_code = !in_code;
            continue;
        }
        buf.push_str(line);
    }
    flush(out, &mut buf, in_code);
}

/// HTML-escapes text for element content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const CSS: &str = "\
:root{--bg:#fafafa;--fg:#1d1d1f;--muted:#6b6b70;--line:#ddd;--user:#eef4ff;--asst:#fff;--call:#f6f2ff;\
--res:#f1f8f1;--err:#fdeeee;--note:#fff8e6}\
*{box-sizing:border-box}body{margin:0;font:15px/1.5 system-ui,-apple-system,Segoe UI,sans-serif;background:var(--bg);\
color:var(--fg)}header{padding:16px 24px;border-bottom:1px solid var(--line);background:#fff}h1{margin:0;font-size:20px}\
.meta{margin:4px 0 0;color:var(--muted);font-size:13px}main{max-width:960px;margin:0 auto;padding:16px}\
.entry{border:1px solid var(--line);border-radius:8px;padding:10px 14px;margin:10px 0;background:var(--asst);\
opacity:.6}.entry.on-path{opacity:1}.user{background:var(--user)}.result{background:var(--res)}\
.result.error{background:var(--err)}.note{background:var(--note)}.meta.entry{font-size:13px;padding:4px 14px}\
.who{font-size:12px;font-weight:600;color:var(--muted);text-transform:uppercase;letter-spacing:.04em;margin-bottom:4px}\
.id{float:right;font-weight:400;text-transform:none;font-family:ui-monospace,monospace}\
.label{margin-left:8px;padding:0 6px;border-radius:4px;background:#ffe08a;color:#5a4300;text-transform:none}\
.text{white-space:pre-wrap;word-wrap:break-word}pre{white-space:pre-wrap;word-wrap:break-word;\
background:#f3f3f5;border-radius:6px;padding:8px;margin:6px 0;font:13px/1.45 ui-monospace,Menlo,monospace}\
details.call{background:var(--call);border-radius:6px;padding:4px 8px;margin:6px 0}summary{cursor:pointer}\
.usage{font-size:12px;color:var(--muted);margin-top:4px}.error{color:#a00}\
details.branch{border-left:3px solid #b9b9c5;padding-left:12px;margin:12px 0}\
details.branch.on-path{border-left-color:#3a6ff7}details.branch>summary{font-weight:600;color:var(--muted)}\
a{color:#3a6ff7}.who a{text-transform:none}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_outgrow_the_backticks_inside_and_text_is_escaped() {
        assert_eq!(fence("", "a ``` b"), "````\na ``` b\n````");
        assert_eq!(fence("json", "{}"), "```json\n{}\n```");
        let mut out = String::new();
        text_html(&mut out, "see <b>\n```\nlet x = a && b;\n```\nend");
        assert_eq!(
            out,
            "<div class=\"text\">see &lt;b&gt;</div><pre><code>let x = a &amp;&amp; b;</code></pre>\
             <div class=\"text\">end</div>"
        );
    }
}
