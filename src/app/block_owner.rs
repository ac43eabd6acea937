//! Which file a fenced block with no path belongs to. Small models sometimes write a file's new text without the
//! path line the format asks for (Qwen2.5-Coder-0.5B wrote `shop.py` renamed, correct, under a bare
//! ```` ```python ```` fence; another reply put the new function's name where the path goes). When most of the
//! block's lines are lines of exactly one workspace file, and clearly more of them than of any other file, the
//! block is that file's; otherwise it stays text.

use std::collections::HashSet;
use std::path::Path;

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

/// The workspace file (among `files`, relative to `root`) that `body` rewrites, if one clearly does.
pub fn owner(root: &Path, files: &[String], body: &str) -> Option<String> {
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
            let path = root.join(rel);
            let small =
                std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() <= MAX_FILE_BYTES);
            let text = small
                .then(|| std::fs::read_to_string(&path).ok())
                .flatten()?;
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
        let block = "PRICES = {}\n\n\ndef total_price(items):\n    total = 0\n    return total\n";
        assert_eq!(owner(dir.path(), &files, block), Some("shop.py".into()));
        // A renamed definition and its unchanged body line.
        assert_eq!(
            owner(
                dir.path(),
                &files,
                "def total(items):\n    def calc_total(items):\n"
            ),
            Some("shop.py".into())
        );
        // Too little in common, only short lines in common, a one-line block: no owner.
        assert_eq!(
            owner(dir.path(), &files, "import os\nprint(1)\nx = 2\n"),
            None
        );
        assert_eq!(owner(dir.path(), &files, "total = 0\nnothing\n"), None);
        assert_eq!(owner(dir.path(), &files, "def calc_total(items):\n"), None);
    }
}
