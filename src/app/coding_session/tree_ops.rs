//! The session-tree side of [`CodingSession`]: new sessions, resuming, Pi's fork, `/tree` navigation, branching
//! and rewinding (the HTTP routes), and manual compaction. Each needs the agent idle.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;

use crate::agent::AgentMessage;
use crate::session::{
    EntryKind, JsonlStore, SessionEntry, SessionInfo, SessionStore, StoreOptions,
};

use super::{lock, AppError, CodingSession};
use crate::app::recorder::compact_now;
use crate::app::sessions;

impl CodingSession {
    /// Starts a new, empty session (a new file once it has a message; none in memory).
    pub fn new_session(&self) -> Result<(), AppError> {
        self.require_idle()?;
        let agent = self.fresh_agent()?;
        *lock(&self.inner.agent) = agent;
        *lock(&self.inner.recording) = None;
        Ok(())
    }

    /// The sessions of this session's directory, newest first.
    pub fn list_sessions(&self) -> Result<Vec<SessionInfo>, AppError> {
        sessions::list(&self.inner.sessions_dir)
    }

    /// Switches to the session `spec` names (a path, an id or an id prefix).
    pub async fn resume(&self, spec: &str) -> Result<PathBuf, AppError> {
        self.require_idle()?;
        let path = sessions::find(&self.inner.sessions_dir, spec)?;
        let store = JsonlStore::open(&path, StoreOptions::default())
            .map_err(|e| AppError::usage(format!("cannot open session {}: {e}", path.display())))?;
        let agent = self.fresh_agent()?;
        self.attach(agent, Arc::new(store)).await?;
        Ok(path)
    }

    /// The user messages of the current path, `(entry id, text)`, oldest first: where `fork` can start.
    pub fn fork_points(&self) -> Result<Vec<(String, String)>, AppError> {
        let recorder = self.require_recorder()?;
        let messages = self.agent().state().messages;
        Ok(recorder
            .entry_ids()
            .into_iter()
            .zip(messages)
            .filter_map(|(id, m)| match m {
                AgentMessage::User { content, .. } => Some((id, content)),
                _ => None,
            })
            .collect())
    }

    /// Pi's fork: a new session file holding the path up to just before user message `entry_id` (a unique id
    /// prefix is enough); returns that message's text (for the editor) and the new file.
    pub async fn fork(&self, entry_id: &str) -> Result<(String, PathBuf), AppError> {
        self.require_idle()?;
        self.require_recorder()?;
        let store = self
            .store()
            .ok_or_else(|| AppError::usage("the session has no file"))?;
        let entry = find_entry(store.as_ref(), entry_id)?;
        let EntryKind::Message {
            message: AgentMessage::User { content, .. },
        } = &entry.kind
        else {
            return Err(AppError::usage(format!(
                "entry `{}` is not a user message; fork from one of those",
                entry.id
            )));
        };
        let forked = match &entry.parent_id {
            Some(parent) => store.fork(Some(parent), StoreOptions::default())?,
            None => {
                // Forking before the very first message: an empty session beside this one.
                let dir = store
                    .path()
                    .parent()
                    .map(std::path::Path::to_path_buf)
                    .unwrap_or_else(|| self.inner.sessions_dir.clone());
                JsonlStore::create(&dir, &self.inner.cwd, StoreOptions::default())?
            }
        };
        let new_path = forked.path().to_path_buf();
        let agent = self.fresh_agent()?;
        self.attach(agent, Arc::new(forked)).await?;
        Ok((content.clone(), new_path))
    }

    /// The session tree as text.
    pub fn tree(&self) -> Result<String, AppError> {
        Ok(self.require_recorder()?.store().render_tree())
    }

    /// The session tree's entries and the current leaf (empty before the session has a file).
    pub fn entries(&self) -> (Vec<SessionEntry>, Option<String>) {
        match self.store() {
            Some(s) => (s.entries(), s.leaf()),
            None => (Vec::new(), None),
        }
    }

    /// Moves to entry `entry_id` of the tree (Pi's `/tree`): the next message continues from there. For a user
    /// message the position is just before it and its text is returned (to edit and send again).
    pub async fn navigate(&self, entry_id: &str) -> Result<Option<String>, AppError> {
        self.require_idle()?;
        let recorder = self.require_recorder()?;
        let (at, text) = navigation_target(&find_entry(recorder.store().as_ref(), entry_id)?);
        recorder.branch(&self.agent(), at.as_deref(), None).await?;
        Ok(text)
    }

    /// Continues from entry `from` (`None`: a new root), recording `summary` of the branch left when given.
    pub async fn branch(
        &self,
        from: Option<&str>,
        summary: Option<String>,
    ) -> Result<(), AppError> {
        self.require_idle()?;
        let recorder = self.require_recorder()?;
        recorder.branch(&self.agent(), from, summary).await?;
        Ok(())
    }

    /// Drops the last `n` messages from the current path (the next prompt branches there); returns the new
    /// leaf.
    pub fn rewind(&self, n: usize) -> Result<Option<String>, AppError> {
        self.require_idle()?;
        let recorder = self.require_recorder()?;
        Ok(recorder.rewind(&self.agent(), n)?)
    }

    /// Compacts the transcript now (`/compact [focus]`, RPC `compact`).
    pub async fn compact(&self, focus: Option<&str>) -> Result<serde_json::Value, AppError> {
        self.require_idle()?;
        let agent = self.agent();
        let store = self.store();
        let compactor = self.compactor_for(store.as_deref());
        let compaction = match self.recorder() {
            Some(r) => r.compact(&agent, &compactor, focus).await?,
            None => {
                let messages = agent.state().messages;
                let c = compact_now(&agent, &compactor, focus).await?;
                agent.set_messages(c.apply(&messages));
                c
            }
        };
        Ok(json!({
            "summary": compaction.summary,
            "tokens_before": compaction.tokens_before,
            "tokens_after": compaction.tokens_after,
            "dropped_messages": compaction.details.dropped_messages,
            "summarized": compaction.details.summarized,
        }))
    }
}

/// Where moving to `entry` puts the session (Pi's `/tree`): just before a user message (whose text is returned, to
/// edit and send again), else at the entry itself.
pub(super) fn navigation_target(entry: &SessionEntry) -> (Option<String>, Option<String>) {
    match &entry.kind {
        EntryKind::Message {
            message: AgentMessage::User { content, .. },
        } => (entry.parent_id.clone(), Some(content.clone())),
        _ => (Some(entry.id.clone()), None),
    }
}

/// An entry by id, or by a unique id prefix.
pub(super) fn find_entry(store: &dyn SessionStore, id: &str) -> Result<SessionEntry, AppError> {
    if let Some(e) = store.entry(id) {
        return Ok(e);
    }
    let all = store.entries();
    let mut hits = all
        .iter()
        .filter(|e| !id.is_empty() && e.id.starts_with(id));
    match (hits.next(), hits.next()) {
        (Some(e), None) => Ok(e.clone()),
        (Some(_), Some(_)) => Err(AppError::usage(format!("entry id `{id}` is ambiguous"))),
        _ => Err(AppError::NotFound(format!(
            "no entry `{id}` in this session (see /tree)"
        ))),
    }
}
