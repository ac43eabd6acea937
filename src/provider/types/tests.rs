use super::*;
use serde_json::json;

#[test]
fn messages_serialise_with_snake_case_tags() {
    let call = ToolCall::new("call_1", "read", json!({"path": "a"}));
    let msg = Message::Assistant(AssistantMessage {
        content: vec![
            ContentBlock::Text { text: "hi".into() },
            ContentBlock::ToolCall(call.clone()),
        ],
    });
    assert_eq!(
        serde_json::to_value(&msg).unwrap(),
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "hi"},
            {"type": "tool_call", "id": "call_1", "name": "read", "arguments": {"path": "a"}}
        ]})
    );
    let result = Message::tool_result(&call, "boom", true);
    assert_eq!(
        serde_json::to_value(&result).unwrap(),
        json!({"role": "tool_result", "tool_call_id": "call_1", "tool_name": "read", "content": "boom",
               "is_error": true})
    );
    let back: Message = serde_json::from_value(serde_json::to_value(&msg).unwrap()).unwrap();
    assert_eq!(back, msg);
}

#[test]
fn events_and_choices_are_tagged_by_type() {
    let ev = ProviderEvent::ToolCallDelta {
        index: 0,
        arguments_fragment: "{\"a".into(),
    };
    assert_eq!(
        serde_json::to_value(&ev).unwrap(),
        json!({"type": "tool_call_delta", "index": 0, "arguments_fragment": "{\"a"})
    );
    assert_eq!(
        serde_json::to_value(ToolChoice::Tool { name: "x".into() }).unwrap(),
        json!({"type": "tool", "name": "x"})
    );
    assert_eq!(
        serde_json::to_value(StopReason::ToolUse).unwrap(),
        json!("tool_use")
    );
    let req: CompletionRequest =
        serde_json::from_value(json!({"messages": [{"role": "user", "content": "hi"}]})).unwrap();
    assert_eq!(req, CompletionRequest::user("hi"));
}

#[test]
fn invalid_call_keeps_the_raw_arguments_for_the_wire() {
    let call = ToolCall {
        invalid: Some(InvalidToolCall {
            kind: InvalidToolCallKind::InvalidJson,
            message: "not JSON".into(),
            raw_arguments: Some("{oops".into()),
        }),
        ..ToolCall::new("c", "read", serde_json::Value::Null)
    };
    assert_eq!(call.arguments_text(), "{oops");
    assert_eq!(
        ToolCall::new("c", "read", json!({"a": 1})).arguments_text(),
        "{\"a\":1}"
    );
}
