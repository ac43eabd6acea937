//! LocalProvider with the real default model (SmolLM2-135M): exact usage, streamed constrained tool calls,
//! tool results rendered back, cancellation within a token, bad requests, and the shared contract.

use std::time::Duration;

use agentd::provider::{
    collect, CompletionRequest, ContentBlock, LocalProvider, Message, Provider, ProviderEvent,
    ResponseFormat, Sampling, StopReason, ToolChoice,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::contract::{self, story, tools};
use crate::suite::common;

fn provider() -> LocalProvider {
    LocalProvider::new(common::engine().clone())
}

#[tokio::test]
async fn usage_is_exact() {
    let p = provider();
    let req = story(12);
    let prompt = p.prompt_tokens(&req).unwrap();
    let count = p.count_tokens(&req).await.unwrap();
    assert!(count.exact);
    assert_eq!(count.tokens, prompt.len() as u64);
    // The prompt is the chat template's rendering, tokenized.
    let rendered = common::engine()
        .template()
        .render(
            &[
                json!({"role": "system", "content": "You are a helpful assistant."}),
                json!({"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}),
            ],
            None,
            true,
            None,
        )
        .unwrap();
    assert_eq!(
        prompt,
        common::engine()
            .tokenizer()
            .encode(&rendered, true)
            .unwrap()
    );

    let c = contract::assert_text_completion(&p, req.clone()).await;
    assert_eq!(c.stop_reason, StopReason::Length);
    assert_eq!(c.usage.input, prompt.len() as u64);
    assert_eq!(c.usage.output, 12);
    assert_eq!(c.usage.total, c.usage.input + 12);

    // Next turn of the same conversation, with a cache key: the prefix is reused, the counts stay exact.
    let key = format!("usage-{}", uuid::Uuid::new_v4());
    let first = collect(p.stream(
        CompletionRequest {
            cache_key: Some(key.clone()),
            ..req.clone()
        },
        CancellationToken::new(),
    ))
    .await;
    let mut next = req.clone();
    next.messages
        .push(Message::Assistant(first.message.clone()));
    next.messages.push(Message::user("Shorter, please."));
    next.cache_key = Some(key);
    let expected = p.count_tokens(&next).await.unwrap().tokens;
    let second = collect(p.stream(next, CancellationToken::new())).await;
    assert_eq!(second.error, None);
    assert_eq!(second.usage.input, expected);
    assert!(
        second.usage.cached_input > prompt.len() as u64 / 2,
        "{:?}",
        second.usage
    );
}

#[tokio::test]
async fn a_forced_tool_call_streams_its_arguments_as_they_are_generated() {
    let p = provider();
    let req = CompletionRequest {
        tools: tools(),
        tool_choice: ToolChoice::Tool {
            name: "read".into(),
        },
        sampling: Sampling::greedy(),
        max_tokens: Some(96),
        ..CompletionRequest::user("Show me the file src/main.rs")
    };
    let count = p.count_tokens(&req).await.unwrap();
    let c = contract::assert_tool_call_completion(&p, req).await;
    assert_eq!(
        c.usage.input, count.tokens,
        "tools in the prompt are counted too"
    );
    let calls = c.message.tool_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "read");
    // Streamed: several fragments, all before the call's end event.
    let positions: Vec<usize> = c
        .events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, ProviderEvent::ToolCallDelta { .. }))
        .map(|(i, _)| i)
        .collect();
    let end = c
        .events
        .iter()
        .position(|e| matches!(e, ProviderEvent::ToolCallEnd { .. }))
        .unwrap();
    assert!(positions.len() >= 2, "{:?}", c.events);
    eprintln!(
        "local: forced call {} streamed in {} argument fragments, usage {:?}",
        calls[0].arguments,
        positions.len(),
        c.usage
    );
    assert!(positions.iter().all(|&i| i < end));

    // `required` over two tools: a valid call to one of them.
    let req = CompletionRequest {
        tools: tools(),
        tool_choice: ToolChoice::Required,
        parallel_tool_calls: Some(false),
        sampling: Sampling::greedy(),
        max_tokens: Some(96),
        ..CompletionRequest::user("List the directory src")
    };
    let c = contract::assert_tool_call_completion(&p, req).await;
    assert_eq!(c.message.tool_calls().len(), 1);

    // The result goes back: assistant call + tool result render and the model answers in text.
    let call = c.message.tool_calls()[0].clone();
    let follow = CompletionRequest {
        messages: vec![
            Message::user("List the directory src"),
            Message::Assistant(c.message.clone()),
            Message::tool_result(&call, "main.rs\nlib.rs", false),
        ],
        tools: tools(),
        tool_choice: ToolChoice::None,
        sampling: Sampling::greedy(),
        max_tokens: Some(16),
        ..CompletionRequest::default()
    };
    let c = contract::assert_text_completion(&p, follow).await;
    assert!(c.message.tool_calls().is_empty());
}

