//! JSON Schema admission: every schema that reaches the grammar (a tool's `parameters`, a `response_format`
//! schema) is checked here first, so that what the grammar enforces is exactly what a validator accepts.
//!
//! The checks, in order: the schema is a valid schema (the `jsonschema` crate compiles it; remote `$ref`s are
//! never fetched); it uses no keyword or `format` that llguidance cannot enforce exactly (named with its
//! location); llguidance compiles it (a contradiction is an empty language). Also here: the compact-whitespace
//! options every schema is compiled with, and validating a document against a schema.

use serde_json::{Map, Value};

use super::{Result, SchemaError};

/// Keywords JSON Schema defines but grammar-constrained decoding does not enforce. llguidance refuses most of
/// them itself; listing them here lets the error name the location. A `response_format` schema or a `strict` tool
/// that uses one is refused (ignoring it would let the model produce documents the schema forbids); a tool that is
/// not strict has them left out of its grammar ([`relax`]) and its calls validated afterwards.
pub const UNSUPPORTED_KEYWORDS: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "dependencies",
    "dependentSchemas",
    "dependentRequired",
    "propertyNames",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
    "$recursiveAnchor",
    "contentSchema",
];

/// `format` values the grammar enforces and the validator checks the same way. Any other format is rejected
/// (llguidance has no grammar for it, or its grammar and the validator disagree).
pub const SUPPORTED_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
    "uri",
];

/// Keys whose value is one subschema.
const SCHEMA_KEYS: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "contains",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentSchema",
];

/// Keys whose value is a map from names to subschemas.
const SCHEMA_MAP_KEYS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// Keys whose value is an array of subschemas.
const SCHEMA_ARRAY_KEYS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];

/// The `x-guidance` options every schema is compiled with: no free whitespace, `", "` and `": "` separators (the
/// way the chat templates print JSON), so the model samples fewer tokens and many are forced.
pub fn compact_options() -> Value {
    serde_json::json!({
        "whitespace_flexible": false,
        "item_separator": ", ",
        "key_separator": ": ",
    })
}

