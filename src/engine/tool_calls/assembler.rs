//! Output assembly: generated text in, content and tool calls out, incrementally.
//!
//! The caller feeds every piece of generated text (the `text` of each `TokenEvent`, then the summary's trailing
//! text) to an [`OutputAssembler`] and gets [`OutputDelta`]s back: content as it is produced, a call's start as
//! soon as its name is known, its argument text fragment by fragment, and the finished [`ToolCall`] with a unique
//! id. Under the grammar a call always parses; if one ever does not, that is an [`EngineError::Internal`], never a
//! call silently turned into text or dropped.
//!
//! Calls are found with the grammar's own trigger rule (`trigger.rs`): a format marker opens a block in the
//! format's shape (one object, or a JSON array for list formats, then the closer); a JSON trigger
//! (`{"name": "<offered tool>"`) starts a call object in free text, and a ```` ```json ```` fence around it is
//! dropped from the content. Text that may still become a trigger is held back until it is decided.

use super::call_parser::CallParser;
pub use super::delta::{new_call_id, OutputDelta, ToolCall};
use crate::engine::constraint::{ConstraintSpec, ResponseFormat, ToolChoice};
use crate::engine::error::{EngineError, Result};
use crate::engine::request::FinishReason;
use crate::engine::tool_calls::trigger::{self, Found, JsonAt};
use crate::text::call_format::ToolCallFormat;

/// Whether `text` is only what may separate or follow calls (the grammar's `GAP`): whitespace, `;`, `,` and
/// code fences with a language word.
fn is_gap(text: &str) -> bool {
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("```") {
            rest = after.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        } else if matches!(c, ' ' | '\t' | '\r' | '\n' | ';' | ',') {
            rest = &rest[1..];
        } else {
            return false;
        }
    }
    true
}

/// Where the call being parsed came from (what follows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A marker's block: `list` (items until `]`), then the format's closer if it has one.
    Marker { list: bool },
    /// A JSON trigger in text, inside a fence or not.
    Json { fenced: bool },
}

enum State {
    /// Reply text; `held` may be the start of a trigger, a fence, or trailing whitespace.
    Content,
    /// After a marker, before the call object (or the array) begins.
    Opened {
        list: bool,
    },
    /// Inside a list block, before the next item.
    ListItem,
    InCall(Box<CallParser>, Origin),
    /// A list block: after an item, before `,` or `]`.
    ListNext,
    /// A block's call(s) ended; waiting for the format's closer.
    AwaitClose,
    /// A JSON-trigger call ended; a closing fence (when fenced) or a separator may follow.
    AfterJson {
        fenced: bool,
    },
}

/// Turns generated text into content and tool calls (see the module doc).
pub struct OutputAssembler {
    format: ToolCallFormat,
    parse_calls: bool,
    /// Offered tool names: JSON triggers name one of them.
    names: Vec<String>,
    state: State,
    held: String,
    content: String,
    calls: Vec<ToolCall>,
    /// A call just ended and no content has followed it yet: leading whitespace there is layout.
    after_call: bool,
}

impl OutputAssembler {
    /// The assembler for a request's output, in `model_format` unless the spec overrides it. It splits text
    /// from calls with the grammar's own trigger rule (markers, and JSON calls of the offered tools).
    pub fn for_request(spec: &ConstraintSpec, model_format: ToolCallFormat) -> Self {
        let calls = spec.calls_possible();
        // JSON calls are recognised wherever the grammar can produce one: not where a JSON reply is the
        // alternative (`auto` with a `response_format`, whose document could start with the key "name").
        let json_reply =
            spec.tool_choice == ToolChoice::Auto && spec.response_format != ResponseFormat::Text;
        let names = match (&spec.tool_choice, calls && !json_reply) {
            (_, false) => Vec::new(),
            (ToolChoice::Tool { name }, true) => vec![name.clone()],
            _ => spec.tools.iter().map(|t| t.name.clone()).collect(),
        };
        Self::new(spec.format.unwrap_or(model_format), calls).with_tools(names)
    }

    /// `parse_calls`: whether the request could produce calls (tools given and `tool_choice` not `none`).
    /// Without it every character is content. Only markers are recognised until [`Self::with_tools`] names the
    /// offered tools.
    pub fn new(format: ToolCallFormat, parse_calls: bool) -> Self {
        Self {
            format,
            parse_calls,
            names: Vec::new(),
            state: State::Content,
            held: String::new(),
            content: String::new(),
            calls: Vec::new(),
            after_call: false,
        }
    }

    /// Recognises JSON calls of these tools too (what the grammar's JSON triggers allow).
    pub fn with_tools(mut self, names: Vec<String>) -> Self {
        self.names = names;
        self
    }

