//! Workspace confinement: the one way a path from a model or a client becomes a file on disk. A [`FileScope`] is
//! a session's working directory (relative paths resolve against it) and, when the session is confined, its
//! workspace root. [`FileScope::resolve`] expands `~`, joins relative paths, resolves `.`, `..` and every symlink
//! (dangling ones too) and refuses what lands outside the root; the readers ([`FileScope::read_bytes`],
//! [`FileScope::read_text`], [`FileScope::metadata`], [`FileScope::read_dir`]) resolve first, open only regular
//! files, and check the opened descriptor's real path again, so a link swapped in after the check still reads
//! nothing outside. The tools resolve through it (`policy::resolve_path`); everything beside a tool that reads a file
//! for a session (harness rules, previews, decorations, prompt attachments, context files) reads through it.

use std::fs::{File, Metadata};
use std::os::fd::AsRawFd as _;
use std::path::{Component, Path, PathBuf};

use crate::tools::error::ToolError;
use crate::tools::support::file_access::{open_regular, read_at_most};

/// How many symlinks one path may traverse before we call it a loop (Linux uses 40).
const MAX_SYMLINK_HOPS: usize = 40;

/// Where a session's files are: see the module docs. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileScope {
    cwd: PathBuf,
    workspace: Option<PathBuf>,
}

impl FileScope {
    /// Paths resolve against `cwd`; with `workspace` set they must resolve under it.
    pub fn new(cwd: impl Into<PathBuf>, workspace: Option<PathBuf>) -> Self {
        Self {
            cwd: cwd.into(),
            workspace,
        }
    }

    /// Paths resolve against `root` and must stay under it.
    pub fn within(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        Self {
            cwd: root.clone(),
            workspace: Some(root),
        }
    }

    /// Paths resolve against `cwd`, anywhere (an unconfined session, or a directory the operator chose).
    pub fn unconfined(cwd: impl Into<PathBuf>) -> Self {
        Self::new(cwd, None)
    }

    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    pub fn workspace(&self) -> Option<&Path> {
        self.workspace.as_deref()
    }

    /// The same scope with relative paths resolving against `cwd` instead.
    pub fn with_cwd(&self, cwd: impl Into<PathBuf>) -> Self {
        Self::new(cwd, self.workspace.clone())
    }

    /// The workspace root, resolved (`None`: unconfined).
    fn root(&self) -> Result<Option<PathBuf>, ToolError> {
        let Some(root) = &self.workspace else {
            return Ok(None);
        };
        let root = absolute(root)?;
        std::fs::canonicalize(&root).map(Some).map_err(|e| {
            ToolError::Fatal(format!(
                "the workspace root '{}' cannot be resolved: {e}",
                root.display()
            ))
        })
    }

