//! A session confined to its workspace never shows the model (or a client) a byte of a file outside it, through
//! any door: the tools, the loop rules that answer a repeated call, previews, prompt attachments, context files,
//! skills, templates, project settings, saved sessions. Each door is tried the way a model talked into it would
//! (an absolute path, `..`, a symlink inside the workspace that points out; twice in a row and after a refusal)
//! through the real binary: `agentd run` and `agentd serve`'s session API over HTTP, with the test-only scripted
//! provider playing the model. What the "model" saw is every request the provider recorded; what a person or a
//! client saw is the output, the event stream and the session file. The outside file stays unchanged.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

mod http;
mod run;

/// The outside file's marker: it must appear nowhere a confined session's model or client can look.
const SECRET: &str = "OUTSIDE-SECRET-7f3a9c";
/// The outside file's whole text.
const SECRET_TEXT: &str = "api_key = OUTSIDE-SECRET-7f3a9c\nsecond line\n";

/// A root holding `project/` (the workspace), `outside/secret.txt` and `outside/AGENTS.md`, with links out of
/// the workspace: `project/link.txt` → the secret, `project/up` → `outside/`.
struct Layout {
    root: tempfile::TempDir,
}

impl Layout {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let layout = Self { root };
        std::fs::create_dir_all(layout.workspace()).unwrap();
        std::fs::create_dir_all(layout.outside()).unwrap();
        std::fs::write(layout.secret(), SECRET_TEXT).unwrap();
        std::fs::write(layout.workspace().join("notes.txt"), "milk\n").unwrap();
        std::os::unix::fs::symlink(layout.secret(), layout.workspace().join("link.txt")).unwrap();
        std::os::unix::fs::symlink(layout.outside(), layout.workspace().join("up")).unwrap();
        layout
    }

    fn path(&self) -> &Path {
        self.root.path()
    }

    fn workspace(&self) -> PathBuf {
        self.path().join("project")
    }

    fn outside(&self) -> PathBuf {
        self.path().join("outside")
    }

    fn secret(&self) -> PathBuf {
        self.outside().join("secret.txt")
    }

    /// The ways a model names the outside file from the workspace.
    fn ways_out(&self) -> Vec<String> {
        vec![
            self.secret().display().to_string(),
            "../outside/secret.txt".into(),
            "link.txt".into(),
            "up/secret.txt".into(),
            "./notes.txt/../../outside/secret.txt".into(),
        ]
    }

    /// The ways a model names the outside directory.
    fn dirs_out(&self) -> Vec<String> {
        vec![
            self.outside().display().to_string(),
            "..".into(),
            "up".into(),
        ]
    }

    fn assert_secret_unchanged(&self) {
        assert_eq!(std::fs::read_to_string(self.secret()).unwrap(), SECRET_TEXT);
        let names: Vec<String> = std::fs::read_dir(self.outside())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["secret.txt"], "nothing was written outside");
    }
}

/// Panics when `text` (what `what` names) holds the secret.
fn assert_no_secret(what: &str, text: &str) {
    assert!(
        !text.contains(SECRET) && !text.contains("second line"),
        "{what} shows the outside file:\n{text}"
    );
}

/// The tool calls a model would make on the outside file `path` (and the directory `dir`), each twice in a row.
fn calls_on(path: &str, dir: &str) -> Vec<Value> {
    let mut calls = Vec::new();
    for (name, args) in [
        ("read", json!({"path": path})),
        (
            "edit",
            json!({"path": path, "edits": [{"old_text": "api_key", "new_text": "changed"}]}),
        ),
        ("write", json!({"path": path, "content": "overwritten\n"})),
        ("grep", json!({"pattern": "api_key", "path": path})),
        ("grep", json!({"pattern": "api_key", "path": dir})),
        ("ls", json!({"path": dir})),
        ("find", json!({"pattern": "*.txt", "path": dir})),
    ] {
        for _ in 0..2 {
            calls.push(json!({"tool_call": {"name": name, "arguments": args}}));
        }
    }
    // After the refusals, the first door once more.
    calls.push(json!({"tool_call": {"name": "read", "arguments": {"path": path}}}));
    calls
}
