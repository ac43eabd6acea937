//! [`CodingSession`]: the agent, its backend, its tools and its session file — what the interactive TUI, the
//! print, JSON and RPC modes and the HTTP sessions API all drive (Pi's `AgentSession`). Cheap to clone; every
//! method is safe to call from any task.
//!
//! Built from [`SessionSettings`] and a [`Backend`]: the tools the settings name (less those the policy forbids),
//! `recall` when grounding is on, the system prompt (base or custom, `AGENTS.md`/`CLAUDE.md` context files,
//! skills, working directory and date), automatic compaction with grounding (dropped tool results kept beside
//! the session file, pointed at from the summary), and the session store with its [`Recorder`].
//!
//! Persistence is the [`Recorder`]'s: it appends every finished message and every compaction to the session
//! file. A new session's file is created with its first prompt (or `!cmd`) unless the caller asks for it now
//! ([`SessionChoice::CreateNow`]), so opening `agentd chat` and quitting leaves nothing behind. Switching
//! sessions (`/new`, `/resume`, `/fork`) builds a fresh `Agent` with the same configuration (a recorder stays
//! subscribed to its agent for life) and moves every listener registered through [`CodingSession::subscribe`]
//! to it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::agent::{
    Agent, AgentEndReason, AgentLoopConfig, AgentMessage, CompactionSettings, Compactor, Listener,
};
use crate::env::now_ms;
use crate::provider::{CompletionRequest, ToolChoice};
use crate::session::{EntryKind, JsonlStore, SessionStore, StoreOptions};
use crate::tools::bash::BashTool;
use crate::tools::support::session_resources::SessionResources;
use crate::tools::support::workspace::WorkspaceState;
use crate::tools::tool::{Tool, ToolContext, ToolError};

mod branches;
mod build;
mod tree_ops;

use build::with_recall;
pub use build::{text_or_file, SessionSettings, SetupReport, DEFAULT_TOOLS, RECALL_TOOL};

use super::approvals::Approvals;
use super::harness::{blocks, EditFormat, Harness};
use super::sessions::SessionChoice;
use super::{templates, AppError, Backend, Recorder};

/// How full the context is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ContextUsage {
    pub tokens: u64,
    pub window: u64,
    /// Whether `tokens` is the model tokenizer's count.
    pub exact: bool,
}

