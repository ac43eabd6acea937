//! agentd's JSON-Schema extensions for grammar-constrained arguments: what a string may be *in this workspace*,
//! beyond what plain JSON Schema says. They constrain the local engine's grammar only; the model's prompt, remote
//! servers and argument validation see the schema with them taken out.
//!
//! | keyword (on a string schema) | the string must be |
//! |---|---|
//! | `"x-agentd-substring-of": TEXT` | a non-empty substring of `TEXT` that starts and ends at a word, space or punctuation boundary (an `edit`'s `old_text` taken from the file) |
//! | `"x-agentd-enum": [S, …]` | one of these strings (existing paths), without listing them in the prompt |
//! | `"x-agentd-substring-unit": "line"` (beside `substring-of`) | a run of whole lines of `TEXT` instead (default `"word"`) |
//! | `"x-agentd-pattern": REGEX` | a match of `REGEX` (Rust syntax, whole string) made of characters JSON writes as they are (no `"`, `\`, controls) |
//!
//! They may sit anywhere in a schema (inside `properties`, `items`, `anyOf`), so one argument grammar can branch:
//! `anyOf` of objects whose `path` is a `const` and whose `old_text` is a substring of that file.

use serde_json::{Map, Value};

use super::SchemaError;

pub const SUBSTRING_OF: &str = "x-agentd-substring-of";
pub const ENUM: &str = "x-agentd-enum";
pub const PATTERN: &str = "x-agentd-pattern";
/// Every extension keyword.
pub const KEYWORDS: [&str; 3] = [SUBSTRING_OF, ENUM, PATTERN];
/// Beside [`SUBSTRING_OF`]: `"word"` (the default) or `"line"` (whole lines only).
pub const SUBSTRING_UNIT: &str = "x-agentd-substring-unit";

/// The largest text one `x-agentd-substring-of` may hold: its grammar is compiled while the request waits.
pub const MAX_SUBSTRING_TEXT: usize = 128 * 1024;
/// The most strings one `x-agentd-enum` may list.
pub const MAX_ENUM: usize = 20_000;

/// Whether `schema` uses an extension anywhere.
pub fn has_extensions(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            KEYWORDS.iter().any(|k| map.contains_key(*k))
                || map.contains_key(SUBSTRING_UNIT)
                || map.values().any(has_extensions)
        }
        Value::Array(items) => items.iter().any(has_extensions),
        _ => false,
    }
}

/// `schema` with every extension keyword removed (what the model, a remote server and validation see).
pub fn strip_extensions(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !KEYWORDS.contains(&k.as_str()) && k.as_str() != SUBSTRING_UNIT)
                .map(|(k, v)| (k.clone(), strip_extensions(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_extensions).collect()),
        other => other.clone(),
    }
}

fn invalid(at: &str, message: impl Into<String>) -> SchemaError {
    SchemaError::InvalidSchema {
        location: if at.is_empty() { "/".into() } else { at.into() },
        message: message.into(),
    }
}

/// Checks every extension's value: a string (at most [`MAX_SUBSTRING_TEXT`] bytes, not empty) for
/// `substring-of`, a non-empty array of at most [`MAX_ENUM`] strings for `enum`, a regex that compiles for
/// `pattern`; at most one extension per schema, and only where a string is allowed.
pub fn check_extensions(schema: &Value) -> Result<(), SchemaError> {
    fn walk(schema: &Value, at: &str) -> Result<(), SchemaError> {
        match schema {
            Value::Object(map) => {
                check_object(map, at)?;
                for (k, v) in map {
                    if !KEYWORDS.contains(&k.as_str()) {
                        walk(
                            v,
                            &format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                        )?;
                    }
                }
                Ok(())
            }
            Value::Array(items) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, v)| walk(v, &format!("{at}/{i}"))),
            _ => Ok(()),
        }
    }
    walk(schema, "")
}

fn check_object(map: &Map<String, Value>, at: &str) -> Result<(), SchemaError> {
    let used: Vec<&str> = KEYWORDS
        .iter()
        .copied()
        .filter(|k| map.contains_key(*k))
        .collect();
    if let Some(unit) = map.get(SUBSTRING_UNIT) {
        if !map.contains_key(SUBSTRING_OF) {
            return Err(invalid(
                at,
                format!("{SUBSTRING_UNIT} needs {SUBSTRING_OF} beside it"),
            ));
        }
        if !matches!(unit.as_str(), Some("word" | "line")) {
            return Err(invalid(
                at,
                format!("{SUBSTRING_UNIT} must be \"word\" or \"line\""),
            ));
        }
    }
    if used.is_empty() {
        return Ok(());
    }
    if used.len() > 1 {
        return Err(invalid(
            at,
            format!("at most one of {} per schema", KEYWORDS.join(", ")),
        ));
    }
    let stringy = match map.get("type") {
        None => true,
        Some(Value::String(t)) => t == "string",
        Some(_) => false,
    };
    if !stringy {
        return Err(invalid(
            at,
            format!("{} applies to strings (`\"type\": \"string\"`)", used[0]),
        ));
    }
    let value = &map[used[0]];
    match used[0] {
        SUBSTRING_OF => match value.as_str() {
            Some("") => Err(invalid(
                at,
                format!("{SUBSTRING_OF} is empty: no string can be a substring"),
            )),
            Some(t) if t.len() > MAX_SUBSTRING_TEXT => Err(invalid(
                at,
                format!(
                    "{SUBSTRING_OF} holds {} bytes, over {MAX_SUBSTRING_TEXT}",
                    t.len()
                ),
            )),
            Some(_) => Ok(()),
            None => Err(invalid(at, format!("{SUBSTRING_OF} must be a string"))),
        },
        ENUM => match value.as_array() {
            Some(items) if items.is_empty() => Err(invalid(at, format!("{ENUM} is empty"))),
            Some(items) if items.len() > MAX_ENUM => Err(invalid(
                at,
                format!("{ENUM} lists {} strings, over {MAX_ENUM}", items.len()),
            )),
            Some(items) if items.iter().all(Value::is_string) => Ok(()),
            _ => Err(invalid(at, format!("{ENUM} must be an array of strings"))),
        },
        _ => match value.as_str() {
            Some(rx) => regex_check(rx).map_err(|e| invalid(at, format!("{PATTERN}: {e}"))),
            None => Err(invalid(at, format!("{PATTERN} must be a string"))),
        },
    }
}

