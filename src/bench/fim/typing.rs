//! Typing replayed through real files: the cursor goes down a file, stopping at evenly spaced lines; each line
//! is typed again from its start at `cps` characters a second, and every `chars_per_pause` characters the editor
//! asks for a middle the way llama.vscode does (`input_prefix`: up to 256 lines before the line, `prompt`: the
//! line so far, `input_suffix`: up to 64 lines after it, `n_indent`: the line's indentation). A request still
//! running at the next pause is cancelled (the client hangs up); the last one of a line is waited for.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::client::{InfillAnswer, InfillClient};
use crate::bench::stats::percentile;
use crate::bench::BenchError;

/// Lines before the cursor's line and after it that go with a request (llama.vscode's defaults).
const LINES_BEFORE: usize = 256;
const LINES_AFTER: usize = 64;

#[derive(Debug, Clone)]
pub struct TypingOptions {
    pub files: Vec<PathBuf>,
    /// Lines typed per file, evenly spaced from top to bottom.
    pub lines_per_file: usize,
    pub chars_per_pause: usize,
    /// Typing speed, characters per second.
    pub cps: f64,
    pub n_predict: u32,
    /// Hang up on a request still running when the next pause comes (an editor does).
    pub cancel_stale: bool,
}

/// What one replay measured.
#[derive(Debug, Clone, Serialize)]
pub struct TypingReport {
    pub requests: usize,
    pub completed: usize,
    pub cancelled: usize,
    pub failed: usize,
    pub ttft_ms: Option<Pcts>,
    pub total_ms: Option<Pcts>,
    /// Of the prompt tokens of completed requests, the share the server took from its cache.
    pub cache_hit_share: f64,
    pub prompt_tokens_mean: f64,
    pub errors: Vec<String>,
}

/// The median and 95th percentile of one metric.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Pcts {
    pub p50: f64,
    pub p95: f64,
    pub n: usize,
}

impl Pcts {
    fn of(values: &[f64]) -> Option<Self> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        Some(Self {
            p50: percentile(&v, 50.0)?,
            p95: percentile(&v, 95.0)?,
            n: v.len(),
        })
    }
}

/// One request of the replay: the document around the cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    pub prefix: String,
    pub prompt: String,
    pub suffix: String,
    pub n_indent: usize,
}

/// The pauses of typing line `at` of `lines` again, `every` characters (and at the line's end).
pub fn pauses(lines: &[&str], at: usize, every: usize) -> Vec<Pause> {
    let line = lines[at];
    let start = at.saturating_sub(LINES_BEFORE);
    let mut prefix = lines[start..at].join("\n");
    if at > start {
        prefix.push('\n');
    }
    let end = (at + 1 + LINES_AFTER).min(lines.len());
    let suffix = format!("\n{}", lines[at + 1..end].join("\n"));
    let n_indent = line.len() - line.trim_start().len();
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let every = every.max(1);
    let mut stops: Vec<usize> = (1..=chars.len())
        .filter(|n| n % every == 0 && *n > n_indent)
        .collect();
    if stops.last() != Some(&chars.len()) && chars.len() > n_indent {
        stops.push(chars.len());
    }
    stops
        .into_iter()
        .map(|n| {
            let cut = chars.get(n).map_or(line.len(), |(i, _)| *i);
            Pause {
                prefix: prefix.clone(),
                prompt: line[..cut].to_string(),
                suffix: suffix.clone(),
                n_indent,
            }
        })
        .collect()
}

/// The lines of a file the replay types: `n` non-blank ones evenly spaced.
pub fn typed_lines(lines: &[&str], n: usize) -> Vec<usize> {
    let candidates: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].trim().len() >= 4)
        .collect();
    if candidates.is_empty() || n == 0 {
        return Vec::new();
    }
    let step = (candidates.len() as f64 / n as f64).max(1.0);
    (0..n.min(candidates.len()))
        .map(|k| candidates[((k as f64 + 0.5) * step) as usize % candidates.len()])
        .collect()
}

