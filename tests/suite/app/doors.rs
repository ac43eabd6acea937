//! One coding session, two doors: the same long scripted session driven through `agentd run` (the real binary)
//! and through the HTTP sessions API (a real server over loopback) must compact, ground and recall the same way,
//! because both build their sessions in `agentd::app`. The script reads two files into a small context window,
//! so the first read is compacted away (its result kept as a grounding blob and pointed at from the summary);
//! the model then calls the real `recall` tool with that ref and gets the file back. The two session files'
//! compaction entries are compared field by field.

use agentd::provider::{ScriptedProvider, ScriptedReply};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use crate::suite::cli::run::{run, Sandbox};
use crate::suite::server::{post, TestServer};

/// The line of `big.txt` the recalled result must carry.
const MARKER: &str = "MARKER-ALPHA-42 the first file's secret";

/// Lines of about 40 characters: `n` of them are ~10·n estimated tokens.
fn file_text(tag: &str, n: usize, marker: Option<&str>) -> String {
    let mut s = String::new();
    for i in 0..n {
        if i == n / 2 {
            if let Some(m) = marker {
                s.push_str(m);
                s.push('\n');
                continue;
            }
        }
        s.push_str(&format!("{tag} line {i:03}: lorem ipsum dolor sit amet\n"));
    }
    s
}

fn summary(n: u32) -> String {
    format!(
        "## Goal\nRead the files (summary {n}).\n## Constraints\nNone.\n## Progress\nFiles were read.\n\
         ## Key Decisions\nNone.\n## Next Steps\nAnswer.\n## Critical Context\nNothing else."
    )
}

fn read_call(path: &str) -> Value {
    json!({"steps": [{"tool_call": {"name": "read", "arguments": {"path": path}}}]})
}

/// The first two prompts' replies: read big, answer, read other, (compaction summary), answer.
fn part_one() -> Vec<Value> {
    vec![
        read_call("big.txt"),
        json!("Read it."),
        read_call("other.txt"),
        json!(summary(1)),
        json!("Both read."),
    ]
}

/// The third prompt's replies: recall the dropped result, (a second summary), answer.
fn part_two(reference: &str) -> Vec<Value> {
    vec![
        json!({"steps": [{"tool_call": {"name": "recall", "arguments": {"ref": reference}}}]}),
        json!(summary(2)),
        json!("It says MARKER-ALPHA-42."),
    ]
}

/// Scripted replies as the test API builds them.
fn replies(values: &[Value]) -> Vec<ScriptedReply> {
    values
        .iter()
        .map(|v| match v {
            Value::String(t) => ScriptedReply::text_only(t.clone()),
            _ => {
                let call = &v["steps"][0]["tool_call"];
                ScriptedReply::new().tool_call(
                    call["name"].as_str().unwrap_or_default(),
                    call["arguments"].to_string(),
                )
            }
        })
        .collect()
}

