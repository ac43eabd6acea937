//! What the session knows about its workspace, for the tools' argument grammars (workspace-aware constraints):
//! the files and folders that exist (as `ls`/`find` see them, `.gitignore` honoured, capped), the files the
//! session has read or written and what they held then, and the regex of a path a new file may take.
//!
//! A tool asks [`WorkspaceState`] for what it needs when the agent builds a request (`Tool::argument_grammar`):
//! `read`/`edit`/`ls` get an enum of existing paths, `edit` a branch per file it may edit with `old_text` a
//! substring of that file's current text (files the session has seen and that are unchanged since, or small
//! ones), `write` a relative path under the root. Tools that change files tell it ([`WorkspaceState::saw`],
//! [`WorkspaceState::changed`]); after any call that may have changed the tree the listing is taken again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use crate::tools::error::ToolError;
use crate::tools::policy::FileScope;

/// A relative path under the workspace root (`x-agentd-pattern`): segments of anything but `/`, `\`, quotes and
/// control characters, no empty segment, no `.` or `..` segment, no leading `/`.
pub const RELATIVE_PATH_PATTERN: &str = r#"([^./\\"\x00-\x1f][^/\\"\x00-\x1f]*|\.[^./\\"\x00-\x1f][^/\\"\x00-\x1f]*|\.\.[^/\\"\x00-\x1f]+)(/([^./\\"\x00-\x1f][^/\\"\x00-\x1f]*|\.[^./\\"\x00-\x1f][^/\\"\x00-\x1f]*|\.\.[^/\\"\x00-\x1f]+))*"#;

/// The most paths a listing holds; beyond it paths are constrained by their directory only.
pub const MAX_PATHS: usize = 2000;
/// Files up to this size are editable by substring even when the session has not read them.
pub const SMALL_FILE: u64 = 8 * 1024;
/// The most text the substring branches of one `edit` grammar hold in all: the grammar is compiled every turn,
/// so it must stay cheap.
pub const SUBSTRING_BUDGET: usize = 96 * 1024;

/// The workspace's tree as the tools see it (relative to the root; directories end with `/`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub files: Vec<String>,
    pub dirs: Vec<String>,
    /// The walk stopped at [`MAX_PATHS`].
    pub truncated: bool,
}

/// When a file was seen (read, written or edited): its size and modification time then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    len: u64,
    modified: Option<SystemTime>,
}

impl Seen {
    fn of(scope: &FileScope, path: &Path) -> Option<Self> {
        let meta = scope.metadata(path)?;
        meta.is_file().then(|| Seen {
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }
}

#[derive(Debug, Default)]
struct Inner {
    listing: Option<Listing>,
    seen: HashMap<String, Seen>,
}

/// See the module docs. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct WorkspaceState {
    root: PathBuf,
    /// The files under `root`, read through the tools' confinement (never a link out of the tree).
    scope: FileScope,
    inner: Arc<Mutex<Inner>>,
}

/// `path` relative to `root`, with `/` separators, when it lies under it.
fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let text = rel.to_str()?.replace('\\', "/");
    (!text.is_empty()).then_some(text)
}