/// Replays typing through `opts.files` against `client`.
pub async fn replay(
    client: &InfillClient,
    opts: &TypingOptions,
) -> Result<TypingReport, BenchError> {
    let mut answers: Vec<InfillAnswer> = Vec::new();
    let (mut requests, mut cancelled, mut failed) = (0, 0, 0);
    let mut errors = Vec::new();
    let gap = Duration::from_secs_f64(opts.chars_per_pause as f64 / opts.cps.max(0.1));
    for path in &opts.files {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BenchError::Config(format!("cannot read {}: {e}", path.display())))?;
        let lines: Vec<&str> = text.lines().collect();
        for at in typed_lines(&lines, opts.lines_per_file) {
            let line_pauses = pauses(&lines, at, opts.chars_per_pause);
            let count = line_pauses.len();
            let mut running: Option<(CancellationToken, tokio::task::JoinHandle<_>)> = None;
            for (k, pause) in line_pauses.into_iter().enumerate() {
                let due = Instant::now() + gap;
                let body = json!({
                    "input_prefix": pause.prefix,
                    "input_suffix": pause.suffix,
                    "input_extra": [],
                    "prompt": pause.prompt,
                    "n_predict": opts.n_predict,
                    "n_indent": pause.n_indent,
                    "temperature": 0,
                    "top_k": 40,
                    "top_p": 0.99,
                    "cache_prompt": true,
                    "t_max_predict_ms": 1000,
                });
                if let Some((token, task)) = running.take() {
                    if opts.cancel_stale && !task.is_finished() {
                        token.cancel();
                    }
                    collect(
                        task.await,
                        &mut answers,
                        &mut cancelled,
                        &mut failed,
                        &mut errors,
                    );
                }
                requests += 1;
                let token = CancellationToken::new();
                let c = client.clone();
                let t = token.clone();
                let task = tokio::spawn(async move { c.infill(&body, &t).await });
                running = Some((token, task));
                if k + 1 < count {
                    tokio::time::sleep_until(due.into()).await;
                }
            }
            if let Some((_, task)) = running.take() {
                collect(
                    task.await,
                    &mut answers,
                    &mut cancelled,
                    &mut failed,
                    &mut errors,
                );
            }
        }
    }
    let ttft: Vec<f64> = answers.iter().filter_map(|a| a.ttft_ms).collect();
    let total: Vec<f64> = answers.iter().map(|a| a.total_ms).collect();
    let cached: u64 = answers.iter().map(|a| a.cache_n).sum();
    let computed: u64 = answers.iter().map(|a| a.prompt_n).sum();
    Ok(TypingReport {
        requests,
        completed: answers.len(),
        cancelled,
        failed,
        ttft_ms: Pcts::of(&ttft),
        total_ms: Pcts::of(&total),
        cache_hit_share: match cached + computed {
            0 => 0.0,
            all => cached as f64 / all as f64,
        },
        prompt_tokens_mean: match answers.len() {
            0 => 0.0,
            n => (cached + computed) as f64 / n as f64,
        },
        errors,
    })
}

type Answered = Result<Result<Option<InfillAnswer>, BenchError>, tokio::task::JoinError>;

fn collect(
    done: Answered,
    answers: &mut Vec<InfillAnswer>,
    cancelled: &mut usize,
    failed: &mut usize,
    errors: &mut Vec<String>,
) {
    match done {
        Ok(Ok(Some(a))) => answers.push(a),
        Ok(Ok(None)) => *cancelled += 1,
        Ok(Err(BenchError::Http { status: 409, .. })) => *cancelled += 1,
        Ok(Err(e)) => {
            *failed += 1;
            if errors.len() < 5 {
                errors.push(e.to_string());
            }
        }
        Err(e) => {
            *failed += 1;
            errors.push(format!("the request task failed: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_typed_in_pauses_after_its_indentation() {
        let lines = ["fn main() {", "    let x = 1;", "}"];
        let p = pauses(&lines, 1, 4);
        let prompts: Vec<&str> = p.iter().map(|p| p.prompt.as_str()).collect();
        assert_eq!(prompts, ["    let ", "    let x = ", "    let x = 1;"]);
        assert!(p
            .iter()
            .all(|p| p.prefix == "fn main() {\n" && p.suffix == "\n}"));
        assert_eq!(p[0].n_indent, 4);
    }

    #[test]
    fn typed_lines_are_spread_over_the_file() {
        let lines: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let at = typed_lines(&refs, 4);
        assert_eq!(at, [12, 37, 62, 87]);
    }
}
