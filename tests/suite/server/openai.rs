//! The OpenAI routes on the real default model: exact usage (equal to `/tokenize`'s count), streaming with the
//! usage chunk, constrained tool calls and JSON, logprobs, completions, tokenize/detokenize, metrics, every error
//! status (400, 401, 404, 405, 413, 503), a disconnect that frees the engine, and a graceful shutdown.

use std::time::Duration;

use agentd::server::ServerOptions;
use serde_json::{json, Value};

use super::{client, get, post, sse, SseReader, TestServer};

/// The shared test engine's model id (the GGUF file stem: it is loaded by path).
fn model() -> String {
    crate::suite::common::engine().info().name.clone()
}

fn chat(text: &str, extra: Value) -> Value {
    let mut body = json!({"model": model(), "temperature": 0,
                          "messages": [{"role": "system", "content": "You are a helpful assistant."},
                                       {"role": "user", "content": text}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "read", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string", "maxLength": 40}},
                           "required": ["path"], "additionalProperties": false}}}])
}

#[tokio::test]
async fn usage_is_exact_and_matches_tokenize() {
    let server = TestServer::local(ServerOptions::default()).await;
    let body = chat("Tell me a story about a dragon.", json!({"max_tokens": 9}));
    let (status, r) = post(&server.url("/v1/chat/completions"), &body).await;
    assert_eq!(status, 200, "{r}");
    let (_, count) = post(
        &server.url("/tokenize"),
        &json!({"model": model(), "messages": body["messages"]}),
    )
    .await;
    assert_eq!(r["usage"]["prompt_tokens"], count["count"]);
    assert_eq!(count["max_model_len"], 8192);
    // /v1/models says where the model runs.
    let (status, models) = super::get(&server.url("/v1/models")).await;
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert!(
        models["data"][0]["device"]
            .as_str()
            .unwrap()
            .starts_with("cpu ("),
        "{models}"
    );
    assert_eq!(r["usage"]["completion_tokens"], 9);
    assert_eq!(r["choices"][0]["finish_reason"], "length");

    // Streamed, with the usage chunk: the same counts.
    let resp = client()
        .post(server.url("/v1/chat/completions"))
        .json(&chat(
            "Tell me a story about a dragon.",
            json!({"max_tokens": 9, "stream": true, "stream_options": {"include_usage": true}}),
        ))
        .send()
        .await
        .unwrap();
    let events = sse(resp).await;
    let usage = &events[events.len() - 2]["usage"];
    assert_eq!(usage["prompt_tokens"], count["count"]);
    assert_eq!(usage["completion_tokens"], 9);
    let text: String = events
        .iter()
        .filter_map(|e| e["choices"].get(0)?["delta"]["content"].as_str())
        .collect();
    assert!(!text.is_empty());
}

