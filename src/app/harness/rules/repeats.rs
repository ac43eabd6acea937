//! The rules that keep a small model from going round in circles:
//!
//! - [`Repeats`]: an identical call that just failed is not run again (the model gets the earlier error and the
//!   file as it is now); an identical change that just landed is answered "already done"; answers that keep
//!   coming stop the run;
//! - [`NoOpFinish`]: a call that leaves its file as it is after a change landed is how small models say they are
//!   done: the run ends.
//!
//! "Just" means: no call that may change the workspace has succeeded since. None of them hides an error: a
//! refused repeat is answered with what the model was told the first time.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use super::{Cx, Reply, Rule};
use crate::agent::{BeforeToolCall, RunEnd};
use crate::app::harness::outcome::{Call, Outcome};
use crate::app::harness::profile::RuleId;
use crate::provider::ToolCall;
use crate::tools::edit::file_excerpt;

/// Repeats answered in a row (without a call that ran in between) that stop the run.
pub const REPEATS_ANSWERED: usize = 3;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[derive(Default)]
struct RepeatState {
    /// Call key → (generation it failed at, its error).
    failed: HashMap<String, (u64, String)>,
    /// Call key → (generation after it succeeded, its result), for calls that may change the workspace.
    succeeded: HashMap<String, (u64, String)>,
    /// Answers since the last call that ran.
    in_a_row: usize,
}

/// See the module docs.
#[derive(Default)]
pub struct Repeats(Mutex<RepeatState>);

impl Rule for Repeats {
    fn id(&self) -> RuleId {
        RuleId::Repeats
    }

    fn before_call(&self, raw: &ToolCall, call: &Call, cx: &Cx<'_>) -> Option<BeforeToolCall> {
        let key = call_key(raw);
        let state = lock(&self.0);
        let now = cx.task.generation;
        if let Some((_, error)) = state.failed.get(&key).filter(|(at, _)| *at == now) {
            let mut content = format!(
                "This exact call failed just before and nothing has changed since, so it was not run again. The \
                 error was:\n{error}"
            );
            let path = raw.arguments.get("path").and_then(|p| p.as_str());
            let text = path.and_then(|p| cx.read(p));
            if let Some(text) = text.filter(|_| !error.contains("current text")) {
                content.push_str(&file_excerpt(&text));
            }
            content.push_str("\nDo not repeat it: change the call, or do something else.");
            return Some(BeforeToolCall::Respond {
                content,
                is_error: true,
            });
        }
        let done = state.succeeded.get(&key).filter(|(at, _)| *at == now);
        done.filter(|_| call.mutating()).map(|(_, result)| BeforeToolCall::Respond {
            content: format!(
                "Already done: this exact call succeeded just before and nothing has changed since, so it was not \
                 run again. Its result was:\n{result}"
            ),
            is_error: false,
        })
    }

    fn after_call(
        &self,
        raw: &ToolCall,
        call: &Call,
        outcome: &Outcome,
        cx: &Cx<'_>,
        reply: &mut Reply,
    ) {
        let mut state = lock(&self.0);
        let key = call_key(raw);
        match outcome {
            Outcome::Answered => {
                state.in_a_row += 1;
                if state.in_a_row >= REPEATS_ANSWERED && reply.end.is_none() {
                    reply.end = Some(RunEnd::Stopped(format!(
                        "the model repeated calls that had already been answered {} times in a row",
                        state.in_a_row
                    )));
                }
                return;
            }
            Outcome::Refused { retry: true, .. } => {}
            Outcome::Refused { .. } | Outcome::Ran { ok: false, .. } => {
                let now = cx.task.generation;
                state.failed.insert(key, (now, reply.content.clone()));
            }
            _ if call.mutating() => {
                let after = cx.task.generation + 1;
                state.succeeded.insert(key, (after, reply.content.clone()));
            }
            _ => {}
        }
        state.in_a_row = 0;
    }
}

/// See the module docs.
#[derive(Default)]
pub struct NoOpFinish(Mutex<HashSet<String>>);

impl Rule for NoOpFinish {
    fn id(&self) -> RuleId {
        RuleId::NoOpFinish
    }

    /// A call that would leave its file as it is (an `edit` whose every `old_text` is its `new_text`, a `write`
    /// or a block of the file's own text) is not even run.
    fn before_call(&self, raw: &ToolCall, call: &Call, cx: &Cx<'_>) -> Option<BeforeToolCall> {
        let path = call.path()?;
        let same = match call {
            Call::Edit { pairs, .. } => !pairs.is_empty() && pairs.iter().all(|(o, n)| o == n),
            _ => cx
                .read(path)
                .is_some_and(|now| call.predicted(&now).as_ref() == Some(&now)),
        };
        (same && cx.task.landed()).then(|| {
            lock(&self.0).insert(raw.id.clone());
            BeforeToolCall::Respond {
                content: finished(path),
                is_error: false,
            }
        })
    }

    fn after_call(
        &self,
        raw: &ToolCall,
        _call: &Call,
        outcome: &Outcome,
        cx: &Cx<'_>,
        reply: &mut Reply,
    ) {
        let answered = lock(&self.0).remove(&raw.id);
        match outcome {
            Outcome::NoOp { path } if cx.task.landed() => {
                reply.content = finished(path);
                reply.is_error = false;
                reply.end.get_or_insert(RunEnd::Completed);
            }
            Outcome::Answered if answered => {
                reply.end.get_or_insert(RunEnd::Completed);
            }
            _ => {}
        }
    }
}

fn finished(path: &str) -> String {
    format!(
        "Nothing to change: this call leaves {path} as it is. The change made before stands; the run ends here."
    )
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
