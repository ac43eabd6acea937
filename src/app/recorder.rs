//! [`Recorder`]: keeps a [`SessionStore`] in step with an [`Agent`]. Attaching loads the context of the store's
//! leaf into the agent; from then on every message the agent adds becomes a `message` entry and every compaction a
//! `compaction` entry (its `firstKeptEntryId` found from the entry ids of the agent's messages). Tree operations
//! (checkout, branch, rewind) and manual compaction go through it so the agent's transcript follows the store.
//!
//! The recorder is an agent listener; listeners are awaited in order, so an entry is stored (acknowledged by the
//! writer) before the agent's next event is handled.

use std::sync::{Arc, Mutex, MutexGuard};

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentContext, AgentEvent, AgentLoopConfig, AgentMessage};
use crate::agent::{Compaction, CompactionReason, Compactor};
use crate::session::{EntryKind, SessionError, SessionStore};

/// The link between one agent and one session store.
pub struct Recorder {
    store: Arc<dyn SessionStore>,
    /// The entry id of each message of the agent's transcript, in order.
    ids: Mutex<Vec<String>>,
    last_error: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Recorder {
    /// Loads the context of `store`'s leaf into `agent` (messages; the model when the path names one; the session
    /// id as the agent's `cache_key` when it has none) and records the agent's events from now on.
    pub fn attach(agent: &Agent, store: Arc<dyn SessionStore>) -> Result<Arc<Self>, SessionError> {
        let recorder = Arc::new(Self {
            store,
            ids: Mutex::new(Vec::new()),
            last_error: Mutex::new(None),
        });
        recorder.reload(agent)?;
        if let Some(m) = recorder
            .store
            .build_context(None)?
            .model
            .filter(|m| !m.model_id.is_empty())
        {
            agent.set_model(m.model_id);
        }
        let session_id = recorder.store.header().id;
        agent.update_config(|c| {
            if c.cache_key.is_none() {
                c.cache_key = Some(session_id);
            }
        });
        let listener = recorder.clone();
        agent.subscribe(Arc::new(move |ev| {
            let r = listener.clone();
            async move { r.record(ev).await }.boxed()
        }));
        Ok(recorder)
    }

    pub fn store(&self) -> &Arc<dyn SessionStore> {
        &self.store
    }

    /// The last append that failed while recording events (listeners cannot return errors), if any.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.last_error).clone()
    }

    /// The entry ids of the agent's transcript, message by message.
    pub fn entry_ids(&self) -> Vec<String> {
        lock(&self.ids).clone()
    }

