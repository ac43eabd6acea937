//! RemoteProvider against the fake vLLM server: streaming text and reasoning, tool-call deltas (every edge case
//! of the wire format), usage, the request body, retries, timeouts, and every bad-input error.

use std::time::{Duration, Instant};

use agentd::provider::remote::{MaxTokensField, Retry, Timeouts};
use agentd::provider::{
    collect, CompletionRequest, ErrorKind, ErrorReason, InvalidToolCallKind, Message, Provider,
    ProviderEvent, RemoteConfig, RemoteProvider, ResponseFormat, Sampling, StopReason, ToolCall,
    ToolChoice, ToolSpec, Usage,
};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::contract;

mod failures;
mod fit;
use super::fake_openai::{call_delta, chunk, text_reply, usage_chunk, FakeServer, Reply};

fn config(server: &FakeServer) -> RemoteConfig {
    RemoteConfig {
        retry: Retry {
            max_retries: 3,
            initial_backoff_ms: 10,
            max_backoff_ms: 40,
            max_retry_after_secs: 5.0,
        },
        timeouts: Timeouts {
            connect_secs: 2.0,
            request_secs: 5.0,
            idle_secs: 5.0,
        },
        ..RemoteConfig::new(&server.base_url, "fake-model")
    }
}

fn provider(server: &FakeServer) -> RemoteProvider {
    RemoteProvider::new(config(server)).unwrap()
}

fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "read",
            "Read a file",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        )
        .unwrap(),
        ToolSpec::new(
            "ls",
            "List a directory",
            json!({"type": "object", "properties": {"dir": {"type": "string"}}}),
        )
        .unwrap(),
    ]
}

fn tool_request() -> CompletionRequest {
    CompletionRequest {
        tools: tools(),
        ..CompletionRequest::user("read a.rs and list src")
    }
}

fn error_of(events: &[ProviderEvent]) -> (ErrorReason, ErrorKind, String) {
    match events.last() {
        Some(ProviderEvent::Error {
            reason,
            kind,
            message,
            ..
        }) => (*reason, *kind, message.clone()),
        other => panic!("expected an error event, got {other:?}"),
    }
}

#[tokio::test]
async fn streams_text_and_reasoning_with_usage_and_sends_the_openai_body() {
    let mut chunks = vec![
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"reasoning_content": "The user "}), None),
        chunk(json!({"reasoning_content": "greets."}), None),
    ];
    chunks.extend(
        text_reply(&["Hel", "lo", "!"], 0, 0)
            .into_iter()
            .skip(1)
            .take(4),
    );
    chunks.push(usage_chunk(31, 4, 16));
    let server = FakeServer::start(vec![Reply::sse(chunks)]).await;
    let cfg = RemoteConfig {
        api_key: Some("sk-test".into()),
        headers: [("X-Route".to_string(), "agents".to_string())].into(),
        ..config(&server)
    };
    let p = RemoteProvider::new(cfg).unwrap();
    let req = CompletionRequest {
        system: Some("Be brief.".into()),
        messages: vec![Message::user("hi")],
        max_tokens: Some(64),
        stop: vec!["\n\n".into()],
        sampling: Sampling {
            temperature: Some(0.2),
            top_k: Some(20),
            seed: Some(7),
            ..Sampling::default()
        },
        ..CompletionRequest::default()
    };
    let c = collect(p.stream(req, CancellationToken::new())).await;
    contract::assert_well_formed(&c.events);
    assert_eq!(c.stop_reason, StopReason::Stop);
    assert_eq!(c.message.text(), "Hello!");
    assert_eq!(c.message.thinking(), "The user greets.");
    assert_eq!(c.usage, Usage::new(31, 4, 16));
    assert_eq!(
        c.events[..3],
        [
            ProviderEvent::Start {
                model: "fake-model".into()
            },
            ProviderEvent::ThinkingDelta {
                delta: "The user ".into()
            },
            ProviderEvent::ThinkingDelta {
                delta: "greets.".into()
            },
        ]
    );

    let sent = server.chat_requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].body,
        json!({
            "model": "fake-model",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 64,
            "stop": ["\n\n"],
            "temperature": 0.2f32,
            "seed": 7,
            "top_k": 20,
        })
    );
    assert_eq!(sent[0].headers["authorization"], "Bearer sk-test");
    assert_eq!(sent[0].headers["x-route"], "agents");
}

