//! OpenAI's `logit_bias` over HTTP on the real model: -100 on the greedy choice gives the runner-up that
//! `logprobs` reported, +100 forces a token, on `/v1/completions` and chat alike and through a server fronting
//! another (the remote provider forwards it); bad keys, values and token ids are 400s naming `logit_bias`.

use serde_json::{json, Value};

use super::{post, TestServer};
use agentd::server::ServerOptions;

const PROMPT: &str = "The capital of France is";

/// The token id of `text` when it is one token.
async fn single_token(server: &TestServer, text: &str) -> u64 {
    let (status, r) = post(
        &server.url("/tokenize"),
        &json!({"prompt": text, "add_special_tokens": false}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let tokens = r["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 1, "{text:?} is not one token: {r}");
    tokens[0].as_u64().unwrap()
}

/// One greedy token of `/v1/completions` with `bias`, and the two best alternatives `logprobs` reported.
async fn first_token(server: &TestServer, bias: Value) -> (String, Vec<(String, f64)>) {
    let body = json!({"prompt": PROMPT, "max_tokens": 1, "temperature": 0, "logprobs": 2,
                      "logit_bias": bias});
    let (status, r) = post(&server.url("/v1/completions"), &body).await;
    assert_eq!(status, 200, "{r}");
    let choice = &r["choices"][0];
    let mut top: Vec<(String, f64)> = choice["logprobs"]["top_logprobs"][0]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
        .collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    (choice["text"].as_str().unwrap().to_string(), top)
}

/// Banning the greedy token yields the runner-up; forcing another token yields it.
async fn check_bias_moves_the_choice(server: &TestServer, tokens_from: &TestServer) {
    let (plain, top) = first_token(server, json!({})).await;
    assert_eq!(top[0].0, plain, "{top:?}");
    let runner_up = top[1].0.clone();
    let id = single_token(tokens_from, &plain).await;
    let (banned, _) = first_token(server, json!({id.to_string(): -100})).await;
    assert_eq!(banned, runner_up, "banning {plain:?} (token {id})");
    // A bias that does not overturn the margin changes nothing.
    let (small, _) = first_token(server, json!({id.to_string(): -0.001})).await;
    assert_eq!(small, plain);
    let forced = single_token(tokens_from, " banana").await;
    let (text, _) = first_token(server, json!({forced.to_string(): 100})).await;
    assert_eq!(text, " banana");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logit_bias_bans_and_forces_tokens_on_completions_and_chat() {
    let server = TestServer::local(ServerOptions::default()).await;
    check_bias_moves_the_choice(&server, &server).await;

    // Chat: banning the first token of the greedy answer changes that first token.
    let chat = |bias: Value| {
        json!({"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 1,
               "temperature": 0, "logit_bias": bias})
    };
    let url = server.url("/v1/chat/completions");
    let (status, r) = post(&url, &chat(json!({}))).await;
    assert_eq!(status, 200, "{r}");
    let first = r["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let id = single_token(&server, &first).await;
    let (status, r) = post(&url, &chat(json!({id.to_string(): -100}))).await;
    assert_eq!(status, 200, "{r}");
    let other = r["choices"][0]["message"]["content"].as_str().unwrap();
    assert_ne!(other, first);

    // Bad input names the field.
    for (bias, needle) in [
        (json!({"banana": 1}), "keys must be token ids"),
        (json!({"5": 100.5}), "must be in [-100, 100]"),
        (json!({"5": -101}), "must be in [-100, 100]"),
        (json!({"4294967295": 1}), "outside the model's vocabulary"),
        (json!({"5": "high"}), "logit_bias"),
    ] {
        for url in [
            server.url("/v1/chat/completions"),
            server.url("/v1/completions"),
        ] {
            let mut body = chat(bias.clone());
            body["prompt"] = json!(PROMPT);
            let (status, r) = post(&url, &body).await;
            assert_eq!(status, 400, "{bias} on {url}: {r}");
            let message = r["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(needle), "{bias} on {url}: {r}");
            if !message.contains("invalid type") {
                assert_eq!(r["error"]["param"], "logit_bias", "{bias} on {url}: {r}");
            }
        }
    }
}

/// A server whose provider is another server (the vLLM path): the bias reaches the back server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logit_bias_is_forwarded_by_the_remote_provider() {
    let back = TestServer::local(ServerOptions::default()).await;
    let front = TestServer::with_provider(
        std::sync::Arc::new(super::remote::provider(&back).await),
        ServerOptions::default(),
    )
    .await;
    check_bias_moves_the_choice(&front, &back).await;
}
