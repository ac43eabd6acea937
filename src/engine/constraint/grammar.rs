//! One grammar per request, from its tools, `tool_choice`, `parallel_tool_calls` and `response_format`, in the
//! model's tool-call format.
//!
//! | request | grammar |
//! |---|---|
//! | no tools, text | none (unconstrained) |
//! | `tool_choice: none` with tools (Hermes) | text that never contains the call opener |
//! | `auto` | text, or text then calls (Hermes); text not starting with `{`, or calls (llama3_json) |
//! | `required` | one or more calls, nothing else |
//! | named | exactly one call of that tool |
//! | `parallel_tool_calls: false` | at most one call |
//! | `json_object` / `json_schema` | that document only (with `auto` tools: the document or calls; refused for
//! llama3_json, where the two look alike) |
//!
//! Every call is `{"name": "<one of the tools>", "arguments": <that tool's schema>}` — including a call after
//! free text: the text rule cannot contain the opener, so once the opener is written the rest is a call.
//! Argument objects get no undeclared keys (see [`close_objects`]); a `response_format` schema is enforced as is. Where
//! the delimiters are special tokens of the vocabulary (Qwen's `<tool_call>`), the grammar names the tokens.

use llguidance::api::TopLevelGrammar;
use serde_json::Value;

use super::format::ToolCallFormat;
use super::{ConstraintSpec, ResponseFormat, ToolChoice};
use crate::schema::compile::{close_objects, with_compact_options};

/// Free text that never contains `<tool_call>` (special tokens are never text: their bytes are not UTF-8).
const HERMES_TEXT: &str = r"TEXT: /(?s:.*)/ & ~/(?s:.*)<tool_call>(?s:.*)/";

/// Free text whose first non-blank character is not `{` (which would start a llama3_json call).
const LLAMA3_TEXT: &str = r"TEXT: /[ \t\r\n]*([^{ \t\r\n](?s:.*))?/";

/// What the constraint compiles.
#[derive(Debug, Clone, PartialEq)]
pub enum GrammarSource {
    /// A Lark grammar (tool calls, or text).
    Lark(String),
    /// One JSON document of this schema (compact options already applied).
    JsonSchema(Value),
}

impl GrammarSource {
    pub fn to_top_level(&self) -> TopLevelGrammar {
        match self {
            GrammarSource::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
            GrammarSource::JsonSchema(schema) => TopLevelGrammar::from_json_schema(schema.clone()),
        }
    }
}

