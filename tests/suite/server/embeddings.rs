//! Embeddings over real HTTP with the real all-MiniLM-L6-v2 (pulled from its pip wheel, sha256-checked): every
//! vector within cosine 0.9999 of sentence-transformers' (tests/data/real/minilm_embeddings.json: code, accents,
//! CJK, emoji, one token, 128 to 900 tokens cut at the 256-token window), whether sent alone, in one padded batch
//! or concurrently; OpenAI's, llama.cpp's and Ollama's shapes; every refusal a 400 that says why; and in a real
//! `agentd serve` beside a chat model, each model refusing the other's requests.

use std::sync::{Arc, OnceLock};

use agentd::engine::DeviceSpec;
use agentd::provider::{EncoderProvider, Provider};
use agentd::server::ServerOptions;
use base64::Engine as _;
use serde_json::{json, Value};

use super::{get, post, ServeProcess, TestServer};
use crate::suite::common;

const MINILM: &str = "all-minilm-l6-v2";
const WINDOW: u64 = 256;

/// The model's folder, pulled (and unpacked) if needed.
fn minilm_folder() -> std::path::PathBuf {
    use agentd::model_files::{fetch, manifest};
    fetch::fetch_manifest(
        &manifest::find(MINILM).unwrap(),
        &fetch::FetchOptions::default(),
    )
    .unwrap()
    .path
}

fn provider() -> Arc<dyn Provider> {
    static P: OnceLock<Arc<dyn Provider>> = OnceLock::new();
    P.get_or_init(|| {
        let folder = minilm_folder();
        Arc::new(EncoderProvider::from_folder(&folder, DeviceSpec::Cpu, MINILM).unwrap())
    })
    .clone()
}

async fn server() -> TestServer {
    TestServer::with_provider(provider(), ServerOptions::default()).await
}

fn reference() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/real/minilm_embeddings.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub(super) fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a vector: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

