//! Fill-in-the-middle through every door that takes it — llama.cpp's `/infill`, OpenAI's `suffix` on
//! `/v1/completions`, Ollama's `suffix` on `/api/generate` — on the real Qwen2.5-Coder-0.5B (the one model here
//! with FIM tokens), over real HTTP: the middle is right and stops before the suffix, `n_indent` ends it as
//! llama.cpp does, a newer request for the same document cancels the one in flight, a moved cursor reuses the
//! cached prompt, and a model without FIM tokens is a clear 400.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{post, TestServer};
use crate::suite::common;

const PREFIX: &str = "def fibonacci(n):\n    if n < 2:\n        return n\n    ";
const SUFFIX: &str = "\n\nprint(fibonacci(10))\n";

async fn qwen_server() -> TestServer {
    let engine = tokio::task::spawn_blocking(|| common::qwen_engine().clone())
        .await
        .unwrap();
    let provider = agentd::provider::LocalProvider::new(engine);
    TestServer::start(agentd::server::AppState::new(
        Arc::new(provider),
        Default::default(),
    ))
    .await
}

/// The middle is the recursion and nothing of the suffix.
fn assert_fibonacci_middle(middle: &str) {
    let squashed: String = middle.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(
        squashed.contains("returnfibonacci(n-1)+fibonacci(n-2)"),
        "{middle:?}"
    );
    assert!(
        !middle.contains("print("),
        "the middle runs into the suffix: {middle:?}"
    );
    assert!(!middle.contains("```"), "{middle:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_door_fills_the_middle_and_stops_before_the_suffix() {
    let server = qwen_server().await;
    let (status, body) = post(
        &format!("{}/infill", server.root),
        &json!({"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 64, "temperature": 0}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let whole = body["content"].as_str().unwrap().to_string();
    assert_fibonacci_middle(&whole);
    assert_eq!(body["stop"], true);
    assert_eq!(
        body["stop_type"], "eos",
        "stopped by a rule, not the limit: {body}"
    );
    assert!(body["tokens_predicted"].as_u64().unwrap() < 64, "{body}");
    assert!(body["timings"]["prompt_n"].as_u64().unwrap() > 20, "{body}");

    let (status, body) = post(
        &format!("{}/v1/completions", server.root),
        &json!({"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 64, "temperature": 0}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_fibonacci_middle(body["choices"][0]["text"].as_str().unwrap());
    assert_eq!(body["choices"][0]["finish_reason"], "stop", "{body}");

    let model = super::served_model(&server).await;
    let (status, body) = post(
        &format!("{}/api/generate", server.root),
        &json!({"model": model, "prompt": PREFIX, "suffix": SUFFIX, "stream": false,
                "options": {"temperature": 0, "num_predict": 64}}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_fibonacci_middle(body["response"].as_str().unwrap());
    assert_eq!(body["done_reason"], "stop", "{body}");

    // Streamed: pieces, then one last object with the timings; together the same middle.
    let resp = reqwest::Client::new()
        .post(format!("{}/infill", server.root))
        .json(&json!({"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 64, "temperature": 0,
                      "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    let objects: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let last = objects.last().unwrap();
    assert_eq!(last["stop"], true, "{text}");
    assert_eq!(
        last["content"], "",
        "the text comes in the pieces only: {text}"
    );
    assert!(
        last["timings"]["predicted_n"].as_u64().unwrap() > 0,
        "{text}"
    );
    let streamed: String = objects
        .iter()
        .map(|o| o["content"].as_str().unwrap_or(""))
        .collect();
    assert_fibonacci_middle(&streamed);
    assert_eq!(streamed, whole, "streamed and whole middles differ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_indent_and_other_files_are_taken_as_llama_cpp_takes_them() {
    let server = qwen_server().await;
    // The middle may not leave the function's body: a line indented less than 4 columns ends it.
    let (status, body) = post(
        &format!("{}/infill", server.root),
        &json!({"input_prefix": "import math\n\ndef area(r):\n    ", "input_suffix": "\n",
                "n_predict": 96, "n_indent": 4, "temperature": 0,
                "input_extra": [{"filename": "shapes/util.py", "text": "def square(x):\n    return x * x\n"}]}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let middle = body["content"].as_str().unwrap();
    assert!(!middle.is_empty(), "{body}");
    for line in middle.lines().skip(1) {
        let indent = line.len() - line.trim_start().len();
        assert!(indent >= 4 && !line.trim().is_empty(), "{middle:?}");
    }
    // The other file went into the prompt (its tokens are counted).
    let (_, bare) = post(
        &format!("{}/infill", server.root),
        &json!({"input_prefix": "import math\n\ndef area(r):\n    ", "input_suffix": "\n",
                "n_predict": 1, "temperature": 0}),
    )
    .await;
    assert!(
        body["tokens_evaluated"].as_u64().unwrap()
            > bare["tokens_evaluated"].as_u64().unwrap() + 10,
        "{body} {bare}"
    );

    for (field, value) in [("n_predict", json!(0)), ("input_extra", json!("x"))] {
        let mut req = json!({"input_prefix": "x", "input_suffix": "y"});
        req[field] = value;
        let (status, body) = post(&format!("{}/infill", server.root), &req).await;
        assert_eq!(status, 400, "{field}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_cursor_reuses_the_prompt_and_a_newer_request_cancels_the_older() {
    let server = qwen_server().await;
    let file: String = (0..60)
        .map(|i| format!("def f{i}(x):\n    return x + {i}\n\n"))
        .collect();
    let infill = |typed: &str, n_predict: u32| {
        json!({"input_prefix": format!("{file}def g(x):\n"), "prompt": typed, "input_suffix": "\n\nprint(g(1))\n",
               "n_predict": n_predict, "temperature": 0})
    };
    let url = format!("{}/infill", server.root);
    let (status, first) = post(&url, &infill("    re", 4)).await;
    assert_eq!(status, 200, "{first}");
    let (status, moved) = post(&url, &infill("    retu", 4)).await;
    assert_eq!(status, 200, "{moved}");
    let cached = moved["tokens_cached"].as_u64().unwrap();
    let evaluated = moved["tokens_evaluated"].as_u64().unwrap();
    assert!(
        cached + 32 >= evaluated - 12,
        "all but the typed line's tail and the suffix come from the cache: {cached} of {evaluated}"
    );

    // Two requests for one document (same first line, same end): the older one, still reading a prompt the
    // cache does not have, is cancelled with a 409; the newer one answers.
    let edited = file.replace("return x +", "return x -");
    let older = tokio::spawn({
        let url = url.clone();
        let body = json!({"input_prefix": format!("{edited}def g(x):\n"), "prompt": "    return x",
                          "input_suffix": "\n\nprint(g(1))\n", "n_predict": 200, "temperature": 0});
        async move { post(&url, &body).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (status, newer) = post(&url, &infill("    return x *", 8)).await;
    assert_eq!(status, 200, "{newer}");
    let (status, body) = older.await.unwrap();
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("superseded"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_without_fim_tokens_is_a_clear_400_on_every_door() {
    let server = TestServer::local(Default::default()).await;
    let model = super::served_model(&server).await;
    for (path, body) in [
        ("/infill", json!({"input_prefix": "a", "input_suffix": "b"})),
        (
            "/infill",
            json!({"input_prefix": "a", "input_suffix": "b", "stream": true}),
        ),
        (
            "/v1/completions",
            json!({"model": model, "prompt": "a", "suffix": "b"}),
        ),
        (
            "/api/generate",
            json!({"model": model, "prompt": "a", "suffix": "b", "stream": false}),
        ),
    ] {
        let (status, answer) = post(&format!("{}{path}", server.root), &body).await;
        assert_eq!(status, 400, "{path}: {answer}");
        assert!(
            answer.to_string().contains("fill-in-the-middle"),
            "{path}: {answer}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_probs_gives_every_generated_token_its_alternatives_as_llama_cpp() {
    let server = qwen_server().await;
    let body = json!({"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n\nprint(add(1, 2))\n",
                      "n_predict": 4, "n_probs": 3, "temperature": 0});
    let check = |probs: &Value, content: &str, predicted: u64| {
        let probs = probs.as_array().unwrap_or_else(|| panic!("{probs}"));
        assert_eq!(
            probs.len() as u64,
            predicted,
            "one entry per generated token"
        );
        let mut text = String::new();
        for p in probs {
            let top = p["top_logprobs"].as_array().unwrap();
            assert_eq!(top.len(), 3, "{p}");
            // Greedy: the token is the most likely one, and the alternatives come most likely first.
            assert_eq!(top[0]["id"], p["id"], "{p}");
            assert!(top
                .windows(2)
                .all(|w| w[0]["logprob"].as_f64() >= w[1]["logprob"].as_f64()));
            assert!(p["logprob"].as_f64().unwrap() <= 0.0);
            let bytes: Vec<u8> = p["bytes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_u64().unwrap() as u8)
                .collect();
            assert_eq!(
                String::from_utf8_lossy(&bytes),
                p["token"].as_str().unwrap()
            );
            text.push_str(p["token"].as_str().unwrap());
        }
        assert_eq!(text, content, "the tokens spell the middle");
    };
    let (status, whole) = post(&format!("{}/infill", server.root), &body).await;
    assert_eq!(status, 200, "{whole}");
    check(
        &whole["completion_probabilities"],
        whole["content"].as_str().unwrap(),
        whole["tokens_predicted"].as_u64().unwrap(),
    );
    // Streamed, the first token's entry comes with the first piece and each piece carries its own.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let resp = reqwest::Client::new()
        .post(format!("{}/infill", server.root))
        .json(&streamed)
        .send()
        .await
        .unwrap();
    let objects = super::sse(resp).await;
    assert!(
        objects[0]["completion_probabilities"].is_array(),
        "{:?}",
        objects[0]
    );
    let probs: Vec<Value> = objects
        .iter()
        .filter_map(|o| o["completion_probabilities"].as_array())
        .flatten()
        .cloned()
        .collect();
    let content: String = objects
        .iter()
        .map(|o| o["content"].as_str().unwrap_or(""))
        .collect();
    let last = objects.last().unwrap();
    check(
        &Value::Array(probs),
        &content,
        last["tokens_predicted"].as_u64().unwrap(),
    );
    assert_eq!(
        content, whole["content"],
        "streamed and whole middles differ"
    );
    let (status, body) = post(
        &format!("{}/infill", server.root),
        &json!({"input_prefix": "x", "n_probs": 21}),
    )
    .await;
    assert_eq!(status, 400, "{body}");
}
