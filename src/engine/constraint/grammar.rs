//! One grammar per request, from its tools, `tool_choice`, `parallel_tool_calls` and `response_format`, in the
//! model's tool-call format (see `format.rs`; the shapes are data).
//!
//! | request | grammar |
//! |---|---|
//! | no tools, text | none (unconstrained) |
//! | `tool_choice: none` with tools | text that never contains a text-form call marker (unconstrained if the format has none) |
//! | `auto` | free text in which every call, in any shape the model may use, is constrained from its first byte |
//! | `required` | one or more calls in the format's canonical block, nothing else |
//! | named | exactly one call of that tool, canonical block |
//! | `parallel_tool_calls: false` | at most one call |
//! | a reasoning model thinking | a think block (free text up to its close marker; optional unless the prompt opened it), then the grammar above |
//! | `json_object` / `json_schema` | that document only (with `auto` tools: the document or canonical calls; refused for bare-JSON formats, where the two look alike) |
//!
//! ## `auto`: lazy, triggered calls
//! The model writes free text. A call starts at the first *trigger* in it:
//! - one of the format's markers (`<tool_call>`, `<|python_tag|>`, `[TOOL_CALLS]`, …): the rest is forced into
//!   the canonical call object (`{"name": "<one of the tools>", "<key>": <that tool's schema>}`, or a JSON array of
//!   them for list formats), then the format's closer;
//! - a JSON object whose first key is `"name"` with a string value — `{"name": "` with any JSON whitespace —
//!   that starts the reply or a line (bare, or the first line of a fenced ```` ```json ```` block): the rest is
//!   forced into one of the offered tools' names, that tool's arguments and the closing brace.
//!
//! The rule for JSON in text: an object is a call exactly when its first key is `"name"` and its `{` begins the
//! reply or a line (column 0). `{"x": 1}`, inline JSON, and code such as `users = [{"name": "Ada"}]` or an
//! indented dict stay text. The text rule cannot contain a trigger
//! (its complement is taken), and each trigger ends a *lazy* head rule, so the first trigger always starts a call
//! and the same rule is used by the output assembler to split text from calls. After the first call only more
//! calls may follow, separated by a gap (whitespace, `;`, `,`, code fences): the turn ends with its calls, as
//! every chat template renders it, and the model cannot narrate a result it has not seen.
//!
//! Every call is `{"name": …, "<key>": <arguments>}`; argument objects get no undeclared keys (see
//! [`close_objects`]); a `response_format` schema is enforced as is (the doors whose APIs close objects —
//! Ollama's `format`, vLLM's and llama.cpp's JSON fields — close them before it gets here). A regex, choice or
//! Lark grammar is the whole reply. Markers and closers that are control tokens of the vocabulary (Qwen's
//! `<tool_call>`) are named as tokens; their plain-text spelling is never text.

use llguidance::api::TopLevelGrammar;
use serde_json::Value;

use super::spec::{ConstraintSpec, ResponseFormat, ToolChoice};
use crate::engine::constraint::arguments::ArgumentRules;
use crate::schema::compile::{bound_numbers, close_objects, with_compact_options};
use crate::schema::extensions;
use crate::text::call_format::ToolCallFormat;
use crate::text::reasoning::{ThinkBlock, ThinkStart};

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

/// The regex (Rust syntax, unanchored) of the JSON trigger: `{"name": "` — an object whose first key is
/// `"name"` with a string value — with JSON whitespace around the tokens. It counts at the start of the output
/// (after whitespace), at the start of a line, and anywhere after a call. The output assembler recognises the
/// same language.
pub const JSON_TRIGGER: &str = r#"\{[ \t\r\n]*"name"[ \t\r\n]*:[ \t\r\n]*""#;

/// The grammar for a (validated) request, or `None` when the output is unconstrained. `special_id(text)`: the id
/// of the control token whose text this is, if the vocabulary has one.
pub fn plan(
    spec: &ConstraintSpec,
    format: ToolCallFormat,
    special_id: &dyn Fn(&str) -> Option<u32>,
) -> Option<GrammarSource> {
    let body = plan_body(spec, format, special_id)?;
    Some(match &spec.reasoning {
        Some(block) => with_think_block(body, block, special_id),
        None => body,
    })
}

