//! [`ToolChoice`] and [`ResponseFormat`]: what a request asks of the shape of its output, in one definition that
//! the provider boundary, the engine's grammar and the HTTP server all use. Both are plain serde data tagged by
//! `type` (snake_case), and both read OpenAI's wire spelling with `from_openai`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{compile, Result, SchemaError, ToolSpec};

/// Which tools the model may (or must) call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToolChoice {
    /// Text, tool calls, or both; every call is constrained to a known tool and its schema on the local engine.
    #[default]
    Auto,
    /// Text only; the tools are not even shown to the model.
    None,
    /// At least one call and nothing else.
    Required,
    /// Exactly one call of this tool.
    Tool { name: String },
}

impl ToolChoice {
    /// The OpenAI `tool_choice` field: `"none" | "auto" | "required"` or
    /// `{"type": "function", "function": {"name": …}}`.
    pub fn from_openai(value: &Value) -> Result<Self> {
        match value {
            Value::String(s) => match s.as_str() {
                "none" => Ok(Self::None),
                "auto" => Ok(Self::Auto),
                "required" => Ok(Self::Required),
                other => Err(SchemaError::InvalidToolChoice(format!(
                    "`{other}` is not one of none, auto, required (or a function object)"
                ))),
            },
            Value::Object(_) => value
                .pointer("/function/name")
                .or_else(|| value.get("name"))
                .and_then(Value::as_str)
                .map(|n| Self::Tool {
                    name: n.to_string(),
                })
                .ok_or_else(|| {
                    SchemaError::InvalidToolChoice(format!(
                        "expected {{\"type\": \"function\", \"function\": {{\"name\": …}}}}, got {value}"
                    ))
                }),
            other => Err(SchemaError::InvalidToolChoice(format!(
                "expected a string or an object, got {other}"
            ))),
        }
    }

    /// The OpenAI wire value (what a remote server is sent).
    pub fn to_openai(&self) -> Value {
        match self {
            Self::Auto => Value::from("auto"),
            Self::None => Value::from("none"),
            Self::Required => Value::from("required"),
            Self::Tool { name } => {
                serde_json::json!({"type": "function", "function": {"name": name}})
            }
        }
    }

    /// The command-line spelling: `auto`, `required`, `none`, or a tool name.
    pub fn from_cli(s: &str) -> Self {
        match s {
            "none" => Self::None,
            "auto" => Self::Auto,
            "required" => Self::Required,
            name => Self::Tool {
                name: name.to_string(),
            },
        }
    }

    /// The tool this choice names, if it names one.
    pub fn named(&self) -> Option<&str> {
        match self {
            Self::Tool { name } => Some(name),
            _ => None,
        }
    }
}

/// The shape of the reply when it is not a tool call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    #[default]
    Text,
    /// Any one JSON object.
    JsonObject,
    /// One document of `schema`. `strict` is accepted for compatibility: the local engine always enforces.
    JsonSchema {
        name: String,
        schema: Value,
        #[serde(default)]
        strict: bool,
    },
    /// The whole reply matches this regular expression (vLLM's `regex`).
    Regex { pattern: String },
    /// The whole reply is one of these strings (vLLM's `choice`).
    Choice { choices: Vec<String> },
    /// The whole reply is a sentence of this grammar, in llguidance's Lark (vLLM's `grammar`; llama.cpp's GBNF,
    /// translated).
    Grammar { lark: String },
}

impl ResponseFormat {
    /// The Lark grammar of a regex, choice or grammar format (`None` for text and JSON).
    pub fn lark(&self) -> Option<String> {
        match self {
            Self::Regex { pattern } => Some(super::lark::regex_grammar(pattern)),
            Self::Choice { choices } => Some(super::lark::choice_grammar(choices)),
            Self::Grammar { lark } => Some(lark.clone()),
            Self::Text | Self::JsonObject | Self::JsonSchema { .. } => None,
        }
    }