/// `schema` with the compact options set (a boolean `true` becomes `{}`; an `x-guidance` given by the caller is
/// replaced).
pub fn with_compact_options(schema: &Value) -> Value {
    let mut map = match schema {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    map.insert("x-guidance".into(), compact_options());
    Value::Object(map)
}

/// Tool arguments are generated without keys their schema does not declare (as llama.cpp and OpenAI's strict
/// mode do): every object schema that declares `properties` but says nothing about other keys gets
/// `"additionalProperties": false`. Only nodes reached through `properties`, `items`, `prefixItems` and
/// `additionalProperties` are changed, and nothing under `allOf`/`anyOf`/`oneOf`/`$ref`/`not`/`if`, so the generated
/// language is a subset of the schema's: every call still validates against the original schema.
pub fn close_objects(schema: &Value) -> Value {
    let mut out = schema.clone();
    close_in_place(&mut out);
    out
}

fn close_in_place(node: &mut Value) {
    let Value::Object(map) = node else {
        return;
    };
    const COMBINATORS: &[&str] = &[
        "allOf", "anyOf", "oneOf", "$ref", "not", "if", "then", "else",
    ];
    if COMBINATORS.iter().any(|k| map.contains_key(*k)) {
        return;
    }
    let open = [
        "additionalProperties",
        "patternProperties",
        "unevaluatedProperties",
    ]
    .iter()
    .all(|k| !map.contains_key(*k));
    if open && map.contains_key("properties") {
        map.insert("additionalProperties".into(), Value::Bool(false));
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        props.values_mut().for_each(close_in_place);
    }
    match map.get_mut("items") {
        Some(Value::Array(items)) => items.iter_mut().for_each(close_in_place),
        Some(item) => close_in_place(item),
        None => {}
    }
    if let Some(Value::Array(items)) = map.get_mut("prefixItems") {
        items.iter_mut().for_each(close_in_place);
    }
    if let Some(extra @ Value::Object(_)) = map.get_mut("additionalProperties") {
        close_in_place(extra);
    }
}

/// The largest integer a generated argument may hold (JavaScript's `Number.MAX_SAFE_INTEGER`: beyond it a JSON
/// number loses precision in most clients anyway).
pub const MAX_GENERATED_INTEGER: i64 = 9_007_199_254_740_991;
/// The magnitude bound of a generated non-integer number (16 integer digits at most).
pub const MAX_GENERATED_NUMBER: f64 = 1e15;

/// Generated numbers have a bounded number of digits: every `integer` or `number` node that says nothing about one
/// side of its range gets [`MAX_GENERATED_INTEGER`] / [`MAX_GENERATED_NUMBER`] there. Without it the grammar
/// allows digits forever, and a small model that starts repeating a digit (`"yield_time_ms": 1000000…`) keeps on
/// until `max_tokens`, which for a client that sends none is the rest of the context. Only narrows: nothing under `not`, `if`,
/// `then` or `else` is touched, so every generated document still validates against the original schema.
pub fn bound_numbers(schema: &Value) -> Value {
    let mut out = schema.clone();
    bound_in_place(&mut out);
    out
}

fn bound_in_place(node: &mut Value) {
    let Value::Object(map) = node else {
        return;
    };
    let types: Vec<&str> = match map.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let numeric = types.iter().any(|t| *t == "integer" || *t == "number");
    if numeric && !map.contains_key("enum") && !map.contains_key("const") {
        let (low, high) = if types.contains(&"number") {
            (
                Value::from(-MAX_GENERATED_NUMBER),
                Value::from(MAX_GENERATED_NUMBER),
            )
        } else {
            (
                Value::from(-MAX_GENERATED_INTEGER),
                Value::from(MAX_GENERATED_INTEGER),
            )
        };
        let bound = high.as_f64().unwrap_or(f64::MAX);
        let given = |keys: [&str; 2]| {
            keys.iter()
                .find_map(|k| map.get(*k).and_then(Value::as_f64))
        };
        let unset = |keys: [&str; 2]| keys.iter().all(|k| !map.contains_key(*k));
        let (lows, highs) = (
            ["minimum", "exclusiveMinimum"],
            ["maximum", "exclusiveMaximum"],
        );
        // A side the schema already puts beyond the bound stays open (bounding it would empty the language).
        let add_low = unset(lows) && given(highs).is_none_or(|h| h > -bound);
        let add_high = unset(highs) && given(lows).is_none_or(|l| l < bound);
        if add_low {
            map.insert("minimum".into(), low);
        }
        if add_high {
            map.insert("maximum".into(), high);
        }
    }
    for key in ["properties", "$defs", "definitions", "patternProperties"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            children.values_mut().for_each(bound_in_place);
        }
    }
    for key in ["items", "additionalProperties", "additionalItems"] {
        match map.get_mut(key) {
            Some(Value::Array(items)) => items.iter_mut().for_each(bound_in_place),
            Some(item @ Value::Object(_)) => bound_in_place(item),
            _ => {}
        }
    }
    for key in ["prefixItems", "anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(items)) = map.get_mut(key) {
            items.iter_mut().for_each(bound_in_place);
        }
    }
}

/// Serializes a document the way the compact grammar prints it (`", "` and `": "`, no other whitespace).
pub fn to_compact_string(value: &Value) -> String {
    let mut out = String::new();
    write_compact(value, &mut out);
    out
}

fn write_compact(value: &Value, out: &mut String) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_compact(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push_str(": ");
                write_compact(v, out);
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Runs every admission check on `schema`; `what` names it in errors (`tool "read"`, `response_format`).
pub fn check(schema: &Value, what: &str) -> Result<()> {
    match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => {
            return Err(SchemaError::EmptyLanguage {
                what: what.into(),
                message: "the schema is `false`".into(),
            })
        }
        Value::Object(_) => {}
        other => {
            return Err(SchemaError::InvalidSchema {
                location: String::new(),
                message: format!(
                    "{what}: a schema must be an object or a boolean, not {}",
                    json_kind(other)
                ),
            })
        }
    }
    validator(schema)?;
    find_unsupported(schema, "")?;
    compile_standalone(schema, what)
}

/// Compiles `schema` with the `jsonschema` crate: meta-schema validation first (an error names the location in
/// the schema), formats checked, remote references refused.
pub fn validator(schema: &Value) -> Result<jsonschema::Validator> {
    if let Err(e) = jsonschema::meta::validate(schema) {
        return Err(SchemaError::InvalidSchema {
            location: pointer_or_root(e.instance_path.as_str()),
            message: e.to_string(),
        });
    }
    jsonschema::options()
        .should_validate_formats(true)
        .with_retriever(NoRemoteRefs)
        .build(schema)
        .map_err(|e| SchemaError::InvalidSchema {
            location: pointer_or_root(e.schema_path.as_str()),
            message: e.to_string(),
        })
}

