//! `write_block {path, content}`: a file block the model wrote in its reply (the "file blocks" edit format,
//! `app::harness::blocks`), applied. A new file is created with the block as its text; in an existing file the block
//! is placed by [`super::support::block_place`] (the run of lines it rewrites is replaced, the lines it left out at its ends
//! are kept), so a block holding only the fixed function does not delete the rest of the file. The write is
//! atomic like `write`'s, and refused like `edit`'s when it would break the syntax of a JSON or Python file
//! that parsed before.
//!
//! A block for an existing file the session has not seen as it is now is not placed: the answer is the file's
//! text (read before write), and the same block may then be sent again.
//!
//! The result shows the file as it now reads (no byte counts or line numbers for a small model to copy), how
//! the block was placed, and names the block took out of this file that other files of the workspace still use
//! (a rename half done), then asks for a summary or the next block.

use std::path::Path;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::edit::{UNREAD_REFUSAL, UNREAD_SHOWN_BYTES};
use super::policy::resolve_path;
use super::support::block_place::{place, Placement};
use super::support::file_access::{open_regular, read_at_most};
use super::support::rename_follow;
use super::support::syntax_check::breaks_syntax;
use super::support::truncate::shown_file;
use super::support::workspace::WorkspaceState;
use super::tool::{
    builtin_spec, parse_arguments, PolicyTag, Tool, ToolContext, ToolError, ToolOutput,
};
use super::write::atomic_write;
use crate::schema::ToolSpec;

/// The tool's name (the calls the file-blocks format makes from the model's text).
pub const WRITE_BLOCK: &str = "write_block";
/// How every successful result ends.
pub const NEXT_STEP: &str =
    "If the task is done, reply with a one-line summary; otherwise write the next block.";
/// The largest file a block is placed in (the whole file is held in memory and aligned).
const MAX_BLOCK_FILE: u64 = 2 * 1024 * 1024;

/// Arguments of `write_block`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteBlockArgs {
    /// Path of the file, relative to the working directory.
    pub path: String,
    /// The block's text: the whole file, or the part of it that changes.
    pub content: String,
}

/// The `write_block` tool (not offered to the model as a JSON tool: its calls come from file blocks in text).
pub struct WriteBlockTool {
    spec: ToolSpec,
}

impl WriteBlockTool {
    pub fn new() -> Self {
        Self {
            spec: builtin_spec::<WriteBlockArgs>(
                WRITE_BLOCK,
                "Apply a file block: create the file with the block as its text, or in an existing file replace \
                 the lines the block rewrites (found by its matching lines) and keep the rest.",
            ),
        }
    }
}

impl Default for WriteBlockTool {
    fn default() -> Self {
        Self::new()
    }
}

/// What applying a block to a file's current text gives: the new text and the sentence saying how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockOutcome {
    pub new_text: String,
    /// How the block was placed, for the model (empty for a new file or a whole-file block).
    pub how: String,
}

/// The text `block` leaves in a file that reads `old` (`None`: a new file), with CRLF line endings and a BOM
/// kept as the file had them.
pub fn apply_block(old: Option<&str>, block: &str) -> BlockOutcome {
    let block = block.replace("\r\n", "\n");
    let Some(old) = old else {
        return BlockOutcome {
            new_text: block,
            how: String::new(),
        };
    };
    let (bom, body) = match old.strip_prefix('\u{feff}') {
        Some(rest) => ("\u{feff}", rest),
        None => ("", old),
    };
    let crlf = body.contains("\r\n");
    let lf = body.replace("\r\n", "\n");
    let placed = place(&lf, &block);
    let mut how = match placed.placement {
        Placement::Whole => String::new(),
        Placement::Region { start, end } => format!(
            "Your block replaced {} and the rest of the file was kept.",
            lines_phrase(start, end)
        ),
        Placement::Appended => {
            "Your block matched no lines of the file, so it was added at its end.".into()
        }
    };
    if !placed.deleted.is_empty() {
        how.push_str(&format!(
            " {} of the old file, between lines of your block, were left out of it and are gone.",
            ranges_phrase(&placed.deleted)
        ));
    }
    let mut new_text = placed.text;
    if crlf {
        new_text = new_text.replace('\n', "\r\n");
    }
    BlockOutcome {
        new_text: format!("{bom}{new_text}"),
        how: how.trim().to_string(),
    }
}

