//! Leaving a branch of the session tree with a summary (Pi's `branch_summary`), and the tree's annotations:
//! labels on entries and the session's name (`session_info`).
//!
//! The summary covers the messages on the current path that the new position leaves behind. The model writes
//! it (greedy, no tools, the summariser's system prompt); when it cannot, a deterministic summary of the user
//! requests and files touched is recorded instead, so leaving a branch never fails on the model.

use std::collections::{HashMap, HashSet};

use tokio_util::sync::CancellationToken;

use super::tree_ops::{find_entry, navigation_target};
use super::{AppError, CodingSession};
use crate::agent::{summary, AgentMessage};
use crate::provider::{collect, CompletionRequest, Message, Sampling, ToolChoice};
use crate::session::{EntryKind, SessionEntry, SessionStore};

/// The longest tool result kept verbatim in the text the summariser reads.
const MAX_RESULT_CHARS: usize = 2000;
/// Tokens the branch summary may take.
const SUMMARY_TOKENS: u32 = 512;

/// Entry ids from the root to `leaf`.
fn path_to(entries: &[SessionEntry], leaf: Option<&str>) -> Vec<String> {
    let parents: HashMap<&str, Option<&str>> = entries
        .iter()
        .map(|e| (e.id.as_str(), e.parent_id.as_deref()))
        .collect();
    let mut path = Vec::new();
    let mut at = leaf;
    while let Some(id) = at {
        if path.len() > entries.len() {
            break; // a cycle in a damaged file: stop rather than loop
        }
        path.push(id.to_string());
        at = parents.get(id).copied().flatten();
    }
    path.reverse();
    path
}

impl CodingSession {
    /// The messages on the current path that moving to `target` (`None`: the root) leaves behind.
    fn left_behind(&self, target: Option<&str>) -> Vec<AgentMessage> {
        let Some(store) = self.store() else {
            return Vec::new();
        };
        let entries = store.entries();
        let keep: HashSet<String> = path_to(&entries, target).into_iter().collect();
        let by_id: HashMap<&str, &SessionEntry> =
            entries.iter().map(|e| (e.id.as_str(), e)).collect();
        path_to(&entries, store.leaf().as_deref())
            .into_iter()
            .filter(|id| !keep.contains(id))
            .filter_map(|id| match &by_id.get(id.as_str())?.kind {
                EntryKind::Message { message } => Some(message.clone()),
                _ => None,
            })
            .collect()
    }

    /// A summary of `messages` written by the model, or the deterministic one when the model fails. `None` when
    /// there is nothing to summarise.
    pub async fn summarize_branch(&self, messages: &[AgentMessage]) -> Option<String> {
        if messages.is_empty() {
            return None;
        }
        let backend = self.backend();
        let conversation = summary::serialize(messages, MAX_RESULT_CHARS);
        let request = CompletionRequest {
            model: self.agent().state().model,
            system: Some(summary::SUMMARY_SYSTEM_PROMPT.to_string()),
            messages: vec![Message::user(format!(
                "<conversation>\n{conversation}\n</conversation>\n\n{}",
                summary::BRANCH_INSTRUCTIONS
            ))],
            tool_choice: ToolChoice::None,
            sampling: Sampling::greedy(),
            max_tokens: Some(SUMMARY_TOKENS),
            ..CompletionRequest::default()
        };
        let done = collect(backend.provider.stream(request, CancellationToken::new())).await;
        let text = done.message.text();
        match done.error {
            None if !text.trim().is_empty() => Some(text.trim().to_string()),
            error => {
                let why = error.map_or_else(
                    || "the model returned an empty summary".to_string(),
                    |e| format!("the model could not summarise: {}", e.message),
                );
                Some(summary::truncation_body(None, messages, &why))
            }
        }
    }

    /// `/branch ENTRY`: moves to `entry_id` as `/tree` does (before a user message, whose text is returned for
    /// the editor) and records a generated summary of the branch left behind. Returns the text and the summary.
    pub async fn branch_summarized(
        &self,
        entry_id: &str,
    ) -> Result<(Option<String>, Option<String>), AppError> {
        self.require_idle()?;
        let recorder = self.require_recorder()?;
        let (at, text) = navigation_target(&find_entry(recorder.store().as_ref(), entry_id)?);
        let summary = self.branch_from_summarized(at.as_deref()).await?;
        Ok((text, summary))
    }

    /// Continues from entry `from` exactly (`None`: a new root), recording a generated summary of the branch
    /// left behind (none when nothing is left behind). Returns the summary.
    pub async fn branch_from_summarized(
        &self,
        from: Option<&str>,
    ) -> Result<Option<String>, AppError> {
        self.require_idle()?;
        let recorder = self.require_recorder()?;
        if let Some(id) = from {
            find_entry(recorder.store().as_ref(), id)?;
        }
        let summary = self.summarize_branch(&self.left_behind(from)).await;
        recorder
            .branch(&self.agent(), from, summary.clone())
            .await?;
        Ok(summary)
    }

    /// `/rewind N`: drops the last `n` messages of the current path and records a generated summary of them at
    /// the new position. Returns the new leaf (the summary's entry) and the summary.
    pub async fn rewind_summarized(
        &self,
        n: usize,
    ) -> Result<(Option<String>, Option<String>), AppError> {
        self.require_idle()?;
        let recorder = self.require_recorder()?;
        let messages = self.agent().state().messages;
        if n == 0 || n > messages.len() {
            return Err(AppError::usage(format!(
                "rewind takes 1 to {} messages",
                messages.len()
            )));
        }
        let summary = self.summarize_branch(&messages[messages.len() - n..]).await;
        let mut leaf = recorder.rewind(&self.agent(), n)?;
        if let Some(s) = &summary {
            recorder
                .branch(&self.agent(), leaf.as_deref(), Some(s.clone()))
                .await?;
            leaf = recorder.store().leaf();
        }
        Ok((leaf, summary))
    }

    /// Labels entry `entry_id` (`None`: the current leaf); `label: None` clears it. Returns the entry's id.
    pub async fn set_label(
        &self,
        entry_id: Option<&str>,
        label: Option<String>,
    ) -> Result<String, AppError> {
        let recorder = self.require_recorder()?;
        let store = recorder.store();
        let target = match entry_id {
            Some(id) => find_entry(store.as_ref(), id)?.id,
            None => store
                .leaf()
                .ok_or_else(|| AppError::usage("the session has no entries to label"))?,
        };
        let label = label
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty());
        store
            .append(EntryKind::Label {
                target_id: target.clone(),
                label,
            })
            .await?;
        Ok(target)
    }

    /// Names the session (a `session_info` entry; shown in `/resume` and `/session`).
    pub async fn set_name(&self, name: &str) -> Result<(), AppError> {
        let name = name.trim();
        if name.is_empty() {
            return Err(AppError::usage("give the session a name"));
        }
        let recorder = self.require_recorder()?;
        recorder
            .store()
            .append(EntryKind::SessionInfo {
                name: Some(name.to_string()),
            })
            .await?;
        Ok(())
    }

    /// Whether the tree has an entry with this id (or a unique prefix of one).
    pub fn has_entry(&self, id: &str) -> bool {
        self.store()
            .is_some_and(|s| find_entry(s.as_ref(), id).is_ok())
    }

    /// The session's name: the latest `session_info` name, if any.
    pub fn name(&self) -> Option<String> {
        let store = self.store()?;
        store.entries().iter().rev().find_map(|e| match &e.kind {
            EntryKind::SessionInfo { name: Some(n) } if !n.trim().is_empty() => Some(n.clone()),
            _ => None,
        })
    }
}