/// Every way `instance` violates the schema, as `"/path: message"` (`/` is the document root).
pub fn violations(validator: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    validator
        .iter_errors(instance)
        .map(|e| format!("{}: {}", pointer_or_root(e.instance_path.as_str()), e))
        .collect()
}

/// Refuses every `$ref` outside the schema: compiling a schema must never touch the network or the disk.
struct NoRemoteRefs;

impl jsonschema::Retrieve for NoRemoteRefs {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> std::result::Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!("remote $ref `{}` is not allowed", uri.as_str()).into())
    }
}

/// Walks every subschema and rejects the first unsupported keyword or format, naming its JSON pointer.
fn find_unsupported(schema: &Value, at: &str) -> Result<()> {
    let Value::Object(map) = schema else {
        return Ok(());
    };
    for (key, value) in map {
        let here = format!("{at}/{}", escape_pointer(key));
        if UNSUPPORTED_KEYWORDS.contains(&key.as_str()) {
            return Err(SchemaError::UnsupportedSchemaKeyword {
                keyword: key.clone(),
                location: here,
            });
        }
        // A format only constrains strings: on a number (schemars writes `uint32`, `double`) it is an annotation.
        if key == "format" && may_be_string(map) {
            if let Some(name) = value.as_str() {
                if !SUPPORTED_FORMATS.contains(&name) {
                    return Err(SchemaError::UnsupportedSchemaKeyword {
                        keyword: format!("format: {name}"),
                        location: here,
                    });
                }
            }
        }
        if SCHEMA_KEYS.contains(&key.as_str()) {
            find_unsupported(value, &here)?;
        } else if SCHEMA_MAP_KEYS.contains(&key.as_str()) {
            if let Value::Object(entries) = value {
                for (name, sub) in entries {
                    find_unsupported(sub, &format!("{here}/{}", escape_pointer(name)))?;
                }
            }
        } else if SCHEMA_ARRAY_KEYS.contains(&key.as_str()) || key == "items" {
            match value {
                Value::Array(items) => {
                    for (i, sub) in items.iter().enumerate() {
                        find_unsupported(sub, &format!("{here}/{i}"))?;
                    }
                }
                other => find_unsupported(other, &here)?,
            }
        }
    }
    Ok(())
}

/// `schema` without the keywords and string formats constrained decoding cannot enforce ([`UNSUPPORTED_KEYWORDS`],
/// formats outside [`SUPPORTED_FORMATS`]), or `None` when it has none. Dropping one only widens the language: the
/// grammar of the relaxed schema accepts every document the original accepts, and some it does not — what
/// llama.cpp and vLLM do with every tool schema. Used for tools that are not `strict` (the schemas real clients
/// send use `propertyNames`, `uniqueItems`, `format: uri-reference`…); the caller still validates calls against
/// the original.
pub fn relax(schema: &Value) -> Option<Value> {
    let mut out = schema.clone();
    relax_in_place(&mut out).then_some(out)
}

/// Removes unsupported keywords and formats under `node`; whether anything was removed.
fn relax_in_place(node: &mut Value) -> bool {
    let Value::Object(map) = node else {
        return false;
    };
    let before = map.len();
    map.retain(|key, _| !UNSUPPORTED_KEYWORDS.contains(&key.as_str()));
    let bad_format = map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|name| !SUPPORTED_FORMATS.contains(&name));
    if bad_format && may_be_string(map) {
        map.remove("format");
    }
    let mut changed = map.len() != before;
    for (key, value) in map.iter_mut() {
        if SCHEMA_KEYS.contains(&key.as_str()) {
            changed |= relax_in_place(value);
        } else if SCHEMA_MAP_KEYS.contains(&key.as_str()) {
            if let Value::Object(entries) = value {
                for sub in entries.values_mut() {
                    changed |= relax_in_place(sub);
                }
            }
        } else if SCHEMA_ARRAY_KEYS.contains(&key.as_str()) || key == "items" {
            match value {
                Value::Array(items) => {
                    for sub in items.iter_mut() {
                        changed |= relax_in_place(sub);
                    }
                }
                other => changed |= relax_in_place(other),
            }
        }
    }
    changed
}

