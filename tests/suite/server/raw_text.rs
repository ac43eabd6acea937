//! Text keeps every byte the model produced, over HTTP with both real tokenizers: a raw completion whose first
//! token begins with a space returns that space (`/v1/completions`, streamed and not); a chat reply, and a reply
//! after a tool result, are exactly the concatenation of their tokens (`logprobs` shows each one).

use std::sync::Arc;

use serde_json::{json, Value};

use super::{client, post, sse, TestServer};
use crate::suite::common;

async fn qwen_server() -> TestServer {
    let engine = tokio::task::spawn_blocking(|| common::qwen_engine().clone())
        .await
        .unwrap();
    let provider = agentd::provider::LocalProvider::new(engine);
    TestServer::start(agentd::server::AppState::new(
        Arc::new(provider),
        Default::default(),
    ))
    .await
}

fn joined_tokens(logprobs: &Value) -> String {
    logprobs["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["token"].as_str().unwrap())
        .collect()
}

async fn raw_completion_keeps_its_first_space(server: &TestServer, label: &str) {
    let url = server.url("/v1/completions");
    let model = super::served_model(server).await;
    let body = json!({"model": model, "prompt": "The alphabet: A B C D E F G", "max_tokens": 6, "temperature": 0});
    let (status, r) = post(&url, &body).await;
    assert_eq!(status, 200, "{r}");
    let text = r["choices"][0]["text"].as_str().unwrap().to_string();
    assert!(text.starts_with(" H"), "{label}: {text:?}");
    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    let resp = client()
        .post(&url)
        .json(&streamed_body)
        .send()
        .await
        .unwrap();
    let streamed: String = sse(resp)
        .await
        .iter()
        .filter_map(|ev| ev["choices"][0]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(streamed, text, "{label}: streamed");
    // Appending the completion to the prompt gives the text the model continued.
    assert!(format!("{}{text}", body["prompt"].as_str().unwrap())
        .starts_with("The alphabet: A B C D E F G H"));
}

async fn chat_replies_are_their_tokens(server: &TestServer, label: &str) {
    let url = server.url("/v1/chat/completions");
    let model = super::served_model(server).await;
    let plain = json!({"model": model, "max_tokens": 24, "temperature": 0, "logprobs": true,
        "messages": [{"role": "user", "content": "Continue: A B C D E F G"}]});
    let after_tool = json!({"model": model, "max_tokens": 24, "temperature": 0, "logprobs": true,
        "tools": [{"type": "function", "function": {"name": "read", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}],
        "messages": [
            {"role": "user", "content": "What does notes.txt say?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "read", "arguments": "{\"path\": \"notes.txt\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": " buy milk"}]});
    for body in [plain, after_tool] {
        let (status, r) = post(&url, &body).await;
        assert_eq!(status, 200, "{r}");
        let choice = &r["choices"][0];
        if choice["message"]["tool_calls"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
        {
            continue;
        }
        let content = choice["message"]["content"].as_str().unwrap();
        assert!(!content.is_empty(), "{label}: {r}");
        assert_eq!(content, joined_tokens(&choice["logprobs"]), "{label}: {r}");
    }
}

#[tokio::test]
async fn smollm2_text_keeps_every_byte() {
    let server = TestServer::local(Default::default()).await;
    raw_completion_keeps_its_first_space(&server, "smollm2").await;
    chat_replies_are_their_tokens(&server, "smollm2").await;
}

#[tokio::test]
async fn qwen_text_keeps_every_byte() {
    let server = qwen_server().await;
    raw_completion_keeps_its_first_space(&server, "qwen").await;
    chat_replies_are_their_tokens(&server, "qwen").await;
}
