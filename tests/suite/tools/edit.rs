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
    // The model sees the lines as they now read (no diff, no numbers to copy) and how to finish.
    assert!(
        out.content.starts_with(
            "Edited f.txt. The changed part of f.txt now reads:\nline 4\nLINE FIVE\nline 6\n"
        ),
        "{}",
        out.content
    );
    assert!(out
        .content
        .contains("If the task is done, reply with a short summary"));
    assert!(!out.content.contains("@@"), "{}", out.content);
    let diff = out.details["diff"].as_str().unwrap();
    assert!(
        diff.contains("@@ -2,7 +2,7 @@") && diff.contains("\n-line 5\n+LINE FIVE\n"),
        "{diff}"
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
    assert!(
        out.content
            .contains("line 1\ntwo-three\nline 4\n…\nline 8\nnine\nline 10\n"),
        "{}",
        out.content
    );
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
        text.starts_with("old_text occurs 2 times in f.txt, at lines 1, 1;"),
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
        missing.starts_with("Could not find old_text in f.txt."),
        "{missing}"
    );
    // The closest real lines, numbered, to copy from instead of guessing again.
    assert!(missing.contains("closest lines in f.txt"), "{missing}");
    assert!(
        missing.contains("2 | y = 2") || missing.contains("1 | x = 1"),
        "{missing}"
    );
    let twice = err(
        &edit,
        json!({"path": "f.txt", "edits": [{"old_text": "x = 1", "new_text": "x"}]}),
        &c,
    )
    .await;
    assert!(
        twice.contains("occurs 2 times")
            && twice.contains("lines 1, 3")
            && twice.contains("exactly once"),
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

/// Each rung of the forgiving match through the real tool: the file ends right and the result names the rule.
#[tokio::test]
async fn every_forgiving_rung_lands_and_says_which_rule_matched() {
    let dir = tempfile::tempdir().unwrap();
    let py = "class K:\n    def m(self):\n        x = \"hi\"  \n        return x\n\n\ndef f():\n    return 1\n";
    let c = ctx(dir.path());
    let cases: [(&str, &str, &str, &str); 4] = [
        // Trailing whitespace in the file, not in old_text.
        (
            "        x = \"hi\"\n        return x",
            "        x = \"ho\"\n        return x",
            "ignoring trailing whitespace",
            "        x = \"ho\"\n        return x\n",
        ),
        // A block re-indented as a whole: found, and the new text takes the file's indentation.
        (
            "def m(self):\n    x = \"hi\"\n    return x",
            "def m(self):\n    return 2",
            "re-indented block",
            "class K:\n    def m(self):\n        return 2\n",
        ),
        // Indentation off line by line.
        (
            "  x = \"hi\"\nreturn x",
            "  x = \"yo\"\nreturn x",
            "each line's leading and trailing whitespace",
            "        x = \"yo\"\n        return x\n",
        ),
        // Curly quotes for straight ones, inside a line.
        (
            "x = \u{201c}hi\u{201d}",
            "x = \"q\"",
            "Unicode quotes",
            "        x = \"q\"\n        return x\n",
        ),
    ];
    for (old, new, rule, expect) in cases {
        put(dir.path(), "k.py", py);
        let out = ok(
            &EditTool::new(),
            json!({"path": "k.py", "edits": [{"old_text": old, "new_text": new}]}),
            &c,
        )
        .await;
        assert!(out.content.contains(rule), "{rule}: {}", out.content);
        let text = std::fs::read_to_string(dir.path().join("k.py")).unwrap();
        assert!(text.contains(expect), "{rule}: {text:?}");
        assert!(
            text.ends_with("def f():\n    return 1\n"),
            "{rule}: {text:?}"
        );
    }
}

/// A miss says whether the new text is already there; a missing file and a directory name the closest files.
#[tokio::test]
async fn misses_say_what_is_there_and_missing_files_name_their_neighbours() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "calc.py", "def add(a, b):\n    return a + b\n");
    std::fs::create_dir(dir.path().join("src")).unwrap();
    put(dir.path(), "src/util.py", "X = 1\n");
    let c = ctx(dir.path());
    let done = err(&EditTool::new(), json!({"path": "calc.py", "edits": [{"old_text": "return a - b", "new_text": "return a + b"}]}), &c).await;
    assert!(
        done.contains("The new text is already in calc.py (line 2)"),
        "{done}"
    );
    assert!(done.contains("2 |     return a + b"), "{done}");
    let missing = err(
        &EditTool::new(),
        json!({"path": "calc.pyy", "edits": [{"old_text": "a", "new_text": "b"}]}),
        &c,
    )
    .await;
    assert!(
        missing.contains("Files with a similar name: calc.py"),
        "{missing}"
    );
    let folder = err(
        &EditTool::new(),
        json!({"path": "src", "edits": [{"old_text": "a", "new_text": "b"}]}),
        &c,
    )
    .await;
    assert!(folder.contains("src/util.py"), "{folder}");
    let read = err(
        &agentd::tools::read::ReadTool::new(),
        json!({"path": "util.py"}),
        &c,
    )
    .await;
    assert!(
        read.contains("Files with a similar name: src/util.py"),
        "{read}"
    );
}
