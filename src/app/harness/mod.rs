//! The coding harness: one component around the agent loop (its [`LoopHarness`] slot), chosen per model by a
//! [`Profile`]. It owns how the model changes files (JSON tools, or file blocks read from its text: [`blocks`]),
//! reads every call into a typed [`Call`] and every result into a typed [`Outcome`] (the file's text before and
//! after, read through the workspace's confinement), and asks its [`rules`] in [`RuleId::ORDER`]: an answer in
//! place of a call, what the model is told of a result, where the next reply starts, and whether the run may end
//! (the self-check). The prompt now running is [`rules::Task`], updated after the rules saw each outcome.

pub mod blocks;
pub mod blocks_grammar;
pub mod checks;
pub mod outcome;
pub mod profile;
pub mod rules;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::agent::{BeforeToolCall, EndDecision, LoopHarness, ReplyTrace, ResultRevision, RunEnd};
use crate::provider::{Message, ToolCall};
use crate::tools::policy::FileScope;
use crate::tools::support::workspace::WorkspaceState;
use crate::transcript::{AgentMessage, ToolResult};

pub use outcome::{Call, Outcome};
pub use profile::{EditFormat, Profile, RuleId};
use rules::{Cx, Reply, Rule, Task};

/// What a harness is built from.
pub struct HarnessSetup {
    pub profile: Profile,
    /// How the model changes files (the profile's unless the session says otherwise).
    pub format: EditFormat,
    /// Where the session's files are read from: the tools' own confinement.
    pub scope: FileScope,
    /// The session's workspace listing (`None`: the workspace grammar is off).
    pub state: Option<WorkspaceState>,
    /// `(tool name, may change the workspace)` for every tool the session has.
    pub tools: Vec<(String, bool)>,
    /// How the self-check runs check commands (`None`: it runs none).
    pub commands: Option<rules::self_check::CommandRunner>,
    /// Constrain blocks replies to [`blocks_grammar`] (measured: no gain; off unless asked).
    pub blocks_grammar: bool,
    /// A file the name of each rule that acts is appended to, once per rule (`bench agent --ablate` reruns
    /// only the runs a rule acted in: at t=0 the others are the same run).
    pub trace: Option<std::path::PathBuf>,
}

/// A call between `before_call` and `after_call`.
struct Pending {
    call: Call,
    /// Its file's text before it ran.
    before: Option<String>,
    answered: bool,
}

/// See the module docs. Shared by the session and its agents.
pub struct Harness {
    profile: Profile,
    format: EditFormat,
    scope: FileScope,
    state: Option<WorkspaceState>,
    mutating: HashMap<String, bool>,
    bash: bool,
    grammar: bool,
    rules: Vec<Box<dyn Rule>>,
    task: Mutex<Task>,
    pending: Mutex<HashMap<String, Pending>>,
    /// The outcomes of the calls since the last `next_prefill`, by call id.
    turn: Mutex<Vec<(String, Call, Outcome)>>,
    /// The workspace's files (size, modification time) when the prompt started: what a command changed.
    at_prompt: Mutex<Option<Fingerprint>>,
    /// The rules that acted in this session, and where they are traced.
    acted: Mutex<Vec<RuleId>>,
    trace: Option<std::path::PathBuf>,
}

