//! Every door of `agentd serve` in front of a remote OpenAI-compatible server, as this build's binary runs it —
//! the build without the `local` feature runs these too: the model lists, Chat Completions (whole and streamed),
//! raw completions, Responses, Anthropic Messages and Ollama's chat answer from a fake vLLM; and an agent session
//! (`agentd run`) writes a file through a tool call the remote model made.

use serde_json::{json, Value};

use super::{client, get, post, ServeProcess};
use crate::suite::cli::run::{run, Sandbox};
use crate::suite::provider::fake_openai::{
    call_delta, chunk, completion_reply, text_reply, usage_chunk, FakeServer, Recorded, Reply,
};

/// `agentd serve --port 0 --config FILE` with `provider = "remote"` pointed at `fake`.
fn serve_remote(fake: &FakeServer, dir: &std::path::Path) -> ServeProcess {
    let config = dir.join("remote.toml");
    std::fs::write(
        &config,
        format!(
            "provider = \"remote\"\n\n[remote]\nbase_url = \"{}\"\nmodel = \"fake-model\"\n",
            fake.base_url
        ),
    )
    .unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"));
    command
        .args(["serve", "--port", "0", "--config"])
        .arg(&config)
        .env("AGENTD_HOME", dir.join("home"))
        .env_remove("AGENTD_MODEL");
    ServeProcess::spawn(command)
}

/// One tool call as vLLM streams it: the name first, the arguments in the next chunk, then `tool_calls`.
fn tool_call_reply(id: &str, name: &str, args: &str) -> Reply {
    Reply::sse(vec![
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(call_delta(0, Some(id), Some(name), ""), None),
        chunk(call_delta(0, None, None, args), None),
        chunk(json!({}), Some("tool_calls")),
        usage_chunk(40, 12, 0),
    ])
}

/// The tool result a request carries back to the model.
fn tool_result(request: &Recorded) -> Value {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap()
}

