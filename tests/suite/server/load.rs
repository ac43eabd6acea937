//! A bounded loopback load test on the real model: 50 concurrent streaming clients, every fifth hanging up after
//! its first token. Every other response must be complete and well-formed, the server healthy and idle
//! afterwards, and memory flat across two rounds. Nothing here asserts on time (see `agentd bench load`).

use std::time::Duration;

use agentd::server::loadgen::{self, LoadOptions};
use agentd::server::ServerOptions;

use super::{get, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_streams_some_disconnecting() {
    let server = TestServer::local(ServerOptions::default()).await;
    let opts = LoadOptions {
        root: server.root.clone(),
        api_key: None,
        model: super::super::common::engine().info().name.clone(),
        clients: 50,
        requests_per_client: 1,
        max_tokens: 4,
        disconnect_every: 5,
        timeout: Duration::from_secs(600),
    };
    let mut rss = Vec::new();
    for round in 0..2 {
        let report = loadgen::run(opts.clone()).await;
        let failures = report.failures();
        assert!(failures.is_empty(), "round {round}: {failures:#?}");
        let s = report.summary();
        assert_eq!(
            (s.requests, s.disconnected, s.completed),
            (50, 10, 40),
            "{s:?}"
        );
        assert!(report
            .outcomes
            .iter()
            .filter(|o| !o.disconnected)
            .all(|o| o.completion_tokens >= 1));
        eprintln!("load round {round}: {s:?}");
        // Healthy and idle: every slot is back (the hung-up streams included).
        let mut waited = 0;
        while server.state.admission.running() + server.state.admission.waiting() > 0 {
            assert!(waited < 500, "requests still running after the load");
            tokio::time::sleep(Duration::from_millis(20)).await;
            waited += 1;
        }
        assert_eq!(get(&server.url("/health")).await.0, 200);
        rss.extend(loadgen::rss_mb());
    }
    let (_, metrics) = get(&server.url("/metrics")).await;
    assert!(
        metrics.contains("vllm:e2e_request_latency_seconds_count"),
        "{metrics}"
    );
    if let [first, second] = rss[..] {
        eprintln!("rss after round 1: {first:.0} MiB, after round 2: {second:.0} MiB");
        assert!(
            second - first < 64.0,
            "memory grew by {:.0} MiB",
            second - first
        );
    }
}
