//! The output constraints that are not JSON: a regular expression (vLLM's `regex`), one of a list of strings
//! (`choice`) and a context-free grammar in llguidance's Lark (vLLM's `grammar`; llama.cpp's GBNF `grammar`
//! arrives here translated by [`super::gbnf`]). Each becomes one Lark grammar whose `start` is the whole reply,
//! and each is compiled once at admission, without the model's tokenizer (a byte-level vocabulary stands in),
//! so a pattern or grammar llguidance cannot compile is refused before anything is queued.

use std::sync::OnceLock;

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};

use super::{Result, SchemaError};

/// A Lark string literal of `text` (JSON's escapes, which llguidance's Lark reads).
pub fn lark_string(text: &str) -> String {
    serde_json::Value::String(text.to_string()).to_string()
}

/// The whole reply matching `pattern` (llguidance's regex syntax: Rust's, without look-around or anchors).
pub fn regex_grammar(pattern: &str) -> String {
    // Inside `/…/` a bare slash would end the literal.
    let mut escaped = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                escaped.push('\\');
                if let Some(next) = chars.next() {
                    escaped.push(next);
                }
            }
            '/' => escaped.push_str("\\/"),
            c => escaped.push(c),
        }
    }
    format!("start: /{escaped}/\n")
}

/// The whole reply one of `choices`, exactly.
pub fn choice_grammar(choices: &[String]) -> String {
    let alternatives: Vec<String> = choices.iter().map(|c| lark_string(c)).collect();
    format!("start: {}\n", alternatives.join(" | "))
}

fn factory() -> std::result::Result<&'static ParserFactory, String> {
    static FACTORY: OnceLock<std::result::Result<ParserFactory, String>> = OnceLock::new();
    FACTORY
        .get_or_init(|| {
            let env = llguidance::toktrie::ApproximateTokEnv::single_byte_env();
            let mut f = ParserFactory::new_simple(&env).map_err(|e| format!("{e:#}"))?;
            f.set_stderr_log_level(0);
            Ok(f)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Compiles `lark` as the engine will (on a byte-level vocabulary): a grammar llguidance refuses, or one that
/// accepts nothing, is an error naming `what` (the request field).
pub fn check_lark(lark: &str, what: &str) -> Result<()> {
    let factory = factory().map_err(SchemaError::Internal)?;
    let refuse = |message: String| {
        // llguidance's word for a grammar from whose start nothing can be written.
        if message.contains("NoExtensionBias") {
            SchemaError::EmptyLanguage {
                what: what.into(),
                message: "no output matches it".into(),
            }
        } else {
            SchemaError::InvalidGrammar(format!("{what}: {message}"))
        }
    };
    let parser = factory
        .create_parser(TopLevelGrammar::from_lark(lark.to_string()))
        .map_err(|e| refuse(format!("{e:#}")))?;
    let mut matcher = Matcher::new(Ok(parser));
    if let Some(e) = matcher.get_error() {
        return Err(refuse(e));
    }
    let first = matcher
        .compute_mask()
        .map_err(|e| refuse(format!("{e:#}")))?;
    if first.is_zero() && !matcher.is_accepting().unwrap_or(false) {
        return Err(SchemaError::EmptyLanguage {
            what: what.into(),
            message: "no output matches it".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the grammar accepts `text` whole (byte by byte on the byte-level vocabulary).
    fn accepts(lark: &str, text: &str) -> bool {
        let parser = factory()
            .unwrap()
            .create_parser(TopLevelGrammar::from_lark(lark.to_string()))
            .unwrap();
        let mut m = Matcher::new(Ok(parser));
        for b in text.bytes() {
            if m.consume_token(b as u32).is_err() {
                return false;
            }
        }
        m.is_accepting().unwrap_or(false)
    }

    #[test]
    fn a_regex_is_the_whole_reply_slashes_included() {
        let g = regex_grammar(r"\d{3}-\d{4}");
        check_lark(&g, "regex").unwrap();
        assert!(accepts(&g, "555-1234"));
        assert!(!accepts(&g, "555-12345"));
        assert!(!accepts(&g, "x555-1234"));
        let dates = regex_grammar(r"[0-9]{2}/[0-9]{2}");
        check_lark(&dates, "regex").unwrap();
        assert!(accepts(&dates, "12/31"));
        assert!(!accepts(&dates, "12-31"));
    }

    #[test]
    fn a_choice_is_one_of_its_strings_exactly() {
        let g = choice_grammar(&["yes".into(), "no".into(), "say \"maybe\"\n".into()]);
        check_lark(&g, "choice").unwrap();
        assert!(accepts(&g, "yes"));
        assert!(accepts(&g, "say \"maybe\"\n"));
        assert!(!accepts(&g, "yess"));
        assert!(!accepts(&g, "Yes"));
    }

    #[test]
    fn what_llguidance_cannot_compile_is_refused_naming_the_field() {
        let e = check_lark(&regex_grammar("(unclosed"), "structured_outputs.regex").unwrap_err();
        assert!(
            matches!(&e, SchemaError::InvalidGrammar(m) if m.starts_with("structured_outputs.regex: ")),
            "{e}"
        );
        let e = check_lark("start: missing_rule\n", "grammar").unwrap_err();
        assert!(e.to_string().contains("grammar"), "{e}");
        assert!(check_lark("start: \"a\" | \"b\"\n", "grammar").is_ok());
    }
}
