//! Where a tool call starts in free text: the output assembler's side of the `auto` triggers that the grammar
//! (`grammar.rs`) enforces. The two must agree byte for byte:
//! - a marker of the format (`<tool_call>`, `<|python_tag|>`, `[TOOL_CALLS]`) anywhere;
//! - the JSON trigger `{"name": "` (JSON whitespace allowed around the tokens) where its `{` begins the output
//!   (after whitespace) or a line, or anywhere after a call; see
//!   [`grammar::JSON_TRIGGER`](crate::engine::constraint::grammar::JSON_TRIGGER).
//!
//! Text is streamed, so besides full matches the scanner reports where a trigger *may* be starting (a suffix
//! that is a proper prefix of one), which the assembler holds back until it is decided; and a ```` ``` ````
//! fence line right before a JSON call, which belongs to the call, not to the reply text.

/// How a text relates to the JSON trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonMatch {
    /// The text starts with a full trigger of this many bytes.
    Full(usize),
    /// The whole text is a proper prefix of a trigger.
    Partial,
    /// The text does not start a trigger.
    No,
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// Matches the JSON trigger at the start of `text`.
pub fn match_json_trigger(text: &str) -> JsonMatch {
    let b = text.as_bytes();
    let mut i = 0;
    let lit = |i: &mut usize, s: &[u8]| -> Option<JsonMatch> {
        for &c in s {
            match b.get(*i) {
                None => return Some(JsonMatch::Partial),
                Some(&x) if x == c => *i += 1,
                Some(_) => return Some(JsonMatch::No),
            }
        }
        None
    };
    let ws = |i: &mut usize| {
        while b.get(*i).is_some_and(|&c| is_ws(c)) {
            *i += 1;
        }
    };
    if let Some(m) = lit(&mut i, b"{") {
        return m;
    }
    ws(&mut i);
    if let Some(m) = lit(&mut i, b"\"name\"") {
        return m;
    }
    ws(&mut i);
    if let Some(m) = lit(&mut i, b":") {
        return m;
    }
    ws(&mut i);
    if let Some(m) = lit(&mut i, b"\"") {
        return m;
    }
    JsonMatch::Full(i)
}

/// Where JSON triggers count in the text being scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonAt {
    /// No JSON calls (no tools offered, or `tool_choice: none`).
    Never,
    /// At the start of a line; `output_start`: the text scanned begins the output (so its leading whitespace
    /// counts as the start too).
    LineStart { output_start: bool },
    /// Anywhere (after a call, only a gap precedes).
    Anywhere,
}

impl JsonAt {
    fn allows(self, text: &str, at: usize) -> bool {
        match self {
            JsonAt::Never => false,
            JsonAt::Anywhere => true,
            JsonAt::LineStart { output_start } => {
                text[..at].ends_with('\n') || (output_start && text[..at].bytes().all(is_ws))
            }
        }
    }
}

/// The first call trigger in `text`: `(byte offset, kind)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Marker number `k` of the format, `len` bytes.
    Marker { k: usize, len: usize },
    /// A JSON trigger (the call object starts here).
    Json,
}

/// The earliest full trigger in `text`, if any.
pub fn find_trigger(text: &str, markers: &[String], json: JsonAt) -> Option<(usize, Found)> {
    let mut best: Option<(usize, Found)> = None;
    for (k, m) in markers.iter().enumerate() {
        if let Some(at) = text.find(m.as_str()) {
            if best.is_none_or(|(b, _)| at < b) {
                best = Some((at, Found::Marker { k, len: m.len() }));
            }
        }
    }
    for (at, _) in text.match_indices('{') {
        if best.is_some_and(|(b, _)| b <= at) {
            break;
        }
        if json.allows(text, at) {
            if let JsonMatch::Full(_) = match_json_trigger(&text[at..]) {
                best = Some((at, Found::Json));
                break;
            }
        }
    }
    best
}

