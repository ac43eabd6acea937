//! Reasoning output: models whose chat template thinks (Qwen3, DeepSeek-R1 distills, Magistral) write their
//! reasoning between markers (`<think>` … `</think>`) before the answer. This module owns
//! - recognising such a model from its template ([`ThinkMarkers::detect`]),
//! - deciding from the rendered prompt where the output starts ([`ThinkMarkers::start_of`]): inside an open
//!   think block (the template opened it, as R1 distills' do), free to open one (Qwen3 with thinking on), or past
//!   it (thinking off: the template wrote an empty block),
//! - splitting the streamed output into reasoning and content ([`ReasoningSplitter`], like vLLM's reasoning
//!   parsers), holding back text that may be the start of a marker.
//!
//! The grammar side (a think block allowed before the constrained part) is `constraint::grammar`'s, from the
//! [`ThinkBlock`] this module describes.

use serde::{Deserialize, Serialize};

/// Marker pairs that reasoning templates use, tried in order.
const MARKERS: &[(&str, &str)] = &[("<think>", "</think>"), ("[THINK]", "[/THINK]")];

/// The markers a model's reasoning sits between.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinkMarkers {
    pub open: String,
    pub close: String,
}

/// Where a generation starts relative to the think block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkStart {
    /// The prompt ends inside an open block: the output is reasoning until the close marker.
    Inside,
    /// The output may open a block first (leading whitespace allowed), or answer at once.
    Optional,
}

/// A think block as the grammar sees it: the markers and where the output starts. `None` in a
/// the engine's `ConstraintSpec` means no block (not a reasoning model, or thinking off).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinkBlock {
    pub open: String,
    pub close: String,
    pub start: ThinkStart,
}

impl ThinkMarkers {
    /// The markers of a chat template that writes a think block (its source holds both markers of a pair);
    /// `None` for every other template, whose output is never split.
    pub fn detect(template_source: &str) -> Option<Self> {
        MARKERS
            .iter()
            .find(|(open, close)| template_source.contains(open) && template_source.contains(close))
            .map(|(open, close)| Self {
                open: (*open).into(),
                close: (*close).into(),
            })
    }

    /// Where the output of `prompt` (the rendered text, or at least its tail) starts: `Inside` when the last
    /// marker in it opens a block; `None` when a block was closed after the last user turn's content (thinking
    /// off writes an empty block into the generation prompt); `Optional` otherwise.
    pub fn start_of(&self, prompt: &str) -> Option<ThinkStart> {
        let open = prompt.rfind(&self.open);
        let close = prompt.rfind(&self.close);
        match (open, close) {
            (Some(o), Some(c)) if o > c => Some(ThinkStart::Inside),
            (Some(_), None) => Some(ThinkStart::Inside),
            // A block closed in the prompt's generation prompt (the tail after the last turn's end).
            (_, Some(c)) if prompt[c + self.close.len()..].trim().is_empty() => None,
            _ => Some(ThinkStart::Optional),
        }
    }

    pub fn block(&self, start: ThinkStart) -> ThinkBlock {
        ThinkBlock {
            open: self.open.clone(),
            close: self.close.clone(),
            start,
        }
    }
}

/// One piece of split output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Reasoning(String),
    Content(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before anything but whitespace: a block may open here.
    Start,
    /// Inside the block.
    Thinking,
    /// Right after the block: whitespace is dropped.
    AfterBlock,
    /// The answer.
    Content,
}

/// Splits streamed output into reasoning and content. Text that may be the beginning of a marker is held until
/// the next push decides it (or [`finish`](Self::finish) releases it).
#[derive(Debug)]
pub struct ReasoningSplitter {
    block: Option<ThinkBlock>,
    state: State,
    held: String,
}

impl ReasoningSplitter {
    /// A splitter for an output that starts as `block` says; `None` passes everything through as content.
    pub fn new(block: Option<ThinkBlock>) -> Self {
        let state = match block.as_ref().map(|b| b.start) {
            Some(ThinkStart::Inside) => State::Thinking,
            Some(ThinkStart::Optional) => State::Start,
            None => State::Content,
        };
        Self {
            block,
            state,
            held: String::new(),
        }
    }

    /// Whether the output is still inside the think block.
    pub fn in_reasoning(&self) -> bool {
        self.state == State::Thinking
    }

    /// Takes the next piece of output text.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        let mut out = Vec::new();
        let Some(block) = self.block.clone() else {
            if !text.is_empty() {
                out.push(Piece::Content(text.to_string()));
            }
            return out;
        };
        self.held.push_str(text);
        loop {
            let buf = std::mem::take(&mut self.held);
            match self.state {
                State::Start => {
                    let trimmed = buf.trim_start();
                    if let Some(rest) = trimmed.strip_prefix(block.open.as_str()) {
                        self.state = State::Thinking;
                        self.held = rest.to_string();
                    } else if block.open.starts_with(trimmed) {
                        // Whitespace, or a proper prefix of the open marker: undecided.
                        self.held = buf;
                        return out;
                    } else {
                        self.state = State::Content;
                        self.held = buf;
                    }
                }
                State::Thinking => match buf.find(block.close.as_str()) {
                    Some(at) => {
                        push_piece(&mut out, Piece::Reasoning(buf[..at].to_string()));
                        self.state = State::AfterBlock;
                        self.held = buf[at + block.close.len()..].to_string();
                    }
                    None => {
                        let keep = partial_suffix(&buf, &block.close);
                        push_piece(
                            &mut out,
                            Piece::Reasoning(buf[..buf.len() - keep].to_string()),
                        );
                        self.held = buf[buf.len() - keep..].to_string();
                        return out;
                    }
                },
                State::AfterBlock => {
                    let trimmed = buf.trim_start();
                    if trimmed.is_empty() {
                        return out;
                    }
                    self.state = State::Content;
                    self.held = trimmed.to_string();
                }
                State::Content => {
                    push_piece(&mut out, Piece::Content(buf));
                    return out;
                }
            }
        }
    }

    /// Releases what is held at the end of the output: an undecided start is content, a partial close marker
    /// is reasoning.
    pub fn finish(&mut self) -> Vec<Piece> {
        let buf = std::mem::take(&mut self.held);
        let mut out = Vec::new();
        match self.state {
            State::Thinking => push_piece(&mut out, Piece::Reasoning(buf)),
            State::Start | State::Content => push_piece(&mut out, Piece::Content(buf)),
            State::AfterBlock => {}
        }
        out
    }
}

