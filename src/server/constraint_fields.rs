//! The output constraints Chat Completions and completions take beside OpenAI's `response_format`, as vLLM and
//! llama.cpp's server name them: vLLM's `structured_outputs` (`json`, `regex`, `choice`, `grammar`,
//! `json_object`) and its older `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`; llama.cpp's
//! `grammar` (GBNF, translated to llguidance's Lark) and `json_schema`. At most one may be given (with or
//! instead of a `response_format` that says text); each becomes a [`ResponseFormat`] and a 400 names the field
//! when it is malformed or its grammar does not compile.

use serde::Deserialize;
use serde_json::Value;

use super::error::ApiError;
use crate::provider::{CompletionRequest, ResponseFormat};
use crate::schema::compile::close_objects;
use crate::schema::gbnf;

/// The fields, as a request body carries them (flattened into the request type).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct ConstraintFields {
    #[serde(default)]
    pub structured_outputs: Option<Value>,
    #[serde(default)]
    pub guided_json: Option<Value>,
    #[serde(default)]
    pub guided_regex: Option<Value>,
    #[serde(default)]
    pub guided_choice: Option<Value>,
    #[serde(default)]
    pub guided_grammar: Option<Value>,
    /// llama.cpp: a GBNF grammar.
    #[serde(default)]
    pub grammar: Option<Value>,
    /// llama.cpp: a JSON schema.
    #[serde(default)]
    pub json_schema: Option<Value>,
}

/// `structured_outputs`' settings that tune how a backend generates JSON; llguidance here always writes compact
/// JSON without undeclared keys, so they are accepted and change nothing.
const TUNING: &[&str] = &[
    "disable_fallback",
    "disable_any_whitespace",
    "disable_additional_properties",
    "whitespace_pattern",
    "backend",
];

fn string<'a>(value: &'a Value, field: &str) -> Result<&'a str, ApiError> {
    value.as_str().ok_or_else(|| {
        ApiError::invalid_param(field, format!("{field} must be a string, got {value}"))
    })
}

/// A JSON schema given as an object, or as JSON text (vLLM takes both).
fn schema(value: &Value, field: &str) -> Result<ResponseFormat, ApiError> {
    let schema = match value {
        Value::String(text) => serde_json::from_str(text)
            .map_err(|e| ApiError::invalid_param(field, format!("{field} is not JSON: {e}")))?,
        Value::Object(_) | Value::Bool(_) => value.clone(),
        other => {
            return Err(ApiError::invalid_param(
                field,
                format!("{field} must be a JSON schema, got {other}"),
            ))
        }
    };
    // As llama.cpp and xgrammar (vLLM's default backend) generate: no key the schema does not declare.
    Ok(ResponseFormat::JsonSchema {
        name: field.to_string(),
        schema: close_objects(&schema),
        strict: true,
    })
}

