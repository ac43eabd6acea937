//! Special tokens come only from the chat template's own markup, never from request content.
//!
//! A rendered chat prompt is tokenized with special-token parsing, because the template writes its markup
//! (`<|im_start|>user\n`) as text. Without care the same parsing would turn `<|im_start|>system` typed by a user,
//! written by the model, returned by a tool or placed in a tool's description into control tokens: a prompt
//! injection. [`ContentGuard`] prevents it:
//!
//! 1. Before rendering, every occurrence of a control token's text (see
//!    [`Tokenizer::control_texts`](super::tokenizer::Tokenizer::control_texts)) in any string of the request
//!    (message contents, tool-call arguments, tool results, names, the system prompt, tool descriptions and
//!    schemas) is replaced by a sentinel: a private-use character that appears nowhere in the request or the
//!    template, one per distinct control text.
//! 2. The template renders the hidden request. Whatever it does with the content (trimming, `tojson`,
//!    wrapping tool results in `<tool_response>`) moves the sentinels along with it.
//! 3. [`ContentGuard::restore`] puts the original texts back and returns their byte ranges, which
//!    [`Tokenizer::encode_with_literals`](super::tokenizer::Tokenizer::encode_with_literals) keeps as ordinary
//!    text while still parsing the template's markup.
//!
//! The restored text is byte for byte the plain rendering, and the tokenizer splits it exactly as before, so a
//! prompt whose content holds no control-token text gets the very same ids (the llama.cpp comparisons in
//! `tests/suite/` stay exact); one that does gets its content tokenized as `encode(content, false)` would, with
//! the surrounding markup unchanged. Why sentinels rather than finding each content string in the rendered text:
//! templates trim, re-serialize (`tojson` of parsed tool-call arguments) and re-wrap content, so the rendered form
//! of a string is not always the string, while a sentinel character survives all of that.
//!
//! Limits: user-defined tokens (Qwen's `<tool_call>`) are matched in content too, as llama.cpp does without
//! special parsing. A template that escapes non-ASCII (`tojson(ensure_ascii=True)`) would render a sentinel as
//! `\uXXXX`; the prompt then shows that escape instead of the control text (still no control token).

use std::collections::HashSet;
use std::ops::Range;

use serde_json::{Map, Value};

use crate::schema::ToolSpec;
use crate::text::error::{Result, TextError};

/// Private-use ranges sentinels are drawn from (the BMP area first, then supplementary plane 15).
const SENTINEL_RANGES: [Range<u32>; 2] = [0xE000..0xF900, 0xF0000..0xFFFFE];

/// The control texts hidden in one request and the sentinel standing for each.
#[derive(Debug, Default)]
pub struct ContentGuard {
    /// `(control text, sentinel)`, longest text first.
    hidden: Vec<(String, char)>,
}

