//! The tokenizer of a GGUF model, built from its `tokenizer.ggml.*` metadata alone: a byte-level BPE
//! (`tokenizer.ggml.model = gpt2`) with the pre-tokenizer that `tokenizer.ggml.pre` names, or a SentencePiece
//! vocabulary (`llama`: Llama 2, Mistral, Phi-3, Gemma; see `spm.rs`), control and user-defined tokens as added
//! tokens, and the model's BOS / end-of-generation ids.
//!
//! It owns encoding (matching llama.cpp id for id, with and without special-token parsing), decoding, the raw
//! bytes of every token for UTF-8-safe streaming, and the Hugging Face `tokenizers::Tokenizer` that
//! llguidance's `toktrie_hf_tokenizers` consumes. Rendering chat prompts is `template.rs`'s job.

use std::ops::Range;
use std::sync::Arc;

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{Model, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

use crate::text::error::{Result, TextError};
use crate::text::fim::FimTokens;
use crate::text::gguf_meta::Metadata;
use crate::text::spm::SpmVocab;

mod hf_build;
mod pretokenizer;

use hf_build::{build_hf, build_hf_sentencepiece};
pub use pretokenizer::{pretokenizer_for, PreTokenizerSpec, SUPPORTED_PRETOKENIZERS};
#[cfg(feature = "local")]
pub(crate) use pretokenizer::{LLAMA3_REGEX, QWEN2_REGEX};

/// Control-type tokens that end generation whatever the metadata says (llama.cpp's EOG detection by text).
const EOG_TOKEN_TEXTS: &[&str] = &[
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "<|end|>",
    "</s>",
];

/// `tokenizer.ggml.token_type` values (llama.cpp's `LLAMA_TOKEN_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    fn from_gguf(value: i32) -> Self {
        match value {
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            // 1 is normal; llama.cpp treats anything else as undefined, which tokenizes like normal.
            _ => Self::Normal,
        }
    }
}

/// A token matched as a whole in raw text before BPE runs (llama.cpp's "special token cache").
#[derive(Debug)]
struct AddedText {
    id: u32,
    text: String,
    /// Control and unknown tokens are matched only when parsing special tokens; user-defined ones always.
    only_when_parsing_special: bool,
}

/// A GGUF model's tokenizer. Cloning is cheap (shared, immutable state); it is `Send + Sync`.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<Inner>,
}

struct Inner {
    hf: tokenizers::Tokenizer,
    pre: String,
    types: Vec<TokenType>,
    /// Every token's bytes, flattened: token `i` is `bytes[starts[i]..starts[i + 1]]`.
    bytes: Vec<u8>,
    starts: Vec<usize>,
    /// Control, unknown and user-defined tokens, longest text first.
    added: Vec<AddedText>,
    /// Whether each token stands for white space only (see [`Tokenizer::blank_tokens`]).
    blank: Arc<[bool]>,
    bos: Option<u32>,
    eos: Option<u32>,
    eos_ids: Vec<u32>,
    add_bos: bool,
    /// SentencePiece vocabularies (`tokenizer.ggml.model = llama`): encoded by [`super::spm`], not by `hf`.
    spm: Option<Spm>,
    fim: Option<FimTokens>,
}

struct Spm {
    vocab: SpmVocab,
    /// `tokenizer.ggml.add_space_prefix` (default true): a text fragment at the start, or right after a
    /// special token, gets a leading space, as llama.cpp does.
    add_space_prefix: bool,
}

/// Pieces of the input while added tokens are being cut out of it.
enum Fragment<'a> {
    /// Raw text and its byte offset in the whole input.
    Text(usize, &'a str),
    Token(u32),
}

