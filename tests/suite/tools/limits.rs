//! Tools never load the unbounded: `read` streams a 10 GB file to show its first page (memory measured in a child
//! process), `edit` refuses files over its size limit, `grep` skips huge files and survives a line longer than its
//! buffer limit.

use agentd::tools::edit::{EditTool, MAX_EDIT_BYTES};
use agentd::tools::grep::{GrepTool, MAX_GREP_FILE_BYTES, MAX_GREP_LINE_BYTES};
use agentd::tools::read::ReadTool;
use serde_json::json;

use super::{ctx, err, in_probe, ok, peak_rss_kib, put, rss_kib, run_probe};

const TEN_GIB: u64 = 10 * 1024 * 1024 * 1024;

/// `line 1\n` … `line {n}\n`.
fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

/// Writes `head` to `dir/name` and extends the file to `len` bytes with a hole (zeros that take no disk space).
fn sparse(dir: &std::path::Path, name: &str, head: &str, len: u64) {
    put(dir, name, head);
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(name))
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// Run alone by `read_shows_the_first_page_of_a_10gb_file_without_loading_it`; does nothing in a normal run.
#[tokio::test]
#[ignore = "probe: run in a child process by read_shows_the_first_page_of_a_10gb_file_without_loading_it"]
async fn huge_read_probe() {
    if !in_probe() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // 3,000 short lines (the binary sniff sees text), then 10 GB of zeros: line 3001 never ends.
    sparse(dir.path(), "huge.log", &numbered(3000), TEN_GIB);
    let (read, c) = (ReadTool::new(), ctx(dir.path()));
    let before = rss_kib();

    let first = ok(&read, json!({"path": "huge.log"}), &c).await;
    assert!(first.content.starts_with("line 1\nline 2\n"));
    assert!(
        first.content.ends_with(
            "line 2000\n\n[Showing lines 1-2000 of a 10.0GB file. Use offset=2001 to continue.]"
        ),
        "{}",
        &first.content[first.content.len() - 120..]
    );
    assert_eq!(first.details["total_lines"], serde_json::Value::Null);
    assert_eq!(first.details["file_bytes"], TEN_GIB);

    let second = ok(&read, json!({"path": "huge.log", "offset": 2001}), &c).await;
    assert!(second.content.starts_with("line 2001\n"));
    assert!(
        second.content.ends_with(
            "line 3000\n\n[Showing lines 2001-3000 of a 10.0GB file (50.0KB limit). Use offset=3001 to continue.]"
        ),
        "{}",
        &second.content[second.content.len() - 120..]
    );

    let third = ok(&read, json!({"path": "huge.log", "offset": 3001}), &c).await;
    assert_eq!(
        third.content,
        "[Line 3001 is over the 50.0KB limit. Use bash: sed -n '3001p' huge.log | head -c 51200]"
    );

    let limited = ok(
        &read,
        json!({"path": "huge.log", "offset": 10, "limit": 2}),
        &c,
    )
    .await;
    assert_eq!(
        limited.content,
        "line 10\nline 11\n\n[More lines in a 10.0GB file. Use offset=12 to continue.]"
    );

    println!(
        "PROBE rss_before_kib={before} rss_after_kib={} peak_kib={}",
        rss_kib(),
        peak_rss_kib()
    );
}

#[test]
fn read_shows_the_first_page_of_a_10gb_file_without_loading_it() {
    let probe = run_probe("suite::tools::limits::huge_read_probe");
    let kib = |k: &str| probe[k].parse::<u64>().unwrap();
    let (before, after, peak) = (kib("rss_before_kib"), kib("rss_after_kib"), kib("peak_kib"));
    eprintln!("read of a 10 GB file: RSS {before} KiB before, {after} KiB after, peak {peak} KiB");
    // Generous: the page is ~100 KB; loading the file would be 10 GB.
    assert!(
        peak < before + 50 * 1024,
        "peak RSS {peak} KiB vs {before} KiB before"
    );
}

#[tokio::test]
async fn read_counts_lines_of_files_up_to_the_count_limit() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "a.txt", numbered(2500));
    let out = ok(
        &ReadTool::new(),
        json!({"path": "a.txt", "offset": 2, "limit": 3}),
        &ctx(dir.path()),
    )
    .await;
    assert_eq!(
        out.content,
        "line 2\nline 3\nline 4\n\n[2496 more lines in file. Use offset=5 to continue.]"
    );
    assert_eq!(out.details["total_lines"], 2500);
    assert_eq!(out.details["end_line"], 4);
}

