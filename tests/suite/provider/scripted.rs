//! ScriptedProvider: replies streamed in small chunks through the same assembly as the real providers,
//! requests recorded, errors, delays and hangs, and the shared contract.

use std::time::{Duration, Instant};

use agentd::provider::{
    collect, CompletionRequest, ErrorKind, InvalidToolCallKind, Provider, ProviderEvent,
    ScriptedProvider, ScriptedReply, StopReason, ToolCall, ToolChoice, ToolSpec, Usage,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::contract;

fn read_tool() -> ToolSpec {
    crate::suite::common::read_tool()
}

#[tokio::test]
async fn streams_scripted_replies_in_small_chunks_and_records_requests() {
    let p = ScriptedProvider::new([
        ScriptedReply::new()
            .thinking("hmm")
            .text("Reading it.")
            .tool_call_with_id("call_1", "read", r#"{"path": "a.rs"}"#),
        ScriptedReply::text_only("Done."),
    ]);
    let req = CompletionRequest {
        tools: vec![read_tool()],
        ..CompletionRequest::user("read a.rs")
    };
    let c = collect(p.stream(req.clone(), CancellationToken::new())).await;
    let calls = contract::assert_well_formed(&c.events);
    assert_eq!(
        calls,
        [ToolCall::new("call_1", "read", json!({"path": "a.rs"}))]
    );
    assert_eq!(c.stop_reason, StopReason::ToolUse);
    assert_eq!(c.message.text(), "Reading it.");
    let text_deltas: Vec<&str> = c
        .events
        .iter()
        .filter_map(|e| match e {
            ProviderEvent::TextDelta { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text_deltas, ["Read", "ing ", "it."]);
    let expected_input = p.count_tokens(&req).await.unwrap();
    assert!(expected_input.exact);
    assert_eq!(c.usage.input, expected_input.tokens);

    let c2 = collect(p.stream(CompletionRequest::user("next"), CancellationToken::new())).await;
    assert_eq!(c2.message.text(), "Done.");
    assert_eq!(c2.stop_reason, StopReason::Stop);
    assert_eq!(p.requests(), [req, CompletionRequest::user("next")]);
    assert_eq!(p.remaining(), 0);

    // Out of script: an error, not a panic.
    let c3 = collect(p.stream(CompletionRequest::user("more"), CancellationToken::new())).await;
    assert_eq!(c3.error.unwrap().kind, ErrorKind::Internal);
}

#[tokio::test]
async fn scripted_errors_stop_reasons_usage_and_invalid_calls() {
    let p = ScriptedProvider::new([
        ScriptedReply::new()
            .text("partial")
            .fail(ErrorKind::ContextOverflow, "too long"),
        ScriptedReply::new()
            .text("cut")
            .stop_reason(StopReason::Length)
            .usage(Usage::new(10, 5, 2)),
        ScriptedReply::new()
            .tool_call("read", "{\"path\": ")
            .tool_call("nope", "{}"),
    ]);
    let c = collect(p.stream(CompletionRequest::user("a"), CancellationToken::new())).await;
    contract::assert_well_formed(&c.events);
    assert_eq!(c.stop_reason, StopReason::Error);
    assert_eq!(c.message.text(), "partial");
    let err = c.error.unwrap();
    assert_eq!(err.kind, ErrorKind::ContextOverflow);
    assert!(err.message.contains("too long"));

    let c = collect(p.stream(CompletionRequest::user("b"), CancellationToken::new())).await;
    assert_eq!(
        (c.stop_reason, c.usage),
        (StopReason::Length, Usage::new(10, 5, 2))
    );

    let req = CompletionRequest {
        tools: vec![read_tool()],
        ..CompletionRequest::user("c")
    };
    let c = collect(p.stream(req, CancellationToken::new())).await;
    let calls = contract::assert_well_formed(&c.events);
    let kinds: Vec<_> = calls
        .iter()
        .map(|c| c.invalid.as_ref().unwrap().kind)
        .collect();
    assert_eq!(
        kinds,
        [
            InvalidToolCallKind::InvalidJson,
            InvalidToolCallKind::UnknownTool
        ]
    );
}

#[tokio::test]
async fn delays_and_hangs_end_on_cancel() {
    let p = ScriptedProvider::with_options(
        [
            ScriptedReply::new()
                .text("x")
                .delay(Duration::from_millis(200))
                .text("y"),
            ScriptedReply::new().text("a").hang(),
        ],
        1,
        Duration::from_millis(5),
    );
    let started = Instant::now();
    let c = collect(p.stream(CompletionRequest::user("a"), CancellationToken::new())).await;
    assert_eq!(c.message.text(), "xy");
    assert!(started.elapsed() >= Duration::from_millis(200));

    let took = contract::assert_cancel_mid_stream(&p, CompletionRequest::user("b")).await;
    assert!(took < Duration::from_millis(100), "{took:?}");
}

/// The shared agent-facing assertions, against the script.
#[tokio::test]
async fn keeps_the_provider_contract() {
    let p = ScriptedProvider::new([
        ScriptedReply::text_only("Hello there, how can I help?"),
        ScriptedReply::new()
            .text("Let me read it.")
            .tool_call("read", r#"{"path": "README.md"}"#),
        ScriptedReply::new().text("A long answer").hang(),
        ScriptedReply::text_only("never sent"),
    ]);
    contract::assert_text_completion(&p, CompletionRequest::user("hi")).await;
    let req = CompletionRequest {
        tools: vec![read_tool()],
        tool_choice: ToolChoice::Tool {
            name: "read".into(),
        },
        ..CompletionRequest::user("read the readme")
    };
    contract::assert_tool_call_completion(&p, req).await;
    contract::assert_cancel_mid_stream(&p, CompletionRequest::user("talk")).await;
    contract::assert_cancelled_before_start(&p, CompletionRequest::user("x")).await;
}
