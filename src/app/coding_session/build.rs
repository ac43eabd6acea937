//! Building a [`CodingSession`](super::CodingSession) from [`SessionSettings`] and a [`Backend`]: the settings
//! checked, the tools they name (less those the policy forbids; MCP servers' tools; `recall` when grounding is
//! on), the system prompt (base or custom, context files, skills, templates, the workspace tree), the loop's
//! configuration with its hooks (approvals, compaction, edit format, loop rules) and the session file the
//! choice names. Running the session is `coding_session.rs`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::agent::{Agent, AgentLoopConfig, CompactionSettings, Compactor};
use crate::provider::Sampling;
use crate::session::{BlobStore, JsonlStore};
use crate::tools::bash::BashTool;
use crate::tools::policy::{FileScope, Policy};
use crate::tools::recall::RecallTool;
use crate::tools::registry::ToolRegistry;
use crate::tools::support::session_resources::SessionResources;
use crate::tools::support::workspace::WorkspaceState;
use crate::tools::tool::Tool;

use super::Inner;
use crate::app::approvals::{ApprovalPolicy, Approvals, HookContext};
use crate::app::harness::{self, EditFormat, Harness, HarnessSetup, Profile, RuleId};
use crate::app::sessions::{self, SessionChoice};
use crate::app::system_prompt::{self, PromptInputs};
use crate::app::{skills, templates, AppError, Backend};

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
    /// Which calls run, are asked about or are refused ([`crate::app::approvals`]); tags it denies are taken out
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
    /// The harness profile ([`crate::app::harness`]); `None`: the model's (its manifest's on the local engine,
    /// `capable` for a remote server).
    pub harness: Option<Profile>,
    /// Harness rules turned off (ablation; `--no-loop-rules` turns off the loop's guards).
    pub harness_off: Vec<RuleId>,
    /// How the model changes files: JSON tool calls, or file blocks in its reply ([`crate::app::harness::blocks`]).
    /// `None`: the profile's (blocks for small local models).
    pub edit_format: Option<EditFormat>,
    /// On the local engine with file blocks, constrain each reply to the blocks grammar
    /// ([`crate::app::harness::blocks_grammar`]). Off by default: an experiment.
    pub blocks_grammar: bool,
    /// Where the harness traces the rules that act (`agentd run --harness-trace`; the agent bench's ablation).
    pub harness_trace: Option<PathBuf>,
    /// MCP servers whose tools join the session's ([`crate::app::mcp_servers`]).
    pub mcp_servers: std::collections::BTreeMap<String, crate::app::mcp_servers::McpServerConfig>,
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
            harness: None,
            harness_off: Vec::new(),
            edit_format: None,
            blocks_grammar: false,
            harness_trace: None,
            mcp_servers: Default::default(),
        }
    }
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
pub(super) fn with_recall(tools: &[Arc<dyn Tool>], blobs: BlobStore) -> Vec<Arc<dyn Tool>> {
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

/// Everything [`CodingSession::start`](super::CodingSession::start) needs: the session's state, its first agent
/// and the session file to attach (`None`: in memory, or created with the first prompt).
pub(super) async fn assemble(
    settings: SessionSettings,
    backend: Backend,
    choice: &SessionChoice,
) -> Result<(Inner, Agent, Option<Arc<JsonlStore>>), AppError> {
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
    let profile = choose_profile(&settings, &backend);
    let edit_format = settings.edit_format.unwrap_or(profile.edit_format);
    // The profile's temperature is for its own edit format.
    let mut sampling = settings.sampling.clone();
    if edit_format == profile.edit_format && sampling.temperature.is_none() {
        sampling.temperature = profile.temperature;
    }
    let settings = SessionSettings {
        policy: Policy::from_tags(settings.policy.allowed().filter(|t| denied_free.allows(*t))),
        edit_format: Some(edit_format),
        sampling,
        ..settings
    };
    let (mut tools, mut warnings) = build_tools(&settings)?;
    let (mcp_tools, mcp_warnings) =
        crate::app::mcp_servers::start(&settings.mcp_servers, &cwd, &settings.policy).await;
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
    // Every file read for the session beside its tools (context files, skills, templates, the harness's rules)
    // is read within the tools' own confinement.
    let scope = FileScope::new(cwd.clone(), workspace.clone());

    let context_files = if settings.context_files {
        system_prompt::context_files(&scope)
    } else {
        Vec::new()
    };
    let found = if settings.skills {
        let (found, skill_warnings) = skills::discover(&system_prompt::skill_dirs(&scope));
        warnings.extend(skill_warnings);
        found
    } else {
        Vec::new()
    };
    let (found_templates, template_warnings) =
        templates::discover(&templates::template_dirs(&scope));
    warnings.extend(template_warnings);
    let tool_names: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
    // One listing of the workspace serves the prompt's tree and the session's grammars.
    let workspace_state = settings
        .workspace_grammar
        .then(|| WorkspaceState::new(&cwd));
    let system_prompt = system_prompt::build(&PromptInputs {
        custom: settings.system_prompt.clone(),
        append: settings.append_system_prompt.clone(),
        tools: tool_names,
        context_files: context_files.clone(),
        skills: found.clone(),
        cwd: cwd.clone(),
        tree: workspace_state
            .as_ref()
            .map(|state| state.tree(system_prompt::TREE_LINES)),
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
    let bash = tools.iter().find(|t| t.spec().name == "bash").cloned();
    // Check commands run only where a command runs without asking.
    let commands = match (bash, &workspace_state) {
        (Some(bash), Some(state)) if denied_free.allows(crate::tools::tool::PolicyTag::Exec) => {
            Some(harness::rules::self_check::CommandRunner {
                bash,
                cwd: cwd.clone(),
                workspace: workspace.clone(),
                state: state.clone(),
            })
        }
        _ => None,
    };
    let harness = Harness::new(HarnessSetup {
        profile,
        format: edit_format,
        scope: scope.clone(),
        state: workspace_state.clone(),
        tools: harness::mutating_tools(&tools),
        commands,
        blocks_grammar: settings.blocks_grammar && backend.kind == crate::app::BackendKind::Local,
        trace: settings.harness_trace.clone(),
    });
    config.harness = Some(harness.clone());
    let agent = Agent::new(config, system_prompt, tools);
    let inner = Inner {
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
        harness,
        report: SetupReport {
            context_files: context_files.into_iter().map(|f| f.path).collect(),
            skills: found,
            templates: found_templates,
            warnings,
        },
    };
    Ok((inner, agent, store))
}

/// The harness profile of a session: the one the settings name, else the model's (its manifest's on the local
/// engine; a remote server or a provider the caller built is `capable` unless the session asks for file blocks,
/// the small models' format), less the rules the settings turn off.
fn choose_profile(settings: &SessionSettings, backend: &Backend) -> Profile {
    let profile = match (&settings.harness, &backend.kind) {
        (Some(p), _) => p.clone(),
        (None, crate::app::BackendKind::Local) => Profile::for_local_model(&backend.model),
        (None, _) if settings.edit_format == Some(EditFormat::Blocks) => Profile::small(),
        (None, _) => Profile::capable(),
    };
    profile.without(&settings.harness_off)
}
