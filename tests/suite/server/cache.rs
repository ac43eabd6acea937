//! The response cache in `agentd serve`: the real binary with `--cache` (and a config file naming the SQLite
//! file) on the real default model. The second identical temperature-0 request is a hit on `/metrics` and gets
//! the same answer; a changed tool schema or a sampled request is not served from the cache.

use serde_json::{json, Value};

use super::{client, post};

/// The value of a metric line `name{...} value`.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

fn request(city_type: &str, temperature: f64) -> Value {
    json!({
        "messages": [{"role": "user", "content": "Say one word about the sea."}],
        "temperature": temperature,
        "max_tokens": 8,
        "tools": [{"type": "function", "function": {"name": "weather", "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": city_type}}, "required": ["city"]}}}],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_repeated_greedy_requests_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentd.toml");
    let db = dir.path().join("responses.sqlite");
    std::fs::write(
        &config,
        format!("[cache]\npath = {:?}\n", db.display().to_string()),
    )
    .unwrap();
    let server = super::ServeProcess::start(&["--cache", "--config", config.to_str().unwrap()]);
    let chat = format!("{}/v1/chat/completions", server.root);
    let (s1, first) = post(&chat, &request("string", 0.0)).await;
    assert_eq!(s1, 200, "{first}");
    let (s2, second) = post(&chat, &request("string", 0.0)).await;
    assert_eq!(s2, 200, "{second}");
    assert_eq!(first["choices"], second["choices"], "replayed verbatim");
    assert_eq!(first["usage"], second["usage"]);
    let metrics = |server_root: String| async move {
        client()
            .get(format!("{server_root}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let m = metrics(server.root.clone()).await;
    assert_eq!(metric(&m, "agentd:response_cache_hits_total"), 1, "{m}");
    assert_eq!(metric(&m, "agentd:response_cache_misses_total"), 1);
    assert_eq!(metric(&m, "agentd:response_cache_stores_total"), 1);

    // Another tool schema is another key; a sampled request is never cached.
    let (s3, _) = post(&chat, &request("integer", 0.0)).await;
    assert_eq!(s3, 200);
    let (s4, _) = post(&chat, &request("string", 0.7)).await;
    assert_eq!(s4, 200);
    let m = metrics(server.root.clone()).await;
    assert_eq!(metric(&m, "agentd:response_cache_hits_total"), 1, "{m}");
    assert_eq!(metric(&m, "agentd:response_cache_misses_total"), 2);
    assert_eq!(metric(&m, "agentd:response_cache_bypassed_total"), 1);
    assert!(db.exists(), "the configured cache file is used");
}
