//! The loop rules that help a small model finish a job, as `before_tool_call` / `after_tool_call` hooks around
//! the session's other hooks (approvals):
//!
//! - an identical call that just failed is not run again: the model gets the earlier error, and for a call that
//!   names a file, the file's text as it is now;
//! - an identical mutating call that just succeeded (nothing changed since) is answered "already done", with the
//!   earlier result;
//! - a no-op call (an `edit` whose `old_text` is its `new_text`, a `write` of the file's own content) after a
//!   change landed is how small models say they are done (instead of replying in text): it is not run, and the
//!   run ends as completed;
//! - a call that would undo the change just made (an `edit` with the last edit's pairs reversed, a `write` of
//!   the text the last write replaced) is how a model flips a right value back and forth (`"port": 9000`, then
//!   8080, then 9000, …): it is not run, the change stands, and the run ends;
//! - a run that keeps rewriting one file with ever shorter content (a model shrinking a file toward nothing), or
//!   that keeps repeating calls already answered, is stopped (`AgentEndReason::Stopped`: the job is not claimed
//!   done; the task's own check decides).
//!
//! "Just" means: no mutating call has succeeded since (a successful `write`, `edit` or `bash` may change what the
//! same call does). None of the rules runs a tool or hides an error: a refused repeat is answered with what the
//! model was told the first time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::agent::hooks::{AfterToolCall, AfterToolCallHook, BeforeToolCall, BeforeToolCallHook};
use crate::provider::ToolCall;
use crate::tools::edit::file_excerpt;
use crate::tools::policy::FileScope;
use crate::tools::write_block::{apply_block, WRITE_BLOCK};

/// Consecutive writes of one file, each shorter than the one before, that stop the run.
pub const SHRINKING_WRITES: usize = 3;
/// Repeats answered in a row (without a call that ran in between) that stop the run.
pub const REPEATS_ANSWERED: usize = 3;
/// The largest file whose text a rule shows or compares.
const FILE_TEXT_MAX_BYTES: u64 = 64 * 1024;

/// How a call's outcome ends the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Stopped, the job not claimed done (the reason).
    Stopped(String),
    /// Finished: the model's call said it had nothing more to change.
    Finished,
}

#[derive(Default)]
struct State {
    /// Successful mutating calls so far: what an earlier outcome is valid for.
    generation: u64,
    /// Call key → (generation it failed at, its error).
    failed: HashMap<String, (u64, String)>,
    /// Call key → (generation after it succeeded, its result) for mutating calls.
    succeeded: HashMap<String, (u64, String)>,
    /// The lengths of the latest run of `write`s to one path: (path, lengths).
    writes: Option<(String, Vec<usize>)>,
    /// Repeats answered since the last call that ran.
    answered_in_a_row: usize,
    /// Ids of the calls answered by [`LoopRules::before`] whose results are not yet recorded.
    answered: std::collections::HashSet<String>,
    /// Ids of the no-op calls answered after a change landed: the run ends after them.
    finishing: std::collections::HashSet<String>,
    /// The last change that landed, when it was the last mutating call: what undoing it looks like.
    last_change: Option<LastChange>,
    /// A `write` let through → the file's text before it (`None`: no such file).
    pending_write: HashMap<String, Option<String>>,
}

/// A change that landed: its file, the `edit` pairs `(old_text, new_text)`, or the text a `write` replaced.
struct LastChange {
    path: String,
    edits: Vec<(String, String)>,
    replaced: Option<String>,
}

/// The rules of one session. Cloning shares the state.
#[derive(Clone)]
pub struct LoopRules {
    state: Arc<Mutex<State>>,
    /// Tool name → whether it may change the workspace (any tag but read-only).
    mutating: Arc<HashMap<String, bool>>,
    /// Where the session's files may be read from: the tools' own confinement.
    scope: FileScope,
}

