//! One run's record and the suite's figures: pass rate, tool calls, tool errors and time, per category, per
//! difficulty, per part and in all, for each harness and sampling setting; a Markdown table and a JSON document.

use std::collections::BTreeMap;

use serde::Serialize;

use super::harness::{CallRecord, RunEvents};

/// One task run once.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub task: String,
    /// `dev` or `heldout`.
    pub part: String,
    pub category: String,
    /// `simple` or `medium`.
    pub difficulty: String,
    pub harness: String,
    pub setting: String,
    pub attempt: usize,
    pub check_passed: bool,
    /// Some file was added, changed or deleted (not that the change is right).
    pub edit_landed: bool,
    pub changed_files: Vec<String>,
    pub tool_calls: usize,
    pub tool_errors: usize,
    pub turns: usize,
    pub output_tokens: u64,
    pub seconds: f64,
    pub timed_out: bool,
    pub exit_code: Option<i32>,
    pub end_reason: Option<String>,
    pub calls: Vec<CallRecord>,
    pub final_text: String,
    pub diff: String,
    pub check_output: String,
    pub stderr_tail: String,
    /// The harness rules that acted in the run (agentd only), in the order they first did.
    pub rules_acted: Vec<String>,
    /// An ablation run not run again: the rule it turns off never acted in this run of the full harness, so at a
    /// deterministic setting it is the same run (its figures are that run's).
    pub same_as_full: bool,
}

impl RunResult {
    pub fn new(events: RunEvents) -> Self {
        Self {
            task: String::new(),
            part: String::new(),
            category: String::new(),
            difficulty: String::new(),
            harness: String::new(),
            setting: String::new(),
            attempt: 1,
            check_passed: false,
            edit_landed: false,
            changed_files: Vec::new(),
            tool_calls: events.tool_calls,
            tool_errors: events.tool_errors,
            turns: events.turns,
            output_tokens: events.output_tokens,
            seconds: 0.0,
            timed_out: false,
            exit_code: None,
            end_reason: events.end_reason,
            calls: events.calls,
            final_text: events.final_text,
            diff: String::new(),
            check_output: String::new(),
            stderr_tail: String::new(),
            rules_acted: Vec::new(),
            same_as_full: false,
        }
    }
}

/// Figures over a set of runs.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Figures {
    pub runs: usize,
    pub passed: usize,
    pub pass_rate: f64,
    pub tool_calls_mean: f64,
    pub tool_errors_mean: f64,
    pub seconds_mean: f64,
    pub timed_out: usize,
}

impl Figures {
    pub fn of<'a>(runs: impl IntoIterator<Item = &'a RunResult>) -> Self {
        let runs: Vec<&RunResult> = runs.into_iter().collect();
        let n = runs.len();
        if n == 0 {
            return Self::default();
        }
        let mean =
            |f: &dyn Fn(&RunResult) -> f64| runs.iter().map(|r| f(r)).sum::<f64>() / n as f64;
        let passed = runs.iter().filter(|r| r.check_passed).count();
        Self {
            runs: n,
            passed,
            pass_rate: passed as f64 / n as f64,
            tool_calls_mean: mean(&|r| r.tool_calls as f64),
            tool_errors_mean: mean(&|r| r.tool_errors as f64),
            seconds_mean: mean(&|r| r.seconds),
            timed_out: runs.iter().filter(|r| r.timed_out).count(),
        }
    }
}

/// The figures of one harness under one setting.
#[derive(Debug, Clone, Serialize)]
pub struct Pass {
    pub harness: String,
    pub setting: String,
    pub total: Figures,
    pub by_category: BTreeMap<String, Figures>,
    pub by_difficulty: BTreeMap<String, Figures>,
    pub by_part: BTreeMap<String, Figures>,
}

/// The figures of `runs` grouped by `key`.
fn grouped(runs: &[&RunResult], key: impl Fn(&RunResult) -> &str) -> BTreeMap<String, Figures> {
    let mut groups: BTreeMap<String, Vec<&RunResult>> = BTreeMap::new();
    for r in runs {
        groups.entry(key(r).to_string()).or_default().push(*r);
    }
    groups
        .into_iter()
        .map(|(k, rs)| (k, Figures::of(rs)))
        .collect()
}

