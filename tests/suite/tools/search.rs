//! `ls`, `find` and `grep`: `.gitignore` respected, `.git` hidden, limits with notes, grep's options.

use std::path::Path;

use agentd::tools::find::FindTool;
use agentd::tools::grep::GrepTool;
use agentd::tools::ls::LsTool;
use serde_json::json;

use super::{ctx, err, ok, put};

/// A small project: sources, a gitignored build dir and log, a dotfile, a `.git` dir, a binary file.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    put(p, ".gitignore", "target/\n*.log\n");
    put(p, ".git/HEAD", "ref: refs/heads/main\n");
    put(p, ".env", "TOKEN=abc\n");
    put(p, "README.md", "# Demo\nfn not_code\n");
    put(p, "build.log", "fn in_a_log\n");
    put(p, "src/main.rs", "fn main() {\n    helper();\n}\n");
    put(
        p,
        "src/lib/helper.rs",
        "// before\nfn helper() {}\n// after\n",
    );
    put(p, "target/debug/out.rs", "fn generated() {}\n");
    put(p, "data.bin", b"fn binary\n\0\n");
    dir
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[tokio::test]
async fn ls_lists_sorted_with_dirs_marked_and_ignored_entries_hidden() {
    let dir = project();
    put(dir.path(), "b.txt", "");
    put(dir.path(), "A.txt", "");
    let out = ok(&LsTool::new(), json!({}), &ctx(dir.path())).await;
    assert_eq!(
        lines(&out.content),
        [
            ".env",
            ".gitignore",
            "A.txt",
            "b.txt",
            "data.bin",
            "README.md",
            "src/"
        ]
    );
    let sub = ok(&LsTool::new(), json!({"path": "src"}), &ctx(dir.path())).await;
    assert_eq!(sub.content, "lib/\nmain.rs");
}

#[tokio::test]
async fn ls_limit_adds_a_note() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..10 {
        put(dir.path(), &format!("f{i}.txt"), "");
    }
    let out = ok(&LsTool::new(), json!({"limit": 3}), &ctx(dir.path())).await;
    assert_eq!(
        out.content,
        "f0.txt\nf1.txt\nf2.txt\n\n[3 entries limit reached (10 in total). Use limit=6 for more]"
    );
    let text = err(&LsTool::new(), json!({"path": "f0.txt"}), &ctx(dir.path())).await;
    assert!(text.contains("not a directory"), "{text}");
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    assert_eq!(
        ok(&LsTool::new(), json!({"path": "empty"}), &ctx(dir.path()))
            .await
            .content,
        "(empty directory)"
    );
}

#[tokio::test]
async fn find_matches_names_and_paths_respecting_gitignore() {
    let dir = project();
    let find = FindTool::new();
    let c = ctx(dir.path());
    let rs = ok(&find, json!({"pattern": "*.rs"}), &c).await;
    assert_eq!(lines(&rs.content), ["src/lib/helper.rs", "src/main.rs"]);
    let nested = ok(&find, json!({"pattern": "src/*/*.rs"}), &c).await;
    assert_eq!(lines(&nested.content), ["src/lib/helper.rs"]);
    let deep = ok(&find, json!({"pattern": "**/*.rs", "path": "src"}), &c).await;
    assert_eq!(lines(&deep.content), ["lib/helper.rs", "main.rs"]);
    let dirs = ok(&find, json!({"pattern": "li*"}), &c).await;
    assert_eq!(dirs.content, "src/lib/");
    let dot = ok(&find, json!({"pattern": ".*"}), &c).await;
    assert_eq!(lines(&dot.content), [".env", ".gitignore"]);
    assert_eq!(
        ok(&find, json!({"pattern": "*.log"}), &c).await.content,
        "No files found matching pattern '*.log'"
    );
    let bad = err(&find, json!({"pattern": "a[b"}), &c).await;
    assert!(bad.contains("Invalid glob pattern"), "{bad}");
}