fn choice(value: &Value, field: &str) -> Result<ResponseFormat, ApiError> {
    let items = value.as_array().ok_or_else(|| {
        ApiError::invalid_param(
            field,
            format!("{field} must be a list of strings, got {value}"),
        )
    })?;
    let choices = items
        .iter()
        .map(|v| match v {
            Value::String(s) => Ok(s.clone()),
            // vLLM writes each choice with str(): a number is its text.
            Value::Number(n) => Ok(n.to_string()),
            other => Err(ApiError::invalid_param(
                field,
                format!("{field} must hold strings, got {other}"),
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if choices.is_empty() {
        return Err(ApiError::invalid_param(field, format!("{field} is empty")));
    }
    Ok(ResponseFormat::Choice { choices })
}

fn gbnf_grammar(text: &str, field: &str) -> Result<ResponseFormat, ApiError> {
    let lark = gbnf::gbnf_to_lark(text)
        .map_err(|e| ApiError::invalid_param(field, format!("{field}: {e}")))?;
    Ok(ResponseFormat::Grammar { lark })
}

/// vLLM's `grammar`: GBNF (xgrammar's EBNF, rules written `name ::= …`) or llguidance's Lark.
fn either_grammar(value: &Value, field: &str) -> Result<ResponseFormat, ApiError> {
    let text = string(value, field)?;
    if text.contains("::=") {
        gbnf_grammar(text, field)
    } else {
        Ok(ResponseFormat::Grammar {
            lark: text.to_string(),
        })
    }
}

/// `structured_outputs`: exactly one of its constraints.
fn structured(value: &Value) -> Result<(ResponseFormat, String), ApiError> {
    let top = "structured_outputs";
    let map = value.as_object().ok_or_else(|| {
        ApiError::invalid_param(top, format!("{top} must be an object, got {value}"))
    })?;
    let mut found = Vec::new();
    for (key, v) in map {
        if v.is_null() || TUNING.contains(&key.as_str()) {
            continue;
        }
        let field = format!("{top}.{key}");
        let format = match key.as_str() {
            "json" => schema(v, &field)?,
            "regex" => ResponseFormat::Regex {
                pattern: string(v, &field)?.to_string(),
            },
            "choice" => choice(v, &field)?,
            "grammar" => either_grammar(v, &field)?,
            "json_object" => match v {
                Value::Bool(true) => ResponseFormat::JsonObject,
                Value::Bool(false) => continue,
                other => {
                    return Err(ApiError::invalid_param(
                        &field,
                        format!("{field} must be a boolean, got {other}"),
                    ))
                }
            },
            "structural_tag" => return Err(ApiError::invalid_param(
                &field,
                "structural tags are not supported: tools' calls are constrained through `tools`",
            )),
            other => {
                return Err(ApiError::invalid_param(
                    &field,
                    format!(
                        "unknown constraint `{other}` (json, regex, choice, grammar, json_object)"
                    ),
                ))
            }
        };
        found.push((format, field));
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Ok((ResponseFormat::Text, top.to_string())),
        _ => Err(ApiError::invalid_param(
            top,
            format!(
                "{top} may hold one constraint, got {}",
                found
                    .iter()
                    .map(|(_, f)| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

impl ConstraintFields {
    /// The one constraint these fields give, with the field it came from; `None` when none is set.
    pub fn format(&self) -> Result<Option<(ResponseFormat, String)>, ApiError> {
        let given = |v: &Option<Value>| v.as_ref().filter(|v| !v.is_null()).cloned();
        let mut found: Vec<(ResponseFormat, String)> = Vec::new();
        if let Some(v) = given(&self.structured_outputs) {
            let (format, field) = structured(&v)?;
            if format != ResponseFormat::Text {
                found.push((format, field));
            }
        }
        let mut one =
            |v: &Option<Value>,
             field: &str,
             make: &dyn Fn(&Value, &str) -> Result<ResponseFormat, ApiError>| {
                if let Some(v) = given(v) {
                    found.push((make(&v, field)?, field.to_string()));
                }
                Ok::<(), ApiError>(())
            };
        one(&self.guided_json, "guided_json", &schema)?;
        one(&self.guided_regex, "guided_regex", &|v, f| {
            Ok(ResponseFormat::Regex {
                pattern: string(v, f)?.to_string(),
            })
        })?;
        one(&self.guided_choice, "guided_choice", &choice)?;
        one(&self.guided_grammar, "guided_grammar", &either_grammar)?;
        one(&self.grammar, "grammar", &|v, f| {
            gbnf_grammar(string(v, f)?, f)
        })?;
        one(&self.json_schema, "json_schema", &schema)?;
        match found.len() {
            0 => Ok(None),
            1 => Ok(found.pop()),
            _ => Err(ApiError::invalid_param(
                found[1].1.clone(),
                format!(
                    "one output constraint at a time: {} are all set",
                    found
                        .iter()
                        .map(|(_, f)| f.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// Sets `request`'s format from these fields (a `response_format` other than text beside one is a 400) and
    /// checks it with the tools; a failure names the field.
    pub fn apply(&self, request: &mut CompletionRequest) -> Result<(), ApiError> {
        let Some((format, field)) = self.format()? else {
            return super::request_fields::check_constraint(request);
        };
        if request.response_format != ResponseFormat::Text {
            return Err(ApiError::invalid_param(
                &field,
                format!("{field} and response_format cannot both be set"),
            ));
        }
        request.response_format = format;
        super::request_fields::check_constraint(request).map_err(|mut e| {
            if e.param.as_deref() == Some("response_format") {
                e.param = Some(field.clone());
                e.message = format!("{field}: {}", e.message);
            }
            e
        })
    }

    /// The format of a raw completion (`/v1/completions`): these fields or `response_format`, checked.
    pub fn raw_format(&self, response_format: ResponseFormat) -> Result<ResponseFormat, ApiError> {
        let mut probe = CompletionRequest {
            response_format,
            ..CompletionRequest::default()
        };
        self.apply(&mut probe)?;
        Ok(probe.response_format)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> ConstraintFields {
        serde_json::from_value(v).unwrap()
    }

    fn format_of(v: Value) -> Result<ResponseFormat, ApiError> {
        fields(v).raw_format(ResponseFormat::Text)
    }

    #[test]
    fn every_name_of_every_constraint_is_read() {
        assert_eq!(
            format_of(json!({"structured_outputs": {"regex": "[0-9]+"}})).unwrap(),
            ResponseFormat::Regex {
                pattern: "[0-9]+".into()
            }
        );
        assert_eq!(
            format_of(json!({"guided_regex": "[0-9]+"})).unwrap(),
            ResponseFormat::Regex {
                pattern: "[0-9]+".into()
            }
        );
        for v in [
            json!({"structured_outputs": {"choice": ["a", "b"]}}),
            json!({"guided_choice": ["a", "b"]}),
        ] {
            assert_eq!(
                format_of(v).unwrap(),
                ResponseFormat::Choice {
                    choices: vec!["a".into(), "b".into()]
                }
            );
        }
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        for (v, name) in [
            (
                json!({"structured_outputs": {"json": schema}}),
                "structured_outputs.json",
            ),
            (json!({"guided_json": schema.to_string()}), "guided_json"),
            (json!({"json_schema": schema}), "json_schema"),
        ] {
            assert!(
                matches!(format_of(v).unwrap(), ResponseFormat::JsonSchema { name: n, schema: s, .. }
                    if n == name && s == close_objects(&schema) && s["additionalProperties"] == false),
                "{name}"
            );
        }
        assert_eq!(
            format_of(
                json!({"structured_outputs": {"json_object": true, "disable_any_whitespace": true}})
            )
            .unwrap(),
            ResponseFormat::JsonObject
        );
        // Lark as it is; GBNF (vLLM's and llama.cpp's) translated.
        assert!(matches!(
            format_of(json!({"guided_grammar": "start: \"yes\" | \"no\"\n"})).unwrap(),
            ResponseFormat::Grammar { lark } if lark.starts_with("start:")
        ));
        for v in [
            json!({"grammar": "root ::= \"yes\" | \"no\""}),
            json!({"structured_outputs": {"grammar": "root ::= \"yes\" | \"no\""}}),
        ] {
            assert!(matches!(
                format_of(v).unwrap(),
                ResponseFormat::Grammar { .. }
            ));
        }
        assert_eq!(
            format_of(json!({"structured_outputs": {}})).unwrap(),
            ResponseFormat::Text
        );
    }

    #[test]
    fn bad_constraints_are_400s_naming_the_field() {
        let param = |v: Value| format_of(v).unwrap_err().param.unwrap_or_default();
        assert_eq!(
            param(json!({"structured_outputs": {"regex": "(unclosed"}})),
            "structured_outputs.regex"
        );
        assert_eq!(param(json!({"guided_regex": 5})), "guided_regex");
        assert_eq!(param(json!({"guided_choice": []})), "guided_choice");
        assert_eq!(
            param(json!({"grammar": "root ::= undefined-rule"})),
            "grammar"
        );
        assert_eq!(
            param(json!({"guided_grammar": "start: nothing_here"})),
            "guided_grammar"
        );
        assert_eq!(param(json!({"guided_json": "{not json"})), "guided_json");
        assert_eq!(
            param(json!({"json_schema": {"type": "strin"}})),
            "json_schema"
        );
        assert_eq!(
            param(json!({"structured_outputs": {"structural_tag": {}}})),
            "structured_outputs.structural_tag"
        );
        assert_eq!(
            param(json!({"structured_outputs": {"regex": "a", "choice": ["a"]}})),
            "structured_outputs"
        );
        assert_eq!(
            param(json!({"guided_regex": "a", "grammar": "root ::= \"a\""})),
            "grammar"
        );
        let with_format = fields(json!({"guided_regex": "a"}))
            .raw_format(ResponseFormat::JsonObject)
            .unwrap_err();
        assert_eq!(with_format.param.as_deref(), Some("guided_regex"));
    }

    #[test]
    fn a_whole_reply_constraint_is_refused_beside_callable_tools() {
        let tool =
            crate::provider::ToolSpec::from_openai(&json!({"type": "function", "function": {
            "name": "f", "parameters": {"type": "object"}}}))
            .unwrap();
        let mut request = CompletionRequest {
            tools: vec![tool],
            ..CompletionRequest::default()
        };
        let e = fields(json!({"guided_choice": ["a"]}))
            .apply(&mut request)
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("guided_choice"), "{}", e.message);
        request.tool_choice = crate::provider::ToolChoice::None;
        request.response_format = ResponseFormat::Text;
        fields(json!({"guided_choice": ["a"]}))
            .apply(&mut request)
            .unwrap();
    }
}