type Fingerprint = Vec<(String, Option<(u64, std::time::SystemTime)>)>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Harness {
    pub fn new(setup: HarnessSetup) -> Arc<Self> {
        let bash = setup.tools.iter().any(|(n, _)| n == "bash");
        let blocks = setup.format == EditFormat::Blocks;
        let rules = setup
            .profile
            .rules
            .clone()
            .into_iter()
            .filter_map(|id| build_rule(id, blocks, bash, setup.commands.clone()))
            .collect();
        Arc::new(Self {
            profile: setup.profile,
            format: setup.format,
            scope: setup.scope,
            state: setup.state,
            mutating: setup.tools.into_iter().collect(),
            bash,
            grammar: setup.blocks_grammar && blocks,
            rules,
            task: Mutex::default(),
            pending: Mutex::default(),
            turn: Mutex::default(),
            at_prompt: Mutex::default(),
            acted: Mutex::default(),
            trace: setup.trace,
        })
    }

    /// `rule` acted (answered a call, revised a result or the prompt, started a reply, or kept the run going):
    /// traced once per session when a trace file was asked for.
    pub fn acted(&self, rule: RuleId) {
        let mut acted = lock(&self.acted);
        if acted.contains(&rule) {
            return;
        }
        acted.push(rule);
        let Some(path) = &self.trace else { return };
        let line = format!("{}\n", rule.name());
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the harness trace");
        }
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    pub fn format(&self) -> EditFormat {
        self.format
    }

    /// Whether the profile runs `rule` (for those decided where they act).
    pub fn runs(&self, rule: RuleId) -> bool {
        self.profile.runs(rule)
    }

    /// The rules that run, in the order they are asked.
    pub fn rule_ids(&self) -> Vec<RuleId> {
        self.rules.iter().map(|r| r.id()).collect()
    }

    /// A new prompt: `task` as the user wrote it, the files it named (with their text now), and the text the
    /// model gets (which the rules may extend).
    pub fn start_prompt(&self, task: &str, named: &[(String, String)], prompt: String) -> String {
        let generation = lock(&self.task).generation;
        *lock(&self.task) = Task {
            text: task.trim().to_string(),
            named: named.to_vec(),
            generation,
            ..Task::default()
        };
        *lock(&self.at_prompt) = self.fingerprint();
        let task_now = lock(&self.task).clone();
        let cx = self.cx(&task_now);
        let mut prompt = prompt;
        for rule in &self.rules {
            let before = prompt.len();
            rule.on_prompt(task, &mut prompt, &cx);
            if prompt.len() != before {
                self.acted(rule.id());
            }
        }
        prompt
    }

    fn cx<'a>(&'a self, task: &'a Task) -> Cx<'a> {
        Cx {
            task,
            scope: &self.scope,
            profile: &self.profile,
            format: self.format,
        }
    }

    /// The listed files with their size and modification time (`None` without a workspace listing).
    fn fingerprint(&self) -> Option<Fingerprint> {
        let state = self.state.as_ref()?;
        state.changed();
        let files = state.listing().files;
        Some(
            files
                .into_iter()
                .map(|f| {
                    let meta = self.scope.metadata(&f);
                    let stamp = meta.and_then(|m| Some((m.len(), m.modified().ok()?)));
                    (f, stamp)
                })
                .collect(),
        )
    }

    fn listing(&self) -> Vec<String> {
        self.state
            .as_ref()
            .map(|s| s.listing().files)
            .unwrap_or_default()
    }
}

/// The rule `id` for a session (`None`: it does not apply to this edit format or has no object of its own).
fn build_rule(
    id: RuleId,
    blocks: bool,
    bash: bool,
    commands: Option<rules::self_check::CommandRunner>,
) -> Option<Box<dyn Rule>> {
    use rules::{command_cue, named_files, repeats, second_choice, self_check};
    let rule: Box<dyn Rule> = match id {
        RuleId::Repeats => Box::<repeats::Repeats>::default(),
        RuleId::NoOpFinish => Box::<repeats::NoOpFinish>::default(),
        RuleId::UnchangedBlock if blocks => Box::new(named_files::UnchangedBlock),
        RuleId::NextNamedFile if blocks => Box::new(named_files::NextNamedFile),
        RuleId::SecondChoice if blocks => Box::new(second_choice::SecondChoice),
        RuleId::MissingFile if blocks => Box::<named_files::MissingFile>::default(),
        RuleId::CommandCue if blocks => Box::new(command_cue::CommandCue { bash }),
        RuleId::SelfCheck => Box::new(self_check::SelfCheck::new(commands)),
        _ => return None,
    };
    Some(rule)
}

/// `(name, may change the workspace)` of `tools`, as [`HarnessSetup::tools`] takes them.
pub fn mutating_tools(tools: &[Arc<dyn crate::tools::tool::Tool>]) -> Vec<(String, bool)> {
    use crate::tools::tool::PolicyTag;
    tools
        .iter()
        .map(|t| {
            let mutating = t.tags().iter().any(|g| *g != PolicyTag::ReadOnly);
            (t.spec().name.clone(), mutating)
        })
        .collect()
}

#[async_trait]
impl LoopHarness for Harness {
    fn hidden_tools(&self) -> Vec<String> {
        match self.format {
            EditFormat::Blocks => blocks::hidden_tools(),
            EditFormat::Tools => Vec::new(),
        }
    }

    fn response_format(&self) -> Option<crate::provider::ResponseFormat> {
        let lark = self
            .grammar
            .then(|| blocks_grammar::blocks_grammar(&self.listing(), self.bash))?;
        Some(crate::provider::ResponseFormat::Grammar { lark })
    }

    fn convert(&self, messages: &[AgentMessage]) -> Option<Vec<Message>> {
        (self.format == EditFormat::Blocks).then(|| blocks::convert(messages))
    }

    fn text_calls(&self, text: &str) -> Vec<ToolCall> {
        if self.format != EditFormat::Blocks {
            return Vec::new();
        }
        blocks::text_calls(text, &self.listing(), self.bash)
    }

    fn logprobs(&self) -> usize {
        let traced = self.rules.iter().any(|r| r.id() == RuleId::SecondChoice);
        if traced {
            rules::second_choice::ALTERNATIVES
        } else {
            0
        }
    }

