//! Tool-call formats: how a model family writes a tool call, chosen by the manifest's `tool_call_format`.
//!
//! - `hermes` (Qwen2.5, Hermes, our SmolLM2 default): each call is
//!   `<tool_call>\n{"name": "NAME", "arguments": {…}}\n</tool_call>`, calls separated by `\n`, after optional text.
//! - `llama3_json` (Llama 3.1/3.2 JSON tool calling): the reply is `{"name": "NAME", "parameters": {…}}`, several
//!   calls separated by `; `, and no text around them.
//!
//! The format owns the delimiters, the JSON prefix of a call, the tools block injected into the system prompt of
//! templates that know no tools, and the rendering of past calls and results into the transcript. The grammar
//! (`grammar.rs`) and the output assembler (`assemble.rs`) are built from these pieces.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::super::error::{EngineError, Result};
use crate::schema::compile::to_compact_string;
use crate::schema::ToolSpec;

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallFormat {
    /// `<tool_call>\n{"name": …, "arguments": …}\n</tool_call>` blocks after optional text.
    #[default]
    Hermes,
    /// `{"name": …, "parameters": …}` objects joined by `; `, the whole reply.
    Llama3Json,
}

impl ToolCallFormat {
    /// Every format, in the order of [`crate::engine::manifest::TOOL_CALL_FORMATS`].
    pub const ALL: [ToolCallFormat; 2] = [ToolCallFormat::Hermes, ToolCallFormat::Llama3Json];

    /// The manifest spelling.
    pub fn name(self) -> &'static str {
        match self {
            ToolCallFormat::Hermes => "hermes",
            ToolCallFormat::Llama3Json => "llama3_json",
        }
    }

    /// Parses a manifest's `tool_call_format`.
    pub fn from_name(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| EngineError::UnknownToolCallFormat {
                name: name.into(),
                known: Self::ALL.iter().map(|f| f.name().to_string()).collect(),
            })
    }

    /// The key holding a call's arguments object.
    pub fn arguments_key(self) -> &'static str {
        match self {
            ToolCallFormat::Hermes => "arguments",
            ToolCallFormat::Llama3Json => "parameters",
        }
    }

    /// Text that opens a call (`None`: a call is a bare JSON object).
    pub fn open_delimiter(self) -> Option<&'static str> {
        match self {
            ToolCallFormat::Hermes => Some("<tool_call>"),
            ToolCallFormat::Llama3Json => None,
        }
    }

    /// Text that closes a call.
    pub fn close_delimiter(self) -> Option<&'static str> {
        match self {
            ToolCallFormat::Hermes => Some("</tool_call>"),
            ToolCallFormat::Llama3Json => None,
        }
    }

    /// Between two calls.
    pub fn call_separator(self) -> &'static str {
        match self {
            ToolCallFormat::Hermes => "\n",
            ToolCallFormat::Llama3Json => "; ",
        }
    }

    /// The JSON text of a call up to its arguments: `{"name": "NAME", "arguments": `.
    pub fn call_prefix(self, name: &str) -> String {
        format!(
            "{{\"name\": {}, \"{}\": ",
            Value::String(name.into()),
            self.arguments_key()
        )
    }

    /// One call as the model writes it, delimiters included. `arguments` is JSON text; invalid JSON is embedded as
    /// a JSON string so the transcript stays parseable.
    pub fn render_call(self, name: &str, arguments: &str) -> String {
        let args = match serde_json::from_str::<Value>(arguments) {
            Ok(v) => to_compact_string(&v),
            Err(_) => Value::String(arguments.into()).to_string(),
        };
        let body = format!("{}{args}}}", self.call_prefix(name));
        match (self.open_delimiter(), self.close_delimiter()) {
            (Some(open), Some(close)) => format!("{open}\n{body}\n{close}"),
            _ => body,
        }
    }

    /// Several calls as one assistant turn writes them.
    pub fn render_calls<'a>(self, calls: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
        calls
            .into_iter()
            .map(|(name, args)| self.render_call(name, args))
            .collect::<Vec<_>>()
            .join(self.call_separator())
    }

    /// A tool result as the user turn that carries it, for templates that know no `tool` role.
    pub fn render_tool_result(self, content: &str) -> String {
        format!("<tool_response>\n{content}\n</tool_response>")
    }

    /// The block appended to the system message when the chat template does not render tools itself.
    pub fn tools_prompt(self, tools: &[ToolSpec]) -> String {
        let listed: Vec<String> = tools
            .iter()
            .map(|t| to_compact_string(&t.to_openai()))
            .collect();
        match self {
            // Qwen2.5's own wording, so Hermes-trained models see what they were trained on.
            ToolCallFormat::Hermes => format!(
                "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
                 You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{}\n</tools>\n\n\
                 For each function call, return a json object with function name and arguments within \
                 <tool_call></tool_call> XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": \
                 <args-json-object>}}\n</tool_call>",
                listed.join("\n")
            ),
            // Llama 3.1's custom-tool wording.
            ToolCallFormat::Llama3Json => format!(
                "Given the following functions, please respond with a JSON for a function call with its proper \
                 arguments that best answers the given prompt.\n\n\
                 Respond in the format {{\"name\": function name, \"parameters\": dictionary of argument name and \
                 its value}}. Do not use variables.\n\n{}",
                listed.join("\n\n")
            ),
        }
    }
}

impl std::fmt::Display for ToolCallFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_the_manifest_list() {
        let names: Vec<&str> = ToolCallFormat::ALL.iter().map(|f| f.name()).collect();
        assert_eq!(names, crate::engine::manifest::TOOL_CALL_FORMATS);
        for f in ToolCallFormat::ALL {
            assert_eq!(ToolCallFormat::from_name(f.name()).unwrap(), f);
        }
        assert!(ToolCallFormat::from_name("xml").is_err());
    }

    #[test]
    fn renders_calls_like_the_templates() {
        assert_eq!(
            ToolCallFormat::Hermes.render_call("read", r#"{"path":"a.rs"}"#),
            "<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a.rs\"}}\n</tool_call>"
        );
        assert_eq!(
            ToolCallFormat::Llama3Json.render_calls([("a", "{}"), ("b", "{\"x\": 1}")]),
            "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}"
        );
    }
}
