//! The events an agent run emits, in Pi's vocabulary. Serialised as JSON objects tagged by a snake_case `type`
//! (the `--mode json` output, the HTTP SSE stream and the RPC protocol all use this shape).

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use super::compaction_record::{CompactionDetails, CompactionReason};
use crate::provider::ProviderEvent;
use crate::transcript::{AgentMessage, ToolResult};

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentEndReason {
    /// The model stopped calling tools and no follow-up was queued.
    Completed,
    /// `max_turns` turns ran without the model finishing.
    MaxTurns,
    /// The model's reply failed.
    Error,
    /// The run was aborted.
    Aborted,
    /// The harness stopped the run (`RunEnd::Stopped`: e.g. the model kept rewriting one file, shrinking it, or
    /// changed nothing on a task that asks for a change); the reason is the `agent_end` error. The job is not done.
    Stopped,
    /// The run's own checks failed when it would have ended (`RunEnd::Failed`: a file no longer parses, a
    /// definition went missing, the named test command fails); what failed is the `agent_end` error.
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    AgentStart,
    TurnStart,
    /// A message enters the transcript (user, assistant as it starts streaming, tool result).
    MessageStart {
        message: AgentMessage,
    },
    /// The streaming assistant message changed: `delta` is the provider event, `message` the message so far.
    MessageUpdate {
        message: AgentMessage,
        delta: ProviderEvent,
    },
    MessageEnd {
        message: AgentMessage,
    },
    ToolExecutionStart {
        tool_call_id: String,
        tool_name: String,
        args: serde_json::Value,
    },
    /// Partial output of a running tool (bash streams its output this way).
    ToolExecutionUpdate {
        tool_call_id: String,
        tool_name: String,
        partial: String,
    },
    ToolExecutionEnd {
        tool_call_id: String,
        tool_name: String,
        result: ToolResult,
        is_error: bool,
    },
    TurnEnd {
        message: AgentMessage,
        tool_results: Vec<ToolResult>,
    },
    /// The context was compacted (after a `turn_end`, or before a retry after a context overflow): the messages
    /// before index `first_kept` of the transcript were replaced by `message` (a `compaction_summary`).
    Compaction {
        message: AgentMessage,
        first_kept: usize,
        tokens_before: u64,
        tokens_after: u64,
        reason: CompactionReason,
        details: CompactionDetails,
    },
    AgentEnd {
        reason: AgentEndReason,
        /// The messages this run added to the transcript.
        messages: Vec<AgentMessage>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

impl AgentEvent {
    /// The snake_case tag, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            AgentEvent::AgentStart => "agent_start",
            AgentEvent::TurnStart => "turn_start",
            AgentEvent::MessageStart { .. } => "message_start",
            AgentEvent::MessageUpdate { .. } => "message_update",
            AgentEvent::MessageEnd { .. } => "message_end",
            AgentEvent::ToolExecutionStart { .. } => "tool_execution_start",
            AgentEvent::ToolExecutionUpdate { .. } => "tool_execution_update",
            AgentEvent::ToolExecutionEnd { .. } => "tool_execution_end",
            AgentEvent::TurnEnd { .. } => "turn_end",
            AgentEvent::Compaction { .. } => "compaction",
            AgentEvent::AgentEnd { .. } => "agent_end",
        }
    }
}

/// What travels from the loop to its consumer: an event, or a barrier the consumer answers once every event
/// before it has been handled (passed to every listener, or taken from the stream).
// Events are the common case and went through the channel unboxed before; a barrier is one per tool call.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Envelope {
    Event(AgentEvent),
    Delivered(oneshot::Sender<()>),
}

impl Envelope {
    /// The event, answering a barrier on the way: every event sent before it has been taken already.
    pub(crate) fn into_event(self) -> Option<AgentEvent> {
        match self {
            Envelope::Event(ev) => Some(ev),
            Envelope::Delivered(done) => {
                let _ = done.send(());
                None
            }
        }
    }
}

/// Where events go. A consumer that went away is not an error: the run finishes quietly.
pub(crate) struct Emitter(pub mpsc::Sender<Envelope>);

impl Emitter {
    pub(super) async fn emit(&self, ev: AgentEvent) {
        let _ = self.0.send(Envelope::Event(ev)).await;
    }

    /// Waits until every event emitted so far has been handled by the consumer. Called before anything that
    /// reaches the outside world past the event stream (an approval request written by the door), so that a
    /// client never sees that request ahead of the events that led to it.
    pub(super) async fn delivered(&self) {
        let (tx, rx) = oneshot::channel();
        if self.0.send(Envelope::Delivered(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }

    pub(super) async fn message(&self, m: &AgentMessage) {
        self.emit(AgentEvent::MessageStart { message: m.clone() })
            .await;
        self.emit(AgentEvent::MessageEnd { message: m.clone() })
            .await;
    }
}
