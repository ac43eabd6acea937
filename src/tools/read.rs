//! `read {path, offset?, limit?}`: a text file's lines (1-indexed), head-truncated at 2,000 lines or 50 KB with a
//! note telling the model which `offset` continues. Binary files are refused.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::policy::resolve_path;
use super::tool::{
    builtin_spec, parse_arguments, PolicyTag, Tool, ToolContext, ToolError, ToolOutput,
};
use super::truncate::{format_size, split_lines, truncate_head, Limits, DEFAULT_MAX_BYTES};
use crate::schema::ToolSpec;

/// How many leading bytes are inspected to decide whether a file is binary.
const BINARY_SNIFF_BYTES: usize = 8 * 1024;

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

#[async_trait]
impl Tool for ReadTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn tags(&self) -> &[PolicyTag] {
        &[PolicyTag::ReadOnly]
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: ReadArgs = parse_arguments("read", args)?;
        let path = resolve_path(ctx, &args.path)?;
        let shown = &args.path;
        let meta = tokio::fs::metadata(&path)
            .await
            .map_err(|e| ToolError::RespondToModel(format!("Cannot read {shown}: {e}")))?;
        if meta.is_dir() {
            return Err(ToolError::RespondToModel(format!(
                "{shown} is a directory, not a file. Use ls to list it."
            )));
        }
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| ToolError::RespondToModel(format!("Cannot read {shown}: {e}")))?;
        if let Some(reason) = binary_reason(&bytes) {
            return Err(ToolError::RespondToModel(format!(
                "{shown} looks like a binary file ({reason}, {}); read only shows text files.",
                format_size(bytes.len())
            )));
        }
        let text = String::from_utf8_lossy(&bytes);
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        let lines = split_lines(text);
        let total = lines.len();

        // Models often send 0 for "the start"; treat it as line 1.
        let start = usize::try_from(args.offset.unwrap_or(1).max(1)).unwrap_or(usize::MAX);
        if start > total.max(1) {
            return Err(ToolError::RespondToModel(format!(
                "Offset {start} is beyond the end of {shown} ({total} lines total)."
            )));
        }
        let first = start - 1;
        let end = match args.limit {
            Some(0) => {
                return Err(ToolError::RespondToModel(
                    "limit must be at least 1.".into(),
                ))
            }
            Some(limit) => {
                total.min(first.saturating_add(usize::try_from(limit).unwrap_or(usize::MAX)))
            }
            None => total,
        };
        let mut selected = lines.get(first..end).unwrap_or(&[]).join("\n");
        if end == total && end > first && text.ends_with('\n') {
            selected.push('\n');
        }
        let truncation = truncate_head(&selected, Limits::default());

        let content = if truncation.first_line_exceeds_limit {
            format!(
                "[Line {start} is {}, over the {} limit. Use bash: sed -n '{start}p' {shown} | head -c {DEFAULT_MAX_BYTES}]",
                format_size(lines.get(first).map_or(0, |l| l.len())),
                format_size(DEFAULT_MAX_BYTES),
            )
        } else if truncation.truncated() {
            let last = start + truncation.output_lines - 1;
            let limit_note = match truncation.truncated_by {
                Some(super::truncate::TruncatedBy::Bytes) => {
                    format!(" ({} limit)", format_size(DEFAULT_MAX_BYTES))
                }
                _ => String::new(),
            };
            format!(
                "{}\n\n[Showing lines {start}-{last} of {total}{limit_note}. Use offset={} to continue.]",
                truncation.content,
                last + 1
            )
        } else if end < total {
            format!(
                "{}\n\n[{} more lines in file. Use offset={} to continue.]",
                truncation.content,
                total - end,
                end + 1
            )
        } else if total == 0 {
            "(empty file)".to_string()
        } else {
            truncation.content.clone()
        };
        let shown_end = if truncation.first_line_exceeds_limit {
            start - 1
        } else {
            start + truncation.output_lines - 1
        };
        Ok(ToolOutput::new(
            content,
            json!({
                "path": path,
                "start_line": start,
                "end_line": shown_end,
                "total_lines": total,
                "truncation": truncation.truncated().then_some(&truncation),
            }),
        ))
    }
}