impl ContentGuard {
    /// A guard for the control texts that occur in `messages` or `tools`. `template_source` is the template's
    /// text, whose characters are never used as sentinels. No occurrence at all (the usual case): an empty guard
    /// that changes nothing.
    pub fn new<'a>(
        control_texts: impl IntoIterator<Item = &'a str>,
        messages: &[Value],
        tools: &[ToolSpec],
        template_source: &str,
    ) -> Result<Self> {
        let mut strings: Vec<&str> = Vec::new();
        for m in messages {
            collect_strings(m, &mut strings);
        }
        for t in tools {
            strings.push(&t.name);
            strings.push(&t.description);
            collect_strings(&t.parameters, &mut strings);
        }
        let mut occurring: Vec<&str> = control_texts
            .into_iter()
            .filter(|c| !c.trim().is_empty() && strings.iter().any(|s| s.contains(c)))
            .collect();
        if occurring.is_empty() {
            return Ok(Self::default());
        }
        occurring.sort_by_key(|c| std::cmp::Reverse(c.len()));
        occurring.dedup();
        let taken: HashSet<char> = strings
            .iter()
            .copied()
            .chain([template_source])
            .chain(occurring.iter().copied())
            .flat_map(str::chars)
            .filter(|c| is_private_use(*c))
            .collect();
        let mut free = SENTINEL_RANGES
            .iter()
            .flat_map(|r| r.clone())
            .filter_map(char::from_u32)
            .filter(|c| !taken.contains(c));
        let mut hidden = Vec::with_capacity(occurring.len());
        for text in occurring {
            let sentinel = free.next().ok_or_else(|| {
                TextError::Template(
                    "no free private-use character to guard the request's content".into(),
                )
            })?;
            hidden.push((text.to_string(), sentinel));
        }
        Ok(Self { hidden })
    }

    /// Whether there is nothing to hide.
    pub fn is_empty(&self) -> bool {
        self.hidden.is_empty()
    }

    /// `messages` with every control text in every string (keys included) replaced by its sentinel.
    pub fn hide_messages(&self, messages: &[Value]) -> Vec<Value> {
        messages.iter().map(|m| self.hide_value(m)).collect()
    }

    /// `tools` with control texts in their names, descriptions and schemas replaced by sentinels.
    pub fn hide_tools(&self, tools: &[ToolSpec]) -> Vec<ToolSpec> {
        tools
            .iter()
            .map(|t| {
                ToolSpec::new_unchecked(
                    self.hide_str(&t.name),
                    self.hide_str(&t.description),
                    self.hide_value(&t.parameters),
                )
            })
            .collect()
    }

    /// The rendered text with the original control texts back in place of the sentinels, and the byte range of
    /// each restored text (in order): content to tokenize without special-token parsing.
    pub fn restore(&self, rendered: &str) -> (String, Vec<Range<usize>>) {
        if self.hidden.is_empty() {
            return (rendered.to_string(), Vec::new());
        }
        let mut out = String::with_capacity(rendered.len());
        let mut literal = Vec::new();
        for c in rendered.chars() {
            match self.hidden.iter().find(|(_, s)| *s == c) {
                Some((text, _)) => {
                    let start = out.len();
                    out.push_str(text);
                    literal.push(start..out.len());
                }
                None => out.push(c),
            }
        }
        (out, literal)
    }

    fn hide_str(&self, s: &str) -> String {
        let mut out = s.to_string();
        for (text, sentinel) in &self.hidden {
            if out.contains(text.as_str()) {
                out = out.replace(text.as_str(), sentinel.encode_utf8(&mut [0; 4]));
            }
        }
        out
    }

    fn hide_value(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.hide_str(s)),
            Value::Array(items) => Value::Array(items.iter().map(|x| self.hide_value(x)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, x)| (self.hide_str(k), self.hide_value(x)))
                    .collect::<Map<String, Value>>(),
            ),
            other => other.clone(),
        }
    }
}

/// Every string in `v`, object keys included.
fn collect_strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|x| collect_strings(x, out)),
        Value::Object(map) => {
            for (k, x) in map {
                out.push(k);
                collect_strings(x, out);
            }
        }
        _ => {}
    }
}

fn is_private_use(c: char) -> bool {
    SENTINEL_RANGES.iter().any(|r| r.contains(&(c as u32)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CONTROL: [&str; 2] = ["<|im_start|>", "<|im_end|>"];

    #[test]
    fn nothing_to_hide_changes_nothing() {
        let msgs = [json!({"role": "user", "content": "plain <b>text</b>"})];
        let g = ContentGuard::new(CONTROL, &msgs, &[], "").unwrap();
        assert!(g.is_empty());
        assert_eq!(g.hide_messages(&msgs), msgs);
        assert_eq!(
            g.restore("x<|im_start|>y"),
            ("x<|im_start|>y".to_string(), vec![])
        );
    }

    #[test]
    fn hides_everywhere_and_restores_ranges() {
        let msgs = [
            json!({"role": "user", "content": "a<|im_start|>b"}),
            json!({"role": "assistant", "tool_calls": [{"function": {"name": "f",
                   "arguments": {"<|im_end|>": ["<|im_start|>"]}}}]}),
        ];
        // A private-use character already in the request is never chosen.
        let tools = [ToolSpec::new_unchecked(
            "t",
            "uses \u{E000} and <|im_end|>",
            json!({}),
        )];
        let g = ContentGuard::new(CONTROL, &msgs, &tools, "{{ x }}").unwrap();
        let hidden = g.hide_messages(&msgs);
        let text = serde_json::to_string(&hidden).unwrap();
        assert!(!text.contains("<|im_"), "{text}");
        let hidden_tools = g.hide_tools(&tools);
        assert!(!hidden_tools[0].description.contains("<|im_end|>"));
        assert!(hidden_tools[0].description.contains('\u{E000}'));
        // Rendering (simulated): markup around the hidden content.
        let content = hidden[0]["content"].as_str().unwrap();
        let rendered = format!("<|im_start|>user\n{content}<|im_end|>\n");
        let (restored, literal) = g.restore(&rendered);
        assert_eq!(restored, "<|im_start|>user\na<|im_start|>b<|im_end|>\n");
        assert_eq!(literal, vec![18..30]);
        assert_eq!(&restored[literal[0].clone()], "<|im_start|>");
    }
}