#[tokio::test]
async fn read_edge_cases_keep_their_old_answers() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "empty.txt", "");
    put(dir.path(), "nl.txt", "\n");
    put(dir.path(), "open.txt", "a\nb");
    put(dir.path(), "bom.txt", "\u{feff}x\ny\n");
    let (read, c) = (ReadTool::new(), ctx(dir.path()));
    let content = |v: serde_json::Value| {
        let (read, c) = (&read, &c);
        async move { ok(read, v, c).await.content }
    };
    assert_eq!(content(json!({"path": "empty.txt"})).await, "(empty file)");
    assert_eq!(content(json!({"path": "nl.txt"})).await, "\n");
    assert_eq!(content(json!({"path": "open.txt"})).await, "a\nb");
    assert_eq!(content(json!({"path": "open.txt", "offset": 2})).await, "b");
    assert_eq!(content(json!({"path": "bom.txt"})).await, "x\ny\n");
    assert_eq!(
        content(json!({"path": "bom.txt", "limit": 2})).await,
        "x\ny\n",
        "a limit that ends at the last line shows the file's end"
    );
    assert_eq!(
        err(&read, json!({"path": "empty.txt", "offset": 2}), &c).await,
        "Offset 2 is beyond the end of empty.txt (0 lines total)."
    );
    assert_eq!(
        err(&read, json!({"path": "open.txt", "limit": 0}), &c).await,
        "limit must be at least 1."
    );
}

#[tokio::test]
async fn edit_refuses_a_file_over_its_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    sparse(dir.path(), "big.txt", "hello\n", MAX_EDIT_BYTES + 1);
    let text = err(
        &EditTool::new(),
        json!({"path": "big.txt", "edits": [{"old_text": "hello", "new_text": "bye"}]}),
        &ctx(dir.path()),
    )
    .await;
    assert_eq!(
        text,
        "big.txt is 10.0MB, over edit's 10.0MB limit; change a file this large with bash (sed, a script)."
    );
    let meta = std::fs::metadata(dir.path().join("big.txt")).unwrap();
    assert_eq!(meta.len(), MAX_EDIT_BYTES + 1, "left untouched");
}

#[tokio::test]
async fn edit_still_edits_a_file_at_its_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    let line = "0123456789abcdef0123456789abcde\n"; // 32 bytes
    let mut content = line.repeat(usize::try_from(MAX_EDIT_BYTES).unwrap() / line.len() - 1);
    content.push_str("the last line\n");
    content.push_str(&"x".repeat(usize::try_from(MAX_EDIT_BYTES).unwrap() - content.len()));
    assert_eq!(content.len() as u64, MAX_EDIT_BYTES);
    put(dir.path(), "edge.txt", &content);
    let out = ok(
        &EditTool::new(),
        json!({"path": "edge.txt", "edits": [{"old_text": "the last line", "new_text": "THE LAST LINE"}]}),
        &ctx(dir.path()),
    )
    .await;
    assert!(
        out.content.starts_with("Edited edge.txt."),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn grep_skips_files_over_its_size_limit_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "small.log", "needle here\n");
    sparse(
        dir.path(),
        "big.log",
        "needle there\n",
        MAX_GREP_FILE_BYTES + 1,
    );
    let (grep, c) = (GrepTool::new(), ctx(dir.path()));
    let out = ok(&grep, json!({"pattern": "needle"}), &c).await;
    assert_eq!(
        out.content,
        "small.log:1: needle here\n\n[Skipped 1 file over 64.0MB (big.log); search it with bash (rg, grep)]"
    );
    assert_eq!(out.details["skipped_large_files"], 1);
    let direct = ok(&grep, json!({"pattern": "needle", "path": "big.log"}), &c).await;
    assert_eq!(
        direct.content,
        "No matches found\n\n[Skipped 1 file over 64.0MB (big.log); search it with bash (rg, grep)]"
    );
}

#[tokio::test]
async fn grep_gives_up_on_a_line_longer_than_its_buffer_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut long = "y".repeat(MAX_GREP_LINE_BYTES + 1024);
    long.push_str(" needle\n");
    put(dir.path(), "a_long.txt", long);
    put(dir.path(), "b_short.txt", "needle\n");
    let out = ok(
        &GrepTool::new(),
        json!({"pattern": "needle"}),
        &ctx(dir.path()),
    )
    .await;
    assert_eq!(out.content, "b_short.txt:1: needle");
    assert_eq!(out.details["unreadable_files"], 1);
}
