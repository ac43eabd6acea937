//! `grep {pattern, path?, glob?, ignore_case?, literal?, context?, limit?}`: searches file contents with
//! ripgrep's crates (`grep-regex` matcher, `grep-searcher`, `ignore` walker), so `.gitignore` is respected and
//! binary files are skipped. Output lines are `path:line: text` for matches and `path-line- text` for context,
//! long lines cut at 500 characters, at most `limit` matches, with a note when a limit was hit. Only regular files
//! are searched (a FIFO or device given as the path is refused, met in a walk it is skipped) and each is opened
//! without blocking; files over [`MAX_GREP_FILE_BYTES`] are skipped with a note, and a line longer than
//! [`MAX_GREP_LINE_BYTES`] ends that file's search, so memory stays bounded whatever the tree holds.

use std::path::Path;

use async_trait::async_trait;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::find::PathGlob;
use super::policy::resolve_path;
use super::support::file_access::{kind_name, open_regular};
use super::support::truncate::{
    format_size, truncate_head, truncate_line, Limits, DEFAULT_MAX_BYTES, GREP_MAX_LINE_CHARS,
};
use super::support::workspace::walk_builder;
use super::support::workspace::WorkspaceState;
use super::tool::with_property;
use super::tool::{
    aborted, builtin_spec, parse_arguments, PolicyTag, Tool, ToolContext, ToolError, ToolOutput,
};
use crate::schema::ToolSpec;

/// Matches returned when the call gives no limit.
pub const DEFAULT_GREP_LIMIT: usize = 100;
/// Most context lines allowed on each side of a match.
const MAX_CONTEXT: usize = 50;
/// Files larger than this (64 MiB) are skipped, with a note; bash's `rg`/`grep` can search them.
pub const MAX_GREP_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// The searcher's buffer never grows past this (8 MiB): a longer line ends the search of its file.
pub const MAX_GREP_LINE_BYTES: usize = 8 * 1024 * 1024;
/// How many skipped files the note names.
const SKIPPED_NAMED: usize = 3;

/// Arguments of `grep`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GrepArgs {
    /// Regular expression to search for (Rust regex syntax), or a plain string when `literal` is true.
    pub pattern: String,
    /// Directory or file to search. Defaults to the working directory.
    #[serde(default)]
    pub path: Option<String>,
    /// Only search files whose name matches this glob, e.g. '*.rs' (a glob containing '/' matches the path
    /// relative to the search directory).
    #[serde(default)]
    pub glob: Option<String>,
    /// Match case-insensitively.
    #[serde(default)]
    pub ignore_case: Option<bool>,
    /// Treat the pattern as a literal string instead of a regular expression.
    #[serde(default)]
    pub literal: Option<bool>,
    /// Number of lines to show before and after each match.
    #[serde(default)]
    pub context: Option<usize>,
    /// Maximum number of matches to return (default 100).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// The `grep` tool.
pub struct GrepTool {
    spec: ToolSpec,
}

impl GrepTool {
    pub fn new() -> Self {
        Self {
            spec: builtin_spec::<GrepArgs>(
                "grep",
                "Search file contents for a regex (or a literal string). Returns matching lines as \
                 'path:line: text', with context lines as 'path-line- text'. Respects .gitignore and skips binary \
                 files. Output is limited to 100 matches by default; long lines are cut at 500 characters.",
            ),
        }
    }
}

impl Default for GrepTool {
    fn default() -> Self {
        Self::new()
    }
}

/// Everything one search produces.
#[derive(Default)]
struct Found {
    lines: Vec<String>,
    matches: usize,
    limit_reached: bool,
    lines_cut: bool,
    files_with_matches: usize,
    /// Files skipped for their size (all counted, the first few named).
    skipped_large: usize,
    skipped_large_names: Vec<String>,
    /// Files whose search stopped early (a line over the buffer limit, a read error).
    unreadable: usize,
}

/// Collects one file's matches and context lines into `found`.
struct Collector<'a> {
    shown: &'a str,
    found: &'a mut Found,
    limit: usize,
    cancel: &'a CancellationToken,
}