#[tokio::test]
async fn response_format_json_is_enforced() {
    let p = provider();
    let req = CompletionRequest {
        response_format: ResponseFormat::JsonSchema {
            name: "answer".into(),
            schema: json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                           "required": ["city"], "additionalProperties": false}),
            strict: true,
        },
        sampling: Sampling::greedy(),
        max_tokens: Some(48),
        ..CompletionRequest::user("What is the capital of France? Answer in JSON.")
    };
    let c = collect(p.stream(req, CancellationToken::new())).await;
    contract::assert_well_formed(&c.events);
    assert_eq!(c.stop_reason, StopReason::Stop, "{:?}", c.events.last());
    let v: serde_json::Value = serde_json::from_str(&c.message.text()).unwrap();
    assert!(v["city"].is_string(), "{v}");
}

#[tokio::test]
async fn cancellation_stops_within_a_token() {
    let took = contract::assert_cancel_mid_stream(&provider(), story(400)).await;
    eprintln!(
        "local: cancel → aborted in {:.1} ms",
        took.as_secs_f64() * 1000.0
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    contract::assert_cancelled_before_start(&provider(), story(8)).await;
}

#[tokio::test]
async fn bad_requests_are_errors_not_panics() {
    let p = provider();
    let cases = contract::bad_requests("context window");
    for (req, kind, needle) in cases {
        let c = collect(p.stream(req, CancellationToken::new())).await;
        contract::assert_well_formed(&c.events);
        let err = c.error.expect("an error");
        assert_eq!(err.kind, kind, "{}", err.message);
        assert!(err.message.contains(&needle), "{needle}: {}", err.message);
    }
    // The model answers to its own id (and, when loaded by name, its manifest aliases).
    let id = p.models()[0].id.clone();
    let c = collect(p.stream(
        CompletionRequest {
            model: id,
            ..story(2)
        },
        CancellationToken::new(),
    ))
    .await;
    assert_eq!(c.error, None);
    assert!(matches!(
        c.message.content.first(),
        Some(ContentBlock::Text { .. })
    ));
}

/// The shared agent-facing assertions, against the real model.
#[tokio::test]
async fn keeps_the_provider_contract() {
    let p = provider();
    let info = common::engine().info();
    assert_eq!(p.models()[0].id, info.name);
    assert_eq!(p.models()[0].context_window, 8192);
    contract::assert_text_completion(&p, story(8)).await;
    let req = CompletionRequest {
        tools: tools(),
        tool_choice: ToolChoice::Tool {
            name: "read".into(),
        },
        sampling: Sampling::greedy(),
        max_tokens: Some(96),
        ..CompletionRequest::user("Read the README.md file")
    };
    contract::assert_tool_call_completion(&p, req).await;
    contract::assert_cancel_mid_stream(&p, story(400)).await;
}

#[tokio::test]
async fn a_queued_request_aborts_without_waiting_for_the_engine() {
    let p = provider();
    // A occupies the engine; B waits behind it and is cancelled there.
    let a_cancel = CancellationToken::new();
    let mut a = p.stream(story(300), a_cancel.clone());
    use futures::StreamExt;
    while let Some(ev) = a.next().await {
        if matches!(ev, ProviderEvent::TextDelta { .. }) {
            break;
        }
    }
    let b_cancel = CancellationToken::new();
    // Long enough that B cannot finish within the 50 ms before its cancel, even batched beside A with A's
    // prompt cached.
    let b = p.stream(story(64), b_cancel.clone());
    let b_task = tokio::spawn(collect(b));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cancelled = std::time::Instant::now();
    b_cancel.cancel();
    let c = b_task.await.unwrap();
    let took = cancelled.elapsed();
    assert_eq!(c.stop_reason, StopReason::Aborted, "{:?}", c.events);
    assert!(took < Duration::from_secs(1), "{took:?}");
    a_cancel.cancel();
    let rest = collect(a).await;
    assert_eq!(rest.stop_reason, StopReason::Aborted);
}

#[tokio::test]
async fn dropping_the_stream_stops_generation() {
    use futures::StreamExt;
    let p = provider();
    let mut s = p.stream(story(400), CancellationToken::new());
    // Time 20 tokens to know this machine's decode speed.
    let mut deltas = 0;
    let mut started = None;
    while let Some(ev) = s.next().await {
        if matches!(ev, ProviderEvent::TextDelta { .. }) {
            deltas += 1;
            if deltas == 1 {
                started = Some(std::time::Instant::now());
            }
            if deltas == 21 {
                break;
            }
        }
    }
    let per_token = started.unwrap().elapsed() / 20;
    eprintln!(
        "local: {:.1} ms per streamed token",
        per_token.as_secs_f64() * 1000.0
    );
    drop(s);
    // Had the 400-token generation gone on, this request would wait for its ~380 remaining tokens.
    let waited = std::time::Instant::now();
    let c = collect(p.stream(story(2), CancellationToken::new())).await;
    assert_eq!(c.error, None);
    let remaining = per_token * 380;
    assert!(
        waited.elapsed() < remaining / 2,
        "{:?} vs {remaining:?}",
        waited.elapsed()
    );
}

/// The prefix cache never crosses `cache_scope`s: the same long prompt from another scope (by content, or under
/// the same `cache_key`) computes everything again, while its own scope gets a hit. Raw completions too.
#[tokio::test]
async fn prefix_cache_reuse_stays_within_a_scope() {
    use agentd::provider::{RawCompletionRequest, RawPrompt};
    let p = provider();
    let tenant = |name: &str| Some(format!("{name}-{}", uuid::Uuid::new_v4()));
    let (a, b) = (tenant("a"), tenant("b"));
    let long = format!(
        "Case {}: {}",
        uuid::Uuid::new_v4(),
        "Summarise the following notes about the build in one line. ".repeat(20)
    );
    let ask = |scope: &Option<String>, key: Option<&str>| CompletionRequest {
        sampling: Sampling::greedy(),
        max_tokens: Some(1),
        cache_scope: scope.clone(),
        cache_key: key.map(String::from),
        ..CompletionRequest::user(long.clone())
    };
    let cached = |req: CompletionRequest| {
        let p = p.clone();
        async move {
            let c = collect(p.stream(req, CancellationToken::new())).await;
            assert_eq!(c.error, None);
            assert!(c.usage.input > 200, "{:?}", c.usage);
            c.usage.cached_input
        }
    };
    // By content.
    assert_eq!(cached(ask(&a, None)).await, 0);
    assert_eq!(
        cached(ask(&b, None)).await,
        0,
        "scope b reused scope a's prefix"
    );
    // The unscoped scope holds other tests' chats: at most the template's head (SmolLM2's default system
    // prompt) may match, never this prompt's own text.
    let mine = p.prompt_tokens(&ask(&None, None)).unwrap();
    let other = p.prompt_tokens(&CompletionRequest::user("x")).unwrap();
    let head = mine.iter().zip(&other).take_while(|(x, y)| x == y).count() as u64;
    let unscoped = cached(ask(&None, None)).await;
    assert!(
        unscoped <= head,
        "the unscoped request reused a scoped prefix ({unscoped} > {head})"
    );
    assert!(
        cached(ask(&a, None)).await > 200,
        "scope a missed its own prefix"
    );
    // By key: the same key in another scope names another sequence (fresh scopes, so content cannot match).
    let (c, d) = (tenant("c"), tenant("d"));
    let key = format!("shared-key-{}", uuid::Uuid::new_v4());
    assert_eq!(cached(ask(&c, Some(&key))).await, 0);
    assert_eq!(
        cached(ask(&d, Some(&key))).await,
        0,
        "scope d reused scope c's keyed sequence"
    );
    assert!(
        cached(ask(&c, Some(&key))).await > 200,
        "scope c missed its keyed sequence"
    );

    // Raw completions carry the scope too.
    let raw = |scope: &Option<String>| RawCompletionRequest {
        model: String::new(),
        prompt: RawPrompt::Text(format!("Raw {long}")),
        sampling: Sampling::greedy(),
        max_tokens: Some(1),
        stop: Vec::new(),
        ignore_eos: false,
        logprobs: None,
        cache_scope: scope.clone(),
        keep_alive: None,
        response_format: Default::default(),
        infill: None,
    };
    let raw_cached = |req: RawCompletionRequest| {
        let p = p.clone();
        async move {
            let c = collect(p.stream_raw(req, CancellationToken::new())).await;
            assert_eq!(c.error, None);
            c.usage.cached_input
        }
    };
    assert_eq!(raw_cached(raw(&a)).await, 0);
    assert_eq!(
        raw_cached(raw(&b)).await,
        0,
        "raw: scope b reused scope a's prefix"
    );
    assert!(
        raw_cached(raw(&a)).await > 200,
        "raw: scope a missed its own prefix"
    );
}

#[tokio::test]
async fn an_assistant_prefill_is_continued_after_the_generation_prompt() {
    let p = provider();
    let plain = CompletionRequest {
        sampling: Sampling::greedy(),
        max_tokens: Some(6),
        ..CompletionRequest::user("Count from 1 to 10, separated by commas.")
    };
    let prefill = "1, 2, 3, 4,";
    let mut req = plain.clone();
    req.continue_final_message = true;
    req.messages
        .push(Message::Assistant(agentd::provider::AssistantMessage {
            content: vec![ContentBlock::Text {
                text: prefill.into(),
            }],
        }));
    assert_eq!(req.prefill(), Some(prefill));
    // The prompt is the plain request's (generation prompt included), then the prefill's own tokens as text.
    let mut expected = p.prompt_tokens(&plain).unwrap();
    expected.extend(common::engine().tokenizer().encode(prefill, false).unwrap());
    assert_eq!(p.prompt_tokens(&req).unwrap(), expected);
    let c = collect(p.stream(req, CancellationToken::new())).await;
    contract::assert_well_formed(&c.events);
    assert_eq!(c.usage.input, expected.len() as u64);
    // Only the continuation comes back, and it goes on counting.
    let text = c.message.text();
    assert!(!text.contains("1, 2"), "{text:?}");
    assert!(text.trim_start().starts_with('5'), "{text:?}");
}
