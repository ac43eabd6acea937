//! Fill-in-the-middle: which tokens of a model's vocabulary mark a FIM prompt (GGUF
//! `tokenizer.ggml.fim_*_token_id`, else the texts llama.cpp recognises per family: Qwen2.5-Coder's
//! `<|fim_prefix|>`, StarCoder's `<fim_prefix>`, CodeLlama's `<PRE>`, DeepSeek-Coder's `<｜fim▁begin｜>`, …), the
//! infill prompt laid out from them as llama.cpp's `/infill` lays it out (other files first, then prefix, suffix,
//! middle), and the stop strings that keep the middle from running into the suffix.
//!
//! One difference from llama.cpp, for the prefix cache: a prefix longer than its budget is cut at a line
//! boundary that moves in steps of [`CUT_STEP_LINES`] lines, so while the cursor moves through a long file the
//! start of the prompt stays the same from one keystroke to the next and its KV blocks are reused (llama.cpp cuts
//! at the exact token and needs `--cache-reuse` to shift the cached chunks).

use crate::text::error::Result;
use crate::text::gguf_meta::Metadata;

/// A cut prefix starts at a multiple of this many lines.
pub const CUT_STEP_LINES: usize = 32;

/// The FIM tokens of a vocabulary. `pre`, `suf` and `mid` make a FIM prompt; `pad`, `rep` (repository name) and
/// `sep` (file separator) also end a middle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FimTokens {
    pub pre: u32,
    pub suf: u32,
    pub mid: u32,
    pub pad: Option<u32>,
    pub rep: Option<u32>,
    pub sep: Option<u32>,
}

const PRE: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<|fim▁begin|>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
];
const SUF: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<|fim▁hole|>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
];
const MID: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<|fim▁end|>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
];
const PAD: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"];
const REP: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const SEP: &[&str] = &["<|file_sep|>", "<fim-sep>", "<file_sep>"];

impl FimTokens {
    /// The FIM tokens of `tokens` (the vocabulary by id): the GGUF's ids where it names them, else the first
    /// known text present. `None` unless prefix, suffix and middle are all there.
    pub(crate) fn detect(gguf: &impl Metadata, tokens: &[String]) -> Result<Option<Self>> {
        let n = tokens.len();
        let by_key = |keys: &[&str]| -> Result<Option<u32>> {
            for key in keys {
                if gguf.has(key) {
                    let id = gguf.get_u32(key)?;
                    if (id as usize) < n {
                        return Ok(Some(id));
                    }
                }
            }
            Ok(None)
        };
        let by_text = |texts: &[&str]| {
            texts
                .iter()
                .find_map(|t| tokens.iter().position(|v| v == t))
                .map(|id| id as u32)
        };
        let find = |key: &str, old: &str, texts: &[&str]| -> Result<Option<u32>> {
            let keys = [key, old];
            Ok(by_key(&keys)?.or_else(|| by_text(texts)))
        };
        let pre = find(
            "tokenizer.ggml.fim_pre_token_id",
            "tokenizer.ggml.prefix_token_id",
            PRE,
        )?;
        let suf = find(
            "tokenizer.ggml.fim_suf_token_id",
            "tokenizer.ggml.suffix_token_id",
            SUF,
        )?;
        let mid = find(
            "tokenizer.ggml.fim_mid_token_id",
            "tokenizer.ggml.middle_token_id",
            MID,
        )?;
        let (Some(pre), Some(suf), Some(mid)) = (pre, suf, mid) else {
            return Ok(None);
        };
        Ok(Some(Self {
            pre,
            suf,
            mid,
            pad: find("tokenizer.ggml.fim_pad_token_id", "", PAD)?,
            rep: find("tokenizer.ggml.fim_rep_token_id", "", REP)?,
            sep: find("tokenizer.ggml.fim_sep_token_id", "", SEP)?,
        }))
    }

    /// The tokens besides EOS that end a middle.
    pub fn ends(&self) -> Vec<u32> {
        [self.pad, self.rep, self.sep]
            .into_iter()
            .flatten()
            .collect()
    }
}

/// Another file of the project, given as context before the prefix (llama.cpp's `input_extra`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraFile {
    pub filename: String,
    pub text: String,
}

/// What an infill request gives: the text before the cursor (`prefix`, then `prompt`, which llama.cpp appends
/// to it), after it (`suffix`), and other files.
#[derive(Debug, Clone, Copy)]
pub struct FimInput<'a> {
    pub prefix: &'a str,
    pub suffix: &'a str,
    pub prompt: &'a str,
    pub extra: &'a [ExtraFile],
}

/// The room a FIM prompt may take, as llama.cpp counts it: prefix and suffix share one batch (3:1), the other
/// files what the context has left beside two replies.
#[derive(Debug, Clone, Copy)]
pub struct FimBudget {
    pub batch: usize,
    pub context: usize,
    pub max_new: usize,
}

/// A laid-out FIM prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FimPrompt {
    pub tokens: Vec<u32>,
    /// Whether the prefix, the suffix or the other files were cut to fit.
    pub truncated: bool,
}

/// Text to token ids without parsing special tokens (so a `<|fim_prefix|>` typed in the file is text): the
/// model's tokenizer, `encode(text, false)`.
pub type Encode<'a> = &'a dyn Fn(&str) -> Result<Vec<u32>>;

