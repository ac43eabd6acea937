//! Tool-call formats: how a model family writes a tool call. The families are data — the embedded table
//! `models/tool_call_formats.toml` (see its header for the fields) — and a model's manifest names one
//! (`tool_call_format`), or [`ToolCallFormat::detect`] picks one from the chat template.
//!
//! A [`ToolCallFormat`] is a cheap handle into that table. It owns the canonical call block (what `required` and
//! named calls are constrained to, and how past calls are rendered into a transcript), the markers that start a
//! call under `auto`, the tools block for templates that know no tools and the tool-result wrapping. The grammar
//! (`grammar.rs`) and the output assembler (`assemble.rs`) are built from these pieces, never from a family's
//! name.

use std::sync::LazyLock;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::schema::compile::to_compact_string;
use crate::schema::ToolSpec;
use crate::text::error::{Result, TextError};

/// The embedded table.
const TABLE: &str = include_str!("../../models/tool_call_formats.toml");

/// One family's entry in the table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormatDef {
    pub name: String,
    #[serde(default)]
    pub detect: Vec<String>,
    pub arguments_key: String,
    #[serde(default)]
    pub open: String,
    #[serde(default)]
    pub close: String,
    #[serde(default)]
    pub list: bool,
    pub separator: String,
    #[serde(default)]
    pub markers: Vec<String>,
    pub tools_prompt: String,
    pub tools_joiner: String,
    pub tool_result: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    format: Vec<FormatDef>,
}

/// Parses and checks a formats table (the embedded one, or a test's).
pub fn parse_table(text: &str) -> std::result::Result<Vec<FormatDef>, String> {
    let table: Table = toml::from_str(text).map_err(|e| e.to_string())?;
    if table.format.is_empty() {
        return Err("no [[format]] entries".into());
    }
    for (i, f) in table.format.iter().enumerate() {
        if table.format[..i].iter().any(|g| g.name == f.name) {
            return Err(format!("format `{}` is listed twice", f.name));
        }
        if f.arguments_key != "arguments" && f.arguments_key != "parameters" {
            return Err(format!(
                "format `{}`: arguments_key must be `arguments` or `parameters`",
                f.name
            ));
        }
        if f.open.trim().is_empty() && (!f.close.is_empty() || f.list) {
            return Err(format!(
                "format `{}`: `close` and `list` need an `open`",
                f.name
            ));
        }
        if f.markers.iter().any(|m| m.trim().is_empty()) {
            return Err(format!("format `{}`: an empty marker", f.name));
        }
        if !f.open.trim().is_empty() && f.markers.first().map(String::as_str) != Some(f.open.trim())
        {
            return Err(format!(
                "format `{}`: the first marker must be `open` without its surrounding whitespace",
                f.name
            ));
        }
        if !f.tools_prompt.contains("{tools}") || !f.tool_result.contains("{content}") {
            return Err(format!(
                "format `{}`: tools_prompt needs `{{tools}}` and tool_result `{{content}}`",
                f.name
            ));
        }
    }
    Ok(table.format)
}

/// The embedded table, parsed once. It is part of the binary and checked by a unit test, so a parse failure is
/// a build defect; it is still not a panic: the table then holds a single Hermes entry and the error is logged.
static FORMATS: LazyLock<Vec<FormatDef>> = LazyLock::new(|| match parse_table(TABLE) {
    Ok(t) => t,
    Err(e) => {
        tracing::error!("the embedded tool-call format table is invalid: {e}");
        vec![FormatDef {
            name: "hermes".into(),
            detect: vec!["<tool_call>".into()],
            arguments_key: "arguments".into(),
            open: "<tool_call>\n".into(),
            close: "\n</tool_call>".into(),
            list: false,
            separator: "\n".into(),
            markers: vec!["<tool_call>".into()],
            tools_prompt: "{tools}".into(),
            tools_joiner: "\n".into(),
            tool_result: "<tool_response>\n{content}\n</tool_response>".into(),
        }]
    }
});

/// A model family's way of writing tool calls: a handle into the format table.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ToolCallFormat(u8);

impl Default for ToolCallFormat {
    fn default() -> Self {
        Self::HERMES
    }
}

impl ToolCallFormat {
    /// `hermes` (the table's first entry): `<tool_call>\n{…}\n</tool_call>` blocks after optional text.
    pub const HERMES: ToolCallFormat = ToolCallFormat(0);
    /// `llama3_json` (the table's second entry): bare `{"name": …, "parameters": …}` objects joined by `; `.
    pub const LLAMA3_JSON: ToolCallFormat = ToolCallFormat(1);

