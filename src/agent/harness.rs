//! The loop's one harness slot: what a coding harness may decide at the loop's boundaries (which tools a
//! request offers and how its calls are read from text, an answer instead of running a call, what the model is
//! told of a result, where the next reply starts, and whether the run may end yet), and the typed end of a run
//! it reports. The loop itself knows no rule; `app::harness` is the implementation.

use async_trait::async_trait;

use crate::provider::{Message, ResponseFormat, TokenLogprob, ToolCall, ToolChoice};
use crate::transcript::{AgentMessage, ToolResult};

/// What `before_tool_call` decides.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeToolCall {
    /// Run the call as is.
    Proceed,
    /// Run it with these arguments instead (validated again).
    Rewrite(serde_json::Value),
    /// Do not run it; the model gets an error result with this reason.
    Block(String),
    /// Do not run it; the model gets this result instead (an answer the hook already knows: the earlier error of
    /// the same call, "already done").
    Respond { content: String, is_error: bool },
}

/// How a run ends when a harness ends it (or lets it end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEnd {
    /// The job is done (`AgentEndReason::Completed`).
    Completed,
    /// Stopped before it did harm or went round in circles; the job is not claimed done
    /// (`AgentEndReason::Stopped`, with the reason).
    Stopped(String),
    /// The run's own checks failed and no retry is left (`AgentEndReason::Failed`, with what failed).
    Failed(String),
}

/// What the harness makes of a call's result: replacements for what the model sees, and an end of the run
/// after this turn's results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultRevision {
    pub content: Option<String>,
    pub is_error: Option<bool>,
    pub end: Option<RunEnd>,
}

/// What the harness decides when a run would end (the model replied without calls).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndDecision {
    /// End the run so.
    End(RunEnd),
    /// Not done yet: add `note` as a user message and ask for one more reply, starting from `prefill` if given.
    Continue {
        note: String,
        prefill: Option<String>,
    },
}

/// A finished reply as the model produced it: its text, and for the tokens it generated (those after
/// `generated_from`, a byte offset into `text`: an assistant prefill before it was given, not generated) each
/// token with its most likely alternatives, when [`LoopHarness::logprobs`] asked for them.
#[derive(Debug, Clone, Default)]
pub struct ReplyTrace {
    pub text: String,
    pub generated_from: usize,
    pub tokens: Vec<TokenLogprob>,
}

/// A coding harness around the loop. Every method has the neutral default, so a harness implements only what
/// it changes. Calls are asked in the loop's order: `before_call` before the session's own `before_tool_call`
/// hook (approvals), `after_call` after its `after_tool_call`.
#[async_trait]
pub trait LoopHarness: Send + Sync {
    /// Tools that run calls made in text but are not offered to the model as JSON tools.
    fn hidden_tools(&self) -> Vec<String> {
        Vec::new()
    }

    /// The `tool_choice` of the next request (`None`: `auto`).
    fn tool_choice(&self, _messages: &[AgentMessage]) -> Option<ToolChoice> {
        None
    }

    /// The shape the next reply is constrained to (`None`: free text and tool calls).
    fn response_format(&self) -> Option<ResponseFormat> {
        None
    }

    /// What the model sees of the transcript (`None`: the loop's `convert_to_llm`).
    fn convert(&self, _messages: &[AgentMessage]) -> Option<Vec<Message>> {
        None
    }

    /// The calls a finished reply makes in its text (added to the turn and run like tool calls).
    fn text_calls(&self, _text: &str) -> Vec<ToolCall> {
        Vec::new()
    }

    /// Alternatives per token to trace replies with (0: none).
    fn logprobs(&self) -> usize {
        0
    }

    /// Before `call` runs: `Proceed`, or an answer in its place.
    async fn before_call(&self, _call: &ToolCall) -> BeforeToolCall {
        BeforeToolCall::Proceed
    }

    /// After `call` ran (or was answered) with `result`.
    async fn after_call(&self, _call: &ToolCall, _result: &ToolResult) -> ResultRevision {
        ResultRevision::default()
    }

    /// Where the reply after this turn starts (an assistant prefill the model continues), from the turn's trace.
    fn next_prefill(
        &self,
        _trace: &ReplyTrace,
        _calls: &[ToolCall],
        _results: &[ToolResult],
    ) -> Option<String> {
        None
    }

    /// The run would end: is the job done?
    async fn before_end(&self) -> EndDecision {
        EndDecision::End(RunEnd::Completed)
    }
}
