//! `agentd run` end to end: the real binary in a temp directory with a temp `AGENTD_HOME`, the model replaced
//! by the scripted provider (test-only `AGENTD_SCRIPTED_PROVIDER`, requests logged to
//! `AGENTD_SCRIPTED_REQUESTS`), plus one run on the real default model and one against a fake remote server.
//! Print, JSON and RPC modes; sessions; AGENTS.md and skills; exit codes on bad input.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod approvals;
mod inputs;
#[cfg(feature = "local")]
mod real_model;
mod rpc;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_agentd");

/// A working directory and an `AGENTD_HOME`, both temporary, and the script for the scripted provider.
pub(crate) struct Sandbox {
    pub root: tempfile::TempDir,
    pub cwd: PathBuf,
    pub home: PathBuf,
    pub script: PathBuf,
    pub requests: PathBuf,
}

impl Sandbox {
    /// `replies` in the scripted provider's JSON format (an array, or `{"chunk_delay_ms", "replies"}`).
    pub fn new(replies: Value) -> Self {
        let root = tempfile::tempdir().unwrap();
        let cwd = root.path().join("project");
        let home = root.path().join("home");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let script = root.path().join("script.json");
        std::fs::write(&script, replies.to_string()).unwrap();
        let requests = root.path().join("requests.jsonl");
        Self {
            root,
            cwd,
            home,
            script,
            requests,
        }
    }

    /// Replaces the script (for the next process).
    pub fn script(&self, replies: Value) {
        std::fs::write(&self.script, replies.to_string()).unwrap();
    }

