//! Nothing in `src/app/` or `src/tools/` touches the disk on a path a model or a client wrote except through the
//! tool policy's [`agentd::tools::policy::FileScope`] (which resolves `..`, symlinks and absolute paths and
//! refuses what lies outside a confined session's workspace). Every line of non-test code there that calls the
//! file system directly must sit in a file listed below, with the reason it is not such a path, and each listed
//! file holds exactly the number of such lines given: a new direct read anywhere fails this test until it goes
//! through the scope or is listed here with its reason.

use std::collections::BTreeMap;
use std::path::Path;

use super::{rust_files, src};

/// What a line must hold to count as a direct file-system call.
const FS_CALLS: [&str; 14] = [
    "std::fs",
    "tokio::fs",
    "File::open",
    "File::create",
    "OpenOptions",
    "walk_builder(",
    "WalkBuilder",
    "canonicalize(",
    "read_link(",
    "symlink_metadata(",
    ".is_file()",
    ".is_dir()",
    ".exists()",
    ".metadata()",
];

/// File (under `src/`) → (direct calls, why none of them reads a path a model or client wrote unchecked).
const ALLOWED: [(&str, usize, &str); 19] = [
    ("tools/policy/scope.rs", 10, "the confinement itself: resolves, checks, then opens"),
    ("tools/support/file_access.rs", 11, "opens only paths its callers resolved through the scope; checks the kind"),
    ("tools/read.rs", 1, "the File type of a file opened through file_access after resolve_path"),
    ("tools/write.rs", 5, "writes the path resolve_path returned (atomic rename beside it)"),
    ("tools/write_block.rs", 2, "the current text of the path resolve_path returned"),
    ("tools/grep.rs", 5, "walks the root resolve_path returned; links are not followed"),
    ("tools/find.rs", 3, "walks the root resolve_path returned; links are not followed"),
    ("tools/ls.rs", 5, "lists the directory resolve_path returned; links are not followed"),
    ("tools/support/workspace.rs", 8, "walks the session's own root (links not followed), reads through its scope; suggests names for a resolved path"),
    ("tools/bash.rs", 3, "finds the shell binary and checks the session's cwd; its own spill file"),
    ("tools/support/session_resources.rs", 3, "removes the session's own spill logs; /proc of its own children"),
    ("app/export.rs", 1, "writes the export file the local user named on the command line"),
    ("app/sessions.rs", 1, "the session file the local user named (`--session PATH`, `/resume PATH`)"),
    ("app/backend.rs", 1, "the model file the local user named (`/model PATH`; sessions over HTTP have none)"),
    ("app/coding_session/build.rs", 4, "the local user's --system-prompt FILE; the workspace root itself"),
    ("app/model_catalog.rs", 2, "the model files the server's own config and flags name (size, GGUF header)"),
    ("app/harness/checks/parse.rs", 1, "writes the text under check into its own fresh scratch directory for node or rustc"),
    ("app/harness/mod.rs", 1, "appends to the trace file the local user named (`run --harness-trace`), never a model's or client's path"),
    ("app/harness/rules/self_check.rs", 1, "writes back the settings lines a task does not name, to a path the session's FileScope resolved"),
];

/// The non-test, non-comment lines of `text` that call the file system directly.
fn direct_calls(text: &str) -> Vec<String> {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .map(str::trim)
        .filter(|l| !l.starts_with("//"))
        .filter(|l| FS_CALLS.iter().any(|c| l.contains(c)))
        .map(str::to_string)
        .collect()
}

#[test]
fn only_the_tool_policy_reads_paths_from_models_and_clients() {
    let mut found: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for dir in ["app", "tools"] {
        let mut files = Vec::new();
        rust_files(&src().join(dir), &mut files);
        for file in files {
            // `tests.rs` files are test modules (`#[cfg(test)] mod tests;`).
            if file.file_name().is_some_and(|n| n == "tests.rs") {
                continue;
            }
            let calls = direct_calls(&std::fs::read_to_string(&file).unwrap());
            if !calls.is_empty() {
                let rel = file.strip_prefix(src()).unwrap().display().to_string();
                found.insert(rel, calls);
            }
        }
    }
    let mut problems = Vec::new();
    for (file, calls) in &found {
        match ALLOWED.iter().find(|(f, _, _)| f == file) {
            None => problems.push(format!(
                "{file} touches the disk directly; read through tools::policy::FileScope instead:\n    {}",
                calls.join("\n    ")
            )),
            Some((_, n, _)) if *n != calls.len() => problems.push(format!(
                "{file} has {} direct file-system lines, {n} listed; a new one must go through \
                 tools::policy::FileScope (or be listed here with its reason):\n    {}",
                calls.len(),
                calls.join("\n    ")
            )),
            Some(_) => {}
        }
    }
    for (file, n, _) in ALLOWED {
        if n > 0 && !found.contains_key(file) && Path::new(&src().join(file)).exists() {
            problems.push(format!(
                "{file} is listed with {n} direct lines but has none"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn the_rule_sees_a_direct_read() {
    let text = "fn f(p: &Path) -> String {\n    // std::fs::read in a comment\n    std::fs::read_to_string(p).unwrap_or_default()\n}\n#[cfg(test)]\nmod tests { fn g() { std::fs::write(\"x\", \"\").unwrap(); } }\n";
    assert_eq!(
        direct_calls(text),
        ["std::fs::read_to_string(p).unwrap_or_default()"]
    );
    assert!(direct_calls("let t = scope.read_text(path, 10);").is_empty());
}