/// Where the part of `text` that may still become (or belong to) a trigger begins: the earliest of a suffix
/// that is a proper prefix of a marker, a `{` from which the rest is a partial JSON trigger, and a fence
/// opener (```` ``` ```` + a language word + whitespace) followed only by such a partial trigger. `text.len()`
/// when nothing needs holding. Call only when [`find_trigger`] found nothing.
pub fn hold_from(text: &str, markers: &[String], json: JsonAt) -> usize {
    let mut from = text.len();
    for m in markers {
        from = from.min(partial_suffix_start(text, m));
    }
    if json != JsonAt::Never {
        let partial = text.match_indices('{').map(|(at, _)| at).find(|&at| {
            json.allows(text, at) && match_json_trigger(&text[at..]) == JsonMatch::Partial
        });
        if let Some(at) = partial {
            from = from.min(at);
        }
        from = from.min(partial_suffix_start(text, "```"));
        if let Some(fence) = text.rfind("```") {
            let after = &text[fence + 3..];
            let word = after
                .bytes()
                .take_while(|c| c.is_ascii_alphanumeric())
                .count();
            let rest = after[word..].trim_start_matches([' ', '\t', '\r', '\n']);
            if rest.is_empty() || partial == Some(text.len() - rest.len()) {
                from = from.min(fence);
            }
        }
    }
    from
}

/// The start of a fence opener (```` ``` ```` + optional language word + whitespace) that ends `before`, if any.
pub fn fence_before(before: &str) -> Option<usize> {
    let t = before.trim_end_matches([' ', '\t', '\r', '\n']);
    let fence = t.rfind("```")?;
    t[fence + 3..]
        .bytes()
        .all(|c| c.is_ascii_alphanumeric())
        .then_some(fence)
}

/// Byte offset where the longest suffix of `s` that is a proper prefix of `delim` begins (`s.len()` if none).
pub fn partial_suffix_start(s: &str, delim: &str) -> usize {
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

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: JsonAt = JsonAt::LineStart { output_start: true };

    #[test]
    fn json_trigger_is_an_object_whose_first_key_is_name() {
        assert_eq!(
            match_json_trigger(r#"{"name": "read", "#),
            JsonMatch::Full(10)
        );
        assert_eq!(
            match_json_trigger("{\n  \"name\":\"edit\""),
            JsonMatch::Full(12)
        );
        assert_eq!(match_json_trigger(r#"{"na"#), JsonMatch::Partial);
        assert_eq!(match_json_trigger(r#"{"x": 1}"#), JsonMatch::No);
        assert_eq!(match_json_trigger(r#"{"name": 5}"#), JsonMatch::No);
    }

    #[test]
    fn finds_the_earliest_trigger_at_a_line_start_and_holds_what_may_become_one() {
        let m = vec!["<tool_call>".to_string()];
        let t = "See {\"x\": 1} then\n```json\n{\"name\": \"edit\", ";
        let (at, kind) = find_trigger(t, &m, LINE).unwrap();
        assert_eq!((kind, &t[at..at + 1]), (Found::Json, "{"));
        assert_eq!(fence_before(&t[..at]), Some(t.find("```").unwrap()));
        assert_eq!(
            find_trigger("  {\"name\": \"", &m, LINE),
            Some((2, Found::Json))
        );
        assert_eq!(find_trigger("x = {\"name\": \"a\"}", &m, LINE), None);
        assert_eq!(
            find_trigger("x = [\n    {\"name\": \"a\"}]", &m, LINE),
            None
        );
        assert_eq!(
            find_trigger("x = {\"name\": \"a\"}", &m, JsonAt::Anywhere),
            Some((4, Found::Json))
        );
        assert_eq!(
            find_trigger("a <tool_call>\n{", &m, LINE),
            Some((2, Found::Marker { k: 0, len: 11 }))
        );
        assert_eq!(find_trigger("plain\n{\"x\": 1}", &m, LINE), None);
        let t = "text\n```json\n{\"na";
        assert_eq!(hold_from(t, &m, LINE), 5);
        let t = "code ```python\ndef f(): pass";
        assert_eq!(hold_from(t, &m, LINE), t.len());
        assert_eq!(hold_from("a <tool", &m, LINE), 2);
        assert_eq!(hold_from("a ``", &m, LINE), 2);
    }
}
