//! Argument grammars for schemas that use agentd's extensions (`schema::extensions`): the schema is walked and
//! written as Lark rules, in the compact JSON the rest of the grammar uses (`", "`, `": "`, properties in their
//! declared order, no undeclared keys). Every subschema without an extension stays one `%json` rule, so only the
//! path down to an extension is spelled out here:
//!
//! - `x-agentd-substring-of: TEXT` → `"\"" S "\""` where `S: %regex {"substring_chunks": [...]} & /(?s:.+)/`: any
//!   non-empty run of whole chunks (`extensions::substring_chunks`), each JSON-escaped here (llguidance does no
//!   escaping inside a terminal; an escape is never split), the quotes kept outside the terminal (inside, large
//!   files fail to compile);
//! - `x-agentd-enum: [..]` → one JSON string literal of the list;
//! - `x-agentd-pattern: RX` → `"\"" /RX/ & JSON-safe "\""`;
//! - objects: the declared properties in order, optional ones optional, commas placed by a small chain of rules;
//!   arrays: `items` repeated (`minItems` 0 or more); `anyOf`/`oneOf`: alternatives; a string `const`: the literal.

use serde_json::{Map, Value};

use crate::schema::compile::{bound_numbers, close_objects, with_compact_options};
use crate::schema::extensions::{self, ENUM, PATTERN, SUBSTRING_OF};

/// Lark rules for one schema, under a unique name prefix.
pub struct ArgumentRules {
    prefix: String,
    rules: Vec<String>,
    next: usize,
}

/// A JSON string literal as a Lark string literal.
fn lark_literal(json_text: &str) -> String {
    Value::String(json_text.into()).to_string()
}

/// `text` JSON-escaped, without the surrounding quotes.
fn json_escaped(text: &str) -> String {
    let quoted = Value::String(text.into()).to_string();
    quoted[1..quoted.len() - 1].to_string()
}

impl ArgumentRules {
    /// The rules of `schema` under `prefix` (a Lark rule name, lowercase); returns the entry rule's name and
    /// all rules, or `None` when the schema has no extension (use `%json` as usual).
    pub fn compile(schema: &Value, prefix: &str) -> Option<(String, String)> {
        if !extensions::has_extensions(schema) {
            return None;
        }
        let mut me = Self {
            prefix: prefix.to_string(),
            rules: Vec::new(),
            next: 0,
        };
        let body = me.value(schema);
        let entry = format!("{prefix}_args");
        me.rules.insert(0, format!("{entry}: {body}"));
        Some((entry, me.rules.join("\n") + "\n"))
    }

    fn fresh(&mut self, kind: &str) -> String {
        self.next += 1;
        format!("{}_{kind}{}", self.prefix, self.next)
    }

    /// A terminal name (uppercase) for this prefix.
    fn fresh_terminal(&mut self, kind: &str) -> String {
        self.fresh(kind).to_ascii_uppercase()
    }

    /// A rule holding `%json` of `schema` (no extension below it).
    fn json(&mut self, schema: &Value) -> String {
        let name = self.fresh("j");
        let schema = with_compact_options(&bound_numbers(&close_objects(schema)));
        self.rules.push(format!(
            "{name}: %json {}",
            serde_json::to_string(&schema).unwrap_or_else(|_| "{}".into())
        ));
        name
    }