    fn def(self) -> &'static FormatDef {
        let table: &'static [FormatDef] = &FORMATS;
        table.get(self.0 as usize).unwrap_or(&table[0])
    }

    /// Every format of the table, in order.
    pub fn all() -> Vec<ToolCallFormat> {
        (0..FORMATS.len().min(u8::MAX as usize))
            .map(|i| ToolCallFormat(i as u8))
            .collect()
    }

    /// Every format's name, in table order (what a manifest may say).
    pub fn names() -> Vec<&'static str> {
        Self::all().into_iter().map(|f| f.name()).collect()
    }

    /// The table spelling.
    pub fn name(self) -> &'static str {
        &self.def().name
    }

    /// Looks a format up by name.
    pub fn from_name(name: &str) -> Result<Self> {
        Self::all()
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| TextError::UnknownToolCallFormat {
                name: name.into(),
                known: Self::names().into_iter().map(String::from).collect(),
            })
    }

    /// The format a chat template speaks: the first entry whose `detect` strings all occur in `template` (entries
    /// without any are never detected), else `None`.
    pub fn detect(template: &str) -> Option<Self> {
        Self::all().into_iter().find(|f| {
            let d = &f.def().detect;
            !d.is_empty() && d.iter().all(|s| template.contains(s.as_str()))
        })
    }

    /// The key holding a call's arguments in this family's own shape.
    pub fn arguments_key(self) -> &'static str {
        &self.def().arguments_key
    }

    /// The text before the canonical call block (`""`: calls are bare JSON objects).
    pub fn open(self) -> &'static str {
        &self.def().open
    }

    /// The text after the canonical call block.
    pub fn close(self) -> &'static str {
        &self.def().close
    }

    /// Calls are bare JSON objects, so a call and a JSON reply look alike.
    pub fn is_bare(self) -> bool {
        self.open().trim().is_empty()
    }

    /// A block holds a JSON array of calls.
    pub fn is_list(self) -> bool {
        self.def().list
    }

    /// Between two calls (blocks, or array items of a list block).
    pub fn call_separator(self) -> &'static str {
        &self.def().separator
    }

    /// Openers that start a call block under `auto` (the canonical one first).
    pub fn markers(self) -> &'static [String] {
        &self.def().markers
    }

    /// Strings of this format that some vocabularies hold as single control tokens (markers and the closer).
    pub fn token_like(self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = self.markers().iter().map(String::as_str).collect();
        let close = self.close().trim();
        if !close.is_empty() {
            out.push(close);
        }
        out
    }

    /// The JSON text of a call up to its arguments: `{"name": "NAME", "arguments": `.
    pub fn call_prefix(self, name: &str) -> String {
        format!(
            "{{\"name\": {}, \"{}\": ",
            Value::String(name.into()),
            self.arguments_key()
        )
    }

    /// One call object as the model writes it. `arguments` is JSON text; invalid JSON is embedded as a JSON
    /// string so the transcript stays parseable.
    pub fn render_object(self, name: &str, arguments: &str) -> String {
        let args = match serde_json::from_str::<Value>(arguments) {
            Ok(v) => to_compact_string(&v),
            Err(_) => Value::String(arguments.into()).to_string(),
        };
        format!("{}{args}}}", self.call_prefix(name))
    }

    /// One call as the model writes it, its block's delimiters included.
    pub fn render_call(self, name: &str, arguments: &str) -> String {
        self.render_calls([(name, arguments)])
    }

    /// Several calls as one assistant turn writes them.
    pub fn render_calls<'a>(self, calls: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
        let objects: Vec<String> = calls
            .into_iter()
            .map(|(name, args)| self.render_object(name, args))
            .collect();
        if self.is_list() {
            return format!(
                "{}[{}]{}",
                self.open(),
                objects.join(self.call_separator()),
                self.close()
            );
        }
        objects
            .iter()
            .map(|o| format!("{}{o}{}", self.open(), self.close()))
            .collect::<Vec<_>>()
            .join(self.call_separator())
    }

    /// A tool result as the text of the turn that carries it, for templates that know no `tool` role.
    pub fn render_tool_result(self, content: &str) -> String {
        self.def().tool_result.replace("{content}", content)
    }

    /// The block appended to the system message when the chat template does not render tools itself.
    pub fn tools_prompt(self, tools: &[ToolSpec]) -> String {
        let listed: Vec<String> = tools
            .iter()
            .map(|t| to_compact_string(&t.to_openai()))
            .collect();
        self.def()
            .tools_prompt
            .replace("{tools}", &listed.join(&self.def().tools_joiner))
    }
}

impl std::fmt::Debug for ToolCallFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ToolCallFormat({})", self.name())
    }
}

impl std::fmt::Display for ToolCallFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for ToolCallFormat {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for ToolCallFormat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        ToolCallFormat::from_name(&name).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_table_parses_and_the_constants_point_at_their_entries() {
        let table = parse_table(TABLE).unwrap();
        assert_eq!(table.len(), ToolCallFormat::all().len());
        assert_eq!(ToolCallFormat::HERMES.name(), "hermes");
        assert_eq!(ToolCallFormat::LLAMA3_JSON.name(), "llama3_json");
        for f in ToolCallFormat::all() {
            assert_eq!(ToolCallFormat::from_name(f.name()).unwrap(), f);
        }
        assert!(ToolCallFormat::from_name("xml").is_err());
        assert!(parse_table("[[format]]\nname = \"x\"").is_err());
    }

    #[test]
    fn templates_are_detected_by_their_markers() {
        let f = |t: &str| ToolCallFormat::detect(t).map(|f| f.name());
        assert_eq!(f("{{- '<tool_call>\\n' }}"), Some("hermes"));
        assert_eq!(f("{{- '<|python_tag|>' + x }}"), Some("llama3_json"));
        assert_eq!(f("{{ '[TOOL_CALLS]' }}"), Some("mistral"));
        assert_eq!(f("{{ messages }}"), None);
    }

    #[test]
    fn renders_calls_like_the_templates() {
        assert_eq!(
            ToolCallFormat::HERMES.render_call("read", r#"{"path":"a.rs"}"#),
            "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a.rs\"}}\n</tool_call>"
        );
        assert_eq!(
            ToolCallFormat::LLAMA3_JSON.render_calls([("a", "{}"), ("b", "{\"x\": 1}")]),
            "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}"
        );
        let mistral = ToolCallFormat::from_name("mistral").unwrap();
        assert_eq!(
            mistral.render_calls([("a", "{}"), ("b", "{}")]),
            "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {}}]"
        );
        assert_eq!(
            ToolCallFormat::HERMES.render_tool_result("ok"),
            "<tool_response>\nok\n</tool_response>"
        );
    }
}
