//! [`CodingSession`]: the agent, its backend and its session file — what the interactive TUI, print, JSON and
//! RPC modes all drive (Pi's `AgentSession`). Cheap to clone; every method is safe to call from any task.
//!
//! Persistence is `agentd::session::Recorder`'s: it appends every finished message and every compaction to the
//! session file. A new session's file is created with its first prompt (or `!cmd`), so opening `agentd chat` and
//! quitting leaves nothing behind. Switching sessions (`/new`, `/resume`, `/fork`) builds a fresh `Agent` with
//! the same configuration (a recorder stays subscribed to its agent for life) and moves every listener
//! registered through [`CodingSession::subscribe`] to it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use agentd::agent::messages::now_ms;
use agentd::agent::{
    Agent, AgentEndReason, AgentError, AgentLoopConfig, AgentMessage, CompactionSettings,
    Compactor, Listener,
};
use agentd::provider::{CompletionRequest, Sampling, ToolChoice};
use agentd::session::{JsonlStore, Recorder, SessionStore, StoreOptions};
use agentd::tools::bash::BashTool;
use agentd::tools::policy::Policy;
use agentd::tools::registry::ToolRegistry;
use agentd::tools::tool::{Tool, ToolContext, ToolError};
use serde_json::json;
use tokio_util::sync::CancellationToken;

mod tree_ops;

use super::backend::{self, Backend};
use super::prompt::{self, PromptInputs};
use super::sessions::{self, SessionChoice};
use super::{current_dir, skills, text_or_file, AgentArgs, Failure};

/// Pi's default tool set.
pub const DEFAULT_TOOLS: [&str; 4] = ["read", "bash", "edit", "write"];

/// How full the context is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ContextUsage {
    pub tokens: u64,
    pub window: u64,
    /// Whether `tokens` is the model tokenizer's count.
    pub exact: bool,
}

/// What setup found, for the user: context files, skills and warnings.
#[derive(Debug, Clone, Default)]
pub struct SetupReport {
    pub context_files: Vec<PathBuf>,
    pub skills: Vec<skills::Skill>,
    pub warnings: Vec<String>,
}

struct Inner {
    agent: Mutex<Agent>,
    /// Listeners to move to the next agent on a session switch.
    listeners: Mutex<Vec<Listener>>,
    /// The current session file and its recorder (`None`: no file yet, or `--no-session`).
    recording: Mutex<Option<Recording>>,
    /// `false` with `--no-session`.
    persist: bool,
    backend: Mutex<Backend>,
    cwd: PathBuf,
    workspace: Option<PathBuf>,
    report: SetupReport,
}

/// A session file being recorded.
#[derive(Clone)]
struct Recording {
    store: Arc<JsonlStore>,
    recorder: Arc<Recorder>,
}