#[tokio::test]
async fn tool_call_deltas_are_assembled_by_index() {
    // Two parallel calls: ids and names only in their first delta, an empty fragment, interleaved indices,
    // and the second call's last fragment in the chunk that carries finish_reason.
    let chunks = vec![
        chunk(json!({"role": "assistant", "content": null}), None),
        chunk(call_delta(0, Some("call_a"), Some("read"), ""), None),
        chunk(call_delta(0, None, None, "{\"pa"), None),
        chunk(call_delta(1, Some("call_b"), Some("ls"), "{\"dir\""), None),
        chunk(call_delta(0, None, None, ""), None),
        chunk(call_delta(0, None, None, "th\": \"a.rs\"}"), None),
        chunk(call_delta(1, None, None, ": \"src\"}"), Some("tool_calls")),
        usage_chunk(50, 20, 0),
    ];
    let server = FakeServer::start(vec![Reply::sse(chunks)]).await;
    let p = provider(&server);
    let c = collect(p.stream(tool_request(), CancellationToken::new())).await;
    let calls = contract::assert_well_formed(&c.events);
    assert_eq!(c.stop_reason, StopReason::ToolUse);
    assert_eq!(
        calls,
        [
            ToolCall::new("call_a", "read", json!({"path": "a.rs"})),
            ToolCall::new("call_b", "ls", json!({"dir": "src"})),
        ]
    );
    let starts: Vec<&ProviderEvent> = c
        .events
        .iter()
        .filter(|e| matches!(e, ProviderEvent::ToolCallStart { .. }))
        .collect();
    assert_eq!(
        starts,
        [
            &ProviderEvent::ToolCallStart {
                index: 0,
                id: "call_a".into(),
                name: "read".into()
            },
            &ProviderEvent::ToolCallStart {
                index: 1,
                id: "call_b".into(),
                name: "ls".into()
            },
        ]
    );
    // The body offered the tools in OpenAI shape.
    let body = &server.chat_requests()[0].body;
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["tools"][0]["function"]["name"], "read");
    assert_eq!(body["tools"][0]["type"], "function");
}

#[tokio::test]
async fn a_call_whose_name_comes_late_and_a_call_without_id_still_assemble() {
    let chunks = vec![
        // No id at all, and the name only in the second delta.
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"name": "read", "arguments": "{\"path\":"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"x\"}"}}]}),
            None,
        ),
        // `stop` with a call (vLLM with a named tool_choice) still means tool_use.
        chunk(json!({}), Some("stop")),
    ];
    let server = FakeServer::start(vec![Reply::sse(chunks)]).await;
    let c = collect(provider(&server).stream(tool_request(), CancellationToken::new())).await;
    let calls = contract::assert_well_formed(&c.events);
    assert_eq!(c.stop_reason, StopReason::ToolUse);
    assert_eq!(calls.len(), 1);
    assert!(calls[0].id.starts_with("call_"), "{}", calls[0].id);
    assert_eq!(calls[0].arguments, json!({"path": "x"}));
    assert_eq!(calls[0].invalid, None);
    // No usage chunk: zeros, not an error.
    assert_eq!(c.usage, Usage::default());
}

