//! The vLLM path end to end: our own RemoteProvider pointed at `agentd serve` (on the real model) runs the
//! provider suite — the shared contract, exact usage through `/tokenize`, streamed constrained tool calls and a
//! tool-result round trip, JSON output, cancellation, and bad requests classified as on vLLM.

use std::time::Duration;

use agentd::provider::{
    collect, CompletionRequest, ErrorKind, Message, Provider, ProviderEvent, RemoteConfig,
    RemoteProvider, ResponseFormat, Sampling, StopReason, ToolChoice,
};
use agentd::server::ServerOptions;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::TestServer;

use crate::suite::provider::contract::{self, story, tools};

/// The shared test engine's model id (the GGUF file stem: it is loaded by path).
fn model() -> String {
    crate::suite::common::engine().info().name.clone()
}

pub(super) async fn provider(server: &TestServer) -> RemoteProvider {
    let p = RemoteProvider::new(RemoteConfig {
        api_key: Some("sk-remote".into()),
        ..RemoteConfig::new(format!("{}/v1", server.root), model())
    })
    .unwrap();
    let models = p.discover().await.unwrap();
    assert_eq!(
        models[0].context_window, 8192,
        "max_model_len from /v1/models"
    );
    p
}

async fn server() -> TestServer {
    TestServer::local(ServerOptions {
        api_key: Some("sk-remote".into()),
        ..ServerOptions::default()
    })
    .await
}

#[tokio::test]
async fn the_provider_contract_holds_through_the_server() {
    let server = server().await;
    let p = provider(&server).await;
    // Exact: /tokenize counts what the chat route is given.
    let count = p.count_tokens(&story(8)).await.unwrap();
    assert!(count.exact);
    let c = contract::assert_text_completion(&p, story(8)).await;
    assert_eq!(c.usage.output, 8);
    assert_eq!(c.usage.input, count.tokens);
    assert_eq!(c.stop_reason, StopReason::Length);

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
    let fragments = c
        .events
        .iter()
        .filter(|e| matches!(e, ProviderEvent::ToolCallDelta { .. }))
        .count();
    assert!(
        fragments >= 2,
        "arguments stream in fragments: {:?}",
        c.events
    );

    // `required`, one call, then the result goes back and the model answers in text.
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
    let call = c.message.tool_calls()[0].clone();
    let follow = CompletionRequest {
        messages: vec![
            Message::user("List the directory src"),
            Message::Assistant(c.message.clone()),
            Message::tool_result(&call, "main.rs\nlib.rs", false),
        ],
        // No tools offered: the answer is text. (With `tool_choice: none` the local engine hides the tools from
        // the prompt, but RemoteProvider's `/tokenize` count does not send `tool_choice`, so it would count them.)
        tools: Vec::new(),
        sampling: Sampling::greedy(),
        max_tokens: Some(16),
        ..CompletionRequest::default()
    };
    let c = contract::assert_text_completion(&p, follow).await;
    assert!(c.message.tool_calls().is_empty());
}

#[tokio::test]
async fn json_cancellation_and_errors_through_the_server() {
    let server = server().await;
    let p = provider(&server).await;
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
    assert!(v["city"].is_string());

    // Cancelling the client's stream closes the connection; the server cancels the generation.
    let took = contract::assert_cancel_mid_stream(&p, story(400)).await;
    assert!(took < Duration::from_secs(5), "{took:?}");
    contract::assert_cancelled_before_start(&p, story(8)).await;
    let mut waited = 0;
    while server.state.admission.running() > 0 {
        assert!(waited < 250, "the server still runs the cancelled request");
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += 1;
    }

    let cases = contract::bad_requests("8192");
    for (req, kind, needle) in cases {
        let c = collect(p.stream(req, CancellationToken::new())).await;
        let err = c.error.expect("an error");
        assert_eq!(err.kind, kind, "{}", err.message);
        assert!(err.message.contains(&needle), "{needle}: {}", err.message);
    }
    // A wrong key is an auth error.
    let bad = RemoteProvider::new(RemoteConfig {
        api_key: Some("nope".into()),
        ..RemoteConfig::new(format!("{}/v1", server.root), model())
    })
    .unwrap();
    let c = collect(bad.stream(story(2), CancellationToken::new())).await;
    assert_eq!(c.error.unwrap().kind, ErrorKind::Auth);
}

/// A server fronting another one (its provider is the remote one): `/tokenize`, `/detokenize`,
/// `/v1/completions` and chat `logprobs` go through the provider to the back server's own routes, and answer
/// what the back server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_a_remote_provider_tokenizes_completes_and_reports_logprobs() {
    use super::post;
    let back = TestServer::local(ServerOptions::default()).await;
    let front = super::TestServer::with_provider(
        std::sync::Arc::new(provider(&back).await),
        ServerOptions::default(),
    )
    .await;
    let body = json!({"prompt": "Hello there", "return_token_strs": true});
    let (s1, direct) = post(&back.url("/tokenize"), &body).await;
    let (s2, fronted) = post(&front.url("/tokenize"), &body).await;
    assert_eq!((s1, s2), (200, 200), "{fronted}");
    assert_eq!(direct["tokens"], fronted["tokens"]);
    assert_eq!(fronted["max_model_len"], 8192);
    assert_eq!(direct["token_strs"], fronted["token_strs"]);
    let (s, text) = post(
        &front.url("/detokenize"),
        &json!({"tokens": direct["tokens"]}),
    )
    .await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(text["prompt"], "Hello there");

    let completion = json!({"prompt": "The capital of France is", "max_tokens": 5, "temperature": 0,
                             "logprobs": 2});
    let (s1, direct) = post(&back.url("/v1/completions"), &completion).await;
    let (s2, fronted) = post(&front.url("/v1/completions"), &completion).await;
    assert_eq!((s1, s2), (200, 200), "{fronted}");
    assert_eq!(direct["choices"][0]["text"], fronted["choices"][0]["text"]);
    assert_eq!(fronted["usage"]["completion_tokens"], 5);
    let lp = &fronted["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 5, "{lp}");
    assert_eq!(lp["top_logprobs"][0].as_object().unwrap().len(), 2, "{lp}");

    let chat = json!({"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4,
                      "temperature": 0, "logprobs": true, "top_logprobs": 3});
    let (s, r) = post(&front.url("/v1/chat/completions"), &chat).await;
    assert_eq!(s, 200, "{r}");
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 4, "{r}");
    assert_eq!(content[0]["top_logprobs"].as_array().unwrap().len(), 3);
}