/// The session's entries from its JSONL file (the header line left out).
fn entries(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The compaction entries, each with its first kept entry's message, without entry ids, call ids and
/// timestamps.
fn compactions(path: &Path) -> Vec<Value> {
    let all = entries(path);
    all.iter()
        .filter(|e| e["type"] == "compaction")
        .map(|c| {
            let kept = all
                .iter()
                .find(|e| e["id"] == c["firstKeptEntryId"])
                .map(|e| {
                    // Timestamps and generated call ids differ between any two runs.
                    let mut m = e["message"].clone();
                    if let Some(o) = m.as_object_mut() {
                        o.remove("timestamp");
                    }
                    for block in m["content"].as_array_mut().into_iter().flatten() {
                        if let Some(o) = block.as_object_mut() {
                            o.remove("id");
                        }
                    }
                    m
                })
                .unwrap_or(Value::Null);
            json!({"summary": c["summary"], "tokensBefore": c["tokensBefore"], "details": c["details"],
                   "firstKept": kept})
        })
        .collect()
}

/// The one blob in a `refs/` folder beside the session file: its name is the ref's full hash.
fn only_ref(session_file: &Path) -> String {
    let refs = session_file.parent().unwrap().join("refs");
    let names: Vec<String> = std::fs::read_dir(&refs)
        .unwrap_or_else(|e| panic!("{}: {e}", refs.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert_eq!(names.len(), 1, "one dropped tool result: {names:?}");
    names[0][..10].to_string()
}

/// The window that makes the script compact where it should: `limit = ¾·window` lies 400 tokens above the
/// first read and below the two reads together.
fn window_for(base_tokens: u64) -> u64 {
    (base_tokens + 800 + 400) * 4 / 3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_and_run_sessions_compact_ground_and_recall_alike() {
    let sb = Sandbox::new(json!([]));
    std::fs::write(sb.cwd.join("big.txt"), file_text("big", 80, Some(MARKER))).unwrap();
    std::fs::write(sb.cwd.join("other.txt"), file_text("other", 80, None)).unwrap();

    // The prompt's base size (system prompt and tools) as the scripted model counts it.
    // Every door offers the same tools (print mode would leave bash out): `--allow all`.
    let out = run(sb.cmd(&["run", "--allow", "all", "--show-system-prompt"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let base: u64 = out
        .stderr
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a token count: {}", out.stderr));
    let window = window_for(base);

    // --- Door 1: `agentd run`, two processes on one session file.
    sb.script(json!({"context_window": window, "replies": part_one()}));
    let out = run(sb.cmd(&[
        "run",
        "--allow",
        "all",
        "-p",
        // The prompts name no file by its path: `run` would attach it (`mentions::attach_named_files`), the HTTP
        // door does not expand prompts, and this test is about compaction, not attachments.
        "Read the big file",
        "Read the other file",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "Read it.\nBoth read.\n");
    let files = sb.session_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let cli_file = files[0].clone();
    let reference = only_ref(&cli_file);
    let header: Value = serde_json::from_str(
        std::fs::read_to_string(&cli_file)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    let id = header["id"].as_str().expect("a session id").to_string();
    sb.script(json!({"context_window": window, "replies": part_two(&reference)}));
    let out = run(sb.cmd(&[
        "run",
        "--allow",
        "all",
        "--mode",
        "json",
        "--session",
        &id,
        "-p",
        "What was in the big file?",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let recalled = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["type"] == "tool_execution_end" && e["tool_name"] == "recall")
        .expect("the recall ran");
    assert_eq!(recalled["is_error"], false, "{recalled}");
    assert!(
        recalled["result"]["content"]
            .as_str()
            .unwrap()
            .contains(MARKER),
        "{recalled}"
    );
    let cli_requests = sb.recorded();

    // --- Door 2: the HTTP sessions API on the same workspace.
    let sessions = tempfile::tempdir().unwrap();
    let provider = ScriptedProvider::new(replies(&part_one())).with_context_window(window);
    let server = TestServer::scripted_with_sessions(&provider, sessions.path()).await;
    let (status, created) = post(
        &server.url("/v1/sessions"),
        &json!({"workspace": sb.cwd, "tools": ["read", "bash", "edit", "write"], "policy": "all"}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let sid = created["id"].as_str().unwrap().to_string();
    let http_file = PathBuf::from(created["path"].as_str().unwrap());
    for text in ["Read the big file", "Read the other file"] {
        let events = server.prompt_session(&sid, text).await;
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "agent_end" && e["reason"] == "completed"),
            "{events:?}"
        );
    }
    let http_ref = only_ref(&http_file);
    assert_eq!(
        http_ref, reference,
        "the same result was dropped and stored"
    );
    for r in replies(&part_two(&http_ref)) {
        provider.push(r);
    }
    let events = server
        .prompt_session(&sid, "What was in the big file?")
        .await;
    let recalled = events
        .iter()
        .find(|e| e["type"] == "tool_execution_end" && e["tool_name"] == "recall")
        .expect("the recall ran over HTTP");
    assert_eq!(recalled["is_error"], false, "{recalled}");
    assert!(recalled["result"]["content"]
        .as_str()
        .unwrap()
        .contains(MARKER));

    // --- The same session, whichever door: prompts, compactions, grounding.
    let http_requests: Vec<Value> = provider
        .requests()
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect();
    assert_eq!(cli_requests.len(), http_requests.len());
    assert_eq!(
        cli_requests[0]["system"], http_requests[0]["system"],
        "one system prompt for both doors"
    );
    assert_eq!(cli_requests[0]["tools"], http_requests[0]["tools"]);
    let (cli, http) = (compactions(&cli_file), compactions(&http_file));
    assert_eq!(cli.len(), 2, "two compactions: {cli:#?}");
    assert_eq!(cli, http);
    let first = cli[0]["summary"].as_str().unwrap();
    assert!(
        first.contains(&format!("[ref:{}", &reference[..6])),
        "{first}"
    );
    assert!(first.contains("summary 1"), "{first}");
    server.shutdown().await.unwrap();
}