/// The grammar for a (validated) request, or `None` when the output is unconstrained.
/// `special_delimiters`: the format's opener and closer are single special tokens of the vocabulary.
pub fn plan(
    spec: &ConstraintSpec,
    format: ToolCallFormat,
    special_delimiters: bool,
) -> Option<GrammarSource> {
    let doc = match &spec.response_format {
        ResponseFormat::Text => None,
        ResponseFormat::JsonObject => Some(serde_json::json!({"type": "object"})),
        ResponseFormat::JsonSchema { schema, .. } => Some(schema.clone()),
    };
    let calls_possible = !spec.tools.is_empty() && spec.tool_choice != ToolChoice::None;
    if !calls_possible {
        return match (doc, format) {
            (Some(schema), _) => Some(GrammarSource::JsonSchema(with_compact_options(&schema))),
            (None, ToolCallFormat::Hermes) if !spec.tools.is_empty() => {
                Some(GrammarSource::Lark(format!("start: TEXT\n{HERMES_TEXT}\n")))
            }
            (None, _) => None,
        };
    }
    let mut g = String::new();
    let mut rules = Vec::new();
    let named = match &spec.tool_choice {
        ToolChoice::Tool { name } => Some(name.as_str()),
        _ => None,
    };
    for (i, tool) in spec.tools.iter().enumerate() {
        if named.is_some_and(|n| n != tool.name) {
            continue;
        }
        let params = with_compact_options(&close_objects(&tool.parameters));
        g.push_str(&format!(
            "fn_{i}: {} args_{i} \"}}\"\nargs_{i}: %json {}\n",
            lark_string(&format.call_prefix(&tool.name)),
            serde_json::to_string(&params).unwrap_or_else(|_| "{}".into()),
        ));
        rules.push(format!("fn_{i}"));
    }
    g.push_str(&format!("fn: {}\n", rules.join(" | ")));
    let single = named.is_some() || !spec.parallel_tool_calls;
    let sep = lark_string(format.call_separator());
    let more = if single {
        String::new()
    } else {
        format!(" ({sep} call)*")
    };
    if let Some(schema) = &doc {
        g.push_str(&format!(
            "doc: %json {}\n",
            serde_json::to_string(&with_compact_options(schema)).unwrap_or_else(|_| "{}".into())
        ));
    }
    match format {
        ToolCallFormat::Hermes => {
            let (open, close) = if special_delimiters {
                ("<tool_call> \"\\n\"", "\"\\n\" </tool_call>")
            } else {
                ("\"<tool_call>\\n\"", "\"\\n</tool_call>\"")
            };
            g.push_str(&format!("call: {open} fn {close}\n"));
            let start = match (&spec.tool_choice, doc.is_some()) {
                (ToolChoice::Auto, false) => {
                    g.push_str(HERMES_TEXT);
                    g.push('\n');
                    if special_delimiters {
                        format!("TEXT | TEXT call{more}")
                    } else {
                        // The lazy head ends at the first opener: everything after it is a call.
                        g.push_str("call_hd[lazy]: TEXT \"<tool_call>\"\n");
                        format!("TEXT | call_hd \"\\n\" fn {close}{more}")
                    }
                }
                (ToolChoice::Auto, true) => format!("doc | call{more}"),
                _ => format!("call{more}"),
            };
            g.insert_str(0, &format!("start: {start}\n"));
        }
        ToolCallFormat::Llama3Json => {
            g.push_str("call: fn\n");
            let start = match (&spec.tool_choice, doc.is_some()) {
                (ToolChoice::Auto, false) => {
                    g.push_str(LLAMA3_TEXT);
                    g.push('\n');
                    format!("TEXT | call{more}")
                }
                // Refused by `ConstraintSpec::validate_for`: the two alternatives look alike.
                (ToolChoice::Auto, true) => "doc".to_string(),
                _ => format!("call{more}"),
            };
            g.insert_str(0, &format!("start: {start}\n"));
        }
    }
    Some(GrammarSource::Lark(g))
}

/// A Lark string literal (Lark strings are JSON strings).
fn lark_string(s: &str) -> String {
    Value::String(s.into()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ToolSpec;
    use serde_json::json;

    fn spec(choice: ToolChoice) -> ConstraintSpec {
        ConstraintSpec {
            tools: vec![ToolSpec::new_unchecked(
                "read",
                "",
                json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            )],
            tool_choice: choice,
            ..ConstraintSpec::default()
        }
    }

    #[test]
    fn no_tools_no_format_is_unconstrained() {
        assert_eq!(
            plan(&ConstraintSpec::default(), ToolCallFormat::Hermes, false),
            None
        );
    }

    #[test]
    fn none_keeps_text_without_the_opener() {
        let Some(GrammarSource::Lark(g)) =
            plan(&spec(ToolChoice::None), ToolCallFormat::Hermes, false)
        else {
            panic!()
        };
        assert!(g.starts_with("start: TEXT\n"), "{g}");
        assert_eq!(
            plan(&spec(ToolChoice::None), ToolCallFormat::Llama3Json, false),
            None
        );
    }

    #[test]
    fn special_delimiters_are_tokens() {
        let Some(GrammarSource::Lark(g)) =
            plan(&spec(ToolChoice::Required), ToolCallFormat::Hermes, true)
        else {
            panic!()
        };
        assert!(
            g.contains("call: <tool_call> \"\\n\" fn \"\\n\" </tool_call>"),
            "{g}"
        );
        assert!(
            g.contains(r#"fn_0: "{\"name\": \"read\", \"arguments\": " args_0 "}""#),
            "{g}"
        );
    }
}
