//! `agentd serve`'s agent sessions over real HTTP: a session confined to its workspace (every HTTP session is)
//! shows its client nothing of a file outside it — tool results, the loop rules' answers, approval previews,
//! the transcript, the session file, context files and settings — and a client naming another workspace's
//! saved session gets nothing of it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use super::{assert_no_secret, Layout, SECRET};
use crate::suite::server::{client, get, post, ServeProcess, SseReader};

/// `agentd serve` on a free port with the scripted provider playing `replies` (stopped on drop).
struct Serve {
    process: ServeProcess,
    dir: tempfile::TempDir,
}

impl Serve {
    fn start(replies: Value, args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script.json");
        std::fs::write(&script, replies.to_string()).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentd"));
        command
            .args(["serve", "--port", "0", "--allow-exec-without-key"])
            .args(args)
            .env("AGENTD_HOME", dir.path().join("home"))
            .env("AGENTD_SCRIPTED_PROVIDER", &script)
            .env(
                "AGENTD_SCRIPTED_REQUESTS",
                dir.path().join("requests.jsonl"),
            )
            .env("AGENTD_LOG", "error");
        Self {
            process: ServeProcess::spawn(command),
            dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.process.root)
    }

    /// Every request the scripted model received, as text.
    fn requests(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("requests.jsonl")).unwrap_or_default()
    }

    async fn create(&self, body: Value) -> (u16, Value) {
        post(&self.url("/v1/sessions"), &body).await
    }

    /// Prompts session `id`, answering every approval request with `allow`; the events, each also checked.
    async fn prompt(&self, id: &str, text: &str) -> Vec<Value> {
        let resp = client()
            .post(self.url(&format!("/v1/sessions/{id}/prompt")))
            .json(&json!({"content": text}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let mut reader = SseReader::new(resp);
        let mut events = Vec::new();
        while let Some(ev) = reader.next().await {
            if ev["type"] == "approval_request" {
                let (status, r) = post(
                    &self.url(&format!("/v1/sessions/{id}/approve")),
                    &json!({"id": ev["id"], "decision": "allow"}),
                )
                .await;
                assert_eq!(status, 200, "{r}");
            }
            events.push(ev);
        }
        events
    }

    /// What a client can read back of session `id`, and its file.
    async fn assert_session_shows_nothing(&self, id: &str, file: &Path) {
        for route in ["messages", "entries"] {
            let (status, body) = get(&self.url(&format!("/v1/sessions/{id}/{route}"))).await;
            assert_eq!(status, 200, "{body}");
            assert_no_secret(route, &body);
        }
        assert_no_secret("the session file", &std::fs::read_to_string(file).unwrap());
        assert_no_secret("the requests to the model", &self.requests());
    }
}

fn call(name: &str, args: Value) -> Value {
    json!({"steps": [{"tool_call": {"name": name, "arguments": args}}]})
}

fn tool_results(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["type"] == "tool_execution_end")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_session_shows_nothing_outside_its_workspace() {
    let layout = Layout::new();
    let mut replies = Vec::new();
    for path in layout.ways_out() {
        for _ in 0..2 {
            replies.push(call("read", json!({"path": path})));
        }
        replies.push(call("grep", json!({"pattern": "api_key", "path": path})));
        replies.push(call("grep", json!({"pattern": "api_key", "path": path})));
    }
    for dir in layout.dirs_out() {
        replies.push(call("ls", json!({"path": dir})));
        replies.push(call("find", json!({"pattern": "*.txt", "path": dir})));
        replies.push(call("grep", json!({"pattern": "api_key", "path": dir})));
    }
    let n = replies.len();
    replies.push(json!("done"));
    let serve = Serve::start(Value::Array(replies), &[]);
    let (status, created) = serve
        .create(json!({"workspace": layout.workspace(), "policy": "read_only"}))
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let events = serve.prompt(id, "Look around.").await;
    assert_no_secret(
        "the event stream",
        &Value::Array(events.clone()).to_string(),
    );
    let results = tool_results(&events);
    assert_eq!(results.len(), n, "{events:#?}");
    assert!(
        results.iter().all(|r| r["is_error"] == true),
        "{results:#?}"
    );
    let file = PathBuf::from(created["path"].as_str().unwrap());
    serve.assert_session_shows_nothing(id, &file).await;
    layout.assert_secret_unchanged();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_previews_and_writes_show_and_change_nothing_outside() {
    let layout = Layout::new();
    let mut replies = Vec::new();
    for path in layout.ways_out() {
        for _ in 0..2 {
            replies.push(call(
                "write",
                json!({"path": path, "content": "overwritten\n"}),
            ));
            replies.push(call(
                "edit",
                json!({"path": path, "edits": [{"old_text": "api_key", "new_text": "changed"}]}),
            ));
        }
    }
    replies.push(json!("done"));
    let serve = Serve::start(Value::Array(replies), &[]);
    let (status, created) = serve
        .create(
            json!({"workspace": layout.workspace(), "policy": "read_only,write",
                       "tools": ["read", "write", "edit"], "approvals": "write=ask"}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let events = serve.prompt(id, "Tidy up.").await;
    let previews: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "approval_request")
        .collect();
    assert!(!previews.is_empty(), "{events:#?}");
    assert_no_secret(
        "the event stream",
        &Value::Array(events.clone()).to_string(),
    );
    assert!(tool_results(&events).iter().all(|r| r["is_error"] == true));
    let file = PathBuf::from(created["path"].as_str().unwrap());
    serve.assert_session_shows_nothing(id, &file).await;
    layout.assert_secret_unchanged();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_files_and_settings_that_link_out_are_not_read() {
    let layout = Layout::new();
    let ws = layout.workspace();
    std::fs::write(
        layout.path().join("AGENTS.md"),
        format!("Above: {SECRET}\n"),
    )
    .unwrap();
    std::os::unix::fs::symlink(layout.secret(), ws.join("CLAUDE.md")).unwrap();
    let serve = Serve::start(json!(["done"]), &[]);
    let (status, created) = serve.create(json!({"workspace": ws})).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    serve.prompt(id, "hi").await;
    assert_no_secret("the requests to the model", &serve.requests());
    assert!(serve.requests().contains("hi"));

    // A project settings file that links out: the session is refused, and the refusal shows none of it.
    std::fs::create_dir_all(ws.join(".agentd")).unwrap();
    std::os::unix::fs::symlink(layout.secret(), ws.join(".agentd/settings.toml")).unwrap();
    let (status, body) = serve.create(json!({"workspace": ws})).await;
    assert_eq!(status, 400, "{body}");
    assert_no_secret("the refusal", &body.to_string());
    assert!(body.to_string().contains("outside the workspace"), "{body}");

    // A project MCP server is a command the workspace names: a read-only session does not start it.
    std::fs::remove_file(ws.join(".agentd/settings.toml")).unwrap();
    let marker = layout.outside().join("started");
    std::fs::write(
        ws.join(".agentd/settings.toml"),
        format!(
            "[mcp.servers.probe]\ncommand = \"sh\"\nargs = [\"-c\", \"touch {}\"]\ntags = [\"read_only\"]\n",
            marker.display()
        ),
    )
    .unwrap();
    let (status, body) = serve
        .create(json!({"workspace": ws, "policy": "read_only"}))
        .await;
    assert_eq!(status, 201, "{body}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !marker.exists(),
        "the project's command ran in a read-only session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_workspaces_saved_session_is_neither_listed_nor_resumed() {
    let root = tempfile::tempdir().unwrap();
    // Two workspaces whose paths give the same sessions-directory slug.
    let first = root.path().join("a-b").join("c");
    let second = root.path().join("a").join("b-c");
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    let shared = root.path().join("sessions");
    let shared_arg = shared.display().to_string();
    for args in [vec![], vec!["--sessions-dir", shared_arg.as_str()]] {
        let serve = Serve::start(json!(["I saw the secret plan", "done"]), &args);
        let (status, created) = serve
            .create(json!({"workspace": first, "policy": "read_only"}))
            .await;
        assert_eq!(status, 201, "{created}");
        let id = created["id"].as_str().unwrap().to_string();
        serve.prompt(&id, "Remember the secret plan.").await;
        let deleted = client()
            .delete(serve.url(&format!("/v1/sessions/{id}")))
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), 200);
        // The other workspace, and the same one reached through `..`.
        let dotted = second.join("..").join("b-c");
        for other in [&second, &dotted] {
            let (status, body) = serve
                .create(json!({"workspace": other, "policy": "read_only", "resume": id}))
                .await;
            assert_eq!(status, 404, "{args:?}: {body}");
            assert!(!body.to_string().contains("secret plan"), "{body}");
            let (status, saved) =
                get(&serve.url(&format!("/v1/sessions/saved?workspace={}", other.display()))).await;
            assert_eq!(status, 200, "{saved}");
            assert!(
                !saved.contains(&id) && !saved.contains("secret plan"),
                "{saved}"
            );
        }
        // Its own workspace still lists and resumes it.
        let (_, saved) =
            get(&serve.url(&format!("/v1/sessions/saved?workspace={}", first.display()))).await;
        assert!(saved.contains(&id), "{saved}");
        let (status, body) = serve
            .create(json!({"workspace": first, "policy": "read_only", "resume": id}))
            .await;
        assert_eq!(status, 201, "{body}");
    }
}
