//! Reasoning output end to end: the real Qwen2.5 model under a thinking chat template (Qwen3's shape: the
//! generation prompt opens `<think>`, or writes an empty block when thinking is off), served over loopback HTTP.
//! The think block comes back as `reasoning_content` (whole and as stream deltas), as a thinking block in the
//! provider's message, the thinking level reaches the template, and a required tool call still comes after the
//! block, valid.

use std::sync::{Arc, OnceLock};

use agentd::engine::{Engine, EngineOptions};
use agentd::provider::{collect, LocalProvider, Provider};
use agentd::server::{AppState, ServerOptions};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{client, post, sse, TestServer};
use crate::suite::common;

/// Qwen3's switch in a ChatML template: `<think>\n` opens the block unless `enable_thinking` is false.
const THINKING_TEMPLATE: &str =
    "{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + \
(message['content'] or '') + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}\
{{ '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false %}\
{{ '<think>\\n\\n</think>\\n\\n' }}{%- else %}{{ '<think>\\n' }}{%- endif %}{%- endif %}";

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        Engine::load(EngineOptions {
            model: agentd::model_files::fetch::ModelSelector::Path(common::qwen_path()),
            device: agentd::engine::DeviceSpec::Cpu,
            chat_template: Some(THINKING_TEMPLATE.into()),
            ..Default::default()
        })
        .expect("load Qwen2.5 with a thinking template")
    })
}

async fn server() -> TestServer {
    let engine = tokio::task::spawn_blocking(|| engine().clone())
        .await
        .unwrap();
    let provider = LocalProvider::new(engine);
    TestServer::start(AppState::new(Arc::new(provider), ServerOptions::default())).await
}

fn question(extra: Value) -> Value {
    let mut body = json!({
        "model": "qwen2.5-coder-0.5b-instruct-q4_k_m",
        "temperature": 0,
        "max_tokens": 60,
        "messages": [{"role": "user", "content":
            "What is 2+3? Think step by step, then close your thinking with </think> and answer."}],
    });
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    body
}

#[tokio::test]
async fn think_block_is_reasoning_content() {
    let s = server().await;
    let url = s.url("/v1/chat/completions");
    let (status, body) = post(&url, &question(json!({}))).await;
    assert_eq!(status, 200, "{body}");
    let message = &body["choices"][0]["message"];
    let reasoning = message["reasoning_content"]
        .as_str()
        .expect("reasoning_content");
    assert!(!reasoning.trim().is_empty(), "{body}");
    assert!(!reasoning.contains("think>"), "{body}");
    let content = message["content"].as_str().unwrap_or("");
    assert!(!content.contains("think>"), "{body}");
    // What follows the block is the reply; the whitespace between them is the template's layout.
    assert_eq!(content, content.trim_start(), "{body}");

    // Streamed: reasoning deltas first, joined they are the same text; no marker leaks into any delta.
    let resp = client()
        .post(&url)
        .json(&question(json!({"stream": true})))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (mut r, mut c) = (String::new(), String::new());
    let mut reasoning_deltas = 0;
    for ev in sse(resp).await {
        let delta = &ev["choices"][0]["delta"];
        if let Some(t) = delta["reasoning_content"].as_str() {
            assert!(c.is_empty(), "reasoning after content: {ev}");
            r.push_str(t);
            reasoning_deltas += 1;
        }
        if let Some(t) = delta["content"].as_str() {
            c.push_str(t);
        }
    }
    assert!(reasoning_deltas > 1, "reasoning was not streamed");
    assert_eq!(r, reasoning);
    assert_eq!(c, content);

    // Thinking off: the template writes an empty block, nothing is reasoning, and the prompt grew by it.
    let (status, off) = post(&url, &question(json!({"reasoning_effort": "none"}))).await;
    assert_eq!(status, 200, "{off}");
    let m = &off["choices"][0]["message"];
    assert!(m["reasoning_content"].is_null(), "{off}");
    assert!(!m["content"].as_str().unwrap_or("").is_empty(), "{off}");
    let grew = off["usage"]["prompt_tokens"].as_u64().unwrap()
        > body["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(grew, "{off} vs {body}");
    let (status, kw) = post(
        &url,
        &question(json!({"chat_template_kwargs": {"enable_thinking": false}})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(kw["usage"]["prompt_tokens"], off["usage"]["prompt_tokens"]);

    for bad in [
        json!({"reasoning_effort": "extreme"}),
        json!({"chat_template_kwargs": {"enable_thinking": "yes"}}),
    ] {
        let (status, err) = post(&url, &question(bad.clone())).await;
        assert_eq!(status, 400, "{bad}: {err}");
    }
}

#[tokio::test]
async fn required_call_after_thinking() {
    let s = server().await;
    let body = question(json!({
        "max_tokens": 200,
        "tool_choice": "required",
        "parallel_tool_calls": false,
        "tools": [{"type": "function", "function": {"name": "add", "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"], "additionalProperties": false}}}],
        "messages": [{"role": "user", "content": "What is 2+3? Use the add tool."}],
    }));
    let (status, out) = post(&s.url("/v1/chat/completions"), &body).await;
    assert_eq!(status, 200, "{out}");
    let choice = &out["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{out}");
    let m = &choice["message"];
    assert!(
        !m["reasoning_content"]
            .as_str()
            .unwrap_or("")
            .trim()
            .is_empty(),
        "{out}"
    );
    let calls = m["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{out}");
    assert_eq!(calls[0]["function"]["name"], "add");
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["a"].is_number() && args["b"].is_number(), "{args}");

    // The provider's own message: a thinking block, then the call (what agent sessions store).
    let provider = LocalProvider::new(engine().clone());
    let request: agentd::provider::CompletionRequest =
        agentd::server::openai::convert::chat_request(
            serde_json::from_value(body).unwrap(),
            "qwen2.5-coder-0.5b-instruct-q4_k_m".into(),
            &Default::default(),
        )
        .unwrap()
        .0;
    let done = collect(provider.stream(request, CancellationToken::new())).await;
    let message = done.message;
    assert!(!message.thinking().trim().is_empty());
    assert!(matches!(
        message.content.first(),
        Some(agentd::provider::ContentBlock::Thinking { .. })
    ));
    assert_eq!(message.tool_calls().len(), 1);
}