struct Inner {
    agent: Mutex<Agent>,
    /// Listeners to move to the next agent on a session switch.
    listeners: Mutex<Vec<Listener>>,
    /// The current session file and its recorder (`None`: no file yet, or in memory only).
    recording: Mutex<Option<Recording>>,
    /// `false` for an in-memory session.
    persist: bool,
    backend: Mutex<Backend>,
    cwd: PathBuf,
    workspace: Option<PathBuf>,
    sessions_dir: PathBuf,
    compaction: CompactionSettings,
    grounding: bool,
    /// The current session's background jobs and overflow logs (closed when the session ends or switches).
    resources: Mutex<SessionResources>,
    approvals: Approvals,
    report: SetupReport,
    /// What the session knows of its files (`None`: the workspace grammar is off).
    workspace_state: Option<WorkspaceState>,
    /// The coding harness around the session's agents: told of every prompt.
    harness: Arc<Harness>,
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

impl CodingSession {
    /// Validates the settings, opens the session `choice` names, builds the tools and the system prompt, and
    /// restores the session's transcript. The backend is ready (see [`Backend::connect`]).
    pub async fn start(
        settings: SessionSettings,
        backend: Backend,
        choice: &SessionChoice,
    ) -> Result<Self, AppError> {
        let (inner, agent, store) = build::assemble(settings, backend, choice).await?;
        let session = Self {
            inner: Arc::new(inner),
        };
        if let Some(store) = store {
            let created = store.entries().is_empty();
            session.attach(agent, store).await?;
            if created {
                session.record_model().await?;
            }
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

    /// `text` with the files and directories its `@path` words name appended (see [`super::mentions`]); an error
    /// for a binary file or a path outside the workspace.
    ///
    /// With the workspace grammar on, the small files the prompt names by their path (`calc.py`, without `@`)
    /// are attached too, as Aider keeps the files of the chat in its prompt: the model starts from their text
    /// instead of guessing it, and they count as read.
    pub fn expand_mentions(&self, text: &str) -> Result<String, AppError> {
        let expanded = super::mentions::expand_mentions(
            text,
            &self.inner.cwd,
            self.inner.workspace.as_deref(),
        )?;
        let harness = &self.inner.harness;
        let prompt = match &self.inner.workspace_state {
            // File blocks: the named files first, in the format the model writes them back in.
            Some(state) if harness.format() == EditFormat::Blocks => {
                let files = super::mentions::named_files(text, state);
                harness.start_prompt(text, &files, blocks::prompt_with_files(&expanded, &files))
            }
            Some(state) => {
                let attached = super::mentions::attach_named_files(&expanded, text, state);
                harness.start_prompt(text, &[], attached)
            }
            None => harness.start_prompt(text, &[], expanded),
        };
        Ok(prompt)
    }

    /// If `line` is `/name args…` for one of the prompt templates, the prompt it expands to.
    pub fn expand_template(&self, line: &str) -> Option<String> {
        templates::expand_command(&self.inner.report.templates, line)
    }

    pub fn cwd(&self) -> &Path {
        &self.inner.cwd
    }

    /// The directory the file tools are confined to, if any.
    pub fn workspace(&self) -> Option<&Path> {
        self.inner.workspace.as_deref()
    }

    /// Where this session's files (and other sessions of its directory) live.
    pub fn sessions_dir(&self) -> &Path {
        &self.inner.sessions_dir
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

    /// The session store, when the session has a file.
    pub fn store(&self) -> Option<Arc<JsonlStore>> {
        lock(&self.inner.recording)
            .as_ref()
            .map(|r| r.store.clone())
    }

    /// The compactor for a session recorded into `store` (grounded in its blobs when grounding is on).
    fn compactor_for(&self, store: Option<&JsonlStore>) -> Compactor {
        let compactor = Compactor::new(self.inner.compaction.clone());
        match store {
            Some(s) if self.inner.grounding => compactor.with_blobs(s.blobs()),
            _ => compactor,
        }
    }

    /// Starts recording `agent` into `store` (loading the store's context into it); compaction and `recall`
    /// follow the store's blobs.
    fn record_into(&self, agent: &Agent, store: Arc<JsonlStore>) -> Result<(), AppError> {
        let recorder = Recorder::attach(agent, store.clone())?;
        let id = store.header().id;
        let compactor = self.compactor_for(Some(&store));
        agent.update_config(|c| {
            c.cache_key = Some(format!("session:{id}"));
            c.context_policy = Some(Arc::new(compactor));
        });
        if self.inner.grounding {
            agent.set_tools(with_recall(&agent.state().tools, store.blobs()));
        }
        *lock(&self.inner.recording) = Some(Recording { store, recorder });
        Ok(())
    }

    fn require_recorder(&self) -> Result<Arc<Recorder>, AppError> {
        match self.recorder() {
            Some(r) => Ok(r),
            None if self.inner.persist => Err(AppError::usage("the session has no messages yet")),
            None => Err(AppError::usage("sessions are off (in memory only)")),
        }
    }

    fn require_idle(&self) -> Result<(), AppError> {
        if self.is_running() {
            return Err(AppError::Busy(
                "the agent is running; wait for it or abort it first".into(),
            ));
        }
        Ok(())
    }

    /// Makes `agent` current with `store` recorded: loads the store's context into it, keeps dropped tool
    /// results beside the session file, and settles the model (the session's when it can be served).
    async fn attach(&self, agent: Agent, store: Arc<JsonlStore>) -> Result<(), AppError> {
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

    /// Records the current model as a `model_change` entry (a new session file starts with it).
    async fn record_model(&self) -> Result<(), AppError> {
        if let Some(r) = self.recorder() {
            let backend = self.backend();
            r.set_model(&self.agent(), &backend.describe(), &backend.model_name())
                .await?;
        }
        Ok(())
    }

    /// A fresh agent with the current one's configuration, system prompt, tools and model, carrying every
    /// listener registered through `subscribe`.
    fn fresh_agent(&self) -> Result<Agent, AppError> {
        let old = self.agent();
        let state = old.state();
        let mut config = config_of(&old)
            .ok_or_else(|| AppError::failed("internal: the agent has no configuration"))?;
        config.model = state.model.clone();
        config.cache_key = Some(uuid::Uuid::new_v4().to_string());
        config.context_policy = Some(Arc::new(self.compactor_for(None)));
        // The session that ends takes its background jobs and overflow logs with it.
        let resources = SessionResources::new();
        let old = std::mem::replace(&mut *lock(&self.inner.resources), resources.clone());
        old.close();
        config.resources = Some(resources);
        let agent = Agent::new(config, state.system_prompt, state.tools);
        for l in lock(&self.inner.listeners).iter() {
            agent.subscribe(l.clone());
        }
        Ok(agent)
    }

    /// Creates a pending session's file now (a new session gets one with its first message) and starts
    /// recording. Nothing happens for a session that has a file or is in memory only.
    pub async fn ensure_recording(&self) -> Result<(), AppError> {
        if !self.inner.persist || self.recorder().is_some() {
            return Ok(());
        }
        let store = JsonlStore::create(
            &self.inner.sessions_dir,
            &self.inner.cwd,
            StoreOptions::default(),
        )?;
        let store = Arc::new(store);
        let agent = self.agent();
        let messages = agent.state().messages;
        // What is already in memory goes into the file first, so attaching loads it back with entry ids.
        for m in messages {
            store.append(EntryKind::message(m)).await?;
        }
        self.record_into(&agent, store)?;
        self.record_model().await
    }

    /// Sends a prompt and runs until the agent stops. A session file that cannot be created is logged and the
    /// session goes on in memory.
    pub async fn prompt(&self, text: &str) -> Result<AgentEndReason, AppError> {
        if let Err(e) = self.ensure_recording().await {
            tracing::warn!(error = %e, "continuing without a session file");
        }
        self.agent()
            .prompt(AgentMessage::user(text))
            .await
            .map_err(|e| AppError::Busy(e.to_string()))
    }

    /// Queues a steering message; false when no run is in progress to deliver it (see `Agent::steer`).
    pub fn steer(&self, text: &str) -> bool {
        self.agent().steer(AgentMessage::user(text))
    }

    /// Queues a follow-up; false when no run is in progress to deliver it.
    pub fn follow_up(&self, text: &str) -> bool {
        self.agent().follow_up(AgentMessage::user(text))
    }

    /// Runs the queued messages (when the run that would have taken them had already finished).
    pub async fn continue_queued(&self) -> Result<AgentEndReason, AppError> {
        self.agent()
            .continue_()
            .await
            .map_err(|e| AppError::Busy(e.to_string()))
    }

    pub fn abort(&self) {
        self.agent().abort();
        self.inner.approvals.deny_all("the run was aborted");
    }

    /// The session's approvals: attach a door with [`Approvals::set_sink`], answer with
    /// [`Approvals::resolve`].
    pub fn approvals(&self) -> &Approvals {
        &self.inner.approvals
    }

    /// Ends the session: aborts a running prompt and cleans its tool resources (background processes started by
    /// its bash calls are killed, overflow logs deleted). The session file stays.
    pub fn close(&self) {
        self.abort();
        let cleaned = lock(&self.inner.resources).close();
        if cleaned.killed_groups > 0 || cleaned.removed_files > 0 {
            tracing::info!(
                killed_groups = cleaned.killed_groups,
                removed_files = cleaned.removed_files,
                "session closed"
            );
        }
    }

    /// The session file, when one exists.
    pub fn session_file(&self) -> Option<PathBuf> {
        self.store().map(|s| s.path().to_path_buf())
    }

    /// The session id (`None` in memory, or for a session without messages yet).
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
            messages: crate::agent::convert_to_llm(&state.messages),
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
            Err(_) => (crate::provider::estimate_tokens(&request), false),
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
    ) -> Result<AgentMessage, AppError> {
        self.require_idle()?;
        let resources = lock(&self.inner.resources).clone();
        let ctx = ToolContext::new(self.inner.cwd.clone())
            .with_cancel(cancel.clone())
            .with_resources(resources);
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
            Err(ToolError::Fatal(e)) => return Err(AppError::failed(e)),
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
        match (self.store(), self.recorder()) {
            (Some(store), Some(recorder)) => {
                store.append(EntryKind::message(message.clone())).await?;
                recorder.reload(&agent)?;
            }
            _ => {
                let mut messages = agent.state().messages;
                messages.push(message.clone());
                agent.set_messages(messages);
            }
        }
        Ok(message)
    }

    /// Loads `name` into the backend (a served model, or another local model) without touching the session.
    async fn switch_backend(&self, name: &str) -> Result<String, AppError> {
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
    pub async fn set_model(&self, name: &str) -> Result<String, AppError> {
        self.require_idle()?;
        let model = self.switch_backend(name).await?;
        self.record_model().await?;
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