/// `body` after a think block: reasoning text up to the close marker (lazy: the first close ends it), then
/// a little optional whitespace (bounded: a model that would rather stop must not pad with newlines forever). With [`ThinkStart::Optional`] the block (its open marker after optional whitespace) may
/// be left out. Markers that are control tokens are named as tokens.
fn with_think_block(
    body: GrammarSource,
    block: &ThinkBlock,
    special_id: &dyn Fn(&str) -> Option<u32>,
) -> GrammarSource {
    let marker = |m: &str| match special_id(m) {
        Some(id) => format!("<[{id}]>"),
        None => lark_string(m),
    };
    let (main, rules) = match body {
        GrammarSource::Lark(g) => match g.strip_prefix("start: ") {
            Some(rest) => ("think_main".to_string(), format!("think_main: {rest}")),
            // Every grammar `plan_body` writes starts with its start rule.
            None => ("start_".to_string(), g.replacen("start:", "start_:", 1)),
        },
        GrammarSource::JsonSchema(schema) => (
            "think_doc".to_string(),
            format!(
                "think_doc: %json {}\n",
                serde_json::to_string(&schema).unwrap_or_else(|_| "{}".into())
            ),
        ),
    };
    let close = marker(&block.close);
    let head = match block.start {
        ThinkStart::Inside => "think_body".to_string(),
        ThinkStart::Optional => format!("(THINK_WS? {} think_body)?", marker(&block.open)),
    };
    GrammarSource::Lark(format!(
        "start: {head} THINK_WS? {main}\nthink_body[lazy]: THINK_TEXT {close}\n\
         THINK_TEXT: /(?s:.*)/\nTHINK_WS: /[ \\t\\r\\n]{{1,4}}/\n{rules}"
    ))
}

fn plan_body(
    spec: &ConstraintSpec,
    format: ToolCallFormat,
    special_id: &dyn Fn(&str) -> Option<u32>,
) -> Option<GrammarSource> {
    // A regex, choice or grammar is the whole reply (admission refuses one beside callable tools).
    if let Some(lark) = spec.response_format.lark() {
        return Some(GrammarSource::Lark(lark));
    }
    let doc = match &spec.response_format {
        ResponseFormat::Text
        | ResponseFormat::Regex { .. }
        | ResponseFormat::Choice { .. }
        | ResponseFormat::Grammar { .. } => None,
        ResponseFormat::JsonObject => Some(serde_json::json!({"type": "object"})),
        ResponseFormat::JsonSchema { schema, .. } => Some(schema.clone()),
    };
    let lit = |s: &str| literal(s, format, special_id);
    let markers: Vec<&str> = format.markers().iter().map(String::as_str).collect();
    let calls_possible = !spec.tools.is_empty() && spec.tool_choice != ToolChoice::None;
    if !calls_possible {
        return match doc {
            Some(schema) if extensions::has_extensions(&schema) => Some(GrammarSource::Lark(
                format!("start: doc\n{}", document_rule(&schema)),
            )),
            Some(schema) => Some(GrammarSource::JsonSchema(with_compact_options(
                &bound_numbers(&schema),
            ))),
            None if !spec.tools.is_empty() && !markers.is_empty() => Some(GrammarSource::Lark(
                format!("start: TEXT\n{}\n", text_rule(&markers, false)),
            )),
            None => None,
        };
    }
    let named = match &spec.tool_choice {
        ToolChoice::Tool { name } => Some(name.as_str()),
        _ => None,
    };
    let single = named.is_some() || !spec.parallel_tool_calls;
    let sep = lit(format.call_separator());
    let mut g = String::new();
    let mut fns = Vec::new();
    let mut offered = Vec::new();
    for (i, tool) in spec.tools.iter().enumerate() {
        if named.is_some_and(|n| n != tool.name) {
            continue;
        }
        g.push_str(&format!(
            "fn_{i}: {} args_{i} \"}}\"\n{}",
            lark_string(&format.call_prefix(&tool.name)),
            arguments_rule(
                &format!("args_{i}"),
                tool.grammar_schema(),
                &format!("t{i}")
            ),
        ));
        fns.push(format!("fn_{i}"));
        offered.push((i, tool.name.as_str()));
    }
    g.push_str(&format!("fn: {}\n", fns.join(" | ")));
    // The body of a block after its opener: one call object, or a JSON array of them.
    let body = if format.is_list() {
        if single {
            "\"[\" fn \"]\"".to_string()
        } else {
            format!("\"[\" fn ({sep} fn)* \"]\"")
        }
    } else {
        "fn".to_string()
    };
    let block = [lit(format.open()), body.clone(), lit(format.close())]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    g.push_str(&format!("block: {block}\n"));
    let calls = if single || format.is_list() {
        "block".to_string()
    } else {
        format!("block ({sep} block)*")
    };
    if let Some(schema) = &doc {
        g.push_str(&document_rule(schema));
    }
    let start = match (&spec.tool_choice, doc.is_some()) {
        (ToolChoice::Auto, false) => {
            g.push_str(&text_rule(&markers, true));
            g.push('\n');
            // Between and after calls only a gap: whitespace, separators and code fences — bounded, like the
            // whitespace after a think block: a model that would rather stop must not pad with newlines until the
            // token limit.
            g.push_str("GAP: /([ \\t\\r\\n;,]|```[A-Za-z]*){1,12}/\n");
            let mut segs = Vec::new();
            let mut more = Vec::new();
            for (k, marker) in markers.iter().enumerate() {
                // After the canonical marker comes the rest of the canonical opener (Hermes' newline).
                let rest = match format.open().trim_start().strip_prefix(marker) {
                    Some(rest) if k == 0 => lit(rest),
                    _ => String::new(),
                };
                let tail = [rest, body.clone(), lit(format.close())]
                    .into_iter()
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                if let Some(id) = special_id(marker) {
                    g.push_str(&format!(
                        "seg_m{k}: TEXT <[{id}]> {tail}\nnext_m{k}: GAP? <[{id}]> {tail}\n"
                    ));
                } else {
                    let m = lark_string(marker);
                    g.push_str(&format!(
                        "hd_m{k}[lazy]: TEXT {m}\nseg_m{k}: hd_m{k} {tail}\nnext_m{k}: GAP? {m} {tail}\n"
                    ));
                }
                segs.push(format!("seg_m{k}"));
                more.push(format!("next_m{k}"));
            }
            // A JSON call: the trigger, then one of the offered names and that tool's arguments.
            let jn: Vec<String> = offered
                .iter()
                .map(|(i, name)| {
                    format!(
                        "{} args_{i} \"}}\"",
                        lark_string(&format!("{name}\", \"{}\": ", format.arguments_key()))
                    )
                })
                .collect();
            let trig = JSON_TRIGGER.replace('/', "\\/");
            g.push_str(&format!(
                "jcall: {}\nhd_j[lazy]: TEXT /\\n{trig}/\nJ0: /[ \\t\\r\\n]*{trig}/\nJT: /{trig}/\n\
                 seg_j: hd_j jcall | J0 jcall\nnext_j: GAP? JT jcall\n",
                jn.join(" | ")
            ));
            segs.push("seg_j".into());
            more.push("next_j".into());
            g.push_str(&format!("seg: {}\n", segs.join(" | ")));
            g.push_str(&format!("next: {}\n", more.join(" | ")));
            if single {
                "TEXT | seg GAP?".to_string()
            } else {
                "TEXT | seg next* GAP?".to_string()
            }
        }
        (ToolChoice::Auto, true) => format!("doc | {calls}"),
        _ => calls,
    };
    g.insert_str(0, &format!("start: {start}\n"));
    Some(GrammarSource::Lark(g))
}

