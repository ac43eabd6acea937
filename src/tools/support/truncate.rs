//! Output truncation shared by the tools, as Pi's `truncate.ts`: head truncation (file reads: keep the first
//! lines) and tail truncation (command output: keep the last lines), each at 2,000 lines or 50 KB, whichever
//! comes first. Head truncation keeps complete lines only; tail truncation may keep the end of one huge line.

use serde::Serialize;

/// Lines kept by default.
pub const DEFAULT_MAX_LINES: usize = 2000;
/// Bytes kept by default (50 KB).
pub const DEFAULT_MAX_BYTES: usize = 50 * 1024;
/// Longest line grep shows, in characters.
pub const GREP_MAX_LINE_CHARS: usize = 500;

/// How much to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_lines: usize,
    pub max_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_lines: DEFAULT_MAX_LINES,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// Which limit cut the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TruncatedBy {
    Lines,
    Bytes,
}

/// The kept text and the numbers a note to the model needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Truncation {
    /// The kept text (lines joined by `\n`; the original text unchanged when nothing was cut). Not serialized:
    /// `details` carry the numbers, the text is already in `content`.
    #[serde(skip_serializing)]
    pub content: String,
    /// `None` when everything was kept.
    pub truncated_by: Option<TruncatedBy>,
    pub total_lines: usize,
    pub total_bytes: usize,
    pub output_lines: usize,
    pub output_bytes: usize,
    /// Tail truncation only: the single kept line is the end of a line longer than `max_bytes`.
    pub last_line_partial: bool,
    /// Head truncation only: the first line alone is longer than `max_bytes`, so nothing was kept.
    pub first_line_exceeds_limit: bool,
    pub max_lines: usize,
    pub max_bytes: usize,
}

impl Truncation {
    pub fn truncated(&self) -> bool {
        self.truncated_by.is_some()
    }

    fn whole(text: &str, total_lines: usize, limits: Limits) -> Self {
        Self {
            content: text.to_string(),
            truncated_by: None,
            total_lines,
            total_bytes: text.len(),
            output_lines: total_lines,
            output_bytes: text.len(),
            last_line_partial: false,
            first_line_exceeds_limit: false,
            max_lines: limits.max_lines,
            max_bytes: limits.max_bytes,
        }
    }
}

/// The text's lines; a trailing newline ends the last line rather than starting an empty one.
pub fn split_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    let body = text.strip_suffix('\n').unwrap_or(text);
    body.split('\n').collect()
}

/// Keeps the first complete lines that fit both limits.
pub fn truncate_head(text: &str, limits: Limits) -> Truncation {
    let lines = split_lines(text);
    let total_lines = lines.len();
    if total_lines <= limits.max_lines && text.len() <= limits.max_bytes {
        return Truncation::whole(text, total_lines, limits);
    }
    let mut kept_bytes = 0usize;
    let mut kept = 0usize;
    let mut truncated_by = TruncatedBy::Lines;
    for (i, line) in lines.iter().enumerate() {
        if i >= limits.max_lines {
            truncated_by = TruncatedBy::Lines;
            break;
        }
        let cost = line.len() + usize::from(i > 0);
        if kept_bytes + cost > limits.max_bytes {
            truncated_by = TruncatedBy::Bytes;
            break;
        }
        kept_bytes += cost;
        kept += 1;
    }
    if kept == total_lines {
        // Only the trailing newline was over the byte limit.
        return Truncation::whole(text, total_lines, limits);
    }
    let content = lines[..kept].join("\n");
    Truncation {
        output_bytes: content.len(),
        content,
        truncated_by: Some(truncated_by),
        total_lines,
        total_bytes: text.len(),
        output_lines: kept,
        last_line_partial: false,
        first_line_exceeds_limit: kept == 0 && truncated_by == TruncatedBy::Bytes,
        max_lines: limits.max_lines,
        max_bytes: limits.max_bytes,
    }
}