impl Collector<'_> {
    fn push(&mut self, line_number: Option<u64>, sep: char, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches(['\n', '\r']);
        let (text, cut) = truncate_line(text, GREP_MAX_LINE_CHARS);
        self.found.lines_cut |= cut;
        let n = line_number.unwrap_or(0);
        self.found
            .lines
            .push(format!("{}{sep}{n}{sep} {text}", self.shown));
    }
}

impl Sink for Collector<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        if self.cancel.is_cancelled() {
            return Ok(false);
        }
        let first = mat.line_number();
        for (i, line) in mat.lines().enumerate() {
            if self.found.matches >= self.limit {
                self.found.limit_reached = true;
                return Ok(false);
            }
            self.found.matches += 1;
            self.push(first.map(|n| n + i as u64), ':', line);
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, Self::Error> {
        self.push(ctx.line_number(), '-', ctx.bytes());
        Ok(true)
    }
}

/// One search request, validated.
struct Request {
    matcher: RegexMatcher,
    glob: Option<PathGlob>,
    context: usize,
    limit: usize,
}

/// What the search path turned out to be.
enum Root {
    File,
    Dir,
}

/// Checks the search path without opening it: a regular file or a directory (symlinks followed).
fn check_root(root: &Path, shown_root: &str) -> Result<Root, ToolError> {
    let meta = match std::fs::metadata(root) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ToolError::RespondToModel(format!(
                "{shown_root} does not exist."
            )))
        }
        Err(e) => {
            return Err(ToolError::RespondToModel(format!(
                "Cannot search {shown_root}: {e}"
            )))
        }
    };
    if meta.is_dir() {
        Ok(Root::Dir)
    } else if meta.is_file() {
        Ok(Root::File)
    } else {
        Err(ToolError::RespondToModel(format!(
            "{shown_root} is a {}, not a regular file or directory; grep only searches regular files.",
            kind_name(&meta.file_type())
        )))
    }
}

fn search(
    root: &Path,
    shown_root: &str,
    request: &Request,
    cancel: &CancellationToken,
) -> Result<Found, ToolError> {
    let kind = check_root(root, shown_root)?;
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .before_context(request.context)
        .after_context(request.context)
        .binary_detection(BinaryDetection::quit(0))
        .heap_limit(Some(MAX_GREP_LINE_BYTES))
        .build();
    let mut found = Found::default();
    if let Root::File = kind {
        search_file(&mut searcher, request, root, shown_root, &mut found, cancel);
    } else {
        for entry in walk_builder(root).build() {
            if cancel.is_cancelled() || found.limit_reached {
                break;
            }
            let Ok(entry) = entry else { continue };
            // Not following links, a walk entry's type is its own: FIFOs, devices, sockets and links are skipped.
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let Ok(relative) = entry.path().strip_prefix(root) else {
                continue;
            };
            if request.glob.as_ref().is_some_and(|g| !g.is_match(relative)) {
                continue;
            }
            let shown = relative.to_string_lossy().into_owned();
            search_file(
                &mut searcher,
                request,
                entry.path(),
                &shown,
                &mut found,
                cancel,
            );
        }
    }
    if cancel.is_cancelled() {
        return Err(aborted("grep"));
    }
    Ok(found)
}

fn search_file(
    searcher: &mut Searcher,
    request: &Request,
    path: &Path,
    shown: &str,
    found: &mut Found,
    cancel: &CancellationToken,
) {
    // Opened without blocking and checked on the descriptor; anything but a regular file is skipped.
    let Ok((file, meta)) = open_regular(path, shown, "grep") else {
        return;
    };
    if meta.len() > MAX_GREP_FILE_BYTES {
        found.skipped_large += 1;
        if found.skipped_large_names.len() < SKIPPED_NAMED {
            found.skipped_large_names.push(shown.to_string());
        }
        return;
    }
    let before = found.matches;
    let mut collector = Collector {
        shown,
        found,
        limit: request.limit,
        cancel,
    };
    // An unreadable file (or one with a line over the buffer limit) is skipped, as ripgrep does; what matched
    // before the error stays.
    if searcher
        .search_file(&request.matcher, &file, &mut collector)
        .is_err()
    {
        found.unreadable += 1;
    }
    if found.matches > before {
        found.files_with_matches += 1;
    }
}

