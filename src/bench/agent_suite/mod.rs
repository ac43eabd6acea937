//! `agentd bench agent`: whether the coding assistant gets jobs done. Each task of `benches/agent_tasks` runs in a
//! fresh copy of its workspace under a harness (agentd's own agent, or Pi's against `agentd serve`), then the
//! task's check decides. Outcomes, not activity: a pass is the check passing, nothing else.
//!
//! - [`tasks`]: the task folders, workspaces, snapshots, checks and the self-test;
//! - [`harness`]: the two harnesses and the parser of their JSON-lines events;
//! - [`process`]: children with a deadline (their whole process group is killed);
//! - [`report`]: figures per category, difficulty and part for each setting, the tables.

pub mod harness;
pub mod process;
pub mod report;
pub mod tasks;

use std::path::Path;
use std::time::Duration;

pub use harness::{Harness, Setting};
pub use report::{passes, table, Figures, Pass, RunResult};
pub use tasks::{load_suite, Difficulty, Task, PARTS};

use crate::bench::BenchError;

/// Runs `task` once under `harness` with `setting` in a fresh workspace below `root`, and judges it. Returns the
/// record and the harness's raw event stream.
pub fn run_task(
    harness: &Harness,
    task: &Task,
    setting: Setting,
    attempt: usize,
    root: &Path,
    timeout: Duration,
) -> Result<(RunResult, Vec<u8>), BenchError> {
    // One folder per harness, setting and attempt: two columns of one run never share a workspace.
    let column: String = format!("{}-{}-{attempt}", harness.name(), setting.label())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let ws = tasks::fresh_workspace(task, &root.join(column))?;
    let trace = harness::trace_file(&ws);
    let _ = std::fs::remove_file(&trace);
    let before = tasks::snapshot(&ws);
    let finished = harness.run(&ws, &task.prompt, task.tools.as_deref(), setting, timeout)?;
    let after = tasks::snapshot(&ws);
    let changed = tasks::changed_files(&before, &after);
    let diff = tasks::unified_diff(&before, &after, 4000);
    let (passed, check_output) = tasks::run_check(task, &ws);
    let mut r = RunResult::new(harness::parse_events(&finished.stdout));
    r.task = task.name.clone();
    r.part = task.part.clone();
    r.category = task.category.clone();
    r.difficulty = task.difficulty.name().to_string();
    r.harness = harness.name().to_string();
    r.setting = setting.label();
    r.attempt = attempt;
    r.check_passed = passed;
    r.edit_landed = !changed.is_empty();
    r.changed_files = changed;
    r.seconds = (finished.seconds * 10.0).round() / 10.0;
    r.timed_out = finished.timed_out;
    r.exit_code = finished.code;
    r.diff = diff;
    r.check_output = check_output;
    r.stderr_tail = tasks::tail(&String::from_utf8_lossy(&finished.stderr), 1500);
    r.rules_acted = std::fs::read_to_string(&trace)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    Ok((r, finished.stdout))
}
