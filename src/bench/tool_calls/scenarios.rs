//! The workloads of `agentd bench tool-calls` (the copy-heavy `edit`, `rewrite` and the `chat` control are in
//! [`super::copy_heavy`]), each run as "units" (one request, or one agent session):
//!
//! - `forced`: the llama.cpp anchor's request (`../shared/refbench/server_probe.py`): system "You are a helpful
//!   assistant.", user "What's the weather like in Paris today?", one `get_weather` tool, `tool_choice` naming it,
//!   greedy, 128 tokens at most. A random nonce opens the system message (as the anchor's "cold" rows), so no
//!   server can answer from a cached prompt prefix unless `--warm` is given.
//! - `auto`: `tool_choice: auto` over agentd's coding tools (read, write, edit, bash, ls, find, grep), with a
//!   request that suggests one of them (five prompts, taken in turn); a reply without a call is allowed.
//! - `agent`: a scripted 10-turn coding session in a temporary copy of a small fixture project. Every turn names
//!   the tool to call (so the call is deterministic), then appends to the transcript the scripted call and the
//!   REAL result of running it with agentd's tools, so the prompt grows turn by turn exactly as an agent's does.
//!   The model's own call is what is timed and validated; the transcript records the scripted call so every
//!   endpoint and every repetition sees the same prompts. The session id goes in OpenAI's `user` field, which
//!   agentd's server uses as its KV-prefix cache key.

use std::path::Path;

use serde::Serialize;
use serde_json::{json, Value};

use crate::bench::{request_body, BenchError, ChatClient, RequestSample};
use crate::provider::{
    estimate_tokens, AssistantMessage, CompletionRequest, ContentBlock, Message, Sampling,
    ToolCall, ToolChoice, ToolSpec,
};
use crate::tools::registry::ToolRegistry;
use crate::tools::tool::ToolContext;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// One named tool call on a short prompt (the llama.cpp anchor's request).
    Forced,
    /// tool_choice auto over the coding tools.
    Auto,
    /// A scripted 10-turn coding session whose transcript grows with real tool results.
    Agent,
    /// One SEARCH/REPLACE block quoting a 16-line block of the file in the prompt (copy-heavy).
    Edit,
    /// The whole file in the prompt rewritten in a fenced block (copy-heavy).
    Rewrite,
    /// Open-ended text, no tools (copies nothing).
    Chat,
}

impl Scenario {
    /// Every request must produce a call (a named `tool_choice`).
    pub fn call_expected(self) -> bool {
        matches!(self, Scenario::Forced | Scenario::Agent)
    }

    /// The reply budget when `--max-tokens` is not given: room for a whole copied block or file.
    pub fn default_max_tokens(self) -> u32 {
        match self {
            Scenario::Edit | Scenario::Rewrite => 1024,
            Scenario::Chat => 320,
            Scenario::Forced | Scenario::Auto | Scenario::Agent => 128,
        }
    }

    /// Requests per unit.
    pub fn turns(self) -> usize {
        match self {
            Scenario::Agent => AGENT_SCRIPT.len(),
            Scenario::Forced
            | Scenario::Auto
            | Scenario::Edit
            | Scenario::Rewrite
            | Scenario::Chat => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Forced => "forced",
            Scenario::Auto => "auto",
            Scenario::Agent => "agent",
            Scenario::Edit => "edit",
            Scenario::Rewrite => "rewrite",
            Scenario::Chat => "chat",
        }
    }
}

/// How every request of a run is made.
#[derive(Debug, Clone)]
pub struct RequestSettings {
    pub max_tokens: u32,
    /// Open each system message with a random nonce (cold prompts).
    pub nonce: bool,
}

/// One timed request of a unit.
#[derive(Debug, Clone, Serialize)]
pub struct Turn {
    /// 1-based.
    pub turn: usize,
    /// The prompt size by agentd's tokenizer-free estimate (the server's count is in the sample's usage).
    pub prompt_estimate: u64,
    pub sample: RequestSample,
}

/// The endpoint a unit runs against.
pub struct Target<'a> {
    pub client: &'a ChatClient,
    pub model: &'a str,
}