/// See the module docs.
#[derive(Clone)]
pub struct CodingSession {
    inner: Arc<Inner>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The loop configuration an agent was built with.
fn config_of(agent: &Agent) -> Option<AgentLoopConfig> {
    let mut config = None;
    agent.update_config(|c| config = Some(c.clone()));
    config
}

/// Tools to offer, and warnings about ones left out.
type OfferedTools = (Vec<Arc<dyn Tool>>, Vec<String>);

/// The tools the flags ask for, less those the policy forbids (with a warning when they were asked for by name).
fn build_tools(args: &AgentArgs, policy: &Policy) -> anyhow::Result<OfferedTools> {
    let names: Vec<String> = if args.no_tools {
        Vec::new()
    } else {
        match &args.tools {
            Some(list) => list
                .iter()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect(),
            None => DEFAULT_TOOLS.iter().map(|s| s.to_string()).collect(),
        }
    };
    let registry =
        ToolRegistry::builtin(&names).map_err(|e| Failure::usage(format!("--tools: {e}")))?;
    let mut warnings = Vec::new();
    let mut tools = Vec::new();
    for tool in registry.iter() {
        match policy.check(tool.as_ref()) {
            Ok(()) => tools.push(tool.clone()),
            Err(why) => {
                if args.tools.is_some() {
                    warnings.push(format!("tool `{}` left out: {why}", tool.spec().name));
                }
            }
        }
    }
    Ok((tools, warnings))
}

impl CodingSession {
    /// Validates the flags, opens the session (before the model loads, so a bad session fails fast), builds
    /// the backend, the tools and the system prompt, and restores the session's transcript.
    pub async fn start(args: &AgentArgs, choice: &SessionChoice) -> anyhow::Result<Self> {
        let here = current_dir()?;
        let workspace = match &args.workspace {
            Some(w) => Some(
                std::fs::canonicalize(w)
                    .map_err(|e| Failure::usage(format!("--workspace {}: {e}", w.display())))?,
            ),
            None => None,
        };
        // Relative paths resolve against the working directory; outside the workspace that would refuse every
        // path, so the workspace root becomes the working directory then.
        let cwd = match &workspace {
            Some(w) if !here.starts_with(w) => w.clone(),
            _ => here,
        };
        let policy: Policy = args
            .allow
            .parse()
            .map_err(|e| Failure::usage(format!("--allow: {e}")))?;
        let (tools, mut warnings) = build_tools(args, &policy)?;
        let custom = args
            .system_prompt
            .as_deref()
            .map(text_or_file)
            .transpose()?;
        let append = args
            .append_system_prompt
            .as_deref()
            .map(text_or_file)
            .transpose()?;
        let store = sessions::open(choice, &cwd)?;
        let backend = backend::build(args).await?;

        let context_files = if args.no_context_files {
            Vec::new()
        } else {
            prompt::context_files(&cwd)
        };
        let found = if args.no_skills {
            Vec::new()
        } else {
            let (found, skill_warnings) = skills::discover(&prompt::skill_dirs(&cwd));
            warnings.extend(skill_warnings);
            found
        };
        let tool_names: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
        let system_prompt = prompt::build(&PromptInputs {
            custom,
            append,
            tools: tool_names,
            context_files: context_files.clone(),
            skills: found.clone(),
            cwd: cwd.clone(),
            date: prompt::today(),
        });

        let mut config = AgentLoopConfig::new(backend.provider.clone());
        config.model = backend.model.clone();
        config.max_tokens = Some(args.max_tokens);
        config.max_turns = args.max_turns.max(1);
        config.sampling = Sampling {
            temperature: args.temperature,
            seed: args.seed,
            ..Sampling::default()
        };
        config.policy = policy;
        config.cwd = cwd.clone();
        config.workspace = workspace.clone();
        config.context_policy = Some(Arc::new(Compactor::new(CompactionSettings::default())));
        let agent = Agent::new(config, system_prompt, tools);
        let session = Self {
            inner: Arc::new(Inner {
                agent: Mutex::new(agent.clone()),
                listeners: Mutex::new(Vec::new()),
                recording: Mutex::new(None),
                persist: *choice != SessionChoice::InMemory,
                backend: Mutex::new(backend),
                cwd,
                workspace,
                report: SetupReport {
                    context_files: context_files.into_iter().map(|f| f.path).collect(),
                    skills: found,
                    warnings,
                },
            }),
        };
        if let Some(store) = store {
            session.attach(agent, store).await?;
        }
        Ok(session)
    }

    /// The current agent (a new one after a session switch: take it again rather than keep it).
    pub fn agent(&self) -> Agent {
        lock(&self.inner.agent).clone()
    }

    /// Subscribes `listener` to this agent and to every agent a session switch brings.
    pub fn subscribe(&self, listener: Listener) {
        lock(&self.inner.listeners).push(listener.clone());
        self.agent().subscribe(listener);
    }

    pub fn report(&self) -> &SetupReport {
        &self.inner.report
    }

    pub fn cwd(&self) -> &Path {
        &self.inner.cwd
    }

    pub fn backend(&self) -> Backend {
        lock(&self.inner.backend).clone()
    }

    pub fn is_running(&self) -> bool {
        self.agent().state().is_running()
    }

    /// The last session-file write failure, if any.
    pub fn session_error(&self) -> Option<String> {
        self.recorder().and_then(|r| r.last_error())
    }

    fn recorder(&self) -> Option<Arc<Recorder>> {
        lock(&self.inner.recording)
            .as_ref()
            .map(|r| r.recorder.clone())
    }

    fn store(&self) -> Option<Arc<JsonlStore>> {
        lock(&self.inner.recording)
            .as_ref()
            .map(|r| r.store.clone())
    }

    /// Starts recording `agent` into `store` (loading the store's context into it).
    fn record_into(&self, agent: &Agent, store: Arc<JsonlStore>) -> anyhow::Result<()> {
        let recorder = Recorder::attach(agent, store.clone())
            .map_err(|e| anyhow::anyhow!("session {}: {e}", store.path().display()))?;
        let blobs = store.blobs();
        let id = store.header().id;
        agent.update_config(|c| {
            c.cache_key = Some(id);
            c.context_policy = Some(Arc::new(
                Compactor::new(CompactionSettings::default()).with_blobs(blobs),
            ));
        });
        *lock(&self.inner.recording) = Some(Recording { store, recorder });
        Ok(())
    }

    fn require_recorder(&self) -> anyhow::Result<Arc<Recorder>> {
        match self.recorder() {
            Some(r) => Ok(r),
            None if self.inner.persist => anyhow::bail!("the session has no messages yet"),
            None => anyhow::bail!("sessions are off (--no-session)"),
        }
    }