#[tokio::test]
async fn invalid_remote_calls_are_marked_for_the_model_not_raised() {
    let chunks = vec![
        chunk(
            call_delta(0, Some("c1"), Some("delete_everything"), "{}"),
            None,
        ),
        chunk(
            call_delta(1, Some("c2"), Some("read"), "{\"path\": \"a.rs\""),
            None,
        ),
        chunk(
            call_delta(2, Some("c3"), Some("read"), "{\"path\": 42}"),
            Some("tool_calls"),
        ),
    ];
    let server = FakeServer::start(vec![Reply::sse(chunks)]).await;
    let c = collect(provider(&server).stream(tool_request(), CancellationToken::new())).await;
    let calls = contract::assert_well_formed(&c.events);
    assert_eq!(c.stop_reason, StopReason::ToolUse);
    let kinds: Vec<InvalidToolCallKind> = calls
        .iter()
        .map(|c| c.invalid.as_ref().unwrap().kind)
        .collect();
    assert_eq!(
        kinds,
        [
            InvalidToolCallKind::UnknownTool,
            InvalidToolCallKind::InvalidJson,
            InvalidToolCallKind::SchemaViolation
        ]
    );
    let unknown = calls[0].invalid.as_ref().unwrap().message_for_model();
    assert!(
        unknown.contains("delete_everything") && unknown.contains("read, ls"),
        "{unknown}"
    );
    let bad_json = &calls[1];
    assert_eq!(bad_json.arguments_text(), "{\"path\": \"a.rs\"");
    assert!(bad_json
        .invalid
        .as_ref()
        .unwrap()
        .message
        .contains("not valid JSON"));
    let schema = calls[2].invalid.as_ref().unwrap().message_for_model();
    assert!(
        schema.contains("/path") && schema.contains("42"),
        "{schema}"
    );

    // What the agent does with them: an error tool result each, and the transcript goes back on the wire with
    // the raw arguments the model wrote.
    let mut messages = vec![Message::user("go"), Message::Assistant(c.message.clone())];
    for call in &calls {
        messages.push(Message::tool_result(
            call,
            call.invalid.as_ref().unwrap().message_for_model(),
            true,
        ));
    }
    server.push(Reply::sse(text_reply(&["Sorry."], 10, 2)));
    let next = CompletionRequest {
        messages,
        ..tool_request()
    };
    let c2 = collect(provider(&server).stream(next, CancellationToken::new())).await;
    assert_eq!(c2.error, None);
    let wire = &server.chat_requests()[1].body["messages"];
    assert_eq!(
        wire[1]["tool_calls"][1]["function"]["arguments"],
        "{\"path\": \"a.rs\""
    );
    assert_eq!(wire[1]["content"], Value::Null);
    assert_eq!(wire[2]["role"], "tool");
    assert_eq!(wire[2]["tool_call_id"], "c1");
}

/// A server that stops for the output limit inside a call (vLLM does, without a grammar that closes it): the cut
/// call reaches the agent closed as valid JSON and marked truncated, never as broken arguments; a call complete
/// before the cut stays whole.
#[tokio::test]
async fn a_call_cut_by_the_output_limit_is_closed_and_marked_truncated() {
    let chunks = vec![
        chunk(
            call_delta(0, Some("c1"), Some("ls"), "{\"dir\": \"src\"}"),
            None,
        ),
        chunk(
            call_delta(1, Some("c2"), Some("read"), "{\"path\": \"a."),
            Some("length"),
        ),
    ];
    let server = FakeServer::start(vec![Reply::sse(chunks)]).await;
    let c = collect(provider(&server).stream(tool_request(), CancellationToken::new())).await;
    let calls = contract::assert_well_formed(&c.events);
    assert_eq!(c.stop_reason, StopReason::Length);
    assert_eq!(calls[0].invalid, None);
    let cut = &calls[1];
    assert_eq!(
        cut.invalid.as_ref().unwrap().kind,
        InvalidToolCallKind::Truncated
    );
    let args: Value = serde_json::from_str(&cut.arguments_text()).unwrap();
    assert_eq!(args, json!({"path": "a."}));
}

#[tokio::test]
async fn discover_reads_the_model_list_and_rejects_an_unknown_model() {
    let server = FakeServer::start(vec![]).await;
    let p = provider(&server);
    assert_eq!(p.models()[0].context_window, 0, "unknown until discovered");
    let models = p.discover().await.unwrap();
    assert_eq!(models[0].id, "fake-model");
    assert_eq!(models[0].context_window, 4096);
    assert_eq!(p.models(), models);

    let wrong = RemoteProvider::new(RemoteConfig {
        model: "gpt-9".into(),
        ..config(&server)
    })
    .unwrap();
    let err = wrong.discover().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnknownModel);
    assert!(
        err.to_string().contains("fake-model"),
        "names the served models: {err}"
    );
}

#[tokio::test]
async fn compat_and_request_options_shape_the_body() {
    let server = FakeServer::start(vec![Reply::sse(text_reply(&["{}"], 3, 1))]).await;
    let mut cfg = config(&server);
    cfg.compat.max_tokens_field = MaxTokensField::MaxCompletionTokens;
    let p = RemoteProvider::new(cfg).unwrap();
    let req = CompletionRequest {
        max_tokens: Some(10),
        tool_choice: ToolChoice::Tool {
            name: "read".into(),
        },
        parallel_tool_calls: Some(false),
        response_format: ResponseFormat::JsonSchema {
            name: "out".into(),
            schema: json!({"type": "object"}),
            strict: true,
        },
        ..tool_request()
    };
    collect(p.stream(req, CancellationToken::new())).await;
    let body = &server.chat_requests()[0].body;
    assert_eq!(body["max_completion_tokens"], 10);
    assert!(body.get("max_tokens").is_none());
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "read"}})
    );
    assert_eq!(body["parallel_tool_calls"], false);
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": true}})
    );
}

