//! `ToolSpec`: what the model is told about a tool (name, description, JSON Schema of the arguments) and the
//! single place a tool's schema is admitted.
//!
//! A spec comes from a Rust type (`schemars`, for our own tools) or from raw JSON (the OpenAI `tools` field). Either
//! way it is validated once: the name, the schema against its meta-schema (the `jsonschema` crate, error naming the
//! location), and llguidance's ability to enforce it exactly (error naming the keyword). The local engine turns the
//! schema into a grammar; the agent's tool pipeline and the remote provider check arguments with
//! [`ToolSpec::validate_arguments`].

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::compile as schema;
use super::{Result, SchemaError};

/// The longest tool name accepted (OpenAI's limit).
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// A tool as the model sees it.
#[derive(Clone, Serialize, Deserialize)]
pub struct ToolSpec {
    /// `[A-Za-z0-9_.-]{1,64}`: the name the model writes in a call.
    pub name: String,
    /// What the tool does and when to use it, for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments object, as the model sees it and calls are validated against (agentd's
    /// extensions taken out).
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
    /// The schema the local engine constrains the arguments with when it is stricter than `parameters`: the
    /// same shape with agentd's extensions ([`super::extensions`]: substrings of a file, existing paths) or
    /// branches on a value. `None`: `parameters`. Never shown to the model nor sent to a remote server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grammar: Option<Value>,
    /// Every keyword of `parameters` must be enforced exactly (OpenAI's and Anthropic's `strict: true`): a
    /// keyword constrained decoding cannot enforce is refused. Otherwise such keywords are left out of the
    /// grammar (see [`schema::relax`]) and calls are still validated against `parameters`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
    /// The compiled validator for `parameters` (rebuilt if `parameters` changes).
    #[serde(skip)]
    compiled: ValidatorCache,
}

/// The last `parameters` compiled and its validator, shared by clones.
type ValidatorCache = Arc<Mutex<Option<(Value, Arc<jsonschema::Validator>)>>>;

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

impl std::fmt::Debug for ToolSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSpec")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("parameters", &self.parameters)
            .finish()
    }
}

impl PartialEq for ToolSpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.description == other.description
            && self.parameters == other.parameters
            && self.grammar == other.grammar
    }
}

