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

use super::policy::resolve_path;
use super::read::binary_reason;
use super::support::edit_match::{self, closest_lines, line_of, occurrences, Miss};
use super::support::file_access::{open_regular, read_at_most};
use super::support::truncate::format_size;
use super::support::workspace::with_file_suggestions;
use super::support::workspace::WorkspaceState;
use super::tool::with_property;
use super::tool::{
    builtin_spec, parse_arguments, PolicyTag, Tool, ToolContext, ToolError, ToolOutput,
};
use super::write::atomic_write;
use crate::schema::{extensions, ToolSpec};

const BOM: char = '\u{feff}';

/// How an edit of a file the model has not seen as it is now begins (Claude Code's rule: read before you edit).
/// The file's text follows, and the file is then seen, so the same edit may be sent again: the loop rules do not
/// count this answer as the call's failure.
pub const UNREAD_REFUSAL: &str = "Not edited yet:";
/// The largest unread file whose text the refusal shows (a larger one is edited as it is).
pub const UNREAD_SHOWN_BYTES: u64 = 64 * 1024;
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
    /// The changed lines as they now read, with a line of context each side.
    pub changed_region: String,
    /// How the forgiving matches were made (empty when every old_text matched exactly).
    pub notes: Vec<String>,
}

/// The file's text for a failed match, so the model can copy the exact text on its next try instead of guessing
/// again: the whole file when it is short, else its first lines (a `read` shows the rest).
pub fn file_excerpt(text: &str) -> String {
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

/// The message for an `old_text` not found once: where it is ambiguous, or the closest real lines and whether
/// the new text is already there.
fn miss_message(miss: Miss, text: &str, edit: &Replacement, label: &str, name: &str) -> String {
    match miss {
        Miss::Ambiguous { lines, rule } => {
            let how = rule.note().map(|n| format!(" ({n})")).unwrap_or_default();
            format!(
                "{name}old_text occurs {} times in {label}{how}, at lines {}; it must occur exactly once. Add \
                 surrounding lines to old_text to make it unique.",
                lines.len(),
                lines.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", ")
            )
        }
        Miss::NotFound => {
            let new = edit.new_text.replace("\r\n", "\n");
            let mut msg = format!("{name}Could not find old_text in {label}.");
            let done = occurrences(text, &new);
            if !new.trim().is_empty() && !done.is_empty() {
                msg.push_str(&format!(
                    " The new text is already in {label} (line {}): this change may be done already.",
                    line_of(text, done[0])
                ));
            }
            if let Some(near) = closest_lines(text, &edit.old_text.replace("\r\n", "\n")) {
                msg.push_str(&format!(
                    "\nThe closest lines in {label} (with line numbers, which are not part of the file):\n{near}\n\
                     Copy old_text exactly from the file."
                ));
            }
            msg
        }
    }
}

/// Applies `edits` to `original` (all or nothing). `label` names the file in messages and the diff header.
/// Each `old_text` is found by [`edit_match::find`] (exact first, then the forgiving rules), against the original.
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
    let mut rules = Vec::new();
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
        match edit_match::find(&text, &old, &new) {
            Ok(found) => {
                rules.push(found.rule);
                spans.push((found.start, found.end, i, found.replacement));
            }
            Err(miss) => return Err(miss_message(miss, &text, edit, label, &name(i))),
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
    let changed_region = changed_region(&new_text, &diff);
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
    let notes = rules
        .iter()
        .filter_map(|r| r.note())
        .map(str::to_string)
        .collect();
    Ok(Edited {
        new_content,
        diff: unified,
        first_changed_line,
        changed_region,
        notes,
    })
}

/// The changed lines of `new_text` as they now read, with one line of context around each change (what the
/// model sees after an edit: the result, not a diff with numbers to copy).
fn changed_region(new_text: &str, diff: &TextDiff<'_, '_, '_, str>) -> String {
    let lines: Vec<&str> = new_text.lines().collect();
    let mut keep = vec![false; lines.len()];
    for op in diff.ops() {
        if op.tag() == DiffTag::Equal {
            continue;
        }
        let r = op.new_range();
        let (from, to) = (r.start.saturating_sub(1), (r.end + 1).min(lines.len()));
        for k in keep.iter_mut().take(to).skip(from) {
            *k = true;
        }
    }
    let mut out = String::new();
    let mut last = None;
    for (i, line) in lines.iter().enumerate().filter(|(i, _)| keep[*i]) {
        if last.is_some_and(|l: usize| l + 1 != i) {
            out.push_str("…\n");
        }
        out.push_str(line);
        out.push('\n');
        last = Some(i);
    }
    out
}

/// The file's line ending is CRLF when its first line break is `\r\n`.
fn uses_crlf(text: &str) -> bool {
    match text.find('\n') {
        Some(i) => i > 0 && text.as_bytes()[i - 1] == b'\r',
        None => false,
    }
}