/// Whether a schema object's `type` allows strings (no `type` allows everything).
fn may_be_string(map: &Map<String, Value>) -> bool {
    match map.get("type") {
        None => true,
        Some(Value::String(t)) => t == "string",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
        Some(_) => true,
    }
}

/// Compiles the schema with llguidance alone (no tokenizer), with the options the request will use.
fn compile_standalone(schema: &Value, what: &str) -> Result<()> {
    let options: llguidance::JsonCompileOptions = serde_json::from_value(compact_options())
        .map_err(|e| {
            SchemaError::Internal(format!("compact JSON options do not deserialize: {e}"))
        })?;
    let builder = llguidance::GrammarBuilder::new(None, llguidance::api::ParserLimits::default());
    match options.json_to_llg(builder, schema.clone()) {
        Ok(_) => Ok(()),
        Err(e) => Err(classify_llguidance_error(&format!("{e:#}"), what)),
    }
}

/// Turns an llguidance compile error into the most specific engine error: an unsupported keyword or format, an
/// empty language, or a grammar error with llguidance's message.
pub fn classify_llguidance_error(message: &str, what: &str) -> SchemaError {
    if let Some(rest) = message.split("Unimplemented keys: ").nth(1) {
        let keyword = rest
            .split(['"', '[', ']', ','])
            .find(|s| !s.trim().is_empty())
            .unwrap_or(rest)
            .trim()
            .to_string();
        return SchemaError::UnsupportedSchemaKeyword {
            keyword,
            location: what.into(),
        };
    }
    if let Some(rest) = message.split("Unknown format: ").nth(1) {
        let name = rest.split_whitespace().next().unwrap_or(rest);
        return SchemaError::UnsupportedSchemaKeyword {
            keyword: format!("format: {name}"),
            location: what.into(),
        };
    }
    // llguidance enforces these only in their decidable forms; anything else is refused, named by keyword.
    for (needle, keyword, why) in [
        (
            "oneOf constraints are not supported",
            "oneOf",
            "branches that can match the same document",
        ),
        (
            "patternProperty regexes",
            "patternProperties",
            "patterns that can match the same key",
        ),
        (
            "Unable to determine if regex is empty",
            "pattern",
            "a pattern combination too complex to decide",
        ),
    ] {
        if message.contains(needle) {
            return SchemaError::UnsupportedSchemaKeyword {
                keyword: keyword.into(),
                location: format!("{what}, {why}"),
            };
        }
    }
    if message.contains("Unsatisfiable schema") {
        return SchemaError::EmptyLanguage {
            what: what.into(),
            message: first_line(message),
        };
    }
    SchemaError::InvalidGrammar(format!("{what}: {}", first_line(message)))
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or(s).to_string()
}

fn pointer_or_root(p: &str) -> String {
    if p.is_empty() {
        "/".into()
    } else {
        p.into()
    }
}

