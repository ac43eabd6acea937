//! A run checks its own work before it says done. After each change the cheap checks run on the changed file
//! (it still parses; the top-level definitions and exports it had are still there unless the task names them; a
//! test file keeps its assertions)
//! and a failure is told with the result. When the run would end:
//!
//! - a task that asks for a change of a file it names, with nothing changed, gets one more turn that says so,
//!   then the run ends `Stopped`, never `Completed`;
//! - the same checks run on every file the prompt changed, and the commands that check the work (one the task
//!   names, a test file it names, the repository's test script: [`checks::check_commands`]) run through the
//!   session's `bash` tool when commands run without asking;
//! - the examples in the docstrings of the functions the prompt changed run ([`checks::examples_command`]), the
//!   same way and under the same condition;
//! - a failure goes back to the model as a note, at most [`RETRIES`] times per prompt; after that the run ends
//!   `Failed` with what still fails.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;

use super::{Cx, Reply, Rule};
use crate::agent::{EndDecision, RunEnd};
use crate::app::harness::checks::{self, Verdict};
use crate::app::harness::outcome::{Call, Outcome};
use crate::app::harness::profile::{EditFormat, RuleId, Words};
use crate::provider::ToolCall;
use crate::tools::support::workspace::WorkspaceState;
use crate::tools::tool::{Tool, ToolContext};

/// Notes per prompt that send the model back to fix a failed check.
pub const RETRIES: usize = 2;
/// Check commands run per check.
const MAX_COMMANDS: usize = 2;
/// Seconds a check command may run.
const COMMAND_TIMEOUT_S: u64 = 60;
/// Workspace files searched for a definition the task names.
const MAX_SEARCHED: usize = 200;
/// The end of a failed command's output the model is shown.
const OUTPUT_TAIL_BYTES: usize = 1500;

/// How the check commands run: the session's `bash` tool, in its working directory and confinement, and the
/// workspace listing the commands are found in.
#[derive(Clone)]
pub struct CommandRunner {
    pub bash: Arc<dyn Tool>,
    pub cwd: PathBuf,
    pub workspace: Option<PathBuf>,
    pub state: WorkspaceState,
}

#[derive(Default)]
struct CheckState {
    /// The model was told it changed nothing.
    nudged: bool,
    /// Notes sent about failed checks.
    retries: usize,
}

/// See the module docs.
pub struct SelfCheck {
    commands: Option<CommandRunner>,
    state: Mutex<CheckState>,
}