    /// The expression matching one value of `schema`.
    fn value(&mut self, schema: &Value) -> String {
        if !extensions::has_extensions(schema) {
            return self.json(schema);
        }
        let Value::Object(map) = schema else {
            return self.json(schema);
        };
        if let Some(text) = map.get(SUBSTRING_OF).and_then(Value::as_str) {
            let lines = map.get(extensions::SUBSTRING_UNIT).and_then(Value::as_str) == Some("line");
            return self.substring(text, lines);
        }
        if let Some(items) = map.get(ENUM).and_then(Value::as_array) {
            let alts: Vec<String> = items
                .iter()
                .filter_map(Value::as_str)
                .map(|s| lark_literal(&Value::String(s.into()).to_string()))
                .collect();
            return format!("({})", alts.join(" | "));
        }
        if let Some(rx) = map.get(PATTERN).and_then(Value::as_str) {
            let t = self.fresh_terminal("p");
            self.rules.push(format!(
                "{t}: /{}/ & /[^\"\\\\\\x00-\\x1f]*/",
                rx.replace('/', "\\/")
            ));
            return format!("\"\\\"\" {t} \"\\\"\"");
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = map.get(key).and_then(Value::as_array) {
                let alts: Vec<String> = branches
                    .iter()
                    .map(|b| self.value(&merged(map, b, key)))
                    .collect();
                return format!("({})", alts.join(" | "));
            }
        }
        if map.contains_key("properties") {
            return self.object(map);
        }
        if let Some(items) = map.get("items") {
            let item = self.value(items);
            let min = map.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let more = format!("(\", \" {item})*");
            return match min {
                0 => format!("\"[\" ({item} {more})? \"]\""),
                _ => format!("\"[\" {item} {more} \"]\""),
            };
        }
        // An extension in a place this walk does not spell out (e.g. under `not`): plain JSON of the rest.
        self.json(&extensions::strip_extensions(schema))
    }

    fn substring(&mut self, text: &str, lines: bool) -> String {
        let chunks = match lines {
            true => extensions::line_chunks(text),
            false => extensions::substring_chunks(text),
        };
        let chunks: Vec<String> = chunks.into_iter().map(json_escaped).collect();
        let t = self.fresh_terminal("s");
        let spec = serde_json::json!({ "substring_chunks": chunks });
        self.rules.push(format!("{t}: %regex {spec} & /(?s:.+)/"));
        format!("\"\\\"\" {t} \"\\\"\"")
    }

    /// `{` the declared properties in order `}`: required ones always, optional ones if the model writes them,
    /// with `", "` between whatever is written.
    fn object(&mut self, map: &Map<String, Value>) -> String {
        let empty = Map::new();
        let props = map
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let required: Vec<&str> = map
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let members: Vec<(String, bool)> = props
            .iter()
            .map(|(key, sub)| {
                let value = self.value(sub);
                let pair = format!(
                    "{} {value}",
                    lark_literal(&format!("{}: ", Value::String(key.clone())))
                );
                (pair, required.contains(&key.as_str()))
            })
            .collect();
        if members.is_empty() {
            return "\"{}\"".into();
        }
        // after[j]: what may follow once something was written, from member j on; first[j]: from member j on
        // with nothing written yet. Built back to front.
        let n = members.len();
        let mut after: Vec<String> = vec![String::new(); n + 1];
        let mut first: Vec<String> = vec![String::new(); n + 1];
        for j in (0..n).rev() {
            let (pair, req) = &members[j];
            let rest_after = &after[j + 1];
            let a = match req {
                true => format!("\", \" {pair} {rest_after}"),
                false => format!("(\", \" {pair})? {rest_after}"),
            };
            let f = match req {
                true => format!("{pair} {rest_after}"),
                false if first[j + 1].is_empty() => format!("({pair} {rest_after})?"),
                false => format!("({pair} {rest_after} | {})", first[j + 1]),
            };
            let (ra, rf) = (self.fresh("a"), self.fresh("f"));
            self.rules.push(format!("{ra}: {}", a.trim()));
            self.rules.push(format!("{rf}: {}", f.trim()));
            after[j] = ra;
            first[j] = rf;
        }
        format!("\"{{\" {} \"}}\"", first[0])
    }
}

/// A branch of `anyOf`/`oneOf` with the parent's other keywords (its `type`, `properties`) folded in, as JSON
/// Schema applies both.
fn merged(parent: &Map<String, Value>, branch: &Value, key: &str) -> Value {
    let Value::Object(b) = branch else {
        return branch.clone();
    };
    let mut out: Map<String, Value> = parent
        .iter()
        .filter(|(k, _)| k.as_str() != key)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in b {
        out.insert(k.clone(), v.clone());
    }
    Value::Object(out)
}