fn lines_phrase(start: usize, end: usize) -> String {
    if start == end {
        format!("line {start}")
    } else {
        format!("lines {start}–{end}")
    }
}

/// `[2, 3, 7]` → "Lines 2–3, 7".
fn ranges_phrase(lines: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let mut j = i;
        while j + 1 < lines.len() && lines[j + 1] == lines[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            lines[i].to_string()
        } else {
            format!("{}–{}", lines[i], lines[j])
        });
        i = j + 1;
    }
    let word = if lines.len() == 1 { "Line" } else { "Lines" };
    format!("{word} {}", parts.join(", "))
}

/// Identifiers (3+ characters) of `text`.
fn identifiers(text: &str) -> std::collections::BTreeSet<&str> {
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| w.len() >= 3 && w.starts_with(|c: char| c.is_alphabetic() || c == '_'))
        .collect()
}

/// Names that `old` had and `new` lost, with the other workspace files that still use them (a rename done in
/// one file only): one line per name, at most three names and three files each.
fn lost_names_still_used(state: &WorkspaceState, this: &Path, old: &str, new: &str) -> String {
    let kept = identifiers(new);
    let lost: Vec<&str> = identifiers(old)
        .into_iter()
        .filter(|w| !kept.contains(w))
        .collect();
    if lost.is_empty() || lost.len() > 8 {
        // Nothing lost, or a rewrite too large to be a rename.
        return String::new();
    }
    // Each other file is read once; a name keeps its first three users in the listing's order.
    let mut users: Vec<Vec<(String, String)>> = vec![Vec::new(); lost.len()];
    for (rel, text) in state.other_texts(this, 500, 256 * 1024) {
        for (name, found) in lost.iter().zip(users.iter_mut()) {
            if found.len() < 3 {
                if let Some(line) = text.lines().find(|l| identifiers(l).contains(name)) {
                    found.push((rel.clone(), line.trim().to_string()));
                }
            }
        }
        if users.iter().all(|u| u.len() == 3) {
            break;
        }
    }
    let mut out = String::new();
    for (name, users) in lost
        .iter()
        .zip(&users)
        .filter(|(_, u)| !u.is_empty())
        .take(3)
    {
        let uses: Vec<String> = users.iter().map(|(f, l)| format!("{f} (`{l}`)")).collect();
        let files: Vec<&str> = users.iter().map(|(f, _)| f.as_str()).collect();
        out.push_str(&format!(
            "\n`{name}` is gone from this file, but {} still {} it: {}. If you renamed it, write {} with the new \
             name too.",
            files.join(", "),
            if users.len() == 1 { "uses" } else { "use" },
            uses.join(", "),
            files.join(" and ")
        ));
    }
    out
}

#[async_trait]
impl Tool for WriteBlockTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn tags(&self) -> &[PolicyTag] {
        &[PolicyTag::Write]
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: WriteBlockArgs = parse_arguments(WRITE_BLOCK, args)?;
        let path = resolve_path(ctx, &args.path)?;
        let label = args.path.trim_start_matches("./").to_string();
        // Read before write (Claude Code's rule): a block for a file the model has not seen as it is now is not
        // placed; the answer is the file's text, which now counts as seen, so the block may be sent again.
        let unseen = ctx
            .workspace_state
            .as_ref()
            .is_some_and(|s| !s.has_seen(&path));
        if unseen {
            if let Some(text) = ctx.scope().read_text(&path, UNREAD_SHOWN_BYTES) {
                ctx.saw(&path);
                return Err(ToolError::RespondToModel(format!(
                    "{UNREAD_REFUSAL} {label} had not been shown in this session (or it changed since), so your \
                     block was not placed in it. Its current text:\n{label}\n{}\nWrite the block for {label} \
                     again, based on this text.",
                    shown_file(&text.replace("\r\n", "\n"))
                )));
            }
        }
        let (target, name, state) = (path.clone(), label.clone(), ctx.workspace_state.clone());
        // Reading, placing, the syntax check (a `python3` child) and the write all block: off the async thread.
        let done = ctx
            .run_blocking(WRITE_BLOCK, move || {
                write_block(&target, &name, &args.content, state)
            })
            .await?;
        ctx.saw(&path);
        if done.changed {
            ctx.tree_changed();
        }
        Ok(ToolOutput::new(
            done.content,
            json!({ "path": path, "created": done.created, "noop": !done.changed }),
        ))
    }
}