/// Groups `runs` by (harness, setting), in the order they first appear.
pub fn passes(runs: &[RunResult]) -> Vec<Pass> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in runs {
        let key = (r.harness.clone(), r.setting.clone());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.into_iter()
        .map(|(harness, setting)| {
            let mine: Vec<&RunResult> = runs
                .iter()
                .filter(|r| r.harness == harness && r.setting == setting)
                .collect();
            Pass {
                total: Figures::of(mine.iter().copied()),
                by_category: grouped(&mine, |r| &r.category),
                by_difficulty: grouped(&mine, |r| &r.difficulty),
                by_part: grouped(&mine, |r| &r.part),
                harness,
                setting,
            }
        })
        .collect()
}

fn cell(f: &Figures) -> String {
    format!(
        "{}/{} ({:.0}%) · {:.1} calls · {:.1} err · {:.0} s",
        f.passed,
        f.runs,
        100.0 * f.pass_rate,
        f.tool_calls_mean,
        f.tool_errors_mean,
        f.seconds_mean
    )
}

/// One group of rows of the table: its figures in a pass.
type Group = fn(&Pass) -> &BTreeMap<String, Figures>;

/// A Markdown table, one column per (harness, setting): one row per category, then one per difficulty
/// (`difficulty: simple`, `difficulty: medium`), then one per part when the runs span both; each cell is passes/runs
/// (rate), mean tool calls, mean tool errors and mean seconds per run.
pub fn table(model: &str, passes: &[Pass]) -> String {
    let mut out = format!("Model: `{model}`\n\n| category |");
    for p in passes {
        out.push_str(&format!(" {} {} |", p.harness, p.setting));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(passes.len()));
    out.push('\n');
    let groups: [(&str, Group); 3] = [
        ("", |p| &p.by_category),
        ("difficulty: ", |p| &p.by_difficulty),
        ("part: ", |p| &p.by_part),
    ];
    for (prefix, group) in groups {
        let mut keys: Vec<&String> = passes.iter().flat_map(|p| group(p).keys()).collect();
        keys.sort();
        keys.dedup();
        if prefix == "part: " && keys.len() < 2 {
            continue;
        }
        for k in keys {
            out.push_str(&format!("| {prefix}{k} |"));
            for p in passes {
                match group(p).get(k) {
                    Some(f) => out.push_str(&format!(" {} |", cell(f))),
                    None => out.push_str(" — |"),
                }
            }
            out.push('\n');
        }
    }
    out.push_str("| **all** |");
    for p in passes {
        out.push_str(&format!(" **{}** |", cell(&p.total)));
    }
    out.push('\n');
    out
}

/// Per run: task, harness and setting, pass, calls, errors, seconds and a note (timeout, exit code, tools used).
pub fn runs_table(runs: &[RunResult]) -> String {
    let mut out = String::from(
        "| task | harness | setting | check | calls | errors | seconds | notes |\n|---|---|---|:---:|---:|---:|---:|---|\n",
    );
    for r in runs {
        let mut notes = Vec::new();
        if r.timed_out {
            notes.push("timed out".to_string());
        } else if r.exit_code.is_some_and(|c| c != 0) {
            notes.push(format!("exit {}", r.exit_code.unwrap_or_default()));
        }
        if !r.calls.is_empty() {
            let tools: Vec<&str> = r.calls.iter().map(|c| c.tool.as_str()).collect();
            notes.push(tools.join(","));
        }
        let name = if r.attempt > 1 {
            format!("{} #{}", r.task, r.attempt)
        } else {
            r.task.clone()
        };
        out.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {:.1} | {} |\n",
            r.harness,
            r.setting,
            if r.check_passed { "pass" } else { "fail" },
            r.tool_calls,
            r.tool_errors,
            r.seconds,
            notes.join("; ")
        ));
    }
    out
}
