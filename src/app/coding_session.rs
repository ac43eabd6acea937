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
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::agent::{
    Agent, AgentEndReason, AgentLoopConfig, AgentMessage, CompactionSettings, Compactor, Listener,
};
use crate::env::now_ms;
use crate::provider::{CompletionRequest, Sampling, ToolChoice};
use crate::session::{BlobStore, EntryKind, JsonlStore, SessionStore, StoreOptions};
use crate::tools::bash::BashTool;
use crate::tools::policy::Policy;
use crate::tools::recall::RecallTool;
use crate::tools::registry::ToolRegistry;
use crate::tools::resources::SessionResources;
use crate::tools::tool::{Tool, ToolContext, ToolError};

mod branches;
mod tree_ops;

use super::approvals::{ApprovalPolicy, Approvals, HookContext};
use super::edit_format::{self, EditFormat};
use super::loop_rules::{mutating_tools, LoopRules};
use super::prompt::{self, PromptInputs};
use super::sessions::{self, SessionChoice};
use super::{skills, templates, AppError, Backend, Recorder};
use crate::tools::workspace::WorkspaceState;

/// Pi's default tool set.
pub const DEFAULT_TOOLS: [&str; 4] = ["read", "bash", "edit", "write"];

/// The name of the tool that reads back dropped tool results (registered when grounding is on).
pub const RECALL_TOOL: &str = "recall";

/// How a coding session is set up: everything a door decides (flags, a request body), nothing it parses.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    /// The tools offered, by name (`None`: [`DEFAULT_TOOLS`]; empty: none). `recall` is added by grounding.
    pub tools: Option<Vec<String>>,
    /// What tools may do; tools it forbids are left out (with a warning when they were named).
    pub policy: Policy,
    /// Which calls run, are asked about or are refused ([`super::approvals`]); tags it denies are taken out
    /// of `policy` too.
    pub approvals: ApprovalPolicy,
    /// The working directory (relative paths resolve against it; context files and skills are found from it).
    pub cwd: PathBuf,
    /// Confine the file tools to this directory. When `cwd` is outside it, the workspace becomes the cwd.
    pub workspace: Option<PathBuf>,
    /// Replaces the default base prompt.
    pub system_prompt: Option<String>,
    /// Appended to the base prompt.
    pub append_system_prompt: Option<String>,
    /// Load `AGENTS.md` / `CLAUDE.md` context files.
    pub context_files: bool,
    /// List skills in the system prompt.
    pub skills: bool,
    pub max_tokens: Option<u32>,
    /// The thinking level asked of reasoning models (`None`: the model's default).
    pub thinking: Option<crate::provider::Thinking>,
    /// Model calls per prompt before the run stops.
    pub max_turns: usize,
    pub sampling: Sampling,
    /// Automatic and manual compaction.
    pub compaction: CompactionSettings,
    /// Keep tool results that compaction drops beside the session file, point at them from the summary, and
    /// offer `recall` to read them back. Needs a session file (off with `InMemory`).
    pub grounding: bool,
    /// Where session files go (`None`: `$AGENTD_HOME/sessions/<slug of cwd>/`).
    pub sessions_dir: Option<PathBuf>,
    /// The `bash` tool's timeout when a call names none (`None`: the tool's default,
    /// [`crate::tools::bash::DEFAULT_BASH_TIMEOUT`]).
    pub bash_timeout: Option<Duration>,
    /// Workspace-aware calls: the system prompt shows the file tree, and on the local engine the built-in tools'
    /// arguments are constrained to calls that can work here (existing paths, `old_text` from the file).
    pub workspace_grammar: bool,
    /// The loop rules of [`super::loop_rules`] (repeats answered, a shrinking rewrite stopped).
    pub loop_rules: bool,
    /// How the model changes files: JSON tool calls, or file blocks in its reply ([`super::edit_format`]).
    /// `None`: [`EditFormat::for_backend`] (blocks on the local engine).
    pub edit_format: Option<EditFormat>,
    /// MCP servers whose tools join the session's ([`super::mcp_servers`]).
    pub mcp_servers: std::collections::BTreeMap<String, super::mcp_servers::McpServerConfig>,
}

impl SessionSettings {
    /// The defaults of `agentd chat` in `cwd`: Pi's tools, everything allowed, compaction and grounding on.
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        Self {
            tools: None,
            policy: Policy::all(),
            approvals: ApprovalPolicy::allow_all(),
            cwd: cwd.into(),
            workspace: None,
            system_prompt: None,
            append_system_prompt: None,
            context_files: true,
            skills: true,
            max_tokens: None,
            thinking: None,
            max_turns: crate::agent::hooks::DEFAULT_MAX_TURNS,
            sampling: Sampling::default(),
            compaction: CompactionSettings::default(),
            grounding: true,
            sessions_dir: None,
            bash_timeout: None,
            workspace_grammar: true,
            loop_rules: true,
            edit_format: None,
            mcp_servers: Default::default(),
        }
    }
}

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
    /// Prompt templates (`/name args…`), found in the user's and the project's `prompts/` directories.
    pub templates: Vec<templates::PromptTemplate>,
    pub warnings: Vec<String>,
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
    edit_format: EditFormat,
    /// The files the running prompt named (blocks: asked about after a block lands).
    named_files: edit_format::NamedFiles,
    /// `bash` blocks run (file blocks with the `bash` tool offered).
    bash_blocks: bool,
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

