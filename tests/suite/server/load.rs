//! A bounded loopback load test on the real model, against the real `agentd serve` binary (its own process, so
//! its memory can be read apart from the other tests): 50 concurrent streaming clients, every fifth hanging up
//! after its first token, in two rounds. Every other response must be complete and well-formed, the server
//! healthy and idle afterwards, its memory flat from one round to the next, and SIGTERM must stop it cleanly.
//! Nothing here asserts on time (see `agentd bench load`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agentd::bench::loadgen::{self, LoadOptions};

use super::get;

/// `agentd serve --port 0` on the default model file; returns the child and its root URL.
fn spawn_server() -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["serve", "--port", "0", "--model"])
        .arg(super::super::common::smollm2_path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start agentd serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let root = loop {
        let line = lines
            .next()
            .expect("agentd serve exited")
            .expect("read stdout");
        if let Some(rest) = line.split("http://").nth(1) {
            break format!("http://{}", rest.split_whitespace().next().unwrap_or(""));
        }
    };
    (child, root)
}

fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
}

/// The value of an unlabelled-by-reason gauge in the metrics text.
fn gauge(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_streams_some_disconnecting() {
    let (mut child, root) = spawn_server();
    let (_, models) = get(&format!("{root}/v1/models")).await;
    let models: serde_json::Value = serde_json::from_str(&models).unwrap();
    let opts = LoadOptions {
        root: root.clone(),
        api_key: None,
        model: models["data"][0]["id"].as_str().unwrap().to_string(),
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
        // Healthy and idle: every slot is back (the hung-up streams' included).
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
        rss.extend(rss_mb(child.id()));
    }
    if let [first, second] = rss[..] {
        eprintln!("server rss after round 1: {first:.0} MiB, after round 2: {second:.0} MiB");
        assert!(
            second - first < 64.0,
            "memory grew by {:.0} MiB",
            second - first
        );
    }
    // SIGTERM: a clean exit.
    // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let mut waited = 0;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(waited < 600, "agentd serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
        waited += 1;
    };
    assert!(status.success(), "{status:?}");
}
