//! `read {path, offset?, limit?}`: a text file's lines (1-indexed), head-truncated at 2,000 lines or 50 KB with a
//! note telling the model which `offset` continues. Binary files and anything but regular files (FIFOs, devices,
//! sockets) are refused. The file is streamed, never loaded: only the requested page is kept in memory, so the
//! first lines of a 10 GB log cost what they show. Lines are counted to the end only in files up to
//! [`COUNT_LINES_MAX_BYTES`]; for larger ones the note names the file's size instead of its line count.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Read as _, Seek as _};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::policy::resolve_path;
use super::support::file_access::open_regular;
use super::support::truncate::{format_size, Limits, TruncatedBy, DEFAULT_MAX_BYTES};
use super::support::workspace::with_file_suggestions;
use super::support::workspace::WorkspaceState;
use super::tool::with_property;
use super::tool::{
    aborted, builtin_spec, parse_arguments, PolicyTag, Tool, ToolContext, ToolError, ToolOutput,
};
use crate::schema::ToolSpec;

/// The largest `offset` or `limit` the workspace grammar lets a model write (a line number no file here has).
pub const MAX_LINE_ARGUMENT: u64 = 10_000_000;

/// How many leading bytes are inspected to decide whether a file is binary.
const BINARY_SNIFF_BYTES: usize = 8 * 1024;
/// Files up to this size (64 MiB) have their lines counted to the end, so the note says "of N"; larger files are
/// read only as far as the page needs.
pub const COUNT_LINES_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// How often, in bytes read, the reading thread checks for an abort.
const CANCEL_CHECK_BYTES: u64 = 1024 * 1024;

/// Arguments of `read`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadArgs {
    /// Path of the file to read, relative to the working directory or absolute.
    pub path: String,
    /// Line number to start reading from (1-indexed). Defaults to 1.
    #[serde(default)]
    pub offset: Option<u64>,
    /// Maximum number of lines to read.
    #[serde(default)]
    pub limit: Option<u64>,
}

/// The `read` tool.
pub struct ReadTool {
    spec: ToolSpec,
}

impl ReadTool {
    pub fn new() -> Self {
        Self {
            spec: builtin_spec::<ReadArgs>(
                "read",
                "Read the contents of a text file. Output is truncated to 2000 lines or 50KB (whichever is hit \
                 first); the note at the end says which offset continues. Use offset/limit for large files. Binary \
                 files are refused.",
            ),
        }
    }
}

impl Default for ReadTool {
    fn default() -> Self {
        Self::new()
    }
}

/// Why `bytes` (a file's start) is not text, or `None` when it looks like text: a NUL byte, or invalid UTF-8
/// (a sequence cut by the sniff window does not count).
pub fn binary_reason(bytes: &[u8]) -> Option<&'static str> {
    let head = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    if head.contains(&0) {
        return Some("it contains NUL bytes");
    }
    match std::str::from_utf8(head) {
        Ok(_) => None,
        // `error_len() == None`: an incomplete sequence at the end of the window, which is fine.
        Err(e) if e.error_len().is_none() => None,
        Err(_) => Some("it is not valid UTF-8"),
    }
}

/// Reads a file line by line, keeping at most a cap of each line, checking for an abort as it goes.
struct LineReader<'a> {
    inner: BufReader<File>,
    cancel: &'a CancellationToken,
    shown: &'a str,
    until_check: u64,
}

/// One line as read: its length in bytes (all of it unless `complete` is false) and whether a `\n` ended it.
struct Line {
    len: u64,
    newline: bool,
    /// False when reading stopped at the cap in the middle of the line (the reader is then mid-line).
    complete: bool,
}

impl<'a> LineReader<'a> {
    fn new(file: File, cancel: &'a CancellationToken, shown: &'a str) -> Self {
        Self {
            inner: BufReader::with_capacity(64 * 1024, file),
            cancel,
            shown,
            until_check: CANCEL_CHECK_BYTES,
        }
    }

    /// The next line: its first `cap` bytes appended to `out` (without the `\n`); `None` at the end of the file.
    /// With `stop_at_cap`, reading stops once `out` holds `cap` bytes of an unfinished line, so a 10 GB line is
    /// not scanned to its end just to be refused.
    fn next_line(
        &mut self,
        cap: usize,
        out: &mut Vec<u8>,
        stop_at_cap: bool,
    ) -> Result<Option<Line>, ToolError> {
        let mut len = 0u64;
        loop {
            let buf = match self.inner.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(ToolError::RespondToModel(format!(
                        "Cannot read {}: {e}",
                        self.shown
                    )))
                }
            };
            if buf.is_empty() {
                return Ok((len > 0).then_some(Line {
                    len,
                    newline: false,
                    complete: true,
                }));
            }
            let newline = buf.iter().position(|&b| b == b'\n');
            let take = newline.unwrap_or(buf.len());
            let room = cap.saturating_sub(out.len()).min(take);
            out.extend_from_slice(&buf[..room]);
            len += take as u64;
            let consumed = take + usize::from(newline.is_some());
            self.inner.consume(consumed);
            self.until_check = self.until_check.saturating_sub(consumed as u64);
            if self.until_check == 0 {
                if self.cancel.is_cancelled() {
                    return Err(aborted("read"));
                }
                self.until_check = CANCEL_CHECK_BYTES;
            }
            if newline.is_some() {
                return Ok(Some(Line {
                    len,
                    newline: true,
                    complete: true,
                }));
            }
            if stop_at_cap && out.len() >= cap {
                return Ok(Some(Line {
                    len,
                    newline: false,
                    complete: false,
                }));
            }
        }
    }
}

