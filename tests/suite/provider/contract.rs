//! The agent-facing contract every provider keeps, as assertions over `&dyn Provider`: the event order, deltas
//! that add up to the final message, tool calls that are announced, streamed and closed, consistent usage, and
//! cancellation that ends the stream as `aborted`. Each provider's tests call these with its own requests.

use std::time::{Duration, Instant};

use agentd::provider::{
    collect, Completion, CompletionRequest, ErrorKind, ErrorReason, Provider, ProviderEvent,
    Sampling, StopReason, ToolCall, ToolChoice,
};
use agentd::schema::ToolSpec;
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Checks the shape of a whole event sequence and returns the tool calls its `tool_call_end` events carried.
pub fn assert_well_formed(events: &[ProviderEvent]) -> Vec<ToolCall> {
    assert!(
        matches!(events.first(), Some(ProviderEvent::Start { .. })),
        "first event must be start: {events:?}"
    );
    let terminal: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.is_terminal())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        terminal,
        [events.len() - 1],
        "exactly one terminal event, last: {events:?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, ProviderEvent::Start { .. }))
            .count(),
        1
    );

    let mut text = String::new();
    let mut thinking = String::new();
    // Per call: (id, name, arguments so far, ended call).
    let mut calls: Vec<(String, String, String, Option<ToolCall>)> = Vec::new();
    for ev in events {
        match ev {
            ProviderEvent::TextDelta { delta } => {
                assert!(!delta.is_empty(), "empty text delta");
                text.push_str(delta);
            }
            ProviderEvent::ThinkingDelta { delta } => thinking.push_str(delta),
            ProviderEvent::ToolCallStart { index, id, name } => {
                assert_eq!(*index, calls.len(), "calls are numbered in order");
                assert!(!id.is_empty());
                calls.push((id.clone(), name.clone(), String::new(), None));
            }
            ProviderEvent::ToolCallDelta {
                index,
                arguments_fragment,
            } => {
                assert!(!arguments_fragment.is_empty(), "empty argument fragment");
                let call = &mut calls[*index];
                assert!(call.3.is_none(), "fragment after tool_call_end");
                call.2.push_str(arguments_fragment);
            }
            ProviderEvent::ToolCallEnd { index, call } => {
                let c = &mut calls[*index];
                assert!(c.3.is_none(), "tool_call_end twice");
                assert_eq!((&call.id, &call.name), (&c.0, &c.1));
                if call.invalid.is_none() {
                    let streamed: serde_json::Value = if c.2.trim().is_empty() {
                        serde_json::json!({})
                    } else {
                        serde_json::from_str(&c.2).expect("fragments of a valid call are its JSON")
                    };
                    assert_eq!(
                        streamed, call.arguments,
                        "fragments add up to the arguments"
                    );
                }
                c.3 = Some(call.clone());
            }
            _ => {}
        }
    }
    let ended: Vec<ToolCall> = calls
        .iter()
        .map(|c| c.3.clone().expect("every started call ends"))
        .collect();
    match events.last() {
        Some(ProviderEvent::Done {
            stop_reason,
            usage,
            message,
        }) => {
            assert_eq!(
                message.text(),
                text,
                "text deltas add up to the message text"
            );
            assert_eq!(message.thinking(), thinking);
            let in_message: Vec<ToolCall> = message.tool_calls().into_iter().cloned().collect();
            assert_eq!(
                in_message, ended,
                "the message holds the ended calls, in order"
            );
            assert_eq!(usage.total, usage.input + usage.output);
            assert!(usage.cached_input <= usage.input);
            match stop_reason {
                StopReason::ToolUse => assert!(!ended.is_empty(), "tool_use without calls"),
                StopReason::Stop => assert!(ended.is_empty(), "calls but stop_reason stop"),
                StopReason::Length => {}
                other => panic!("done with stop_reason {other:?}"),
            }
        }
        Some(ProviderEvent::Error { partial, .. }) => {
            assert_eq!(
                partial.text(),
                text,
                "text deltas add up to the partial message"
            );
        }
        _ => unreachable!(),
    }
    ended
}

/// A text completion: well formed, ends normally with text, usage consistent with `count_tokens`.
pub async fn assert_text_completion(p: &dyn Provider, req: CompletionRequest) -> Completion {
    let count = p.count_tokens(&req).await.expect("count_tokens");
    let c = collect(p.stream(req, CancellationToken::new())).await;
    assert_eq!(c.error, None, "{:?}", c.events.last());
    assert_well_formed(&c.events);
    assert!(matches!(
        c.stop_reason,
        StopReason::Stop | StopReason::Length
    ));
    assert!(!c.message.text().is_empty());
    assert!(c.message.tool_calls().is_empty());
    assert!(c.usage.input > 0 && c.usage.output > 0, "{:?}", c.usage);
    if count.exact {
        assert_eq!(
            count.tokens, c.usage.input,
            "an exact count is the input usage"
        );
    }
    assert!(!p.models().is_empty());
    c
}