#[tokio::test]
async fn tool_calls_and_json_are_constrained() {
    let server = TestServer::local(ServerOptions::default()).await;
    let url = server.url("/v1/chat/completions");
    let body = chat(
        "Show me src/main.rs",
        json!({"tools": tools(), "tool_choice": "required", "parallel_tool_calls": false, "max_tokens": 120}),
    );
    let (status, r) = post(&url, &body).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["choices"][0]["finish_reason"], "tool_calls");
    let call = &r["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "read");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert!(args["path"].is_string());
    assert!(call["id"].as_str().unwrap().starts_with("call_"));

    // The round trip: the call and its result go back, and the model answers in text.
    let mut messages = body["messages"].as_array().unwrap().clone();
    messages.push(r["choices"][0]["message"].clone());
    messages.push(json!({"role": "tool", "tool_call_id": call["id"], "content": "fn main() {}"}));
    let follow = json!({"model": model(), "messages": messages, "tools": tools(), "tool_choice": "none",
                        "max_tokens": 8, "temperature": 0});
    let (status, r2) = post(&url, &follow).await;
    assert_eq!(status, 200, "{r2}");
    assert!(r2["choices"][0]["message"]["tool_calls"].is_null());
    assert!(r2["usage"]["prompt_tokens"].as_u64() > Some(20));

    let schema = json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                        "required": ["city"], "additionalProperties": false});
    let (status, r) = post(&url, &chat("Capital of France, as JSON.", json!({"max_tokens": 40,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}}))).await;
    assert_eq!(status, 200, "{r}");
    let v: Value =
        serde_json::from_str(r["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert!(v["city"].is_string());
}

#[tokio::test]
async fn logprobs_completions_and_tokenize() {
    let server = TestServer::local(ServerOptions::default()).await;
    let (status, r) = post(
        &server.url("/v1/chat/completions"),
        &chat(
            "Say hi.",
            json!({"max_tokens": 4, "logprobs": true, "top_logprobs": 2}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(content.len(), 4);
    for e in content {
        assert!(e["logprob"].as_f64().unwrap() <= 0.0);
        assert_eq!(e["top_logprobs"].as_array().unwrap().len(), 2);
        assert!(e["bytes"].is_array());
    }

    let (status, r) = post(
        &server.url("/v1/completions"),
        &json!({"model": model(), "prompt": ["Once upon a time", "The sky is"], "max_tokens": 5,
                                   "temperature": 0, "logprobs": 1, "echo": true}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["object"], "text_completion");
    let choices = r["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    assert!(choices[0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Once upon a time"));
    assert!(choices[1]["text"]
        .as_str()
        .unwrap()
        .starts_with("The sky is"));
    assert_eq!(
        choices[0]["logprobs"]["tokens"].as_array().unwrap().len(),
        5
    );
    assert_eq!(r["usage"]["completion_tokens"], 10);

    let (_, t) = post(
        &server.url("/tokenize"),
        &json!({"prompt": "Hello world", "return_token_strs": true}),
    )
    .await;
    assert_eq!(t["count"], t["tokens"].as_array().unwrap().len());
    assert_eq!(
        t["token_strs"].as_array().unwrap().len(),
        t["tokens"].as_array().unwrap().len()
    );
    let (_, d) = post(&server.url("/detokenize"), &json!({"tokens": t["tokens"]})).await;
    assert!(d["prompt"].as_str().unwrap().ends_with("Hello world"));
    let (status, bad) = post(&server.url("/detokenize"), &json!({"tokens": [99999999]})).await;
    assert_eq!(
        (status, bad["error"]["param"].clone()),
        (400, json!("tokens"))
    );
}

#[tokio::test]
async fn errors_have_openai_shape_and_status() {
    let server = TestServer::local(ServerOptions {
        api_key: Some("sk-k".into()),
        max_body_bytes: 50_000,
        ..ServerOptions::default()
    })
    .await;
    let c = client();
    let url = server.url("/v1/chat/completions");
    let send = |body: Vec<u8>, key: Option<&str>| {
        let mut r = c
            .post(&url)
            .header("content-type", "application/json")
            .body(body);
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        r.send()
    };
    let check = |status: u16, v: &Value| {
        let e = v["error"].as_object().unwrap_or_else(|| panic!("{v}"));
        assert_eq!(
            e.keys().collect::<Vec<_>>(),
            ["message", "type", "param", "code"],
            "{v}"
        );
        status
    };
    let good = serde_json::to_vec(&chat("hi", json!({"max_tokens": 1}))).unwrap();
    let cases: Vec<(Vec<u8>, Option<&str>, u16)> = vec![
        (good.clone(), None, 401),
        (good.clone(), Some("wrong"), 401),
        (b"{\"model\": ".to_vec(), Some("sk-k"), 400),
        (b"[1, 2]".to_vec(), Some("sk-k"), 400),
        (
            serde_json::to_vec(&chat("hi", json!({"n": 3}))).unwrap(),
            Some("sk-k"),
            400,
        ),
        (
            serde_json::to_vec(&chat("hi", json!({"temperature": "warm"}))).unwrap(),
            Some("sk-k"),
            400,
        ),
        (
            serde_json::to_vec(&chat("hi", json!({"max_tokens": 1e40}))).unwrap(),
            Some("sk-k"),
            400,
        ),
        (
            serde_json::to_vec(&chat("hi", json!({"model": "gpt-4o"}))).unwrap(),
            Some("sk-k"),
            404,
        ),
        (
            serde_json::to_vec(&chat(&"x".repeat(60_000), json!({}))).unwrap(),
            Some("sk-k"),
            413,
        ),
        (
            serde_json::to_vec(&chat(&"a b ".repeat(6_000), json!({"stream": true}))).unwrap(),
            Some("sk-k"),
            400,
        ),
    ];
    for (body, key, want) in cases {
        let resp = send(body.clone(), key).await.unwrap();
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap();
        assert_eq!(
            check(status, &v),
            want,
            "{}: {v}",
            String::from_utf8_lossy(&body[..body.len().min(80)])
        );
        if want == 400
            && v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("context window")
        {
            assert!(
                v["error"]["message"].as_str().unwrap().contains("8192"),
                "{v}"
            );
        }
    }
    // A huge max_tokens is clamped to the context window, not an error.
    let resp = send(
        serde_json::to_vec(&chat(
            "hi",
            json!({"max_tokens": 4_000_000_000u64, "stop": ["."]}),
        ))
        .unwrap(),
        Some("sk-k"),
    )
    .await
    .unwrap();
    assert_eq!(resp.status(), 200);
    // Unknown routes and methods, with a key; health without one.
    let resp = c
        .get(server.url("/v1/nothing"))
        .bearer_auth("sk-k")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let resp = c
        .get(server.url("/v1/chat/completions"))
        .bearer_auth("sk-k")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    let v: Value = resp.json().await.unwrap();
    check(405, &v);
    assert_eq!(get(&server.url("/health")).await.0, 200);
    assert_eq!(get(&server.url("/metrics")).await.0, 200);
}

#[tokio::test]
async fn a_full_queue_answers_503_and_a_disconnect_frees_the_engine() {
    // One request generating at a time, none waiting: the second is refused. An engine of its own, so the
    // gauges read below are this test's.
    let server = TestServer::local_own(ServerOptions {
        max_running: Some(1),
        max_queue: 0,
        ..ServerOptions::default()
    })
    .await;
    let url = server.url("/v1/chat/completions");
    let long = chat(
        "Write a very long story about a dragon.",
        json!({"max_tokens": 4000, "stream": true}),
    );
    let resp = client().post(&url).json(&long).send().await.unwrap();
    let mut reader = SseReader::new(resp);
    for _ in 0..3 {
        reader.next().await.unwrap();
    }
    assert_eq!(server.state.admission.running(), 1);
    let resp = client()
        .post(&url)
        .json(&chat("hi", json!({"max_tokens": 1})))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["error"]["type"], "server_error");

    // The client goes away: the generation is cancelled and the slot freed.
    drop(reader);
    let mut waited = 0;
    while server.state.admission.running() > 0 {
        assert!(waited < 300, "the slot was not freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += 1;
    }
    let (status, r) = post(&url, &chat("hi", json!({"max_tokens": 2}))).await;
    assert_eq!(status, 200, "{r}");
    let (_, metrics) = get(&server.url("/metrics")).await;
    assert!(
        metrics.contains(&format!(
            "vllm:num_requests_running{{model_name=\"{}\"}} 0",
            model()
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("finished_reason=\"abort\"} 1"),
        "{metrics}"
    );
    for name in [
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:request_queue_time_seconds_count",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_requests_waiting",
        "vllm:prefix_cache_queries",
        "vllm:prefix_cache_hits",
    ] {
        assert!(metrics.contains(name), "{name}");
    }
    // The engine has served requests by now: prompt tokens were looked up in the prefix cache.
    let queries: u64 = metrics
        .lines()
        .find(|l| l.starts_with("vllm:prefix_cache_queries{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(queries > 0, "{metrics}");
}

/// A metric's value in the exposition text (the first line of that name).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// With the batching engine three streams generate at once: the running gauge says 3, the KV cache is in use,
/// and when the clients leave both fall back to 0.
#[tokio::test]
async fn running_gauge_and_kv_usage_follow_the_batch() {
    // An engine of its own: the shared one serves other tests at the same time.
    let server = TestServer::local_own(ServerOptions::default()).await;
    let url = server.url("/v1/chat/completions");
    let mut readers = Vec::new();
    for topic in ["a dragon", "a lighthouse", "a clockmaker"] {
        let body = chat(
            &format!("Write a very long story about {topic}."),
            json!({"max_tokens": 4000, "stream": true, "ignore_eos": true}),
        );
        let resp = client().post(&url).json(&body).send().await.unwrap();
        let mut reader = SseReader::new(resp);
        reader.next().await.unwrap();
        readers.push(reader);
    }
    for r in &mut readers {
        for _ in 0..4 {
            r.next().await.unwrap();
        }
    }
    // Every stream is producing tokens: all three are in the batch.
    let (_, m) = get(&server.url("/metrics")).await;
    assert_eq!(metric(&m, "vllm:num_requests_running"), 3.0, "{m}");
    assert_eq!(metric(&m, "vllm:num_requests_waiting"), 0.0, "{m}");
    let usage = metric(&m, "vllm:kv_cache_usage_perc");
    assert!(usage > 0.0 && usage < 1.0, "{m}");
    assert_eq!(metric(&m, "vllm:num_preemptions_total"), 0.0, "{m}");
    drop(readers);
    let mut waited = 0;
    loop {
        let (_, m) = get(&server.url("/metrics")).await;
        if metric(&m, "vllm:num_requests_running") == 0.0 {
            assert_eq!(metric(&m, "vllm:kv_cache_usage_perc"), 0.0, "{m}");
            break;
        }
        assert!(waited < 500, "the streams did not end: {m}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += 1;
    }
}

#[tokio::test]
async fn shutdown_finishes_in_flight_streams_then_refuses() {
    let server = TestServer::local(ServerOptions {
        shutdown_grace: Duration::from_millis(300),
        ..ServerOptions::default()
    })
    .await;
    let url = server.url("/v1/chat/completions");
    let long = chat(
        "Write a very long story about a dragon.",
        json!({"max_tokens": 4000, "stream": true}),
    );
    let resp = client().post(&url).json(&long).send().await.unwrap();
    let mut reader = SseReader::new(resp);
    reader.next().await.unwrap();
    let state = server.state.clone();
    let root = server.root.clone();
    let stopping = tokio::spawn(server.shutdown());
    // The stream ends cleanly (cancelled after the grace period: an error event, then [DONE]).
    let mut last = Vec::new();
    while let Some(ev) = reader.next().await {
        last.push(ev);
    }
    assert_eq!(last.last(), Some(&json!("[DONE]")), "{last:?}");
    stopping.await.unwrap().unwrap();
    assert!(state.draining.is_cancelled());
    assert_eq!(state.admission.running(), 0);
    assert!(
        client().get(format!("{root}/health")).send().await.is_err(),
        "the listener is closed"
    );
}

/// The prefix cache does not leak between tenants: a second `user` sending the same long prompt reuses nothing
/// (its `cached_tokens` is 0, so it learns nothing about another user's prompt), while the same user does.
#[tokio::test]
async fn cached_tokens_never_cross_users() {
    let server = TestServer::local(ServerOptions::default()).await;
    let long = "Here is a long shared preamble about ships and harbours. ".repeat(20);
    let ask = |user: &str| {
        let mut body = chat(&long, json!({"max_tokens": 2, "temperature": 0}));
        body["user"] = json!(user);
        body
    };
    let url = server.url("/v1/chat/completions");
    let (s, first) = post(&url, &ask("alice")).await;
    assert_eq!(s, 200, "{first}");
    let (_, bob) = post(&url, &ask("bob")).await;
    assert_eq!(
        bob["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "bob reused alice's prefix: {bob}"
    );
    let (_, again) = post(&url, &ask("alice")).await;
    assert!(
        again["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0)
            > 100,
        "alice's own prefix is reused: {again}"
    );
}

/// Speculative decoding through the API: a reply that copies its prompt reports its accepted and rejected draft
/// tokens in `usage.completion_tokens_details`, and `/metrics` counts them (vLLM's `spec_decode` counters).
#[tokio::test]
async fn drafts_show_in_usage_and_metrics() {
    let server = TestServer::local_own(ServerOptions::default()).await;
    let file = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n\n\n\
                def mul(a, b):\n    return a * b\n";
    let body = chat(
        &format!(
            "Here is calc.py:\n\n```python\n{file}```\n\nFix the bug in add (it subtracts). Reply with the \
             whole corrected file, all three functions, in one ```python block."
        ),
        json!({"max_tokens": 200}),
    );
    let (status, v) = post(&server.url("/v1/chat/completions"), &body).await;
    assert_eq!(status, 200, "{v}");
    let details = &v["usage"]["completion_tokens_details"];
    let accepted = details["accepted_prediction_tokens"].as_u64().unwrap();
    let rejected = details["rejected_prediction_tokens"].as_u64().unwrap();
    assert!(accepted > 0, "{v}");
    assert!(accepted < v["usage"]["completion_tokens"].as_u64().unwrap());
    let (_, m) = get(&server.url("/metrics")).await;
    let counted = metric(&m, "vllm:spec_decode_num_accepted_tokens_total");
    assert_eq!(counted, accepted as f64, "{m}");
    assert_eq!(
        metric(&m, "vllm:spec_decode_num_draft_tokens_total"),
        (accepted + rejected) as f64,
        "{m}"
    );
    assert!(
        metric(&m, "vllm:spec_decode_num_drafts_total") >= 1.0,
        "{m}"
    );
    assert!(
        metric(&m, "vllm:spec_decode_num_accepted_tokens_per_pos_total") >= 1.0,
        "{m}"
    );
}