/// What one `read` call found: the kept lines of the page and what the note needs.
struct Page {
    kept: Vec<String>,
    kept_bytes: usize,
    truncated_by: Option<TruncatedBy>,
    /// The length of the page's first line when it alone is over the byte limit (nothing kept); `None` when
    /// reading stopped at the limit without measuring it.
    first_line_len: Option<u64>,
    /// The page stopped because `limit` lines were kept.
    ended_by_limit: bool,
    /// The last kept line ended with a newline.
    last_newline: bool,
    /// Lines in the file; `None` when the file is too large to count and the end was not reached.
    total_lines: Option<usize>,
    file_bytes: u64,
}

/// Reads the page of `limit` lines from line `start` (1-indexed) of an open regular file.
fn read_page(
    file: File,
    file_bytes: u64,
    start: usize,
    limit: usize,
    limits: Limits,
    cancel: &CancellationToken,
    shown: &str,
) -> Result<Page, ToolError> {
    let cannot = |e: std::io::Error| ToolError::RespondToModel(format!("Cannot read {shown}: {e}"));
    let mut head = Vec::with_capacity(BINARY_SNIFF_BYTES);
    (&file)
        .take(BINARY_SNIFF_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(cannot)?;
    if let Some(reason) = binary_reason(&head) {
        return Err(ToolError::RespondToModel(format!(
            "{shown} looks like a binary file ({reason}, {}); read only shows text files.",
            format_size(usize::try_from(file_bytes).unwrap_or(usize::MAX))
        )));
    }
    (&file).rewind().map_err(cannot)?;
    drop(head);

    let mut lines = LineReader::new(file, cancel, shown);
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    while line_no < start - 1 {
        buf.clear();
        if lines.next_line(0, &mut buf, false)?.is_none() {
            break;
        }
        line_no += 1;
    }
    // Lines of a file too large to count are not read past the limit: the page stops there anyway.
    let countable = file_bytes <= COUNT_LINES_MAX_BYTES;

    let mut page = Page {
        kept: Vec::new(),
        kept_bytes: 0,
        truncated_by: None,
        first_line_len: None,
        ended_by_limit: false,
        last_newline: false,
        total_lines: None,
        file_bytes,
    };
    let mut eof = false;
    loop {
        if page.kept.len() >= limit {
            page.ended_by_limit = true;
            break;
        }
        buf.clear();
        let Some(line) = lines.next_line(limits.max_bytes + 1, &mut buf, !countable)? else {
            eof = true;
            break;
        };
        line_no += 1;
        if page.kept.len() >= limits.max_lines {
            page.truncated_by = Some(TruncatedBy::Lines);
            break;
        }
        let mut text = String::from_utf8_lossy(&buf).into_owned();
        if line_no == 1 && text.starts_with('\u{feff}') {
            text.drain(..'\u{feff}'.len_utf8());
        }
        let whole = line.len <= buf.len() as u64;
        let len = if whole {
            text.len()
        } else {
            usize::try_from(line.len).unwrap_or(usize::MAX)
        };
        let cost = len.saturating_add(usize::from(!page.kept.is_empty()));
        if page.kept_bytes.saturating_add(cost) > limits.max_bytes {
            page.truncated_by = Some(TruncatedBy::Bytes);
            if page.kept.is_empty() {
                page.first_line_len = line.complete.then_some(len as u64);
            }
            break;
        }
        page.kept_bytes += cost;
        page.kept.push(text);
        page.last_newline = line.newline;
    }

    page.total_lines = if eof {
        Some(line_no)
    } else if countable {
        loop {
            buf.clear();
            if lines.next_line(0, &mut buf, false)?.is_none() {
                break Some(line_no);
            }
            line_no += 1;
        }
    } else if page.ended_by_limit {
        // Too large to count: only look whether anything follows the page.
        buf.clear();
        match lines.next_line(0, &mut buf, true)? {
            None => Some(line_no),
            Some(_) => None,
        }
    } else {
        None
    };
    Ok(page)
}

#[async_trait]
impl Tool for ReadTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn tags(&self) -> &[PolicyTag] {
        &[PolicyTag::ReadOnly]
    }

    fn argument_grammar(&self, workspace: &WorkspaceState) -> Option<serde_json::Value> {
        let path = workspace.existing_path_schema(true, false, None);
        let mut grammar = with_property(&self.spec.parameters, "path", path);
        // Bounded line numbers: an unbounded integer lets a small model write digits until the token limit.
        for key in ["offset", "limit"] {
            if let Some(p) = grammar.pointer_mut(&format!("/properties/{key}")) {
                p["minimum"] = serde_json::json!(1);
                p["maximum"] = serde_json::json!(MAX_LINE_ARGUMENT);
            }
        }
        Some(grammar)
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: ReadArgs = parse_arguments("read", args)?;
        let path = resolve_path(ctx, &args.path)?;
        let shown = args.path.clone();
        // Models often send 0 for "the start"; treat it as line 1.
        let start = usize::try_from(args.offset.unwrap_or(1).max(1)).unwrap_or(usize::MAX);
        let limit = match args.limit {
            Some(0) => {
                return Err(ToolError::RespondToModel(
                    "limit must be at least 1.".into(),
                ))
            }
            Some(limit) => usize::try_from(limit).unwrap_or(usize::MAX),
            None => usize::MAX,
        };
        let limits = Limits::default();
        let (target, label, cancel) = (path.clone(), shown.clone(), ctx.cancel.clone());
        let page = ctx
            .run_blocking("read", move || {
                let (file, meta) = open_regular(&target, &label, "read")?;
                read_page(file, meta.len(), start, limit, limits, &cancel, &label)
            })
            .await
            .map_err(|e| {
                with_file_suggestions(e, ctx.workspace_state.as_ref(), &ctx.cwd, &shown, &path)
            })?;
        if let Some(total) = page.total_lines {
            if start > total.max(1) {
                return Err(ToolError::RespondToModel(format!(
                    "Offset {start} is beyond the end of {shown} ({total} lines total)."
                )));
            }
        }
        // The model has seen the file as it is only when the page held all of it.
        if start == 1 && page.truncated_by.is_none() && !page.ended_by_limit {
            ctx.saw(&path);
        }
        Ok(render(&page, start, &shown, &path, limits))
    }
}

