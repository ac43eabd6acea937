//! The session-tree side of [`CodingSession`]: new sessions, resuming, Pi's fork and `/tree` navigation, and
//! manual compaction. Each needs the agent idle.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentd::agent::{AgentMessage, CompactionSettings, Compactor};
use agentd::session::{EntryKind, JsonlStore, SessionEntry, SessionStore, StoreOptions};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{config_of, lock, CodingSession};
use crate::cli::agent_setup::sessions;

impl CodingSession {
    /// Starts a new, empty session (a new file once it has a message; none with `--no-session`).
    pub fn new_session(&self) -> anyhow::Result<()> {
        self.require_idle()?;
        let agent = self.fresh_agent()?;
        *lock(&self.inner.agent) = agent;
        *lock(&self.inner.recording) = None;
        Ok(())
    }

    /// The sessions of this directory, newest first.
    pub fn list_sessions(&self) -> anyhow::Result<Vec<agentd::session::SessionInfo>> {
        sessions::list(&self.inner.cwd)
    }

    /// Switches to the session `spec` names (a path, an id or an id prefix).
    pub async fn resume(&self, spec: &str) -> anyhow::Result<PathBuf> {
        self.require_idle()?;
        let path = sessions::find(&self.inner.cwd, spec)?;
        let store = JsonlStore::open(&path, StoreOptions::default())
            .map_err(|e| anyhow::anyhow!("cannot open session {}: {e}", path.display()))?;
        let agent = self.fresh_agent()?;
        self.attach(agent, Arc::new(store)).await?;
        Ok(path)
    }

    /// The user messages of the current path, `(entry id, text)`, oldest first: where `fork` can start.
    pub fn fork_points(&self) -> anyhow::Result<Vec<(String, String)>> {
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
    pub async fn fork(&self, entry_id: &str) -> anyhow::Result<(String, PathBuf)> {
        self.require_idle()?;
        self.require_recorder()?;
        let store = self
            .store()
            .ok_or_else(|| anyhow::anyhow!("the session has no file"))?;
        let entry = find_entry(store.as_ref(), entry_id)?;
        let EntryKind::Message {
            message: AgentMessage::User { content, .. },
        } = &entry.kind
        else {
            anyhow::bail!(
                "entry `{}` is not a user message; fork from one of those",
                entry.id
            );
        };
        let forked = match &entry.parent_id {
            Some(parent) => store.fork(Some(parent), StoreOptions::default()),
            None => {
                // Forking before the very first message: an empty session.
                let dir = store
                    .path()
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default();
                JsonlStore::create(&dir, &self.inner.cwd, StoreOptions::default())
            }
        }
        .map_err(|e| anyhow::anyhow!("fork: {e}"))?;
        let new_path = forked.path().to_path_buf();
        let agent = self.fresh_agent()?;
        self.attach(agent, Arc::new(forked)).await?;
        Ok((content.clone(), new_path))
    }

    /// The session tree as text.
    pub fn tree(&self) -> anyhow::Result<String> {
        Ok(self.require_recorder()?.store().render_tree())
    }

    /// Moves to entry `entry_id` of the tree (Pi's `/tree`): the next message continues from there. For a user
    /// message the position is just before it and its text is returned (to edit and send again).
    pub async fn navigate(&self, entry_id: &str) -> anyhow::Result<Option<String>> {
        self.require_idle()?;
        let recorder = self.require_recorder()?;
        let entry = find_entry(recorder.store().as_ref(), entry_id)?;
        let (at, text) = match &entry.kind {
            EntryKind::Message {
                message: AgentMessage::User { content, .. },
            } => (entry.parent_id.clone(), Some(content.clone())),
            _ => (Some(entry.id.clone()), None),
        };
        recorder
            .branch(&self.agent(), at.as_deref(), None)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(text)
    }

    /// Compacts the transcript now (`/compact [focus]`, RPC `compact`).
    pub async fn compact(&self, focus: Option<&str>) -> anyhow::Result<serde_json::Value> {
        self.require_idle()?;
        let agent = self.agent();
        let blobs = self.store().map(|s| s.blobs());
        let mut compactor = Compactor::new(CompactionSettings::default());
        if let Some(b) = blobs {
            compactor = compactor.with_blobs(b);
        }
        let compaction = match self.recorder() {
            Some(r) => r
                .compact(&agent, &compactor, focus)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            None => {
                let state = agent.state();
                let config = config_of(&agent)
                    .ok_or_else(|| anyhow::anyhow!("internal: the agent has no configuration"))?;
                let context = agentd::agent::AgentContext {
                    system_prompt: state.system_prompt.clone(),
                    messages: state.messages.clone(),
                    tools: state.tools.clone(),
                };
                let c = compactor
                    .compact(
                        &context,
                        &config,
                        focus,
                        agentd::agent::CompactionReason::Manual,
                        &CancellationToken::new(),
                    )
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                agent.set_messages(c.apply(&state.messages));
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

/// An entry by id, or by a unique id prefix.
fn find_entry(store: &dyn SessionStore, id: &str) -> anyhow::Result<SessionEntry> {
    if let Some(e) = store.entry(id) {
        return Ok(e);
    }
    let all = store.entries();
    let mut hits = all
        .iter()
        .filter(|e| !id.is_empty() && e.id.starts_with(id));
    match (hits.next(), hits.next()) {
        (Some(e), None) => Ok(e.clone()),
        (Some(_), Some(_)) => anyhow::bail!("entry id `{id}` is ambiguous"),
        _ => anyhow::bail!("no entry `{id}` in this session (see /tree)"),
    }
}
