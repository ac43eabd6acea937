//! `edit {path, edits: [{old_text, new_text}]}`: exact text replacement. Every `old_text` must occur exactly once
//! in the original file (overlapping occurrences count), edits must not overlap each other, and either all edits
//! apply or none does. A UTF-8 BOM and CRLF line endings are preserved: matching happens on LF-normalised text and
//! the result is written back with the file's own line ending. Returns a unified diff. Only regular files up to
//! [`MAX_EDIT_BYTES`] are edited (the whole file is held in memory); FIFOs, devices and sockets are refused before
//! anything opens them.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use similar::{DiffTag, TextDiff};

use super::file_access::{open_regular, read_at_most};
use super::policy::resolve_path;
use super::read::binary_reason;
use super::tool::{
    builtin_spec, parse_arguments, PolicyTag, Tool, ToolContext, ToolError, ToolOutput,
};
use super::truncate::format_size;
use super::write::atomic_write;
use crate::schema::ToolSpec;

const BOM: char = '\u{feff}';
/// The largest file `edit` changes (10 MiB); larger files are refused with a hint to use bash.
pub const MAX_EDIT_BYTES: u64 = 10 * 1024 * 1024;

/// One replacement.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[schemars(inline)]
pub struct Replacement {
    /// Exact text to find. It must occur exactly once in the original file, including whitespace and newlines.
    pub old_text: String,
    /// Text to put in its place.
    pub new_text: String,
}

/// Arguments of `edit`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EditArgs {
    /// Path of the file to edit, relative to the working directory or absolute.
    pub path: String,
    /// Replacements, each matched against the original file; they must not overlap. All apply or none does.
    pub edits: Vec<Replacement>,
}

/// The `edit` tool.
pub struct EditTool {
    spec: ToolSpec,
}

impl EditTool {
    pub fn new() -> Self {
        Self {
            spec: builtin_spec::<EditArgs>(
                "edit",
                "Edit a file by replacing exact text. Each old_text must match exactly one place in the original \
                 file (including whitespace and newlines) and edits must not overlap; if any edit fails, the file \
                 is left unchanged. Returns a unified diff.",
            ),
        }
    }
}

impl Default for EditTool {
    fn default() -> Self {
        Self::new()
    }
}

/// The result of applying edits to a text, before it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edited {
    /// The new file content, with the original BOM and line ending.
    pub new_content: String,
    /// Unified diff of the LF-normalised texts.
    pub diff: String,
    /// 1-indexed line (in the new file) of the first change.
    pub first_changed_line: usize,
}

/// Where `needle` starts in `haystack`, overlapping occurrences included ("aa" occurs twice in "aaa").
fn occurrences(haystack: &str, needle: &str) -> Vec<usize> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(pos) = haystack.get(from..).and_then(|rest| rest.find(needle)) {
        let at = from + pos;
        found.push(at);
        // Step one character, not one match, so overlapping occurrences are seen.
        from = at + haystack[at..].chars().next().map_or(1, char::len_utf8);
    }
    found
}

/// The file's text for a failed match, so the model can copy the exact text on its next try instead of guessing
/// again: the whole file when it is short, else its first lines (a `read` shows the rest).
fn file_excerpt(text: &str) -> String {
    const MAX_LINES: usize = 40;
    const MAX_BYTES: usize = 2000;
    let mut shown = String::new();
    for (lines, line) in text.lines().enumerate() {
        if lines == MAX_LINES || shown.len() + line.len() + 1 > MAX_BYTES {
            return format!(
                "\nThe file begins (first {lines} lines; read it for the rest):\n{shown}"
            );
        }
        shown.push_str(line);
        shown.push('\n');
    }
    format!("\nThe file's current text:\n{shown}")
}