    fn require_idle(&self) -> anyhow::Result<()> {
        if self.is_running() {
            anyhow::bail!("the agent is running; wait for it or abort it first");
        }
        Ok(())
    }

    /// Makes `agent` current with `store` recorded: loads the store's context into it, keeps dropped tool
    /// results beside the session file, and settles the model (the session's when it can be served).
    async fn attach(&self, agent: Agent, store: Arc<JsonlStore>) -> anyhow::Result<()> {
        self.record_into(&agent, store)?;
        *lock(&self.inner.agent) = agent.clone();
        let wanted = agent.state().model;
        let backend = self.backend();
        // A session's model that cannot be had here: carry on with the one loaded.
        if !wanted.is_empty()
            && wanted != backend.model
            && self.switch_backend(&wanted).await.is_err()
        {
            agent.set_model(backend.model.clone());
        }
        Ok(())
    }

    /// A fresh agent with the current one's configuration, system prompt, tools and model, carrying every
    /// listener registered through `subscribe`.
    fn fresh_agent(&self) -> anyhow::Result<Agent> {
        let old = self.agent();
        let state = old.state();
        let mut config = config_of(&old)
            .ok_or_else(|| anyhow::anyhow!("internal: the agent has no configuration"))?;
        config.model = state.model.clone();
        config.cache_key = Some(uuid::Uuid::new_v4().to_string());
        let agent = Agent::new(config, state.system_prompt, state.tools);
        for l in lock(&self.inner.listeners).iter() {
            agent.subscribe(l.clone());
        }
        Ok(agent)
    }

    /// Creates a pending session's file (before its first message) and starts recording.
    async fn ensure_recording(&self) -> anyhow::Result<()> {
        if !self.inner.persist || self.recorder().is_some() {
            return Ok(());
        }
        let store = JsonlStore::create_for_cwd(&self.inner.cwd, StoreOptions::default())
            .map_err(|e| anyhow::anyhow!("cannot create the session file: {e}"))?;
        let store = Arc::new(store);
        let agent = self.agent();
        let messages = agent.state().messages;
        // What is already in memory goes into the file first, so attaching loads it back with entry ids.
        for m in messages {
            store
                .append(agentd::session::EntryKind::message(m))
                .await
                .map_err(|e| anyhow::anyhow!("cannot write the session file: {e}"))?;
        }
        self.record_into(&agent, store)
    }

    /// Sends a prompt and runs until the agent stops.
    pub async fn prompt(&self, text: &str) -> anyhow::Result<AgentEndReason> {
        if let Err(e) = self.ensure_recording().await {
            tracing::warn!(error = %e, "continuing without a session file");
        }
        self.agent()
            .prompt(AgentMessage::user(text))
            .await
            .map_err(|e: AgentError| anyhow::anyhow!("{e}"))
    }

    pub fn steer(&self, text: &str) {
        self.agent().steer(AgentMessage::user(text));
    }

    pub fn follow_up(&self, text: &str) {
        self.agent().follow_up(AgentMessage::user(text));
    }

    pub fn abort(&self) {
        self.agent().abort();
    }

    /// The session file, when one exists.
    pub fn session_file(&self) -> Option<PathBuf> {
        self.store().map(|s| s.path().to_path_buf())
    }

    /// The session id (`None` for `--no-session` or a session without messages yet).
    pub fn session_id(&self) -> Option<String> {
        self.store().map(|s| s.header().id)
    }

    /// The session for the status line: an id prefix, `new`, or `off`.
    pub fn session_label(&self) -> String {
        match self.store() {
            Some(s) => s.header().id.chars().take(8).collect(),
            None if self.inner.persist => "new".into(),
            None => "off".into(),
        }
    }

    /// The exact size of the prompt the next turn would send, and the model's window.
    pub async fn context_usage(&self) -> ContextUsage {
        let state = self.agent().state();
        let backend = self.backend();
        let request = CompletionRequest {
            model: backend.model.clone(),
            system: (!state.system_prompt.is_empty()).then(|| state.system_prompt.clone()),
            messages: agentd::agent::convert_to_llm(&state.messages),
            tools: state.tools.iter().map(|t| t.spec().clone()).collect(),
            tool_choice: if state.tools.is_empty() {
                ToolChoice::None
            } else {
                ToolChoice::Auto
            },
            ..CompletionRequest::default()
        };
        let (tokens, exact) = match backend.provider.count_tokens(&request).await {
            Ok(c) => (c.tokens, c.exact),
            Err(_) => (agentd::provider::estimate_tokens(&request), false),
        };
        ContextUsage {
            tokens,
            window: backend.context_window(),
            exact,
        }
    }