    /// All content emitted so far.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// Every finished call so far.
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.calls
    }

    /// Whether a call has begun and not ended (the output stopped now would cut it).
    pub fn in_call(&self) -> bool {
        matches!(
            self.state,
            State::Opened { .. } | State::ListItem | State::InCall(..)
        )
    }

    /// Feeds the next piece of generated text.
    pub fn push(&mut self, text: &str) -> Result<Vec<OutputDelta>> {
        let mut out = Vec::new();
        let mut rest = text.to_string();
        while !rest.is_empty() {
            rest = self.step(rest, &mut out)?;
        }
        Ok(out)
    }

    /// Ends the output: flushes held text. A call left open is an internal error when the grammar ended the
    /// generation (`Eos`), else it is reported as [`OutputDelta::ToolCallIncomplete`].
    pub fn finish(&mut self, reason: FinishReason) -> Result<Vec<OutputDelta>> {
        let mut out = Vec::new();
        let open = match std::mem::replace(&mut self.state, State::Content) {
            State::InCall(call, _) => Some((call.index, call.id.clone(), call.text.clone())),
            State::Opened { .. } | State::ListItem => {
                Some((self.calls.len(), new_call_id(), String::new()))
            }
            State::Content => {
                let held = std::mem::take(&mut self.held);
                // After a call only a gap may follow (whitespace, separators, code fences): layout, not text.
                if self.calls.is_empty() || !is_gap(&held) {
                    self.emit_content(held, &mut out);
                }
                None
            }
            State::ListNext | State::AwaitClose | State::AfterJson { .. } => None,
        };
        if let Some((index, id, text)) = open {
            if reason == FinishReason::Eos {
                return Err(EngineError::Internal(format!(
                    "generation ended inside a {} tool call: {text:?}",
                    self.format.name()
                )));
            }
            out.push(OutputDelta::ToolCallIncomplete { index, id, text });
        }
        Ok(out)
    }

    /// Emits reply text exactly as generated: raw text and a reply that begins with a space keep it (as
    /// llama.cpp and vLLM return it). Only whitespace right after a call is layout and dropped (a think block's
    /// is dropped by the reasoning splitter before text reaches here).
    fn emit_content(&mut self, text: String, out: &mut Vec<OutputDelta>) {
        let text = if self.after_call {
            text.trim_start().to_string()
        } else {
            text
        };
        if text.is_empty() {
            return;
        }
        self.after_call = false;
        self.content.push_str(&text);
        match out.last_mut() {
            Some(OutputDelta::Content { text: last }) => last.push_str(&text),
            _ => out.push(OutputDelta::Content { text }),
        }
    }

    /// Where a JSON trigger counts now (the grammar's rule).
    fn json_at(&self) -> JsonAt {
        if self.names.is_empty() {
            JsonAt::Never
        } else if !self.calls.is_empty() {
            JsonAt::Anywhere
        } else {
            // Emitted content never ends in whitespace (it is held), so `held` begins the output or a line only
            // where it says so itself.
            JsonAt::LineStart {
                output_start: self.content.is_empty(),
            }
        }
    }

    fn start_call(&mut self, origin: Origin) {
        let parser = CallParser::new(self.calls.len(), self.format);
        self.state = State::InCall(Box::new(parser), origin);
    }

    /// Consumes a prefix of `text` in the current state; returns what is left.
    fn step(&mut self, text: String, out: &mut Vec<OutputDelta>) -> Result<String> {
        match &mut self.state {
            State::Content if !self.parse_calls => {
                self.emit_content(text, out);
                Ok(String::new())
            }
            State::Content => {
                self.held.push_str(&text);
                let markers = self.format.markers();
                let json = self.json_at();
                match trigger::find_trigger(&self.held, markers, json) {
                    Some((at, Found::Marker { len, .. })) => {
                        let rest = self.held[at + len..].to_string();
                        let before = self.held[..at].trim_end().to_string();
                        self.held.clear();
                        self.emit_content(before, out);
                        self.state = State::Opened {
                            list: self.format.is_list(),
                        };
                        Ok(rest)
                    }
                    Some((at, Found::Json)) => {
                        let rest = self.held[at..].to_string();
                        let before = &self.held[..at];
                        let fence = trigger::fence_before(before);
                        let before = before[..fence.unwrap_or(before.len())]
                            .trim_end()
                            .to_string();
                        self.held.clear();
                        self.emit_content(before, out);
                        self.start_call(Origin::Json {
                            fenced: fence.is_some(),
                        });
                        Ok(rest)
                    }
                    // After a call, text is held to the end: the grammar allows only a gap there.
                    None if !self.calls.is_empty() => Ok(String::new()),
                    None => {
                        let keep = trigger::hold_from(&self.held, markers, json);
                        // Trailing whitespace is held too: it is layout if a call follows.
                        let emit_to = self.held[..keep].trim_end().len();
                        let emit: String = self.held.drain(..emit_to).collect();
                        self.emit_content(emit, out);
                        Ok(String::new())
                    }
                }
            }
            State::Opened { list } => {
                let list = *list;
                let Some(at) = text.find(|c: char| !c.is_whitespace()) else {
                    return Ok(String::new());
                };
                let rest = &text[at..];
                if list {
                    match rest.strip_prefix('[') {
                        Some(items) => {
                            self.state = State::ListItem;
                            Ok(items.to_string())
                        }
                        None => Err(self.unexpected("`[`", rest)),
                    }
                } else {
                    self.start_call(Origin::Marker { list: false });
                    Ok(rest.to_string())
                }
            }
            State::InCall(call, origin) => {
                let origin = *origin;
                let used = call.push(&text, out);
                if call.object.done {
                    let next = match origin {
                        Origin::Marker { list: true } => State::ListNext,
                        Origin::Marker { list: false } if !self.format.close().is_empty() => {
                            State::AwaitClose
                        }
                        Origin::Marker { list: false } => State::AfterJson { fenced: false },
                        Origin::Json { fenced } => State::AfterJson { fenced },
                    };
                    let State::InCall(call, _) = std::mem::replace(&mut self.state, next) else {
                        return Err(EngineError::Internal("assembler state changed".into()));
                    };
                    let finished = call.finish(out)?;
                    self.calls.push(finished);
                    self.after_call = true;
                }
                Ok(text[used..].to_string())
            }
            State::ListItem => {
                let Some(at) = text.find(|c: char| !c.is_whitespace()) else {
                    return Ok(String::new());
                };
                self.start_call(Origin::Marker { list: true });
                Ok(text[at..].to_string())
            }
            State::ListNext => {
                let Some(at) = text.find(|c: char| !c.is_whitespace()) else {
                    return Ok(String::new());
                };
                let rest = &text[at..];
                if let Some(next) = rest.strip_prefix(',') {
                    self.state = State::ListItem;
                    return Ok(next.to_string());
                }
                if let Some(after) = rest.strip_prefix(']') {
                    self.state = if self.format.close().is_empty() {
                        State::AfterJson { fenced: false }
                    } else {
                        State::AwaitClose
                    };
                    return Ok(after.to_string());
                }
                Err(self.unexpected("`,` or `]`", rest))
            }
            State::AwaitClose => {
                let close = self.format.close().trim_start();
                self.held.push_str(&text);
                if let Some(at) = self.held.find(close) {
                    let rest = self.held[at + close.len()..].to_string();
                    self.held.clear();
                    self.state = State::Content;
                    return Ok(rest);
                }
                let keep_from = trigger::partial_suffix_start(&self.held, close);
                self.held.drain(..keep_from);
                Ok(String::new())
            }
            State::AfterJson { fenced } => {
                let fenced = *fenced;
                self.held.push_str(&text);
                let trimmed = self.held.trim_start().to_string();
                if trimmed.is_empty() {
                    return Ok(String::new());
                }
                let held = std::mem::take(&mut self.held);
                if fenced {
                    if "```".starts_with(trimmed.as_str()) && trimmed.len() < 3 {
                        self.held = held;
                        return Ok(String::new());
                    }
                    self.state = State::Content;
                    return Ok(match trimmed.strip_prefix("```") {
                        Some(after) => after.to_string(),
                        None => held,
                    });
                }
                self.state = State::Content;
                let sep = self.format.call_separator().trim();
                if !sep.is_empty() && self.format.is_bare() {
                    if let Some(after) = trimmed.strip_prefix(sep) {
                        return Ok(after.to_string());
                    }
                }
                Ok(held)
            }
        }
    }

    fn unexpected(&self, wanted: &str, got: &str) -> EngineError {
        EngineError::Internal(format!(
            "a {} tool-call block has {:?} where {wanted} belongs",
            self.format.name(),
            got.chars().take(40).collect::<String>()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(parse_calls: bool, pieces: &[&str]) -> OutputAssembler {
        let hermes = ToolCallFormat::from_name("hermes").unwrap();
        let mut a = OutputAssembler::new(hermes, parse_calls).with_tools(vec!["read".into()]);
        for p in pieces {
            a.push(p).unwrap();
        }
        a.finish(FinishReason::Eos).unwrap();
        a
    }

    #[test]
    fn raw_text_keeps_its_leading_whitespace() {
        assert_eq!(run(false, &[" H", " I", " K"]).content(), " H I K");
        assert_eq!(run(false, &["\n\n", "x "]).content(), "\n\nx ");
        assert_eq!(run(false, &[" "]).content(), " ");
    }

    #[test]
    fn a_reply_begun_with_a_space_keeps_it_where_calls_could_follow() {
        assert_eq!(run(true, &[" Hello", " world"]).content(), " Hello world");
        assert_eq!(run(true, &["  ", "indented"]).content(), "  indented");
        // Text before a call keeps its start; only the whitespace before the marker is layout.
        let a = run(
            true,
            &[
                " Let me look.\n",
                "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a\"}}\n</tool_call>",
            ],
        );
        assert_eq!(a.content(), " Let me look.");
        assert_eq!(a.tool_calls().len(), 1);
    }

    #[test]
    fn whitespace_after_a_call_is_layout() {
        let call =
            "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a\"}}\n</tool_call>";
        let a = run(true, &[call, "\n\n"]);
        assert_eq!(a.content(), "");
        assert_eq!(a.tool_calls().len(), 1);
        let a = run(true, &[call, "\n", call, "\n"]);
        assert_eq!(a.content(), "");
        assert_eq!(a.tool_calls().len(), 2);
    }
}
