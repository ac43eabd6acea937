//! `bash` hardening: a timeout in every call, bounded and coalesced updates, bounded memory under unbounded
//! output (measured in a child process), and the session's resources (background process groups, overflow logs)
//! cleaned when the session closes them.

use std::time::{Duration, Instant};

use agentd::tools::bash::{BashTool, DEFAULT_BASH_TIMEOUT, MAX_BASH_TIMEOUT, MAX_OUTPUT_LOG_BYTES};
use agentd::tools::support::session_resources::{Cleaned, SessionResources};
use agentd::tools::support::update_channel::{update_channel, UPDATE_CHANNEL_CAPACITY};
use agentd::tools::tool::{Tool, ToolError};
use serde_json::json;

use super::bash::{assert_group_dies, live_members};
use super::{ctx, err, in_probe, ok, peak_rss_kib, rss_kib, run_probe};

#[test]
fn every_call_has_a_timeout() {
    let bash = BashTool::new();
    assert_eq!(DEFAULT_BASH_TIMEOUT, Duration::from_secs(120));
    assert_eq!(bash.default_timeout(), DEFAULT_BASH_TIMEOUT);
    assert_eq!(bash.timeout_for(None).unwrap(), DEFAULT_BASH_TIMEOUT);
    assert_eq!(
        bash.timeout_for(Some(0.5)).unwrap(),
        Duration::from_millis(500)
    );
    assert_eq!(bash.timeout_for(Some(1e12)).unwrap(), MAX_BASH_TIMEOUT);
    // No configured default still means a bounded call: the maximum.
    let unset = BashTool::new().with_default_timeout(None);
    assert_eq!(unset.timeout_for(None).unwrap(), MAX_BASH_TIMEOUT);
    let configured = BashTool::new().with_default_timeout(Some(Duration::from_secs(5)));
    assert_eq!(
        configured.timeout_for(None).unwrap(),
        Duration::from_secs(5)
    );
    assert!(matches!(
        bash.timeout_for(Some(f64::NAN)),
        Err(ToolError::RespondToModel(_))
    ));
}

#[tokio::test]
async fn the_configured_default_and_maximum_end_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let text = err(
        &BashTool::new().with_default_timeout(Some(Duration::from_millis(300))),
        json!({"command": "sleep 30"}),
        &c,
    )
    .await;
    assert!(
        text.ends_with(
            "Command timed out after 0.3 seconds; it and every process it started were killed."
        ),
        "{text}"
    );
    let text = err(
        &BashTool::new().with_max_timeout(Duration::from_millis(300)),
        json!({"command": "sleep 30", "timeout": 100}),
        &c,
    )
    .await;
    assert!(text.contains("timed out after 0.3 seconds"), "{text}");
}

/// A consumer that only starts reading once the command produced ~15 MB: the channel fills, the rest is merged
/// and cut to its tail, and the next update says how much was skipped. The stream still ends with the output's
/// end.
#[tokio::test]
async fn a_slow_consumer_gets_coalesced_updates_ending_with_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = update_channel();
    let c = ctx(dir.path()).with_updates(tx);
    let done = dir.path().join("done");
    let consumer = tokio::spawn(async move {
        while !done.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut updates = Vec::new();
        while let Some(u) = rx.recv().await {
            updates.push(u);
        }
        updates
    });
    let out = ok(
        &BashTool::new(),
        json!({"command": "seq 1 2000000; touch done; sleep 0.5; echo end"}),
        &c,
    )
    .await;
    drop(c);
    let updates = tokio::time::timeout(Duration::from_secs(10), consumer)
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.content.contains("\n1999999\n2000000\nend\n"),
        "{}",
        &out.content[out.content.len() - 200..]
    );
    let first_skip = updates
        .iter()
        .position(|u| u.text.contains(" of output not streamed ...]\n"))
        .expect("an update says output was skipped");
    assert!(
        first_skip >= UPDATE_CHANNEL_CAPACITY,
        "the channel holds {UPDATE_CHANNEL_CAPACITY} updates before anything is skipped; skipped at {first_skip}"
    );
    let streamed: String = updates.iter().map(|u| u.text.as_str()).collect();
    assert!(streamed.starts_with("1\n2\n3\n"));
    assert!(
        streamed.ends_with("1999999\n2000000\nend\n"),
        "{}",
        &streamed[streamed.len().saturating_sub(200)..]
    );
    let full_len = out.details["total_bytes"].as_u64().unwrap();
    assert!(
        (streamed.len() as u64) < full_len,
        "older output was dropped"
    );
    assert!(updates.iter().all(|u| u.text.len() <= 200 * 1024));
    if let Some(path) = out.details["full_output_path"].as_str() {
        std::fs::remove_file(path).unwrap();
    }
}

