//! The split before BPE for each `tokenizer.ggml.pre` value llama.cpp knows: its regexes, spelled out as the
//! `tokenizers` crate takes them, and llama.cpp's flags for each.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior};

use crate::text::error::{Result, TextError};

/// The `tokenizer.ggml.pre` values [`pretokenizer_for`] implements (llama.cpp's names and aliases).
pub const SUPPORTED_PRETOKENIZERS: &[&str] = &[
    "smollm",
    "qwen2",
    "llama-bpe",
    "llama3",
    "llama-v3",
    "gpt2",
    "gpt-2",
];

/// llama.cpp's `QWEN2` regex (Qwen2's `tokenizer.json`, with the case-insensitive group spelled out).
pub(crate) const QWEN2_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// llama.cpp's `LLAMA3` regex: as Qwen2's but numbers are split in runs of up to three digits.
pub(crate) const LLAMA3_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How one `tokenizer.ggml.pre` value tokenizes: the split before BPE and llama.cpp's flags for it.
#[derive(Debug, Clone)]
pub struct PreTokenizerSpec {
    /// Splits text into words, then maps each word's bytes to GPT-2's printable byte alphabet.
    pub pre_tokenizer: PreTokenizerWrapper,
    /// A word that is itself in the vocabulary becomes that token without running merges (llama.cpp sets it
    /// for `llama-bpe`; Hugging Face's Llama 3 `tokenizer.json` too).
    pub ignore_merges: bool,
    /// Whether llama.cpp prepends BOS when `tokenizer.ggml.add_bos_token` is absent.
    pub add_bos_default: bool,
}

/// The pre-tokenizer for a `tokenizer.ggml.pre` value, matching llama.cpp's regexes for it. An unknown value is
/// [`TextError::UnsupportedPretokenizer`]: a near-miss pre-tokenizer still round-trips text but gives other
/// ids than the model was trained on, so we never guess.
pub fn pretokenizer_for(pre: &str) -> Result<PreTokenizerSpec> {
    // Regex splits are followed by a byte-level mapping that must not split again nor add a prefix space.
    let byte_level_only = || -> PreTokenizerWrapper { ByteLevel::new(false, true, false).into() };
    let regex_split = |regex: &str| -> Result<PreTokenizerWrapper> {
        Split::new(
            SplitPattern::Regex(regex.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map(Into::into)
        .map_err(|e| TextError::Tokenizer(format!("pre-tokenizer `{pre}`: bad regex: {e}")))
    };
    let spec = |parts: Vec<PreTokenizerWrapper>, ignore_merges: bool, add_bos_default: bool| {
        PreTokenizerSpec {
            pre_tokenizer: Sequence::new(parts).into(),
            ignore_merges,
            add_bos_default,
        }
    };
    match pre {
        // Every digit on its own, then the GPT-2 regex, without a prefix space.
        "smollm" => Ok(spec(
            vec![Digits::new(true).into(), gpt2_byte_level()],
            false,
            false,
        )),
        "qwen2" => Ok(spec(
            vec![regex_split(QWEN2_REGEX)?, byte_level_only()],
            false,
            false,
        )),
        "llama-bpe" | "llama3" | "llama-v3" => Ok(spec(
            vec![regex_split(LLAMA3_REGEX)?, byte_level_only()],
            true,
            true,
        )),
        "gpt2" | "gpt-2" => Ok(spec(vec![gpt2_byte_level()], false, false)),
        _ => Err(TextError::UnsupportedPretokenizer {
            pre: pre.to_owned(),
            supported: SUPPORTED_PRETOKENIZERS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        }),
    }
}

/// The byte-level pre-tokenizer with its built-in GPT-2 regex and no prefix space: llama.cpp's `GPT2` regex
/// (`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`, text it leaves unmatched kept as
/// words, which is what the built-in regex's trailing `|\s+` does).
fn gpt2_byte_level() -> PreTokenizerWrapper {
    ByteLevel::new(false, true, true).into()
}
