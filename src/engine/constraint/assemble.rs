//! Output assembly: generated text in, content and tool calls out, incrementally.
//!
//! The caller feeds every piece of generated text (the `text` of each `TokenEvent`, then the summary's trailing
//! text) to an [`OutputAssembler`] and gets [`OutputDelta`]s back: content as it is produced, a call's start as
//! soon as its name is known, its argument text fragment by fragment, and the finished [`ToolCall`] with a unique
//! id. Under the grammar a call always parses; if one ever does not, that is an [`EngineError::Internal`], never a
//! call silently turned into text or dropped.

use serde::{Deserialize, Serialize};

use super::super::error::{EngineError, Result};
use super::super::generate::FinishReason;
use super::format::ToolCallFormat;

/// A finished tool call. `arguments` is the JSON text of the arguments exactly as generated (the concatenation
/// of the call's argument fragments).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One step of assembled output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputDelta {
    /// Reply text (never part of a call).
    Content { text: String },
    /// Call number `index` (0-based, in order) has begun; its name is known.
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of call `index`'s argument JSON text.
    ToolCallArguments { index: usize, fragment: String },
    /// Call `index` is complete.
    ToolCallEnd { index: usize, call: ToolCall },
    /// Generation stopped (length, stop string, cancel) inside call `index`; it is not a usable call.
    ToolCallIncomplete {
        index: usize,
        id: String,
        text: String,
    },
}

/// Finds where one JSON value ends in a stream of characters.
#[derive(Debug, Default, Clone)]
struct JsonValueEnd {
    started: bool,
    depth: usize,
    in_string: bool,
    escape: bool,
    primitive: bool,
    done: bool,
}

impl JsonValueEnd {
    /// Feeds `c`; returns whether it belongs to the value (leading whitespace does).
    fn push(&mut self, c: char) -> bool {
        if self.done {
            return false;
        }
        if !self.started {
            if c.is_whitespace() {
                return true;
            }
            self.started = true;
            match c {
                '{' | '[' => self.depth = 1,
                '"' => self.in_string = true,
                _ => self.primitive = true,
            }
            return true;
        }
        if self.primitive {
            if c.is_whitespace() || matches!(c, ',' | '}' | ']' | ';') {
                self.done = true;
                return false;
            }
            return true;
        }
        if self.in_string {
            if self.escape {
                self.escape = false;
            } else if c == '\\' {
                self.escape = true;
            } else if c == '"' {
                self.in_string = false;
                if self.depth == 0 {
                    self.done = true;
                }
            }
            return true;
        }
        match c {
            '"' => self.in_string = true,
            '{' | '[' => self.depth += 1,
            '}' | ']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 0 {
                    self.done = true;
                }
            }
            _ => {}
        }
        true
    }
}

/// One call object being parsed: `{"name": "…", "arguments": …}`.
struct CallParser {
    index: usize,
    id: String,
    format: ToolCallFormat,
    text: String,
    object: JsonValueEnd,
    /// Name and byte offset of the arguments in `text`, once the prefix is recognised.
    head: Option<(String, usize)>,
    args: JsonValueEnd,
    args_text: String,
}

impl CallParser {
    fn new(index: usize, format: ToolCallFormat) -> Self {
        Self {
            index,
            id: new_call_id(),
            format,
            text: String::new(),
            object: JsonValueEnd::default(),
            head: None,
            args: JsonValueEnd::default(),
            args_text: String::new(),
        }
    }

    /// Feeds characters until the object ends; returns how many bytes of `chunk` were used.
    fn push(&mut self, chunk: &str, out: &mut Vec<OutputDelta>) -> usize {
        let mut fragment = String::new();
        let mut used = chunk.len();
        for (i, c) in chunk.char_indices() {
            if !self.object.push(c) {
                used = i;
                break;
            }
            self.text.push(c);
            if self.head.is_some() {
                if self.args.push(c) {
                    fragment.push(c);
                    self.args_text.push(c);
                }
            } else if self.text.len() <= 256 {
                if let Some((name, at)) = match_call_prefix(&self.text, self.format) {
                    out.push(OutputDelta::ToolCallStart {
                        index: self.index,
                        id: self.id.clone(),
                        name: name.clone(),
                    });
                    // The character that completed the prefix is the first of the arguments.
                    let first = &self.text[at..];
                    for a in first.chars() {
                        if self.args.push(a) {
                            fragment.push(a);
                            self.args_text.push(a);
                        }
                    }
                    self.head = Some((name, at));
                }
            }
            if self.object.done {
                used = i + c.len_utf8();
                break;
            }
        }
        if !fragment.is_empty() {
            out.push(OutputDelta::ToolCallArguments {
                index: self.index,
                fragment,
            });
        }
        used
    }