    /// `path` as the tools take it: `~` expanded, relative paths joined to the working directory, `.`/`..` and
    /// every symlink resolved (for a path that does not exist yet, the part that exists is resolved and the rest
    /// appended). In a confined scope the result must lie under the (resolved) workspace root.
    pub fn resolve(&self, path: impl AsRef<Path>) -> Result<PathBuf, ToolError> {
        let path = path.as_ref();
        let shown = path.display();
        let to_model = ToolError::RespondToModel;
        if path.as_os_str().is_empty() || path.to_str().is_some_and(|p| p.trim().is_empty()) {
            return Err(to_model("The path is empty.".into()));
        }
        if std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).contains(&0) {
            return Err(to_model("The path contains a NUL byte.".into()));
        }
        let expanded = match path.to_str() {
            Some(text) => expand_home(text),
            None => path.to_path_buf(),
        };
        let cwd = absolute(&self.cwd)?;
        let absolute_path = if expanded.is_absolute() {
            expanded
        } else {
            cwd.join(expanded)
        };
        let mut hops = 0;
        let resolved = resolve_components(Path::new("/"), &absolute_path, &mut hops)
            .map_err(|e| to_model(format!("Cannot resolve path '{shown}': {e}")))?;
        if let Some(root) = self.root()? {
            if !resolved.starts_with(&root) {
                return Err(to_model(format!(
                    "Path '{shown}' resolves to '{}', which is outside the workspace '{}'. Only paths inside the workspace are allowed.",
                    resolved.display(),
                    root.display()
                )));
            }
        }
        Ok(resolved)
    }

    /// Whether `path` resolves inside this scope (always, unconfined, unless it cannot be resolved).
    pub fn contains(&self, path: impl AsRef<Path>) -> bool {
        self.resolve(path).is_ok()
    }

    /// The metadata of what `path` resolves to (symlinks followed), when it is inside the scope and exists.
    pub fn metadata(&self, path: impl AsRef<Path>) -> Option<Metadata> {
        std::fs::metadata(self.resolve(path).ok()?).ok()
    }

    /// Whether `path` resolves inside the scope to a regular file.
    pub fn is_file(&self, path: impl AsRef<Path>) -> bool {
        self.metadata(path).is_some_and(|m| m.is_file())
    }

    /// Whether `path` resolves inside the scope to a directory.
    pub fn is_dir(&self, path: impl AsRef<Path>) -> bool {
        self.metadata(path).is_some_and(|m| m.is_dir())
    }

    /// Whether `path` resolves inside the scope to something that exists.
    pub fn exists(&self, path: impl AsRef<Path>) -> bool {
        self.metadata(path).is_some()
    }

    /// Whether `path` resolves inside the scope to nothing yet: a file a tool could create there.
    pub fn may_create(&self, path: impl AsRef<Path>) -> bool {
        self.resolve(path)
            .is_ok_and(|p| std::fs::symlink_metadata(p).is_err())
    }

    /// The whole of the regular file `path` resolves to, at most `max_bytes`. Refused (an error for the model):
    /// outside the scope, missing, not a regular file (a FIFO is never opened for a blocking read), larger.
    pub fn read_bytes(&self, path: impl AsRef<Path>, max_bytes: u64) -> Result<Vec<u8>, ToolError> {
        let shown = path.as_ref().display().to_string();
        let resolved = self.resolve(&path)?;
        let (file, _) = open_regular(&resolved, &shown, "agentd")?;
        self.check_opened(&file, &shown)?;
        let cannot =
            |e: std::io::Error| ToolError::RespondToModel(format!("Cannot read {shown}: {e}"));
        read_at_most(&file, max_bytes)
            .map_err(cannot)?
            .ok_or_else(|| {
                ToolError::RespondToModel(format!("{shown} is larger than {max_bytes} bytes."))
            })
    }

    /// [`read_bytes`](Self::read_bytes) as UTF-8 text; `None` for anything refused or not text.
    pub fn read_text(&self, path: impl AsRef<Path>, max_bytes: u64) -> Option<String> {
        String::from_utf8(self.read_bytes(path, max_bytes).ok()?).ok()
    }

    /// The entries of the directory `path` resolves to (inside the scope), sorted: each the resolved directory
    /// joined with the entry's name (read each through this scope again: an entry may be a link out).
    pub fn read_dir(&self, path: impl AsRef<Path>) -> Vec<PathBuf> {
        let Ok(dir) = self.resolve(path) else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut out: Vec<PathBuf> = entries.flatten().map(|e| dir.join(e.file_name())).collect();
        out.sort();
        out
    }

    /// In a confined scope, the file opened must really lie under the root (its descriptor's path, read back
    /// from `/proc`): a symlink swapped in between [`resolve`](Self::resolve) and the open is refused.
    fn check_opened(&self, file: &File, shown: &str) -> Result<(), ToolError> {
        let Some(root) = self.root()? else {
            return Ok(());
        };
        let fd_path = format!("/proc/self/fd/{}", file.as_raw_fd());
        match std::fs::read_link(fd_path) {
            Ok(real) if !real.starts_with(&root) => Err(ToolError::RespondToModel(format!(
                "Path '{shown}' resolves to '{}', which is outside the workspace '{}'. Only paths inside the workspace are allowed.",
                real.display(),
                root.display()
            ))),
            // No /proc: the resolved path was checked already.
            _ => Ok(()),
        }
    }
}