/// Reads, edits and atomically rewrites one regular file of at most [`MAX_EDIT_BYTES`]. A miss on a file the
/// model has not seen as it is now (`attach_text`) carries the file's text.
fn edit_file(
    path: &std::path::Path,
    shown: &str,
    edits: &[Replacement],
    attach_text: bool,
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
    let edited = apply_edits(&original, edits, shown).map_err(|why| {
        let text = original
            .strip_prefix(BOM)
            .unwrap_or(&original)
            .replace("\r\n", "\n");
        match attach_text {
            true => {
                ToolError::RespondToModel(format!("{why}\n{}", file_excerpt(&text).trim_start()))
            }
            false => ToolError::RespondToModel(why),
        }
    })?;
    if let Some(why) =
        super::support::syntax_check::breaks_syntax(path, &original, &edited.new_content)
    {
        return Err(ToolError::RespondToModel(format!(
            "Not edited: this change would break {shown}'s syntax ({why}), so {shown} is unchanged. After the \
             edit those lines would have read:\n{}\nFix old_text or new_text (mind the indentation) and send the \
             edit again.",
            edited.changed_region
        )));
    }
    atomic_write(path, edited.new_content.as_bytes())
        .map_err(|e| ToolError::RespondToModel(format!("Cannot write {shown}: {e}")))?;
    Ok(edited)
}

/// The `edit` grammar in this workspace: one branch per file whose text the model may take `old_text` from (seen
/// this session and unchanged, or small: `WorkspaceState::editable_texts`), `old_text` a non-empty substring of
/// that text; one more branch for any other existing file, `old_text` free. `None` when nothing exists.
pub fn edit_grammar(
    parameters: &serde_json::Value,
    workspace: &WorkspaceState,
) -> Option<serde_json::Value> {
    let listing = workspace.listing();
    if listing.files.is_empty() {
        return None;
    }
    let editable = workspace.editable_texts();
    let item = |old_text: serde_json::Value| {
        json!({"type": "object", "properties": {
            "old_text": old_text, "new_text": {"type": "string"}},
            "required": ["old_text", "new_text"], "additionalProperties": false})
    };
    let branch = |path: serde_json::Value, old_text: serde_json::Value| {
        let mut edits = parameters
            .pointer("/properties/edits")
            .cloned()
            .unwrap_or_else(|| json!({"type": "array"}));
        edits["items"] = item(old_text);
        edits["minItems"] = json!(1);
        let mut b = with_property(parameters, "path", path);
        b["properties"]["edits"] = edits;
        b
    };
    let mut branches: Vec<serde_json::Value> = editable
        .iter()
        .map(|(rel, text)| {
            branch(
                json!({"const": rel}),
                json!({"type": "string", (extensions::SUBSTRING_OF): text, (extensions::SUBSTRING_UNIT): "line"}),
            )
        })
        .collect();
    let others: Vec<&String> = listing
        .files
        .iter()
        .filter(|f| !editable.iter().any(|(r, _)| r == *f))
        .collect();
    if !others.is_empty() {
        branches.push(branch(
            json!({"type": "string", (extensions::ENUM): others}),
            json!({"type": "string", "minLength": 1}),
        ));
    }
    Some(json!({"anyOf": branches}))
}

#[async_trait]
impl Tool for EditTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn tags(&self) -> &[PolicyTag] {
        &[PolicyTag::Write]
    }

    fn argument_grammar(&self, workspace: &WorkspaceState) -> Option<serde_json::Value> {
        edit_grammar(&self.spec.parameters, workspace)
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
        let seen = ctx
            .workspace_state
            .as_ref()
            .is_none_or(|s| s.has_seen(&path));
        if !seen {
            if let Some(text) = ctx.scope().read_text(&path, UNREAD_SHOWN_BYTES) {
                ctx.saw(&path);
                let text = text
                    .strip_prefix(BOM)
                    .unwrap_or(&text)
                    .replace("\r\n", "\n");
                return Err(ToolError::RespondToModel(format!(
                    "{UNREAD_REFUSAL} {shown} had not been read in this session (or it changed since), so old_text \
                     was not checked against it. {}\nSend the edit again with old_text copied exactly from this \
                     text.",
                    file_excerpt(&text).trim_start()
                )));
            }
        }
        // Reading, diffing and writing all happen on the blocking thread: an abort returns at once. An abort after
        // the write started may still let it land; the rename is atomic, so the file is either old or new.
        let edited = ctx
            .run_blocking("edit", move || edit_file(&target, &label, &edits, !seen))
            .await
            .map_err(|e| {
                with_file_suggestions(e, ctx.workspace_state.as_ref(), &ctx.cwd, &shown, &path)
            })?;
        ctx.saw(&path);
        ctx.tree_changed();
        let n = args.edits.len();
        let how = match edited.notes.is_empty() {
            true => String::new(),
            false => format!(" ({})", edited.notes.join("; ")),
        };
        Ok(ToolOutput::new(
            format!(
                "Edited {shown}{how}. The changed part of {shown} now reads:\n{}\nIf the task is done, reply \
                 with a short summary; otherwise make the next change.",
                edited.changed_region
            ),
            json!({
                "path": path,
                "diff": edited.diff,
                "first_changed_line": edited.first_changed_line,
                "edits": n,
                "notes": edited.notes,
            }),
        ))
    }
}
