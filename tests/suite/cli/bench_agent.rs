//! `agentd bench agent`: the checks of the task suite are sound (each fails on its untouched workspace and passes
//! on its solution), and the assistant finishes a real job end to end: Qwen2.5-Coder-0.5B under agentd's own
//! harness, at temperature 0, makes seven tasks' checks pass (the suite's CI subset; the whole suite is
//! `agentd bench agent`).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_agentd");

fn tasks() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/agent_tasks")
}

#[test]
fn every_task_check_fails_untouched_and_passes_on_its_solution() {
    let out = Command::new(BIN)
        .args(["bench", "agent", "--selftest", "--tasks"])
        .arg(tasks())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n: usize = stdout
        .lines()
        .find_map(|l| {
            l.strip_suffix(" tasks: every check fails untouched and passes on its solution")
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(n >= 30, "{n} tasks");
}

/// Jobs a 0.5B model gets done here at temperature 0 in the file-blocks format (the local engine's default): a
/// one-line bug fix, a new file, two config edits, a rename, a bug fix the model first copies back unchanged (the
/// reply after it starts from the model's second choice, `app::second_choice`), and a count it runs a command for
/// and then has to be given the missing file's turn for. Measured 37/43 on the whole suite (notes of issue 29);
/// these are the simplest of each kind, so other CPUs' rounding does not flip them (the rename passes whether the
/// model renames the call too, or only the definition and the harness follows it; in `fix_return_value` the
/// flipped ` <` is 1.2 nats closer than any other token of the copy).
const MUST_PASS: &[&str] = &[
    "fix_add",
    "create_hello",
    "change_env_value",
    "change_yaml_value",
    "rename_function",
    "fix_return_value",
    "count_lines",
];

#[cfg(feature = "local")]
#[test]
fn qwen_finishes_real_jobs_under_agentds_harness() {
    let model = crate::suite::common::qwen_path();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("runs.json");
    let out = Command::new(BIN)
        .args([
            "bench",
            "agent",
            "--settings",
            "t=0",
            "--timeout",
            "300",
            "--only",
            &MUST_PASS.join(","),
        ])
        .arg("--tasks")
        .arg(tasks())
        .arg("--model")
        .arg(&model)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), MUST_PASS.len());
    for run in runs {
        assert_eq!(run["check_passed"], true, "{} failed: {run:#}", run["task"]);
    }
}
