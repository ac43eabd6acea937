//! `find {pattern, path?, limit?}`: files and directories whose name (or, for a pattern containing `/`, whose
//! path relative to the search directory) matches a glob. Walks with ripgrep's `ignore` crate, so `.gitignore`
//! is respected; dotfiles are included, `.git` is never entered. Also home of the walker the search tools share.

use std::path::Path;

use async_trait::async_trait;
use globset::{GlobBuilder, GlobMatcher};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::policy::resolve_path;
use super::support::truncate::{format_size, truncate_head, Limits, DEFAULT_MAX_BYTES};
use super::support::workspace::{walk_builder, WorkspaceState};
use super::tool::with_property;
use super::tool::{
    builtin_spec, parse_arguments, PolicyTag, Tool, ToolContext, ToolError, ToolOutput,
};
use crate::schema::ToolSpec;

/// Results returned when the call gives no limit.
pub const DEFAULT_FIND_LIMIT: usize = 1000;

/// Arguments of `find`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct FindArgs {
    /// Glob pattern, e.g. '*.rs', '**/*.json' or 'src/**/*_test.rs'. A pattern without '/' matches file names;
    /// one with '/' matches paths relative to the search directory.
    pub pattern: String,
    /// Directory to search in. Defaults to the working directory.
    #[serde(default)]
    pub path: Option<String>,
    /// Maximum number of results (default 1000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// The `find` tool.
pub struct FindTool {
    spec: ToolSpec,
}

impl FindTool {
    pub fn new() -> Self {
        Self {
            spec: builtin_spec::<FindArgs>(
                "find",
                "Find files by glob pattern. Returns paths relative to the search directory, directories marked \
                 with '/'. Respects .gitignore. Output is limited to 1000 results by default.",
            ),
        }
    }
}

impl Default for FindTool {
    fn default() -> Self {
        Self::new()
    }
}

/// A glob the search tools match: against the file name, or against the relative path when it contains `/`.
pub(crate) struct PathGlob {
    matcher: GlobMatcher,
    full_path: bool,
}

impl PathGlob {
    pub(crate) fn new(pattern: &str) -> Result<Self, String> {
        let full_path = pattern.contains('/');
        let glob = GlobBuilder::new(pattern)
            .literal_separator(full_path)
            .build()
            .map_err(|e| format!("Invalid glob pattern '{pattern}': {e}"))?;
        Ok(Self {
            matcher: glob.compile_matcher(),
            full_path,
        })
    }

    /// Whether `relative` (a path under the search root) matches.
    pub(crate) fn is_match(&self, relative: &Path) -> bool {
        if self.full_path {
            self.matcher.is_match(relative)
        } else {
            relative
                .file_name()
                .is_some_and(|name| self.matcher.is_match(Path::new(name)))
        }
    }
}

/// Matches under `root`: up to `limit` relative paths, and whether the limit cut the list.
fn search(
    root: &Path,
    glob: &PathGlob,
    limit: usize,
    cancel: &CancellationToken,
) -> (Vec<String>, bool) {
    let mut found = Vec::new();
    for entry in walk_builder(root).build() {
        if cancel.is_cancelled() {
            break;
        }
        let Ok(entry) = entry else { continue };
        if entry.depth() == 0 {
            continue;
        }
        let Ok(relative) = entry.path().strip_prefix(root) else {
            continue;
        };
        if !glob.is_match(relative) {
            continue;
        }
        if found.len() == limit {
            return (found, true);
        }
        let mut shown = relative.to_string_lossy().into_owned();
        if entry.file_type().is_some_and(|t| t.is_dir()) {
            shown.push('/');
        }
        found.push(shown);
    }
    (found, false)
}

#[async_trait]
impl Tool for FindTool {
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
        let args: FindArgs = parse_arguments("find", args)?;
        let shown = args.path.clone().unwrap_or_else(|| ".".into());
        let root = resolve_path(ctx, &shown)?;
        if !root.is_dir() {
            return Err(ToolError::RespondToModel(format!(
                "{shown} is not a directory."
            )));
        }
        let glob = PathGlob::new(&args.pattern).map_err(ToolError::RespondToModel)?;
        let limit = args.limit.unwrap_or(DEFAULT_FIND_LIMIT).max(1);
        let (walk_root, cancel) = (root.clone(), ctx.cancel.clone());
        let (found, limit_reached) =
            tokio::task::spawn_blocking(move || search(&walk_root, &glob, limit, &cancel))
                .await
                .map_err(|e| ToolError::Fatal(format!("find task failed: {e}")))?;
        if found.is_empty() {
            return Ok(ToolOutput::new(
                format!("No files found matching pattern '{}'", args.pattern),
                json!({ "path": root, "results": 0, "limit_reached": false }),
            ));
        }
        let truncation = truncate_head(
            &found.join("\n"),
            Limits {
                max_lines: usize::MAX,
                max_bytes: DEFAULT_MAX_BYTES,
            },
        );
        let mut notes = Vec::new();
        if limit_reached {
            notes.push(format!(
                "{limit} results limit reached. Use limit={} for more, or refine pattern",
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
                "path": root,
                "results": truncation.output_lines,
                "limit_reached": limit_reached,
            }),
        ))
    }
}
