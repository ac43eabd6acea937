//! Which session a coding session starts with: a new one (default), none (`--no-session`), the most recent of
//! the sessions directory (`-c`), a picked one (`-r`), or a given file or id (`--session PATH|ID`, HTTP
//! `resume`). Sessions live in `$AGENTD_HOME/sessions/<directory slug>/` (see [`crate::session::sessions_dir`])
//! unless the caller names another directory (the server's `--sessions-dir`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::session::{JsonlStore, SessionInfo, StoreOptions};

use super::AppError;

/// How to pick the session to start with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionChoice {
    /// A new session file.
    New,
    /// No file at all.
    InMemory,
    /// The most recent session of this directory (a new one when there is none).
    Continue,
    /// A file path or a session id (or unique id prefix) of this directory.
    Open(String),
    /// Let the user pick (`-r`): the caller resolves this into `Open` first.
    Pick,
    /// A new session whose file is created now (the HTTP API answers with its id at once).
    CreateNow,
}

/// The sessions in `dir`, newest first (an unreadable directory is an error message).
pub fn list(dir: &Path) -> Result<Vec<SessionInfo>, AppError> {
    JsonlStore::list(dir).map_err(AppError::from)
}

/// The session file `spec` names: an existing path, else an id or unique id prefix among the sessions in `dir`.
pub fn find(dir: &Path, spec: &str) -> Result<PathBuf, AppError> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err(AppError::usage(
            "a session needs a file path or a session id",
        ));
    }
    let as_path = PathBuf::from(spec);
    if as_path.is_file() {
        return Ok(as_path);
    }
    let sessions = list(dir)?;
    let matches: Vec<&SessionInfo> = sessions
        .iter()
        .filter(|s| s.id.starts_with(spec) || s.path.file_stem().is_some_and(|f| f == spec))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one.path.clone()),
        [] => Err(AppError::NotFound(format!(
            "no session `{spec}`: not a file, and no session in {} has that id (list them with `agentd chat -r`)",
            dir.display()
        ))),
        many => Err(AppError::usage(format!(
            "session id `{spec}` is ambiguous: it matches {}",
            many.iter()
                .map(|s| s.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Opens (or, for `-c` without sessions and for [`SessionChoice::CreateNow`], creates) the store `choice` asks
/// for in `dir`; `None` for a new (file made with its first message) or in-memory session. `Pick` must have been
/// resolved by the caller.
pub fn open(
    choice: &SessionChoice,
    dir: &Path,
    cwd: &Path,
) -> Result<Option<Arc<JsonlStore>>, AppError> {
    let options = StoreOptions::default();
    let store = match choice {
        SessionChoice::InMemory | SessionChoice::New => return Ok(None),
        SessionChoice::CreateNow => JsonlStore::create(dir, cwd, options)?,
        SessionChoice::Continue => match list(dir)?.first() {
            Some(latest) => JsonlStore::open(&latest.path, options)?,
            None => JsonlStore::create(dir, cwd, options)?,
        },
        SessionChoice::Open(spec) => {
            let path = find(dir, spec)?;
            JsonlStore::open(&path, options).map_err(|e| {
                AppError::usage(format!("cannot open session {}: {e}", path.display()))
            })?
        }
        SessionChoice::Pick => {
            return Err(AppError::usage(
                "--resume needs an interactive terminal to pick a session; use --session ID",
            ))
        }
    };
    Ok(Some(Arc::new(store)))
}

/// One line describing a session for pickers and listings.
pub fn describe(s: &SessionInfo) -> String {
    let when = s
        .modified
        .get(..16)
        .unwrap_or(&s.modified)
        .replace('T', " ");
    let title = s.name.clone().unwrap_or_else(|| {
        s.first_message
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(60)
            .collect()
    });
    let id = s.id.get(..8).unwrap_or(&s.id);
    format!("{id}  {when}  {:>3} msgs  {title}", s.message_count)
}
