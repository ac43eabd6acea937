//! Embeddings from a chat model (`agentd serve --pooling mean|last|cls`, llama.cpp's flag) over real HTTP with the
//! real SmolLM2 GGUF: every vector within cosine 0.999 of llama.cpp's `llama-server --embeddings --pooling P` on
//! the same file (tests/data/real/pooled_embeddings.json, made by scripts/pooled_embedding_reference.py: code,
//! Unicode, one token, 1,051 tokens fed over several passes), with the same token counts, alone and batched, on
//! the CPU engine and on candle's forward pass;
//! OpenAI's, Ollama's and llama.cpp's doors; a window cut with Ollama's `truncate` and refused without it; and the
//! model still chatting between embedding requests.

use serde_json::{json, Value};

use super::embeddings::{cosine, floats};
use super::{get, post, ServeProcess};
use crate::suite::common;

const MODEL: &str = "smollm2-135m-instruct";

fn reference() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/real/pooled_embeddings.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn serve(pooling: &str, extra: &[&str]) -> ServeProcess {
    common::smollm2_path();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"));
    command.args([
        "serve",
        "--port",
        "0",
        "--offline",
        "--model",
        MODEL,
        "--pooling",
        pooling,
    ]);
    command.args(extra);
    ServeProcess::spawn(command)
}

/// The reference's texts and vectors for `pooling` (the GGUF checked to be the one it was made from).
fn cases(pooling: &str) -> Vec<(String, String, u64, Vec<f32>)> {
    let doc = reference();
    assert_eq!(doc["model"], MODEL);
    doc["poolings"][pooling]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["text"].as_str().unwrap().to_string(),
                c["tokens"].as_u64().unwrap(),
                floats(&c["vector"]),
            )
        })
        .collect()
}

/// Each vector of `answer` (OpenAI's shape) against the reference, in order.
fn check_openai(pooling: &str, answer: &Value, cases: &[(String, String, u64, Vec<f32>)]) {
    let data = answer["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(data.len(), cases.len());
    for (d, (name, _, _, want)) in data.iter().zip(cases) {
        let got = floats(&d["embedding"]);
        let c = cosine(&got, want);
        assert!(c >= 0.999, "{pooling} {name}: cosine {c} to llama.cpp's");
        let norm: f64 = got.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{pooling} {name}: norm {norm}");
    }
    let tokens: u64 = cases.iter().map(|c| c.2).sum();
    assert_eq!(
        answer["usage"]["prompt_tokens"], tokens,
        "{pooling}: {answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_pooling_equals_llama_cpp_on_the_same_gguf() {
    for pooling in ["mean", "last", "cls"] {
        let server = serve(pooling, &[]);
        let root = &server.root;
        let cases = cases(pooling);
        let texts: Vec<&str> = cases.iter().map(|c| c.1.as_str()).collect();
        let (status, answer) = post(
            &format!("{root}/v1/embeddings"),
            &json!({"model": MODEL, "input": texts}),
        )
        .await;
        assert_eq!(status, 200, "{pooling}: {answer}");
        check_openai(pooling, &answer, &cases);
        if pooling != "mean" {
            continue;
        }
        // Alone, one request per text, as OpenAI's, Ollama's and llama.cpp's doors.
        for (name, text, tokens, want) in &cases {
            let (status, one) = post(
                &format!("{root}/v1/embeddings"),
                &json!({"model": MODEL, "input": text}),
            )
            .await;
            assert_eq!(status, 200, "{name}: {one}");
            check_openai(
                pooling,
                &one,
                &[(name.clone(), text.clone(), *tokens, want.clone())],
            );
        }
        let (status, ollama) = post(
            &format!("{root}/api/embed"),
            &json!({"model": MODEL, "input": texts}),
        )
        .await;
        assert_eq!(status, 200, "{ollama}");
        for (v, c) in ollama["embeddings"].as_array().unwrap().iter().zip(&cases) {
            assert!(cosine(&floats(v), &c.3) >= 0.999, "/api/embed {}", c.0);
        }
        let (status, llama) = post(
            &format!("{root}/embedding"),
            &json!({"content": cases[1].1}),
        )
        .await;
        assert_eq!(status, 200, "{llama}");
        let v = floats(&llama[0]["embedding"][0]);
        assert!(cosine(&v, &cases[1].3) >= 0.999, "/embedding: {llama}");
        // Ollama lists what it can do; the model still chats.
        let (_, show) = post(&format!("{root}/api/show"), &json!({"model": MODEL})).await;
        let caps = show["capabilities"].as_array().unwrap();
        assert!(caps.contains(&json!("embedding")), "{show}");
        assert!(caps.contains(&json!("completion")), "{show}");
        let (status, chat) = post(
            &format!("{root}/v1/chat/completions"),
            &json!({"model": MODEL, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}),
        )
        .await;
        assert_eq!(status, 200, "{chat}");
        assert!(
            chat["choices"][0]["message"]["content"].is_string(),
            "{chat}"
        );
    }
}

/// candle's forward pass (`--weights native`: the path CUDA and Metal take) pools the same hidden states.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candles_forward_pass_pools_the_same_vectors() {
    let server = serve("last", &["--weights", "native"]);
    // The short texts: candle's pass on the CPU is the slow reference path.
    let cases: Vec<_> = cases("last").into_iter().filter(|c| c.2 < 512).collect();
    let texts: Vec<&str> = cases.iter().map(|c| c.1.as_str()).collect();
    let (status, answer) = post(
        &format!("{}/v1/embeddings", server.root),
        &json!({"model": MODEL, "input": texts}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    check_openai("last (candle)", &answer, &cases);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_over_the_window_is_refused_or_cut_as_asked() {
    let server = serve("last", &["--max-model-len", "512"]);
    let root = &server.root;
    let long = cases("last")
        .into_iter()
        .find(|c| c.2 > 512)
        .expect("a reference text over 512 tokens");
    let (status, answer) = post(
        &format!("{root}/v1/embeddings"),
        &json!({"model": MODEL, "input": ["hello", long.1]}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("input[1]") && message.contains("512"),
        "{message}"
    );
    // Ollama cuts by default; `truncate: false` refuses.
    let (status, answer) = post(
        &format!("{root}/api/embed"),
        &json!({"model": MODEL, "input": long.1}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["prompt_eval_count"], 512, "{answer}");
    let cut = floats(&answer["embeddings"][0]);
    assert!(
        cosine(&cut, &long.3) < 0.9999,
        "the last token of a cut text is another token"
    );
    let (status, answer) = post(
        &format!("{root}/api/embed"),
        &json!({"model": MODEL, "input": long.1, "truncate": false}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    // Token ids work too, and a bad one is named.
    let (status, answer) = post(
        &format!("{root}/v1/embeddings"),
        &json!({"model": MODEL, "input": [[1, 2, 3], [99999999]]}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("input[1]"), "{answer}");
    let (status, _) = get(&format!("{root}/health")).await;
    assert_eq!(status, 200);
    // Embedding requests count on /metrics under their model: the one that succeeded with its 512 tokens.
    let (status, metrics) = get(&format!("{root}/metrics")).await;
    assert_eq!(status, 200);
    let value = |line: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(line))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no `{line}` in {metrics}"))
    };
    assert_eq!(
        value(&format!(
            "vllm:request_success_total{{model_name=\"{MODEL}\",finished_reason=\"stop\"}}"
        )),
        1.0
    );
    assert_eq!(
        value(&format!(
            "vllm:prompt_tokens_total{{model_name=\"{MODEL}\"}}"
        )),
        512.0
    );
}