#[tokio::test]
async fn a_non_streaming_json_answer_is_accepted() {
    let server = FakeServer::start(vec![Reply::Raw {
        status: 200,
        headers: vec![],
        content_type: "application/json".into(),
        body: json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": {
            "role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "read", "arguments": "{\"path\": \"a\"}"}}]}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}})
        .to_string(),
    }])
    .await;
    let c = collect(provider(&server).stream(tool_request(), CancellationToken::new())).await;
    let calls = contract::assert_well_formed(&c.events);
    assert_eq!(
        calls,
        [ToolCall::new("call_1", "read", json!({"path": "a"}))]
    );
    assert_eq!(c.usage.total, 12);
}

#[tokio::test]
async fn count_tokens_prefers_tokenize_then_a_local_tokenizer_then_an_estimate() {
    let server = FakeServer::start(vec![]).await;
    server.set_tokenize_count(Some(123));
    let p = provider(&server);
    let req = tool_request();
    let n = p.count_tokens(&req).await.unwrap();
    assert_eq!((n.tokens, n.exact), (123, true));
    let sent = server
        .requests()
        .into_iter()
        .find(|r| r.path == "/tokenize")
        .unwrap();
    assert_eq!(sent.body["model"], "fake-model");
    assert_eq!(sent.body["add_generation_prompt"], true);
    assert_eq!(
        sent.body["messages"][0]["content"],
        "read a.rs and list src"
    );
    assert_eq!(sent.body["tools"][1]["function"]["name"], "ls");

    // A server without /tokenize: an estimate, and it is not asked again.
    server.set_tokenize_count(None);
    let p = provider(&server);
    let n = p.count_tokens(&req).await.unwrap();
    assert!(!n.exact && n.tokens > 0, "{n:?}");
    p.count_tokens(&req).await.unwrap();
    let asked = server
        .requests()
        .iter()
        .filter(|r| r.path == "/tokenize")
        .count();
    assert_eq!(asked, 2, "one for the first provider, one for the second");

    // With the same model's tokenizer configured: exact, equal to what the local engine counts.
    let cfg = RemoteConfig {
        tokenizer: Some(crate::suite::common::smollm2_path().display().to_string()),
        ..config(&server)
    };
    let p = RemoteProvider::new(cfg).unwrap();
    let n = p.count_tokens(&req).await.unwrap();
    #[cfg(feature = "local")]
    {
        let local = agentd::provider::LocalProvider::new(crate::suite::common::engine().clone());
        assert_eq!(n, local.count_tokens(&req).await.unwrap());
    }
    assert!(n.exact && n.tokens > 0, "{n:?}");
}

/// The shared agent-facing assertions, against the fake server.
#[tokio::test]
async fn keeps_the_provider_contract() {
    let server = FakeServer::start(vec![]).await;
    server.set_tokenize_count(Some(12));
    let p = provider(&server);

    server.push(Reply::sse(text_reply(&["Hello", " there"], 12, 2)));
    contract::assert_text_completion(&p, CompletionRequest::user("hi")).await;

    server.push(Reply::sse(vec![
        chunk(json!({"content": "Let me read it."}), None),
        chunk(
            call_delta(0, Some("call_x"), Some("read"), "{\"path\""),
            None,
        ),
        chunk(
            call_delta(0, None, None, ": \"README.md\"}"),
            Some("tool_calls"),
        ),
        usage_chunk(40, 12, 0),
    ]));
    let req = CompletionRequest {
        tool_choice: ToolChoice::Tool {
            name: "read".into(),
        },
        ..tool_request()
    };
    contract::assert_tool_call_completion(&p, req).await;

    server.push(Reply::Sse {
        events: vec![chunk(json!({"content": "Hel"}), None).to_string()],
        delay: Duration::ZERO,
        hang: true,
    });
    contract::assert_cancel_mid_stream(&p, CompletionRequest::user("hi")).await;
    contract::assert_cancelled_before_start(&p, CompletionRequest::user("hi")).await;
}
