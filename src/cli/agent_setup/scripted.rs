//! TEST-ONLY: the scripted provider selected by environment variables, so integration tests can drive the real
//! binary deterministically (`run`, `chat` and `serve`). Not a user feature; nothing else reads these variables.
//!
//! - `AGENTD_SCRIPTED_PROVIDER=FILE.json` replaces the model with [`ScriptedProvider`] playing FILE's replies.
//! - `AGENTD_SCRIPTED_REQUESTS=FILE.jsonl` appends every request the provider receives (a `CompletionRequest`
//!   as one JSON line), so a test can check e.g. the system prompt.
//!
//! FILE is a JSON array of replies, or `{"chunk_chars": 4, "chunk_delay_ms": 0, "context_window": 32768,
//! "replies": [...]}`. A reply is
//! a string (that text) or `{"steps": [STEP, ...], "stop_reason"?: "length"}`; a STEP is one of
//! `{"text": "..."}`, `{"thinking": "..."}`, `{"tool_call": {"name": "read", "arguments": {...} | "raw text",
//! "id"?: "call_1"}}`, `{"delay_ms": 50}`, `{"hang": true}` (until aborted), `{"fail": {"kind": "server",
//! "message": "..."}}`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentd::provider::{
    CompletionRequest, ErrorKind, ModelDescriptor, Provider, ProviderError, ProviderStream,
    ScriptedProvider, ScriptedReply, StopReason, TokenCount,
};
use anyhow::Context as _;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

pub const SCRIPT_ENV: &str = "AGENTD_SCRIPTED_PROVIDER";
pub const REQUESTS_ENV: &str = "AGENTD_SCRIPTED_REQUESTS";

/// The script file, when the test-only variable is set.
pub fn script_path() -> Option<PathBuf> {
    std::env::var_os(SCRIPT_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ScriptFile {
    Replies(Vec<ReplySpec>),
    Full {
        #[serde(default = "default_chunk")]
        chunk_chars: usize,
        #[serde(default)]
        chunk_delay_ms: u64,
        #[serde(default)]
        context_window: Option<u64>,
        replies: Vec<ReplySpec>,
    },
}

fn default_chunk() -> usize {
    4
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ReplySpec {
    Text(String),
    Steps {
        steps: Vec<StepSpec>,
        #[serde(default)]
        stop_reason: Option<StopReason>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum StepSpec {
    Text(String),
    Thinking(String),
    ToolCall {
        name: String,
        arguments: serde_json::Value,
        #[serde(default)]
        id: Option<String>,
    },
    DelayMs(u64),
    Hang(bool),
    Fail {
        kind: ErrorKind,
        message: String,
    },
}

impl ReplySpec {
    fn into_reply(self) -> ScriptedReply {
        match self {
            ReplySpec::Text(t) => ScriptedReply::text_only(t),
            ReplySpec::Steps { steps, stop_reason } => {
                let mut reply = ScriptedReply::new();
                for step in steps {
                    reply = match step {
                        StepSpec::Text(t) => reply.text(t),
                        StepSpec::Thinking(t) => reply.thinking(t),
                        StepSpec::ToolCall {
                            name,
                            arguments,
                            id,
                        } => {
                            let args = match arguments {
                                serde_json::Value::String(raw) => raw,
                                other => other.to_string(),
                            };
                            match id {
                                Some(id) => reply.tool_call_with_id(id, name, args),
                                None => reply.tool_call(name, args),
                            }
                        }
                        StepSpec::DelayMs(ms) => reply.delay(Duration::from_millis(ms)),
                        StepSpec::Hang(true) => reply.hang(),
                        StepSpec::Hang(false) => reply,
                        StepSpec::Fail { kind, message } => reply.fail(kind, message),
                    };
                }
                if let Some(r) = stop_reason {
                    reply = reply.stop_reason(r);
                }
                reply
            }
        }
    }
}

/// Loads the script; wraps the provider in a request recorder when `AGENTD_SCRIPTED_REQUESTS` is set.
pub fn load(path: &Path) -> anyhow::Result<Arc<dyn Provider>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{SCRIPT_ENV}: cannot read {}", path.display()))?;
    let file: ScriptFile = serde_json::from_str(&text)
        .with_context(|| format!("{SCRIPT_ENV}: {} is not a valid script", path.display()))?;
    let (chunk, delay, window, replies) = match file {
        ScriptFile::Replies(r) => (default_chunk(), 0, None, r),
        ScriptFile::Full {
            chunk_chars,
            chunk_delay_ms,
            context_window,
            replies,
        } => (chunk_chars, chunk_delay_ms, context_window, replies),
    };
    let mut provider = ScriptedProvider::with_options(
        replies.into_iter().map(ReplySpec::into_reply),
        chunk,
        Duration::from_millis(delay),
    );
    if let Some(window) = window {
        provider = provider.with_context_window(window);
    }
    match std::env::var_os(REQUESTS_ENV).filter(|v| !v.is_empty()) {
        Some(log) => Ok(Arc::new(Recording {
            inner: provider,
            log: Mutex::new(PathBuf::from(log)),
        })),
        None => Ok(Arc::new(provider)),
    }
}

/// Appends every request to a JSONL file, then delegates.
struct Recording {
    inner: ScriptedProvider,
    log: Mutex<PathBuf>,
}

impl Recording {
    fn record(&self, request: &CompletionRequest) {
        let path = self.log.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let line = match serde_json::to_string(request) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot serialise a scripted request");
                return;
            }
        };
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "cannot record a scripted request");
        }
    }
}

#[async_trait::async_trait]
impl Provider for Recording {
    fn stream(&self, request: CompletionRequest, cancel: CancellationToken) -> ProviderStream {
        self.record(&request);
        self.inner.stream(request, cancel)
    }

    async fn count_tokens(&self, request: &CompletionRequest) -> Result<TokenCount, ProviderError> {
        self.inner.count_tokens(request).await
    }

    fn models(&self) -> Vec<ModelDescriptor> {
        self.inner.models()
    }

    fn wrapped(&self) -> Option<&dyn Provider> {
        Some(&self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_parse_in_both_shapes() {
        let a: ScriptFile = serde_json::from_str(
            r#"["hi", {"steps": [{"text": "x"}, {"tool_call": {"name": "read", "arguments": {"path": "a"}}},
                {"delay_ms": 5}, {"hang": true}, {"fail": {"kind": "server", "message": "m"}}]}]"#,
        )
        .unwrap();
        let ScriptFile::Replies(r) = a else {
            panic!("array form")
        };
        assert_eq!(r.len(), 2);
        let reply = r.into_iter().nth(1).unwrap().into_reply();
        assert_eq!(reply.steps.len(), 5);
        let b: ScriptFile =
            serde_json::from_str(r#"{"chunk_delay_ms": 10, "replies": ["a"]}"#).unwrap();
        assert!(matches!(
            b,
            ScriptFile::Full {
                chunk_chars: 4,
                chunk_delay_ms: 10,
                ..
            }
        ));
    }
}