    /// The finished call, once the object is complete.
    fn finish(self, out: &mut Vec<OutputDelta>) -> Result<ToolCall> {
        let internal = |why: String| {
            EngineError::Internal(format!(
                "a {} tool call did not parse ({why}): {:?}",
                self.format.name(),
                self.text
            ))
        };
        let (name, arguments) = match &self.head {
            Some((name, _)) => {
                // Syntax only: a number beyond f64's range is still JSON, and the arguments are passed on as text.
                serde_json::from_str::<serde::de::IgnoredAny>(&self.text)
                    .map_err(|e| internal(e.to_string()))?;
                (name.clone(), self.args_text.trim().to_string())
            }
            None => {
                // Not the canonical key order: parse the whole call and report it now.
                let value: serde_json::Value =
                    serde_json::from_str(&self.text).map_err(|e| internal(e.to_string()))?;
                let name = value
                    .get("name")
                    .and_then(|n| n.as_str())
                    .ok_or_else(|| internal("no string `name`".into()))?
                    .to_string();
                let args = value
                    .get(self.format.arguments_key())
                    .or_else(|| value.get("arguments"))
                    .or_else(|| value.get("parameters"))
                    .ok_or_else(|| internal(format!("no `{}`", self.format.arguments_key())))?;
                let text = args.to_string();
                out.push(OutputDelta::ToolCallStart {
                    index: self.index,
                    id: self.id.clone(),
                    name: name.clone(),
                });
                out.push(OutputDelta::ToolCallArguments {
                    index: self.index,
                    fragment: text.clone(),
                });
                (name, text)
            }
        };
        let call = ToolCall {
            id: self.id,
            name,
            arguments,
        };
        out.push(OutputDelta::ToolCallEnd {
            index: self.index,
            call: call.clone(),
        });
        Ok(call)
    }
}

