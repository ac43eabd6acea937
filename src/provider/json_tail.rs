//! The shortest text that makes a cut JSON prefix parse: what a call's arguments need when the output limit
//! stopped them mid-value and no grammar could close them in budget (a remote server, a hole in the engine's
//! early close). Only appended — text already streamed to a client is never taken back — so a dangling key gets
//! `: null`, a dangling comma in an object gets `"": null`, a partial literal is completed, open strings and
//! containers are closed. The result is valid JSON, not necessarily valid against any schema: such a call stays
//! marked truncated and is never run.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Object after `{`: a key or `}`.
    KeyOrEnd,
    /// Object after `,`: a key.
    Key,
    /// Object after a key: `:`.
    Colon,
    /// Object after `:`, or array after `,`: a value.
    Value,
    /// Array after `[`: a value or `]`.
    ValueOrEnd,
    /// After a value inside a container: `,` or the closer.
    CommaOrEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Object,
    Array,
}

/// What a string being read is, which decides what must follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StringRole {
    Key,
    Value,
}

#[derive(Debug, Default)]
struct Scan {
    stack: Vec<(Kind, Expect)>,
    /// A top-level value has begun.
    started: bool,
    /// Inside a string: its role.
    string: Option<StringRole>,
    /// After a backslash inside a string.
    escape: bool,
    /// Hex digits still missing from a `\u` escape.
    hex_left: u8,
    hex: u16,
    /// The last escape was a high surrogate with no low one after it yet.
    high_surrogate: bool,
    /// A number or literal being read.
    scalar: String,
}

impl Scan {
    fn value_done(&mut self) {
        if let Some((_, e)) = self.stack.last_mut() {
            *e = Expect::CommaOrEnd;
        }
    }

    fn end_scalar(&mut self) {
        if !self.scalar.is_empty() {
            self.scalar.clear();
            self.value_done();
        }
    }

    fn push(&mut self, c: char) {
        if let Some(role) = self.string {
            self.push_in_string(c, role);
            return;
        }
        if !self.scalar.is_empty() && (c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-')) {
            self.scalar.push(c);
            return;
        }
        self.end_scalar();
        match c {
            // A container opening is the parent's value: the parent next wants `,` or its closer.
            '{' => {
                self.started = true;
                self.value_done();
                self.stack.push((Kind::Object, Expect::KeyOrEnd));
            }
            '[' => {
                self.started = true;
                self.value_done();
                self.stack.push((Kind::Array, Expect::ValueOrEnd));
            }
            '}' | ']' => {
                self.stack.pop();
            }
            '"' => {
                self.started = true;
                let role = match self.stack.last() {
                    Some((Kind::Object, Expect::KeyOrEnd | Expect::Key)) => StringRole::Key,
                    _ => StringRole::Value,
                };
                self.string = Some(role);
                self.high_surrogate = false;
            }
            ':' => {
                if let Some((_, e)) = self.stack.last_mut() {
                    *e = Expect::Value;
                }
            }
            ',' => {
                if let Some((kind, e)) = self.stack.last_mut() {
                    *e = match kind {
                        Kind::Object => Expect::Key,
                        Kind::Array => Expect::Value,
                    };
                }
            }
            c if c.is_whitespace() => {}
            c => {
                self.started = true;
                self.scalar.push(c);
            }
        }
    }

    fn push_in_string(&mut self, c: char, role: StringRole) {
        if self.hex_left > 0 {
            self.hex = (self.hex << 4) | c.to_digit(16).unwrap_or(0) as u16;
            self.hex_left -= 1;
            if self.hex_left == 0 {
                self.high_surrogate = (0xD800..0xDC00).contains(&self.hex);
            }
            return;
        }
        if self.escape {
            self.escape = false;
            if c == 'u' {
                self.hex_left = 4;
                self.hex = 0;
            } else {
                self.high_surrogate = false;
            }
            return;
        }
        match c {
            '\\' => self.escape = true,
            '"' => {
                self.string = None;
                self.high_surrogate = false;
                match role {
                    StringRole::Key => {
                        if let Some((_, e)) = self.stack.last_mut() {
                            *e = Expect::Colon;
                        }
                    }
                    StringRole::Value => self.value_done(),
                }
            }
            _ => self.high_surrogate = false,
        }
    }

