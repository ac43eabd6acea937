//! The Hugging Face `tokenizers::Tokenizer` built from a GGUF vocabulary, which llguidance's token trie is made
//! from: byte-level BPE with its merges, or a SentencePiece vocabulary with Llama's decoders, and the control and
//! user-defined tokens as added tokens.

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::AddedToken;

use super::{PreTokenizerSpec, TokenType};
use crate::text::error::{Result, TextError};

/// The Hugging Face tokenizer: BPE over the whole vocabulary, the pre-tokenizer, a ByteLevel decoder, and the
/// control / user-defined tokens registered as added tokens (their ids are kept: they are in the vocabulary).
pub(super) fn build_hf(
    tokens: &[String],
    types: &[TokenType],
    merges: Vec<&str>,
    spec: &PreTokenizerSpec,
) -> Result<tokenizers::Tokenizer> {
    let mut vocab = Vocab::with_capacity(tokens.len());
    for (id, text) in tokens.iter().enumerate() {
        if let Some(previous) = vocab.insert(text.clone(), id as u32) {
            return Err(TextError::Tokenizer(format!(
                "duplicate token {text:?} in tokenizer.ggml.tokens (ids {previous} and {id})"
            )));
        }
    }
    let merges = merges
        .into_iter()
        .enumerate()
        .map(|(rank, merge)| {
            // llama.cpp splits at the first space after the first byte (a merge's left part is never empty).
            let pos = merge.bytes().skip(1).position(|b| b == b' ').map(|p| p + 1);
            match pos {
                Some(pos) => Ok((merge[..pos].to_owned(), merge[pos + 1..].to_owned())),
                None => Err(TextError::Tokenizer(format!(
                    "tokenizer.ggml.merges[{rank}] = {merge:?} is not two space-separated tokens"
                ))),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    // No unknown token: llama.cpp's BPE never emits one, and a byte-level vocabulary covers every byte.
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(spec.ignore_merges)
        .build()
        .map_err(|e| {
            TextError::Tokenizer(format!("building BPE from tokenizer.ggml.merges: {e}"))
        })?;

    let mut hf = tokenizers::Tokenizer::new(bpe);
    hf.with_pre_tokenizer(Some(spec.pre_tokenizer.clone()));
    hf.with_decoder(Some(ByteLevelDecoder::default()));
    add_added_tokens(&mut hf, tokens, types);
    Ok(hf)
}

/// The Hugging Face tokenizer of a SentencePiece vocabulary, for llguidance's token trie only (encoding is
/// [`SpmVocab`]'s): the vocabulary with Llama's decoders (`▁` → space, byte fallback), control tokens as special
/// added tokens, user-defined ones as plain added tokens. A text listed twice keeps its first id.
pub(super) fn build_hf_sentencepiece(
    tokens: &[String],
    types: &[TokenType],
) -> Result<tokenizers::Tokenizer> {
    use tokenizers::decoders::byte_fallback::ByteFallback;
    use tokenizers::decoders::fuse::Fuse;
    use tokenizers::decoders::sequence::Sequence as DecoderSequence;
    use tokenizers::normalizers::replace::Replace;
    let mut vocab = Vocab::with_capacity(tokens.len());
    for (id, text) in tokens.iter().enumerate() {
        vocab.entry(text.clone()).or_insert(id as u32);
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, Vec::new())
        .byte_fallback(true)
        .build()
        .map_err(|e| TextError::Tokenizer(format!("building the SentencePiece vocabulary: {e}")))?;
    let mut hf = tokenizers::Tokenizer::new(bpe);
    let replace = Replace::new(crate::text::spm::SPACE.to_string(), " ")
        .map_err(|e| TextError::Tokenizer(format!("SentencePiece decoder: {e}")))?;
    hf.with_decoder(Some(DecoderSequence::new(vec![
        replace.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ])));
    add_added_tokens(&mut hf, tokens, types);
    Ok(hf)
}

/// Registers control tokens as special added tokens and user-defined ones as plain added tokens (their ids are
/// kept: they are in the vocabulary).
fn add_added_tokens(hf: &mut tokenizers::Tokenizer, tokens: &[String], types: &[TokenType]) {
    let added = |wanted: TokenType, special: bool| -> Vec<AddedToken> {
        tokens
            .iter()
            .zip(types)
            .filter(|(_, t)| **t == wanted)
            .map(|(text, _)| AddedToken::from(text.clone(), special).normalized(false))
            .collect()
    };
    hf.add_special_tokens(&added(TokenType::Control, true));
    hf.add_tokens(&added(TokenType::UserDefined, false));
}
