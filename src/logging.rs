//! Structured logs: `tracing` events written as JSON lines (or plain text) to stderr or a file.
//!
//! The events the rest of the crate emits, by name (`"event"` in the JSON line), with their fields:
//! - `llm.request_start {session_id, model, messages, tools}` and `llm.request_end {session_id, model,
//!   tokens {prompt, completion, cached}, latency_ms, stop_reason}` — the agent loop, once per model call;
//! - `tool.before_invoke {session_id, tool, call_id}` and `tool.after_invoke {session_id, tool, call_id,
//!   duration_ms, is_error}` — around every tool execution;
//! - `session.start {session_id, path, cwd, resumed, entries}` and `session.end {session_id, path, entries}` —
//!   when a session store opens and closes;
//! - `compaction {session_id, reason, tokens_before, tokens_after, first_kept, dropped_messages, summarized}`;
//! - `cache.hit` / `cache.miss` / `cache.store` `{model, key}` — the response cache.
//!
//! Field names with dots nest: `tokens.prompt = 5` becomes `"tokens": {"prompt": 5}`. Each line also has
//! `timestamp`, `level` and `target`; events without a name carry their `message`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// Where logs go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    Stderr,
    /// Appended to this file (created with its folder if needed).
    File(PathBuf),
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// The log file could not be opened. Fix the path or its permissions.
    #[error("cannot open the log file {}: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A global subscriber was already installed (call `init` once, at startup).
    #[error("logging is already initialised: {0}")]
    AlreadySet(String),
}

/// Installs the global subscriber: JSON lines (`json`) or plain text, to `target`, filtered by `RUST_LOG`
/// (default `info`).
pub fn init(target: LogTarget, json: bool) -> Result<(), LoggingError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let result = match target {
        LogTarget::Stderr => install(filter, std::io::stderr, json),
        LogTarget::File(path) => install(filter, Mutex::new(open(&path)?), json),
    };
    result.map_err(|e| LoggingError::AlreadySet(e.to_string()))
}

fn open(path: &Path) -> Result<std::fs::File, LoggingError> {
    let err = |source| LoggingError::Open {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(err)
}

fn install<W>(
    filter: EnvFilter,
    writer: W,
    json: bool,
) -> Result<(), tracing_subscriber::util::TryInitError>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    if json {
        Registry::default()
            .with(filter)
            .with(JsonLines::new(writer))
            .try_init()
    } else {
        Registry::default()
            .with(filter)
            .with(tracing_subscriber::fmt::layer().with_writer(writer))
            .try_init()
    }
}

/// A subscriber writing every event (no filter) as JSON lines to `writer`: for tests and for embedding
/// (`tracing::subscriber::set_default(logging::json_subscriber(w))`).
pub fn json_subscriber<W>(writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    Registry::default().with(JsonLines::new(writer))
}

/// The layer that writes one JSON object per event.
pub struct JsonLines<W> {
    writer: W,
}

impl<W> JsonLines<W> {
    pub fn new(writer: W) -> Self {
        Self { writer }
    }
}

impl<S, W> Layer<S> for JsonLines<W>
where
    S: Subscriber,
    W: for<'a> MakeWriter<'a> + 'static,
{
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::from(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        );
        line.insert("level".into(), Value::from(meta.level().as_str()));
        line.insert("target".into(), Value::from(meta.target()));
        // Unnamed events are called "event file:line" by tracing; only explicit names are ours.
        if !meta.name().starts_with("event ") {
            line.insert("event".into(), Value::from(meta.name()));
        }
        for (key, value) in fields.0 {
            insert_nested(&mut line, &key, value);
        }
        let mut text = Value::Object(line).to_string();
        text.push('\n');
        let _ = self.writer.make_writer().write_all(text.as_bytes());
    }
}

/// `a.b.c = v` → `{"a": {"b": {"c": v}}}` (a plain value already at `a` is kept under `a._`).
fn insert_nested(map: &mut Map<String, Value>, key: &str, value: Value) {
    match key.split_once('.') {
        None => {
            map.insert(key.to_string(), value);
        }
        Some((head, rest)) => {
            let slot = map
                .entry(head.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                let old = slot.take();
                let mut m = Map::new();
                m.insert("_".into(), old);
                *slot = Value::Object(m);
            }
            if let Value::Object(inner) = slot {
                insert_nested(inner, rest, value);
            }
        }
    }
}

#[derive(Default)]
struct Fields(Vec<(String, Value)>);

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.push((field.name().into(), Value::from(value)));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.push((field.name().into(), Value::from(value)));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.push((field.name().into(), Value::from(value)));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.push((field.name().into(), Value::from(value)));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().into(), Value::from(value)));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .push((field.name().into(), Value::from(value.to_string())));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .push((field.name().into(), Value::from(format!("{value:?}"))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dotted_keys_nest() {
        let mut m = Map::new();
        insert_nested(&mut m, "tokens.prompt", json!(3));
        insert_nested(&mut m, "tokens.completion", json!(4));
        insert_nested(&mut m, "model", json!("x"));
        assert_eq!(
            Value::Object(m),
            json!({"tokens": {"prompt": 3, "completion": 4}, "model": "x"})
        );
    }
}
