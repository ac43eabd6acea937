//! Which session a coding session starts with: a new one (default), none (`--no-session`), the most recent of
//! this directory (`-c`), a picked one (`-r`), or a given file or id (`--session PATH|ID`). Sessions live in
//! `$AGENTD_HOME/sessions/<directory slug>/` (see `agentd::session::sessions_dir`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentd::session::{JsonlStore, SessionInfo, StoreOptions};

use super::{AgentArgs, Failure};

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
}

impl SessionChoice {
    pub fn from_args(args: &AgentArgs) -> Self {
        if args.no_session {
            SessionChoice::InMemory
        } else if args.continue_session {
            SessionChoice::Continue
        } else if let Some(s) = &args.session {
            SessionChoice::Open(s.clone())
        } else if args.resume {
            SessionChoice::Pick
        } else {
            SessionChoice::New
        }
    }
}

/// The sessions of `cwd`, newest first (an unreadable directory is an error message).
pub fn list(cwd: &Path) -> anyhow::Result<Vec<SessionInfo>> {
    JsonlStore::list_for_cwd(cwd).map_err(|e| anyhow::anyhow!("{e}"))
}

/// The session file `spec` names: an existing path, else an id or unique id prefix among `cwd`'s sessions.
pub fn find(cwd: &Path, spec: &str) -> anyhow::Result<PathBuf> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Err(Failure::usage(
            "--session needs a file path or a session id",
        ));
    }
    let as_path = PathBuf::from(spec);
    if as_path.is_file() {
        return Ok(as_path);
    }
    let sessions = list(cwd)?;
    let matches: Vec<&SessionInfo> = sessions
        .iter()
        .filter(|s| s.id.starts_with(spec) || s.path.file_stem().is_some_and(|f| f == spec))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one.path.clone()),
        [] => Err(Failure::usage(format!(
            "no session `{spec}`: not a file, and no session of {} has that id (list them with `agentd chat -r`)",
            cwd.display()
        ))),
        many => Err(Failure::usage(format!(
            "session id `{spec}` is ambiguous: it matches {}",
            many.iter()
                .map(|s| s.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Opens (or, for `-c` without sessions, creates) the store `choice` asks for; `None` for a new or in-memory
/// session. `Pick` must have been resolved by the caller.
pub fn open(choice: &SessionChoice, cwd: &Path) -> anyhow::Result<Option<Arc<JsonlStore>>> {
    let options = StoreOptions::default();
    let session_error = |e: agentd::session::SessionError| anyhow::anyhow!("session: {e}");
    let store = match choice {
        // A new session's file is created with its first message (see `CodingSession`).
        SessionChoice::InMemory | SessionChoice::New => return Ok(None),
        SessionChoice::Continue => match list(cwd)?.first() {
            Some(latest) => JsonlStore::open(&latest.path, options).map_err(session_error)?,
            None => JsonlStore::create_for_cwd(cwd, options).map_err(session_error)?,
        },
        SessionChoice::Open(spec) => {
            let path = find(cwd, spec)?;
            JsonlStore::open(&path, options).map_err(|e| {
                Failure::usage(format!("cannot open session {}: {e}", path.display()))
            })?
        }
        SessionChoice::Pick => {
            return Err(Failure::usage(
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