    async fn record(&self, ev: AgentEvent) {
        let result = match ev {
            AgentEvent::MessageEnd { message } => self.append_message(message).await,
            AgentEvent::Compaction {
                message,
                first_kept,
                tokens_before,
                details,
                ..
            } => {
                let summary = match message {
                    AgentMessage::CompactionSummary { summary, .. } => summary,
                    _ => String::new(),
                };
                let details = serde_json::to_value(details).unwrap_or_default();
                self.append_compaction(summary, first_kept, tokens_before, details)
                    .await
            }
            _ => Ok(()),
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "could not record a session entry");
            *lock(&self.last_error) = Some(e.to_string());
        }
    }

    async fn append_message(&self, message: AgentMessage) -> Result<(), SessionError> {
        let entry = self.store.append(EntryKind::message(message)).await?;
        lock(&self.ids).push(entry.id);
        Ok(())
    }

    async fn append_compaction(
        &self,
        summary: String,
        first_kept: usize,
        tokens_before: u64,
        details: serde_json::Value,
    ) -> Result<(), SessionError> {
        let first_kept_entry_id = lock(&self.ids).get(first_kept).cloned().ok_or_else(|| {
            SessionError::UnknownEntry(format!("(message #{first_kept} of the transcript)"))
        })?;
        let entry = self
            .store
            .append(EntryKind::Compaction {
                summary,
                first_kept_entry_id,
                tokens_before,
                details,
            })
            .await?;
        let mut ids = lock(&self.ids);
        let at = first_kept.min(ids.len());
        let kept = ids.split_off(at);
        *ids = std::iter::once(entry.id).chain(kept).collect();
        Ok(())
    }

    /// Sets the agent's transcript to the context of the store's current leaf.
    pub fn reload(&self, agent: &Agent) -> Result<(), SessionError> {
        if agent.state().is_running() {
            return Err(SessionError::AgentRunning);
        }
        let ctx = self.store.build_context(None)?;
        agent.set_messages(ctx.messages);
        *lock(&self.ids) = ctx.entry_ids;
        Ok(())
    }

    /// Switches to another leaf and loads its context.
    pub fn checkout(&self, agent: &Agent, leaf: &str) -> Result<(), SessionError> {
        self.idle(agent)?;
        self.store.checkout(leaf)?;
        self.reload(agent)
    }

    /// Continues from `from` (a new branch on the next prompt), optionally recording a summary of the branch
    /// that is left, and loads its context.
    pub async fn branch(
        &self,
        agent: &Agent,
        from: Option<&str>,
        summary: Option<String>,
    ) -> Result<(), SessionError> {
        self.idle(agent)?;
        match summary {
            Some(s) => {
                self.store.branch_with_summary(from, s).await?;
            }
            None => self.store.branch(from)?,
        }
        self.reload(agent)
    }

    /// Drops the last `n` messages from the agent's path (the next prompt starts a new branch there).
    pub fn rewind(&self, agent: &Agent, n: usize) -> Result<Option<String>, SessionError> {
        self.idle(agent)?;
        let leaf = self.store.rewind(n)?;
        self.reload(agent)?;
        Ok(leaf)
    }

    /// Records a model change and makes the agent use it.
    pub async fn set_model(
        &self,
        agent: &Agent,
        provider: &str,
        model_id: &str,
    ) -> Result<(), SessionError> {
        self.store
            .append(EntryKind::ModelChange {
                provider: provider.to_string(),
                model_id: model_id.to_string(),
            })
            .await?;
        agent.set_model(model_id);
        Ok(())
    }

    /// Manual compaction (`/compact [focus]`): compacts the idle agent's transcript now, whatever its size, with
    /// `focus` added to the summariser's instructions; records the compaction entry and returns it.
    pub async fn compact(
        &self,
        agent: &Agent,
        compactor: &Compactor,
        focus: Option<&str>,
    ) -> Result<Compaction, SessionError> {
        self.idle(agent)?;
        let messages = agent.state().messages;
        let compaction = compact_now(agent, compactor, focus).await?;
        let details = serde_json::to_value(&compaction.details).unwrap_or_default();
        self.append_compaction(
            compaction.summary.clone(),
            compaction.first_kept,
            compaction.tokens_before,
            details,
        )
        .await?;
        agent.set_messages(compaction.apply(&messages));
        Ok(compaction)
    }

    fn idle(&self, agent: &Agent) -> Result<(), SessionError> {
        if agent.state().is_running() {
            Err(SessionError::AgentRunning)
        } else {
            Ok(())
        }
    }
}

/// The manual compaction of `agent`'s transcript as it is now (not applied, not recorded).
pub async fn compact_now(
    agent: &Agent,
    compactor: &Compactor,
    focus: Option<&str>,
) -> Result<Compaction, SessionError> {
    let state = agent.state();
    let mut config: Option<AgentLoopConfig> = None;
    agent.update_config(|c| config = Some(c.clone()));
    let Some(mut config) = config else {
        return Err(SessionError::AgentRunning);
    };
    config.model = state.model.clone();
    let context = AgentContext {
        system_prompt: state.system_prompt,
        messages: state.messages,
        tools: state.tools,
    };
    compactor
        .compact(
            &context,
            &config,
            focus,
            CompactionReason::Manual,
            &CancellationToken::new(),
        )
        .await
        .map_err(|e| SessionError::Compaction(e.to_string()))
}
