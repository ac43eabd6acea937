//! FIM quality on held-out code: a line or an indented block of a Python file is masked (up to 100 lines before
//! it and 40 after go with the request, so no server has to cut the prompt), the server fills the middle
//! greedily, and the middle is scored by exact match of its first line (blanks at the ends ignored) and by
//! whether the file with the middle put back still parses (Python's own `ast.parse`). The files are chosen
//! from a directory the caller names — Python's standard library on this machine, not this repository.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::Serialize;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use super::client::InfillClient;
use crate::bench::BenchError;

const LINES_BEFORE: usize = 100;
const LINES_AFTER: usize = 40;

/// What is masked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mask {
    Line,
    Block,
}

/// One held-out middle.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub file: PathBuf,
    pub line: usize,
    pub mask: Mask,
    pub prefix: String,
    pub suffix: String,
    pub expected: String,
    /// The file before the window `prefix` starts, and after the window `suffix` ends.
    #[serde(skip)]
    pub head: String,
    #[serde(skip)]
    pub tail: String,
}

/// A middle written for a sample, scored.
#[derive(Debug, Clone, Serialize)]
pub struct Scored {
    pub middle: String,
    /// The generated tokens with their alternatives (the server's `completion_probabilities`).
    #[serde(skip)]
    pub tokens: Vec<super::client::ProbToken>,
    pub exact_first_line: bool,
    pub parses: bool,
}

/// Up to `n` samples from the `.py` files directly in `dir` (sorted; every file in turn, one sample each, a line
/// and a block alternately), each from a line picked by a fixed rule so the set is the same on every run.
pub fn held_out(dir: &Path, n: usize) -> Result<Vec<Sample>, BenchError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| BenchError::Config(format!("cannot list {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for (k, file) in files.iter().enumerate() {
        if out.len() >= n {
            break;
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let mask = if out.len() % 2 == 0 {
            Mask::Line
        } else {
            Mask::Block
        };
        if let Some(s) = sample(file, &text, mask, k) {
            out.push(s);
        }
    }
    Ok(out)
}

/// The sample of `text` for `mask`: the first fitting line at or after the middle of the file, shifted by `salt`.
fn sample(file: &Path, text: &str, mask: Mask, salt: usize) -> Option<Sample> {
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() < 20 {
        return None;
    }
    let start = lines.len() / 3 + (salt * 37) % (lines.len() / 3);
    let code = |l: &str| {
        let t = l.trim();
        t.len() >= 8
            && t.len() <= 100
            && !t.starts_with('#')
            && !t.starts_with("\"\"\"")
            && !t.starts_with("'''")
            && !t.starts_with('@')
    };
    let (at, len) = match mask {
        Mask::Line => (start..lines.len())
            .find(|&i| code(lines[i]))
            .map(|i| (i, 1))?,
        Mask::Block => (start..lines.len().saturating_sub(2)).find_map(|i| {
            let head = lines[i];
            let indent = head.len() - head.trim_start().len();
            if !head.trim_end().ends_with(':') || !code(head) {
                return None;
            }
            let body = lines[i + 1..]
                .iter()
                .take_while(|l| !l.trim().is_empty() && l.len() - l.trim_start().len() > indent)
                .count();
            (2..=6)
                .contains(&body)
                .then_some((i + 1, body))
                .filter(|&(b, _)| code(lines[b]))
        })?,
    };
    let from = at.saturating_sub(LINES_BEFORE);
    let to = (at + len + LINES_AFTER).min(lines.len());
    let mut prefix = lines[from..at].join("\n");
    prefix.push('\n');
    let mut head = lines[..from].join("\n");
    if from > 0 {
        head.push('\n');
    }
    let tail = match to < lines.len() {
        true => format!("\n{}\n", lines[to..].join("\n")),
        false => "\n".to_string(),
    };
    Some(Sample {
        file: file.to_path_buf(),
        line: at + 1,
        mask,
        prefix,
        suffix: format!("\n{}", lines[at + len..to].join("\n")),
        expected: lines[at..at + len].join("\n"),
        head,
        tail,
    })
}

/// Alternatives asked for per generated token (for [`super::parity`]).
const PROBS: u32 = 5;

/// The request body of a sample: greedy, no `n_indent`, room for the middle, the tokens' probabilities.
pub fn body(s: &Sample) -> serde_json::Value {
    json!({
        "input_prefix": s.prefix,
        "input_suffix": s.suffix,
        "input_extra": [],
        "prompt": "",
        "n_predict": match s.mask { Mask::Line => 48, Mask::Block => 160 },
        "temperature": 0,
        "top_k": 1,
        "cache_prompt": true,
        "n_probs": PROBS,
    })
}

/// Asks `client` for every sample in turn and scores the middles (`python` parses the rebuilt files).
pub async fn score(
    client: &InfillClient,
    samples: &[Sample],
    python: &str,
) -> Result<Vec<Scored>, BenchError> {
    let never = CancellationToken::new();
    let mut out = Vec::with_capacity(samples.len());
    for s in samples {
        let answer = client
            .infill(&body(s), &never)
            .await?
            .ok_or_else(|| BenchError::Config("cancelled".into()))?;
        let middle = answer.content;
        let tokens = answer.tokens;
        let first = |t: &str| {
            t.trim_start_matches('\n')
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        };
        let exact_first_line = first(&middle) == first(&s.expected);
        let parses = parses(python, &s.rebuilt(&middle)).await?;
        out.push(Scored {
            middle,
            tokens,
            exact_first_line,
            parses,
        });
    }
    Ok(out)
}

/// Whether `source` is a Python module `python` can parse.
pub async fn parses(python: &str, source: &str) -> Result<bool, BenchError> {
    let mut child = tokio::process::Command::new(python)
        .args([
            "-c",
            "import ast,sys\ntry:\n ast.parse(sys.stdin.read())\nexcept SyntaxError:\n sys.exit(1)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| BenchError::Config(format!("cannot run {python}: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(source.as_bytes()).await;
    }
    let status = child
        .wait()
        .await
        .map_err(|e| BenchError::Config(format!("{python} failed: {e}")))?;
    Ok(status.success())
}

impl Sample {
    /// The whole file with `middle` in place of the masked text.
    pub fn rebuilt(&self, middle: &str) -> String {
        format!(
            "{}{}{}{}{}",
            self.head, self.prefix, middle, self.suffix, self.tail
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_put_back_is_its_file_and_its_windows_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let body: String = (0..200)
            .map(|i| format!("def f{i}(x):\n    y = x + {i}\n    return y * 2\n\n"))
            .collect();
        std::fs::write(dir.path().join("a.py"), &body).unwrap();
        std::fs::write(dir.path().join("b.py"), &body).unwrap();
        std::fs::write(dir.path().join("c.txt"), &body).unwrap();
        let samples = held_out(dir.path(), 5).unwrap();
        assert_eq!(samples.len(), 2, "one per .py file");
        assert_eq!(samples[0].mask, Mask::Line);
        assert_eq!(samples[1].mask, Mask::Block);
        for s in &samples {
            assert_eq!(s.rebuilt(&s.expected), body);
            assert!(s.prefix.lines().count() <= LINES_BEFORE);
            assert!(s.suffix.lines().count() <= LINES_AFTER + 1);
        }
        assert_eq!(
            samples[1].expected.lines().count(),
            2,
            "{:?}",
            samples[1].expected
        );
    }
}