/// The tools the settings ask for, less those the policy forbids (with a warning when they were named).
fn build_tools(settings: &SessionSettings) -> Result<OfferedTools, AppError> {
    let named = settings.tools.is_some();
    let names: Vec<String> = match &settings.tools {
        Some(list) => list
            .iter()
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty() && n != RECALL_TOOL)
            .collect(),
        None => DEFAULT_TOOLS.iter().map(|s| s.to_string()).collect(),
    };
    let registry =
        ToolRegistry::builtin(&names).map_err(|e| AppError::usage(format!("tools: {e}")))?;
    let mut warnings = Vec::new();
    let mut tools = Vec::new();
    // File blocks write through `write_block` whenever the session may write files.
    let blocks = (settings.edit_format == Some(EditFormat::Blocks))
        .then(|| Arc::new(crate::tools::write_block::WriteBlockTool::new()) as Arc<dyn Tool>);
    for tool in registry.iter().chain(blocks.iter()) {
        let tool = match (tool.spec().name.as_str(), settings.bash_timeout) {
            ("bash", Some(t)) => {
                Arc::new(BashTool::new().with_default_timeout(Some(t))) as Arc<dyn Tool>
            }
            _ => tool.clone(),
        };
        match settings.policy.check(tool.as_ref()) {
            Ok(()) => tools.push(tool),
            Err(why) if named => {
                warnings.push(format!("tool `{}` left out: {why}", tool.spec().name));
            }
            Err(_) => {}
        }
    }
    Ok((tools, warnings))
}

/// `tools` with `recall` over `blobs` in place of any earlier `recall`.
fn with_recall(tools: &[Arc<dyn Tool>], blobs: BlobStore) -> Vec<Arc<dyn Tool>> {
    let mut out: Vec<Arc<dyn Tool>> = tools
        .iter()
        .filter(|t| t.spec().name != RECALL_TOOL)
        .cloned()
        .collect();
    out.push(Arc::new(RecallTool::new(blobs)));
    out
}

/// Reads `value` as a file when it names one, else takes it as the text itself (Pi's rule for
/// `--system-prompt` and `--append-system-prompt`).
pub fn text_or_file(value: &str) -> Result<String, AppError> {
    let path = Path::new(value);
    if value.len() < 4096 && !value.contains('\n') && path.is_file() {
        return std::fs::read_to_string(path)
            .map_err(|e| AppError::usage(format!("cannot read {}: {e}", path.display())));
    }
    Ok(value.to_string())
}