/// Run alone by `unbounded_output_keeps_memory_flat_and_ends_by_timeout`; does nothing in a normal run.
#[tokio::test]
#[ignore = "probe: run in a child process by unbounded_output_keeps_memory_flat_and_ends_by_timeout"]
async fn yes_probe() {
    if !in_probe() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let resources = SessionResources::new();
    // A listener that never reads: the worst consumer.
    let (tx, rx) = update_channel();
    let c = ctx(dir.path())
        .with_updates(tx)
        .with_resources(resources.clone());
    let before = rss_kib();
    let text = err(
        &BashTool::new(),
        json!({"command": "yes", "timeout": 3}),
        &c,
    )
    .await;
    let after = rss_kib();
    assert!(
        text.ends_with(
            "Command timed out after 3 seconds; it and every process it started were killed."
        ),
        "{}",
        &text[text.len().saturating_sub(300)..]
    );
    assert!(text.starts_with("y\ny\n"));
    let note = text.lines().rev().nth(2).unwrap();
    assert!(
        note.starts_with("[Showing lines ") && note.contains("The first 100.0MB of the output: "),
        "{note}"
    );
    let logs = resources.files();
    assert_eq!(logs.len(), 1);
    let log_len = std::fs::metadata(&logs[0]).unwrap().len();
    assert_eq!(log_len, MAX_OUTPUT_LOG_BYTES, "the log is capped");
    assert!(rx.len() <= UPDATE_CHANNEL_CAPACITY);
    let cleaned = resources.close();
    assert_eq!(cleaned.removed_files, 1);
    assert!(!logs[0].exists());
    println!(
        "PROBE rss_before_kib={before} rss_after_kib={after} peak_kib={} queued_updates={}",
        peak_rss_kib(),
        rx.len()
    );
}

#[test]
fn unbounded_output_keeps_memory_flat_and_ends_by_timeout() {
    let probe = run_probe("suite::tools::bash_session::yes_probe");
    let kib = |k: &str| probe[k].parse::<u64>().unwrap();
    let (before, after, peak) = (kib("rss_before_kib"), kib("rss_after_kib"), kib("peak_kib"));
    eprintln!(
        "yes for 3 s: RSS {before} KiB before, {after} KiB after, peak {peak} KiB, {} updates queued",
        probe["queued_updates"]
    );
    assert!(
        after < before + 50 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    assert!(
        peak < before + 50 * 1024,
        "peak RSS {peak} KiB vs {before} KiB before"
    );
}

#[tokio::test]
async fn closing_the_session_kills_its_background_jobs_and_deletes_its_logs() {
    let dir = tempfile::tempdir().unwrap();
    let resources = SessionResources::new();
    let c = ctx(dir.path()).with_resources(resources.clone());
    let bash = BashTool::new();
    let out = ok(&bash, json!({"command": "sleep 300 & echo $$"}), &c).await;
    let pgid: i32 = out.content.trim().parse().unwrap();
    let long = ok(&bash, json!({"command": "seq 1 5000"}), &c).await;
    let log = std::path::PathBuf::from(long.details["full_output_path"].as_str().unwrap());
    assert!(log.exists());
    assert_eq!(resources.files(), vec![log.clone()]);
    assert_eq!(
        live_members(pgid).len(),
        1,
        "the background sleep outlives its call"
    );

    let cleaned = resources.close();
    assert_eq!(
        cleaned,
        Cleaned {
            killed_groups: 1,
            removed_files: 1
        }
    );
    assert_group_dies(pgid).await;
    assert!(!log.exists());
    assert_eq!(
        resources.close(),
        Cleaned::default(),
        "closing twice is harmless"
    );

    // A call after the close is cleaned at once: its group is killed as soon as it is tracked.
    let start = Instant::now();
    let late = BashTool::new()
        .call(json!({"command": "sleep 30"}), &c)
        .await;
    assert!(start.elapsed() < Duration::from_secs(10));
    assert_eq!(
        late,
        Err(ToolError::RespondToModel(
            "Command was killed by signal 9".into()
        ))
    );
}

#[tokio::test]
async fn dropping_the_last_handle_closes_the_session_resources() {
    let dir = tempfile::tempdir().unwrap();
    let resources = SessionResources::new();
    let out = ok(
        &BashTool::new(),
        json!({"command": "sleep 300 & echo $$"}),
        &ctx(dir.path()).with_resources(resources.clone()),
    )
    .await;
    let pgid: i32 = out.content.trim().parse().unwrap();
    assert_eq!(live_members(pgid).len(), 1);
    drop(resources);
    assert_group_dies(pgid).await;
}
