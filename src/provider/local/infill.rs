//! The local engine's fill-in-the-middle: the prompt laid out from the model's FIM tokens
//! (the engine's `fim_layout`), the tokens and stop strings that end a middle, and [`InfillWatch`], which
//! reads the middle as it streams and ends it where llama.cpp's `/infill` would (`n_indent`,
//! `t_max_predict_ms`), where it starts repeating the suffix — so the middle never contains the suffix — or where
//! a chat-tuned model opens a Markdown code fence the document does not have.

use std::time::{Duration, Instant};

use super::super::{Infill, ProviderError};
use super::LocalProvider;
use crate::engine::{
    fim_indent_cut, fim_layout, fim_suffix_stops, FimBudget, FimExtraFile as ExtraFile, FimInput,
};

/// llama.cpp's default `n_batch`: prefix and suffix share this many tokens (3:1).
const FIM_BATCH: usize = 2048;

/// What a FIM generation needs beside its prompt.
pub(super) struct InfillPlan {
    pub tokens: Vec<u32>,
    pub stop_tokens: Vec<u32>,
    pub stop: Vec<String>,
}

impl LocalProvider {
    /// The FIM prompt of `infill` with `prompt` after its prefix; a 400 for a model without FIM tokens.
    pub(super) fn infill_plan(
        &self,
        infill: &Infill,
        prompt: &str,
        max_new: Option<u32>,
    ) -> Result<InfillPlan, ProviderError> {
        let tok = self.engine.tokenizer();
        let info = self.engine.info();
        let Some(fim) = tok.fim() else {
            return Err(ProviderError::InvalidRequest {
                status: 400,
                message: format!(
                    "model `{}` has no fill-in-the-middle tokens (its vocabulary has no FIM prefix, suffix and \
                     middle markers); use a code model such as qwen2.5-coder-0.5b-instruct",
                    info.name
                ),
            });
        };
        let extra: Vec<ExtraFile> = infill
            .extra
            .iter()
            .map(|f| ExtraFile {
                filename: f.filename.clone(),
                text: f.text.clone(),
            })
            .collect();
        let context = info.context_length;
        let budget = FimBudget {
            batch: FIM_BATCH.min(context / 2),
            context,
            max_new: max_new.map_or(0, |n| n as usize).min(context),
        };
        let input = FimInput {
            prefix: &infill.prefix,
            suffix: &infill.suffix,
            prompt,
            extra: &extra,
        };
        let enc = |text: &str| tok.encode(text, false);
        let bos = tok.bos_id().filter(|_| tok.add_bos());
        let laid = fim_layout(&enc, bos, fim, input, budget)?;
        Ok(InfillPlan {
            tokens: laid.tokens,
            stop_tokens: fim.ends(),
            stop: fim_suffix_stops(&infill.suffix),
        })
    }
}

/// Reads a middle as it streams: holds back what a rule may still cut, and says when to stop.
pub(super) struct InfillWatch {
    text: String,
    sent: usize,
    n_indent: usize,
    limit: Option<Duration>,
    started: Option<Instant>,
    /// The suffix, while the middle so far could be it being written again.
    echo: Option<String>,
    /// The suffix's text up to its first line break: written in full at the start, the middle is the suffix.
    echo_line: usize,
    /// The start of the suffix's first line with text after the cursor's line, indentation included: a line of
    /// the middle that begins with it is the suffix being written again.
    next_line: Option<String>,
    /// Whether a line opening a Markdown code fence ends the middle: when the document has none, such a line is
    /// a chat-tuned model leaving the code to explain it.
    fence_ends: bool,
    stopped: bool,
}

/// How much of the suffix's next line a line of the middle must begin with to be taken for it: all of a short
/// line, else half of it and at least this many characters.
const ECHO_CHARS: usize = 8;

const FENCE: &str = "```";

impl InfillWatch {
    pub(super) fn new(infill: &Infill) -> Self {
        let first_line = infill.suffix.split('\n').next().unwrap_or_default();
        let echo = (!first_line.trim().is_empty()).then(|| infill.suffix.clone());
        let next_line = infill
            .suffix
            .split('\n')
            .skip(1)
            .find(|l| !l.trim().is_empty())
            .map(|l| {
                let l = l.trim_end();
                let indent = l.len() - l.trim_start().len();
                let body: String = l[indent..]
                    .chars()
                    .take(ECHO_CHARS.max(l[indent..].chars().count() / 2))
                    .collect();
                format!("{}{body}", &l[..indent])
            });
        Self {
            text: String::new(),
            sent: 0,
            n_indent: infill.n_indent,
            limit: infill.t_max_predict_ms.map(Duration::from_millis),
            started: None,
            echo,
            echo_line: first_line.len(),
            next_line,
            fence_ends: !infill.prefix.contains(FENCE) && !infill.suffix.contains(FENCE),
            stopped: false,
        }
    }

    /// Whether a rule ended the middle.
    pub(super) fn stopped(&self) -> bool {
        self.stopped
    }