#[async_trait]
impl Tool for GrepTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn tags(&self) -> &[PolicyTag] {
        &[PolicyTag::ReadOnly]
    }

    fn argument_grammar(&self, workspace: &WorkspaceState) -> Option<serde_json::Value> {
        let path = workspace.existing_path_schema(true, true, None);
        Some(with_property(&self.spec.parameters, "path", path))
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: GrepArgs = parse_arguments("grep", args)?;
        let shown_root = args.path.clone().unwrap_or_else(|| ".".into());
        let root = resolve_path(ctx, &shown_root)?;
        if args.pattern.is_empty() {
            return Err(ToolError::RespondToModel("pattern is empty.".into()));
        }
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(args.ignore_case.unwrap_or(false))
            .fixed_strings(args.literal.unwrap_or(false))
            .line_terminator(Some(b'\n'))
            .build(&args.pattern)
            .map_err(|e| {
                ToolError::RespondToModel(format!("Invalid regex '{}': {e}", args.pattern))
            })?;
        let glob = args
            .glob
            .as_deref()
            .map(PathGlob::new)
            .transpose()
            .map_err(ToolError::RespondToModel)?;
        let request = Request {
            matcher,
            glob,
            context: args.context.unwrap_or(0).min(MAX_CONTEXT),
            limit: args.limit.unwrap_or(DEFAULT_GREP_LIMIT).max(1),
        };
        let limit = request.limit;
        let (walk_root, cancel) = (root.clone(), ctx.cancel.clone());
        let file_label = shown_root.clone();
        let found = ctx
            .run_blocking("grep", move || {
                search(&walk_root, &file_label, &request, &cancel)
            })
            .await?;

        let mut notes = Vec::new();
        if found.skipped_large > 0 {
            notes.push(format!(
                "Skipped {} file{} over {} ({}); search {} with bash (rg, grep)",
                found.skipped_large,
                if found.skipped_large == 1 { "" } else { "s" },
                format_size(MAX_GREP_FILE_BYTES as usize),
                found.skipped_large_names.join(", "),
                if found.skipped_large == 1 {
                    "it"
                } else {
                    "them"
                },
            ));
        }
        if found.matches == 0 {
            let mut content = "No matches found".to_string();
            if !notes.is_empty() {
                content = format!("{content}\n\n[{}]", notes.join(". "));
            }
            return Ok(ToolOutput::new(
                content,
                json!({
                    "path": root,
                    "matches": 0,
                    "files": 0,
                    "limit_reached": false,
                    "skipped_large_files": found.skipped_large,
                }),
            ));
        }
        let truncation = truncate_head(
            &found.lines.join("\n"),
            Limits {
                max_lines: usize::MAX,
                max_bytes: DEFAULT_MAX_BYTES,
            },
        );
        if found.limit_reached {
            notes.push(format!(
                "{limit} matches limit reached. Use limit={} for more, or refine pattern",
                limit.saturating_mul(2)
            ));
        }
        if truncation.truncated() {
            notes.push(format!("{} limit reached", format_size(DEFAULT_MAX_BYTES)));
        }
        if found.lines_cut {
            notes.push(format!(
                "Some lines truncated to {GREP_MAX_LINE_CHARS} chars. Use read to see full lines"
            ));
        }
        let mut content = truncation.content.clone();
        if !notes.is_empty() {
            content = format!("{content}\n\n[{}]", notes.join(". "));
        }
        Ok(ToolOutput::new(
            content,
            json!({
                "path": root,
                "matches": found.matches,
                "files": found.files_with_matches,
                "limit_reached": found.limit_reached,
                "lines_truncated": found.lines_cut,
                "skipped_large_files": found.skipped_large,
                "unreadable_files": found.unreadable,
            }),
        ))
    }
}