/// Keeps the last lines that fit both limits; when even the last line is too long, keeps its end.
pub fn truncate_tail(text: &str, limits: Limits) -> Truncation {
    let lines = split_lines(text);
    let total_lines = lines.len();
    if total_lines <= limits.max_lines && text.len() <= limits.max_bytes {
        return Truncation::whole(text, total_lines, limits);
    }
    let mut kept_bytes = 0usize;
    let mut kept = 0usize;
    let mut truncated_by = TruncatedBy::Lines;
    for (i, line) in lines.iter().rev().enumerate() {
        if i >= limits.max_lines {
            truncated_by = TruncatedBy::Lines;
            break;
        }
        let cost = line.len() + usize::from(i > 0);
        if kept_bytes + cost > limits.max_bytes {
            truncated_by = TruncatedBy::Bytes;
            break;
        }
        kept_bytes += cost;
        kept += 1;
    }
    if kept == total_lines {
        // Only the trailing newline was over the byte limit.
        return Truncation::whole(text, total_lines, limits);
    }
    let (content, output_lines, last_line_partial) = match lines.last() {
        Some(last) if kept == 0 => (tail_bytes(last, limits.max_bytes).to_string(), 1, true),
        _ => (lines[total_lines - kept..].join("\n"), kept, false),
    };
    Truncation {
        output_bytes: content.len(),
        content,
        truncated_by: Some(truncated_by),
        total_lines,
        total_bytes: text.len(),
        output_lines,
        last_line_partial,
        first_line_exceeds_limit: false,
        max_lines: limits.max_lines,
        max_bytes: limits.max_bytes,
    }
}

/// The last at most `max_bytes` bytes of `text`, starting on a character boundary.
pub fn tail_bytes(text: &str, max_bytes: usize) -> &str {
    let mut start = text.len().saturating_sub(max_bytes);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The first at most `max_bytes` bytes of `text`, ending on a character boundary.
pub fn head_bytes(text: &str, max_bytes: usize) -> &str {
    let mut end = max_bytes.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A line cut to `max_chars` characters with a `... [truncated]` marker; `true` when it was cut.
pub fn truncate_line(line: &str, max_chars: usize) -> (String, bool) {
    match line.char_indices().nth(max_chars) {
        None => (line.to_string(), false),
        Some((cut, _)) => (format!("{}... [truncated]", &line[..cut]), true),
    }
}

/// `512B`, `1.5KB`, `2.0MB`, `10.0GB`.
pub fn format_size(bytes: usize) -> String {
    const KB: f64 = 1024.0;
    let b = bytes as f64;
    if b < KB {
        format!("{bytes}B")
    } else if b < KB * KB {
        format!("{:.1}KB", b / KB)
    } else if b < KB * KB * KB {
        format!("{:.1}MB", b / (KB * KB))
    } else {
        format!("{:.1}GB", b / (KB * KB * KB))
    }
}

/// The first lines of a file's text for a tool result: all of it when short, else whole lines up to
/// `max_lines` lines or `max_bytes` bytes and then the line `rest`; every line ends with `\n`. An empty file
/// reads "(the file is empty)".
pub fn preview_lines(text: &str, max_lines: usize, max_bytes: usize, rest: &str) -> String {
    if text.is_empty() {
        return "(the file is empty)".into();
    }
    let mut shown = String::new();
    for (i, line) in text.lines().enumerate() {
        if i == max_lines || shown.len() + line.len() > max_bytes {
            shown.push_str(rest);
            shown.push('\n');
            break;
        }
        shown.push_str(line);
        shown.push('\n');
    }
    shown
}

/// A changed file as a result shows it, fenced: all of it when short, else its first 60 lines (3,000 bytes).
pub fn shown_file(text: &str) -> String {
    if text.is_empty() {
        return preview_lines(text, 0, 0, "");
    }
    format!(
        "```\n{}```",
        preview_lines(text, 60, 3000, "… (the rest unchanged)")
    )
}