pub(super) fn cosine(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

async fn embed(server: &TestServer, body: Value) -> (u16, Value) {
    post(&server.url("/v1/embeddings"), &body).await
}

fn vectors(answer: &Value) -> Vec<Vec<f32>> {
    answer["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"))
        .iter()
        .enumerate()
        .map(|(i, d)| {
            assert_eq!(d["index"], i);
            assert_eq!(d["object"], "embedding");
            floats(&d["embedding"])
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_equal_sentence_transformers_alone_batched_and_concurrent() {
    let server = server().await;
    let reference = reference();
    let cases = reference["texts"].as_array().unwrap();
    assert_eq!(reference["max_seq_length"], WINDOW);
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    let expected: Vec<Vec<f32>> = cases.iter().map(|c| floats(&c["embedding"])).collect();

    // One padded batch of every length at once.
    let (status, answer) = embed(
        &server,
        json!({"model": MINILM, "input": texts, "truncate": true}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["object"], "list");
    assert_eq!(answer["model"], MINILM);
    let batched = vectors(&answer);
    let mut worst = (1.0f64, "");
    for ((case, want), got) in cases.iter().zip(&expected).zip(&batched) {
        assert_eq!(got.len(), 384);
        let c = cosine(want, got);
        let name = case["name"].as_str().unwrap();
        assert!(c >= 0.9999, "{name}: cosine {c}");
        if c < worst.0 {
            worst = (c, name);
        }
    }
    eprintln!(
        "lowest cosine against sentence-transformers: 1 - {:.2e} ({})",
        1.0 - worst.0,
        worst.1
    );
    let tokens: u64 = cases
        .iter()
        .map(|c| c["tokens"].as_u64().unwrap().min(WINDOW))
        .sum();
    assert_eq!(answer["usage"]["prompt_tokens"], tokens);
    assert_eq!(answer["usage"]["total_tokens"], tokens);

    // Each alone, all at once from concurrent clients: the same vectors as in the batch.
    let root = server.root.clone();
    let singles = futures::future::join_all(texts.iter().map(|t| {
        let url = format!("{root}/v1/embeddings");
        let body = json!({"model": MINILM, "input": t, "truncate": true});
        async move { post(&url, &body).await }
    }))
    .await;
    for ((status, answer), (batch, case)) in singles.iter().zip(batched.iter().zip(cases)) {
        assert_eq!(*status, 200, "{answer}");
        let alone = &vectors(answer)[0];
        let c = cosine(alone, batch);
        assert!(
            c >= 0.99999,
            "{}: alone vs batched cosine {c}",
            case["name"]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base64_token_ids_and_dimensions() {
    let server = server().await;
    let (_, float) = embed(&server, json!({"model": MINILM, "input": "hello world"})).await;
    let (status, b64) = embed(
        &server,
        json!({"model": MINILM, "input": ["hello world"], "encoding_format": "base64", "dimensions": 384}),
    )
    .await;
    assert_eq!(status, 200, "{b64}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let decoded: Vec<f32> = bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(decoded, vectors(&float)[0], "base64 is the same f32 values");

    // The tokens /tokenize gives, sent as ids: the same vector and the same count.
    let (status, tokenized) = post(
        &server.url("/tokenize"),
        &json!({"model": MINILM, "prompt": "hello world"}),
    )
    .await;
    assert_eq!(status, 200, "{tokenized}");
    assert_eq!(tokenized["tokens"], json!([101, 7592, 2088, 102]));
    let ids = tokenized["tokens"].clone();
    let (status, by_ids) = embed(&server, json!({"model": MINILM, "input": ids})).await;
    assert_eq!(status, 200, "{by_ids}");
    assert!(cosine(&vectors(&by_ids)[0], &vectors(&float)[0]) > 0.999999);
    assert_eq!(by_ids["usage"]["prompt_tokens"], 4);
    let (status, two) = embed(
        &server,
        json!({"model": MINILM, "input": [[101, 7592, 2088, 102], [101, 7592, 102]]}),
    )
    .await;
    assert_eq!(status, 200, "{two}");
    assert_eq!(vectors(&two).len(), 2);
    assert_eq!(two["usage"]["prompt_tokens"], 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_request_is_a_400_that_says_why() {
    let server = server().await;
    let long = "word ".repeat(400);
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"model": MINILM, "input": []}), "input", "empty"),
        (json!({"model": MINILM}), "input", "required"),
        (json!({"model": MINILM, "input": ""}), "", "empty string"),
        (
            json!({"model": MINILM, "input": ["a", ""]}),
            "",
            "input[1] is an empty string",
        ),
        (
            json!({"model": MINILM, "input": [[]]}),
            "",
            "empty list of tokens",
        ),
        (
            json!({"model": MINILM, "input": [101, 30522, 102]}),
            "",
            "outside the vocabulary of 30522",
        ),
        (
            json!({"model": MINILM, "input": [-1]}),
            "input",
            "not a token id",
        ),
        (
            json!({"model": MINILM, "input": ["a", 1]}),
            "input",
            "must be a string",
        ),
        (
            json!({"model": MINILM, "input": vec!["a"; 2049]}),
            "",
            "at most 2048",
        ),
        (
            json!({"model": MINILM, "input": long}),
            "",
            "window is 256 tokens",
        ),
        (
            json!({"model": MINILM, "input": "a", "encoding_format": "int8"}),
            "encoding_format",
            "not one of",
        ),
        (
            json!({"model": MINILM, "input": "a", "dimensions": 100}),
            "dimensions",
            "384",
        ),
    ];
    for (body, param, words) in cases {
        let (status, answer) = embed(&server, body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(words), "{body}: {message}");
        if !param.is_empty() {
            assert_eq!(answer["error"]["param"], param, "{body}: {answer}");
        }
    }
    // Truncation is asked for, not silent.
    let (status, answer) = embed(
        &server,
        json!({"model": MINILM, "input": long, "truncate": true}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["usage"]["prompt_tokens"], WINDOW);
    // An unknown model is a 404; a chat request to an encoder a 400.
    let (status, _) = embed(&server, json!({"model": "nope", "input": "a"})).await;
    assert_eq!(status, 404);
    let (status, answer) = post(
        &server.url("/v1/chat/completions"),
        &json!({"model": MINILM, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("is an embedding model"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_cpp_and_ollama_shapes() {
    let server = server().await;
    let (_, openai) = embed(
        &server,
        json!({"model": MINILM, "input": ["hello world", "café"]}),
    )
    .await;
    let want = vectors(&openai);

    for path in ["/embedding", "/embeddings"] {
        let (status, answer) = post(
            &server.url(path),
            &json!({"content": ["hello world", "café"]}),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        let items = answer.as_array().unwrap();
        assert_eq!(items.len(), 2);
        for (i, item) in items.iter().enumerate() {
            assert_eq!(item["index"], i);
            let nested = item["embedding"].as_array().unwrap();
            assert_eq!(nested.len(), 1, "one pooled vector per input");
            assert!(cosine(&floats(&nested[0]), &want[i]) > 0.999999);
        }
    }
    let (status, one) = post(
        &server.url("/embedding"),
        &json!({"content": "hello world", "embd_normalize": -1}),
    )
    .await;
    assert_eq!(status, 200, "{one}");
    let (status, bad) = post(
        &server.url("/embedding"),
        &json!({"content": "x", "embd_normalize": 5}),
    )
    .await;
    assert_eq!(
        (status, bad["error"]["param"].clone()),
        (400, json!("embd_normalize"))
    );
    let (status, bad) = post(&server.url("/embedding"), &json!({"prompt": "x"})).await;
    assert_eq!(status, 400, "{bad}");

    // Ollama: /api/embed and the older /api/embeddings.
    let (status, answer) = post(
        &server.url("/api/embed"),
        &json!({"model": format!("{MINILM}:latest"), "input": ["hello world", "café"], "keep_alive": "5m"}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["model"], format!("{MINILM}:latest"));
    let got = answer["embeddings"].as_array().unwrap();
    assert_eq!(got.len(), 2);
    for (g, w) in got.iter().zip(&want) {
        assert!(cosine(&floats(g), w) > 0.999999);
    }
    assert!(answer["total_duration"].as_u64().unwrap() > 0);
    assert!(answer["load_duration"].as_u64().is_some());
    assert_eq!(answer["prompt_eval_count"], 4 + 3);
    let (status, short) = post(
        &server.url("/api/embed"),
        &json!({"model": MINILM, "input": "hello world", "dimensions": 64}),
    )
    .await;
    assert_eq!(status, 200, "{short}");
    let v = floats(&short["embeddings"][0]);
    assert_eq!(v.len(), 64);
    assert!((v.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
    let (status, empty) = post(
        &server.url("/api/embed"),
        &json!({"model": MINILM, "input": []}),
    )
    .await;
    assert_eq!(
        (status, empty["embeddings"].clone()),
        (200, json!([])),
        "{empty}"
    );
    let long = "word ".repeat(400);
    let (status, cut) = post(
        &server.url("/api/embed"),
        &json!({"model": MINILM, "input": long}),
    )
    .await;
    assert_eq!(
        (status, cut["prompt_eval_count"].clone()),
        (200, json!(WINDOW)),
        "truncate is Ollama's default"
    );
    let (status, refused) = post(
        &server.url("/api/embed"),
        &json!({"model": MINILM, "input": long, "truncate": false}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("window is 256 tokens"),
        "{refused}"
    );
    let (status, legacy) = post(
        &server.url("/api/embeddings"),
        &json!({"model": MINILM, "prompt": "hello world"}),
    )
    .await;
    assert_eq!(status, 200, "{legacy}");
    assert!(cosine(&floats(&legacy["embedding"]), &want[0]) > 0.999999);
    let (status, missing) = post(
        &server.url("/api/embed"),
        &json!({"model": "nope", "input": "a"}),
    )
    .await;
    assert_eq!(status, 404, "{missing}");
    assert!(
        missing["error"].is_string(),
        "Ollama's error shape: {missing}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beside_a_chat_model_each_refuses_the_others_requests() {
    minilm_folder();
    common::smollm2_path();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"));
    command.args([
        "serve",
        "--port",
        "0",
        "--offline",
        "--model",
        "smollm2-135m-instruct",
        "--model",
        MINILM,
    ]);
    let server = ServeProcess::spawn(command);
    let root = &server.root;
    let (status, models) = get(&format!("{root}/v1/models")).await;
    assert_eq!(status, 200);
    assert!(models.contains(MINILM), "{models}");

    let (status, answer) = post(
        &format!("{root}/v1/embeddings"),
        &json!({"model": MINILM, "input": "hello world"}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["data"][0]["embedding"].as_array().unwrap().len(),
        384
    );

    let (status, answer) = post(
        &format!("{root}/v1/embeddings"),
        &json!({"model": "smollm2-135m-instruct", "input": "hello world"}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`smollm2-135m-instruct` cannot make embeddings"),
        "{message}"
    );

    for (path, body) in [
        (
            "/v1/chat/completions",
            json!({"model": MINILM, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
        ),
        (
            "/v1/completions",
            json!({"model": MINILM, "prompt": "hi", "max_tokens": 2}),
        ),
    ] {
        let (status, answer) = post(&format!("{root}{path}"), &body).await;
        assert_eq!(status, 400, "{path}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("is an embedding model"),
            "{path}: {answer}"
        );
    }
    let (status, answer) = post(
        &format!("{root}/api/chat"),
        &json!({"model": MINILM, "messages": [{"role": "user", "content": "hi"}], "stream": false}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");

    let (_, show) = post(&format!("{root}/api/show"), &json!({"model": MINILM})).await;
    assert_eq!(show["capabilities"], json!(["embedding"]), "{show}");
    let (_, show) = post(
        &format!("{root}/api/show"),
        &json!({"model": "smollm2-135m-instruct"}),
    )
    .await;
    assert_eq!(
        show["capabilities"],
        json!(["completion", "tools"]),
        "{show}"
    );
    let (_, tags) = get(&format!("{root}/api/tags")).await;
    assert!(tags.contains(&format!("{MINILM}:latest")), "{tags}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_provider_forwards_to_the_upstreams_embeddings() {
    use agentd::provider::{EmbedInput, EmbedRequest, RemoteConfig, RemoteProvider};
    let upstream = server().await;
    let remote = RemoteProvider::new(RemoteConfig::new(
        format!("{}/v1", upstream.root),
        MINILM.to_string(),
    ))
    .unwrap();
    let request = |inputs: Vec<EmbedInput>| EmbedRequest {
        model: String::new(),
        inputs,
        truncate: false,
        keep_alive: None,
    };
    let got = remote
        .embed(request(vec![
            EmbedInput::Text("hello world".into()),
            EmbedInput::Tokens(vec![101, 7592, 102]),
        ]))
        .await
        .unwrap();
    let local = provider()
        .embed(request(vec![
            EmbedInput::Text("hello world".into()),
            EmbedInput::Tokens(vec![101, 7592, 102]),
        ]))
        .await
        .unwrap();
    assert_eq!(got.model, MINILM);
    assert_eq!(got.prompt_tokens, 7);
    assert_eq!(
        got.vectors, local.vectors,
        "floats survive the wire exactly"
    );
    // The upstream's refusal comes back as an invalid request.
    let err = remote
        .embed(request(vec![EmbedInput::Text(String::new())]))
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        agentd::provider::ErrorKind::InvalidRequest,
        "{err}"
    );
}

#[test]
fn the_chat_engine_refuses_an_embedding_model_by_name() {
    minilm_folder();
    let err = agentd::engine::Engine::load(agentd::engine::EngineOptions {
        model: agentd::model_files::fetch::ModelSelector::Name(MINILM.into()),
        device: DeviceSpec::Cpu,
        ..Default::default()
    });
    let message = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("`all-minilm-l6-v2` is an embedding model: it cannot generate text"),
        "{message}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["model", "path", MINILM, "--offline"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = String::from_utf8(out.stdout).unwrap();
    assert_eq!(path.trim(), minilm_folder().display().to_string());
}