/// Applies `edits` to `original` (all or nothing). `label` names the file in messages and the diff header.
pub fn apply_edits(original: &str, edits: &[Replacement], label: &str) -> Result<Edited, String> {
    if edits.is_empty() {
        return Err("No edits given: edits must contain at least one {old_text, new_text}.".into());
    }
    let (bom, body) = match original.strip_prefix(BOM) {
        Some(rest) => (true, rest),
        None => (false, original),
    };
    let crlf = uses_crlf(body);
    let text = body.replace("\r\n", "\n");
    let name = |i: usize| {
        if edits.len() == 1 {
            String::new()
        } else {
            format!("edits[{i}]: ")
        }
    };

    let mut spans: Vec<(usize, usize, usize, String)> = Vec::with_capacity(edits.len());
    for (i, edit) in edits.iter().enumerate() {
        let old = edit.old_text.replace("\r\n", "\n");
        let new = edit.new_text.replace("\r\n", "\n");
        if old.is_empty() {
            return Err(format!(
                "{}old_text is empty; give the exact text to replace.",
                name(i)
            ));
        }
        if old == new {
            return Err(format!(
                "{}old_text and new_text are identical; this edit would change nothing.",
                name(i)
            ));
        }
        let found = occurrences(&text, &old);
        match found.len() {
            0 => {
                return Err(format!(
                    "{}Could not find the exact text in {label}. old_text must match exactly, including all \
                     whitespace and newlines.{}",
                    name(i),
                    file_excerpt(&text)
                ))
            }
            1 => spans.push((found[0], found[0] + old.len(), i, new)),
            n => {
                return Err(format!(
                    "{}Found {n} occurrences of the text in {label}; it must occur exactly once. Add surrounding \
                     lines to old_text to make it unique.",
                    name(i)
                ))
            }
        }
    }
    spans.sort_by_key(|s| (s.0, s.1));
    for pair in spans.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if b.0 < a.1 {
            return Err(format!(
                "edits[{}] and edits[{}] overlap in {label}; merge them into one edit.",
                a.2.min(b.2),
                a.2.max(b.2)
            ));
        }
    }

    let mut new_text = String::with_capacity(text.len());
    let mut copied = 0;
    for (start, end, _, new) in &spans {
        new_text.push_str(&text[copied..*start]);
        new_text.push_str(new);
        copied = *end;
    }
    new_text.push_str(&text[copied..]);
    if new_text == text {
        return Err(format!(
            "No changes made to {label}: the edits produce the original content."
        ));
    }

    let diff = TextDiff::from_lines(&text, &new_text);
    let first_changed_line = diff
        .ops()
        .iter()
        .find(|op| op.tag() != DiffTag::Equal)
        .map_or(1, |op| op.new_range().start + 1);
    let unified = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{label}"), &format!("b/{label}"))
        .to_string();

    let mut new_content = String::with_capacity(new_text.len() + 16);
    if bom {
        new_content.push(BOM);
    }
    if crlf {
        new_content.push_str(&new_text.replace('\n', "\r\n"));
    } else {
        new_content.push_str(&new_text);
    }
    Ok(Edited {
        new_content,
        diff: unified,
        first_changed_line,
    })
}

/// The file's line ending is CRLF when its first line break is `\r\n`.
fn uses_crlf(text: &str) -> bool {
    match text.find('\n') {
        Some(i) => i > 0 && text.as_bytes()[i - 1] == b'\r',
        None => false,
    }
}

/// Reads, edits and atomically rewrites one regular file of at most [`MAX_EDIT_BYTES`].
fn edit_file(
    path: &std::path::Path,
    shown: &str,
    edits: &[Replacement],
) -> Result<Edited, ToolError> {
    let (file, meta) = open_regular(path, shown, "edit")?;
    let too_large = |bytes: u64| {
        ToolError::RespondToModel(format!(
            "{shown} is {}, over edit's {} limit; change a file this large with bash (sed, a script).",
            format_size(usize::try_from(bytes).unwrap_or(usize::MAX)),
            format_size(MAX_EDIT_BYTES as usize)
        ))
    };
    if meta.len() > MAX_EDIT_BYTES {
        return Err(too_large(meta.len()));
    }
    let bytes = read_at_most(&file, MAX_EDIT_BYTES)
        .map_err(|e| ToolError::RespondToModel(format!("Cannot read {shown}: {e}")))?
        .ok_or_else(|| too_large(MAX_EDIT_BYTES + 1))?;
    drop(file);
    if let Some(reason) = binary_reason(&bytes) {
        return Err(ToolError::RespondToModel(format!(
            "{shown} looks like a binary file ({reason}); edit only changes text files."
        )));
    }
    let original = String::from_utf8(bytes).map_err(|_| {
        ToolError::RespondToModel(format!(
            "{shown} is not valid UTF-8; edit only changes UTF-8 text files."
        ))
    })?;
    let edited = apply_edits(&original, edits, shown).map_err(ToolError::RespondToModel)?;
    atomic_write(path, edited.new_content.as_bytes())
        .map_err(|e| ToolError::RespondToModel(format!("Cannot write {shown}: {e}")))?;
    Ok(edited)
}

#[async_trait]
impl Tool for EditTool {
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
        let args: EditArgs = parse_arguments("edit", args)?;
        let path = resolve_path(ctx, &args.path)?;
        let shown = args.path.clone();
        let (target, label) = (path.clone(), shown.clone());
        let edits = args.edits.clone();
        // Reading, diffing and writing all happen on the blocking thread: an abort returns at once. An abort after
        // the write started may still let it land; the rename is atomic, so the file is either old or new.
        let edited = ctx
            .run_blocking("edit", move || edit_file(&target, &label, &edits))
            .await?;
        let n = args.edits.len();
        let summary = if n == 1 {
            format!("Successfully replaced 1 block in {shown}.")
        } else {
            format!("Successfully replaced {n} blocks in {shown}.")
        };
        Ok(ToolOutput::new(
            format!("{summary}\n\n{}", edited.diff),
            json!({
                "path": path,
                "diff": edited.diff,
                "first_changed_line": edited.first_changed_line,
                "edits": n,
            }),
        ))
    }
}
