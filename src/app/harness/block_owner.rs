//! Which file a fenced block with no path belongs to. Small models sometimes write a file's new text without the
//! path line the format asks for (a whole file under a bare ```` ```python ```` fence, or the new function's
//! name where the path goes). When most of the
//! block's lines are lines of exactly one workspace file, and clearly more of them than of any other file, the
//! block is that file's; otherwise it stays text.

use std::collections::HashSet;

use crate::tools::policy::FileScope;

/// Files compared.
const MAX_FILES: usize = 200;
/// Files larger than this are not compared.
const MAX_FILE_BYTES: u64 = 64 * 1024;
/// The share of the block's lines the owner must hold.
const MIN_SHARE: f64 = 0.5;
/// Non-blank lines a block needs before it is matched (one line matches too easily).
const MIN_LINES: usize = 2;
/// Characters the shared lines must have together (`}` and `return x` are in many files).
const MIN_SHARED_CHARS: usize = 20;

/// The workspace file (among `files`, relative to `scope`'s working directory and read through it) that `body`
/// rewrites, if one clearly does.
pub fn owner(scope: &FileScope, files: &[String], body: &str) -> Option<String> {
    let lines: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() < MIN_LINES {
        return None;
    }
    let mut scores: Vec<(usize, &String)> = files
        .iter()
        .take(MAX_FILES)
        .filter_map(|rel| {
            let text = scope.read_text(rel, MAX_FILE_BYTES)?;
            let have: HashSet<&str> = text.lines().map(str::trim).collect();
            let shared: Vec<&&str> = lines.iter().filter(|l| have.contains(*l)).collect();
            let chars: usize = shared.iter().map(|l| l.len()).sum();
            (chars >= MIN_SHARED_CHARS).then_some((shared.len(), rel))
        })
        .collect();
    scores.sort_by_key(|s| std::cmp::Reverse(s.0));
    let (best, path) = *scores.first()?;
    let runner_up = scores.get(1).map_or(0, |s| s.0);
    (best as f64 >= MIN_SHARE * lines.len() as f64 && best > runner_up).then(|| path.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_goes_to_the_one_file_it_clearly_rewrites() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("shop.py"),
            "PRICES = {}\n\n\ndef calc_total(items):\n    total = 0\n    return total\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("other.py"), "total = 0\nprint(total)\n").unwrap();
        let files = vec!["shop.py".to_string(), "other.py".to_string()];
        let scope = FileScope::within(dir.path());
        let block = "PRICES = {}\n\n\ndef total_price(items):\n    total = 0\n    return total\n";
        assert_eq!(owner(&scope, &files, block), Some("shop.py".into()));
        // A renamed definition and its unchanged body line.
        assert_eq!(
            owner(
                &scope,
                &files,
                "def total(items):\n    def calc_total(items):\n"
            ),
            Some("shop.py".into())
        );
        // Too little in common, only short lines in common, a one-line block: no owner.
        assert_eq!(owner(&scope, &files, "import os\nprint(1)\nx = 2\n"), None);
        assert_eq!(owner(&scope, &files, "total = 0\nnothing\n"), None);
        assert_eq!(owner(&scope, &files, "def calc_total(items):\n"), None);
    }

    #[test]
    fn a_file_outside_the_workspace_is_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let text = "def secret_function(items):\n    return the_secret_value\n";
        std::fs::write(dir.path().join("outside.py"), text).unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside.py"), ws.join("link.py")).unwrap();
        let scope = FileScope::within(&ws);
        let files = vec!["link.py".to_string(), "../outside.py".to_string()];
        assert_eq!(owner(&scope, &files, text), None);
        // Unconfined, the same names are files like any other.
        let free = FileScope::unconfined(&ws);
        assert_eq!(owner(&free, &files[..1], text), Some("link.py".into()));
    }
}