    /// Takes the next piece of the middle; returns the text to send now and whether the middle ends here.
    pub(super) fn push(&mut self, piece: &str) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        self.started.get_or_insert_with(Instant::now);
        self.text.push_str(piece);
        if let Some(suffix) = &self.echo {
            if suffix.starts_with(&self.text) {
                if self.text.len() >= self.echo_line {
                    // The middle is the suffix again: nothing of it is sent.
                    self.text.clear();
                    self.stopped = true;
                    return (String::new(), true);
                }
                return (String::new(), false);
            }
            self.echo = None;
        }
        if let Some(cut) = self.echo_cut() {
            // The suffix's next line again: the middle ends before it, without the blank lines leading to it.
            let keep = self.text[..cut].trim_end().len();
            self.stopped = true;
            return (self.take_to(keep), true);
        }
        if let Some(cut) = fim_indent_cut(&self.text, self.n_indent) {
            self.stopped = true;
            return (self.take_to(cut), true);
        }
        let late = match (self.limit, self.started) {
            (Some(limit), Some(t)) => self.text.contains('\n') && t.elapsed() > limit,
            _ => false,
        };
        if late {
            self.stopped = true;
            return (self.take_to(self.text.len()), true);
        }
        // Trailing blanks may end up cut, and so may a line that could still become the suffix's next one.
        let line_start = self.text.rfind('\n').map(|i| i + 1);
        let hold = match line_start {
            Some(start) if self.may_end_at(&self.text[start..]) => {
                self.text[..start].trim_end().len()
            }
            _ => self.text.trim_end().len(),
        };
        (self.take_to(hold), false)
    }

    /// Where a line of the middle (after its first) begins with the suffix's next line, or opens a code fence
    /// the document does not have: that line's break.
    fn echo_cut(&self) -> Option<usize> {
        self.text.match_indices('\n').map(|(nl, _)| nl).find(|&nl| {
            let line = &self.text[nl + 1..];
            self.next_line
                .as_deref()
                .is_some_and(|n| line.starts_with(n))
                || (self.fence_ends && line.trim_start().starts_with(FENCE))
        })
    }

    /// Whether `line`, the last line so far, may still become one that ends the middle.
    fn may_end_at(&self, line: &str) -> bool {
        self.next_line
            .as_deref()
            .is_some_and(|n| n.starts_with(line))
            || (self.fence_ends && FENCE.starts_with(line.trim_start()))
    }

    /// The text held back when the generation ends on its own.
    pub(super) fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let end = self.text.len();
        self.take_to(end)
    }

    fn take_to(&mut self, end: usize) -> String {
        let end = end.max(self.sent);
        let out = self.text[self.sent..end].to_string();
        self.sent = end;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(suffix: &str, n_indent: usize) -> InfillWatch {
        InfillWatch::new(&Infill {
            prefix: String::new(),
            suffix: suffix.into(),
            n_indent,
            ..Infill::default()
        })
    }

    #[test]
    fn a_middle_that_writes_the_suffix_again_is_empty() {
        let mut w = watch("return x\n", 0);
        assert_eq!(w.push("return"), (String::new(), false));
        assert_eq!(w.push(" x"), (String::new(), true));
        assert!(w.stopped());
        assert_eq!(w.finish(), "");
    }

    #[test]
    fn a_middle_that_leaves_the_suffix_is_sent_whole() {
        let mut w = watch("return x\n", 0);
        assert_eq!(w.push("ret"), (String::new(), false));
        assert_eq!(w.push("ry()"), ("retry()".to_string(), false));
        assert_eq!(w.finish(), "");
    }

    fn run(w: &mut InfillWatch, pieces: &[&str]) -> (String, bool) {
        let mut sent = String::new();
        for piece in pieces {
            let (out, stop) = w.push(piece);
            sent.push_str(&out);
            if stop {
                return (sent, true);
            }
        }
        sent.push_str(&w.finish());
        (sent, false)
    }

    #[test]
    fn a_middle_that_runs_into_the_suffix_ends_before_it() {
        // A coder model's fibonacci middle: the next line comes again, with another argument.
        let mut w = watch("\n\nprint(fibonacci(10))\n", 0);
        let pieces = [
            "else",
            ":\n",
            "        return fib",
            "(n-1)\n",
            "\n",
            "print(fib",
            "onacci(15))",
        ];
        assert_eq!(
            run(&mut w, &pieces),
            ("else:\n        return fib(n-1)".to_string(), true)
        );
        // A line that only starts like it is sent once it differs.
        let mut w = watch("\n\nprint(fibonacci(10))\n", 0);
        assert_eq!(
            run(&mut w, &["x = 1\n", "print(", "x)\n"]),
            ("x = 1\nprint(x)\n".to_string(), false)
        );
    }

    #[test]
    fn a_code_fence_the_document_lacks_ends_the_middle() {
        let mut w = watch("\n\nprint(fibonacci(10))\n", 0);
        let pieces = ["else:\n", "        return 1\n", "``", "`\n\nThis function"];
        assert_eq!(
            run(&mut w, &pieces),
            ("else:\n        return 1".to_string(), true)
        );
        // In a Markdown file the fence is text.
        let mut w = InfillWatch::new(&Infill {
            prefix: "# Use\n```sh\n".into(),
            suffix: "\n".into(),
            ..Infill::default()
        });
        assert_eq!(
            run(&mut w, &["make\n", "```"]),
            ("make\n```".to_string(), false)
        );
    }

    #[test]
    fn n_indent_ends_the_middle_at_the_outdented_line() {
        let mut w = watch("", 4);
        let mut sent = String::new();
        let mut stop = false;
        for piece in ["if x:\n", "        y()\n", "z()"] {
            let (out, s) = w.push(piece);
            sent.push_str(&out);
            stop = s;
            if s {
                break;
            }
        }
        assert!(stop);
        assert_eq!(sent, "if x:\n        y()");
    }
}