fn push_piece(out: &mut Vec<Piece>, piece: Piece) {
    let empty = match &piece {
        Piece::Reasoning(t) | Piece::Content(t) => t.is_empty(),
    };
    if !empty {
        out.push(piece);
    }
}

/// The length of the longest suffix of `text` that is a proper prefix of `marker` (on a char boundary).
fn partial_suffix(text: &str, marker: &str) -> usize {
    (1..marker.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn markers() -> ThinkMarkers {
        ThinkMarkers::detect("{% if x %}<think>\n{% endif %}</think>").unwrap()
    }

    /// Feeds `text` split at every byte boundary pair and checks the joined pieces are the same each time.
    fn split_all_ways(start: Option<ThinkStart>, text: &str) -> (String, String) {
        let block = start.map(|s| markers().block(s));
        let join = |pieces: Vec<Piece>| {
            let (mut r, mut c) = (String::new(), String::new());
            for p in pieces {
                match p {
                    Piece::Reasoning(t) => r.push_str(&t),
                    Piece::Content(t) => c.push_str(&t),
                }
            }
            (r, c)
        };
        let mut whole = ReasoningSplitter::new(block.clone());
        let mut pieces = whole.push(text);
        pieces.extend(whole.finish());
        let expected = join(pieces);
        let bounds: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        for &i in &bounds {
            for &j in bounds.iter().filter(|&&j| j >= i) {
                let mut s = ReasoningSplitter::new(block.clone());
                let mut pieces = s.push(&text[..i]);
                pieces.extend(s.push(&text[i..j]));
                pieces.extend(s.push(&text[j..]));
                pieces.extend(s.finish());
                assert_eq!(join(pieces), expected, "split at {i}, {j} of {text:?}");
            }
        }
        expected
    }

    #[test]
    fn detects_templates_that_think() {
        assert_eq!(markers().open, "<think>");
        assert!(ThinkMarkers::detect("{{ messages }}<|im_start|>assistant\n").is_none());
        let m = ThinkMarkers::detect("[THINK]{{ x }}[/THINK]").unwrap();
        assert_eq!((m.open.as_str(), m.close.as_str()), ("[THINK]", "[/THINK]"));
    }

    #[test]
    fn start_follows_the_generation_prompt() {
        let m = markers();
        assert_eq!(
            m.start_of("<|im_start|>assistant\n<think>\n"),
            Some(ThinkStart::Inside)
        );
        assert_eq!(
            m.start_of("<|im_start|>assistant\n<think>\n\n</think>\n\n"),
            None
        );
        assert_eq!(
            m.start_of("<|im_start|>assistant\n"),
            Some(ThinkStart::Optional)
        );
        // An earlier turn's block does not count.
        assert_eq!(
            m.start_of("<think>a</think>done<|im_end|>\n<|im_start|>assistant\n"),
            Some(ThinkStart::Optional)
        );
    }

    #[test]
    fn splits_an_optional_block() {
        let (r, c) = split_all_ways(
            Some(ThinkStart::Optional),
            "\n<think>\nThe user wants a file. ✓\n</think>\n\nHere it is.",
        );
        assert_eq!(r, "\nThe user wants a file. ✓\n");
        assert_eq!(c, "Here it is.");
        let (r, c) = split_all_ways(Some(ThinkStart::Optional), "No block <think> here.");
        assert_eq!((r.as_str(), c.as_str()), ("", "No block <think> here."));
        // Ends while it may still open a block: content.
        let (r, c) = split_all_ways(Some(ThinkStart::Optional), "  <thi");
        assert_eq!((r.as_str(), c.as_str()), ("", "  <thi"));
    }

    #[test]
    fn splits_a_block_the_prompt_opened() {
        let (r, c) = split_all_ways(
            Some(ThinkStart::Inside),
            "plan: read </thin> it</think>\nok",
        );
        assert_eq!((r.as_str(), c.as_str()), ("plan: read </thin> it", "ok"));
        // Cut off while thinking: all reasoning, a partial marker included.
        let (r, c) = split_all_ways(Some(ThinkStart::Inside), "still going </thi");
        assert_eq!((r.as_str(), c.as_str()), ("still going </thi", ""));
    }

    #[test]
    fn no_block_is_all_content() {
        let (r, c) = split_all_ways(None, "<think>x</think>y");
        assert_eq!((r.as_str(), c.as_str()), ("", "<think>x</think>y"));
    }
}