impl Tokenizer {
    /// Builds the tokenizer from `tokenizer.ggml.{model,pre,tokens,token_type,merges}` and the special-token ids.
    pub fn from_gguf(gguf: &impl Metadata) -> Result<Self> {
        let model = gguf.get_str("tokenizer.ggml.model")?;
        let sentencepiece = match model {
            "gpt2" => false,
            "llama" => true,
            other => {
                return Err(TextError::Tokenizer(format!(
                    "tokenizer.ggml.model `{other}` is not supported (`gpt2`: byte-level BPE; `llama`: \
                     SentencePiece)"
                )))
            }
        };
        // SentencePiece vocabularies split no words before merging: `pre` does not apply to them.
        let pre = match (sentencepiece, gguf.has("tokenizer.ggml.pre")) {
            (false, _) | (true, true) => gguf.get_str("tokenizer.ggml.pre")?,
            (true, false) => "default",
        };
        let spec = match sentencepiece {
            true => PreTokenizerSpec {
                pre_tokenizer: ByteLevel::new(false, false, false).into(),
                ignore_merges: false,
                add_bos_default: true,
            },
            false => pretokenizer_for(pre)?,
        };

        let tokens = token_texts(gguf.get_str_array("tokenizer.ggml.tokens")?);
        let n = tokens.len();
        let types: Vec<TokenType> = if gguf.has("tokenizer.ggml.token_type") {
            let raw = gguf.get_i32_array("tokenizer.ggml.token_type")?;
            if raw.len() < n {
                return Err(TextError::Tokenizer(format!(
                    "tokenizer.ggml.token_type has {} entries for {n} tokens",
                    raw.len()
                )));
            }
            raw[..n].iter().map(|&t| TokenType::from_gguf(t)).collect()
        } else {
            vec![TokenType::Normal; n]
        };

        let (hf, spm) = if sentencepiece {
            let scores = sentencepiece_scores(gguf, n)?;
            let vocab = SpmVocab::new(&tokens, scores, |id| types[id] == TokenType::Byte);
            let add_space_prefix = match gguf.has("tokenizer.ggml.add_space_prefix") {
                true => gguf.get_bool("tokenizer.ggml.add_space_prefix")?,
                false => true,
            };
            let spm = Spm {
                vocab,
                add_space_prefix,
            };
            (build_hf_sentencepiece(&tokens, &types)?, Some(spm))
        } else {
            let merges = gguf.get_str_array("tokenizer.ggml.merges")?;
            (build_hf(&tokens, &types, merges, &spec)?, None)
        };

        let (bytes, starts) = flatten_token_bytes(&tokens, &types, sentencepiece);

        let mut added: Vec<AddedText> = tokens
            .iter()
            .zip(&types)
            .enumerate()
            .filter(|(_, (_, t))| {
                matches!(
                    t,
                    TokenType::Control | TokenType::Unknown | TokenType::UserDefined
                )
            })
            .map(|(id, (text, t))| AddedText {
                id: id as u32,
                text: text.clone(),
                only_when_parsing_special: *t != TokenType::UserDefined,
            })
            .collect();
        added.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));

        let fim = FimTokens::detect(gguf, &tokens)?;
        let bos = optional_id(gguf, "tokenizer.ggml.bos_token_id", n)?;
        let eos = optional_id(gguf, "tokenizer.ggml.eos_token_id", n)?;
        let mut eos_ids = Vec::new();
        for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
            eos_ids.extend(optional_id(gguf, key, n)?);
        }
        eos_ids.extend(
            EOG_TOKEN_TEXTS
                .iter()
                .filter_map(|text| tokens.iter().position(|t| t == text))
                .filter(|&id| types[id] == TokenType::Control)
                .map(|id| id as u32),
        );
        let eos_ids = dedup_keep_order(eos.into_iter().chain(eos_ids));

        let add_bos = if gguf.has("tokenizer.ggml.add_bos_token") {
            gguf.get_bool("tokenizer.ggml.add_bos_token")?
        } else {
            spec.add_bos_default
        };
        if add_bos && bos.is_none() {
            return Err(TextError::MissingMetadata {
                key: "tokenizer.ggml.bos_token_id".into(),
            });
        }

        let blank = (0..types.len())
            .map(|i| {
                let b = &bytes[starts[i]..starts[i + 1]];
                types[i] != TokenType::Control
                    && !b.is_empty()
                    && b.iter().all(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
            })
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                hf,
                pre: pre.to_owned(),
                types,
                bytes,
                starts,
                added,
                blank,
                bos,
                eos,
                eos_ids,
                add_bos,
                spm,
                fim,
            }),
        })
    }

    /// A vocabulary of `vocab` ordinary tokens spelled `<id>`, ending generation at `eos`: for unit tests of
    /// what runs on token ids only (no encoding).
    #[cfg(all(test, feature = "local"))]
    pub(crate) fn for_ids(vocab: usize, eos: u32) -> Self {
        let mut bytes = Vec::new();
        let mut starts = vec![0];
        for id in 0..vocab {
            bytes.extend_from_slice(format!("<{id}>").as_bytes());
            starts.push(bytes.len());
        }
        Self {
            inner: Arc::new(Inner {
                hf: tokenizers::Tokenizer::new(tokenizers::models::bpe::BPE::default()),
                pre: "default".into(),
                types: vec![TokenType::Normal; vocab],
                bytes,
                starts,
                added: Vec::new(),
                blank: vec![false; vocab].into(),
                bos: None,
                eos: Some(eos),
                eos_ids: vec![eos],
                add_bos: false,
                spm: None,
                fim: None,
            }),
        }
    }

    /// Token ids for `text`. Never adds BOS (see [`add_bos`](Self::add_bos)). With `parse_special`, control
    /// tokens written in the text (`<|im_start|>`) become their ids; without, they are split as ordinary text.
    /// User-defined tokens (Qwen's `<tool_call>`) are matched either way, as llama.cpp does.
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>> {
        self.encode_fragments(text, parse_special, &[])
    }

    /// Token ids for `text` with control tokens parsed everywhere except where an occurrence overlaps one of
    /// the `literal` byte ranges: there it is ordinary text, as [`encode`](Self::encode) without special
    /// parsing would make it. Everything else (where text is split, user-defined tokens) is exactly `encode(text,
    /// true)`, so with no literal range, or none holding a control token's text, the ids are the same. This is
    /// how a chat prompt keeps request content (a user's `<|im_start|>`) from becoming markup; see
    /// [`super::chat_prompt::chat_prompt_tokens`].
    pub fn encode_with_literals(&self, text: &str, literal: &[Range<usize>]) -> Result<Vec<u32>> {
        self.encode_fragments(text, true, literal)
    }

    /// The texts of the tokens that are only matched when parsing special tokens (control and unknown ones,
    /// e.g. `<|im_start|>`), longest first.
    pub fn control_texts(&self) -> impl Iterator<Item = &str> {
        self.inner
            .added
            .iter()
            .filter(|a| a.only_when_parsing_special)
            .map(|a| a.text.as_str())
    }

    fn encode_fragments(
        &self,
        text: &str,
        parse_special: bool,
        literal: &[Range<usize>],
    ) -> Result<Vec<u32>> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 1);
        // SentencePiece: the text at the start or right after a special token gets a leading space.
        let mut after_special = true;
        for fragment in self.split_added_tokens(text, parse_special, literal) {
            match (fragment, &self.inner.spm) {
                (Fragment::Token(id), _) => {
                    ids.push(id);
                    after_special = true;
                }
                (Fragment::Text(_, ""), Some(_)) => {}
                (Fragment::Text(_, piece), Some(spm)) => {
                    let mut escaped = String::with_capacity(piece.len() + 3);
                    if spm.add_space_prefix && after_special {
                        escaped.push(crate::text::spm::SPACE);
                    }
                    escaped.extend(piece.chars().map(|c| {
                        if c == ' ' {
                            crate::text::spm::SPACE
                        } else {
                            c
                        }
                    }));
                    spm.vocab.encode(&escaped, &mut ids);
                    after_special = false;
                }
                (Fragment::Text(_, piece), None) => self.encode_ordinary(piece, &mut ids)?,
            }
        }
        Ok(ids)
    }

    /// The text of `ids`. With `skip_special`, control tokens are left out. Bytes that are not valid UTF-8 (an
    /// incomplete character at either end) become U+FFFD. An id outside the vocabulary is an error.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            if id as usize >= self.vocab_size() {
                return Err(TextError::Tokenizer(format!(
                    "token id {id} is outside the vocabulary ({} tokens)",
                    self.vocab_size()
                )));
            }
            if skip_special && self.is_special(id) {
                continue;
            }
            bytes.extend_from_slice(self.bytes_of(id));
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The raw bytes `id` stands for: byte-level decoded for ordinary tokens, the literal text for control and
    /// user-defined ones. May be part of a UTF-8 character. Empty for an id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        if id as usize >= self.vocab_size() {
            return Vec::new();
        }
        self.bytes_of(id).to_vec()
    }

    /// Whether `id` is a control token (`tokenizer.ggml.token_type` 3), e.g. `<|im_start|>`.
    pub fn is_special(&self, id: u32) -> bool {
        self.inner.types.get(id as usize) == Some(&TokenType::Control)
    }

    /// The id of the vocabulary entry spelled exactly `text` (e.g. `<|im_end|>`, or `Ġhello` for " hello").
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.hf.token_to_id(text)
    }

    /// By id, whether a token stands for white space only (spaces, tabs, line breaks; never a control token).
    /// Speculative decoding's lookup takes any two such tokens as equal, so a copy that is re-indented still
    /// finds its source.
    pub fn blank_tokens(&self) -> Arc<[bool]> {
        self.inner.blank.clone()
    }

    /// Number of entries in `tokenizer.ggml.tokens`.
    pub fn vocab_size(&self) -> usize {
        self.inner.types.len()
    }

    /// `tokenizer.ggml.bos_token_id`, when present and inside the vocabulary.
    pub fn bos_id(&self) -> Option<u32> {
        self.inner.bos
    }

    /// Every id that ends generation: `tokenizer.ggml.eos_token_id` first, then the EOT / EOM ids and the control
    /// tokens named `<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, `<|end_of_text|>`, `<|end|>`, `</s>`.
    pub fn eos_ids(&self) -> &[u32] {
        &self.inner.eos_ids
    }

    /// The fill-in-the-middle tokens, when the vocabulary has them.
    pub fn fim(&self) -> Option<&FimTokens> {
        self.inner.fim.as_ref()
    }

    /// `tokenizer.ggml.eos_token_id`, when present and inside the vocabulary.
    pub fn eos_token_id(&self) -> Option<u32> {
        self.inner.eos
    }

    /// Whether a prompt should start with BOS (`tokenizer.ggml.add_bos_token`, else llama.cpp's default for
    /// the pre-tokenizer: true only for `llama-bpe`).
    pub fn add_bos(&self) -> bool {
        self.inner.add_bos
    }

    /// `ids` with the model's BOS in front where it wants one ([`add_bos`](Self::add_bos)) and the text did not
    /// already begin with it — what llama.cpp and vLLM feed for a raw prompt (a model trained with BOS, Gemma,
    /// writes garbage without it).
    pub fn with_bos(&self, mut ids: Vec<u32>) -> Vec<u32> {
        if let Some(bos) = self.bos_id().filter(|_| self.add_bos()) {
            if ids.first() != Some(&bos) {
                ids.insert(0, bos);
            }
        }
        ids
    }

    /// A raw prompt's ids: special tokens parsed, BOS prepended as [`with_bos`](Self::with_bos) says.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.with_bos(self.encode(text, true)?))
    }

    /// The Hugging Face tokenizer built from the same metadata (BPE, pre-tokenizer, ByteLevel decoder, control
    /// tokens as special added tokens, user-defined ones as plain added tokens) for `toktrie_hf_tokenizers`.
    pub fn hf(&self) -> &tokenizers::Tokenizer {
        &self.inner.hf
    }

    /// `tokenizer.ggml.pre` as the GGUF spells it.
    pub fn pre(&self) -> &str {
        &self.inner.pre
    }

    fn bytes_of(&self, id: u32) -> &[u8] {
        let id = id as usize;
        &self.inner.bytes[self.inner.starts[id]..self.inner.starts[id + 1]]
    }

    /// Cuts added tokens out of `text` the way llama.cpp does: longest token text first, each one at every
    /// non-overlapping occurrence, left to right, in the text that is still raw. A control-token occurrence that
    /// overlaps a `literal` byte range of `text` stays raw text.
    fn split_added_tokens<'a>(
        &self,
        text: &'a str,
        parse_special: bool,
        literal: &[Range<usize>],
    ) -> Vec<Fragment<'a>> {
        let in_literal = |start: usize, len: usize| {
            literal
                .iter()
                .any(|r| r.start < start + len && start < r.end)
        };
        let mut fragments = vec![Fragment::Text(0, text)];
        for added in &self.inner.added {
            if added.only_when_parsing_special && !parse_special {
                continue;
            }
            let needle = added.text.as_str();
            if needle.is_empty() {
                continue;
            }
            let present = fragments
                .iter()
                .any(|f| matches!(f, Fragment::Text(_, t) if t.contains(needle)));
            if !present {
                continue;
            }
            let guarded = added.only_when_parsing_special && !literal.is_empty();
            let mut next = Vec::with_capacity(fragments.len() + 2);
            for fragment in fragments {
                let Fragment::Text(base, raw) = fragment else {
                    next.push(fragment);
                    continue;
                };
                // `pending` is where the raw text not yet pushed starts; `from` where the next search starts.
                let (mut pending, mut from) = (0, 0);
                while let Some(found) = raw[from..].find(needle) {
                    let pos = from + found;
                    if guarded && in_literal(base + pos, needle.len()) {
                        // Leave it as text; look again one character further on.
                        from = pos + raw[pos..].chars().next().map_or(1, char::len_utf8);
                        continue;
                    }
                    if pos > pending {
                        next.push(Fragment::Text(base + pending, &raw[pending..pos]));
                    }
                    next.push(Fragment::Token(added.id));
                    pending = pos + needle.len();
                    from = pending;
                }
                if pending < raw.len() {
                    next.push(Fragment::Text(base + pending, &raw[pending..]));
                }
            }
            fragments = next;
        }
        fragments
    }

    /// Pre-tokenizes and BPE-encodes text that holds no added token, bypassing the Hugging Face tokenizer's own
    /// added-token matching (which cannot leave control tokens unparsed while still matching user-defined ones).
    fn encode_ordinary(&self, text: &str, ids: &mut Vec<u32>) -> Result<()> {
        let hf = &self.inner.hf;
        let mut pretokenized = PreTokenizedString::from(text);
        if let Some(pre_tokenizer) = hf.get_pre_tokenizer() {
            pre_tokenizer
                .pre_tokenize(&mut pretokenized)
                .map_err(|e| TextError::Tokenizer(format!("pre-tokenizing: {e}")))?;
        }
        let model = hf.get_model();
        pretokenized
            .tokenize(|word| model.tokenize(word.get()))
            .map_err(|e| TextError::Tokenizer(format!("BPE: {e}")))?;
        for (_, _, tokens) in pretokenized.get_splits(OffsetReferential::Original, OffsetType::None)
        {
            ids.extend(tokens.iter().flatten().map(|t| t.id));
        }
        Ok(())
    }
}

