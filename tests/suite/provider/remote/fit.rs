//! RemoteProvider fits `max_tokens` to the remote model as the local engine does: vLLM refuses a prompt plus
//! `max_tokens` over `max_model_len`, and clients send caps far above what is left (Claude Code: 32,000).

use super::*;

/// The `max_tokens` of each chat request the server received (`None` where the body had none).
fn sent_max_tokens(server: &FakeServer) -> Vec<Option<u64>> {
    server
        .chat_requests()
        .iter()
        .map(|r| r.body.get("max_tokens").and_then(Value::as_u64))
        .collect()
}

fn asking(max_tokens: Option<u32>) -> CompletionRequest {
    CompletionRequest {
        max_tokens,
        ..tool_request()
    }
}

#[tokio::test]
async fn max_tokens_is_cut_to_what_the_window_leaves() {
    let server = FakeServer::start(vec![Reply::sse(text_reply(&["ok"], 5, 1)); 4]).await;
    // A 32k window; the server's /tokenize counts the prompt as 30,000 tokens.
    server.set_tokenize_count(Some(30_000));
    let cfg = RemoteConfig {
        context_window: Some(32_768),
        ..config(&server)
    };
    let p = RemoteProvider::new(cfg).unwrap();
    for asked in [Some(32_000), Some(2_768), Some(100), None] {
        let c = collect(p.stream(asking(asked), CancellationToken::new())).await;
        assert_eq!(c.error, None, "{asked:?}");
    }
    assert_eq!(
        sent_max_tokens(&server),
        [Some(2_768), Some(2_768), Some(100), None],
        "32,000 cut to 32,768 - 30,000; what fits and no cap at all pass unchanged"
    );
    // Only the request that might not fit was counted: the others' prompt bytes plus their cap stay inside
    // the window.
    let counted = server
        .requests()
        .iter()
        .filter(|r| r.path == "/tokenize")
        .count();
    assert_eq!(counted, 1);
}

#[tokio::test]
async fn the_output_limit_caps_and_a_full_window_is_left_to_the_server() {
    let server = FakeServer::start(vec![
        Reply::sse(text_reply(&["ok"], 5, 1)),
        Reply::error(400, "This model's maximum context length is 4096 tokens."),
    ])
    .await;
    let cfg = RemoteConfig {
        max_output_tokens: Some(512),
        ..config(&server)
    };
    let p = RemoteProvider::new(cfg).unwrap();
    p.discover().await.unwrap();
    server.set_tokenize_count(Some(10));
    let c = collect(p.stream(asking(Some(32_000)), CancellationToken::new())).await;
    assert_eq!(c.error, None);
    // A prompt that already fills the window: sent as asked, and the server's own error comes back.
    server.set_tokenize_count(Some(5000));
    let c = collect(p.stream(asking(Some(2_000)), CancellationToken::new())).await;
    let (_, kind, message) = error_of(&c.events);
    assert_eq!(kind, ErrorKind::ContextOverflow, "{message}");
    assert!(message.contains("maximum context length"), "{message}");
    assert_eq!(sent_max_tokens(&server), [Some(512), Some(512)]);
}
