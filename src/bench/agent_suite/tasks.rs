//! The coding tasks of `agentd bench agent` (`benches/agent_tasks/<part>/<name>/`, the parts `dev` and `heldout`):
//! `task.toml` (prompt, category, difficulty, check command, optional tools), `workspace/` (the starting files),
//! `check.py` (copied in only after the agent finished, so the model never sees it), `solution/` (hand-made fixed
//! files, for `--selftest`) and optionally `wrong/<label>/` (plausible wrong answers the check must reject).
//! Workspaces are fresh copies in a temporary directory; a snapshot before and after tells which files the run
//! changed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Deserialize;

use super::process::{run_with_timeout, Finished};
use crate::bench::BenchError;

/// Folders a snapshot skips (what running the checks leaves behind).
const IGNORED_DIRS: [&str; 2] = ["__pycache__", ".pytest_cache"];
/// How long a task's check may run.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(120);

/// The two parts of the suite: `dev` is what the harness is tuned on, `heldout` is only measured (nobody reads its
/// tasks or their runs while tuning).
pub const PARTS: [&str; 2] = ["dev", "heldout"];

/// How much a task asks: `simple` (one obvious edit in one small file) or `medium` (a multi-step job over 2–4 files).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Difficulty {
    Simple,
    Medium,
}

impl Difficulty {
    pub fn name(self) -> &'static str {
        match self {
            Difficulty::Simple => "simple",
            Difficulty::Medium => "medium",
        }
    }
}

/// One task.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: String,
    /// `dev` or `heldout` (the folder it lies in).
    pub part: String,
    pub category: String,
    pub difficulty: Difficulty,
    pub prompt: String,
    /// A shell command run in the workspace after the agent; exit 0 is a pass.
    pub check: String,
    /// `--tools` for the run (`None`: the harness's default set).
    pub tools: Option<String>,
    pub dir: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskToml {
    prompt: String,
    check: String,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    difficulty: Option<Difficulty>,
    #[serde(default)]
    tools: Option<String>,
}

/// The tasks of the given parts of the suite in `dir` (`dir/dev`, `dir/heldout`), sorted by part and name, with
/// absolute folders; `only` keeps those names (an unknown name is an error, and so is a name found in two parts).
pub fn load_suite(dir: &Path, parts: &[&str], only: &[String]) -> Result<Vec<Task>, BenchError> {
    // Absolute, so that a check run in its workspace can find the task's folder ($TASK_DIR).
    let dir = &std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut tasks = Vec::new();
    for part in parts {
        tasks.extend(load_part(&dir.join(part), part)?);
    }
    let mut names: Vec<&str> = tasks.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(BenchError::Dataset {
            path: dir.display().to_string(),
            message: format!("the task name {} is in two parts", w[0]),
        });
    }
    if !only.is_empty() {
        tasks.retain(|t| only.contains(&t.name));
    }
    let missing: Vec<&str> = only
        .iter()
        .filter(|n| !tasks.iter().any(|t| &&t.name == n))
        .map(|s| s.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(BenchError::Dataset {
            path: dir.display().to_string(),
            message: format!(
                "no such task in {}: {}",
                parts.join(" or "),
                missing.join(", ")
            ),
        });
    }
    Ok(tasks)
}

/// The tasks of one part folder (every subfolder with a `task.toml`), sorted by name.
fn load_part(dir: &Path, part: &str) -> Result<Vec<Task>, BenchError> {
    let entries = std::fs::read_dir(dir).map_err(|e| BenchError::Dataset {
        path: dir.display().to_string(),
        message: format!("cannot list the task folder: {e}"),
    })?;
    let mut tasks = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let toml_path = path.join("task.toml");
        if !toml_path.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let bad = |message: String| BenchError::Dataset {
            path: toml_path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(&toml_path).map_err(|e| bad(e.to_string()))?;
        let spec: TaskToml = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if spec.prompt.trim().is_empty() || spec.check.trim().is_empty() {
            return Err(bad("`prompt` and `check` must be non-empty".into()));
        }
        if !path.join("workspace").is_dir() {
            return Err(bad("no workspace/ folder beside it".into()));
        }
        tasks.push(Task {
            part: part.to_string(),
            category: spec.category.unwrap_or_else(|| "other".into()),
            difficulty: spec.difficulty.unwrap_or(Difficulty::Simple),
            prompt: spec.prompt,
            check: spec.check,
            tools: spec.tools,
            dir: path,
            name,
        });
    }
    tasks.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tasks)
}

/// Copies `from` into `to` (created), recursively; symlinks are not followed.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// A fresh copy of the task's starting files under `root/<task name>`.
pub fn fresh_workspace(task: &Task, root: &Path) -> Result<PathBuf, BenchError> {
    let ws = root.join(&task.name);
    // Nothing a run before left there (its files, the copied check) may be seen by this one.
    if ws.exists() {
        std::fs::remove_dir_all(&ws)
            .map_err(|e| BenchError::Workload(format!("clearing {}: {e}", ws.display())))?;
    }
    copy_tree(&task.dir.join("workspace"), &ws)
        .map_err(|e| BenchError::Workload(format!("copying {}'s workspace: {e}", task.name)))?;
    Ok(ws)
}