impl LoopRules {
    /// Rules for a session whose tools are `(name, mutating)` and whose files are `scope`'s (the files the rules
    /// show or compare are read through it, so a path the tools refuse is refused here too).
    pub fn new(tools: impl IntoIterator<Item = (String, bool)>, scope: FileScope) -> Self {
        Self {
            state: Arc::default(),
            mutating: Arc::new(tools.into_iter().collect()),
            scope,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state holds no invariant a panic elsewhere could break: recover it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_mutating(&self, name: &str) -> bool {
        self.mutating.get(name).copied().unwrap_or(true)
    }

    /// The decision for `call` before it runs: an answer for a repeat, else `None` (the next hook decides).
    pub fn before(&self, call: &ToolCall) -> Option<BeforeToolCall> {
        let key = call_key(call);
        let mut state = self.lock();
        let generation = state.generation;
        let failed = state
            .failed
            .get(&key)
            .filter(|(at, _)| *at == generation)
            .map(|(_, e)| e.clone());
        if let Some(error) = failed {
            let mut content = format!(
                "This exact call failed just before and nothing has changed since, so it was not run again. The \
                 error was:\n{error}"
            );
            if let Some(text) = self
                .file_text(call)
                .filter(|_| !error.contains("current text"))
            {
                content.push_str(&file_excerpt(&text));
            }
            content.push_str("\nDo not repeat it: change the call, or do something else.");
            state.answered_in_a_row += 1;
            state.answered.insert(call.id.clone());
            return Some(BeforeToolCall::Respond {
                content,
                is_error: true,
            });
        }
        if !self.is_mutating(&call.name) {
            return None;
        }
        if let Some(path) = self.undoes(&state, call) {
            state.finishing.insert(call.id.clone());
            return Some(BeforeToolCall::Respond {
                content: format!(
                    "Not run: this call would undo the change just made to {path}, which stands. The run ends here."
                ),
                is_error: false,
            });
        }
        if call.name == "write" || call.name == WRITE_BLOCK {
            let before = self.file_text(call);
            state.pending_write.insert(call.id.clone(), before);
        }
        if state.generation > 0 {
            if let Some(path) = self.no_op(call) {
                state.finishing.insert(call.id.clone());
                return Some(BeforeToolCall::Respond {
                    content: format!(
                        "Nothing to change: this call would leave {path} as it is, so it was not run. The change \
                         made before stands; the run ends here."
                    ),
                    is_error: false,
                });
            }
        }
        let done = state
            .succeeded
            .get(&key)
            .filter(|(at, _)| *at == generation)
            .map(|(_, r)| r.clone());
        if let Some(result) = done {
            let content = format!(
                "Already done: this exact call succeeded just before and nothing has changed since, so it was not \
                 run again. Its result was:\n{result}"
            );
            state.answered_in_a_row += 1;
            state.answered.insert(call.id.clone());
            return Some(BeforeToolCall::Respond {
                content,
                is_error: false,
            });
        }
        None
    }

    /// Records `call`'s outcome; says when the run must stop.
    pub fn after(&self, call: &ToolCall, content: &str, is_error: bool) -> Option<Ending> {
        let key = call_key(call);
        let mut state = self.lock();
        if state.finishing.remove(&call.id) {
            return Some(Ending::Finished);
        }
        if state.answered.remove(&call.id) {
            return (state.answered_in_a_row >= REPEATS_ANSWERED).then(|| {
                Ending::Stopped(format!(
                    "the model repeated calls that had already been answered {} times in a row",
                    state.answered_in_a_row
                ))
            });
        }
        state.answered_in_a_row = 0;
        if is_error && content.starts_with(crate::tools::edit::UNREAD_REFUSAL) {
            return None;
        }
        if is_error {
            let generation = state.generation;
            state.failed.insert(key, (generation, content.to_string()));
            return None;
        }
        if !self.is_mutating(&call.name) {
            return None;
        }
        state.generation += 1;
        let generation = state.generation;
        let replaced = state.pending_write.remove(&call.id).flatten();
        state.last_change = change_of(call, replaced);
        state
            .succeeded
            .insert(key, (generation, content.to_string()));
        if call.name != "write" {
            state.writes = None;
            return None;
        }
        let path = call
            .arguments
            .get("path")
            .and_then(|p| p.as_str())
            .unwrap_or_default()
            .to_string();
        let len = call
            .arguments
            .get("content")
            .and_then(|c| c.as_str())
            .map_or(0, str::len);
        match &mut state.writes {
            Some((p, lens)) if *p == path => lens.push(len),
            slot => *slot = Some((path.clone(), vec![len])),
        }
        let lens = state
            .writes
            .as_ref()
            .map(|(_, l)| l.clone())
            .unwrap_or_default();
        let tail = &lens[lens.len().saturating_sub(SHRINKING_WRITES)..];
        let shrinking = tail.len() == SHRINKING_WRITES && tail.windows(2).all(|w| w[1] < w[0]);
        shrinking.then(|| {
            Ending::Stopped(format!(
                "the model rewrote {path} {SHRINKING_WRITES} times in a row, each time shorter ({} bytes); \
                 stopped before it loses more. Check {path}.",
                tail.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(" → ")
            ))
        })
    }

    /// The path whose last change `call` would undo: an `edit` whose pairs are the last edit's, reversed, or a
    /// `write` of the text the last write replaced (a model flipping a value back and forth: A → B → A).
    fn undoes(&self, state: &State, call: &ToolCall) -> Option<String> {
        let last = state.last_change.as_ref()?;
        let change = change_of(call, None)?;
        if change.path != last.path {
            return None;
        }
        let reversed: Vec<(String, String)> = last
            .edits
            .iter()
            .map(|(o, n)| (n.clone(), o.clone()))
            .collect();
        let undo_edit = call.name == "edit" && !reversed.is_empty() && change.edits == reversed;
        let undo_write = call.name == "write"
            && last.replaced.is_some()
            && call.arguments.get("content").and_then(|c| c.as_str()) == last.replaced.as_deref();
        let undo_block = call.name == WRITE_BLOCK
            && last.replaced.is_some()
            && self.block_result(call) == last.replaced;
        (undo_edit || undo_write || undo_block).then(|| last.path.clone())
    }

    /// The path a no-op call would leave as it is: an `edit` whose every `old_text` equals its `new_text`, a
    /// `write` of the file's own content.
    fn no_op(&self, call: &ToolCall) -> Option<String> {
        let path = call.arguments.get("path")?.as_str()?.to_string();
        match call.name.as_str() {
            "edit" => {
                let edits = call.arguments.get("edits")?.as_array()?;
                let same = |e: &serde_json::Value| {
                    e.get("old_text").is_some() && e.get("old_text") == e.get("new_text")
                };
                (!edits.is_empty() && edits.iter().all(same)).then_some(path)
            }
            "write" => {
                let content = call.arguments.get("content")?.as_str()?;
                (self.file_text(call)? == content).then_some(path)
            }
            WRITE_BLOCK => (self.block_result(call)? == self.file_text(call)?).then_some(path),
            _ => None,
        }
    }

    /// The text a `write_block` call would leave in its (existing, small) file.
    fn block_result(&self, call: &ToolCall) -> Option<String> {
        let content = call.arguments.get("content")?.as_str()?;
        let current = self.file_text(call)?;
        Some(apply_block(Some(&current), content).new_text)
    }

    /// The current text of the file `call` names, when it is a small text file inside the session's scope.
    fn file_text(&self, call: &ToolCall) -> Option<String> {
        let path = call.arguments.get("path")?.as_str()?;
        self.scope.read_text(path, FILE_TEXT_MAX_BYTES)
    }

    /// The `before_tool_call` hook: these rules, then `next` (approvals) for a call they let through.
    pub fn before_hook(&self, next: Option<BeforeToolCallHook>) -> BeforeToolCallHook {
        let rules = self.clone();
        Arc::new(move |call: &ToolCall| {
            let decided = rules.before(call);
            let next = next.clone();
            let call = call.clone();
            Box::pin(async move {
                match (decided, next) {
                    (Some(d), _) => d,
                    (None, Some(next)) => next(&call).await,
                    (None, None) => BeforeToolCall::Proceed,
                }
            })
        })
    }

    /// The `after_tool_call` hook: `next` first (its changes are what the model sees), then the record.
    pub fn after_hook(&self, next: Option<AfterToolCallHook>) -> AfterToolCallHook {
        let rules = self.clone();
        Arc::new(move |call, result| {
            let rules = rules.clone();
            let next = next.clone();
            let (call, result) = (call.clone(), result.clone());
            Box::pin(async move {
                let mut change = match next {
                    Some(next) => next(&call, &result).await,
                    None => AfterToolCall::default(),
                };
                let content = change
                    .content
                    .clone()
                    .unwrap_or_else(|| result.content.clone());
                let is_error = change.is_error.unwrap_or(result.is_error);
                match rules.after(&call, &content, is_error) {
                    Some(Ending::Stopped(why)) => {
                        change.stop.get_or_insert(why);
                    }
                    Some(Ending::Finished) => change.finish = true,
                    None => {}
                }
                change
            })
        })
    }
}

/// The `choose_tools` of a workspace-aware session: a prompt that came with files attached (it names files of the
/// workspace, `mentions::attach_named_files`) is a job on those files, so its first reply must be a tool call
/// (a small model otherwise often answers it with text: its tool list written back, or the fixed function in a
/// code block nothing applies). Every later turn is `auto`.
pub fn act_on_named_files(
    messages: &[crate::transcript::AgentMessage],
) -> crate::provider::ToolChoice {
    use crate::provider::ToolChoice;
    match messages.last() {
        Some(crate::transcript::AgentMessage::User { content, .. })
            if content.contains("\n\n<file name=\"") =>
        {
            ToolChoice::Required
        }
        _ => ToolChoice::Auto,
    }
}

/// What `call` changes, for the undo rule (`None` for a call that is not an `edit` or `write` of one path).
fn change_of(call: &ToolCall, replaced: Option<String>) -> Option<LastChange> {
    let path = call
        .arguments
        .get("path")?
        .as_str()?
        .trim_start_matches("./")
        .to_string();
    let edits = match call.name.as_str() {
        "edit" => call
            .arguments
            .get("edits")?
            .as_array()?
            .iter()
            .map(|e| {
                let text = |k: &str| {
                    e.get(k)
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                        .to_string()
                };
                (text("old_text"), text("new_text"))
            })
            .collect(),
        "write" | WRITE_BLOCK => Vec::new(),
        _ => return None,
    };
    Some(LastChange {
        path,
        edits,
        replaced,
    })
}

/// `(name, mutating)` of `tools`, as [`LoopRules::new`] takes them.
pub fn mutating_tools(tools: &[Arc<dyn crate::tools::tool::Tool>]) -> Vec<(String, bool)> {
    use crate::tools::tool::PolicyTag;
    tools
        .iter()
        .map(|t| {
            (
                t.spec().name.clone(),
                t.tags().iter().any(|g| *g != PolicyTag::ReadOnly),
            )
        })
        .collect()
}

impl LoopRules {
    /// Puts these rules around `config`'s tool-call hooks.
    pub fn install(&self, config: &mut crate::agent::hooks::AgentLoopConfig) {
        config.before_tool_call = Some(self.before_hook(config.before_tool_call.take()));
        config.after_tool_call = Some(self.after_hook(config.after_tool_call.take()));
    }
}

/// A call's identity: its tool and its arguments with object keys sorted (the same call written twice).
fn call_key(call: &ToolCall) -> String {
    fn sorted(v: &serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                serde_json::Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            serde_json::Value::Array(a) => serde_json::Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    format!("{}\u{0}{}", call.name, sorted(&call.arguments))
}