    async fn before_call(&self, raw: &ToolCall) -> BeforeToolCall {
        let mutating = self.mutating.get(&raw.name).copied().unwrap_or(true);
        let call = Call::of(raw, mutating);
        let task = lock(&self.task).clone();
        let cx = self.cx(&task);
        // The format example's code written into a task's file is refused (answered, so the repeat guard counts
        // it); else the rules, in order.
        let example = matches!(&call, Call::Block { content, .. } if blocks::is_example(content));
        let answer = example
            .then(|| BeforeToolCall::Respond {
                content: "That block is the format example's code, not this task's: nothing was written. Write \
                          the block this task needs."
                    .into(),
                is_error: true,
            })
            .or_else(|| {
                self.rules.iter().find_map(|r| {
                    let answer = r.before_call(raw, &call, &cx)?;
                    self.acted(r.id());
                    Some(answer)
                })
            });
        let before = match &answer {
            None => call.path().and_then(|p| cx.read(p)),
            Some(_) => None,
        };
        let answered = answer.is_some();
        lock(&self.pending).insert(
            raw.id.clone(),
            Pending {
                call,
                before,
                answered,
            },
        );
        answer.unwrap_or(BeforeToolCall::Proceed)
    }

    async fn after_call(&self, raw: &ToolCall, result: &ToolResult) -> ResultRevision {
        let pending = lock(&self.pending).remove(&raw.id);
        let Some(Pending {
            call,
            before,
            answered,
        }) = pending
        else {
            // Refused before the harness was asked (unknown tool, invalid arguments, the policy).
            return ResultRevision::default();
        };
        let mut task = lock(&self.task).clone();
        let outcome = if answered {
            Outcome::Answered
        } else {
            let after = call.path().and_then(|p| self.cx(&task).read(p));
            Outcome::of(
                &call,
                result.is_error,
                &result.content,
                before.clone(),
                after,
            )
        };
        let mut reply = Reply {
            content: result.content.clone(),
            is_error: result.is_error,
            end: None,
        };
        {
            let cx = self.cx(&task);
            for rule in &self.rules {
                let before = reply.clone();
                rule.after_call(raw, &call, &outcome, &cx, &mut reply);
                if reply != before {
                    self.acted(rule.id());
                }
            }
        }
        record(&mut task, &call, &outcome, before);
        *lock(&self.task) = task;
        lock(&self.turn).push((raw.id.clone(), call, outcome));
        ResultRevision {
            content: (reply.content != result.content).then_some(reply.content),
            is_error: (reply.is_error != result.is_error).then_some(reply.is_error),
            end: reply.end,
        }
    }

    fn next_prefill(
        &self,
        trace: &ReplyTrace,
        calls: &[ToolCall],
        _results: &[ToolResult],
    ) -> Option<String> {
        let done = std::mem::take(&mut *lock(&self.turn));
        let turn: Vec<(Call, Outcome)> = calls
            .iter()
            .filter_map(|c| done.iter().find(|(id, _, _)| *id == c.id))
            .map(|(_, call, outcome)| (call.clone(), outcome.clone()))
            .collect();
        let task = lock(&self.task).clone();
        let cx = self.cx(&task);
        self.rules.iter().find_map(|r| {
            let start = r.next_prefill(trace, &turn, &cx)?;
            self.acted(r.id());
            Some(start)
        })
    }

    async fn before_end(&self) -> EndDecision {
        lock(&self.turn).clear();
        let mut task = lock(&self.task).clone();
        // A command that left every file as it was changed nothing.
        if task.ran_command && !task.landed() {
            let before = lock(&self.at_prompt).clone();
            if before.is_some() && before == self.fingerprint() {
                task.ran_command = false;
            }
        }
        let cx = self.cx(&task);
        for rule in &self.rules {
            if let Some(decision) = rule.before_end(&cx).await {
                // A check that passes lets the run end as it would have: only a verdict that differs acts.
                if decision != EndDecision::End(RunEnd::Completed) {
                    self.acted(rule.id());
                }
                return decision;
            }
        }
        EndDecision::End(RunEnd::Completed)
    }
}

/// What an outcome changes in the prompt's record.
fn record(task: &mut Task, call: &Call, outcome: &Outcome, before: Option<String>) {
    let ran = !matches!(outcome, Outcome::Refused { .. } | Outcome::Answered);
    if ran && call.mutating() && !matches!(outcome, Outcome::Ran { ok: false, .. }) {
        task.generation += 1;
    }
    match outcome {
        Outcome::Changed { path, .. } | Outcome::Created { path, .. }
            if !task.changed.iter().any(|(p, _)| p == path) =>
        {
            task.changed.push((path.clone(), before));
        }
        Outcome::Ran { ok: true, .. } => task.ran_command = true,
        _ => {}
    }
}
