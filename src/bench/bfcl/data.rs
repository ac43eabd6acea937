//! BFCL's data files as questions: reading a category file and its `possible_answer/` file (JSON lines, one
//! entry per line), and turning each entry's functions into [`ToolSpec`]s the way BFCL's `convert_to_tool` does
//! for OpenAI-style models (`bfcl_eval/model_handler/utils.py`):
//!
//! - a function name's `.` becomes `_` (OpenAI names must match `^[a-zA-Z0-9_-]{1,64}$`); the expected names
//!   from `possible_answer` get the same mapping;
//! - the parameters object gets `"type": "object"`; every property's type is mapped from BFCL's Python/Java
//!   spelling (`dict` → `object`, `float` → `number`, `tuple` → `array`, `list` → `array`, `bool` → `boolean`,
//!   `long` → `integer`, …), recursively through `properties` and `items`;
//! - descriptions, `required`, `enum`, `default` (and any other keyword) are kept as they are.
//!
//! Differences from BFCL: `any` drops the `type` (BFCL writes `string`, which would make a correct number for an
//! "any" parameter schema-invalid); a float gets no extra `"format": "float"` and no " This is a float type
//! value." after its description (the schema and the description stay as the data set wrote them). An unknown
//! type name becomes `string`, as in BFCL; a property without a `type` stays without one (BFCL writes `string`).
//!
//! An entry whose converted schema [`ToolSpec`] refuses (a keyword the grammar cannot enforce, an `enum` that
//! contradicts its `type`, …) is skipped, and kept with the reason, so the report can count it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::bench::BenchError;
use crate::provider::{Message, ToolSpec};

/// One question: the first turn of a BFCL entry, with its tools converted.
#[derive(Debug, Clone)]
pub struct Question {
    /// BFCL's id (`simple_python_0`).
    pub id: String,
    /// The first turn's system messages, joined by a blank line.
    pub system: Option<String>,
    /// The first turn's user messages.
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    /// The function names of the ground-truth calls (`.` → `_`); empty when the category has no answers.
    pub expected: Vec<String>,
}

/// An entry that could not be asked, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skipped {
    pub id: String,
    pub reason: String,
}

/// The questions of one category (the first `limit` entries of its file).
#[derive(Debug, Clone)]
pub struct Category {
    /// `simple_python`, `multiple`, …
    pub name: String,
    pub questions: Vec<Question>,
    pub skipped: Vec<Skipped>,
    /// The category has a `possible_answer/` file (irrelevance categories have none: no call is right there).
    pub has_answers: bool,
}

/// BFCL's name for a function as an OpenAI tool name: every `.` becomes `_`.
pub fn openai_name(name: &str) -> String {
    name.replace('.', "_")
}

/// The JSON Schema type for a BFCL type name; `None` for `any` (no type constraint).
fn json_type(bfcl: &str) -> Option<&'static str> {
    Some(match bfcl {
        "integer" | "byte" | "short" | "long" | "Bigint" => "integer",
        "number" | "float" | "double" => "number",
        "boolean" | "bool" | "Boolean" => "boolean",
        "array" | "list" | "tuple" | "ArrayList" | "Array" | "Queue" | "Stack" => "array",
        "dict" | "object" | "HashMap" | "Hashtable" => "object",
        "any" | "Any" => return None,
        // "string", "String", "char" and every name BFCL does not know.
        _ => "string",
    })
}

/// Maps the `type` of one schema node (see the module docs) and recurses into its `properties` and `items`.
pub fn convert_schema(node: &mut Value) {
    let Value::Object(map) = node else {
        return;
    };
    if let Some(Value::String(t)) = map.get("type") {
        match json_type(t) {
            Some(mapped) => {
                map.insert("type".into(), mapped.into());
            }
            None => {
                map.remove("type");
            }
        }
    }
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for sub in props.values_mut() {
            convert_schema(sub);
        }
    }
    match map.get_mut("items") {
        Some(Value::Array(items)) => items.iter_mut().for_each(convert_schema),
        Some(items) => convert_schema(items),
        None => {}
    }
}

/// One BFCL function as a validated [`ToolSpec`]; `Err` says why agentd refuses it.
pub fn convert_function(function: &Value) -> Result<ToolSpec, String> {
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .ok_or("a function has no `name`")?;
    let description = function
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut parameters = match function.get("parameters") {
        Some(Value::Object(p)) => Value::Object(p.clone()),
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(other) => return Err(format!("`{name}`: parameters are not an object: {other}")),
    };
    convert_schema(&mut parameters);
    if let Value::Object(map) = &mut parameters {
        map.insert("type".into(), "object".into());
        map.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
    }
    ToolSpec::new(openai_name(name), description, parameters).map_err(|e| e.to_string())
}

