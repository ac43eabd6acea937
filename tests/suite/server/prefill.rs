//! Assistant prefills through the HTTP doors, on the real default model: Chat Completions with vLLM's
//! `continue_final_message` (and `/tokenize` with the same flags counting the same prompt), the Anthropic
//! Messages API's own rule (a last assistant message is continued), and the requests that cannot be continued.

use agentd::server::ServerOptions;
use serde_json::{json, Value};

use super::{post, TestServer};

fn model() -> String {
    crate::suite::common::engine().info().name.clone()
}

fn counting() -> Value {
    json!([{"role": "user", "content": "Count from 1 to 10, separated by commas."},
           {"role": "assistant", "content": "1, 2, 3, 4,"}])
}

#[tokio::test]
async fn chat_completions_continue_the_final_message_when_asked() {
    let server = TestServer::local(ServerOptions::default()).await;
    let body = json!({"model": model(), "temperature": 0, "max_tokens": 4, "messages": counting(),
                      "continue_final_message": true, "add_generation_prompt": false});
    let (status, r) = post(&server.url("/v1/chat/completions"), &body).await;
    assert_eq!(status, 200, "{r}");
    let text = r["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(text.trim_start().starts_with('5'), "{text:?}");
    let (status, count) = post(
        &server.url("/tokenize"),
        &json!({"model": model(), "messages": counting(),
                "continue_final_message": true, "add_generation_prompt": false}),
    )
    .await;
    assert_eq!(status, 200, "{count}");
    assert_eq!(r["usage"]["prompt_tokens"], count["count"]);
    // Without the flag the assistant message is answered with a new one: a longer prompt (its end and the next
    // generation prompt).
    let (_, answered) = post(
        &server.url("/tokenize"),
        &json!({"model": model(), "messages": counting()}),
    )
    .await;
    assert!(answered["count"].as_u64() > count["count"].as_u64());

    for (body, why) in [
        (
            json!({"model": model(), "messages": [{"role": "user", "content": "hi"}],
                   "continue_final_message": true}),
            "the assistant's text",
        ),
        (
            json!({"model": model(), "messages": counting(),
                   "continue_final_message": true, "add_generation_prompt": true}),
            "cannot both be true",
        ),
    ] {
        let (status, r) = post(&server.url("/v1/chat/completions"), &body).await;
        assert_eq!(status, 400, "{r}");
        assert!(r["error"]["message"].as_str().unwrap().contains(why), "{r}");
    }
}

#[tokio::test]
async fn the_messages_api_continues_a_last_assistant_message() {
    let server = TestServer::local(ServerOptions::default()).await;
    let body = json!({"model": model(), "temperature": 0, "max_tokens": 4, "messages": counting()});
    let (status, r) = post(&server.url("/v1/messages"), &body).await;
    assert_eq!(status, 200, "{r}");
    let text = r["content"][0]["text"].as_str().unwrap();
    assert!(text.trim_start().starts_with('5'), "{text:?}");
    assert_eq!(r["role"], "assistant");
}
