//! The agent runtime (Pi's pi-agent-core): the stateless loop (`agent_loop`), the stateful `Agent` around it
//! (queues, abort, listeners), the transcript's message kinds and the events a run emits.

pub mod compaction;
pub mod compaction_record;
pub mod context;
pub mod events;
pub mod handle;
pub mod harness;
pub mod hooks;
mod prefill;
pub mod run;
pub mod summary;
mod tool_exec;

pub use crate::transcript::{convert_to_llm, AgentMessage, AssistantTurn, ToolResult};
pub use compaction::{CompactionSettings, Compactor};
pub use compaction_record::{Compaction, CompactionDetails, CompactionReason};
pub use events::{AgentEndReason, AgentEvent};
pub use handle::{Agent, AgentError, AgentState, AgentStatus, Listener, QueueMode};
pub use harness::{EndDecision, LoopHarness, ReplyTrace, ResultRevision, RunEnd};
pub use hooks::{
    AfterToolCall, AfterToolCallHook, AgentContext, AgentLoopConfig, BeforeToolCall,
    BeforeToolCallHook, ContextPolicy, SharedContextPolicy,
};
pub use run::agent_loop;
