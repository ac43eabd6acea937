//! `edit`: exactly-once matching (overlaps counted), all-or-nothing, BOM and CRLF preserved, diff and first
//! changed line.

use agentd::tools::edit::EditTool;
use serde_json::json;

use super::{ctx, err, ok, put};

fn ten_lines() -> String {
    (1..=10).map(|i| format!("line {i}\n")).collect()
}

#[tokio::test]
async fn edit_returns_a_diff_and_the_first_changed_line() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "f.txt", ten_lines());
    let out = ok(
        &EditTool::new(),
        json!({"path": "f.txt", "edits": [{"old_text": "line 5\n", "new_text": "LINE FIVE\n"}]}),
        &ctx(dir.path()),
    )
    .await;
    assert!(out
        .content
        .starts_with("Successfully replaced 1 block in f.txt."));
    assert!(out.content.contains("@@ -2,7 +2,7 @@"), "{}", out.content);
    assert!(
        out.content.contains("\n-line 5\n+LINE FIVE\n"),
        "{}",
        out.content
    );
    assert_eq!(out.details["first_changed_line"], 5);
    assert!(out.details["diff"].as_str().unwrap().contains("+LINE FIVE"));
    let expected = ten_lines().replace("line 5\n", "LINE FIVE\n");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        expected
    );
}

#[tokio::test]
async fn several_edits_match_the_original_and_apply_together() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "f.txt", ten_lines());
    let out = ok(
        &EditTool::new(),
        json!({"path": "f.txt", "edits": [
            {"old_text": "line 9", "new_text": "nine"},
            {"old_text": "line 2\nline 3", "new_text": "two-three"},
        ]}),
        &ctx(dir.path()),
    )
    .await;
    assert!(out
        .content
        .starts_with("Successfully replaced 2 blocks in f.txt."));
    assert_eq!(out.details["first_changed_line"], 2);
    let text = std::fs::read_to_string(dir.path().join("f.txt")).unwrap();
    assert_eq!(
        text,
        "line 1\ntwo-three\nline 4\nline 5\nline 6\nline 7\nline 8\nnine\nline 10\n"
    );
}

#[tokio::test]
async fn overlapping_occurrences_count() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "f.txt", "aaa");
    let text = err(
        &EditTool::new(),
        json!({"path": "f.txt", "edits": [{"old_text": "aa", "new_text": "b"}]}),
        &ctx(dir.path()),
    )
    .await;
    assert!(
        text.starts_with("Found 2 occurrences of the text in f.txt"),
        "{text}"
    );
}

#[tokio::test]
async fn not_found_and_multiple_matches_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "f.txt", "x = 1\ny = 2\nx = 1\n");
    let (edit, c) = (EditTool::new(), ctx(dir.path()));
    let missing = err(
        &edit,
        json!({"path": "f.txt", "edits": [{"old_text": "z = 3", "new_text": "z"}]}),
        &c,
    )
    .await;
    assert!(
        missing.starts_with("Could not find the exact text in f.txt."),
        "{missing}"
    );
    // The model gets the file's text to copy from instead of guessing again.
    let text = std::fs::read_to_string(dir.path().join("f.txt")).unwrap();
    assert!(
        missing.ends_with(&format!("The file's current text:\n{text}")),
        "{missing}"
    );
    let twice = err(
        &edit,
        json!({"path": "f.txt", "edits": [{"old_text": "x = 1", "new_text": "x"}]}),
        &c,
    )
    .await;
    assert!(
        twice.contains("Found 2 occurrences") && twice.contains("exactly once"),
        "{twice}"
    );
    let empty = err(
        &edit,
        json!({"path": "f.txt", "edits": [{"old_text": "", "new_text": "x"}]}),
        &c,
    )
    .await;
    assert!(empty.contains("old_text is empty"), "{empty}");
    let noop = err(
        &edit,
        json!({"path": "f.txt", "edits": [{"old_text": "y = 2", "new_text": "y = 2"}]}),
        &c,
    )
    .await;
    assert!(noop.contains("identical"), "{noop}");
    let none = err(&edit, json!({"path": "f.txt", "edits": []}), &c).await;
    assert!(none.contains("No edits"), "{none}");
    let absent = err(
        &edit,
        json!({"path": "nope.txt", "edits": [{"old_text": "a", "new_text": "b"}]}),
        &c,
    )
    .await;
    assert!(absent.contains("Cannot read nope.txt"), "{absent}");
}

#[tokio::test]
async fn a_failing_edit_leaves_the_file_untouched() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "f.txt", ten_lines());
    let (edit, c) = (EditTool::new(), ctx(dir.path()));
    let text = err(
        &edit,
        json!({"path": "f.txt", "edits": [
            {"old_text": "line 1\n", "new_text": "first\n"},
            {"old_text": "line 99", "new_text": "never"},
        ]}),
        &c,
    )
    .await;
    assert!(text.starts_with("edits[1]: Could not find"), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        ten_lines()
    );

    let overlap = err(
        &edit,
        json!({"path": "f.txt", "edits": [
            {"old_text": "line 3\nline 4", "new_text": "a"},
            {"old_text": "line 4\nline 5", "new_text": "b"},
        ]}),
        &c,
    )
    .await;
    assert!(
        overlap.contains("edits[0] and edits[1] overlap"),
        "{overlap}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        ten_lines()
    );
}

#[tokio::test]
async fn bom_and_crlf_are_preserved() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "win.txt", "\u{feff}alpha\r\nbeta\r\ngamma\r\n");
    let c = ctx(dir.path());
    // The model writes LF; matching happens on LF-normalised text.
    let out = ok(
        &EditTool::new(),
        json!({"path": "win.txt", "edits": [{"old_text": "alpha\nbeta", "new_text": "ALPHA\nBETA\nextra"}]}),
        &c,
    )
    .await;
    assert_eq!(out.details["first_changed_line"], 1);
    let bytes = std::fs::read(dir.path().join("win.txt")).unwrap();
    assert_eq!(
        bytes,
        "\u{feff}ALPHA\r\nBETA\r\nextra\r\ngamma\r\n".as_bytes()
    );
    // old_text written with CRLF matches as well.
    ok(
        &EditTool::new(),
        json!({"path": "win.txt", "edits": [{"old_text": "extra\r\ngamma", "new_text": "end"}]}),
        &c,
    )
    .await;
    let bytes = std::fs::read(dir.path().join("win.txt")).unwrap();
    assert_eq!(bytes, "\u{feff}ALPHA\r\nBETA\r\nend\r\n".as_bytes());
}

#[tokio::test]
async fn binary_files_are_not_edited() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "b.bin", b"a\0b");
    let text = err(
        &EditTool::new(),
        json!({"path": "b.bin", "edits": [{"old_text": "a", "new_text": "c"}]}),
        &ctx(dir.path()),
    )
    .await;
    assert!(text.contains("binary"), "{text}");
}