/// Whether `rx` is a regex the grammar can use (`/` is written escaped there; any other syntax error is the
/// caller's).
fn regex_check(rx: &str) -> Result<(), String> {
    if rx.is_empty() {
        return Err("empty regex".into());
    }
    if rx.contains('\n') {
        return Err("a newline in the regex".into());
    }
    Ok(())
}

/// The chunks an `x-agentd-substring-of` text is cut into: runs of letters, digits and `_`, each other
/// character alone (every whitespace character its own chunk). A substring of the text made of whole chunks may
/// then start inside indentation but never inside a word.
pub fn substring_chunks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        let wordy = c.is_alphanumeric() || c == '_';
        match (wordy, start) {
            (true, None) => start = Some(i),
            (true, Some(_)) => {}
            (false, s) => {
                if let Some(s) = s {
                    out.push(&text[s..i]);
                    start = None;
                }
                out.push(&text[i..i + c.len_utf8()]);
            }
        }
    }
    if let Some(s) = start {
        out.push(&text[s..]);
    }
    out
}

/// The chunks of `x-agentd-substring-unit: "line"`: each line without its newline, and each newline alone, so a
/// run of chunks is one or more whole lines (with or without the last newline).
pub fn line_chunks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for piece in text.split_inclusive('\n') {
        match piece.strip_suffix('\n') {
            Some(line) => {
                if !line.is_empty() {
                    out.push(line);
                }
                out.push("\n");
            }
            None => out.push(piece),
        }
    }
    out
}

/// `s` with the regex meta characters escaped, for a pattern built from literal text (not `<`, `>`: escaped,
/// those are word boundaries; not `/`: the Lark writer escapes it where its delimiters need).
pub fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strip_and_detect() {
        let s = json!({"type": "object", "properties": {
            "path": {"type": "string", "x-agentd-enum": ["a.rs"]},
            "edits": {"type": "array", "items": {"anyOf": [{"type": "string", "x-agentd-substring-of": "x y"}]}}}});
        assert!(has_extensions(&s));
        let plain = strip_extensions(&s);
        assert!(!has_extensions(&plain));
        assert_eq!(plain["properties"]["path"], json!({"type": "string"}));
        check_extensions(&s).unwrap();
    }

    #[test]
    fn bad_extensions_are_named() {
        for (schema, needle) in [
            (
                json!({"type": "string", "x-agentd-substring-of": ""}),
                "empty",
            ),
            (
                json!({"type": "string", "x-agentd-substring-of": 3}),
                "must be a string",
            ),
            (
                json!({"type": "integer", "x-agentd-enum": ["a"]}),
                "applies to strings",
            ),
            (json!({"type": "string", "x-agentd-enum": []}), "is empty"),
            (
                json!({"type": "string", "x-agentd-enum": [1]}),
                "array of strings",
            ),
            (
                json!({"type": "string", "x-agentd-enum": ["a"], "x-agentd-pattern": "a"}),
                "at most one",
            ),
        ] {
            let e = check_extensions(&schema).unwrap_err().to_string();
            assert!(e.contains(needle), "{schema}: {e}");
        }
    }

    #[test]
    fn chunks_keep_words_whole_and_spaces_apart() {
        assert_eq!(
            substring_chunks("    return a + b  # sum\n"),
            [
                " ", " ", " ", " ", "return", " ", "a", " ", "+", " ", "b", " ", " ", "#", " ",
                "sum", "\n"
            ]
        );
        assert_eq!(substring_chunks("naïve_x=1"), ["naïve_x", "=", "1"]);
        assert_eq!(substring_chunks("").len(), 0);
        assert_eq!(line_chunks("a b\n\n  c"), ["a b", "\n", "\n", "  c"]);
        assert_eq!(line_chunks("x\n").concat(), "x\n");
        assert_eq!(substring_chunks("abc").concat(), "abc");
    }
}