    /// `agentd ARGS` in the sandbox, with the scripted provider.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.bare_cmd(args);
        c.env("AGENTD_SCRIPTED_PROVIDER", &self.script)
            .env("AGENTD_SCRIPTED_REQUESTS", &self.requests);
        c
    }

    /// `agentd ARGS` in the sandbox with the real backends.
    pub fn bare_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .current_dir(&self.cwd)
            .env("AGENTD_HOME", &self.home)
            .env_remove("AGENTD_MODEL")
            .env_remove("AGENTD_SCRIPTED_PROVIDER")
            .env_remove("AGENTD_SCRIPTED_REQUESTS")
            .env("AGENTD_LOG", "error")
            .stdin(Stdio::null());
        c
    }

    /// Every request the scripted provider received, in order.
    pub fn recorded(&self) -> Vec<Value> {
        match std::fs::read_to_string(&self.requests) {
            Ok(text) => text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The content of the last message of recorded request `i` (negative counts from the end: -1 is the
    /// latest).
    pub fn last_content(&self, i: isize) -> Value {
        self.last_message(i)["content"].clone()
    }

    /// The last message of the `i`-th recorded request (negative: from the end).
    pub fn last_message(&self, i: isize) -> Value {
        let all = self.recorded();
        let at = if i < 0 { all.len() as isize + i } else { i };
        all[at as usize]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone()
    }

    /// The session files of the project directory.
    pub fn session_files(&self) -> Vec<PathBuf> {
        let dir = self.home.join("sessions");
        let mut out = Vec::new();
        for sub in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            for f in std::fs::read_dir(sub.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                if f.path().extension().is_some_and(|e| e == "jsonl") {
                    out.push(f.path());
                }
            }
        }
        out.sort();
        out
    }
}

pub(crate) struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The names of the tools a recorded request offered.
pub(crate) fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["name"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn run(mut c: Command) -> Output {
    let out = c.output().expect("run agentd");
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn read_then_answer() -> Value {
    json!([
        {"steps": [{"text": "Let me look."}, {"tool_call": {"name": "read", "arguments": {"path": "notes.txt"}}}]},
        "The notes say: remember the milk."
    ])
}

#[test]
fn print_mode_prints_the_answer_after_a_real_read_call() {
    let sb = Sandbox::new(read_then_answer());
    std::fs::write(sb.cwd.join("notes.txt"), "remember the milk\n").unwrap();
    let out = run(sb.cmd(&["run", "-p", "what do my notes say?"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "The notes say: remember the milk.\n");
    let requests = sb.recorded();
    assert_eq!(requests.len(), 2);
    let tools = tool_names(&requests[0]);
    assert_eq!(
        tools,
        ["read", "edit", "write", "recall"],
        "print mode denies exec by default"
    );
    let last = requests[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "tool_result");
    assert_eq!(last["tool_name"], "read");
    assert_eq!(last["is_error"], false);
    assert_eq!(last["content"], "remember the milk\n");
    // The conversation was saved.
    assert_eq!(sb.session_files().len(), 1);
}

#[test]
fn json_mode_streams_every_event_as_one_json_line() {
    let sb = Sandbox::new(read_then_answer());
    std::fs::write(sb.cwd.join("notes.txt"), "milk\n").unwrap();
    let out = run(sb.cmd(&["run", "--mode", "json", "--no-session", "read my notes"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("not one JSON object per line: {l}: {e}"))
        })
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"agent_start"));
    assert_eq!(types.last(), Some(&"agent_end"));
    for t in [
        "turn_start",
        "message_start",
        "message_update",
        "message_end",
        "tool_execution_start",
        "tool_execution_end",
        "turn_end",
    ] {
        assert!(types.contains(&t), "{t} missing from {types:?}");
    }
    let end = events
        .iter()
        .find(|e| e["type"] == "tool_execution_end")
        .unwrap();
    assert_eq!(end["tool_name"], "read");
    assert_eq!(end["is_error"], false);
    assert_eq!(end["result"]["content"], "milk\n");
    assert_eq!(events.last().unwrap()["reason"], "completed");
    assert!(sb.session_files().is_empty(), "--no-session wrote a file");
}

/// Pi's scripts write `-p` with `--mode json` in either order: `-p` is "non-interactive", `--mode` the output.
#[test]
fn print_flag_combines_with_json_mode_in_either_order() {
    for args in [
        [
            "run",
            "-p",
            "--mode",
            "json",
            "--no-session",
            "read my notes",
        ],
        [
            "run",
            "--mode",
            "json",
            "-p",
            "--no-session",
            "read my notes",
        ],
    ] {
        let sb = Sandbox::new(read_then_answer());
        std::fs::write(sb.cwd.join("notes.txt"), "milk\n").unwrap();
        let out = run(sb.cmd(&args));
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        let events: Vec<Value> = out
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{args:?}: {l}: {e}")))
            .collect();
        assert_eq!(events.first().unwrap()["type"], "agent_start", "{args:?}");
        assert_eq!(events.last().unwrap()["type"], "agent_end", "{args:?}");
        assert_eq!(events.last().unwrap()["reason"], "completed");
    }
}

#[test]
fn failures_and_aborts_have_their_exit_codes() {
    // A model error: exit 1 with the error on stderr.
    let sb = Sandbox::new(
        json!([{"steps": [{"fail": {"kind": "server", "message": "the GPU caught fire"}}]}]),
    );
    let out = run(sb.cmd(&["run", "-p", "hi"]));
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("the GPU caught fire"), "{}", out.stderr);
    assert_eq!(out.stdout, "");

    // Ctrl-C (SIGINT) during a run: exit 130.
    sb.script(json!([{"steps": [{"text": "thinking"}, {"hang": true}]}]));
    let mut child = sb
        .cmd(&["run", "-p", "hang"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(|| sb.recorded().len() == 2, "the second process's request");
    // SAFETY: signals the child we spawned, by its pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = wait_child(&mut child, Duration::from_secs(20));
    assert_eq!(status, Some(130));
}

#[test]
fn bad_input_gets_clear_messages_and_usage_exit_codes() {
    let sb = Sandbox::new(json!(["unused"]));
    let cases: [(&[&str], &str); 5] = [
        (
            &["run", "-p", "hi", "--tools", "read,frobnicate"],
            "unknown tool 'frobnicate'",
        ),
        (
            &["run", "-p", "hi", "--allow", "everything"],
            "unknown policy tag 'everything'",
        ),
        (
            &["run", "-p", "hi", "--session", "no-such-session"],
            "no session `no-such-session`",
        ),
        (
            &["run", "-p", "hi", "--workspace", "/no/such/dir"],
            "--workspace /no/such/dir",
        ),
        (&["run"], "nothing to prompt"),
    ];
    for (args, needle) in cases {
        let out = run(sb.cmd(args));
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
    assert!(
        sb.recorded().is_empty(),
        "no request may be sent on bad input"
    );
}

#[test]
fn unreachable_remote_is_exit_code_3_with_a_hint() {
    // A port nothing listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let sb = Sandbox::new(json!([]));
    let url = format!("http://127.0.0.1:{port}");
    let out = run(sb.bare_cmd(&["run", "-p", "hi", "--remote", &url, "--no-session"]));
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(out.stderr.contains("cannot reach"), "{}", out.stderr);
    assert!(
        out.stderr.contains("is the server running?"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_backend_talks_to_an_openai_compatible_server() {
    use axum::routing::{get, post};
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let recorder = seen.clone();
    let sse = [
        json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello from "}, "finish_reason": null}]}),
        json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
               "choices": [{"index": 0, "delta": {"content": "remote."}, "finish_reason": "stop"}]}),
    ]
    .iter()
    .map(|c| format!("data: {c}\n\n"))
    .collect::<String>()
        + "data: [DONE]\n\n";
    let app = axum::Router::new()
        .route(
            "/v1/models",
            get(|| async { axum::Json(json!({"object": "list", "data": [{"id": "fake-model", "max_model_len": 4096}]})) }),
        )
        .route(
            "/v1/chat/completions",
            post(move |axum::Json(body): axum::Json<Value>| {
                let sse = sse.clone();
                recorder.lock().unwrap().push(body);
                async move { ([("content-type", "text/event-stream")], sse) }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let sb = Sandbox::new(json!([]));
    let url = format!("http://{addr}");
    let cmd = sb.bare_cmd(&[
        "run",
        "-p",
        "hi there",
        "--remote",
        &url,
        "--no-tools",
        "--no-session",
    ]);
    let out = tokio::task::spawn_blocking(move || run(cmd)).await.unwrap();
    server.abort();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "Hello from remote.\n");
    let bodies = seen.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1);
    assert_eq!(bodies[0]["model"], "fake-model");
    assert_eq!(
        bodies[0]["messages"].as_array().unwrap().last().unwrap()["content"],
        "hi there"
    );
}

#[test]
fn sessions_continue_resume_and_stay_apart() {
    let sb = Sandbox::new(json!(["first answer"]));
    assert_eq!(run(sb.cmd(&["run", "-p", "first question"])).code, 0);
    let files = sb.session_files();
    assert_eq!(files.len(), 1);
    let header: Value = serde_json::from_str(
        std::fs::read_to_string(&files[0])
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["type"], "session");
    let id = header["id"].as_str().unwrap().to_string();

    // -c continues the latest session: the model sees the earlier exchange.
    sb.script(json!(["second answer"]));
    let out = run(sb.cmd(&["run", "-c", "-p", "second question"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "second answer\n");
    let messages = sb.recorded().last().unwrap()["messages"].clone();
    let contents: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["content"]
                .as_str()
                .unwrap_or_else(|| m["content"][0]["text"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        contents,
        ["first question", "first answer", "second question"]
    );
    assert_eq!(sb.session_files().len(), 1, "-c must not start a new file");

    // --session ID (a prefix is enough) resumes it too; a new run without flags starts a new file.
    sb.script(json!(["third answer"]));
    assert_eq!(
        run(sb.cmd(&["run", "--session", &id[..8], "-p", "third"])).code,
        0
    );
    assert_eq!(
        sb.recorded().last().unwrap()["messages"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    sb.script(json!(["fresh"]));
    assert_eq!(run(sb.cmd(&["run", "-p", "new one"])).code, 0);
    assert_eq!(
        sb.recorded().last().unwrap()["messages"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(sb.session_files().len(), 2);

    // --session PATH opens that file.
    sb.script(json!(["by path"]));
    let path = files[0].display().to_string();
    assert_eq!(
        run(sb.cmd(&["run", "--session", &path, "-p", "fourth"])).code,
        0
    );
    assert_eq!(
        sb.recorded().last().unwrap()["messages"]
            .as_array()
            .unwrap()
            .len(),
        7
    );

    // -r without a terminal: a usage error naming the way out.
    let out = run(sb.cmd(&["run", "-r", "-p", "x"]));
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("--session ID"), "{}", out.stderr);
}

#[test]
fn agents_md_and_skills_reach_the_system_prompt() {
    let sb = Sandbox::new(json!(["ok", "ok", "ok"]));
    // User config dir ($AGENTD_HOME): AGENTS.md and a skill.
    std::fs::write(sb.home.join("AGENTS.md"), "GLOBAL-RULE: be kind.").unwrap();
    let user_skill = sb.home.join("skills").join("deploy");
    std::fs::create_dir_all(&user_skill).unwrap();
    std::fs::write(
        user_skill.join("SKILL.md"),
        "---\nname: deploy\ndescription: Ship the app to production.\n---\nSteps...",
    )
    .unwrap();
    // The project: CLAUDE.md above the working directory (fallback), AGENTS.md in it, a project skill.
    std::fs::write(sb.root.path().join("CLAUDE.md"), "PARENT-RULE: tabs.").unwrap();
    std::fs::write(sb.cwd.join("AGENTS.md"), "PROJECT-RULE: run cargo fmt.").unwrap();
    std::fs::write(
        sb.cwd.join("CLAUDE.md"),
        "IGNORED: AGENTS.md wins in this directory.",
    )
    .unwrap();
    let project_skill = sb.cwd.join(".agentd").join("skills").join("db-migrate");
    std::fs::create_dir_all(&project_skill).unwrap();
    std::fs::write(
        project_skill.join("SKILL.md"),
        "---\nname: db-migrate\ndescription: \"Write a migration: safely.\"\n---\n",
    )
    .unwrap();
    let append = sb.root.path().join("append.txt");
    std::fs::write(&append, "APPENDED-FROM-FILE").unwrap();

    let out = run(sb.cmd(&[
        "run",
        "--no-session",
        "--append-system-prompt",
        append.to_str().unwrap(),
        "-p",
        "hi",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let system = sb.recorded()[0]["system"].as_str().unwrap().to_string();
    let at = |needle: &str| {
        system
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} not in:\n{system}"))
    };
    assert!(system.starts_with("You are agentd"));
    assert!(at("APPENDED-FROM-FILE") < at("GLOBAL-RULE"));
    assert!(at("GLOBAL-RULE") < at("PARENT-RULE"));
    assert!(at("PARENT-RULE") < at("PROJECT-RULE"));
    assert!(!system.contains("IGNORED"));
    assert!(system
        .contains("<name>deploy</name><description>Ship the app to production.</description>"));
    assert!(system
        .contains("<name>db-migrate</name><description>Write a migration: safely.</description>"));
    assert!(system.contains(&format!(
        "<location>{}</location>",
        project_skill.join("SKILL.md").display()
    )));
    assert!(
        !system.contains(&format!("Working directory: {}", sb.cwd.display())),
        "{system}"
    );
    assert!(
        system.contains("relative to it") || system.contains("The working directory is empty"),
        "{system}"
    );

    // --system-prompt replaces the base; without the read tool skills are not listed.
    let out = run(sb.cmd(&[
        "run",
        "--no-session",
        "--system-prompt",
        "CUSTOM-BASE",
        "--tools",
        "bash",
        "-p",
        "hi",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let system = sb.recorded()[1]["system"].as_str().unwrap().to_string();
    assert!(system.starts_with("CUSTOM-BASE"), "{system}");
    assert!(system.contains("PROJECT-RULE"));
    assert!(!system.contains("available_skills"));

    // --no-tools, --no-context-files, --no-skills.
    let out = run(sb.cmd(&[
        "run",
        "--no-session",
        "--no-tools",
        "--no-context-files",
        "--no-skills",
        "-p",
        "hi",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let request = &sb.recorded()[2];
    assert_eq!(request["tools"], json!([]));
    assert!(!request["system"].as_str().unwrap().contains("RULE"));
}

#[test]
fn workspace_and_policy_confine_the_tools() {
    let sb = Sandbox::new(json!([
        {"steps": [{"tool_call": {"name": "read", "arguments": {"path": "../secret.txt"}}}]},
        "done"
    ]));
    std::fs::write(sb.root.path().join("secret.txt"), "top secret").unwrap();
    let ws = sb.cwd.display().to_string();
    let out = run(sb.cmd(&[
        "run",
        "--no-session",
        "--workspace",
        &ws,
        "--deny",
        "write,exec",
        "-p",
        "read it",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let requests = sb.recorded();
    let tools = tool_names(&requests[0]);
    assert_eq!(
        tools,
        ["read"],
        "read_only leaves only read of the default tools"
    );
    let result = sb.last_message(1);
    assert_eq!(result["is_error"], true);
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("outside the workspace"),
        "{result}"
    );
}

fn wait_for(cond: impl Fn() -> bool, what: &str) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn wait_child(child: &mut Child, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