/// Runs unit number `unit` of `scenario`; `on_request` is called after every request (the progress bar).
pub async fn run_unit(
    scenario: Scenario,
    target: &Target<'_>,
    unit: usize,
    settings: &RequestSettings,
    on_request: &(dyn Fn() + Sync),
) -> Result<Vec<Turn>, BenchError> {
    let turns = match scenario {
        Scenario::Forced | Scenario::Auto | Scenario::Edit | Scenario::Rewrite | Scenario::Chat => {
            let request = single_request(scenario, unit, settings)?;
            let body = request_body(&request, target.model, None);
            let sample = target.client.stream_chat(&body, &request.tools).await;
            on_request();
            vec![Turn {
                turn: 1,
                prompt_estimate: estimate_tokens(&request),
                sample,
            }]
        }
        Scenario::Agent => agent_session(target, settings, on_request).await?,
    };
    Ok(turns)
}

const ASSISTANT: &str = "You are a helpful assistant.";
const CODING_AGENT: &str =
    "You are a coding agent working in a small Rust project. Use the tools to inspect \
and change it; answer briefly.";

fn system(base: &str, settings: &RequestSettings) -> String {
    if settings.nonce {
        let id = uuid::Uuid::new_v4().simple().to_string();
        format!("[request {}] {base}", &id[..12])
    } else {
        base.to_string()
    }
}

/// The `forced` tool: the anchor's `get_weather`.
pub fn weather_tool() -> Result<ToolSpec, BenchError> {
    Ok(ToolSpec::new(
        "get_weather",
        "Get the current weather for a city.",
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
            },
            "required": ["city", "unit"]
        }),
    )?)
}

const AUTO_PROMPTS: [&str; 5] = [
    "List the files in the src directory.",
    "Show me the contents of README.md.",
    "Find every Rust source file in this project.",
    "Search the code for the word TODO.",
    "Run `cargo test` and tell me whether it passes.",
];

fn single_request(
    scenario: Scenario,
    unit: usize,
    settings: &RequestSettings,
) -> Result<CompletionRequest, BenchError> {
    let copy = |kind| {
        let system = system(CODING_AGENT, settings);
        super::copy_heavy::request(kind, system, settings.max_tokens)
    };
    let (system_base, user, tools, tool_choice) = match scenario {
        Scenario::Edit => return copy(super::copy_heavy::Kind::Edit),
        Scenario::Rewrite => return copy(super::copy_heavy::Kind::Rewrite),
        Scenario::Chat => return copy(super::copy_heavy::Kind::Chat),
        Scenario::Forced => (
            ASSISTANT,
            "What's the weather like in Paris today?",
            vec![weather_tool()?],
            ToolChoice::Tool {
                name: "get_weather".into(),
            },
        ),
        _ => (
            CODING_AGENT,
            AUTO_PROMPTS[unit % AUTO_PROMPTS.len()],
            ToolRegistry::coding().specs(),
            ToolChoice::Auto,
        ),
    };
    Ok(CompletionRequest {
        system: Some(system(system_base, settings)),
        messages: vec![Message::user(user)],
        tools,
        tool_choice,
        sampling: Sampling::greedy(),
        max_tokens: Some(settings.max_tokens),
        ..CompletionRequest::default()
    })
}

/// The fixture project the agent explores (a temporary copy per session).
const PROJECT: [(&str, &str); 4] = [
    ("README.md", FIXTURE_README),
    ("Cargo.toml", FIXTURE_CARGO),
    ("src/main.rs", FIXTURE_MAIN),
    ("src/lib.rs", FIXTURE_LIB),
];

const FIXTURE_README: &str = r#"# wordfreq

Counts how often each word occurs in a text file and prints the most frequent ones.

Usage: `wordfreq FILE [--top N]`

TODO: read from stdin when FILE is `-`.
"#;

const FIXTURE_CARGO: &str = r#"[package]
name = "wordfreq"
version = "0.1.0"
edition = "2021"

[dependencies]
"#;

/// `src/main.rs` of the fixture (also the file the copy-heavy scenarios show).
pub(super) const FIXTURE_MAIN: &str = super::copy_heavy::FILE;

const FIXTURE_LIB: &str = r#"//! Word counting.

use std::collections::HashMap;

/// Lower-cased words of `text`: runs of letters and apostrophes.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphabetic() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// How often each word occurs.
pub fn count_words(text: &str) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for w in words(text) {
        *counts.entry(w).or_insert(0) += 1;
    }
    counts
}

/// The `n` most frequent words, most frequent first; ties in alphabetical order.
pub fn top_words(text: &str, n: usize) -> Vec<(String, usize)> {
    let mut all: Vec<_> = count_words(text).into_iter().collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all.truncate(n);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_case_insensitively() {
        let top = top_words("The cat and the hat", 1);
        assert_eq!(top, vec![("the".to_string(), 2)]);
    }
    // TODO: a test for apostrophes.
}
"#;

