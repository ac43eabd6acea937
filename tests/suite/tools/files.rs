//! `read` and `write`: truncation notes and continuing with `offset`, binary refusal, atomic writes.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use agentd::tools::read::ReadTool;
use agentd::tools::write::WriteTool;
use serde_json::json;

use super::{ctx, err, ok, put};

fn numbered(n: usize) -> String {
    (1..=n).map(|i| format!("line {i}\n")).collect()
}

#[tokio::test]
async fn read_returns_a_small_file_whole() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "a.txt", "one\ntwo\n");
    let out = ok(&ReadTool::new(), json!({"path": "a.txt"}), &ctx(dir.path())).await;
    assert_eq!(out.content, "one\ntwo\n");
    assert_eq!(out.details["total_lines"], 2);
}

#[tokio::test]
async fn read_truncates_at_2000_lines_and_continues_with_offset() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "big.txt", numbered(5123));
    let (read, c) = (ReadTool::new(), ctx(dir.path()));

    let first = ok(&read, json!({"path": "big.txt"}), &c).await;
    assert!(first.content.starts_with("line 1\n"));
    assert!(
        first
            .content
            .ends_with("line 2000\n\n[Showing lines 1-2000 of 5123. Use offset=2001 to continue.]"),
        "{}",
        &first.content[first.content.len() - 100..]
    );

    let second = ok(&read, json!({"path": "big.txt", "offset": 2001}), &c).await;
    assert!(second.content.starts_with("line 2001\n"));
    assert!(second
        .content
        .ends_with("line 4000\n\n[Showing lines 2001-4000 of 5123. Use offset=4001 to continue.]"));

    let last = ok(&read, json!({"path": "big.txt", "offset": 4001}), &c).await;
    assert!(last.content.starts_with("line 4001\n"));
    assert!(
        last.content.ends_with("line 5123\n"),
        "no note after the last page"
    );
    assert_eq!(last.details["end_line"], 5123);
}

#[tokio::test]
async fn read_truncates_at_50kb_on_a_line_boundary() {
    let dir = tempfile::tempdir().unwrap();
    put(
        dir.path(),
        "wide.txt",
        format!("{}\n", "x".repeat(999)).repeat(100),
    );
    let out = ok(
        &ReadTool::new(),
        json!({"path": "wide.txt"}),
        &ctx(dir.path()),
    )
    .await;
    assert!(
        out.content.ends_with(
            "\n\n[Showing lines 1-51 of 100 (50.0KB limit). Use offset=52 to continue.]"
        ),
        "{}",
        &out.content[out.content.len() - 100..]
    );
}

#[tokio::test]
async fn read_with_limit_says_how_many_lines_remain() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "a.txt", numbered(10));
    let out = ok(
        &ReadTool::new(),
        json!({"path": "a.txt", "offset": 3, "limit": 2}),
        &ctx(dir.path()),
    )
    .await;
    assert_eq!(
        out.content,
        "line 3\nline 4\n\n[6 more lines in file. Use offset=5 to continue.]"
    );
}

#[tokio::test]
async fn read_offset_past_the_end_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "a.txt", numbered(10));
    let text = err(
        &ReadTool::new(),
        json!({"path": "a.txt", "offset": 11}),
        &ctx(dir.path()),
    )
    .await;
    assert_eq!(
        text,
        "Offset 11 is beyond the end of a.txt (10 lines total)."
    );
}

#[tokio::test]
async fn read_refuses_binary_files() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "nul.bin", b"ELF\0\x01\x02text");
    put(dir.path(), "latin1.txt", b"caf\xe9 cr\xe8me\n");
    let (read, c) = (ReadTool::new(), ctx(dir.path()));
    let nul = err(&read, json!({"path": "nul.bin"}), &c).await;
    assert!(nul.contains("binary") && nul.contains("NUL"), "{nul}");
    let latin1 = err(&read, json!({"path": "latin1.txt"}), &c).await;
    assert!(
        latin1.contains("binary") && latin1.contains("UTF-8"),
        "{latin1}"
    );
}

#[tokio::test]
async fn read_reports_missing_files_and_directories() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let (read, c) = (ReadTool::new(), ctx(dir.path()));
    assert!(err(&read, json!({"path": "nope.txt"}), &c)
        .await
        .contains("Cannot read nope.txt"));
    assert!(err(&read, json!({"path": "sub"}), &c)
        .await
        .contains("is a directory"));
    assert!(err(&read, json!({"offset": 1}), &c)
        .await
        .contains("Invalid arguments for read"));
}

#[tokio::test]
async fn write_creates_parents_and_reports_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(
        &WriteTool::new(),
        json!({"path": "a/b/c.txt", "content": "héllo\n"}),
        &ctx(dir.path()),
    )
    .await;
    // What the file now holds, not a byte count a small model would copy.
    assert_eq!(
        out.content,
        "Created a/b/c.txt. It now reads:\nhéllo\nIf the task is done, reply with a short summary; otherwise make \
         the next change."
    );
    assert_eq!(out.details["bytes"], 7);
    assert_eq!(out.details["created"], true);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
        "héllo\n"
    );
}

#[tokio::test]
async fn write_replaces_atomically_keeping_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.txt");
    put(dir.path(), "f.txt", "old content\n");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let before = std::fs::metadata(&path).unwrap().ino();
    // A reader that opened the file before the write keeps seeing the old content: the new file is a new inode
    // renamed over the old name, never the old file rewritten in place.
    let held = std::fs::File::open(&path).unwrap();

    let out = ok(
        &WriteTool::new(),
        json!({"path": "f.txt", "content": "new\n"}),
        &ctx(dir.path()),
    )
    .await;
    assert_eq!(out.details["created"], false);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
    let meta = std::fs::metadata(&path).unwrap();
    assert_ne!(meta.ino(), before);
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    assert_eq!(std::io::read_to_string(held).unwrap(), "old content\n");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["f.txt"], "no temp file left behind");
}

#[tokio::test]
async fn write_refuses_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let text = err(
        &WriteTool::new(),
        json!({"path": "sub", "content": "x"}),
        &ctx(dir.path()),
    )
    .await;
    assert!(text.contains("directory"), "{text}");
}
