//! Several models in one `agentd serve` (real binary, real models): each loaded at start or on first use in an
//! engine of its own, picked by each request's `model` on every door, listed with its state, loaded and
//! unloaded by hand, unloaded for room (`--max-loaded-models`) and when idle; a model that cannot load fails its
//! own requests only. Every answer carries the server's timings, which fit inside the client's own clock.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{get, post, ServeProcess};
use crate::suite::common;

const SMOL: &str = "smollm2-135m-instruct";
const QWEN: &str = "qwen2.5-coder-0.5b-instruct";
const GEMMA: &str = "gemma-3-270m";

fn serve(args: &[&str], config: Option<&std::path::Path>) -> ServeProcess {
    // The models must be in the cache: the server runs offline.
    common::smollm2_path();
    common::qwen_path();
    common::gemma_path();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"));
    command
        .args(["serve", "--port", "0", "--offline"])
        .args(args);
    if let Some(c) = config {
        command.arg("--config").arg(c);
    }
    ServeProcess::spawn(command)
}

async fn states(server: &ServeProcess) -> Vec<(String, String)> {
    let (status, body) = get(&format!("{}/v1/models", server.root)).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_str().unwrap().to_string(),
                m["status"]["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn state_of(states: &[(String, String)], id: &str) -> String {
    states
        .iter()
        .find(|(m, _)| m == id)
        .map(|(_, s)| s.clone())
        .unwrap_or_else(|| panic!("{id} not listed: {states:?}"))
}

async fn chat(server: &ServeProcess, model: &str) -> (u16, Value) {
    post(
        &format!("{}/v1/chat/completions", server.root),
        &json!({"model": model, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_gets_the_model_it_names_loaded_on_demand() {
    let server = serve(
        &[
            "--model",
            SMOL,
            "--models-available",
            "--max-loaded-models",
            "2",
        ],
        None,
    );
    let listed = states(&server).await;
    assert_eq!(state_of(&listed, SMOL), "loaded");
    assert_eq!(state_of(&listed, QWEN), "unloaded");
    assert_eq!(state_of(&listed, GEMMA), "unloaded");

    // Two requests for an unloaded model at once: one load, both answered by it.
    let (a, b) = tokio::join!(chat(&server, QWEN), chat(&server, QWEN));
    for (status, body) in [&a, &b] {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(body["model"], QWEN);
    }
    // The other doors pick the model the same way.
    let (status, body) = post(
        &format!("{}/v1/completions", server.root),
        &json!({"model": SMOL, "prompt": "Once", "max_tokens": 3}),
    )
    .await;
    assert_eq!(
        (status, body["model"].clone()),
        (200, json!(SMOL)),
        "{body}"
    );
    let (status, body) = post(
        &format!("{}/v1/messages", server.root),
        &json!({"model": QWEN, "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]}),
    )
    .await;
    assert_eq!(
        (status, body["model"].clone()),
        (200, json!(QWEN)),
        "{body}"
    );
    let (status, body) = post(
        &format!("{}/v1/responses", server.root),
        &json!({"model": SMOL, "input": "Hi", "max_output_tokens": 3}),
    )
    .await;
    assert_eq!(
        (status, body["model"].clone()),
        (200, json!(SMOL)),
        "{body}"
    );
    let (status, body) = post(
        &format!("{}/api/chat", server.root),
        &json!({"model": format!("{QWEN}:latest"), "stream": false, "options": {"num_predict": 3},
                "messages": [{"role": "user", "content": "Hi"}]}),
    )
    .await;
    assert_eq!((status, body["done"].clone()), (200, json!(true)), "{body}");
    let workspace = tempfile::tempdir().unwrap();
    let (status, body) = post(
        &format!("{}/v1/sessions", server.root),
        &json!({"model": QWEN, "workspace": workspace.path(), "tools": ["read"], "policy": "read_only"}),
    )
    .await;
    assert_eq!(
        (status, body["model"].clone()),
        (201, json!(QWEN)),
        "{body}"
    );
    let listed = states(&server).await;
    assert_eq!(state_of(&listed, QWEN), "loaded");

    // A third model needs room: the least recently used idle one goes.
    let (status, body) = chat(&server, GEMMA).await;
    assert_eq!(status, 200, "{body}");
    let listed = states(&server).await;
    assert_eq!(state_of(&listed, GEMMA), "loaded");
    assert_eq!(state_of(&listed, SMOL), "unloaded");
    assert_eq!(state_of(&listed, QWEN), "loaded");

    // By hand.
    let (status, body) = post(
        &format!("{}/models/unload", server.root),
        &json!({"model": QWEN}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(state_of(&states(&server).await, QWEN), "unloaded");
    let (status, body) = post(
        &format!("{}/models/load", server.root),
        &json!({"model": SMOL}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(state_of(&states(&server).await, SMOL), "loaded");
    let (status, body) = post(
        &format!("{}/models/load", server.root),
        &json!({"model": "no-such-model"}),
    )
    .await;
    assert_eq!(status, 404, "{body}");

    // Each model's requests are counted under its name.
    let (_, metrics) = get(&format!("{}/metrics", server.root)).await;
    for m in [SMOL, QWEN, GEMMA] {
        assert!(
            metrics.contains(&format!(
                "vllm:request_success_total{{model_name=\"{m}\",finished_reason=\"length\"}}"
            )),
            "{m} has no series:\n{metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_cannot_load_fails_alone_and_idle_models_unload() {
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.gguf");
    std::fs::write(&broken, b"GGUF but not really").unwrap();
    let config = dir.path().join("models.toml");
    std::fs::write(
        &config,
        format!(
            "[engine]\nmodel = \"{SMOL}\"\n\n[[models]]\nmodel = \"{}\"\nname = \"broken\"\npreload = false\n\n\
             [[models]]\nmodel = \"{QWEN}\"\npreload = false\n\n[router]\nidle_unload_secs = 2\n",
            broken.display()
        ),
    )
    .unwrap();
    let server = serve(&[], Some(&config));
    let (status, body) = chat(&server, "broken").await;
    assert_eq!(status, 500, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("model `broken` failed to load"),
        "{message}"
    );
    let listed = states(&server).await;
    assert_eq!(state_of(&listed, "broken"), "failed");
    assert_eq!(state_of(&listed, SMOL), "loaded");
    let (status, body) = chat(&server, SMOL).await;
    assert_eq!(status, 200, "{body}");

    // Idle past the timeout: unloaded (the sweep runs twice a second).
    let (status, _) = chat(&server, QWEN).await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let listed = states(&server).await;
    assert_eq!(state_of(&listed, QWEN), "unloaded");
    assert_eq!(state_of(&listed, SMOL), "unloaded");
    // And back on the next request.
    let (status, body) = chat(&server, QWEN).await;
    assert_eq!(
        (status, body["model"].clone()),
        (200, json!(QWEN)),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_timings_fit_inside_the_clients_clock() {
    let server = serve(&["--model", SMOL], None);
    let started = Instant::now();
    let (status, body) = post(
        &format!("{}/v1/chat/completions", server.root),
        &json!({"model": SMOL, "messages": [{"role": "user", "content": "Tell me a story."}],
                "max_tokens": 24, "ignore_eos": true}),
    )
    .await;
    let client_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(status, 200, "{body}");
    let t = &body["timings"];
    assert_eq!(
        t["predicted_n"], body["usage"]["completion_tokens"],
        "{body}"
    );
    assert_eq!(
        t["prompt_n"].as_u64().unwrap() + t["cache_n"].as_u64().unwrap(),
        body["usage"]["prompt_tokens"].as_u64().unwrap()
    );
    let (prompt_ms, predicted_ms) = (
        t["prompt_ms"].as_f64().unwrap(),
        t["predicted_ms"].as_f64().unwrap(),
    );
    assert!(prompt_ms > 0.0 && predicted_ms > 0.0, "{t}");
    assert!(
        prompt_ms + predicted_ms <= client_ms,
        "server {prompt_ms} + {predicted_ms} ms, client {client_ms} ms"
    );
    let per_second = t["predicted_per_second"].as_f64().unwrap();
    assert!(
        (per_second - 24.0 * 1000.0 / predicted_ms).abs() < 1e-6 * per_second,
        "{t}"
    );

    // /v1/completions too, and the prefill/decode histograms count both requests.
    let (status, body) = post(
        &format!("{}/v1/completions", server.root),
        &json!({"model": SMOL, "prompt": "Once upon a time", "max_tokens": 5}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["timings"]["predicted_n"],
        body["usage"]["completion_tokens"]
    );
    let (_, metrics) = get(&format!("{}/metrics", server.root)).await;
    for family in [
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:request_inference_time_seconds",
    ] {
        assert!(
            metrics.contains(&format!("{family}_count{{model_name=\"{SMOL}\"}} 2")),
            "{family}:\n{metrics}"
        );
    }
}

/// `/api/pull` of a name no manifest knows is a 404 in Ollama's shape (it was a 500, found by the schema fuzzer),
/// whole or streamed; a cached model pulls offline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulling_an_unknown_model_is_a_404_in_ollamas_shape() {
    let server = ServeProcess::start(&[]);
    let (status, body) = post(
        &format!("{}/api/pull", server.root),
        &json!({"model": "no-such-model", "stream": false}),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let message = body["error"].as_str().unwrap();
    assert!(
        message.contains("no-such-model") && message.contains("smollm2-135m-instruct"),
        "{message}"
    );
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");

    let resp = super::client()
        .post(format!("{}/api/pull", server.root))
        .json(&json!({"model": "no-such-model"}))
        .send()
        .await
        .unwrap();
    let lines: Vec<Value> = resp
        .text()
        .await
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.last().unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("no-such-model"));

    let (status, body) = post(
        &format!("{}/api/pull", server.root),
        &json!({"model": "smollm2-135m-instruct", "stream": false}),
    )
    .await;
    assert_eq!((status, body), (200, json!({"status": "success"})));
}