/// The page as the model sees it, with the note that says how to continue, and the details.
fn render(
    page: &Page,
    start: usize,
    shown: &str,
    path: &std::path::Path,
    limits: Limits,
) -> ToolOutput {
    let kept = page.kept.len();
    // The last line shown (start - 1 when nothing is).
    let end = (start - 1).saturating_add(kept);
    let of_total = match page.total_lines {
        Some(total) => total.to_string(),
        None => format!(
            "a {} file",
            format_size(usize::try_from(page.file_bytes).unwrap_or(usize::MAX))
        ),
    };
    let first_line_too_long = page.truncated_by == Some(TruncatedBy::Bytes) && kept == 0;
    let content = if first_line_too_long {
        let size = match page.first_line_len {
            Some(len) => format!(
                "{}, over",
                format_size(usize::try_from(len).unwrap_or(usize::MAX))
            ),
            None => "over".to_string(),
        };
        format!(
            "[Line {start} is {size} the {} limit. Use bash: sed -n '{start}p' {shown} | head -c {DEFAULT_MAX_BYTES}]",
            format_size(DEFAULT_MAX_BYTES),
        )
    } else if page.truncated_by.is_some() {
        let limit_note = match page.truncated_by {
            Some(TruncatedBy::Bytes) => format!(" ({} limit)", format_size(limits.max_bytes)),
            _ => String::new(),
        };
        format!(
            "{}\n\n[Showing lines {start}-{end} of {of_total}{limit_note}. Use offset={} to continue.]",
            page.kept.join("\n"),
            end + 1
        )
    } else if page.ended_by_limit && page.total_lines != Some(end) {
        let more = match page.total_lines {
            Some(total) => format!("{} more lines in file", total - end),
            None => format!("More lines in {of_total}"),
        };
        format!(
            "{}\n\n[{more}. Use offset={} to continue.]",
            page.kept.join("\n"),
            end + 1
        )
    } else if page.total_lines == Some(0) {
        "(empty file)".to_string()
    } else {
        let mut whole = page.kept.join("\n");
        if page.last_newline {
            whole.push('\n');
        }
        whole
    };
    let truncation = page.truncated_by.map(|by| {
        json!({
            "truncated_by": by,
            "output_lines": kept,
            "output_bytes": page.kept_bytes,
            "first_line_exceeds_limit": first_line_too_long,
            "max_lines": limits.max_lines,
            "max_bytes": limits.max_bytes,
        })
    });
    ToolOutput::new(
        content,
        json!({
            "path": path,
            "start_line": start,
            "end_line": end,
            "total_lines": page.total_lines,
            "file_bytes": page.file_bytes,
            "truncation": truncation,
        }),
    )
}
