//! A bounded loopback load test on the real model, against the real `agentd serve` binary (its own process, so
//! its memory can be read apart from the other tests): a warm-up round, then 200 concurrent streaming clients,
//! every third hanging up after its first token. Every other response must be complete and well-formed (a
//! `finish_reason`, `[DONE]`), no response may be a 5xx, the server must be healthy and idle afterwards with its
//! memory within 10% of where it started plus its KV-cache budget, and SIGTERM must stop it cleanly. Nothing here asserts on time
//! (see `agentd bench load`).

use std::time::Duration;

use agentd::bench::loadgen::{self, LoadOptions};

use super::{get, ServeProcess};

/// The value of an unlabelled-by-reason gauge in the metrics text.
fn gauge(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Waits until no request runs or waits, then checks `/health`.
async fn idle_and_healthy(root: &str) {
    let mut waited = 0;
    loop {
        let (status, metrics) = get(&format!("{root}/metrics")).await;
        assert_eq!(status, 200);
        let busy = gauge(&metrics, "vllm:num_requests_running")
            + gauge(&metrics, "vllm:num_requests_waiting");
        if busy == 0.0 {
            break;
        }
        assert!(
            waited < 500,
            "requests still running after the load: {busy}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += 1;
    }
    assert_eq!(get(&format!("{root}/health")).await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_streams_a_third_disconnecting() {
    // The KV cache is a pool that keeps what it touched (up to its budget) and the prompts' blocks for reuse: a
    // small budget bounds that part, and whatever grows beyond it would be a leak.
    let kv_mib = 128.0;
    let server = ServeProcess::start(&["--kv-cache-memory", "128MiB"]);
    let root = server.root.clone();
    let (_, models) = get(&format!("{root}/v1/models")).await;
    let models: serde_json::Value = serde_json::from_str(&models).unwrap();
    let opts = |clients: usize| LoadOptions {
        root: root.clone(),
        api_key: None,
        model: models["data"][0]["id"].as_str().unwrap().to_string(),
        clients,
        requests_per_client: 1,
        max_tokens: 4,
        disconnect_every: 3,
        timeout: Duration::from_secs(600),
        ignore_eos: false,
    };
    // Warm-up: allocator arenas, the prefix cache and the grammar-free paths reach their working size.
    let warm = loadgen::run(opts(30)).await;
    assert!(warm.failures().is_empty(), "{:#?}", warm.failures());
    idle_and_healthy(&root).await;
    let start = server.rss_mb().expect("the server's RSS");

    let report = loadgen::run(opts(200)).await;
    let failures = report.failures();
    assert!(failures.is_empty(), "{failures:#?}");
    let s = report.summary();
    assert_eq!(
        (s.requests, s.disconnected, s.completed),
        (200, 66, 134),
        "{s:?}"
    );
    assert!(report
        .outcomes
        .iter()
        .filter(|o| !o.disconnected)
        .all(|o| o.completion_tokens >= 1));
    eprintln!("load: {s:?}");
    idle_and_healthy(&root).await;
    let end = server.rss_mb().expect("the server's RSS");
    eprintln!("server rss after warm-up: {start:.0} MiB, after 200 clients: {end:.0} MiB");
    assert!(
        end <= start * 1.10 + kv_mib,
        "memory grew from {start:.0} to {end:.0} MiB (more than 10% beyond the KV cache's {kv_mib} MiB)"
    );

    // SIGTERM: a clean exit.
    let mut server = server;
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    unsafe {
        libc::kill(server.pid() as libc::pid_t, libc::SIGTERM);
    }
    let mut waited = 0;
    let status = loop {
        if let Some(s) = server.child.try_wait().unwrap() {
            break s;
        }
        assert!(waited < 600, "agentd serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
        waited += 1;
    };
    assert!(status.success(), "{status:?}");
}