impl WorkspaceState {
    /// The state of the tree under `root` (the working directory the tools resolve relative paths against).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        let root = std::fs::canonicalize(&root).unwrap_or(root);
        Self {
            scope: FileScope::within(&root),
            root,
            inner: Arc::default(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The tree's files as anything beside a tool may read them: resolved under the root, regular files only.
    pub fn scope(&self) -> &FileScope {
        &self.scope
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tree (taken once, again after [`changed`](Self::changed)).
    pub fn listing(&self) -> Listing {
        if let Some(l) = &self.lock().listing {
            return l.clone();
        }
        let listing = self.walk();
        self.lock().listing = Some(listing.clone());
        listing
    }

    /// The text of the listed files other than `this` (compared as canonical paths), read one at a time in the
    /// listing's order: the first `max_files` files, those of at most `max_bytes` that read as UTF-8. What the
    /// rename hints of `write_block` scan for a name's other uses.
    pub fn other_texts(
        &self,
        this: &Path,
        max_files: usize,
        max_bytes: u64,
    ) -> impl Iterator<Item = (String, String)> + '_ {
        let this = self
            .scope
            .resolve(this)
            .unwrap_or_else(|_| this.to_path_buf());
        self.listing()
            .files
            .into_iter()
            .take(max_files)
            .filter_map(move |rel| {
                if self.scope.resolve(&rel).is_ok_and(|p| p == this) {
                    return None;
                }
                let text = self.scope.read_text(&rel, max_bytes)?;
                Some((rel, text))
            })
    }

    fn walk(&self) -> Listing {
        let mut out = Listing::default();
        for entry in walk_builder(&self.root).build().flatten() {
            if entry.depth() == 0 {
                continue;
            }
            if out.files.len() + out.dirs.len() >= MAX_PATHS {
                out.truncated = true;
                break;
            }
            let Some(rel) = relative(&self.root, entry.path()) else {
                continue;
            };
            // Names a path grammar cannot hold (quotes, backslashes, control characters) are left out.
            if rel.chars().any(|c| c == '"' || c == '\\' || c.is_control()) {
                continue;
            }
            match entry.file_type() {
                Some(t) if t.is_dir() => out.dirs.push(format!("{rel}/")),
                Some(t) if t.is_file() => out.files.push(rel),
                _ => {}
            }
        }
        out
    }

    /// Something may have changed the tree (a write, an edit, a command): take the listing again next time.
    pub fn changed(&self) {
        self.lock().listing = None;
    }

    /// The model has seen `path`'s current text (it read the file, wrote it, or edited it and saw the result).
    pub fn saw(&self, path: &Path) {
        let Ok(path) = self.scope.resolve(path) else {
            return;
        };
        let (Some(rel), Some(seen)) = (relative(&self.root, &path), Seen::of(&self.scope, &path))
        else {
            return;
        };
        self.lock().seen.insert(rel, seen);
    }

    /// Whether the model has seen the current text of the file at `path` (absolute, or relative to the root).
    pub fn has_seen(&self, path: &Path) -> bool {
        let Ok(path) = self.scope.resolve(path) else {
            return false;
        };
        relative(&self.root, &path).is_some_and(|rel| self.has_seen_current(&rel))
    }

    /// Whether the model has seen `rel`'s current text (read or written since its last change).
    pub fn has_seen_current(&self, rel: &str) -> bool {
        let seen = self.lock().seen.get(rel).copied();
        seen.is_some() && seen == Seen::of(&self.scope, Path::new(rel))
    }

    /// The files whose `old_text` the grammar may take by substring, with their current text: first those the
    /// session has seen and that are unchanged since, then small files, within [`SUBSTRING_BUDGET`] bytes.
    /// Binary and non-UTF-8 files are left out.
    pub fn editable_texts(&self) -> Vec<(String, String)> {
        let listing = self.listing();
        let seen: Vec<String> = {
            let inner = self.lock();
            listing
                .files
                .iter()
                .filter(|f| inner.seen.contains_key(*f))
                .cloned()
                .collect()
        };
        let mut out = Vec::new();
        let mut budget = SUBSTRING_BUDGET;
        let take = |rel: &String, budget: &mut usize| {
            let bytes = self.scope.read_bytes(rel, *budget as u64).ok()?;
            if bytes.is_empty() || bytes.contains(&0) {
                return None;
            }
            let text = String::from_utf8(bytes).ok()?;
            *budget -= text.len();
            Some((rel.clone(), text))
        };
        for rel in &seen {
            if self.has_seen_current(rel) {
                if let Some(t) = take(rel, &mut budget) {
                    out.push(t);
                }
            }
        }
        for rel in &listing.files {
            if out.iter().any(|(r, _)| r == rel) {
                continue;
            }
            let small = self
                .scope
                .metadata(rel)
                .is_some_and(|m| m.len() <= SMALL_FILE);
            if small {
                if let Some(t) = take(rel, &mut budget) {
                    out.push(t);
                }
            }
        }
        out
    }

    /// The path grammar of something that exists (`files`, `dirs` or both): an `x-agentd-enum` of the listing,
    /// or — past [`MAX_PATHS`] — an `x-agentd-pattern` of a path under one of the listed directories.
    pub fn existing_path_schema(
        &self,
        files: bool,
        dirs: bool,
        description: Option<&str>,
    ) -> serde_json::Value {
        let listing = self.listing();
        let mut paths: Vec<String> = Vec::new();
        if files {
            paths.extend(listing.files.iter().cloned());
        }
        if dirs {
            paths.push(".".into());
            paths.extend(
                listing
                    .dirs
                    .iter()
                    .map(|d| d.trim_end_matches('/').to_string()),
            );
        }
        let mut schema = serde_json::json!({"type": "string"});
        if let Some(d) = description {
            schema["description"] = d.into();
        }
        if listing.truncated {
            let mut alts: Vec<String> = listing
                .dirs
                .iter()
                .map(|d| crate::schema::extensions::regex_escape(d.trim_end_matches('/')) + "/")
                .collect();
            alts.push(String::new());
            schema["x-agentd-pattern"] =
                format!("({})[^/\\\\\"\\x00-\\x1f]+", alts.join("|")).into();
        } else if paths.is_empty() {
            return schema;
        } else {
            schema["x-agentd-enum"] = paths.into();
        }
        schema
    }

    /// The schema of a path a new or existing file may take: relative, under the root.
    pub fn new_path_schema(&self, description: Option<&str>) -> serde_json::Value {
        let mut schema =
            serde_json::json!({"type": "string", "x-agentd-pattern": RELATIVE_PATH_PATTERN});
        if let Some(d) = description {
            schema["description"] = d.into();
        }
        schema
    }

    /// The workspace's files for the system prompt, one relative path a line (the path a call should use, not a
    /// name to be joined with its folder: small models drop the folder), empty folders with a `/`; up to
    /// `max_lines` lines, the rest counted.
    pub fn tree(&self, max_lines: usize) -> String {
        let listing = self.listing();
        let empty_dirs = listing
            .dirs
            .iter()
            .filter(|d| !listing.files.iter().any(|f| f.starts_with(d.as_str())));
        let mut entries: Vec<&str> = listing
            .files
            .iter()
            .chain(empty_dirs)
            .map(String::as_str)
            .collect();
        entries.sort();
        let mut out: Vec<String> = entries
            .iter()
            .take(max_lines)
            .map(|e| e.to_string())
            .collect();
        let more = entries.len().saturating_sub(max_lines);
        if more > 0 || listing.truncated {
            out.push(format!(
                "… and {}{more} more",
                if listing.truncated { "over " } else { "" }
            ));
        }
        out.join("\n")
    }
}

/// "Files with a similar name: …" for a path that is missing or not a file, from the session's listing (or a
/// fresh one of the working directory): up to five files whose path or name is most like `wanted`.
pub fn suggest_files(state: Option<&WorkspaceState>, cwd: &Path, wanted: &str) -> Option<String> {
    let fresh;
    let state = match state {
        Some(s) => s,
        None => {
            fresh = WorkspaceState::new(cwd);
            &fresh
        }
    };
    let wanted = wanted.trim_start_matches("./").trim_end_matches('/');
    let wanted_name = wanted.rsplit('/').next().unwrap_or(wanted);
    let mut scored: Vec<(f32, String)> = state
        .listing()
        .files
        .into_iter()
        .filter_map(|f| {
            let name = f.rsplit('/').next().unwrap_or(&f).to_string();
            let by_path = similar::TextDiff::from_chars(wanted, f.as_str()).ratio();
            let by_name = similar::TextDiff::from_chars(wanted_name, name.as_str()).ratio();
            let under = f.starts_with(&format!("{wanted}/"));
            let score = by_path.max(by_name).max(if under { 0.9 } else { 0.0 });
            (score >= 0.5).then_some((score, f))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let names: Vec<String> = scored.into_iter().take(5).map(|(_, f)| f).collect();
    (!names.is_empty()).then(|| format!("Files with a similar name: {}.", names.join(", ")))
}

/// A missing file or a directory answered with the files whose names are closest.
/// (`state` and `cwd` are the call's; `path` the resolved path, `shown` the path as the model gave it.)
pub fn with_file_suggestions(
    e: ToolError,
    state: Option<&WorkspaceState>,
    cwd: &Path,
    shown: &str,
    path: &Path,
) -> ToolError {
    match e {
        ToolError::RespondToModel(text) if !path.is_file() => {
            match suggest_files(state, cwd, shown) {
                Some(hint) => ToolError::RespondToModel(format!("{text} {hint}")),
                None => ToolError::RespondToModel(text),
            }
        }
        other => other,
    }
}

/// The walker `ls`, `find` and `grep` share: `.gitignore`/`.ignore`/git excludes respected even outside a git
/// repository, hidden files included, `.git` skipped, sorted by name, symlinks not followed.
pub(crate) fn walk_builder(root: &Path) -> ignore::WalkBuilder {
    let mut builder = ignore::WalkBuilder::new(root);
    builder
        .hidden(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .ignore(true)
        .parents(true)
        .require_git(false)
        .follow_links(false)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(|entry| entry.file_name() != ".git");
    builder
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_reads_and_editable_texts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.py"), "x = 1\n").unwrap();
        std::fs::write(dir.path().join("big.txt"), "y".repeat(20_000)).unwrap();
        std::fs::write(dir.path().join(".gitignore"), "ignored/\n").unwrap();
        std::fs::create_dir_all(dir.path().join("ignored")).unwrap();
        std::fs::write(dir.path().join("ignored/z.txt"), "z").unwrap();
        let ws = WorkspaceState::new(dir.path());
        let l = ws.listing();
        assert_eq!(l.dirs, ["src/"]);
        assert_eq!(l.files, [".gitignore", "big.txt", "src/a.py"]);
        // Small files are editable unread; the big one only once seen.
        let names = |v: Vec<(String, String)>| v.into_iter().map(|(r, _)| r).collect::<Vec<_>>();
        assert!(!names(ws.editable_texts()).contains(&"big.txt".to_string()));
        ws.saw(&dir.path().join("big.txt"));
        assert!(names(ws.editable_texts()).contains(&"big.txt".to_string()));
        // Changed behind the model's back: no longer seen.
        std::fs::write(dir.path().join("big.txt"), "y".repeat(20_001)).unwrap();
        assert!(!ws.has_seen_current("big.txt"));
        std::fs::write(dir.path().join("new.txt"), "n").unwrap();
        assert!(!ws.listing().files.contains(&"new.txt".to_string()));
        ws.changed();
        assert!(ws.listing().files.contains(&"new.txt".to_string()));
        assert_eq!(ws.tree(10), ".gitignore\nbig.txt\nnew.txt\nsrc/a.py");
        assert_eq!(ws.tree(2), ".gitignore\nbig.txt\n… and 2 more");
    }
}
