//! `bash`: merged output, exit codes, timeouts and aborts that kill the whole process group, streamed updates,
//! tail truncation with the full output saved.

use std::time::{Duration, Instant};

use agentd::tools::bash::BashTool;
use agentd::tools::tool::Tool;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{ctx, err, ok};

/// Processes of group `pgid` that are still running (zombies, already dead, are not counted).
pub(super) fn live_members(pgid: i32) -> Vec<i32> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the parenthesised command name: state ppid pgrp ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
            && fields[0] != "Z"
            && fields[0] != "X"
        {
            live.push(pid);
        }
    }
    live
}

/// Waits up to 3 s for every process of the group to die.
pub(super) async fn assert_group_dies(pgid: i32) {
    let start = Instant::now();
    while !live_members(pgid).is_empty() && start.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        live_members(pgid),
        Vec::<i32>::new(),
        "processes of group {pgid} survived"
    );
}

#[tokio::test]
async fn runs_in_cwd_with_stdout_and_stderr_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let c = ctx(dir.path());
    let out = ok(
        &BashTool::new(),
        json!({"command": "echo out; echo err >&2; echo out2; pwd"}),
        &c,
    )
    .await;
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(out.content, format!("out\nerr\nout2\n{}\n", cwd.display()));
    assert_eq!(out.details["exit_code"], 0);
    assert_eq!(
        ok(&BashTool::new(), json!({"command": "true"}), &c)
            .await
            .content,
        "(no output)"
    );
}

#[tokio::test]
async fn a_non_zero_exit_is_an_error_with_output_and_code() {
    let dir = tempfile::tempdir().unwrap();
    let text = err(
        &BashTool::new(),
        json!({"command": "echo oops; exit 3"}),
        &ctx(dir.path()),
    )
    .await;
    assert_eq!(text, "oops\n\nCommand exited with code 3");
}

#[tokio::test]
async fn output_is_streamed_as_updates() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = agentd::tools::support::update_channel::update_channel();
    let c = ctx(dir.path()).with_updates(tx);
    let out = ok(
        &BashTool::new(),
        json!({"command": "echo one; sleep 0.3; echo two"}),
        &c,
    )
    .await;
    drop(c);
    let mut updates = Vec::new();
    while let Some(update) = rx.recv().await {
        updates.push(update);
    }
    assert!(updates.len() >= 2, "{updates:?}");
    assert!(updates.iter().all(|u| u.call_id == "call-1"));
    assert_eq!(updates[0].text, "one\n");
    let streamed: String = updates.iter().map(|u| u.text.as_str()).collect();
    assert_eq!(streamed, out.content);
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let text = err(
        &BashTool::new(),
        json!({"command": "sleep 100 & echo $$; wait", "timeout": 0.5}),
        &ctx(dir.path()),
    )
    .await;
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    assert!(
        text.ends_with(
            "Command timed out after 0.5 seconds; it and every process it started were killed."
        ),
        "{text}"
    );
    let pgid: i32 = text.lines().next().unwrap().parse().unwrap();
    assert_group_dies(pgid).await;
}

#[tokio::test]
async fn abort_kills_a_bash_that_spawned_children() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = agentd::tools::support::update_channel::update_channel();
    let cancel = CancellationToken::new();
    let c = ctx(dir.path()).with_updates(tx).with_cancel(cancel.clone());
    let start = Instant::now();
    let task = tokio::spawn(async move {
        BashTool::new()
            .call(
                json!({"command": "echo $$; sleep 100 & sleep 100 & wait"}),
                &c,
            )
            .await
    });
    let first = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    let pgid: i32 = first.text.trim().parse().unwrap();
    // Let both sleeps start.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        live_members(pgid).len() >= 3,
        "shell and two sleeps: {:?}",
        live_members(pgid)
    );
    cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    let text = result.unwrap_err().to_string();
    assert!(
        text.ends_with("Command aborted; it and every process it started were killed."),
        "{text}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_group_dies(pgid).await;
}

#[tokio::test]
async fn long_output_keeps_the_tail_and_saves_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(
        &BashTool::new(),
        json!({"command": "seq 1 5000"}),
        &ctx(dir.path()),
    )
    .await;
    let path = out.details["full_output_path"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(out.content.starts_with("3001\n"), "{}", &out.content[..20]);
    assert!(
        out.content.ends_with(&format!(
            "\n5000\n\n[Showing lines 3001-5000 of 5000. Full output: {path}]"
        )),
        "{}",
        &out.content[out.content.len() - 120..]
    );
    let full = std::fs::read_to_string(&path).unwrap();
    let expected: String = (1..=5000).map(|i| format!("{i}\n")).collect();
    assert_eq!(full, expected);
    std::fs::remove_file(path).unwrap();
}

#[tokio::test]
async fn one_huge_line_keeps_its_last_50kb() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(
        &BashTool::new(),
        json!({"command": "head -c 200000 /dev/zero | tr '\\0' a; echo"}),
        &ctx(dir.path()),
    )
    .await;
    let path = out.details["full_output_path"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        out.content.ends_with(&format!(
            "\n\n[Showing the last 50.0KB of line 1. Full output: {path}]"
        )),
        "{}",
        &out.content[out.content.len() - 120..]
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 200_001);
    std::fs::remove_file(path).unwrap();
}

#[tokio::test]
async fn background_jobs_do_not_block_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let start = Instant::now();
    let out = ok(
        &BashTool::new(),
        json!({"command": "sleep 30 & echo $!"}),
        &ctx(dir.path()),
    )
    .await;
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    let pid: i32 = out.content.trim().parse().unwrap();
    // SAFETY: signalling a child we started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

#[tokio::test]
async fn a_bad_timeout_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = err(
        &BashTool::new(),
        json!({"command": "true", "timeout": -1}),
        &ctx(dir.path()),
    )
    .await;
    assert!(text.contains("timeout must be a positive number"), "{text}");
}
