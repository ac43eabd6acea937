//! Structured logs: the JSON lines of a run carry `llm.request_start/end`, `tool.before_invoke/after_invoke`,
//! `session.start/end` and `compaction` with their fields; `logging::init` writes them to a file.

use std::io::Write;
use std::process::Command;
use std::sync::{Arc, Mutex};

use agentd::agent::compaction::{CompactionSettings, Compactor};
use agentd::agent::{agent_loop, AgentContext, AgentLoopConfig, AgentMessage};
use agentd::logging::{self, LogTarget};
use agentd::provider::{ScriptedProvider, ScriptedReply};
use agentd::schema::ToolSpec;
use agentd::session::{JsonlStore, SessionStore, StoreOptions};
use agentd::tools::tool::{PolicyTag, Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::fmt::MakeWriter;

use super::compaction::{text, user};

/// Collects what the subscriber writes.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

struct CaptureWriter(Arc<Mutex<Vec<u8>>>);

impl Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = CaptureWriter;
    fn make_writer(&'a self) -> CaptureWriter {
        CaptureWriter(self.0.clone())
    }
}

impl Capture {
    fn lines(&self) -> Vec<Value> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }
}

struct Echo(ToolSpec);

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn tags(&self) -> &[PolicyTag] {
        &[PolicyTag::ReadOnly]
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::new(
            args["text"].as_str().unwrap_or_default(),
            Value::Null,
        ))
    }
}

fn find<'a>(lines: &'a [Value], event: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["event"] == event)
        .unwrap_or_else(|| panic!("no {event} line in {lines:#?}"))
}

/// Runs the ignored test `name` of this module in a child process (alone, so no other test's thread can race
/// tracing's per-callsite interest cache) with `env` set, and fails with its output if it fails.
fn run_child(name: &str, env: (&str, &std::path::Path)) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &format!("suite::agent::session::logging::{name}"),
            "--ignored",
            "--test-threads=1",
        ])
        .env(env.0, env.1)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn json_lines_carry_the_named_events_and_their_fields() {
    let dir = tempfile::tempdir().unwrap();
    run_child("json_lines_child", ("AGENTD_LOG_TEST_DIR", dir.path()));
    assert!(
        dir.path().join("checked").exists(),
        "the child ran its checks"
    );
}

/// Child of `json_lines_carry_the_named_events_and_their_fields`.
#[tokio::test(flavor = "current_thread")]
#[ignore = "run by json_lines_carry_the_named_events_and_their_fields in a child process"]
async fn json_lines_child() {
    let Ok(dir) = std::env::var("AGENTD_LOG_TEST_DIR") else {
        return;
    };
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(logging::json_subscriber(capture.clone()));
    let store = JsonlStore::create(
        std::path::Path::new(&dir),
        std::path::Path::new("/w"),
        StoreOptions::default(),
    )
    .unwrap();
    let session_id = store.header().id;
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::text_only("## Goal\nTalk"),
        ScriptedReply::new().tool_call("echo", r#"{"text": "hello"}"#),
        ScriptedReply::text_only("done"),
    ]));
    let mut config = AgentLoopConfig::new(provider.clone());
    config.cache_key = Some(session_id.clone());
    config.context_policy = Some(Arc::new(Compactor::new(CompactionSettings {
        context_window: Some(1_000),
        ..CompactionSettings::default()
    })));
    let long = "word ".repeat(160);
    let history: Vec<AgentMessage> = (0..6)
        .flat_map(|i| [user(&format!("{i} {long}")), text(&format!("{i} {long}"))])
        .collect();
    let echo = Echo(
        ToolSpec::new(
            "echo",
            "Echo.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        )
        .unwrap(),
    );
    let context = AgentContext {
        system_prompt: "Test.".into(),
        messages: history,
        tools: vec![Arc::new(echo)],
    };
    let events: Vec<_> = agent_loop(
        vec![user("say hello")],
        context,
        config,
        CancellationToken::new(),
    )
    .collect()
    .await;
    assert!(events.iter().any(|e| e.name() == "compaction"));
    drop(store);

    let lines = capture.lines();
    for l in &lines {
        assert!(l["timestamp"].is_string() && l["level"].is_string(), "{l}");
    }
    let start = find(&lines, "session.start");
    assert_eq!(start["session_id"], session_id.as_str());
    assert_eq!(start["cwd"], "/w");
    assert_eq!(start["resumed"], false);
    let end = find(&lines, "session.end");
    assert_eq!(end["session_id"], session_id.as_str());

    let req = find(&lines, "llm.request_start");
    assert_eq!(req["session_id"], session_id.as_str());
    assert_eq!(req["model"], "scripted");
    let ends: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "llm.request_end")
        .collect();
    assert_eq!(
        ends.len(),
        2,
        "one per agent turn (the summary call is the compactor's)"
    );
    for e in ends {
        assert_eq!(e["session_id"], session_id.as_str());
        assert_eq!(e["model"], "scripted");
        assert!(e["tokens"]["prompt"].as_u64().unwrap() > 0, "{e}");
        assert!(e["tokens"]["completion"].as_u64().unwrap() > 0, "{e}");
        assert!(e["latency_ms"].is_u64(), "{e}");
    }
    let before = find(&lines, "tool.before_invoke");
    assert_eq!(before["tool"], "echo");
    let after = find(&lines, "tool.after_invoke");
    assert_eq!(after["tool"], "echo");
    assert_eq!(after["is_error"], false);
    assert!(after["duration_ms"].is_u64(), "{after}");
    let c = find(&lines, "compaction");
    assert_eq!(c["session_id"], session_id.as_str());
    assert!(
        c["tokens_before"].as_u64().unwrap() > c["tokens_after"].as_u64().unwrap(),
        "{c}"
    );
    std::fs::write(std::path::Path::new(&dir).join("checked"), "").unwrap();
}

/// Child of `init_writes_json_lines_to_a_file`: installs the global subscriber (once per process).
#[test]
#[ignore = "run by init_writes_json_lines_to_a_file in a child process"]
fn logging_init_child() {
    let Ok(file) = std::env::var("AGENTD_LOG_TEST_FILE") else {
        return;
    };
    logging::init(LogTarget::File(file.into()), true).unwrap();
    let err = logging::init(LogTarget::Stderr, true).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("logging is already initialised"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    drop(
        JsonlStore::create(
            dir.path(),
            std::path::Path::new("/w"),
            StoreOptions::default(),
        )
        .unwrap(),
    );
}

#[test]
fn init_writes_json_lines_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("logs/agentd.jsonl");
    run_child("logging_init_child", ("AGENTD_LOG_TEST_FILE", &file));
    let text = std::fs::read_to_string(&file).unwrap();
    let events: Vec<String> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["event"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(events, vec!["session.start", "session.end"], "{text}");
}