fn hello() -> Reply {
    Reply::sse(text_reply(&["Hello", " from", " vLLM."], 7, 3))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_chat_door_answers_from_the_remote_server() {
    let fake = FakeServer::start(vec![hello(), hello(), hello(), hello(), hello()]).await;
    let dir = tempfile::tempdir().unwrap();
    let serve = serve_remote(&fake, dir.path());
    let root = serve.root.clone();
    let user = json!([{"role": "user", "content": "Say hello."}]);

    let (status, models) = get(&format!("{root}/v1/models")).await;
    assert_eq!(status, 200, "{models}");
    assert!(models.contains("fake-model"), "{models}");
    let (status, tags) = get(&format!("{root}/api/tags")).await;
    assert_eq!(status, 200, "{tags}");
    assert!(tags.contains("fake-model"), "{tags}");

    let (status, chat) = post(
        &format!("{root}/v1/chat/completions"),
        &json!({"model": "fake-model", "messages": user}),
    )
    .await;
    assert_eq!(status, 200, "{chat}");
    assert_eq!(chat["choices"][0]["message"]["content"], "Hello from vLLM.");
    assert_eq!(chat["usage"]["completion_tokens"], 3, "{chat}");

    let streamed = client()
        .post(format!("{root}/v1/chat/completions"))
        .json(&json!({"model": "fake-model", "messages": user, "stream": true}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let text: String = streamed
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(text, "Hello from vLLM.", "{streamed}");
    assert!(streamed.trim_end().ends_with("data: [DONE]"), "{streamed}");

    let (status, response) = post(
        &format!("{root}/v1/responses"),
        &json!({"model": "fake-model", "input": "Say hello."}),
    )
    .await;
    assert_eq!(status, 200, "{response}");
    let output = response["output"].as_array().unwrap();
    let said: String = output
        .iter()
        .filter(|o| o["type"] == "message")
        .flat_map(|o| o["content"].as_array().unwrap().clone())
        .filter_map(|c| c["text"].as_str().map(String::from))
        .collect();
    assert_eq!(said, "Hello from vLLM.", "{response}");

    let (status, message) = post(
        &format!("{root}/v1/messages"),
        &json!({"model": "fake-model", "max_tokens": 64, "messages": user}),
    )
    .await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(
        message["content"][0]["text"], "Hello from vLLM.",
        "{message}"
    );
    assert_eq!(message["stop_reason"], "end_turn", "{message}");

    let (status, ollama) = post(
        &format!("{root}/api/chat"),
        &json!({"model": "fake-model", "messages": user, "stream": false}),
    )
    .await;
    assert_eq!(status, 200, "{ollama}");
    assert_eq!(ollama["message"]["content"], "Hello from vLLM.", "{ollama}");

    fake.push(Reply::sse(completion_reply(&["def", " add(a, b):"], 4, 2)));
    let (status, completion) = post(
        &format!("{root}/v1/completions"),
        &json!({"model": "fake-model", "prompt": "# add two numbers\n", "max_tokens": 16}),
    )
    .await;
    assert_eq!(status, 200, "{completion}");
    assert_eq!(
        completion["choices"][0]["text"], "def add(a, b):",
        "{completion}"
    );
    let raw: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == "/v1/completions")
        .collect();
    assert_eq!(raw.len(), 1, "{raw:?}");
    assert_eq!(raw[0].body["prompt"], "# add two numbers\n");

    // Each chat door sent the conversation on to the remote server, under its model's name.
    let sent = fake.chat_requests();
    assert_eq!(sent.len(), 5, "{sent:?}");
    for r in &sent {
        assert_eq!(r.body["model"], "fake-model");
        let last = r.body["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()
            .clone();
        assert_eq!(last["role"], "user", "{last}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_session_writes_a_file_through_a_remote_models_tool_call() {
    let call = tool_call_reply(
        "call_1",
        "write",
        r#"{"path": "greeting.txt", "content": "hello\n"}"#,
    );
    let fake = FakeServer::start(vec![
        call,
        Reply::sse(text_reply(&["Wrote greeting.txt."], 60, 4)),
    ])
    .await;
    let sb = Sandbox::new(json!([]));
    let url = fake.base_url.clone();
    let cmd = sb.bare_cmd(&[
        "run",
        "-p",
        "Write hello to greeting.txt.",
        "--remote",
        &url,
        "--no-session",
    ]);
    let out = tokio::task::spawn_blocking(move || run(cmd)).await.unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "Wrote greeting.txt.");
    assert_eq!(
        std::fs::read_to_string(sb.cwd.join("greeting.txt")).unwrap(),
        "hello\n"
    );
    // The second request carries the tool's result back to the model.
    let sent = fake.chat_requests();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let tool = tool_result(&sent[1]);
    assert_eq!(tool["tool_call_id"], "call_1", "{tool}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_agent_session_reads_a_file_through_the_remote_model() {
    let call = tool_call_reply("call_r", "read", r#"{"path": "a.txt"}"#);
    let fake = FakeServer::start(vec![call, Reply::sse(text_reply(&["It says hi."], 50, 4))]).await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("work");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("a.txt"), "hi from the file\n").unwrap();
    let serve = serve_remote(&fake, dir.path());
    let (status, created) = post(
        &format!("{}/v1/sessions", serve.root),
        &json!({"workspace": workspace, "tools": ["read"], "policy": "read_only"}),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    let resp = client()
        .post(format!("{}/v1/sessions/{id}/prompt", serve.root))
        .json(&json!({"content": "What does a.txt say?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = resp.text().await.unwrap();
    assert!(events.contains("It says hi."), "{events}");
    let sent = fake.chat_requests();
    assert_eq!(sent.len(), 2, "{sent:?}");
    let tool = tool_result(&sent[1]);
    assert!(
        tool["content"].to_string().contains("hi from the file"),
        "{tool}"
    );
}

/// Without the engine, asking for it is refused with a message that says what to do instead; the engine's own
/// commands are not there at all.
#[cfg(not(feature = "local"))]
#[test]
fn a_build_without_the_engine_refuses_the_local_provider_by_name() {
    let home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["serve", "--port", "0"])
        .env("AGENTD_HOME", home.path())
        .env_remove("AGENTD_MODEL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("built without the local engine"),
        "{stderr}"
    );
    assert!(stderr.contains("provider = \"remote\""), "{stderr}");
    for cmd in [
        &["generate", "hi"][..],
        &["tokenize", "hi"],
        &["bench", "engine"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
            .args(cmd)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{cmd:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("unrecognized subcommand"),
            "{cmd:?}: {stderr}"
        );
    }
}