impl SelfCheck {
    pub fn new(commands: Option<CommandRunner>) -> Self {
        Self {
            commands,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CheckState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The files the prompt changed, each with its text before the prompt (`None`: created) and now; read once
    /// for every check at the end.
    fn changed_now(cx: &Cx<'_>) -> Vec<(String, Option<String>, String)> {
        cx.task
            .changed
            .iter()
            .filter_map(|(path, original)| Some((path.clone(), original.clone(), cx.read(path)?)))
            .collect()
    }

    /// What fails now in the files the prompt changed.
    fn file_failures(changed: &[(String, Option<String>, String)], cx: &Cx<'_>) -> Vec<String> {
        changed
            .iter()
            .flat_map(|(path, original, now)| {
                change_failures(
                    path,
                    original.as_deref(),
                    now,
                    &cx.task.text,
                    &cx.profile.words,
                )
            })
            .collect()
    }

    /// The check commands that fail now, with the end of their output.
    async fn command_failures(
        &self,
        changed: &[(String, Option<String>, String)],
        cx: &Cx<'_>,
    ) -> Vec<String> {
        let Some(runner) = &self.commands else {
            return Vec::new();
        };
        runner.state.changed();
        let files = runner.state.listing().files;
        let read = |p: &str| cx.read(p);
        let commands = checks::check_commands(&cx.task.text, &files, &read);
        let mut failures = Vec::new();
        for (path, original, now) in changed {
            let functions = checks::changed_functions(path, original.as_deref(), now);
            let Some(command) = checks::examples_command(path, original.as_deref(), &functions)
            else {
                continue;
            };
            if let Some(output) = runner.run(&command).await {
                let said: Vec<&str> = output
                    .lines()
                    .filter(|l| !l.starts_with("Command exited with code"))
                    .collect();
                failures.push(format!("{path}: {}", said.join("\n").trim()));
            }
        }
        for check in commands.into_iter().take(MAX_COMMANDS) {
            if let Some(output) = runner.run(&check.command).await {
                failures.push(format!(
                    "`{}` ({}) fails:\n{}",
                    check.command,
                    check.why,
                    tail(&output)
                ));
            }
        }
        failures
    }

    /// Whether `task` names a code name (`load_cfg`, `parseArgs`, `slugify()`) that a workspace file defines at
    /// its top level: a job on that file as much as naming it.
    fn names_a_definition(&self, task: &str, cx: &Cx<'_>) -> bool {
        let Some(runner) = &self.commands else {
            return false;
        };
        let names: Vec<&str> = task
            .split_whitespace()
            .map(|w| crate::app::mentions::prompt_word(w).trim_end_matches("()"))
            .filter(|w| {
                let ident = w.len() >= 3 && w.chars().all(|c| c.is_alphanumeric() || c == '_');
                let code = w.contains('_') || w.chars().skip(1).any(|c| c.is_ascii_uppercase());
                ident && code
            })
            .collect();
        if names.is_empty() {
            return false;
        }
        runner
            .state
            .listing()
            .files
            .iter()
            .take(MAX_SEARCHED)
            .any(|rel| {
                cx.read(rel).is_some_and(|text| {
                    let defined = checks::top_level_names(Path::new(rel), &text).defined;
                    names.iter().any(|n| defined.contains(*n))
                })
            })
    }
}

impl CommandRunner {
    /// Runs `command`; its output when it fails.
    async fn run(&self, command: &str) -> Option<String> {
        let mut ctx = ToolContext::new(&self.cwd);
        if let Some(w) = &self.workspace {
            ctx = ctx.with_workspace(w);
        }
        let args = json!({ "command": command, "timeout": COMMAND_TIMEOUT_S });
        match self.bash.call(args, &ctx).await {
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        }
    }
}

/// What is wrong with `path` now (`now`) that was right in `original` (`None`: the prompt created the file).
pub fn change_failures(
    path: &str,
    original: Option<&str>,
    now: &str,
    task: &str,
    words: &Words,
) -> Vec<String> {
    let p = Path::new(path);
    let mut failures = Vec::new();
    let broken = match original {
        Some(before) => checks::breaks(p, before, now),
        None => match checks::parse_verdict(p, now) {
            Verdict::Broken(why) => Some(why),
            _ => None,
        },
    };
    if let Some(why) = broken {
        failures.push(format!("{path} no longer parses: {why}"));
    }
    let dead = unreachable_lines(path, now);
    if dead.len() > original.map_or(0, |b| unreachable_lines(path, b).len()) {
        let lines: Vec<String> = dead.iter().map(|n| n.to_string()).collect();
        failures.push(format!(
            "{path}: line {} can never run, it follows a `return` or `raise` at the same level",
            lines.join(", ")
        ));
    }
    if let Some(before) = original {
        for (key, old, new) in checks::unasked_settings(before, now, task) {
            failures.push(format!(
                "{path}: {key} changed too ({old} → {new}); the task does not ask for that"
            ));
        }
        let removed = checks::removed_assertions(path, before, now)
            .filter(|_| !Words::any_in(&words.removing, task));
        if let Some(n) = removed {
            failures.push(format!(
                "{path} has {n} assertion{} fewer than before: a fix goes in the code the tests check, and the tests stay",
                if n == 1 { "" } else { "s" }
            ));
        }
        let lost = checks::lost_unless_named(p, before, now, task);
        if !lost.is_empty() {
            failures.push(format!(
                "{path} no longer defines {}, which it did before; the task does not ask to remove {}",
                lost.join(", "),
                if lost.len() == 1 { "it" } else { "them" }
            ));
        }
    }
    failures
}

/// A change that also altered top-level settings its task does not name (while naming one it changed) gets those
/// lines back as they were, written through the workspace's scope, and the model is told; the file's text now.
fn keep_unasked(
    path: &str,
    before: &str,
    after: &str,
    cx: &Cx<'_>,
    reply: &mut Reply,
) -> Option<String> {
    let (kept, keys) = checks::keep_unasked_settings(before, after, &cx.task.text)?;
    let written = cx
        .scope
        .resolve(path)
        .map_err(|e| e.to_string())
        .and_then(|abs| std::fs::write(abs, &kept).map_err(|e| e.to_string()));
    if let Err(e) = written {
        tracing::warn!(path, error = %e, "cannot put back the settings the task does not name");
        return None;
    }
    reply.content.push_str(&format!(
        "\n\n{} kept as {} was: the task does not name {}. {path} now reads:\n```\n{kept}{}```",
        keys.join(", "),
        if keys.len() == 1 { "it" } else { "they" },
        if keys.len() == 1 { "it" } else { "them" },
        if kept.ends_with('\n') { "" } else { "\n" },
    ));
    Some(kept)
}

/// The (1-based) lines of a Python file that follow a `return` or `raise` in the same block: code that never
/// runs (a stub's `raise NotImplementedError` left under its new body).
fn unreachable_lines(path: &str, text: &str) -> Vec<usize> {
    if !path.ends_with(".py") {
        return Vec::new();
    }
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = Vec::new();
    let mut ended: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let at = indent(line);
        match ended {
            Some(level) if at == level => {
                let opens = ["except", "else", "elif", "finally", "case"]
                    .iter()
                    .any(|k| t.starts_with(k));
                if opens {
                    ended = None;
                } else {
                    out.push(i + 1);
                }
            }
            Some(level) if at < level => ended = None,
            _ => {}
        }
        let exits = (t.starts_with("return") || t.starts_with("raise"))
            && !t[6.min(t.len())..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
            && !t.ends_with(['\\', '(', '[', '{', ',']);
        if exits && at > 0 {
            ended = Some(at);
        }
    }
    out
}

/// Whether `task` names a file (a word that reads as a relative path: an extension, a `/`, or all capitals).
fn names_a_file(task: &str) -> bool {
    task.split_whitespace().any(|w| {
        let w = crate::app::mentions::prompt_word(w);
        crate::app::harness::blocks::path_word(w, &[]).is_some()
    })
}

fn tail(output: &str) -> String {
    let output = output.trim_end();
    if output.len() <= OUTPUT_TAIL_BYTES {
        return output.to_string();
    }
    let mut at = output.len() - OUTPUT_TAIL_BYTES;
    while !output.is_char_boundary(at) {
        at += 1;
    }
    format!("…{}", &output[at..])
}

#[async_trait]
impl Rule for SelfCheck {
    fn id(&self) -> RuleId {
        RuleId::SelfCheck
    }

    fn on_prompt(&self, _task: &str, _prompt: &mut String, _cx: &Cx<'_>) {
        *self.lock() = CheckState::default();
    }

    fn after_call(
        &self,
        _raw: &ToolCall,
        _call: &Call,
        outcome: &Outcome,
        cx: &Cx<'_>,
        reply: &mut Reply,
    ) {
        let failures = match outcome {
            Outcome::Changed {
                path,
                before,
                after,
            } => {
                let after =
                    keep_unasked(path, before, after, cx, reply).unwrap_or_else(|| after.clone());
                change_failures(path, Some(before), &after, &cx.task.text, &cx.profile.words)
            }
            Outcome::Created { path, text } => {
                change_failures(path, None, text, &cx.task.text, &cx.profile.words)
            }
            _ => return,
        };
        for failure in failures {
            reply
                .content
                .push_str(&format!("\n\nCheck: {failure}. Fix it."));
        }
    }

    async fn before_end(&self, cx: &Cx<'_>) -> Option<EndDecision> {
        let task = cx.task;
        if task.text.trim().is_empty() {
            return None;
        }
        if !task.landed() && !task.ran_command {
            // A change task names what it changes: a prompt without a file name ("write it", "a new one") may
            // be a turn of a conversation, not a job on the workspace.
            let about_files = names_a_file(&task.text)
                || !task.named.is_empty()
                || self.names_a_definition(&task.text, cx);
            if !cx.profile.words.asks_for_change(&task.text) || !about_files {
                return None;
            }
            let mut state = self.lock();
            if state.nudged {
                return Some(EndDecision::End(RunEnd::Stopped(
                    "the task asks for a change, and the run changed no file".into(),
                )));
            }
            state.nudged = true;
            let how = match cx.format {
                EditFormat::Blocks => {
                    "Write the path of the file that must change, then its new text in a block."
                }
                EditFormat::Tools => "Change the file with the tools.",
            };
            return Some(EndDecision::Continue {
                note: format!(
                    "Nothing in the project has changed yet, and the task asks for a change. The task: {}\n{how}",
                    task.text
                ),
                prefill: None,
            });
        }
        let changed = Self::changed_now(cx);
        let mut failures = Self::file_failures(&changed, cx);
        if task.landed() {
            failures.extend(self.command_failures(&changed, cx).await);
        }
        if failures.is_empty() {
            return None;
        }
        let mut state = self.lock();
        if state.retries >= RETRIES {
            return Some(EndDecision::End(RunEnd::Failed(failures.join("; "))));
        }
        state.retries += 1;
        let list: Vec<String> = failures.iter().map(|f| format!("- {f}")).collect();
        Some(EndDecision::Continue {
            note: format!(
                "Not done yet: a check of your change failed.\n{}\nFix it.",
                list.join("\n")
            ),
            prefill: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_file_that_loses_assertions_fails_unless_the_task_asks_to_take_some_out() {
        let before = "from shop import price\n\nassert price(1) == 2\nassert price(2) == 4\n";
        let after = "from shop import price\n\nassert price(1) == 2\n";
        let words = Words::default();
        let failures = change_failures(
            "test_shop.py",
            Some(before),
            after,
            "The tests fail. Fix the bug in shop.py, not the tests.",
            &words,
        );
        assert!(
            failures.iter().any(|f| f.contains("1 assertion fewer")),
            "{failures:?}"
        );
        let asked = "Remove the second assertion from test_shop.py.";
        assert!(change_failures("test_shop.py", Some(before), after, asked, &words).is_empty());
    }

    #[test]
    fn code_after_a_return_is_unreachable() {
        let stub = "def slug(t):\n    return t.lower()\n    raise NotImplementedError\n\n\ndef other():\n    pass\n";
        assert_eq!(unreachable_lines("a.py", stub), [3]);
        let fine = "def f(x):\n    if x:\n        return 1\n    else:\n        raise ValueError(\n            'x'\n        )\n    return 2\n";
        assert!(unreachable_lines("a.py", fine).is_empty());
        assert!(unreachable_lines("a.js", stub).is_empty());
        let failures = change_failures(
            "a.py",
            Some("def slug(t):\n    raise NotImplementedError\n"),
            stub,
            "",
            &Words::default(),
        );
        assert!(
            failures.iter().any(|f| f.contains("line 3 can never run")),
            "{failures:?}"
        );
    }
}