/// `name: <the arguments of this schema>`: `%json` in the compact shape, or — when the schema uses agentd's
/// extensions — the rules [`ArgumentRules`] writes under `prefix`.
fn arguments_rule(name: &str, schema: &Value, prefix: &str) -> String {
    match ArgumentRules::compile(schema, prefix) {
        Some((entry, rules)) => format!("{name}: {entry}\n{rules}"),
        None => format!(
            "{name}: %json {}\n",
            serde_json::to_string(&with_compact_options(&bound_numbers(&close_objects(
                schema
            ))))
            .unwrap_or_else(|_| "{}".into())
        ),
    }
}

/// `doc: <a response_format document>` (a schema is enforced as given: no keys closed).
fn document_rule(schema: &Value) -> String {
    match ArgumentRules::compile(schema, "doc") {
        Some((entry, rules)) => format!("doc: {entry}\n{rules}"),
        None => format!(
            "doc: %json {}\n",
            serde_json::to_string(&with_compact_options(&bound_numbers(schema)))
                .unwrap_or_else(|_| "{}".into())
        ),
    }
}

/// The `TEXT` terminal: any text that contains none of the markers' plain spellings and (with `json`) no JSON
/// trigger at the start of a line nor at the start of the output. Control tokens are never text (their bytes are
/// not UTF-8), so a marker that is a token can only be written as that token.
fn text_rule(markers: &[&str], json: bool) -> String {
    let mut alts: Vec<String> = markers
        .iter()
        .map(|m| extensions::regex_escape(m))
        .collect();
    if json {
        alts.push(format!("\\n{JSON_TRIGGER}"));
    }
    let mut rule = r"TEXT: /(?s:.*)/".to_string();
    if !alts.is_empty() {
        rule.push_str(&format!(
            r" & ~/(?s:.*)({})(?s:.*)/",
            alts.join("|").replace('/', "\\/")
        ));
    }
    if json {
        rule.push_str(&format!(
            r" & ~/[ \t\r\n]*{}(?s:.*)/",
            JSON_TRIGGER.replace('/', "\\/")
        ));
    }
    rule
}