/// RFC 6901 escaping of one pointer segment.
fn escape_pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn closing_objects_stops_at_combinators() {
        let s = json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"x": {"type": "string"}}},
            "b": {"anyOf": [{"properties": {"y": {}}}]},
            "c": {"type": "array", "items": {"properties": {"z": {}}}},
            "d": {"type": "object", "properties": {}, "patternProperties": {"^x": {}}}}});
        let c = close_objects(&s);
        assert_eq!(c["additionalProperties"], false);
        assert_eq!(c["properties"]["a"]["additionalProperties"], false);
        assert!(c["properties"]["b"]["anyOf"][0]
            .get("additionalProperties")
            .is_none());
        assert_eq!(c["properties"]["c"]["items"]["additionalProperties"], false);
        assert!(c["properties"]["d"].get("additionalProperties").is_none());
    }

    #[test]
    fn generated_numbers_are_bounded_where_the_schema_leaves_them_open() {
        let s = json!({"type": "object", "properties": {
            "n": {"type": "integer"},
            "x": {"type": ["number", "null"]},
            "low": {"type": "integer", "minimum": 1},
            "far": {"type": "number", "minimum": 1e16},
            "pick": {"type": "integer", "enum": [1, 2]},
            "list": {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "string"}]}},
            "neg": {"not": {"type": "integer"}}},
            "$defs": {"d": {"type": "number", "exclusiveMaximum": 5}}});
        let b = bound_numbers(&s);
        let p = &b["properties"];
        let big = MAX_GENERATED_INTEGER;
        assert_eq!(
            (p["n"]["minimum"].clone(), p["n"]["maximum"].clone()),
            (json!(-big), json!(big))
        );
        assert_eq!(p["x"]["maximum"], json!(MAX_GENERATED_NUMBER));
        assert_eq!(
            (p["low"]["minimum"].clone(), p["low"]["maximum"].clone()),
            (json!(1), json!(big))
        );
        // Beyond the bound already: left open, not emptied.
        assert!(p["far"].get("maximum").is_none());
        assert!(p["pick"].get("maximum").is_none());
        assert_eq!(p["list"]["items"]["anyOf"][0]["maximum"], json!(big));
        // Under `not` a bound would widen the language: untouched.
        assert!(p["neg"]["not"].get("maximum").is_none());
        assert!(b["$defs"]["d"].get("maximum").is_none());
        assert_eq!(b["$defs"]["d"]["minimum"], json!(-MAX_GENERATED_NUMBER));
        // Still a schema llguidance compiles, and a subset of the original's language.
        let mut enforceable = b.clone();
        enforceable["properties"]
            .as_object_mut()
            .unwrap()
            .remove("neg");
        compile_standalone(&enforceable, "bounded").unwrap();
        let original = validator(&s).unwrap();
        assert!(violations(&original, &json!({"n": big, "x": 0.5, "low": 3})).is_empty());
    }

    #[test]
    fn compact_serialization_matches_template_json() {
        let v = json!({"a": [1, "x"], "b": {"c": null}});
        assert_eq!(
            to_compact_string(&v),
            r#"{"a": [1, "x"], "b": {"c": null}}"#
        );
    }

    #[test]
    fn unsupported_keyword_is_named_with_its_location() {
        let s = json!({"type": "object", "properties": {"a": {"not": {"type": "string"}}}});
        match check(&s, "test") {
            Err(SchemaError::UnsupportedSchemaKeyword { keyword, location }) => {
                assert_eq!(keyword, "not");
                assert_eq!(location, "/properties/a/not");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn relaxing_drops_only_what_cannot_be_enforced() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "tags": {"type": "array", "items": {"type": "string", "format": "uri-reference"}, "uniqueItems": true},
                "meta": {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}},
                "port": {"type": "integer", "format": "uint16", "minimum": 1},
                "when": {"type": "string", "format": "date"}
            },
            "required": ["tags"]
        });
        let relaxed = relax(&schema).unwrap();
        assert_eq!(
            relaxed,
            serde_json::json!({
                "type": "object",
                "properties": {
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "meta": {"type": "object"},
                    "port": {"type": "integer", "format": "uint16", "minimum": 1},
                    "when": {"type": "string", "format": "date"}
                },
                "required": ["tags"]
            })
        );
        check(&relaxed, "t").unwrap();
        assert!(check(&schema, "t").is_err());
        assert_eq!(relax(&relaxed), None);
    }

    #[test]
    fn unknown_format_is_rejected() {
        let s = json!({"type": "string", "format": "ipv5"});
        assert!(matches!(
            check(&s, "test"),
            Err(SchemaError::UnsupportedSchemaKeyword { keyword, .. }) if keyword == "format: ipv5"
        ));
    }

    #[test]
    fn invalid_schema_names_location() {
        let s = json!({"type": "object", "properties": {"a": {"type": "strnig"}}});
        match check(&s, "test") {
            Err(SchemaError::InvalidSchema { location, .. }) => {
                assert!(location.contains("/properties/a"), "{location}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn contradictions_are_empty_languages() {
        assert!(matches!(
            check(&json!(false), "t"),
            Err(SchemaError::EmptyLanguage { .. })
        ));
        let s = json!({"type": "object", "properties": {"a": false}, "required": ["a"]});
        assert!(matches!(
            check(&s, "t"),
            Err(SchemaError::EmptyLanguage { .. })
        ));
    }

    #[test]
    fn remote_refs_are_refused() {
        let s = json!({"$ref": "http://127.0.0.1:9/schema.json"});
        assert!(check(&s, "t").is_err());
    }
}