/// Recognises `{"name": "NAME", "<arguments key>": ` followed by at least one character; returns the name and
/// the byte offset where the arguments begin.
fn match_call_prefix(text: &str, format: ToolCallFormat) -> Option<(String, usize)> {
    let b = text.as_bytes();
    let mut i = 0;
    let ws = |i: &mut usize| {
        while *i < b.len() && b[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    let lit = |i: &mut usize, s: &[u8]| -> Option<()> {
        if b.get(*i..*i + s.len())? == s {
            *i += s.len();
            Some(())
        } else {
            None
        }
    };
    let string = |i: &mut usize| -> Option<String> {
        let start = *i;
        if b.get(*i)? != &b'"' {
            return None;
        }
        *i += 1;
        let mut escape = false;
        while *i < b.len() {
            let c = b[*i];
            *i += 1;
            if escape {
                escape = false;
            } else if c == b'\\' {
                escape = true;
            } else if c == b'"' {
                return serde_json::from_str(&text[start..*i]).ok();
            }
        }
        None
    };
    ws(&mut i);
    lit(&mut i, b"{")?;
    ws(&mut i);
    if string(&mut i)? != "name" {
        return None;
    }
    ws(&mut i);
    lit(&mut i, b":")?;
    ws(&mut i);
    let name = string(&mut i)?;
    ws(&mut i);
    lit(&mut i, b",")?;
    ws(&mut i);
    let key = string(&mut i)?;
    if key != format.arguments_key() && key != "arguments" && key != "parameters" {
        return None;
    }
    ws(&mut i);
    lit(&mut i, b":")?;
    ws(&mut i);
    (i < b.len()).then_some((name, i))
}

/// A fresh `call_…` id (24 random hex digits), unique per call.
pub fn new_call_id() -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("call_{}", &hex[..24])
}

enum State {
    /// Reply text; `held` may be the start of a call opener or trailing whitespace.
    Content,
    /// llama3_json: nothing but whitespace so far.
    Undecided,
    InCall(Box<CallParser>),
    /// A call object ended; waiting for its closer (Hermes) or the next call (llama3_json).
    AfterCall,
    /// llama3_json: the reply is text; calls are no longer looked for.
    TextOnly,
}

/// Turns generated text into content and tool calls (see the module doc).
pub struct OutputAssembler {
    format: ToolCallFormat,
    parse_calls: bool,
    state: State,
    held: String,
    content: String,
    calls: Vec<ToolCall>,
}

impl OutputAssembler {
    /// `parse_calls`: whether the request could produce calls (tools given and `tool_choice` not `none`).
    /// Without it every character is content.
    pub fn new(format: ToolCallFormat, parse_calls: bool) -> Self {
        let state = match (parse_calls, format) {
            (true, ToolCallFormat::Llama3Json) => State::Undecided,
            _ => State::Content,
        };
        Self {
            format,
            parse_calls,
            state,
            held: String::new(),
            content: String::new(),
            calls: Vec::new(),
        }
    }

    /// All content emitted so far.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// Every finished call so far.
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.calls
    }

    /// Feeds the next piece of generated text.
    pub fn push(&mut self, text: &str) -> Result<Vec<OutputDelta>> {
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            rest = self.step(rest, &mut out)?;
        }
        Ok(out)
    }

    /// Ends the output: flushes held text. A call left open is an internal error when the grammar ended the
    /// generation (`Eos`), else it is reported as [`OutputDelta::ToolCallIncomplete`].
    pub fn finish(&mut self, reason: FinishReason) -> Result<Vec<OutputDelta>> {
        let mut out = Vec::new();
        match std::mem::replace(&mut self.state, State::TextOnly) {
            State::InCall(call) => {
                if reason == FinishReason::Eos {
                    return Err(EngineError::Internal(format!(
                        "generation ended inside a {} tool call: {:?}",
                        self.format.name(),
                        call.text
                    )));
                }
                out.push(OutputDelta::ToolCallIncomplete {
                    index: call.index,
                    id: call.id,
                    text: call.text,
                });
            }
            State::Content | State::Undecided | State::TextOnly => {
                let held = std::mem::take(&mut self.held);
                // Whitespace after the last call is layout, not reply text.
                if !held.trim().is_empty() || self.calls.is_empty() {
                    self.emit_content(held, &mut out);
                }
            }
            State::AfterCall => {}
        }
        Ok(out)
    }

    fn emit_content(&mut self, text: String, out: &mut Vec<OutputDelta>) {
        if text.is_empty() {
            return;
        }
        self.content.push_str(&text);
        match out.last_mut() {
            Some(OutputDelta::Content { text: last }) => last.push_str(&text),
            _ => out.push(OutputDelta::Content { text }),
        }
    }

    /// Consumes a prefix of `text` in the current state; returns what is left.
    fn step<'a>(&mut self, text: &'a str, out: &mut Vec<OutputDelta>) -> Result<&'a str> {
        match &mut self.state {
            State::TextOnly => {
                let held = std::mem::take(&mut self.held);
                self.emit_content(held + text, out);
                Ok("")
            }
            State::Content if !self.parse_calls => {
                self.emit_content(text.to_string(), out);
                Ok("")
            }
            State::Content => {
                let Some(open) = self.format.open_delimiter() else {
                    self.state = State::TextOnly;
                    return Ok(text);
                };
                self.held.push_str(text);
                if let Some(at) = self.held.find(open) {
                    let rest = rest_after(text, self.held.len() - at - open.len())?;
                    let before = self.held[..at].trim_end().to_string();
                    self.held.clear();
                    self.emit_content(before, out);
                    self.state =
                        State::InCall(Box::new(CallParser::new(self.calls.len(), self.format)));
                    // The rest is fed through the new state.
                    return Ok(rest);
                }
                // Hold a suffix that may start the opener, and trailing whitespace.
                let keep_from = partial_suffix_start(&self.held, open);
                let ws_from = self.held[..keep_from].trim_end().len();
                let emit: String = self.held[..ws_from].to_string();
                self.held.drain(..ws_from);
                self.emit_content(emit, out);
                Ok("")
            }
            State::Undecided => match text.char_indices().find(|(_, c)| !c.is_whitespace()) {
                None => {
                    self.held.push_str(text);
                    Ok("")
                }
                Some((i, '{')) => {
                    self.held.clear();
                    self.state =
                        State::InCall(Box::new(CallParser::new(self.calls.len(), self.format)));
                    Ok(&text[i..])
                }
                Some(_) => {
                    self.state = State::TextOnly;
                    Ok(text)
                }
            },
            State::InCall(call) => {
                let used = call.push(text, out);
                if call.object.done {
                    let State::InCall(call) = std::mem::replace(&mut self.state, State::AfterCall)
                    else {
                        return Err(EngineError::Internal("assembler state changed".into()));
                    };
                    let finished = call.finish(out)?;
                    self.calls.push(finished);
                }
                Ok(&text[used..])
            }
            State::AfterCall => match self.format.close_delimiter() {
                Some(close) => {
                    self.held.push_str(text);
                    if let Some(at) = self.held.find(close) {
                        let rest = rest_after(text, self.held.len() - at - close.len())?;
                        self.held.clear();
                        self.state = State::Content;
                        return Ok(rest);
                    }
                    let keep_from = partial_suffix_start(&self.held, close);
                    self.held.drain(..keep_from);
                    Ok("")
                }
                None => match text
                    .char_indices()
                    .find(|(_, c)| !c.is_whitespace() && *c != ';')
                {
                    None => Ok(""),
                    Some((i, '{')) => {
                        self.state =
                            State::InCall(Box::new(CallParser::new(self.calls.len(), self.format)));
                        Ok(&text[i..])
                    }
                    Some((i, _)) => {
                        self.state = State::TextOnly;
                        Ok(&text[i..])
                    }
                },
            },
        }
    }
}

/// The last `len` bytes of `text`. A delimiter is looked for in the held buffer after every push, so the first
/// one found always ends inside the latest `text`: what follows it is a suffix of `text`.
fn rest_after(text: &str, len: usize) -> Result<&str> {
    if len <= text.len() && text.is_char_boundary(text.len() - len) {
        Ok(&text[text.len() - len..])
    } else {
        Err(EngineError::Internal(
            "tool-call delimiter found outside the latest text".into(),
        ))
    }
}

/// Byte offset where the longest suffix of `s` that is a proper prefix of `delim` begins (`s.len()` if none).
fn partial_suffix_start(s: &str, delim: &str) -> usize {
    for (i, _) in delim
        .char_indices()
        .skip(1)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        if s.ends_with(&delim[..i]) {
            return s.len() - i;
        }
    }
    s.len()
}
