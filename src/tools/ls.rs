//! `ls {path?, limit?}`: one directory's entries, sorted case-insensitively, directories marked with `/`,
//! dotfiles included, entries ignored by `.gitignore` (and `.ignore`) left out, `.git` never shown.

use std::path::Path;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::policy::resolve_path;
use super::support::truncate::{format_size, truncate_head, Limits, DEFAULT_MAX_BYTES};
use super::support::workspace::walk_builder;
use super::support::workspace::WorkspaceState;
use super::tool::with_property;
use super::tool::{
    builtin_spec, parse_arguments, PolicyTag, Tool, ToolContext, ToolError, ToolOutput,
};
use crate::schema::ToolSpec;

/// Entries listed when the call gives no limit.
pub const DEFAULT_LS_LIMIT: usize = 500;

/// Arguments of `ls`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct LsArgs {
    /// Directory to list. Defaults to the working directory.
    #[serde(default)]
    pub path: Option<String>,
    /// Maximum number of entries to return (default 500).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// The `ls` tool.
pub struct LsTool {
    spec: ToolSpec,
}

impl LsTool {
    pub fn new() -> Self {
        Self {
            spec: builtin_spec::<LsArgs>(
                "ls",
                "List a directory's contents, sorted alphabetically, with '/' after directory names. Includes \
                 dotfiles; skips entries ignored by .gitignore. Output is limited to 500 entries by default.",
            ),
        }
    }
}

impl Default for LsTool {
    fn default() -> Self {
        Self::new()
    }
}

/// Lists `dir`: up to `limit` names (directories with a trailing `/`, sorted case-insensitively, `.gitignore`d
/// entries skipped), and how many there were in all.
pub fn list(dir: &Path, limit: usize) -> (Vec<String>, usize) {
    let mut entries: Vec<String> = Vec::new();
    for entry in walk_builder(dir).max_depth(Some(1)).build() {
        let entry = match entry {
            Ok(e) => e,
            // An unreadable entry (permissions, a broken ignore file) is skipped, not fatal.
            Err(_) => continue,
        };
        if entry.depth() == 0 {
            continue;
        }
        let mut name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir())
            || (entry.path_is_symlink() && entry.path().is_dir());
        if is_dir {
            name.push('/');
        }
        entries.push(name);
    }
    entries.sort_by(|a, b| a.to_lowercase().cmp(&b.to_lowercase()).then(a.cmp(b)));
    let total = entries.len();
    entries.truncate(limit);
    (entries, total)
}

#[async_trait]
impl Tool for LsTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn tags(&self) -> &[PolicyTag] {
        &[PolicyTag::ReadOnly]
    }

    fn argument_grammar(&self, workspace: &WorkspaceState) -> Option<serde_json::Value> {
        let path = workspace.existing_path_schema(false, true, None);
        Some(with_property(&self.spec.parameters, "path", path))
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: LsArgs = parse_arguments("ls", args)?;
        let shown = args.path.clone().unwrap_or_else(|| ".".into());
        let dir = resolve_path(ctx, &shown)?;
        match tokio::fs::metadata(&dir).await {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(ToolError::RespondToModel(format!(
                    "{shown} is not a directory. Use read to see a file."
                )))
            }
            Err(e) => {
                return Err(ToolError::RespondToModel(format!(
                    "Cannot list {shown}: {e}"
                )))
            }
        }
        let limit = args.limit.unwrap_or(DEFAULT_LS_LIMIT).max(1);
        let walk_dir = dir.clone();
        let (entries, total) = tokio::task::spawn_blocking(move || list(&walk_dir, limit))
            .await
            .map_err(|e| ToolError::Fatal(format!("ls task failed: {e}")))?;
        if entries.is_empty() {
            return Ok(ToolOutput::new(
                "(empty directory)",
                json!({ "path": dir, "entries": 0, "total_entries": 0 }),
            ));
        }
        let truncation = truncate_head(
            &entries.join("\n"),
            Limits {
                max_lines: usize::MAX,
                max_bytes: DEFAULT_MAX_BYTES,
            },
        );
        let mut notes = Vec::new();
        if total > limit {
            notes.push(format!(
                "{limit} entries limit reached ({total} in total). Use limit={} for more",
                limit.saturating_mul(2)
            ));
        }
        if truncation.truncated() {
            notes.push(format!("{} limit reached", format_size(DEFAULT_MAX_BYTES)));
        }
        let mut content = truncation.content.clone();
        if !notes.is_empty() {
            content = format!("{content}\n\n[{}]", notes.join(". "));
        }
        Ok(ToolOutput::new(
            content,
            json!({
                "path": dir,
                "entries": truncation.output_lines,
                "total_entries": total,
                "limit_reached": total > limit,
            }),
        ))
    }
}