/// The first turn of `entry` as a question, or why it cannot be asked. `expected` comes from the answers.
fn question(entry: &Value, id: &str, expected: Vec<String>) -> Result<Question, String> {
    let functions = entry
        .get("function")
        .and_then(Value::as_array)
        .filter(|f| !f.is_empty())
        .ok_or("no `function` list (multi-turn entries keep theirs elsewhere)")?;
    let turn = entry
        .pointer("/question/0")
        .and_then(Value::as_array)
        .ok_or("no first turn in `question`")?;
    let mut system = Vec::new();
    let mut messages = Vec::new();
    for m in turn {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        let content = m.get("content").and_then(Value::as_str).unwrap_or_default();
        match role {
            "system" => system.push(content.to_string()),
            "user" => messages.push(Message::user(content)),
            other => return Err(format!("the first turn has a `{other}` message")),
        }
    }
    if messages.is_empty() {
        return Err("the first turn has no user message".into());
    }
    let tools = functions
        .iter()
        .map(convert_function)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Question {
        id: id.to_string(),
        system: (!system.is_empty()).then(|| system.join("\n\n")),
        messages,
        tools,
        expected,
    })
}

/// Parses JSON lines; `what` names the file in errors.
fn json_lines(text: &str, what: &str) -> Result<Vec<Value>, BenchError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str(line).map_err(|e| BenchError::Dataset {
                path: what.to_string(),
                message: format!("line {}: {e}", i + 1),
            })
        })
        .collect()
}

/// The function names of each id's ground-truth calls, `.` → `_`.
fn expected_names(answers: &[Value]) -> HashMap<String, Vec<String>> {
    answers
        .iter()
        .filter_map(|a| {
            let id = a.get("id")?.as_str()?.to_string();
            let names = a
                .get("ground_truth")?
                .as_array()?
                .iter()
                .filter_map(Value::as_object)
                .flat_map(|call| call.keys().map(|k| openai_name(k)))
                .collect();
            Some((id, names))
        })
        .collect()
}

/// The first `limit` entries of a category from the text of its file and, when it has one, of its
/// `possible_answer` file. `name` is the category; `what` names the files in errors.
pub fn parse_category(
    name: &str,
    questions: &str,
    answers: Option<&str>,
    limit: Option<usize>,
    what: &str,
) -> Result<Category, BenchError> {
    let entries = json_lines(questions, what)?;
    let answers = answers
        .map(|text| json_lines(text, &format!("{what} (possible_answer)")))
        .transpose()?
        .map(|a| expected_names(&a));
    let mut category = Category {
        name: name.to_string(),
        questions: Vec::new(),
        skipped: Vec::new(),
        has_answers: answers.is_some(),
    };
    for (i, entry) in entries.iter().take(limit.unwrap_or(usize::MAX)).enumerate() {
        let id = entry
            .get("id")
            .and_then(Value::as_str)
            .map_or_else(|| format!("{name} line {}", i + 1), str::to_string);
        let expected = match &answers {
            None => Ok(Vec::new()),
            Some(a) => a
                .get(&id)
                .filter(|names| !names.is_empty())
                .cloned()
                .ok_or_else(|| "no ground truth in possible_answer".to_string()),
        };
        match expected.and_then(|expected| question(entry, &id, expected)) {
            Ok(q) => category.questions.push(q),
            Err(reason) => category.skipped.push(Skipped { id, reason }),
        }
    }
    Ok(category)
}

/// The file of `category` in `dir`: `BFCL_v<N>_<category>.json`, the highest `N` when there are several.
/// `dir` is BFCL's `data/` folder, or a folder holding `bfcl_eval/data/` (the unzipped wheel).
pub fn category_file(dir: &Path, category: &str) -> Result<PathBuf, BenchError> {
    let wheel = dir.join("bfcl_eval").join("data");
    let dir = if wheel.is_dir() {
        wheel
    } else {
        dir.to_path_buf()
    };
    let read = std::fs::read_dir(&dir).map_err(|e| BenchError::Dataset {
        path: dir.display().to_string(),
        message: e.to_string(),
    })?;
    let suffix = format!("_{category}.json");
    let best = read
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let file = e.file_name().into_string().ok()?;
            let version: u32 = file
                .strip_prefix("BFCL_v")?
                .strip_suffix(&suffix)?
                .parse()
                .ok()?;
            Some((version, e.path()))
        })
        .max_by_key(|(version, _)| *version);
    best.map(|(_, path)| path).ok_or_else(|| BenchError::Dataset {
        path: dir.display().to_string(),
        message: format!(
            "no BFCL_v*{suffix} here (give --data the wheel's bfcl_eval/data folder; categories are file \
             names like simple_python, multiple, parallel, live_simple)"
        ),
    })
}

/// Reads category `name` from `dir` (see [`category_file`]) and its `possible_answer/` file when there is one.
pub fn load_category(dir: &Path, name: &str, limit: Option<usize>) -> Result<Category, BenchError> {
    let path = category_file(dir, name)?;
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| BenchError::Dataset {
            path: p.display().to_string(),
            message: e.to_string(),
        })
    };
    let questions = read(&path)?;
    let answer_path = path
        .parent()
        .zip(path.file_name())
        .map(|(parent, file)| parent.join("possible_answer").join(file));
    let answers = match answer_path {
        Some(p) if p.is_file() => Some(read(&p)?),
        _ => None,
    };
    parse_category(
        name,
        &questions,
        answers.as_deref(),
        limit,
        &path.display().to_string(),
    )
}
