//! SentencePiece-style BPE as llama.cpp runs it for `tokenizer.ggml.model = llama` vocabularies (Llama 2,
//! Mistral, Phi-3, Gemma): spaces become `▁`, the text starts as single characters, and the adjacent pair whose
//! concatenation is the vocabulary entry with the highest score is merged first (ties: leftmost), until no pair
//! forms an entry; a character that is no entry is written as its UTF-8 bytes (`<0xE2>` … byte tokens).
//!
//! [`SpmVocab`] owns the lookup tables; the tokenizer (`tokenizer/`) splits out added tokens and decides
//! where a leading space goes.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// The metaspace: SentencePiece's stand-in for a space.
pub const SPACE: char = '\u{2581}';

/// What SentencePiece encoding needs of a vocabulary.
#[derive(Debug, Clone)]
pub struct SpmVocab {
    ids: HashMap<String, u32>,
    scores: Vec<f32>,
    /// The token of each byte value (`<0x0A>`), where the vocabulary has one.
    bytes: Vec<Option<u32>>,
}

/// A candidate merge of two adjacent symbols.
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    /// The merged text's length when the pair was scored: a pair whose symbols changed since is stale.
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// The heap's top: the highest score, then the leftmost pair (llama.cpp's order).
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl SpmVocab {
    /// `tokens` (text per id; byte tokens spelled `<0xAB>`, flagged in `is_byte`) and their scores.
    pub fn new(tokens: &[String], scores: Vec<f32>, is_byte: impl Fn(usize) -> bool) -> Self {
        let mut ids = HashMap::with_capacity(tokens.len());
        let mut bytes = vec![None; 256];
        for (id, text) in tokens.iter().enumerate() {
            // The first entry of a text wins, as llama.cpp's map does.
            ids.entry(text.clone()).or_insert(id as u32);
            if is_byte(id) {
                if let Some(b) = parse_byte_token(text) {
                    bytes[b as usize].get_or_insert(id as u32);
                }
            }
        }
        Self { ids, scores, bytes }
    }

    /// Encodes `text` (spaces already written as `▁`) into `out`.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) {
        let mut symbols: Vec<Symbol> = text
            .char_indices()
            .enumerate()
            .map(|(i, (start, c))| Symbol {
                start,
                len: c.len_utf8(),
                prev: i.checked_sub(1),
                next: Some(i + 1),
            })
            .collect();
        let Some(last) = symbols.last_mut() else {
            return;
        };
        last.next = None;
        let mut heap = BinaryHeap::new();
        for i in 1..symbols.len() {
            self.push_pair(text, &symbols, i - 1, i, &mut heap);
        }
        while let Some(b) = heap.pop() {
            let (l, r) = (symbols[b.left], symbols[b.right]);
            if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
                continue;
            }
            symbols[b.left].len += r.len;
            symbols[b.right].len = 0;
            symbols[b.left].next = r.next;
            if let Some(n) = r.next {
                symbols[n].prev = Some(b.left);
            }
            if let Some(p) = l.prev {
                self.push_pair(text, &symbols, p, b.left, &mut heap);
            }
            if let Some(n) = r.next {
                self.push_pair(text, &symbols, b.left, n, &mut heap);
            }
        }
        let mut at = Some(0);
        while let Some(i) = at {
            let s = symbols[i];
            let piece = &text[s.start..s.start + s.len];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                None => out.extend(piece.bytes().filter_map(|b| self.bytes[b as usize])),
            }
            at = s.next;
        }
    }

    fn push_pair(
        &self,
        text: &str,
        symbols: &[Symbol],
        left: usize,
        right: usize,
        heap: &mut BinaryHeap<Bigram>,
    ) {
        let (l, r) = (symbols[left], symbols[right]);
        let merged = &text[l.start..l.start + l.len + r.len];
        if let Some(&id) = self.ids.get(merged) {
            heap.push(Bigram {
                score: self.scores.get(id as usize).copied().unwrap_or(0.0),
                left,
                right,
                size: merged.len(),
            });
        }
    }
}

/// The byte a token spelled `<0xAB>` stands for.
pub fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// A token's text as bytes: `▁` as a space, byte tokens as their byte.
pub fn token_bytes(text: &str, is_byte: bool) -> Vec<u8> {
    if is_byte {
        if let Some(b) = parse_byte_token(text) {
            return vec![b];
        }
    }
    text.replace(SPACE, " ").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(entries: &[(&str, f32)]) -> (SpmVocab, Vec<String>) {
        let mut tokens: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
        let mut scores = vec![0.0; 256];
        for (t, s) in entries {
            tokens.push(t.to_string());
            scores.push(*s);
        }
        (SpmVocab::new(&tokens, scores, |id| id < 256), tokens)
    }

    fn encode(v: &(SpmVocab, Vec<String>), text: &str) -> Vec<String> {
        let mut ids = Vec::new();
        v.0.encode(text, &mut ids);
        ids.iter().map(|&id| v.1[id as usize].clone()).collect()
    }

    #[test]
    fn highest_score_merges_first_and_unknown_characters_are_bytes() {
        let v = vocab(&[
            ("a", 0.0),
            ("b", 0.0),
            ("c", 0.0),
            ("ab", -2.0),
            ("bc", -1.0),
        ]);
        // "bc" outranks "ab"; then "a"+"bc" is no entry.
        assert_eq!(encode(&v, "abc"), ["a", "bc"]);
        // Any adjacent pair that spells an entry merges, whatever its parts.
        let v = vocab(&[
            ("a", 0.0),
            ("b", 0.0),
            ("c", 0.0),
            ("bc", -1.0),
            ("abc", -5.0),
        ]);
        assert_eq!(encode(&v, "abc"), ["abc"]);
        assert_eq!(encode(&v, "ab"), ["a", "b"]);
        assert_eq!(encode(&v, "aé"), ["a", "<0xC3>", "<0xA9>"]);
        assert!(encode(&v, "").is_empty());
        // Equal scores: the leftmost pair first.
        let v = vocab(&[("x", 0.0), ("xx", -1.0)]);
        assert_eq!(encode(&v, "xxx"), ["xx", "x"]);
    }

    #[test]
    fn byte_tokens_and_spaces_decode() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(b'\n'));
        assert_eq!(parse_byte_token("<0x0A"), None);
        assert_eq!(token_bytes("<0xE2>", true), [0xE2]);
        assert_eq!(token_bytes("▁Hello", false), b" Hello");
    }
}
