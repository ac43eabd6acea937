//! Where a session looks for its own files — context files, skills, prompt templates, the project's settings —
//! and through which [`FileScope`] each is read: the user's directories (the config dir, `~/.agentd`) as they
//! are, the project's within the session's confinement, so a confined session never takes a file from outside
//! its workspace into its prompt, even through a link the project holds.

use std::path::{Path, PathBuf};

use crate::tools::policy::FileScope;

/// A directory looked in, and the scope its files are read through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupDir {
    pub path: PathBuf,
    pub scope: FileScope,
}

impl LookupDir {
    /// One of the user's own directories: read as it is.
    pub fn user(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        Self {
            scope: FileScope::unconfined(&path),
            path,
        }
    }

    /// `rel` under the project's working directory, read within the session's scope.
    pub fn project(scope: &FileScope, rel: impl AsRef<Path>) -> Self {
        Self {
            path: scope.cwd().join(rel),
            scope: scope.clone(),
        }
    }

    /// `dir` itself, read within `scope`.
    pub fn within(scope: &FileScope, dir: impl Into<PathBuf>) -> Self {
        Self {
            path: dir.into(),
            scope: scope.clone(),
        }
    }

    /// The entries of this directory (sorted; each read through [`Self::scope`] again).
    pub fn entries(&self) -> Vec<PathBuf> {
        self.scope.read_dir(&self.path)
    }

    /// The subdirectory `name`, in the same scope.
    pub fn child(&self, name: impl AsRef<Path>) -> Self {
        Self::within(&self.scope, self.path.join(name))
    }
}
