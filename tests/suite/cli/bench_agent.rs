//! `agentd bench agent`: the checks of the task suite are sound (each fails on its untouched workspace and on its
//! wrong answers and passes on its solution, in both parts: `dev` and `heldout`), the suite loads by part with its
//! difficulties and the table has their rows, and the assistant finishes a real job end to end:
//! Qwen2.5-Coder-0.5B under agentd's own harness, at temperature 0, makes seven tasks' checks pass (the suite's CI
//! subset; the whole suite is `agentd bench agent`).

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
        .args(["bench", "agent", "--selftest", "--part", "all", "--tasks"])
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
    assert!(n >= 60, "{n} tasks");
    // Both parts are there, and the held-out one has the twelve unseen medium tasks the goal is measured on.
    let part = |name: &str| -> (usize, usize) {
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} line in\n{stdout}"));
        let nums: Vec<usize> = line
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect();
        (nums[0], nums[1])
    };
    let (dev, dev_medium) = part("dev");
    let (heldout, heldout_medium) = part("heldout");
    assert_eq!(dev + heldout, n);
    assert!(
        dev >= 40 && dev_medium >= 8,
        "dev: {dev} tasks, {dev_medium} medium"
    );
    assert!(
        heldout_medium >= 12,
        "heldout: {heldout} tasks, {heldout_medium} medium"
    );
}

/// Jobs a 0.5B model gets done here at temperature 0 in the file-blocks format (the local engine's default): a
/// one-line bug fix, a new file, two config edits, a rename, a bug fix the model first copies back unchanged (the
/// reply after it starts from the model's second choice, `app::harness::rules::second_choice`), and a count it runs a command for
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

/// A suite folder with the given `part/name` tasks (`difficulty` line as given, empty for none).
fn suite(tasks: &[(&str, &str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (part, name, difficulty) in tasks {
        let t = dir.path().join(part).join(name);
        std::fs::create_dir_all(t.join("workspace")).unwrap();
        std::fs::write(
            t.join("task.toml"),
            format!("prompt = \"do it\"\ncheck = \"true\"\ncategory = \"c\"\n{difficulty}\n"),
        )
        .unwrap();
    }
    dir
}

#[test]
fn a_fresh_workspace_holds_nothing_an_earlier_run_left() {
    use agentd::bench::agent_suite::{load_suite, tasks::fresh_workspace, PARTS};

    let dir = suite(&[("dev", "a", ""), ("heldout", "h", "")]);
    std::fs::write(dir.path().join("dev/a/workspace/app.py"), "x = 1\n").unwrap();
    let task = &load_suite(dir.path(), &PARTS, &["a".to_string()]).unwrap()[0];
    let root = tempfile::tempdir().unwrap();
    let ws = fresh_workspace(task, root.path()).unwrap();
    std::fs::write(ws.join("check.py"), "left by the last run").unwrap();
    std::fs::write(ws.join("app.py"), "x = 2\n").unwrap();
    let again = fresh_workspace(task, root.path()).unwrap();
    assert_eq!(again, ws);
    assert!(!ws.join("check.py").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join("app.py")).unwrap(),
        "x = 1\n"
    );
}

#[test]
fn the_suite_loads_by_part_with_difficulty_and_refuses_bad_folders() {
    use agentd::bench::agent_suite::{load_suite, Difficulty, PARTS};

    let dir = suite(&[
        ("dev", "a", ""),
        ("dev", "b", "difficulty = \"medium\""),
        ("heldout", "c", "difficulty = \"medium\""),
    ]);
    let all = load_suite(dir.path(), &PARTS, &[]).unwrap();
    let seen: Vec<(&str, &str, Difficulty)> = all
        .iter()
        .map(|t| (t.part.as_str(), t.name.as_str(), t.difficulty))
        .collect();
    assert_eq!(
        seen,
        [
            ("dev", "a", Difficulty::Simple),
            ("dev", "b", Difficulty::Medium),
            ("heldout", "c", Difficulty::Medium)
        ]
    );
    let dev = load_suite(dir.path(), &["dev"], &[]).unwrap();
    assert_eq!(dev.len(), 2);
    // --only looks in the chosen parts only.
    let err = load_suite(dir.path(), &["dev"], &["c".to_string()]).unwrap_err();
    assert!(err.to_string().contains("no such task in dev: c"), "{err}");
    let only = load_suite(dir.path(), &PARTS, &["c".to_string()]).unwrap();
    assert_eq!(only.len(), 1);

    let twice = suite(&[("dev", "x", ""), ("heldout", "x", "")]);
    let err = load_suite(twice.path(), &PARTS, &[]).unwrap_err();
    assert!(err.to_string().contains("in two parts"), "{err}");
    let bad = suite(&[("dev", "x", "difficulty = \"hard\"")]);
    assert!(load_suite(bad.path(), &["dev"], &[]).is_err());
    let no_heldout = suite(&[("dev", "x", "")]);
    assert!(load_suite(no_heldout.path(), &PARTS, &[]).is_err());
}

#[test]
fn the_table_has_rows_per_difficulty_and_per_part() {
    use agentd::bench::agent_suite::{passes, table, RunResult};

    let run = |part: &str, difficulty: &str, passed: bool| {
        let mut r = RunResult::new(Default::default());
        r.task = format!("{part}-{difficulty}");
        r.part = part.into();
        r.category = "bugfix".into();
        r.difficulty = difficulty.into();
        r.harness = "agentd".into();
        r.setting = "t=0".into();
        r.check_passed = passed;
        r
    };
    let runs = [
        run("dev", "simple", true),
        run("dev", "medium", false),
        run("heldout", "medium", true),
    ];
    let p = passes(&runs);
    assert_eq!(p[0].by_difficulty["medium"].passed, 1);
    assert_eq!(p[0].by_difficulty["medium"].runs, 2);
    assert_eq!(p[0].by_part["heldout"].runs, 1);
    let t = table("m", &p);
    assert!(t.contains("| bugfix | 2/3 "), "{t}");
    assert!(t.contains("| difficulty: medium | 1/2 "), "{t}");
    assert!(t.contains("| difficulty: simple | 1/1 "), "{t}");
    assert!(t.contains("| part: heldout | 1/1 "), "{t}");
    // One part: no part rows.
    let t = table("m", &passes(&runs[..2]));
    assert!(!t.contains("part: "), "{t}");
}