#[tokio::test]
async fn find_limit_adds_a_note() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..5 {
        put(dir.path(), &format!("f{i}.txt"), "");
    }
    let out = ok(
        &FindTool::new(),
        json!({"pattern": "*.txt", "limit": 2}),
        &ctx(dir.path()),
    )
    .await;
    assert_eq!(
        out.content,
        "f0.txt\nf1.txt\n\n[2 results limit reached. Use limit=4 for more, or refine pattern]"
    );
    assert_eq!(out.details["limit_reached"], true);
}

#[tokio::test]
async fn grep_finds_lines_respecting_gitignore_and_skipping_binaries() {
    let dir = project();
    let out = ok(
        &GrepTool::new(),
        json!({"pattern": "^fn \\w+"}),
        &ctx(dir.path()),
    )
    .await;
    assert_eq!(
        lines(&out.content),
        [
            "README.md:2: fn not_code",
            "src/lib/helper.rs:2: fn helper() {}",
            "src/main.rs:1: fn main() {"
        ]
    );
    assert_eq!(out.details["files"], 3);
}

#[tokio::test]
async fn grep_options_glob_case_literal_context() {
    let dir = project();
    let (grep, c) = (GrepTool::new(), ctx(dir.path()));
    let glob = ok(&grep, json!({"pattern": "fn", "glob": "*.rs"}), &c).await;
    assert_eq!(
        lines(&glob.content),
        [
            "src/lib/helper.rs:2: fn helper() {}",
            "src/main.rs:1: fn main() {"
        ]
    );
    let path_glob = ok(&grep, json!({"pattern": "fn", "glob": "src/lib/*.rs"}), &c).await;
    assert_eq!(path_glob.content, "src/lib/helper.rs:2: fn helper() {}");
    let case = ok(&grep, json!({"pattern": "DEMO", "ignore_case": true}), &c).await;
    assert_eq!(case.content, "README.md:1: # Demo");
    assert_eq!(
        ok(&grep, json!({"pattern": "DEMO"}), &c).await.content,
        "No matches found"
    );
    let literal = ok(&grep, json!({"pattern": "helper()", "literal": true}), &c).await;
    assert_eq!(
        lines(&literal.content),
        [
            "src/lib/helper.rs:2: fn helper() {}",
            "src/main.rs:2:     helper();"
        ]
    );
    let context = ok(
        &grep,
        json!({"pattern": "fn helper", "context": 1, "path": "src/lib"}),
        &c,
    )
    .await;
    assert_eq!(
        lines(&context.content),
        [
            "helper.rs-1- // before",
            "helper.rs:2: fn helper() {}",
            "helper.rs-3- // after"
        ]
    );
    let file = ok(&grep, json!({"pattern": "main", "path": "src/main.rs"}), &c).await;
    assert_eq!(file.content, "src/main.rs:1: fn main() {");
    let bad = err(&grep, json!({"pattern": "(unclosed"}), &c).await;
    assert!(bad.starts_with("Invalid regex '(unclosed'"), "{bad}");
}

#[tokio::test]
async fn grep_limits_matches_and_cuts_long_lines() {
    let dir = tempfile::tempdir().unwrap();
    let many: String = (1..=10).map(|i| format!("hit {i}\n")).collect();
    put(dir.path(), "many.txt", many);
    let (grep, c) = (GrepTool::new(), ctx(dir.path()));
    let out = ok(&grep, json!({"pattern": "hit", "limit": 3}), &c).await;
    assert_eq!(
        out.content,
        "many.txt:1: hit 1\nmany.txt:2: hit 2\nmany.txt:3: hit 3\n\n[3 matches limit reached. Use limit=6 for more, or refine pattern]"
    );
    put(
        dir.path(),
        "wide.txt",
        format!("needle {}\n", "z".repeat(1000)),
    );
    let wide = ok(&grep, json!({"pattern": "needle", "path": "wide.txt"}), &c).await;
    let expected = format!(
        "wide.txt:1: needle {}... [truncated]\n\n[Some lines truncated to 500 chars. Use read to see full lines]",
        "z".repeat(493)
    );
    assert_eq!(wide.content, expected);
}

#[test]
fn project_fixture_has_the_ignored_files() {
    let dir = project();
    assert!(Path::new(&dir.path().join("target/debug/out.rs")).exists());
}