const AGENT_TASK: &str =
    "Find out how this project counts words, and what is left to do. Look around with the \
tools before you answer.";

/// The agent scenario's turns: the tool each turn must call and the call recorded in the transcript.
const AGENT_SCRIPT: [(&str, &str); 10] = [
    ("ls", r#"{}"#),
    ("read", r#"{"path": "README.md"}"#),
    ("find", r#"{"pattern": "*.rs"}"#),
    ("read", r#"{"path": "src/main.rs"}"#),
    ("grep", r#"{"pattern": "fn ", "path": "src"}"#),
    ("read", r#"{"path": "src/lib.rs", "limit": 20}"#),
    ("grep", r#"{"pattern": "TODO"}"#),
    ("read", r#"{"path": "Cargo.toml"}"#),
    ("ls", r#"{"path": "src"}"#),
    ("read", r#"{"path": "src/lib.rs", "offset": 21}"#),
];

fn write_project(root: &Path) -> Result<(), BenchError> {
    for (path, text) in PROJECT {
        let file = root.join(path);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| BenchError::Workload(format!("creating {}: {e}", dir.display())))?;
        }
        std::fs::write(&file, text)
            .map_err(|e| BenchError::Workload(format!("writing {}: {e}", file.display())))?;
    }
    Ok(())
}

async fn agent_session(
    target: &Target<'_>,
    settings: &RequestSettings,
    on_request: &(dyn Fn() + Sync),
) -> Result<Vec<Turn>, BenchError> {
    let project = tempfile::tempdir().map_err(|e| {
        BenchError::Workload(format!(
            "creating the agent scenario's project directory: {e}"
        ))
    })?;
    write_project(project.path())?;
    let registry = ToolRegistry::coding();
    let ctx = ToolContext::new(project.path()).with_workspace(project.path());
    let session = format!("bench-{}", uuid::Uuid::new_v4().simple());
    let mut request = CompletionRequest {
        system: Some(system(CODING_AGENT, settings)),
        messages: vec![Message::user(AGENT_TASK)],
        tools: registry.specs(),
        sampling: Sampling::greedy(),
        max_tokens: Some(settings.max_tokens),
        ..CompletionRequest::default()
    };
    let mut turns = Vec::with_capacity(AGENT_SCRIPT.len());
    for (i, (tool, args)) in AGENT_SCRIPT.iter().enumerate() {
        request.tool_choice = ToolChoice::Tool {
            name: (*tool).to_string(),
        };
        let body = request_body(&request, target.model, Some(&session));
        let sample = target.client.stream_chat(&body, &request.tools).await;
        on_request();
        turns.push(Turn {
            turn: i + 1,
            prompt_estimate: estimate_tokens(&request),
            sample,
        });
        let arguments: Value = serde_json::from_str(args).map_err(|e| {
            BenchError::Workload(format!("agent script turn {}: arguments: {e}", i + 1))
        })?;
        let call = ToolCall::new(format!("call_bench_{}", i + 1), *tool, arguments);
        let result = match registry.get(tool) {
            Some(t) => t.call(call.arguments.clone(), &ctx).await,
            None => {
                return Err(BenchError::Workload(format!(
                    "agent script turn {}: no tool `{tool}`",
                    i + 1
                )))
            }
        };
        let (content, is_error) = match result {
            Ok(out) => (out.content, false),
            Err(e) => (e.to_string(), true),
        };
        request.messages.push(Message::Assistant(AssistantMessage {
            content: vec![ContentBlock::ToolCall(call.clone())],
        }));
        request
            .messages
            .push(Message::tool_result(&call, content, is_error));
    }
    Ok(turns)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every scripted call is valid for its tool and runs without error on the fixture project.
    #[tokio::test]
    async fn agent_script_runs_on_the_fixture() {
        let dir = tempfile::tempdir().unwrap();
        write_project(dir.path()).unwrap();
        let registry = ToolRegistry::coding();
        let ctx = ToolContext::new(dir.path()).with_workspace(dir.path());
        for (tool, args) in AGENT_SCRIPT {
            let args: Value = serde_json::from_str(args).unwrap();
            let t = registry.get(tool).unwrap();
            t.spec().validate_arguments(&args).unwrap();
            let out = t.call(args, &ctx).await.unwrap();
            assert!(!out.content.is_empty(), "{tool}");
        }
    }
}
