//! The loop's configuration and the hooks that sit at its boundaries: context transformation and conversion
//! at the model boundary (they never fail), steering / follow-up sources, the before/after tool-call hooks and
//! the context policy (when the transcript must shrink).

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::compaction_record::Compaction;
pub use super::harness::BeforeToolCall;
use crate::provider::{Message, Provider, Sampling, ToolCall};
use crate::tools::policy::Policy;
use crate::tools::support::workspace::WorkspaceState;
use crate::tools::tool::Tool;
use crate::transcript::{AgentMessage, ToolResult};

/// Rewrites the transcript before each model call (compaction, pruning). Never fails: on trouble it returns
/// its input.
pub type TransformContext =
    Arc<dyn Fn(Vec<AgentMessage>) -> BoxFuture<'static, Vec<AgentMessage>> + Send + Sync>;

/// Maps the transcript to what the model sees. Never fails.
pub type ConvertToLlm = Arc<dyn Fn(&[AgentMessage]) -> Vec<Message> + Send + Sync>;

/// Messages queued by the user while the agent runs (steering, follow-ups).
pub type MessageSource = Arc<dyn Fn() -> Vec<AgentMessage> + Send + Sync>;

pub type BeforeToolCallHook =
    Arc<dyn Fn(&ToolCall) -> BoxFuture<'static, BeforeToolCall> + Send + Sync>;

/// What `after_tool_call` may replace in a result (`None` keeps the original).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AfterToolCall {
    pub content: Option<String>,
    pub details: Option<serde_json::Value>,
    pub is_error: Option<bool>,
}

pub type AfterToolCallHook =
    Arc<dyn Fn(&ToolCall, &ToolResult) -> BoxFuture<'static, AfterToolCall> + Send + Sync>;

/// Everything one run of the loop needs. Cloning is cheap (the heavy parts are shared).
#[derive(Clone)]
pub struct AgentLoopConfig {
    pub provider: Arc<dyn Provider>,
    /// Model id passed to the provider (empty: the provider's default).
    pub model: String,
    pub sampling: Sampling,
    pub max_tokens: Option<u32>,
    /// The thinking level asked of reasoning models (`None`: the model's default).
    pub thinking: Option<crate::provider::Thinking>,
    /// Whether one model turn may hold several tool calls. Off by default: the model sees each result before its
    /// next call, and small models cannot run away writing near-identical calls until the token limit.
    pub parallel_tool_calls: bool,
    /// Turns (model calls) per run before it ends with `max_turns`.
    pub max_turns: usize,
    /// Names the conversation for the engine's KV prefix reuse.
    pub cache_key: Option<String>,
    /// The session's tool resources (background jobs, overflow logs), cleaned when the session ends.
    pub resources: Option<crate::tools::support::session_resources::SessionResources>,
    pub policy: Policy,
    /// Working directory and optional confinement root of the file tools.
    pub cwd: PathBuf,
    pub workspace: Option<PathBuf>,
    /// What the session knows of its files (the listing, what the model has read). With it, built-in tools
    /// constrain their arguments on the local engine to calls that can work here (`Tool::argument_grammar`) and
    /// the file tools report what they read and change. `None`: plain JSON Schema.
    pub workspace_state: Option<WorkspaceState>,
    pub transform_context: Option<TransformContext>,
    pub convert_to_llm: ConvertToLlm,
    pub steering: Option<MessageSource>,
    pub follow_up: Option<MessageSource>,
    pub before_tool_call: Option<BeforeToolCallHook>,
    pub after_tool_call: Option<AfterToolCallHook>,
    /// The context budget: checked when a run starts and at every `turn_end`, and asked to compact once after a
    /// context-overflow error (see `agent::compaction::Compactor`). `None`: the transcript is sent as it is.
    pub context_policy: Option<SharedContextPolicy>,
    /// The coding harness around the loop (`app::harness`): `None` runs the bare loop.
    pub harness: Option<Arc<dyn super::harness::LoopHarness>>,
}

pub const DEFAULT_MAX_TURNS: usize = 50;

impl AgentLoopConfig {
    pub fn new(provider: Arc<dyn Provider>) -> Self {
        Self {
            provider,
            model: String::new(),
            sampling: Sampling::default(),
            max_tokens: None,
            thinking: None,
            parallel_tool_calls: false,
            max_turns: DEFAULT_MAX_TURNS,
            cache_key: None,
            resources: None,
            policy: Policy::all(),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            workspace: None,
            workspace_state: None,
            transform_context: None,
            convert_to_llm: Arc::new(crate::transcript::convert_to_llm),
            steering: None,
            follow_up: None,
            before_tool_call: None,
            after_tool_call: None,
            context_policy: None,
            harness: None,
        }
    }
}

/// Decides when the transcript must shrink. Like `transform_context`, it never fails: trouble is logged and
/// answered with `None` (the loop then carries on, and a real overflow ends the turn with the provider's error).
#[async_trait]
pub trait ContextPolicy: Send + Sync {
    /// Called when a run starts and at every `turn_end` (not after an error or abort), with the transcript as it
    /// stands (before `transform_context`). Returns the compaction to apply when the context is over budget.
    async fn check(
        &self,
        context: &AgentContext,
        config: &AgentLoopConfig,
        cancel: &CancellationToken,
    ) -> Option<Compaction>;

    /// Called once when the provider rejected a request as too long for the context window; a compaction
    /// returned here is applied and the request retried once.
    async fn on_overflow(
        &self,
        context: &AgentContext,
        config: &AgentLoopConfig,
        cancel: &CancellationToken,
    ) -> Option<Compaction>;
}

/// A shared policy, as [`AgentLoopConfig::context_policy`] holds it.
pub type SharedContextPolicy = Arc<dyn ContextPolicy>;

/// The state a run starts from.
#[derive(Clone, Default)]
pub struct AgentContext {
    pub system_prompt: String,
    pub messages: Vec<AgentMessage>,
    pub tools: Vec<Arc<dyn Tool>>,
}