    /// Runs a shell command for the user (`!cmd`; `!!cmd` with `exclude`) and adds it to the transcript: the
    /// model sees it with the next prompt unless excluded.
    pub async fn run_bash(
        &self,
        command: &str,
        exclude: bool,
        cancel: CancellationToken,
    ) -> anyhow::Result<AgentMessage> {
        self.require_idle()?;
        let ctx = ToolContext::new(self.inner.cwd.clone()).with_cancel(cancel.clone());
        let (output, exit_code, truncated) = match BashTool::new()
            .call(json!({ "command": command }), &ctx)
            .await
        {
            Ok(out) => {
                let truncated = !out.details["truncation"].is_null();
                let text = if out.content == "(no output)" {
                    String::new()
                } else {
                    out.content
                };
                (text, Some(0), truncated)
            }
            Err(ToolError::RespondToModel(text)) => split_exit_note(&text),
            Err(ToolError::Fatal(e)) => anyhow::bail!("{e}"),
        };
        let message = AgentMessage::BashExecution {
            command: command.to_string(),
            output,
            exit_code,
            cancelled: cancel.is_cancelled(),
            truncated,
            exclude_from_context: exclude,
            timestamp: now_ms(),
        };
        if let Err(e) = self.ensure_recording().await {
            tracing::warn!(error = %e, "continuing without a session file");
        }
        let agent = self.agent();
        let mut messages = agent.state().messages;
        messages.push(message.clone());
        match self.store() {
            Some(store) => {
                store
                    .append(agentd::session::EntryKind::message(message.clone()))
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot write the session file: {e}"))?;
                if let Some(r) = self.recorder() {
                    r.reload(&agent).map_err(|e| anyhow::anyhow!("{e}"))?;
                }
            }
            None => agent.set_messages(messages),
        }
        Ok(message)
    }

    /// Loads `name` into the backend (a served model, or another local model) without touching the session.
    async fn switch_backend(&self, name: &str) -> anyhow::Result<String> {
        let mut backend = self.backend();
        backend.switch_model(name).await?;
        let provider = backend.provider.clone();
        let model = backend.model.clone();
        let agent = self.agent();
        agent.update_config(|c| c.provider = provider);
        agent.set_model(model.clone());
        *lock(&self.inner.backend) = backend;
        Ok(model)
    }

    /// Switches the model (`/model`, RPC `set_model`): one the backend serves, or another local model, loaded now.
    pub async fn set_model(&self, name: &str) -> anyhow::Result<String> {
        self.require_idle()?;
        let model = self.switch_backend(name).await?;
        if let Some(r) = self.recorder() {
            let kind = self.backend().describe();
            r.set_model(&self.agent(), &kind, &model)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        Ok(model)
    }

    /// The offered tools: `(name, first sentence of the description)`.
    pub fn tools(&self) -> Vec<(String, String)> {
        self.agent()
            .state()
            .tools
            .iter()
            .map(|t| {
                let spec = t.spec();
                let first = spec.description.split(". ").next().unwrap_or_default();
                (spec.name.clone(), first.trim_end_matches('.').to_string())
            })
            .collect()
    }

    /// The state as `get_state` reports it.
    pub fn state_json(&self) -> serde_json::Value {
        let state = self.agent().state();
        let backend = self.backend();
        json!({
            "model": backend.model_name(),
            "backend": backend.describe(),
            "context_window": backend.context_window(),
            "is_streaming": state.is_running(),
            "status": state.status,
            "session_id": self.session_id(),
            "session_file": self.session_file(),
            "message_count": state.messages.len(),
            "tools": state.tools.iter().map(|t| t.spec().name.clone()).collect::<Vec<_>>(),
            "cwd": self.inner.cwd,
            "workspace": self.inner.workspace,
            "last_error": state.last_error,
        })
    }
}

/// Splits a failed bash result into the output and the exit code its closing note names
/// (`Command exited with code N`; `None` when killed, timed out or aborted).
fn split_exit_note(text: &str) -> (String, Option<i32>, bool) {
    let (output, note) = match text.rsplit_once("\n\n") {
        Some((o, n)) if n.starts_with("Command ") => (o.to_string(), n),
        _ if text.starts_with("Command ") => (String::new(), text),
        _ => (text.to_string(), ""),
    };
    let code = note
        .strip_prefix("Command exited with code ")
        .and_then(|c| c.trim().parse().ok());
    (output, code, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_notes_split() {
        assert_eq!(
            split_exit_note("oops\n\nCommand exited with code 3"),
            ("oops".to_string(), Some(3), false)
        );
        assert_eq!(
            split_exit_note("Command exited with code 1"),
            (String::new(), Some(1), false)
        );
        assert_eq!(
            split_exit_note("x\n\nCommand aborted; it and every process it started were killed."),
            ("x".to_string(), None, false)
        );
    }
}
