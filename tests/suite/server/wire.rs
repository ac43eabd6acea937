//! The exact wire format, on a scripted provider (deterministic, no model): the chunk sequence of a streamed
//! answer, tool-call deltas as the SDK expects them (two parallel calls), reasoning, the usage chunk, the
//! non-streamed message with `content: null`, a failure mid-stream, and the errors of routes without an engine.

use std::sync::Arc;

use agentd::provider::{ErrorKind, ScriptedProvider, ScriptedReply, Usage};
use agentd::server::ServerOptions;
use serde_json::{json, Value};

use super::{client, post, sse, TestServer};

fn body(stream: bool) -> Value {
    json!({
        "model": "scripted", "stream": stream, "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null },
        "messages": [{"role": "user", "content": "read a and b"}],
        "tools": [{"type": "function", "function": {"name": "read", "parameters": {"type": "object",
                   "properties": {"path": {"type": "string"}}, "required": ["path"]}}}],
    })
}

fn two_calls() -> ScriptedReply {
    ScriptedReply::new()
        .thinking("I should read both.")
        .text("Reading.")
        .tool_call_with_id("call_a", "read", r#"{"path": "a.rs"}"#)
        .tool_call_with_id("call_b", "read", r#"{"path": "b.rs"}"#)
        .usage(Usage::new(40, 12, 8))
}

#[tokio::test]
async fn streamed_tool_calls_have_the_shape_the_sdk_expects() {
    let provider = ScriptedProvider::new([two_calls()]);
    let server = TestServer::with_provider(Arc::new(provider), ServerOptions::default()).await;
    let resp = client()
        .post(server.url("/v1/chat/completions"))
        .json(&body(true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = sse(resp).await;
    assert_eq!(events.last(), Some(&json!("[DONE]")));
    let chunks = &events[..events.len() - 1];
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"));
    for c in chunks {
        assert_eq!(c["id"], id);
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "scripted");
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    // Every chunk but the last carries `usage: null`; the last has no choices and the usage.
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52,
               "prompt_tokens_details": {"cached_tokens": 8}})
    );
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["usage"].is_null()));

    let deltas: Vec<&Value> = chunks[..chunks.len() - 1]
        .iter()
        .map(|c| &c["choices"][0]["delta"])
        .collect();
    let reasoning: String = deltas
        .iter()
        .filter_map(|d| d["reasoning_content"].as_str())
        .collect();
    assert_eq!(reasoning, "I should read both.");
    let text: String = deltas
        .iter()
        .filter_map(|d| d["content"].as_str())
        .collect();
    assert_eq!(text, "Reading.");
    let calls: Vec<&Value> = deltas
        .iter()
        .filter_map(|d| d["tool_calls"].as_array())
        .flatten()
        .collect();
    // Each call: a first delta with index, id, type and name, then fragments with the index only.
    for (index, call_id, path) in [(0, "call_a", "a.rs"), (1, "call_b", "b.rs")] {
        let mine: Vec<&&Value> = calls.iter().filter(|c| c["index"] == index).collect();
        assert!(mine.len() >= 2, "{mine:?}");
        assert_eq!(
            **mine[0],
            json!({"index": index, "id": call_id, "type": "function", "function": {"name": "read", "arguments": ""}})
        );
        for frag in &mine[1..] {
            let keys: Vec<&String> = frag.as_object().unwrap().keys().collect();
            assert_eq!(keys, ["index", "function"]);
            assert_eq!(frag["function"].as_object().unwrap().len(), 1);
        }
        let args: String = mine
            .iter()
            .filter_map(|c| c["function"]["arguments"].as_str())
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&args).unwrap(),
            json!({"path": path})
        );
    }
    let finishes: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .map(|c| &c["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finishes, [&json!("tool_calls")]);
}

#[tokio::test]
async fn a_non_streamed_tool_answer_has_null_content_only_without_text() {
    let provider = ScriptedProvider::new([
        ScriptedReply::new().tool_call_with_id("call_x", "read", r#"{"path":"x"}"#),
        two_calls(),
    ]);
    let server = TestServer::with_provider(Arc::new(provider), ServerOptions::default()).await;
    let (status, r) = post(&server.url("/v1/chat/completions"), &body(false)).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["object"], "chat.completion");
    let choice = &r["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(
        choice["message"],
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_x", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"x\"}"}}]})
    );
    assert!(choice["logprobs"].is_null());
    let (_, r) = post(&server.url("/v1/chat/completions"), &body(false)).await;
    let m = &r["choices"][0]["message"];
    assert_eq!(m["content"], "Reading.");
    assert_eq!(m["reasoning_content"], "I should read both.");
    assert_eq!(m["tool_calls"].as_array().unwrap().len(), 2);
    assert_eq!(r["usage"]["total_tokens"], 52);
}

#[tokio::test]
async fn failures_before_and_after_the_stream_starts() {
    let provider = ScriptedProvider::new([
        ScriptedReply::new().fail(
            ErrorKind::ContextOverflow,
            "prompt is 9000 tokens, but the model's context window is 8192 tokens",
        ),
        ScriptedReply::new()
            .text("Hello there, partial")
            .fail(ErrorKind::Engine, "the engine broke"),
    ]);
    let server = TestServer::with_provider(Arc::new(provider), ServerOptions::default()).await;
    // Before anything was produced: an HTTP error with its status, even for a streaming request.
    let (status, r) = post(&server.url("/v1/chat/completions"), &body(true)).await;
    assert_eq!(status, 400, "{r}");
    assert_eq!(r["error"]["code"], "context_length_exceeded");
    assert!(r["error"]["message"].as_str().unwrap().contains("8192"));
    // After the stream started: an error event, then [DONE].
    let resp = client()
        .post(server.url("/v1/chat/completions"))
        .json(&body(true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let events = sse(resp).await;
    let n = events.len();
    assert_eq!(events[n - 1], json!("[DONE]"));
    assert!(events[n - 2]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("the engine broke"));
    assert_eq!(events[n - 2]["error"]["type"], "server_error");
}

#[tokio::test]
async fn engine_routes_need_the_local_engine() {
    let server = TestServer::with_provider(
        Arc::new(ScriptedProvider::new([])),
        ServerOptions::default(),
    )
    .await;
    for (path, body) in [
        (
            "/v1/completions",
            json!({"model": "scripted", "prompt": "hi"}),
        ),
        ("/tokenize", json!({"prompt": "hi"})),
        ("/detokenize", json!({"tokens": [1]})),
    ] {
        let (status, r) = post(&server.url(path), &body).await;
        assert_eq!(status, 501, "{path}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not available from this provider"),
            "{r}"
        );
    }
    let (status, r) = post(
        &server.url("/v1/chat/completions"),
        &json!({"model": "scripted", "messages": [{"role": "user", "content": "hi"}], "logprobs": true}),
    )
    .await;
    assert_eq!(
        (status, r["error"]["param"].clone()),
        (400, json!("logprobs"))
    );
}
