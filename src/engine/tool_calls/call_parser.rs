//! One call object being parsed from generated text: `{"name": "…", "<arguments key>": …}`. It reports the
//! call's start as soon as the name is known, then the argument text fragment by fragment, and finds where the
//! object ends without a full JSON parser (strings, escapes and nesting are tracked).

use super::delta::{OutputDelta, ToolCall};
use crate::engine::error::{EngineError, Result};
use crate::text::call_format::ToolCallFormat;

/// Finds where one JSON value ends in a stream of characters.
#[derive(Debug, Default, Clone)]
pub(super) struct JsonValueEnd {
    started: bool,
    depth: usize,
    in_string: bool,
    escape: bool,
    primitive: bool,
    pub(super) done: bool,
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
pub(super) struct CallParser {
    pub(super) index: usize,
    pub(super) id: String,
    format: ToolCallFormat,
    pub(super) text: String,
    pub(super) object: JsonValueEnd,
    /// Name and byte offset of the arguments in `text`, once the prefix is recognised.
    head: Option<(String, usize)>,
    args: JsonValueEnd,
    args_text: String,
}

impl CallParser {
    pub(super) fn new(index: usize, format: ToolCallFormat) -> Self {
        Self {
            index,
            id: crate::engine::tool_calls::assembler::new_call_id(),
            format,
            text: String::new(),
            object: JsonValueEnd::default(),
            head: None,
            args: JsonValueEnd::default(),
            args_text: String::new(),
        }
    }

    /// Feeds characters until the object ends; returns how many bytes of `chunk` were used.
    pub(super) fn push(&mut self, chunk: &str, out: &mut Vec<OutputDelta>) -> usize {
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
    pub(super) fn finish(self, out: &mut Vec<OutputDelta>) -> Result<ToolCall> {
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