/// The FIM prompt: `[other files][BOS?][pre] prefix prompt [suf] suffix [mid]` (llama.cpp's order; a BOS, where
/// the model wants one, goes after the other files, as there).
pub fn layout(
    enc: Encode<'_>,
    bos: Option<u32>,
    fim: &FimTokens,
    input: FimInput<'_>,
    budget: FimBudget,
) -> Result<FimPrompt> {
    let mut extra = Vec::new();
    if let Some(rep) = fim.rep {
        extra.push(rep);
        extra.extend(enc("myproject\n")?);
    }
    for file in input.extra {
        match fim.sep {
            Some(sep) => {
                extra.push(sep);
                extra.extend(enc(&format!("{}\n", file.filename))?);
            }
            None => extra.extend(enc("\n\n--- snippet ---\n\n")?),
        }
        extra.extend(enc(&file.text)?);
    }
    if let Some(sep) = fim.sep {
        extra.push(sep);
        extra.extend(enc("filename\n")?);
    }
    let prompt = enc(input.prompt)?;
    let prefix_room = 3 * (budget.batch / 4);
    let suffix_room = (budget.batch / 4).saturating_sub(2 + prompt.len());
    let (prefix, cut_prefix) = prefix_tail(enc, input.prefix, prefix_room)?;
    let mut suffix = enc(input.suffix)?;
    let cut_suffix = suffix.len() > suffix_room;
    suffix.truncate(suffix_room);
    let extra_room = budget
        .context
        .saturating_sub(budget.batch + 2 * budget.max_new)
        .min(extra.len());
    let cut_extra = extra_room < extra.len();

    let mut tokens = extra[extra.len() - extra_room..].to_vec();
    tokens.extend(bos);
    tokens.push(fim.pre);
    tokens.extend(prefix);
    tokens.extend(prompt);
    tokens.push(fim.suf);
    tokens.extend(suffix);
    tokens.push(fim.mid);
    Ok(FimPrompt {
        tokens,
        truncated: cut_prefix || cut_suffix || cut_extra,
    })
}

/// The end of `prefix` in at most `room` tokens: all of it when it fits, else from a line start that is a
/// multiple of [`CUT_STEP_LINES`] lines in (the first such start that fits), else its last `room` tokens.
fn prefix_tail(enc: Encode<'_>, prefix: &str, room: usize) -> Result<(Vec<u32>, bool)> {
    let all = enc(prefix)?;
    if all.len() <= room {
        return Ok((all, false));
    }
    let starts: Vec<usize> = std::iter::once(0)
        .chain(prefix.match_indices('\n').map(|(i, _)| i + 1))
        .filter(|&i| i < prefix.len())
        .collect();
    // Skip ahead by the share of lines the excess is, then step until it fits.
    let excess = all.len() - room;
    let guess = (starts.len() * excess / all.len().max(1)) / CUT_STEP_LINES * CUT_STEP_LINES;
    let mut line = guess.max(CUT_STEP_LINES);
    while line < starts.len() {
        let ids = enc(&prefix[starts[line]..])?;
        if ids.len() <= room {
            return Ok((ids, true));
        }
        line += CUT_STEP_LINES;
    }
    Ok((all[all.len() - room..].to_vec(), true))
}

/// Stop strings that end a middle where it starts writing the suffix again: the suffix from its first line break
/// through its first line with text, and that line alone after a line break (indentation included, so an
/// inner `}` does not match the outer one). None when the suffix has no line with text after the cursor's.
pub fn suffix_stops(suffix: &str) -> Vec<String> {
    let Some(nl) = suffix.find('\n') else {
        return Vec::new();
    };
    let after = &suffix[nl..];
    let mut at = 0;
    for line in after.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        if !body.trim().is_empty() {
            let through = &after[..at + body.len()];
            let alone = format!("\n{body}");
            return match through == alone {
                true => vec![alone],
                false => vec![through.to_string(), alone],
            };
        }
        at += line.len();
    }
    Vec::new()
}

/// llama.cpp's `n_indent` rule on the text so far: once a line after the first has begun with something other
/// than blanks and is indented less than `n_indent` columns, the middle ends at that line's break. Returns the
/// length to keep, or `None` while the text may go on.
pub fn indent_cut(text: &str, n_indent: usize) -> Option<usize> {
    if n_indent == 0 {
        return None;
    }
    for (nl, _) in text.match_indices('\n') {
        let line = &text[nl + 1..];
        let indent = line.chars().take_while(|c| *c == ' ' || *c == '\t').count();
        if indent < line.len() && indent < n_indent {
            return Some(nl);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffix_stops_take_the_first_line_with_text() {
        assert_eq!(
            suffix_stops("\n\nprint(fibonacci(10))\n"),
            vec!["\n\nprint(fibonacci(10))", "\nprint(fibonacci(10))"]
        );
        assert_eq!(
            suffix_stops(")\n    return x\n"),
            vec!["\n    return x".to_string()]
        );
        assert!(suffix_stops("x + 1").is_empty());
        assert!(suffix_stops("\n\n   \n").is_empty());
    }

    #[test]
    fn indent_cut_follows_llama_cpp() {
        // The first line is never cut; a later one with less indentation ends the middle at its break.
        assert_eq!(indent_cut("x = 1\n    y = 2\n", 4), None);
        assert_eq!(indent_cut("x = 1\n    y = 2\nz", 4), Some(15));
        // As in llama.cpp, a blank line is a line indented less.
        assert_eq!(indent_cut("x = 1\n\n    y", 4), Some(5));
        // A line of blanks only says nothing yet.
        assert_eq!(indent_cut("x = 1\n  ", 4), None);
        assert_eq!(indent_cut("x\ny", 0), None);
    }
}
