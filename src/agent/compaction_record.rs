//! What one compaction did: the record a [`ContextPolicy`](super::hooks::ContextPolicy) returns, the loop
//! applies to the transcript, the events carry and the session stores. The policy that makes them is
//! `compaction.rs`.

use serde::{Deserialize, Serialize};

use crate::env::now_ms;
use crate::transcript::AgentMessage;

/// Why a compaction ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionReason {
    /// The context passed `window − reserve` at a `turn_end`.
    Threshold,
    /// The provider rejected a request as too long.
    Overflow,
    /// Asked for (`/compact`, the API).
    Manual,
}

/// What a compaction recorded besides the summary (stored as the session entry's `details`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompactionDetails {
    pub read_files: Vec<String>,
    pub modified_files: Vec<String>,
    /// Grounding refs of the tool results dropped by this and earlier compactions.
    pub refs: Vec<String>,
    /// Whether the model wrote the summary (`false`: truncation).
    pub summarized: bool,
    /// Whether the cut fell inside a turn (the kept part starts after its user message).
    pub split_turn: bool,
    /// Messages replaced by the summary.
    pub dropped_messages: usize,
    /// Why summarising was not used, if it was not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
}

/// One compaction: messages before `first_kept` are replaced by one `compaction_summary` message.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    pub summary: String,
    /// Index, in the transcript that was compacted, of the first message kept.
    pub first_kept: usize,
    /// The exact prompt size before and after.
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub reason: CompactionReason,
    pub details: CompactionDetails,
}

impl Compaction {
    /// The message that replaces the dropped ones.
    pub fn message(&self) -> AgentMessage {
        AgentMessage::CompactionSummary {
            summary: self.summary.clone(),
            tokens_before: self.tokens_before,
            timestamp: now_ms(),
        }
    }

    /// `messages` (the transcript that was compacted) with the compaction applied.
    pub fn apply(&self, messages: &[AgentMessage]) -> Vec<AgentMessage> {
        let kept = messages.get(self.first_kept..).unwrap_or_default();
        std::iter::once(self.message())
            .chain(kept.iter().cloned())
            .collect()
    }
}
