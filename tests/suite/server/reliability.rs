//! Faults and scale against the real `agentd serve` binary (its own process): a thousand agent sessions hold
//! threads and file handles flat; a live session is neither resumed twice (409) nor opened by a second process
//! (its file is locked); a `kill -9` mid-session loses no acknowledged entry; and a streaming client that has
//! to queue gets its response headers at once; 200 streams of which a third read slowly all complete, the fast
//! ones first, in bounded memory; a served model file renamed over keeps the server serving.

use std::time::Duration;

use agentd::provider::{ScriptedProvider, ScriptedReply};
use agentd::server::ServerOptions;
use serde_json::{json, Value};

use super::{client, post, ServeProcess, SseReader, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sessions_hold_threads_and_files_flat() {
    let workspace = tempfile::tempdir().unwrap();
    let sessions = tempfile::tempdir().unwrap();
    let server = ServeProcess::start(&[
        "--max-sessions",
        "16",
        "--sessions-dir",
        sessions.path().to_str().unwrap(),
    ]);
    let body =
        json!({"workspace": workspace.path(), "tools": ["read", "ls"], "policy": "read_only"});
    let url = format!("{}/v1/sessions", server.root);
    let mut baseline = None;
    for i in 0..1000 {
        let (status, r) = post(&url, &body).await;
        assert_eq!(status, 201, "session {i}: {r}");
        if i == 49 {
            baseline = Some(server.threads_and_fds());
        }
    }
    let (threads0, fds0) = baseline.unwrap();
    let (threads, fds) = server.threads_and_fds();
    eprintln!("after 50 sessions: {threads0} threads, {fds0} fds; after 1000: {threads} threads, {fds} fds");
    assert!(
        threads <= threads0 + 4,
        "threads grew: {threads0} → {threads}"
    );
    assert!(fds <= fds0 + 8, "file descriptors grew: {fds0} → {fds}");
    let (_, list) = super::get(&url).await;
    let list: Value = serde_json::from_str(&list).unwrap();
    assert!(
        list["data"].as_array().unwrap().len() <= 16,
        "at most --max-sessions live"
    );
    // Every session's file is on disk (closing a session never deletes it).
    let files = std::fs::read_dir(sessions.path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .count();
    assert_eq!(files, 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_session_has_one_writer() {
    let workspace = tempfile::tempdir().unwrap();
    let sessions = tempfile::tempdir().unwrap();
    let server = TestServer::scripted_with_sessions(
        &ScriptedProvider::new(vec![ScriptedReply::text_only("ok")]),
        sessions.path(),
    )
    .await;
    let (status, created) = post(
        &server.url("/v1/sessions"),
        &json!({"workspace": workspace.path(), "tools": ["read"]}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    // Resuming a live session: 409, not a second writer.
    let (status, r) = post(
        &server.url("/v1/sessions"),
        &json!({"workspace": workspace.path(), "resume": id}),
    )
    .await;
    assert_eq!(status, 409, "{r}");
    assert_eq!(r["error"]["param"], "resume");
    // Another process opening the same file is refused with a clear error.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["run", "--no-context-files", "--session"])
        .arg(created["path"].as_str().unwrap())
        .args(["-p", "hi"])
        .env("AGENTD_SCRIPTED_PROVIDER", write_script(workspace.path()))
        .env("AGENTD_HOME", workspace.path())
        .current_dir(workspace.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("open in another process"), "{stderr}");
    // Once the live session is closed, the file can be resumed.
    assert_eq!(
        super::delete(&server.url(&format!("/v1/sessions/{id}"))).await,
        200
    );
    let (status, r) = post(
        &server.url("/v1/sessions"),
        &json!({"workspace": workspace.path(), "resume": id}),
    )
    .await;
    assert_eq!(status, 201, "{r}");
}

fn write_script(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("script.json");
    std::fs::write(&path, r#"["unused"]"#).unwrap();
    path
}

/// `kill -9` while the model is generating: every message the client saw finished (`message_end`, which the
/// session file acknowledged before the event went out) is there when the session is resumed by a new server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_mid_session_loses_no_acknowledged_entry() {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("notes.txt"), "milk\n").unwrap();
    let sessions = tempfile::tempdir().unwrap();
    let dir = sessions.path().to_str().unwrap().to_string();
    let mut server = ServeProcess::start(&["--sessions-dir", &dir]);
    let (status, created) = post(
        &format!("{}/v1/sessions", server.root),
        &json!({"workspace": workspace.path(), "tools": ["read"], "max_tokens": 400}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let resp = client()
        .post(format!("{}/v1/sessions/{id}/prompt", server.root))
        .json(&json!({"content": "Write a long story about the sea."}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut events = SseReader::new(resp);
    let mut finished: Vec<Value> = Vec::new();
    // Read until the model is generating (the user message is finished and stored by then).
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(120), events.next())
        .await
        .expect("events keep coming")
    {
        if ev["type"] == "message_end" {
            finished.push(ev["message"].clone());
        }
        if ev["type"] == "message_update" {
            break;
        }
    }
    assert!(!finished.is_empty(), "the user message was finished");
    server.kill9();

    let server = ServeProcess::start(&["--sessions-dir", &dir]);
    let (status, resumed) = post(
        &format!("{}/v1/sessions", server.root),
        &json!({"workspace": workspace.path(), "tools": ["read"], "resume": id}),
    )
    .await;
    assert_eq!(status, 201, "{resumed}");
    let (_, body) = super::get(&format!("{}/v1/sessions/{id}/messages", server.root)).await;
    let messages: Value = serde_json::from_str(&body).unwrap();
    let messages = messages["messages"].as_array().unwrap();
    for m in &finished {
        assert!(
            messages
                .iter()
                .any(|x| x["content"] == m["content"] && x["role"] == m["role"]),
            "acknowledged message lost: {m}\nresumed: {messages:?}"
        );
    }
}

/// With the only slot taken, a second streaming request waits in the queue, and gets its SSE headers (and
/// keep-alive comments) at once instead of silence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_stream_gets_its_headers_at_once() {
    let provider = ScriptedProvider::new(vec![
        ScriptedReply::new()
            .text("slow")
            .delay(Duration::from_secs(3)),
        ScriptedReply::text_only("second"),
    ]);
    let server = TestServer::with_provider(
        std::sync::Arc::new(provider),
        ServerOptions {
            max_running: Some(1),
            ..ServerOptions::default()
        },
    )
    .await;
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "stream": true});
    let first = client()
        .post(server.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let started = std::time::Instant::now();
    let second = client()
        .post(server.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let waited = started.elapsed();
    assert_eq!(second.status(), 200);
    assert!(
        waited < Duration::from_secs(2),
        "headers came after {waited:?}, i.e. only once the slot was free"
    );
    let events = super::sse(second).await;
    assert_eq!(events.last(), Some(&json!("[DONE]")));
    let text: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "second");
    drop(first);
}

/// Closing an agent session (DELETE) kills the background jobs its bash calls left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_session_kills_its_background_jobs() {
    let workspace = tempfile::tempdir().unwrap();
    let sessions = tempfile::tempdir().unwrap();
    let provider = ScriptedProvider::new(vec![
        ScriptedReply::new().tool_call(
            "bash",
            r#"{"command": "sleep 300 > /dev/null 2>&1 & echo $!"}"#,
        ),
        ScriptedReply::text_only("started"),
    ]);
    let server = TestServer::scripted_with_sessions(&provider, sessions.path()).await;
    let (status, created) = post(
        &server.url("/v1/sessions"),
        &json!({"workspace": workspace.path(), "tools": ["bash"], "policy": "all"}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap();
    let events = server.prompt_session(id, "start a job").await;
    let end = events
        .iter()
        .find(|e| e["type"] == "tool_execution_end")
        .expect("bash ran");
    let pid: i32 = end["result"]["content"]
        .as_str()
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("a pid: {end}"));
    let alive = |pid: i32| {
        std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ")
    };
    assert!(alive(pid), "the background job runs");
    assert_eq!(
        super::delete(&server.url(&format!("/v1/sessions/{id}"))).await,
        200
    );
    let mut waited = 0;
    while alive(pid) {
        assert!(waited < 100, "the background job survived the session");
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
}

/// 200 streaming chat clients on the real model, a third of them reading one event every 300 ms: every stream
/// completes whole, the fast ones all finish while slow ones are still reading (no reader holds the engine
/// back), and the server's memory stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_streams_of_which_a_third_read_slowly() {
    let server = ServeProcess::start(&[]);
    let before = server.rss_mb().unwrap();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..200usize {
        let http = http.clone();
        let root = server.root.clone();
        let slow = i % 3 == 0;
        tasks.push(tokio::spawn(async move {
            let body = json!({"messages": [{"role": "user", "content": format!("Count to five, number {i}.")}],
                              "max_tokens": 24, "temperature": 0, "stream": true});
            let pause = Duration::from_millis(if slow { 300 } else { 0 });
            let done = super::stream_chat(&http, &root, &body, pause).await;
            assert!(done, "stream {i} ended without [DONE]");
            (slow, std::time::Instant::now())
        }));
    }
    let mut last_fast = None;
    let mut last_slow = None;
    for t in tasks {
        let (slow, at) = t.await.unwrap();
        let slot = if slow { &mut last_slow } else { &mut last_fast };
        *slot = Some(slot.map_or(at, |p: std::time::Instant| p.max(at)));
    }
    let (last_fast, last_slow) = (last_fast.unwrap(), last_slow.unwrap());
    assert!(
        last_fast < last_slow,
        "the fast readers finished only after the slow ones"
    );
    let after = server.rss_mb().unwrap();
    eprintln!("server RSS before {before:.0} MB, after 200 streams {after:.0} MB");
    assert!(
        after < before + 1024.0,
        "the server grew from {before:.0} to {after:.0} MB"
    );
    let (status, _) = super::get(&format!("{}/health", server.root)).await;
    assert_eq!(status, 200);
}

/// A served model's file replaced the way the model cache replaces files (a new file renamed over the old one)
/// leaves the running server's mapping whole: it keeps answering, the same tokens as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_file_renamed_over_keeps_the_running_server_serving() {
    let dir = tempfile::tempdir().unwrap();
    let served = dir.path().join("model.gguf");
    std::fs::copy(crate::suite::common::smollm2_path(), &served).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"));
    command
        .args(["serve", "--port", "0", "--offline", "--model-path"])
        .arg(&served);
    let server = ServeProcess::spawn(command);
    let body = json!({"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 12,
                      "temperature": 0});
    let url = format!("{}/v1/chat/completions", server.root);
    let (status, first) = post(&url, &body).await;
    assert_eq!(status, 200, "{first}");
    // Another file written beside it and renamed over it (here: garbage of the same size, so nothing could be
    // read from the new file by mistake).
    let staged = dir.path().join("model.gguf.partial");
    let len = std::fs::metadata(&served).unwrap().len() as usize;
    std::fs::write(&staged, vec![0x5a; len]).unwrap();
    std::fs::rename(&staged, &served).unwrap();
    let (status, second) = post(&url, &body).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(
        first["choices"][0]["message"]["content"], second["choices"][0]["message"]["content"],
        "the running model changed"
    );
    // The doors that describe the model still answer.
    let (status, tags) = super::get(&format!("{}/api/tags", server.root)).await;
    assert_eq!(status, 200, "{tags}");
    let (status, models) = super::get(&format!("{}/v1/models", server.root)).await;
    assert_eq!(status, 200, "{models}");
}