/// `~` and `~/rest` become `$HOME` and `$HOME/rest`; anything else is returned as is.
fn expand_home(path: &str) -> PathBuf {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    match (path, home) {
        ("~", Some(home)) => PathBuf::from(home),
        (p, Some(home)) if p.starts_with("~/") => PathBuf::from(home).join(&p[2..]),
        (p, _) => PathBuf::from(p),
    }
}

fn absolute(path: &Path) -> Result<PathBuf, ToolError> {
    std::path::absolute(path)
        .map_err(|e| ToolError::Fatal(format!("cannot make '{}' absolute: {e}", path.display())))
}

/// Walks `rest` one component at a time from the already-resolved `base`, following each symlink it meets
/// (also dangling ones, so a link to a not-yet-existing file outside the workspace is caught).
fn resolve_components(base: &Path, rest: &Path, hops: &mut usize) -> std::io::Result<PathBuf> {
    let mut resolved = base.to_path_buf();
    for component in rest.components() {
        match component {
            Component::Prefix(_) | Component::CurDir => {}
            Component::RootDir => resolved = PathBuf::from("/"),
            Component::ParentDir => {
                resolved.pop();
            }
            Component::Normal(name) => {
                let next = resolved.join(name);
                match std::fs::symlink_metadata(&next) {
                    Ok(meta) if meta.file_type().is_symlink() => {
                        *hops += 1;
                        if *hops > MAX_SYMLINK_HOPS {
                            return Err(std::io::Error::other("too many levels of symbolic links"));
                        }
                        let target = std::fs::read_link(&next)?;
                        // A relative target is relative to the link's directory (`resolved`).
                        resolved = resolve_components(&resolved, &target, hops)?;
                    }
                    _ => resolved = next,
                }
            }
        }
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confined_scope_reads_inside_and_nothing_outside() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("a.txt"), "inside\n").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "outside\n").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), ws.join("link.txt")).unwrap();
        std::os::unix::fs::symlink(dir.path(), ws.join("up")).unwrap();
        let scope = FileScope::within(&ws);
        assert_eq!(scope.read_text("a.txt", 100).as_deref(), Some("inside\n"));
        assert_eq!(
            scope.read_text("sub/../a.txt", 100).as_deref(),
            Some("inside\n")
        );
        let secret = dir.path().join("secret.txt");
        for outside in [
            secret.to_str().unwrap(),
            "../secret.txt",
            "sub/../../secret.txt",
            "link.txt",
            "up/secret.txt",
        ] {
            assert_eq!(scope.read_text(outside, 100), None, "{outside}");
            assert!(!scope.exists(outside), "{outside}");
            assert!(scope.metadata(outside).is_none(), "{outside}");
            let err = scope.read_bytes(outside, 100).unwrap_err().to_string();
            assert!(err.contains("outside the workspace"), "{outside}: {err}");
            assert!(!err.contains("outside\n"), "{err}");
        }
        assert!(scope.read_dir("up").is_empty());
        assert_eq!(scope.read_dir("sub"), Vec::<PathBuf>::new());
        assert!(!scope.may_create("../new.txt"));
        assert!(scope.may_create("new.txt"));
        assert!(!scope.may_create("a.txt"));
        // Unconfined: the same paths read as they are.
        let free = FileScope::unconfined(&ws);
        assert_eq!(
            free.read_text("link.txt", 100).as_deref(),
            Some("outside\n")
        );
        assert_eq!(
            free.read_text("../secret.txt", 100).as_deref(),
            Some("outside\n")
        );
    }

    #[test]
    fn readers_refuse_special_and_large_files_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        std::fs::write(dir.path().join("big.txt"), "x".repeat(1000)).unwrap();
        let scope = FileScope::within(dir.path());
        assert!(scope.read_text("pipe", 100).is_none());
        assert!(scope.read_text("big.txt", 999).is_none());
        assert_eq!(
            scope.read_text("big.txt", 1000).map(|t| t.len()),
            Some(1000)
        );
        assert!(scope.read_text(".", 100).is_none());
    }
}