/// A completion expected to call tools: every call streamed, valid, one of the offered tools.
pub async fn assert_tool_call_completion(p: &dyn Provider, req: CompletionRequest) -> Completion {
    let tools = req.tools.clone();
    let c = collect(p.stream(req, CancellationToken::new())).await;
    assert_eq!(c.error, None, "{:?}", c.events.last());
    let calls = assert_well_formed(&c.events);
    assert_eq!(c.stop_reason, StopReason::ToolUse);
    assert!(!calls.is_empty());
    for call in &calls {
        assert_eq!(call.invalid, None, "{call:?}");
        let spec = tools
            .iter()
            .find(|t| t.name == call.name)
            .expect("an offered tool");
        spec.validate_arguments(&call.arguments)
            .expect("arguments match the schema");
        assert!(call.id.starts_with("call_") || !call.id.is_empty());
    }
    let fragments = c
        .events
        .iter()
        .filter(|e| matches!(e, ProviderEvent::ToolCallDelta { .. }))
        .count();
    assert!(fragments >= 1, "arguments are streamed");
    c
}

/// Cancels after the first delta: the stream ends soon with `error { reason: aborted }`. Returns the time from
/// the cancel to the terminal event.
pub async fn assert_cancel_mid_stream(p: &dyn Provider, req: CompletionRequest) -> Duration {
    let cancel = CancellationToken::new();
    let mut stream = p.stream(req, cancel.clone());
    let mut events = Vec::new();
    let mut cancelled_at = None;
    let deadline = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = stream.next().await {
            let delta = matches!(
                ev,
                ProviderEvent::TextDelta { .. }
                    | ProviderEvent::ThinkingDelta { .. }
                    | ProviderEvent::ToolCallDelta { .. }
            );
            events.push(ev);
            if delta && cancelled_at.is_none() {
                cancel.cancel();
                cancelled_at = Some(Instant::now());
            }
        }
    })
    .await;
    assert!(
        deadline.is_ok(),
        "the stream did not end after the cancel: {events:?}"
    );
    let took = cancelled_at.expect("a delta arrived").elapsed();
    assert_well_formed(&events);
    match events.last() {
        Some(ProviderEvent::Error { reason, .. }) => assert_eq!(*reason, ErrorReason::Aborted),
        other => panic!("expected an aborted error, got {other:?}"),
    }
    took
}

/// A stream dropped early must not hang or panic, and the provider keeps working afterwards.
pub async fn assert_cancelled_before_start(p: &dyn Provider, req: CompletionRequest) {
    let cancel = CancellationToken::new();
    cancel.cancel();
    let c = collect(p.stream(req, cancel)).await;
    assert_well_formed(&c.events);
    assert_eq!(c.stop_reason, StopReason::Aborted, "{:?}", c.events);
}

/// Two small tools and a long-story request, shared by the local and through-the-server suites.
pub fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "read",
            "Read a file from the workspace",
            json!({"type": "object", "properties": {"path": {"type": "string", "maxLength": 40}},
                   "required": ["path"], "additionalProperties": false}),
        )
        .unwrap(),
        ToolSpec::new(
            "ls",
            "List a directory",
            json!({"type": "object", "properties": {"dir": {"type": "string", "maxLength": 40}},
                   "required": ["dir"], "additionalProperties": false}),
        )
        .unwrap(),
    ]
}

pub fn story(max_tokens: u32) -> CompletionRequest {
    CompletionRequest {
        system: Some("You are a helpful assistant.".into()),
        sampling: Sampling::greedy(),
        max_tokens: Some(max_tokens),
        ..CompletionRequest::user("Write a long story about a dragon who learns to bake bread.")
    }
}

/// Requests every provider must answer with an error of the given kind whose message contains the needle:
/// an unknown model, a `tool_choice` naming no offered tool, an out-of-range `top_p`, a prompt over the window.
pub fn bad_requests(overflow_needle: &str) -> Vec<(CompletionRequest, ErrorKind, String)> {
    vec![
        (
            CompletionRequest {
                model: "gpt-4o".into(),
                ..story(4)
            },
            ErrorKind::UnknownModel,
            "gpt-4o".to_string(),
        ),
        (
            CompletionRequest {
                tools: tools(),
                tool_choice: ToolChoice::Tool { name: "rm".into() },
                ..story(4)
            },
            ErrorKind::InvalidRequest,
            "rm".to_string(),
        ),
        (
            CompletionRequest {
                sampling: Sampling {
                    top_p: Some(3.0),
                    ..Sampling::default()
                },
                ..story(4)
            },
            ErrorKind::InvalidRequest,
            "top_p".to_string(),
        ),
        (
            CompletionRequest::user("dragon ".repeat(9_000)),
            ErrorKind::ContextOverflow,
            overflow_needle.to_string(),
        ),
    ]
}