/// Token texts with llama.cpp's fix-up for empty entries (an empty string cannot be a vocabulary key).
fn token_texts(raw: Vec<&str>) -> Vec<String> {
    raw.into_iter()
        .enumerate()
        .map(|(i, t)| {
            if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                t.to_owned()
            }
        })
        .collect()
}

/// `tokenizer.ggml.scores`, one per token (SentencePiece merges by them).
fn sentencepiece_scores(gguf: &impl Metadata, n: usize) -> Result<Vec<f32>> {
    let raw = gguf.get_values("tokenizer.ggml.scores")?;
    let scores: Vec<f32> = raw
        .iter()
        .map(|v| {
            v.as_f32().ok_or_else(|| {
                TextError::Tokenizer(format!("tokenizer.ggml.scores holds {v:?}, not numbers"))
            })
        })
        .collect::<Result<_>>()?;
    if scores.len() < n {
        return Err(TextError::Tokenizer(format!(
            "tokenizer.ggml.scores has {} entries for {n} tokens",
            scores.len()
        )));
    }
    Ok(scores)
}

/// Every token's bytes in one buffer plus start offsets (`tokens.len() + 1` of them): byte-level decoded, or
/// for SentencePiece `▁` as a space and byte tokens as their byte; control and user-defined tokens as written.
fn flatten_token_bytes(
    tokens: &[String],
    types: &[TokenType],
    sentencepiece: bool,
) -> (Vec<u8>, Vec<usize>) {
    let alphabet = byte_level_alphabet();
    let mut bytes = Vec::with_capacity(tokens.iter().map(String::len).sum());
    let mut starts = Vec::with_capacity(tokens.len() + 1);
    starts.push(0);
    for (text, t) in tokens.iter().zip(types) {
        let literal = matches!(t, TokenType::Control | TokenType::UserDefined);
        if sentencepiece && !literal {
            bytes.extend(crate::text::spm::token_bytes(text, *t == TokenType::Byte));
            starts.push(bytes.len());
            continue;
        }
        let decoded = if literal {
            None
        } else {
            byte_level_decode(text, &alphabet)
        };
        match decoded {
            Some(decoded) => bytes.extend_from_slice(&decoded),
            // Like the Hugging Face ByteLevel decoder: a token outside the alphabet stands for its own text.
            None => bytes.extend_from_slice(text.as_bytes()),
        }
        starts.push(bytes.len());
    }
    (bytes, starts)
}