/// A Lark expression for the literal `text`, naming as `<token>` each of the format's token-like strings that is
/// a control token here; empty for empty text.
fn literal(text: &str, format: ToolCallFormat, special_id: &dyn Fn(&str) -> Option<u32>) -> String {
    let specials: Vec<(&str, u32)> = format
        .token_like()
        .into_iter()
        .filter_map(|t| special_id(t).map(|id| (t, id)))
        .collect();
    let mut parts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let next = specials
            .iter()
            .filter_map(|(t, id)| rest.find(t).map(|at| (at, *t, *id)))
            .min_by_key(|(at, _, _)| *at);
        match next {
            Some((at, token, id)) => {
                if at > 0 {
                    parts.push(lark_string(&rest[..at]));
                }
                parts.push(format!("<[{id}]>"));
                rest = &rest[at + token.len()..];
            }
            None => {
                parts.push(lark_string(rest));
                rest = "";
            }
        }
    }
    parts.join(" ")
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

    /// Control-token ids as if every token-like string were one (7, 8, … in the format's order).
    fn lark(spec: &ConstraintSpec, format: ToolCallFormat, special: bool) -> String {
        let like = format.token_like();
        let id = |t: &str| {
            let at = like.iter().position(|l| *l == t)?;
            special.then_some(7 + at as u32)
        };
        match plan(spec, format, &id) {
            Some(GrammarSource::Lark(g)) => g,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_tools_no_format_is_unconstrained() {
        assert_eq!(
            plan(&ConstraintSpec::default(), ToolCallFormat::HERMES, &|_| {
                None
            }),
            None
        );
    }

    #[test]
    fn none_keeps_text_without_the_markers() {
        let g = lark(&spec(ToolChoice::None), ToolCallFormat::HERMES, false);
        assert!(g.starts_with("start: TEXT\n"), "{g}");
        let g = lark(&spec(ToolChoice::None), ToolCallFormat::LLAMA3_JSON, false);
        assert!(g.contains(r"<\|python_tag\|>"), "{g}");
        let json = ToolCallFormat::from_name("json").unwrap();
        assert_eq!(plan(&spec(ToolChoice::None), json, &|_| None), None);
    }

    #[test]
    fn special_delimiters_are_tokens() {
        let g = lark(&spec(ToolChoice::Required), ToolCallFormat::HERMES, true);
        assert!(g.contains("block: <[7]> \"\\n\" fn \"\\n\" <[8]>"), "{g}");
        assert!(
            g.contains(r#"fn_0: "{\"name\": \"read\", \"arguments\": " args_0 "}""#),
            "{g}"
        );
    }

    #[test]
    fn auto_has_a_lazy_head_per_marker_and_per_tool() {
        let g = lark(&spec(ToolChoice::Auto), ToolCallFormat::HERMES, false);
        assert!(g.starts_with("start: TEXT | seg next* GAP?\n"), "{g}");
        assert!(g.contains("hd_m0[lazy]: TEXT \"<tool_call>\""), "{g}");
        assert!(
            g.contains("seg_m0: hd_m0 \"\\n\" fn \"\\n</tool_call>\""),
            "{g}"
        );
        assert!(
            g.contains(r#"hd_j[lazy]: TEXT /\n\{[ \t\r\n]*"name"[ \t\r\n]*:[ \t\r\n]*"/"#),
            "{g}"
        );
        assert!(
            g.contains(r#"jcall: "read\", \"arguments\": " args_0 "}""#),
            "{g}"
        );
        let g = lark(&spec(ToolChoice::Auto), ToolCallFormat::HERMES, true);
        assert!(
            g.contains("seg_m0: TEXT <[7]> \"\\n\" fn \"\\n\" <[8]>"),
            "{g}"
        );
        let mistral = ToolCallFormat::from_name("mistral").unwrap();
        let g = lark(&spec(ToolChoice::Auto), mistral, true);
        assert!(
            g.contains("seg_m0: TEXT <[7]> \"[\" fn (\", \" fn)* \"]\""),
            "{g}"
        );
    }

    #[test]
    fn markers_are_escaped_in_the_text_rule() {
        let t = text_rule(&["[TOOL_CALLS]", "<|python_tag|>"], false);
        assert_eq!(
            t,
            r"TEXT: /(?s:.*)/ & ~/(?s:.*)(\[TOOL_CALLS\]|<\|python_tag\|>)(?s:.*)/"
        );
    }
}