/// Every file under `root` (relative path → bytes), caches and `.pyc` files left out.
pub fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if !IGNORED_DIRS.contains(&name.as_str()) {
                    walk(root, &path, out);
                }
            } else if kind.is_file() && !name.ends_with(".pyc") {
                let rel = path.strip_prefix(root).unwrap_or(&path);
                out.insert(
                    rel.to_string_lossy().into_owned(),
                    std::fs::read(&path).unwrap_or_default(),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// `added|modified|deleted PATH` for every file that differs between two snapshots.
pub fn changed_files(
    before: &BTreeMap<String, Vec<u8>>,
    after: &BTreeMap<String, Vec<u8>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (path, bytes) in after {
        match before.get(path) {
            None => out.push(format!("added {path}")),
            Some(old) if old != bytes => out.push(format!("modified {path}")),
            Some(_) => {}
        }
    }
    for path in before.keys().filter(|p| !after.contains_key(*p)) {
        out.push(format!("deleted {path}"));
    }
    out.sort_by(|a, b| {
        a.split_once(' ')
            .map(|x| x.1)
            .cmp(&b.split_once(' ').map(|x| x.1))
    });
    out
}

/// The unified diff of the changed files, cut at `limit` bytes.
pub fn unified_diff(
    before: &BTreeMap<String, Vec<u8>>,
    after: &BTreeMap<String, Vec<u8>>,
    limit: usize,
) -> String {
    let empty = Vec::new();
    let mut out = String::new();
    let paths: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for path in paths {
        let (a, b) = (
            before.get(path).unwrap_or(&empty),
            after.get(path).unwrap_or(&empty),
        );
        if a == b {
            continue;
        }
        let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
        let diff = similar::TextDiff::from_lines(a.as_ref(), b.as_ref());
        out.push_str(
            &diff
                .unified_diff()
                .header(&format!("a/{path}"), &format!("b/{path}"))
                .to_string(),
        );
    }
    if out.len() > limit {
        let mut cut = limit;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("\n…(diff cut)\n");
    }
    out
}

/// Copies the task's `check.py` into the workspace (over anything the model wrote there) and runs the check:
/// whether it passed, and the tail of its output.
pub fn run_check(task: &Task, ws: &Path) -> (bool, String) {
    let check_py = task.dir.join("check.py");
    if check_py.is_file() {
        if let Err(e) = std::fs::copy(&check_py, ws.join("check.py")) {
            return (false, format!("cannot copy check.py: {e}"));
        }
    }
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(&task.check)
        .current_dir(ws)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("TASK_DIR", &task.dir)
        .stdin(Stdio::null());
    match run_with_timeout(cmd, CHECK_TIMEOUT) {
        Ok(Finished {
            code,
            stdout,
            stderr,
            timed_out,
            ..
        }) => {
            let mut text = String::from_utf8_lossy(&stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&stderr));
            if timed_out {
                text.push_str(&format!("\ncheck timed out after {CHECK_TIMEOUT:?}"));
            }
            (code == Some(0) && !timed_out, tail(&text, 2000))
        }
        Err(e) => (false, format!("cannot run the check: {e}")),
    }
}

/// The last `max` bytes of `text` (on a character boundary).
pub fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}

/// One task's self-test: its check must fail on the untouched workspace, pass with `solution/` laid over it, and
/// fail with each of the optional `wrong/<label>/` folders (plausible wrong or partial answers) laid over it.
/// Returns the problems found (empty: the task is sound).
pub fn selftest(task: &Task, root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let solution = task.dir.join("solution");
    match fresh_workspace(task, &root.join("before")) {
        Ok(ws) => {
            if run_check(task, &ws).0 {
                problems.push("the check passes on the untouched workspace".into());
            }
        }
        Err(e) => problems.push(e.to_string()),
    }
    if !solution.is_dir() {
        problems.push("no solution/ folder".into());
        return problems;
    }
    match fresh_workspace(task, &root.join("after")) {
        Ok(ws) => {
            let before = snapshot(&ws);
            if let Err(e) = copy_tree(&solution, &ws) {
                problems.push(format!("cannot lay solution/ over the workspace: {e}"));
                return problems;
            }
            if changed_files(&before, &snapshot(&ws)).is_empty() {
                problems.push("solution/ changes nothing".into());
            }
            let (passed, out) = run_check(task, &ws);
            if !passed {
                problems.push(format!("the check fails on the solution:\n{out}"));
            }
        }
        Err(e) => problems.push(e.to_string()),
    }
    let mut wrong: Vec<PathBuf> = std::fs::read_dir(task.dir.join("wrong"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    wrong.sort();
    for answer in wrong {
        let label = answer
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let laid = fresh_workspace(task, &root.join("wrong").join(&label)).and_then(|ws| {
            copy_tree(&answer, &ws)
                .map(|()| ws)
                .map_err(|e| BenchError::Workload(format!("laying wrong/{label}: {e}")))
        });
        match laid {
            Ok(ws) => {
                if run_check(task, &ws).0 {
                    problems.push(format!(
                        "the check passes on the wrong answer wrong/{label}"
                    ));
                }
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    problems
}