    /// The OpenAI `response_format` field.
    pub fn from_openai(value: &Value) -> Result<Self> {
        let bad = SchemaError::InvalidResponseFormat;
        match value.get("type").and_then(Value::as_str) {
            Some("text") => Ok(Self::Text),
            Some("json_object") => Ok(Self::JsonObject),
            Some("json_schema") => {
                let js = value
                    .get("json_schema")
                    .ok_or_else(|| bad("`json_schema` is missing".into()))?;
                let schema = js
                    .get("schema")
                    .cloned()
                    .ok_or_else(|| bad("`json_schema.schema` is missing".into()))?;
                Ok(Self::JsonSchema {
                    name: js
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("response")
                        .to_string(),
                    schema,
                    strict: js.get("strict").and_then(Value::as_bool).unwrap_or(false),
                })
            }
            Some(other) => Err(bad(format!(
                "type `{other}` is not one of text, json_object, json_schema"
            ))),
            None => Err(bad(format!(
                "expected an object with a `type`, got {value}"
            ))),
        }
    }
}

/// Checks a request's output settings together: unique, valid tools; a `tool_choice` that names one of them (and
/// `required` only with tools); an admissible `response_format` schema.
pub fn check_request(
    tools: &[ToolSpec],
    tool_choice: &ToolChoice,
    response_format: &ResponseFormat,
) -> Result<()> {
    for (i, tool) in tools.iter().enumerate() {
        if tools[..i].iter().any(|t| t.name == tool.name) {
            return Err(SchemaError::DuplicateToolName(tool.name.clone()));
        }
        tool.validate()?;
    }
    match tool_choice {
        ToolChoice::Required if tools.is_empty() => {
            return Err(SchemaError::InvalidToolChoice(
                "`required` needs at least one tool".into(),
            ))
        }
        ToolChoice::Tool { name } if !tools.iter().any(|t| &t.name == name) => {
            return Err(SchemaError::InvalidToolChoice(if tools.is_empty() {
                format!("names tool `{name}`, but the request has no tools")
            } else {
                let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
                format!(
                    "names tool `{name}`, which is not one of the tools: {}",
                    names.join(", ")
                )
            }))
        }
        _ => {}
    }
    match response_format {
        ResponseFormat::JsonSchema { name, schema, .. } => {
            compile::check(schema, &format!("response_format `{name}`"))?;
        }
        ResponseFormat::Choice { choices } if choices.is_empty() => {
            return Err(SchemaError::EmptyLanguage {
                what: "choice".into(),
                message: "the list of choices is empty".into(),
            });
        }
        ResponseFormat::Regex { .. }
        | ResponseFormat::Choice { .. }
        | ResponseFormat::Grammar { .. } => {
            let calls_possible = !tools.is_empty() && *tool_choice != ToolChoice::None;
            if calls_possible {
                return Err(SchemaError::InvalidResponseFormat(
                    "a regex, choice or grammar holds the whole reply, so it cannot be combined with tools \
                     (unless tool_choice is \"none\")"
                        .into(),
                ));
            }
            if let Some(lark) = response_format.lark() {
                super::lark::check_lark(&lark, "the grammar")?;
            }
        }
        ResponseFormat::Text | ResponseFormat::JsonObject => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_choice_reads_openai_and_round_trips_serde() {
        assert_eq!(
            ToolChoice::from_openai(&json!("required")).unwrap(),
            ToolChoice::Required
        );
        let named =
            ToolChoice::from_openai(&json!({"type": "function", "function": {"name": "f"}}))
                .unwrap();
        assert_eq!(named, ToolChoice::Tool { name: "f".into() });
        assert_eq!(
            named.to_openai(),
            json!({"type": "function", "function": {"name": "f"}})
        );
        assert_eq!(
            serde_json::to_value(&named).unwrap(),
            json!({"type": "tool", "name": "f"})
        );
        assert!(matches!(
            ToolChoice::from_openai(&json!("sometimes")),
            Err(SchemaError::InvalidToolChoice(_))
        ));
        assert!(matches!(
            ToolChoice::from_openai(&json!(3)),
            Err(SchemaError::InvalidToolChoice(_))
        ));
    }

    #[test]
    fn response_format_reads_openai() {
        let f = ResponseFormat::from_openai(
            &json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}),
        )
        .unwrap();
        assert_eq!(
            f,
            ResponseFormat::JsonSchema {
                name: "x".into(),
                schema: json!({"type": "object"}),
                strict: false
            }
        );
        let back: ResponseFormat =
            serde_json::from_value(serde_json::to_value(&f).unwrap()).unwrap();
        assert_eq!(back, f);
        assert!(matches!(
            ResponseFormat::from_openai(&json!({"type": "xml"})),
            Err(SchemaError::InvalidResponseFormat(_))
        ));
    }
}
