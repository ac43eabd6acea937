//! Agent sessions over HTTP, on a scripted model: create (tools, policy, workspace), prompt as an SSE stream of
//! agent events with a real tool run, the transcript, persistence to the JSONL session file, branching, steering
//! and follow-ups, abort, a second prompt while running (409), and bad requests.

use std::time::Duration;

use agentd::provider::{ScriptedProvider, ScriptedReply};
use agentd::session::{JsonlStore, SessionStore, StoreOptions};
use serde_json::{json, Value};

use super::{client, get, post, SseReader, TestServer};

struct Setup {
    server: TestServer,
    provider: ScriptedProvider,
    workspace: tempfile::TempDir,
    _sessions: tempfile::TempDir,
}

async fn setup(replies: Vec<ScriptedReply>) -> Setup {
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("a.txt"), "alpha beta\n").unwrap();
    let sessions = tempfile::tempdir().unwrap();
    let provider = ScriptedProvider::new(replies);
    let server = TestServer::scripted_with_sessions(&provider, sessions.path()).await;
    Setup {
        server,
        provider,
        workspace,
        _sessions: sessions,
    }
}

async fn create(s: &Setup, extra: Value) -> Value {
    let mut body = json!({"workspace": s.workspace.path(), "tools": ["read", "ls", "write"], "policy": "read_only"});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    let (status, v) = post(&s.server.url("/v1/sessions"), &body).await;
    assert_eq!(status, 201, "{v}");
    v
}

async fn prompt(s: &Setup, id: &str, text: &str) -> Vec<Value> {
    s.server.prompt_session(id, text).await
}

fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e["type"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn a_session_runs_tools_persists_and_branches() {
    let s = setup(vec![
        ScriptedReply::new()
            .text("Let me look.")
            .tool_call("read", r#"{"path": "a.txt"}"#),
        ScriptedReply::text_only("It says alpha beta."),
        ScriptedReply::new().tool_call("write", r#"{"path": "b.txt", "content": "x"}"#),
        ScriptedReply::text_only("I may not write."),
        ScriptedReply::text_only("Starting over."),
    ])
    .await;
    let created = create(&s, json!({"system_prompt": "Be brief."})).await;
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(created["policy"], "read_only");
    // `write` is left out (the policy forbids it), `recall` is in (grounding is on): as in `agentd run`.
    assert_eq!(created["tools"], json!(["read", "ls", "recall"]));
    assert_eq!(created["status"], "ready");

    let events = prompt(&s, &id, "What is in a.txt?").await;
    assert_eq!(events.last(), Some(&json!("[DONE]")));
    let t = types(&events);
    assert_eq!(t.first().map(String::as_str), Some("agent_start"));
    assert_eq!(t.last().map(String::as_str), Some("agent_end"));
    for needed in [
        "turn_start",
        "message_start",
        "message_update",
        "message_end",
        "tool_execution_start",
        "tool_execution_end",
        "turn_end",
    ] {
        assert!(t.iter().any(|x| x == needed), "{needed}: {t:?}");
    }
    let end = events
        .iter()
        .find(|e| e["type"] == "tool_execution_end")
        .unwrap();
    assert_eq!(end["is_error"], false);
    assert!(end["result"]["content"]
        .as_str()
        .unwrap()
        .contains("alpha beta"));
    let agent_end = &events[events.len() - 2];
    assert_eq!(agent_end["reason"], "completed");

    // The policy holds: `write` is not offered, so a call of it is an error result the model sees.
    let events = prompt(&s, &id, "Write b.txt").await;
    let end = events
        .iter()
        .find(|e| e["type"] == "tool_execution_end")
        .unwrap();
    assert_eq!(end["is_error"], true, "{end}");
    assert!(!s.workspace.path().join("b.txt").exists());

    let (status, body) = get(&s.server.url(&format!("/v1/sessions/{id}/messages"))).await;
    assert_eq!(status, 200);
    let messages: Value = serde_json::from_str(&body).unwrap();
    let roles: Vec<&str> = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool_result",
            "assistant",
            "user",
            "assistant",
            "tool_result",
            "assistant"
        ]
    );
    // The provider saw the system prompt and the tools.
    let req = &s.provider.requests()[0];
    let system = req.system.as_deref().unwrap_or_default();
    assert!(system.starts_with("Be brief."), "{system}");
    // The workspace's files, relative, instead of an absolute path the model would copy.
    assert!(
        system.contains("relative to it") || system.contains("The working directory is empty"),
        "{system}"
    );
    assert!(!system.contains("Working directory: /"), "{system}");
    assert_eq!(req.tools.len(), 3);

    // Persisted: the JSONL file holds the same transcript.
    let path = created["path"].as_str().unwrap();
    let store = JsonlStore::open(std::path::Path::new(path), StoreOptions::default()).unwrap();
    let ctx = store.build_context(None).unwrap();
    assert_eq!(
        serde_json::to_value(&ctx.messages).unwrap(),
        messages["messages"]
    );

    // Branch from the first user message: the transcript becomes that path, and the next prompt continues it.
    let (_, entries) = get(&s.server.url(&format!("/v1/sessions/{id}/entries"))).await;
    let entries: Value = serde_json::from_str(&entries).unwrap();
    let first_user = entries["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "message" && e["message"]["role"] == "user")
        .unwrap()["id"]
        .clone();
    let (status, b) = post(
        &s.server.url(&format!("/v1/sessions/{id}/branch")),
        &json!({"entry_id": first_user}),
    )
    .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(b["messages"].as_array().unwrap().len(), 1);
    prompt(&s, &id, "Again").await;
    let (_, body) = get(&s.server.url(&format!("/v1/sessions/{id}/messages"))).await;
    let messages: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(messages["messages"].as_array().unwrap().len(), 3);
    let store = JsonlStore::open(std::path::Path::new(path), StoreOptions::default()).unwrap();
    assert_eq!(
        store.build_context(None).unwrap().messages.len(),
        3,
        "the branch is persisted"
    );
    assert!(store.entries().len() > 10, "the old branch is kept");

    let (status, list) = get(&s.server.url("/v1/sessions")).await;
    assert_eq!(status, 200);
    assert!(list.contains(&id));

    // Rewind one message; then forget the live session and resume it from its file by id.
    let (status, r) = post(
        &s.server.url(&format!("/v1/sessions/{id}/rewind")),
        &json!({"n": 1}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["messages"].as_array().unwrap().len(), 2);
    let (status, r) = post(
        &s.server.url(&format!("/v1/sessions/{id}/rewind")),
        &json!({"n": 99}),
    )
    .await;
    assert_eq!((status, r["error"]["param"].clone()), (400, json!("n")));
    let resp = client()
        .delete(s.server.url(&format!("/v1/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resumed = create(&s, json!({"resume": id})).await;
    assert_eq!(resumed["id"], id);
    assert_eq!(resumed["path"], created["path"]);
    let (_, body) = get(&s.server.url(&format!("/v1/sessions/{id}/messages"))).await;
    let messages: Value = serde_json::from_str(&body).unwrap();
    let messages = messages["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        3,
        "a reopened session continues from its last entry"
    );
    assert_eq!(messages[2]["content"][0]["text"], "Starting over.");
    let (status, v) = post(
        &s.server.url("/v1/sessions"),
        &json!({"workspace": s.workspace.path(), "resume": "nope"}),
    )
    .await;
    assert_eq!(
        (status, v["error"]["param"].clone()),
        (404, json!("resume"))
    );
}

#[tokio::test]
async fn steer_follow_up_abort_and_conflicts() {
    let s = setup(vec![
        ScriptedReply::new()
            .delay(Duration::from_millis(300))
            .text("First answer."),
        ScriptedReply::text_only("Answer to the follow-up."),
        ScriptedReply::new().hang(),
    ])
    .await;
    let id = create(&s, json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let url = |p: &str| s.server.url(&format!("/v1/sessions/{id}/{p}"));
    let resp = client()
        .post(url("prompt"))
        .json(&json!({"content": "one"}))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    assert_eq!(reader.next().await.unwrap()["type"], "agent_start");
    // While it runs: a second prompt conflicts; a follow-up is queued and delivered before the run ends.
    let (status, v) = post(&url("prompt"), &json!({"content": "two"})).await;
    assert_eq!(status, 409, "{v}");
    let (status, _) = post(&url("follow_up"), &json!({"content": "and then?"})).await;
    assert_eq!(status, 202);
    let mut rest = Vec::new();
    while let Some(ev) = reader.next().await {
        rest.push(ev);
    }
    let texts: Vec<String> = rest
        .iter()
        .filter(|e| e["type"] == "message_end" && e["message"]["role"] == "assistant")
        .map(|e| {
            e["message"]["content"][0]["text"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(texts, ["First answer.", "Answer to the follow-up."]);
    assert_eq!(s.provider.requests().len(), 2);

    // A run that hangs is aborted over HTTP.
    let resp = client()
        .post(url("prompt"))
        .json(&json!({"content": "hang"}))
        .send()
        .await
        .unwrap();
    let mut reader = SseReader::new(resp);
    reader.next().await.unwrap();
    let (status, v) = post(&url("steer"), &json!({"content": "stop that"})).await;
    assert_eq!(status, 202, "{v}");
    let (status, v) = post(&url("abort"), &json!({})).await;
    assert_eq!((status, v["aborted"].clone()), (202, json!(true)));
    let mut last = Value::Null;
    while let Some(ev) = reader.next().await {
        if ev != json!("[DONE]") {
            last = ev;
        }
    }
    assert_eq!(last["type"], "agent_end");
    assert_eq!(last["reason"], "aborted");
    let (_, show) = get(&s.server.url(&format!("/v1/sessions/{id}"))).await;
    assert!(show.contains("\"status\":\"cancelled\""), "{show}");
}

#[tokio::test]
async fn bad_session_requests() {
    let s = setup(vec![]).await;
    let url = s.server.url("/v1/sessions");
    let ws = s.workspace.path().to_string_lossy().to_string();
    for (body, param) in [
        (json!({"workspace": ws, "tools": ["rm"]}), "tools"),
        (json!({"workspace": ws, "policy": "god_mode"}), "policy"),
        (json!({"workspace": "/no/such/dir"}), "workspace"),
        (json!({"workspace": ws, "model": "gpt-4o"}), "model"),
        (json!({"workspace": ws, "max_turns": 0}), "max_turns"),
        (json!({"workspace": ws, "temperature": -3}), "temperature"),
        (json!({"workspace": ws, "colour": "red"}), ""),
    ] {
        let (status, v) = post(&url, &body).await;
        assert!(status == 400 || status == 404, "{body}: {v}");
        if !param.is_empty() {
            assert_eq!(v["error"]["param"], param, "{v}");
        }
    }
    let (status, _) = post(
        &s.server.url("/v1/sessions/nope/prompt"),
        &json!({"content": "hi"}),
    )
    .await;
    assert_eq!(status, 404);
    let id = create(&s, json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, v) = post(
        &s.server.url(&format!("/v1/sessions/{id}/prompt")),
        &json!({"text": "hi"}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = post(
        &s.server.url(&format!("/v1/sessions/{id}/branch")),
        &json!({"entry_id": "zzz"}),
    )
    .await;
    assert_eq!(
        (status, v["error"]["param"].clone()),
        (400, json!("entry_id"))
    );
    let resp = client()
        .delete(s.server.url(&format!("/v1/sessions/{id}")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        get(&s.server.url(&format!("/v1/sessions/{id}"))).await.0,
        404
    );
}

/// A session created with `approvals` asks before `write`: the prompt stream carries an `approval_request`
/// (with the new file as its preview), the call waits until `POST …/approve`; `deny` gives the model an
/// error result and writes nothing, `allow` runs it. Bad approvals and unknown request ids are errors.
#[tokio::test]
async fn http_approvals_pause_a_call_until_the_client_answers() {
    let s = setup(vec![
        ScriptedReply::new().tool_call("write", r#"{"path": "b.txt", "content": "first"}"#),
        ScriptedReply::text_only("Not written."),
        ScriptedReply::new().tool_call("write", r#"{"path": "b.txt", "content": "second"}"#),
        ScriptedReply::text_only("Written."),
    ])
    .await;
    for bad in [json!("write=perhaps"), json!({"writ": "ask"}), json!(7)] {
        let mut body = json!({"workspace": s.workspace.path(), "policy": "all", "approvals": bad});
        body["tools"] = json!(["write"]);
        let (status, v) = post(&s.server.url("/v1/sessions"), &body).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["param"], "approvals", "{v}");
    }
    let created = create(
        &s,
        json!({"policy": "all", "approvals": {"write": "ask", "exec": "deny"}}),
    )
    .await;
    assert_eq!(
        created["approvals"],
        "read_only=allow,write=ask,exec=deny,network=allow"
    );
    let id = created["id"].as_str().unwrap().to_string();
    let url = |p: &str| s.server.url(&format!("/v1/sessions/{id}/{p}"));

    for (decision, reply) in [("deny", "Not written."), ("allow", "Written.")] {
        let resp = client()
            .post(url("prompt"))
            .json(&json!({"content": "write b"}))
            .send()
            .await
            .unwrap();
        let mut reader = SseReader::new(resp);
        let request = loop {
            let ev = reader.next().await.expect("an approval request");
            if ev["type"] == "approval_request" {
                break ev;
            }
        };
        assert_eq!(request["tool_name"], "write");
        assert!(
            request["preview"].as_str().unwrap().contains("b.txt"),
            "{request}"
        );
        let (status, shown) = get(&s.server.url(&format!("/v1/sessions/{id}"))).await;
        assert_eq!(status, 200);
        let shown: Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(shown["pending_approvals"][0]["id"], request["id"]);
        assert!(
            std::fs::read_to_string(s.workspace.path().join("b.txt")).is_err()
                || decision == "allow",
            "nothing written before the answer"
        );
        let (status, v) = post(
            &url("approve"),
            &json!({"id": "approval-999", "decision": "allow"}),
        )
        .await;
        assert_eq!(status, 404, "{v}");
        let (status, v) = post(
            &url("approve"),
            &json!({"id": request["id"], "decision": decision, "reason": "policy"}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        let mut rest = Vec::new();
        while let Some(ev) = reader.next().await {
            rest.push(ev);
        }
        let end = rest
            .iter()
            .find(|e| e["type"] == "tool_execution_end")
            .expect("the call ended");
        assert_eq!(end["is_error"], decision == "deny", "{end}");
        assert!(rest
            .iter()
            .any(|e| e["type"] == "message_end"
                && e["message"]["content"].to_string().contains(reply)));
    }
    assert_eq!(
        std::fs::read_to_string(s.workspace.path().join("b.txt")).unwrap(),
        "second"
    );
    assert!(s.provider.requests()[1]
        .messages
        .iter()
        .any(|m| format!("{m:?}").contains("the user denied it: policy")));
}

/// `rewind` and `branch` with `summarize`: the model's summary of what is left behind is recorded as a
/// `branch_summary` entry and becomes part of the transcript.
#[tokio::test]
async fn rewind_and_branch_can_summarise_what_they_leave() {
    let s = setup(vec![
        ScriptedReply::text_only("One."),
        ScriptedReply::text_only("Two."),
        ScriptedReply::text_only("- asked two, got Two."),
        ScriptedReply::text_only("- everything was left."),
    ])
    .await;
    let id = create(&s, json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    prompt(&s, &id, "first").await;
    prompt(&s, &id, "second").await;
    let url = |p: &str| s.server.url(&format!("/v1/sessions/{id}/{p}"));
    let (status, v) = post(&url("rewind"), &json!({"n": 2, "summarize": true})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["summary"], "- asked two, got Two.");
    let messages = v["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{v}");
    assert_eq!(messages[2]["role"], "branch_summary", "{v}");
    let asked = format!("{:?}", s.provider.requests()[2].messages[0]);
    assert!(
        asked.contains("second") && asked.contains("Two."),
        "{asked}"
    );

    let (status, v) = post(
        &url("branch"),
        &json!({"entry_id": null, "summarize": true}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["summary"], "- everything was left.");
    let (status, v) = post(&url("rewind"), &json!({"n": 99, "summarize": true})).await;
    assert_eq!(status, 400, "{v}");
}

/// `GET /v1/sessions/saved` lists a workspace's saved session files (what the web page reopens with `resume`).
#[tokio::test]
async fn saved_sessions_are_listed_for_reopening() {
    let s = setup(vec![ScriptedReply::text_only("Saved.")]).await;
    let id = create(&s, json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    prompt(&s, &id, "remember me").await;
    let url = format!(
        "/v1/sessions/saved?workspace={}",
        s.workspace.path().display()
    );
    let (status, body) = get(&s.server.url(&url)).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    let found = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(found["first_message"], "remember me");
}

/// A client that reads `[DONE]` and at once sends the next request finds the session free: `agent_end` comes only
/// after the run has let the session go (under CI load a prompt right after the stream ended was refused with 409).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_request_right_after_done_is_never_refused_as_busy() {
    const ROUNDS: usize = 60;
    let s = setup(
        (0..ROUNDS)
            .map(|i| ScriptedReply::text_only(format!("Reply {i}.")))
            .collect(),
    )
    .await;
    let id = create(&s, json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    for i in 0..ROUNDS {
        let resp = client()
            .post(s.server.url(&format!("/v1/sessions/{id}/prompt")))
            .json(&json!({"content": format!("prompt {i}")}))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body = resp.text().await.unwrap();
        assert_eq!(status, 200, "prompt {i}: {body}");
        assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
        assert!(body.contains(&format!("Reply {i}.")), "{body}");
        if i % 10 == 9 {
            // A tree operation right after the stream ended is not refused either.
            let (status, v) = post(
                &s.server.url(&format!("/v1/sessions/{id}/rewind")),
                &json!({"n": 2}),
            )
            .await;
            assert_eq!(status, 200, "rewind after prompt {i}: {v}");
        }
    }
}