/// What a block did to its file: the result text for the model.
struct Written {
    content: String,
    created: bool,
    changed: bool,
}

/// Applies `block` to `path` (named `label` for the model): the blocking part of the tool.
fn write_block(
    path: &Path,
    label: &str,
    block: &str,
    state: Option<WorkspaceState>,
) -> Result<Written, ToolError> {
    let old = read_existing(path, label)?;
    let mut outcome = apply_block(old.as_deref(), block);
    if old.as_deref() == Some(outcome.new_text.as_str()) {
        return Ok(Written {
            content: format!("{label} already reads like that: nothing changed."),
            created: false,
            changed: false,
        });
    }
    // A definition renamed with uses of the old name left behind: those in this file are renamed with it.
    let followed = old
        .as_deref()
        .and_then(|o| rename_follow::follow(state.as_ref(), path, label, o, &outcome.new_text));
    if let Some(f) = &followed {
        outcome.new_text = f.text.clone();
    }
    if let Some(old) = &old {
        if let Some(why) = breaks_syntax(path, old, &outcome.new_text) {
            return Err(ToolError::RespondToModel(format!(
                "Not written: {label} would not parse after this block ({why}), so it is unchanged. It would have \
                 read:\n{}\nWrite the block again, fixed.",
                shown_file(&outcome.new_text)
            )));
        }
    }
    atomic_write(path, outcome.new_text.as_bytes())
        .map_err(|e| ToolError::RespondToModel(format!("Cannot write {label}: {e}")))?;
    let mut content = match &old {
        None => format!("Created {label}."),
        Some(_) if outcome.how.is_empty() => format!("Wrote {label}."),
        Some(_) => format!("Wrote {label}. {}", outcome.how),
    };
    content.push_str(&format!(
        " It now reads:\n{}",
        shown_file(&outcome.new_text)
    ));
    match (&followed, &old, &state) {
        (Some(f), _, _) => content.push_str(&f.note),
        (None, Some(old), Some(state)) => {
            content.push_str(&lost_names_still_used(state, path, old, &outcome.new_text))
        }
        _ => {}
    }
    Ok(Written {
        content,
        created: old.is_none(),
        changed: true,
    })
}

/// The current text of `path` (`None`: no such file). A directory, a special file, a binary or an oversized
/// file is refused.
fn read_existing(path: &Path, label: &str) -> Result<Option<String>, ToolError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ToolError::RespondToModel(format!(
                "Cannot read {label}: {e}"
            )))
        }
    };
    if meta.is_dir() {
        return Err(ToolError::RespondToModel(format!(
            "{label} is a directory; a block needs a file path."
        )));
    }
    if meta.len() > MAX_BLOCK_FILE {
        return Err(ToolError::RespondToModel(format!(
            "{label} is too large for a file block ({} bytes); change it with bash.",
            meta.len()
        )));
    }
    let (file, _) = open_regular(path, label, WRITE_BLOCK)?;
    let bytes = read_at_most(&file, MAX_BLOCK_FILE)
        .map_err(|e| ToolError::RespondToModel(format!("Cannot read {label}: {e}")))?
        .ok_or_else(|| {
            ToolError::RespondToModel(format!(
                "{label} is too large for a file block; change it with bash."
            ))
        })?;
    String::from_utf8(bytes).map(Some).map_err(|_| {
        ToolError::RespondToModel(format!(
            "{label} is not UTF-8 text; a file block cannot change it."
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crlf_and_bom_survive_a_placed_block() {
        let old = "\u{feff}a = 1\r\nb = 2\r\nc = 3\r\n";
        let out = apply_block(Some(old), "b = 5\n");
        assert_eq!(out.new_text, "\u{feff}a = 1\r\nb = 5\r\nc = 3\r\n");
        assert_eq!(
            out.how,
            "Your block replaced line 2 and the rest of the file was kept."
        );
    }

    #[test]
    fn ranges_read_as_ranges() {
        assert_eq!(ranges_phrase(&[2, 3, 7]), "Lines 2–3, 7");
        assert_eq!(ranges_phrase(&[4]), "Line 4");
    }
}
