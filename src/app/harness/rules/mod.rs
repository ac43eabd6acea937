//! The rules behind one trait. Each sees typed calls and outcomes ([`super::outcome`]) and the prompt now running
//! ([`Task`]); the harness asks them in [`RuleId::ORDER`](super::profile::RuleId::ORDER), the first answer to a
//! call wins, and every rule may add to what the model is told of a result or end the run.

use async_trait::async_trait;

use super::outcome::{Call, Outcome};
use super::profile::{EditFormat, Profile, RuleId};
use crate::agent::{BeforeToolCall, EndDecision, ReplyTrace, RunEnd};
use crate::provider::ToolCall;
use crate::tools::policy::FileScope;

pub mod command_cue;
pub mod named_files;
pub mod repeats;
pub mod second_choice;
pub mod self_check;

/// What the rules know of the prompt now running.
#[derive(Debug, Clone, Default)]
pub struct Task {
    /// The task as the user wrote it.
    pub text: String,
    /// The files the prompt named (shown to the model with it), with their text then.
    pub named: Vec<(String, String)>,
    /// Successful calls that may have changed the workspace since the session started.
    pub generation: u64,
    /// The files changed since the prompt started, each with its text before the first change (`None`: the
    /// prompt created it), in the order they changed.
    pub changed: Vec<(String, Option<String>)>,
    /// A command ran successfully since the prompt started and may have changed files (the harness asks the
    /// rules' end check with this cleared when every file is as it was).
    pub ran_command: bool,
}

impl Task {
    /// Whether a change landed since the prompt started.
    pub fn landed(&self) -> bool {
        !self.changed.is_empty()
    }
}

/// What a rule sees besides the call: the prompt now running, where files are read from, the profile.
pub struct Cx<'a> {
    pub task: &'a Task,
    pub scope: &'a FileScope,
    pub profile: &'a Profile,
    pub format: EditFormat,
}

impl Cx<'_> {
    /// The current text of `path`, when it is a text file inside the session's scope.
    pub fn read(&self, path: &str) -> Option<String> {
        self.scope
            .read_text(path, super::outcome::MAX_TRACKED_BYTES)
    }
}

/// What the model is told of a result, as the rules revise it, and an end of the run after this turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub content: String,
    pub is_error: bool,
    pub end: Option<RunEnd>,
}

/// One rule. Every method has the neutral default.
#[async_trait]
pub trait Rule: Send + Sync {
    fn id(&self) -> RuleId;

    /// Before `call` runs: an answer in its place.
    fn before_call(&self, _raw: &ToolCall, _call: &Call, _cx: &Cx<'_>) -> Option<BeforeToolCall> {
        None
    }

    /// After `call` ran (or was answered) with `outcome`.
    fn after_call(
        &self,
        _raw: &ToolCall,
        _call: &Call,
        _outcome: &Outcome,
        _cx: &Cx<'_>,
        _reply: &mut Reply,
    ) {
    }

    /// The start of the reply after a turn whose calls had these outcomes.
    fn next_prefill(
        &self,
        _trace: &ReplyTrace,
        _turn: &[(Call, Outcome)],
        _cx: &Cx<'_>,
    ) -> Option<String> {
        None
    }

    /// The run would end: `None` leaves the decision to the rules after this one.
    async fn before_end(&self, _cx: &Cx<'_>) -> Option<EndDecision> {
        None
    }

    /// A new prompt starts: its text for the model (`prompt`) may be extended.
    fn on_prompt(&self, _task: &str, _prompt: &mut String, _cx: &Cx<'_>) {}
}