impl ToolSpec {
    /// A validated spec. Errors: [`SchemaError::InvalidTool`] (name, non-object parameters),
    /// [`SchemaError::InvalidSchema`], [`SchemaError::UnsupportedSchemaKeyword`], [`SchemaError::EmptyLanguage`].
    ///
    /// A `parameters` that uses agentd's extensions (an API client asking for workspace-aware arguments) is split:
    /// the extensions are checked and kept as [`grammar`](Self::grammar), `parameters` keeps the rest.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Result<Self> {
        Self::build(name, description, parameters, false)
    }

    /// [`new`](Self::new) for a `strict` tool: a keyword the grammar cannot enforce is an error
    /// ([`SchemaError::UnsupportedSchemaKeyword`]) instead of being left out of the grammar.
    pub fn new_strict(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Result<Self> {
        Self::build(name, description, parameters, true)
    }

    fn build(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
        strict: bool,
    ) -> Result<Self> {
        let (parameters, grammar) = match super::extensions::has_extensions(&parameters) {
            true => {
                super::extensions::check_extensions(&parameters)?;
                (
                    super::extensions::strip_extensions(&parameters),
                    Some(parameters),
                )
            }
            false => (parameters, None),
        };
        let mut spec = Self::new_unchecked(name, description, parameters);
        spec.grammar = grammar;
        spec.strict = strict;
        if !strict {
            if let Some(relaxed) = schema::relax(spec.grammar_schema()) {
                spec.grammar = Some(relaxed);
            }
        }
        spec.validate()?;
        Ok(spec)
    }

    /// This spec with its arguments constrained by `grammar` on the local engine (see [`grammar`](Self::grammar));
    /// the extensions in it are checked.
    pub fn with_grammar(mut self, grammar: Value) -> Result<Self> {
        super::extensions::check_extensions(&grammar)?;
        self.grammar = Some(grammar);
        Ok(self)
    }

    /// The schema the local engine's grammar uses: [`grammar`](Self::grammar), else `parameters`.
    pub fn grammar_schema(&self) -> &Value {
        self.grammar.as_ref().unwrap_or(&self.parameters)
    }

    /// A spec that has not been validated (call [`validate`](Self::validate) before trusting it).
    pub fn new_unchecked(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            parameters,
            grammar: None,
            strict: false,
            compiled: Arc::default(),
        }
    }

    /// The spec of a tool whose arguments deserialize into `T`: the schema is derived with `schemars` (doc
    /// comments become descriptions), then validated like any other.
    pub fn from_type<T: schemars::JsonSchema>(
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> Result<Self> {
        let name = name.into();
        let mut parameters = serde_json::to_value(schemars::schema_for!(T)).map_err(|e| {
            SchemaError::InvalidTool {
                name: name.clone(),
                message: format!("derived schema does not serialize: {e}"),
            }
        })?;
        if let Value::Object(map) = &mut parameters {
            // Noise for the model; the draft is the default one anyway.
            map.remove("$schema");
            map.remove("title");
        }
        Self::new(name, description, parameters)
    }

    /// One entry of an OpenAI `tools` array (`{"type": "function", "function": {name, description, parameters}}`)
    /// or a bare `{name, description, parameters}` object, validated.
    pub fn from_openai(tool: &Value) -> Result<Self> {
        let invalid = |message: String| SchemaError::InvalidTool {
            name: tool
                .pointer("/function/name")
                .or_else(|| tool.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string(),
            message,
        };
        if let Some(kind) = tool.get("type").and_then(Value::as_str) {
            if kind != "function" {
                return Err(invalid(format!(
                    "tool type `{kind}` is not supported (only `function`)"
                )));
            }
        }
        let function = tool.get("function").unwrap_or(tool);
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid("missing `name`".into()))?;
        let description = match function.get("description") {
            None | Some(Value::Null) => "",
            Some(Value::String(s)) => s,
            Some(_) => return Err(invalid("`description` must be a string".into())),
        };
        let parameters = match function.get("parameters") {
            None | Some(Value::Null) => empty_object_schema(),
            Some(p) => p.clone(),
        };
        let strict =
            function.get("strict").or_else(|| tool.get("strict")) == Some(&Value::Bool(true));
        Self::build(name, description, parameters, strict)
    }

    /// Parses an OpenAI `tools` array.
    pub fn list_from_openai(tools: &Value) -> Result<Vec<Self>> {
        let items = tools.as_array().ok_or_else(|| SchemaError::InvalidTool {
            name: "?".into(),
            message: "`tools` must be an array".into(),
        })?;
        items.iter().map(Self::from_openai).collect()
    }

    /// The OpenAI `tools` entry for this spec (what chat templates that render tools expect).
    pub fn to_openai(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        })
    }

    /// Checks the name and the schema (see [`new`](Self::new) for the errors).
    pub fn validate(&self) -> Result<()> {
        let bad_name = self.name.is_empty()
            || self.name.len() > MAX_TOOL_NAME_LEN
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if bad_name {
            return Err(SchemaError::InvalidTool {
                name: self.name.clone(),
                message: format!(
                    "a name must be 1 to {MAX_TOOL_NAME_LEN} ASCII letters, digits, `_`, `-` or `.`"
                ),
            });
        }
        match &self.parameters {
            Value::Object(map) => {
                if let Some(kind) = map.get("type") {
                    if kind != "object" {
                        return Err(SchemaError::InvalidTool {
                            name: self.name.clone(),
                            message: format!(
                                "`parameters` must describe an object, not `\"type\": {kind}`"
                            ),
                        });
                    }
                }
            }
            Value::Bool(_) => {}
            other => {
                return Err(SchemaError::InvalidTool {
                    name: self.name.clone(),
                    message: format!("`parameters` must be a JSON Schema object, got {other}"),
                })
            }
        }
        let what = format!("tool `{}`", self.name);
        match schema::relax(&self.parameters) {
            // Keywords the grammar leaves out (not strict): `parameters` must still be a valid schema, and what
            // the grammar enforces must compile.
            Some(relaxed) if !self.strict => {
                schema::validator(&self.parameters)?;
                schema::check(&relaxed, &what)
            }
            _ => schema::check(&self.parameters, &what),
        }
    }

    /// Checks a call's arguments against `parameters`. `Err` lists every violation as `"/path: message"`
    /// (`/` is the arguments object itself); a schema that does not compile is reported the same way.
    pub fn validate_arguments(&self, arguments: &Value) -> std::result::Result<(), Vec<String>> {
        let validator = self.validator().map_err(|e| vec![format!("/: {e}")])?;
        let errors = schema::violations(&validator, arguments);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The compiled validator, built once per `parameters` value.
    fn validator(&self) -> Result<Arc<jsonschema::Validator>> {
        let mut cache = self
            .compiled
            .lock()
            .map_err(|_| SchemaError::Internal("tool validator cache poisoned".into()))?;
        if let Some((params, validator)) = cache.as_ref() {
            if *params == self.parameters {
                return Ok(validator.clone());
            }
        }
        let validator = Arc::new(schema::validator(&self.parameters)?);
        *cache = Some((self.parameters.clone(), validator.clone()));
        Ok(validator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(schemars::JsonSchema, Deserialize)]
    #[allow(dead_code)]
    struct ReadArgs {
        /// File to read.
        path: String,
        /// First line (1-based).
        offset: Option<u32>,
    }

    #[test]
    fn derived_from_a_rust_type() {
        let spec = ToolSpec::from_type::<ReadArgs>("read", "Read a file").unwrap();
        assert_eq!(spec.parameters["type"], "object");
        assert_eq!(spec.parameters["required"], json!(["path"]));
        assert!(spec.validate_arguments(&json!({"path": "a.rs"})).is_ok());
        let errors = spec
            .validate_arguments(&json!({"path": 3, "offset": -1}))
            .unwrap_err();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors.iter().any(|e| e.starts_with("/path:")), "{errors:?}");
    }

    #[test]
    fn openai_round_trip() {
        let raw = json!({"type": "function", "function": {"name": "get_weather", "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}});
        let spec = ToolSpec::from_openai(&raw).unwrap();
        assert_eq!(spec.to_openai(), raw);
        let back: ToolSpec = serde_json::from_value(serde_json::to_value(&spec).unwrap()).unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn bad_names_and_parameters_are_rejected() {
        for name in ["", "has space", &"x".repeat(65)] {
            assert!(matches!(
                ToolSpec::new(name, "", json!({"type": "object"})),
                Err(SchemaError::InvalidTool { .. })
            ));
        }
        assert!(matches!(
            ToolSpec::new("t", "", json!({"type": "string"})),
            Err(SchemaError::InvalidTool { .. })
        ));
        assert!(matches!(
            ToolSpec::new(
                "t",
                "",
                json!({"type": "object", "properties": {"a": {"type": "nope"}}})
            ),
            Err(SchemaError::InvalidSchema { .. })
        ));
        // A keyword the grammar cannot enforce: refused for a strict tool, left out of the grammar otherwise
        // (calls are still validated against the schema as given).
        let unique =
            json!({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}});
        assert!(matches!(
            ToolSpec::new_strict("t", "", unique.clone()),
            Err(SchemaError::UnsupportedSchemaKeyword { .. })
        ));
        let strict = json!({"type": "function", "function": {"name": "t", "parameters": unique, "strict": true}});
        assert!(ToolSpec::from_openai(&strict).is_err());
        let lenient = ToolSpec::new("t", "", unique.clone()).unwrap();
        assert_eq!(lenient.parameters, unique);
        assert_eq!(
            lenient.grammar_schema(),
            &json!({"type": "object", "properties": {"a": {"type": "array"}}})
        );
        assert!(lenient.validate_arguments(&json!({"a": [1, 1]})).is_err());
        assert!(lenient.validate_arguments(&json!({"a": [1, 2]})).is_ok());
    }
}