/// GPT-2's byte-to-character table, reversed: entry `c` is the byte that character `c` encodes. Printable
/// Latin-1 bytes stand for themselves; the other 68 bytes, in order, are U+0100.. U+0143.
fn byte_level_alphabet() -> Vec<Option<u8>> {
    let self_mapped = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut table = vec![None; 256 + 68];
    let mut next = 256;
    for b in 0..=255u8 {
        if self_mapped(b) {
            table[b as usize] = Some(b);
        } else {
            table[next] = Some(b);
            next += 1;
        }
    }
    table
}

fn byte_level_decode(text: &str, alphabet: &[Option<u8>]) -> Option<Vec<u8>> {
    text.chars()
        .map(|c| alphabet.get(c as usize).copied().flatten())
        .collect()
}

/// An optional token-id key: absent is `None`; out of the vocabulary is ignored with a warning, as llama.cpp does.
fn optional_id(gguf: &impl Metadata, key: &str, n_tokens: usize) -> Result<Option<u32>> {
    if !gguf.has(key) {
        return Ok(None);
    }
    let id = gguf.get_u32(key)?;
    if id as usize >= n_tokens {
        tracing::warn!("{key} = {id} is outside the vocabulary ({n_tokens} tokens); ignoring it");
        return Ok(None);
    }
    Ok(Some(id))
}

fn dedup_keep_order(ids: impl IntoIterator<Item = u32>) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    for id in ids {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}