    /// The text that closes what is open.
    fn tail(mut self) -> String {
        let mut out = String::new();
        if let Some(role) = self.string {
            if self.hex_left > 0 {
                let (v, pad) = finish_hex(self.hex, self.hex_left, self.high_surrogate);
                out.push_str(&pad);
                self.high_surrogate = (0xD800..0xDC00).contains(&v);
            } else if self.escape && self.high_surrogate {
                // `\` after a high surrogate: make it the low half of the pair.
                out.push_str("udc00");
                self.high_surrogate = false;
            } else if self.escape {
                out.push('\\');
            }
            if self.high_surrogate {
                out.push_str("\\udc00");
            }
            out.push('"');
            self.string = None;
            match role {
                StringRole::Key => {
                    if let Some((_, e)) = self.stack.last_mut() {
                        *e = Expect::Colon;
                    }
                }
                StringRole::Value => self.value_done(),
            }
        }
        if !self.scalar.is_empty() {
            out.push_str(&complete_scalar(&self.scalar));
            self.end_scalar();
        }
        if !self.started {
            return "{}".to_string();
        }
        while let Some((kind, expect)) = self.stack.pop() {
            match expect {
                Expect::Key => out.push_str("\"\": null"),
                Expect::Colon => out.push_str(": null"),
                Expect::Value => out.push_str("null"),
                Expect::KeyOrEnd | Expect::ValueOrEnd | Expect::CommaOrEnd => {}
            }
            out.push(match kind {
                Kind::Object => '}',
                Kind::Array => ']',
            });
        }
        out
    }
}

/// The digits that finish a `\u` escape of which `left` digits are missing (`typed` holds the others): the
/// smallest low surrogate after a high one where the typed digits allow it, else zeros. Returns the code unit
/// and the padding.
fn finish_hex(typed: u16, left: u8, after_high: bool) -> (u16, String) {
    let shift = 4 * u32::from(left);
    let low = u32::from(typed) << shift;
    let high = low | ((1u32 << shift) - 1);
    let v = match after_high && high >= 0xDC00 && low <= 0xDFFF {
        true => low.max(0xDC00),
        false => low,
    };
    let digits = format!("{v:04x}");
    (v as u16, digits[4 - usize::from(left)..].to_string())
}

/// What a cut number or literal needs to become a valid one.
fn complete_scalar(text: &str) -> String {
    for literal in ["true", "false", "null"] {
        if let Some(rest) = literal.strip_prefix(text) {
            return rest.to_string();
        }
    }
    match text.chars().last() {
        Some('-' | '+' | '.' | 'e' | 'E') => "0".to_string(),
        _ => String::new(),
    }
}

/// The text to append to `prefix` (a cut JSON value, possibly empty) so that it parses. Empty when it already
/// does; `{}` for an empty prefix (a call cut before its arguments began).
pub fn closing_tail(prefix: &str) -> String {
    if serde_json::from_str::<serde_json::Value>(prefix).is_ok() {
        return String::new();
    }
    let mut scan = Scan::default();
    for c in prefix.chars() {
        scan.push(c);
    }
    scan.tail()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closes(prefix: &str) -> serde_json::Value {
        let full = format!("{prefix}{}", closing_tail(prefix));
        serde_json::from_str(&full).unwrap_or_else(|e| panic!("{prefix:?} + tail = {full:?}: {e}"))
    }

    #[test]
    fn every_prefix_of_real_documents_closes() {
        let docs = [
            r#"{"path": "src/main.rs", "edits": [{"old_text": "a + b", "new_text": "a - b"}]}"#,
            r#"{"a": [1, -2.5e-3, true, false, null, {"b": "x\"y\\z\u00e9\ud83e\udd80"}], "c": {}}"#,
            r#"[{"k": [[], [1, [2, [3]]]]}, "s", 0, 12345678901234567890]"#,
            r#"{"command": "cargo test -- --nocapture\n\techo done", "timeout": 30}"#,
        ];
        for doc in docs {
            let full: serde_json::Value = serde_json::from_str(doc).unwrap();
            for (i, _) in doc.char_indices() {
                closes(&doc[..i]);
            }
            assert_eq!(closes(doc), full);
            assert_eq!(closing_tail(doc), "");
        }
    }

    #[test]
    fn tails_are_the_shortest_sensible_ones() {
        assert_eq!(closing_tail(""), "{}");
        assert_eq!(closing_tail("{\""), "\": null}");
        assert_eq!(closing_tail("{\"path\": \"src/ma"), "\"}");
        assert_eq!(closing_tail("{\"n\": tr"), "ue}");
        assert_eq!(closing_tail("{\"n\": 1."), "0}");
        assert_eq!(closing_tail("{\"a\": 1, "), "\"\": null}");
        assert_eq!(closing_tail("[1, "), "null]");
        assert_eq!(closing_tail("{\"s\": \"x\\"), "\\\"}");
        assert_eq!(closing_tail("{\"s\": \"\\u00"), "00\"}");
        assert_eq!(closing_tail("{\"s\": \"\\ud83e"), "\\udc00\"}");
        assert_eq!(closing_tail("{\"s\": \"\\ud83e\\"), "udc00\"}");
        assert_eq!(closing_tail("{\"s\": \"\\ud83e\\ud"), "c00\"}");
    }
}