impl CodingSession {
    /// Validates the settings, opens the session `choice` names, builds the tools and the system prompt, and
    /// restores the session's transcript. The backend is ready (see [`Backend::connect`]).
    pub async fn start(
        settings: SessionSettings,
        backend: Backend,
        choice: &SessionChoice,
    ) -> Result<Self, AppError> {
        let workspace = match &settings.workspace {
            Some(w) => Some(
                std::fs::canonicalize(w)
                    .map_err(|e| AppError::usage(format!("workspace {}: {e}", w.display())))?,
            ),
            None => None,
        };
        if let Some(w) = workspace.as_ref().filter(|w| !w.is_dir()) {
            return Err(AppError::usage(format!(
                "workspace {} is not a directory",
                w.display()
            )));
        }
        // Relative paths resolve against the working directory; outside the workspace that would refuse every
        // path, so the workspace root becomes the working directory then.
        let cwd = match &workspace {
            Some(w) if !settings.cwd.starts_with(w) => w.clone(),
            _ => settings.cwd.clone(),
        };
        if settings.max_turns == 0 {
            return Err(AppError::usage("max_turns must be at least 1"));
        }
        let denied_free = settings.approvals.policy();
        let edit_format = settings
            .edit_format
            .unwrap_or_else(|| EditFormat::for_backend(&backend.kind));
        // File blocks (the small local models' format) decode greedily unless a temperature is set, as Aider
        // runs its models at temperature 0: on benches/agent_tasks Qwen2.5-Coder-0.5B passed 62% of the tasks at
        // temperature 0 and 53% at its generation config's 0.7 (the notes of issue 29).
        let mut sampling = settings.sampling.clone();
        if edit_format == EditFormat::Blocks && sampling.temperature.is_none() {
            sampling.temperature = Some(0.0);
        }
        let settings = SessionSettings {
            policy: Policy::from_tags(settings.policy.allowed().filter(|t| denied_free.allows(*t))),
            edit_format: Some(edit_format),
            sampling,
            ..settings
        };
        let (mut tools, mut warnings) = build_tools(&settings)?;
        let (mcp_tools, mcp_warnings) =
            super::mcp_servers::start(&settings.mcp_servers, &cwd, &settings.policy).await;
        tools.extend(mcp_tools);
        warnings.extend(mcp_warnings);
        let sessions_dir = settings
            .sessions_dir
            .clone()
            .unwrap_or_else(|| crate::session::sessions_dir(&cwd));
        let persist = *choice != SessionChoice::InMemory;
        let grounding = settings.grounding && persist;
        let recall_allowed = settings
            .policy
            .check_tags(RECALL_TOOL, &[crate::tools::tool::PolicyTag::ReadOnly])
            .is_ok();
        let grounding = grounding && recall_allowed;
        let tools = if grounding {
            with_recall(&tools, BlobStore::beside(&sessions_dir))
        } else {
            tools
        };
        let store = sessions::open(choice, &sessions_dir, &cwd)?;

        let context_files = if settings.context_files {
            prompt::context_files(&cwd)
        } else {
            Vec::new()
        };
        let found = if settings.skills {
            let (found, skill_warnings) = skills::discover(&prompt::skill_dirs(&cwd));
            warnings.extend(skill_warnings);
            found
        } else {
            Vec::new()
        };
        let (found_templates, template_warnings) =
            templates::discover(&templates::template_dirs(&cwd));
        warnings.extend(template_warnings);
        let tool_names: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
        // One listing of the workspace serves the prompt's tree and the session's grammars.
        let workspace_state = settings
            .workspace_grammar
            .then(|| WorkspaceState::new(&cwd));
        let system_prompt = prompt::build(&PromptInputs {
            custom: settings.system_prompt.clone(),
            append: settings.append_system_prompt.clone(),
            tools: tool_names,
            context_files: context_files.clone(),
            skills: found.clone(),
            cwd: cwd.clone(),
            tree: workspace_state
                .as_ref()
                .map(|state| state.tree(prompt::TREE_LINES)),
            date: crate::env::today(),
            edit_format,
        });

        let mut config = AgentLoopConfig::new(backend.provider.clone());
        config.model = backend.model.clone();
        config.max_tokens = settings.max_tokens;
        config.thinking = settings.thinking;
        config.max_turns = settings.max_turns;
        config.sampling = settings.sampling.clone();
        config.policy = settings.policy.clone();
        config.cwd = cwd.clone();
        config.workspace = workspace.clone();
        config.context_policy = Some(Arc::new(Compactor::new(settings.compaction.clone())));
        let resources = SessionResources::new();
        config.resources = Some(resources.clone());
        let approvals = Approvals::new(settings.approvals.clone());
        let approve = approvals.hook(HookContext {
            tags: tools
                .iter()
                .map(|t| (t.spec().name.clone(), t.tags().to_vec()))
                .collect(),
            cwd: cwd.clone(),
            workspace: workspace.clone(),
        });
        config.before_tool_call = Some(approve);
        config.workspace_state = workspace_state.clone();
        if settings.workspace_grammar {
            config.choose_tools = Some(Arc::new(super::loop_rules::act_on_named_files));
        }
        let named_files = edit_format::NamedFiles::new(&cwd);
        let bash_blocks =
            edit_format == EditFormat::Blocks && tools.iter().any(|t| t.spec().name == "bash");
        if edit_format == EditFormat::Blocks {
            edit_format::install(&mut config, workspace_state.clone(), bash_blocks);
            named_files.install(&mut config);
        }
        if settings.loop_rules {
            LoopRules::new(mutating_tools(&tools), cwd.clone()).install(&mut config);
        }
        let agent = Agent::new(config, system_prompt, tools);
        let session = Self {
            inner: Arc::new(Inner {
                agent: Mutex::new(agent.clone()),
                listeners: Mutex::new(Vec::new()),
                recording: Mutex::new(None),
                persist,
                backend: Mutex::new(backend),
                cwd,
                workspace,
                sessions_dir,
                compaction: settings.compaction,
                grounding,
                resources: Mutex::new(resources),
                approvals,
                workspace_state,
                edit_format,
                named_files,
                bash_blocks,
                report: SetupReport {
                    context_files: context_files.into_iter().map(|f| f.path).collect(),
                    skills: found,
                    templates: found_templates,
                    warnings,
                },
            }),
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
        match &self.inner.workspace_state {
            // File blocks: the named files first, in the format the model writes them back in.
            Some(state) if self.inner.edit_format == EditFormat::Blocks => {
                let files = super::mentions::named_files(text, state);
                self.inner.named_files.set(text, &files);
                let mut prompt = edit_format::prompt_with_files(&expanded, &files);
                if self.inner.bash_blocks && edit_format::asks_for_a_command(text) {
                    prompt.push('\n');
                    prompt.push_str(edit_format::COMMAND_CUE);
                }
                Ok(prompt)
            }
            Some(state) => Ok(super::mentions::attach_named_files(&expanded, text, state)),
            None => Ok(expanded),
        }
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
