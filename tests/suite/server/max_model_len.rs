//! `agentd serve --max-model-len N` (vLLM's flag) on the real default model: the window served is N, reported
//! on `/v1/models`, a prompt over it is refused on every door (Anthropic's wording on `/v1/messages`, which
//! Claude Code reads to compact), `max_tokens` is cut to what N leaves, and N over the model's own window is a
//! clear error at start.

use serde_json::{json, Value};

use super::{get, post, ServeProcess};
use crate::suite::common;

const WINDOW: u64 = 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_window_is_the_flags() {
    let server = ServeProcess::start(&["--max-model-len", &WINDOW.to_string()]);
    let (status, models) = get(&format!("{}/v1/models", server.root)).await;
    assert_eq!(status, 200, "{models}");
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["max_model_len"], WINDOW);
    let model = models["data"][0]["id"].as_str().unwrap().to_string();

    let long = "word ".repeat(1500);
    let (status, body) = post(
        &format!("{}/v1/chat/completions", server.root),
        &json!({"model": model, "messages": [{"role": "user", "content": long}], "max_tokens": 8}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
    let (status, body) = post(
        &format!("{}/v1/messages", server.root),
        &json!({"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": long}]}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    let tokens: String = message
        .trim_start_matches("prompt is too long: ")
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert_eq!(
        message,
        format!("prompt is too long: {tokens} tokens > {WINDOW} maximum"),
        "{body}"
    );
    assert!(tokens.parse::<u64>().unwrap() > WINDOW);

    // A reply may take what the window leaves after the prompt, not more.
    let (status, body) = post(
        &format!("{}/v1/completions", server.root),
        &json!({"model": model, "prompt": "Once upon a time", "max_tokens": 100000,
                "ignore_eos": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["usage"]["total_tokens"], WINDOW, "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "length");
}

#[test]
fn more_than_the_models_window_is_refused_at_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args([
            "serve",
            "--port",
            "0",
            "--offline",
            "--max-model-len",
            "10000000",
            "--model",
        ])
        .arg(common::smollm2_path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("max_model_len (10000000) is larger than the model's context length"),
        "{err}"
    );
    // The error line says it once (no #[source] chain repeating it); the
    // router's log line beside it is the server log's record of the load.
    let line = err.lines().find(|l| l.starts_with("error:")).unwrap_or("");
    assert_eq!(
        line.matches("is larger than").count(),
        1,
        "said once: {err}"
    );
}
