//! What `agentd chat` and `agentd run` share on the command line: the flags that pick the backend, the tools,
//! the system prompt and the session; turning them into the application layer's [`SessionSettings`] and
//! [`Backend`] (through one `Config`, so `[cache]` and the engine settings mean what they mean for `serve`); and
//! the exit codes scripts can rely on. The coding session itself is `agentd::app`'s.
//!
//! Files: `effective` (defaults, settings files and flags layered into the effective settings, each value with
//! its source), `scripted` (the test-only scripted provider selected by an environment variable).
//!
//! ## Exit codes
//! `0` success · `1` the run failed (model or provider error, turn limit, internal error) · `2` usage (bad flags
//! or values, unknown tool or policy tag, a session that does not exist, nothing to prompt) · `3` the backend
//! is unavailable (the model cannot be loaded, `--remote` unreachable or refusing) · `130` aborted (Ctrl-C,
//! Esc, an RPC `abort` in print mode).

pub mod effective;
pub mod scripted;

use std::io::Write as _;
use std::path::PathBuf;

use agentd::app::{text_or_file, AppError, Backend, SessionChoice, SessionSettings};
use agentd::config::{Config, ProviderKind};
use agentd::provider::Sampling;

pub use agentd::app::CodingSession;

/// The `--help` epilogue of `chat` and `run`: exit codes and where things live.
pub const AFTER_HELP: &str = "\
Exit codes: 0 ok · 1 the run failed (model/provider error, turn limit) · 2 usage (bad flags, unknown tool or
policy tag, missing session, nothing to prompt) · 3 backend unavailable (model cannot load, --remote unreachable
or refusing) · 130 aborted (Ctrl-C).

Context: AGENTS.md (else CLAUDE.md) from the config dir and from / down to the working directory. Skills:
<config dir>/skills/*/SKILL.md and .agentd/skills/*/SKILL.md (front matter: name, description).
Config dir: $AGENTD_HOME if set, else ~/.config/agentd. Sessions: $AGENTD_HOME/sessions/<directory slug>/
($AGENTD_HOME defaults to ~/.cache/agentd).";

/// The exit codes of `chat` and `run` (see the module docs).
pub mod exit {
    pub const OK: u8 = 0;
    pub const FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const BACKEND: u8 = 3;
    pub const ABORTED: u8 = 130;
}

/// An error that carries the exit code it should end the process with.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> anyhow::Error {
        Failure {
            code: exit::USAGE,
            message: message.into(),
        }
        .into()
    }

    /// An application-layer error with the exit code its kind calls for.
    pub fn from_app(e: AppError) -> anyhow::Error {
        let code = match &e {
            AppError::Usage(_) | AppError::NotFound(_) => exit::USAGE,
            AppError::Backend(_) => exit::BACKEND,
            _ => exit::FAILED,
        };
        Failure {
            code,
            message: e.to_string(),
        }
        .into()
    }
}

/// The exit code for an error: the [`Failure`]'s own, else 1.
pub fn exit_code_of(e: &anyhow::Error) -> u8 {
    e.chain()
        .find_map(|c| c.downcast_ref::<Failure>())
        .map_or(exit::FAILED, |f| f.code)
}

/// Ends the process with `code` after flushing stdout; prints `error` to stderr first when there is one.
/// (`main` maps every error to 1; our exit codes need more.)
pub fn finish(result: anyhow::Result<u8>) -> anyhow::Result<()> {
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            exit_code_of(&e)
        }
    };
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    if code == exit::OK {
        return Ok(());
    }
    std::process::exit(i32::from(code));
}

/// Flags shared by `agentd chat` and `agentd run`.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// The model: a known name (`agentd model list`) for the local engine, or the served model id with
    /// `--remote` (default there: the server's first model).
    #[arg(long, env = "AGENTD_MODEL")]
    pub model: Option<String>,
    /// A GGUF file or a Hugging Face model folder to load instead of a named model.
    #[arg(long, value_name = "FILE.gguf", conflicts_with_all = ["model", "remote"])]
    pub model_path: Option<PathBuf>,
    /// auto | cpu | cuda | cuda:N | metal (local engine). Default: auto.
    #[arg(long, env = "AGENTD_DEVICE")]
    pub device: Option<String>,
    /// How quantized weights are kept: auto | native | q8_0 (local engine).
    #[cfg(feature = "local")]
    #[arg(long, default_value = "auto")]
    pub weights: agentd::engine::WeightFormat,
    /// Use only the model cache; fetch nothing.
    #[arg(long)]
    pub offline: bool,
    /// A Jinja chat template file used instead of the model's own (vLLM's `--chat-template`; local engine).
    #[arg(long, value_name = "FILE.jinja")]
    pub chat_template: Option<PathBuf>,
    /// Use an OpenAI-compatible server (`agentd serve`, vLLM) at URL instead of the in-process engine.
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,
    /// The environment variable holding the remote server's API key.
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// A configuration file (`configs/*.toml`): provider, engine, remote and cache settings. Flags override it.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// Answer repeated temperature-0 requests from the response cache (`[cache]` in the config file).
    #[arg(long)]
    pub cache: bool,

    /// The tools the model may call, comma-separated (read, write, edit, bash, ls, find, grep).
    /// Default: read,bash,edit,write.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        conflicts_with = "no_tools"
    )]
    pub tools: Option<Vec<String>>,
    /// Offer no tools at all.
    #[arg(long)]
    pub no_tools: bool,
    /// Confine the file tools to DIR (paths resolving outside it are refused).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Let tools with these tags run without asking: read_only, write, exec, network (comma-separated), or all.
    /// Defaults: `chat` and `--mode rpc` ask before write, exec and network; `run -p` allows read_only and
    /// write and denies exec and network (so bash needs `--allow exec`).
    #[arg(long, value_name = "TAGS")]
    pub allow: Option<String>,
    /// Ask before each call of a tool with these tags (y / n / always in chat, `approval_request` in RPC).
    #[arg(long, value_name = "TAGS")]
    pub ask: Option<String>,
    /// Never run tools with these tags (they are not offered to the model).
    #[arg(long, value_name = "TAGS")]
    pub deny: Option<String>,

    /// Replace the default system prompt (text, or the path of a file holding it).
    #[arg(long, value_name = "TEXT|FILE")]
    pub system_prompt: Option<String>,
    /// Text (or a file's text) appended to the system prompt.
    #[arg(long, value_name = "TEXT|FILE")]
    pub append_system_prompt: Option<String>,
    /// Do not load AGENTS.md / CLAUDE.md context files.
    #[arg(long)]
    pub no_context_files: bool,
    /// Do not list skills in the system prompt.
    #[arg(long)]
    pub no_skills: bool,
    /// Plain calls: no file tree in the system prompt, and the local engine constrains the built-in tools'
    /// arguments by their JSON Schema only (not to existing paths and `old_text` from the file).
    #[arg(long)]
    pub no_workspace_grammar: bool,
    /// Run every call as the model sends it: no answer for a repeated call, no stop for a shrinking rewrite.
    #[arg(long)]
    pub no_loop_rules: bool,
    /// The harness profile: `small` (file blocks, every rule) or `capable` (JSON tools, the self-check and the
    /// repeat guard only). Default: the model's.
    #[arg(long, value_name = "PROFILE")]
    pub harness_profile: Option<String>,
    /// Turn one harness rule off (repeatable; `agentd bench agent --ablate` measures what each buys).
    #[arg(long, value_name = "RULE")]
    pub ablate: Vec<agentd::app::harness::RuleId>,
    /// How the model changes files: `blocks` (it writes a file's path, then its new text in a fenced block;
    /// fenced `bash` blocks run), `tools` (JSON tool calls: edit, write, …) or `auto` (blocks on the local
    /// engine, tools on a remote server).
    #[arg(long, value_name = "FORMAT")]
    pub edit_format: Option<String>,
    /// With file blocks on the local engine, constrain each reply to the blocks grammar (path lines, fenced
    /// bodies, one-line `bash` blocks). Off by default: an experiment to measure.
    #[arg(long)]
    pub blocks_grammar: bool,
    /// Append the name of each harness rule that acts to FILE, once per rule (what `bench agent --ablate`
    /// reads).
    #[arg(long, value_name = "FILE", hide = true)]
    pub harness_trace: Option<std::path::PathBuf>,

    /// Most tokens one model reply may generate (default 4096).
    #[arg(long)]
    pub max_tokens: Option<u32>,
    /// How much a reasoning model thinks: off | minimal | low | medium | high (default: the model's).
    #[arg(long, value_name = "LEVEL")]
    pub thinking: Option<agentd::provider::Thinking>,
    /// Seconds a `bash` call may run when the model names no timeout (default 120; at most 1800).
    #[arg(long, value_name = "SECS")]
    pub bash_timeout: Option<f64>,
    /// Model calls per prompt before the run stops (default 50).
    #[arg(long)]
    pub max_turns: Option<usize>,
    /// Sampling temperature (default: 0 with file blocks, the local engine's edit format; else the backend's).
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Sampling seed.
    #[arg(long)]
    pub seed: Option<u64>,

    /// Continue the most recent session of this directory.
    #[arg(short = 'c', long = "continue", conflicts_with_all = ["resume", "session", "no_session"])]
    pub continue_session: bool,
    /// Pick a session of this directory to resume.
    #[arg(short = 'r', long, conflicts_with_all = ["session", "no_session"])]
    pub resume: bool,
    /// Open this session: a file path, or a session id (or a unique prefix of one) of this directory.
    #[arg(long, value_name = "PATH|ID", conflicts_with = "no_session")]
    pub session: Option<String>,
    /// Keep the conversation in memory only.
    #[arg(long)]
    pub no_session: bool,
}

impl AgentArgs {
    /// Which session to start with.
    pub fn session_choice(&self) -> SessionChoice {
        if self.no_session {
            SessionChoice::InMemory
        } else if self.continue_session {
            SessionChoice::Continue
        } else if let Some(s) = &self.session {
            SessionChoice::Open(s.clone())
        } else if self.resume {
            SessionChoice::Pick
        } else {
            SessionChoice::New
        }
    }

    /// The effective settings for `door`: defaults, settings files, these flags.
    pub fn effective(&self, door: effective::Door) -> anyhow::Result<effective::Effective> {
        effective::resolve(self, door, &current_dir()?)
    }

    /// The application layer's settings for these flags and settings files, in the working directory.
    pub fn settings(&self, eff: &effective::Effective) -> anyhow::Result<SessionSettings> {
        let mut settings = SessionSettings::new(current_dir()?);
        settings.tools = eff.tools.value.clone();
        settings.approvals = eff.approvals.clone();
        settings.policy = eff.approvals.policy();
        settings.workspace = match &self.workspace {
            Some(w) => Some(
                std::fs::canonicalize(w)
                    .map_err(|e| Failure::usage(format!("--workspace {}: {e}", w.display())))?,
            ),
            None => None,
        };
        let read = |v: &Option<String>| -> anyhow::Result<Option<String>> {
            v.as_deref()
                .map(text_or_file)
                .transpose()
                .map_err(Failure::from_app)
        };
        settings.system_prompt = read(&self.system_prompt)?;
        settings.append_system_prompt = read(&self.append_system_prompt)?;
        settings.context_files = !self.no_context_files;
        settings.skills = !self.no_skills;
        settings.workspace_grammar = !self.no_workspace_grammar;
        if self.no_loop_rules {
            settings
                .harness_off
                .extend(agentd::app::harness::profile::LOOP_GUARDS);
        }
        settings.harness_off.extend(self.ablate.iter().copied());
        if let Some(name) = &self.harness_profile {
            settings.harness =
                Some(agentd::app::harness::Profile::named(name).map_err(Failure::usage)?);
        }
        settings.edit_format = eff.edit_format.value;
        settings.blocks_grammar = self.blocks_grammar;
        settings.harness_trace = self.harness_trace.clone();
        settings.mcp_servers = eff.mcp_servers.clone();
        settings.max_tokens = Some(eff.max_tokens.value);
        settings.max_turns = eff.max_turns.value.max(1);
        settings.thinking = eff.thinking.value;
        settings.compaction = eff.compaction.clone();
        settings.bash_timeout = crate::cli::serve::bash_timeout(eff.bash_timeout.value)
            .map_err(|e| Failure::usage(e.to_string()))?;
        settings.sampling = Sampling {
            temperature: eff.temperature.value,
            seed: self.seed,
            ..Sampling::default()
        };
        Ok(settings)
    }

    /// The configuration these flags describe: `--config`'s file (else the defaults), with the effective
    /// remote, model, device and `--weights`, `--offline`, `--cache` applied over it (settings files only where
    /// `--config` is not given: an explicit file beats the implicit ones).
    pub fn config(&self, eff: &effective::Effective) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => Config::load(path).map_err(|e| Failure::usage(e.to_string()))?,
            None => Config::default(),
        };
        let applies = |source: &agentd::app::settings::Source| {
            self.config.is_none() || matches!(source, agentd::app::settings::Source::Flag(_))
        };
        if let (Some(url), true) = (&eff.remote.value, applies(&eff.remote.source)) {
            let mut remote = config.remote.clone().unwrap_or_default();
            remote.base_url = normalise_base_url(url);
            if self.api_key_env.is_some() {
                remote.api_key_env = self.api_key_env.clone();
            }
            config.provider = ProviderKind::Remote;
            config.remote = Some(remote);
        }
        let model = eff
            .model
            .value
            .clone()
            .filter(|_| applies(&eff.model.source));
        match config.provider {
            ProviderKind::Remote => {
                if let (Some(m), Some(remote)) = (&model, config.remote.as_mut()) {
                    remote.model = m.clone();
                }
            }
            ProviderKind::Local => {
                if let Some(m) = &model {
                    config.engine.model = m.clone();
                }
                if applies(&eff.device.source) {
                    config.engine.device = eff.device.value.clone();
                }
                #[cfg(feature = "local")]
                if self.weights != agentd::engine::WeightFormat::Auto {
                    config.engine.weights = self.weights.to_string();
                }
                config.engine.offline |= self.offline;
                if let Some(t) = &self.chat_template {
                    config.engine.chat_template = Some(t.display().to_string());
                }
                config.engine.progress = true;
            }
        }
        if self.cache {
            config.cache.enabled = true;
        }
        Ok(config)
    }

    /// The backend: the test-only scripted provider when its variable is set, else the configured one (the
    /// model is loaded, or the server checked, now).
    pub async fn backend(&self, eff: &effective::Effective) -> anyhow::Result<Backend> {
        if let Some(path) = scripted::script_path() {
            let provider = scripted::load(&path).map_err(|e| Failure::usage(format!("{e:#}")))?;
            return Ok(Backend::given(
                provider,
                self.model.clone().unwrap_or_default(),
                "scripted",
            ));
        }
        let backend = Backend::connect(self.config(eff)?)
            .await
            .map_err(Failure::from_app)?;
        if let Some(note) = &backend.device_note {
            eprintln!("note: {note}");
        }
        Ok(backend)
    }

    /// Validates the flags, builds the backend and starts the coding session `choice` names, with the defaults
    /// of `door`.
    pub async fn start_session(
        &self,
        choice: &SessionChoice,
        door: effective::Door,
    ) -> anyhow::Result<CodingSession> {
        let eff = self.effective(door)?;
        let settings = self.settings(&eff)?;
        // A session that cannot be found fails before the model loads.
        if let SessionChoice::Open(spec) = choice {
            let dir = agentd::session::sessions_dir(&settings.cwd);
            agentd::app::sessions::find(&dir, spec).map_err(Failure::from_app)?;
        }
        let backend = self.backend(&eff).await?;
        CodingSession::start(settings, backend, choice)
            .await
            .map_err(Failure::from_app)
    }
}

/// `http://host:port` → `http://host:port/v1` (the OpenAI API root); a URL with a path is kept as given.
fn normalise_base_url(url: &str) -> String {
    let trimmed = url.trim().trim_end_matches('/');
    match reqwest::Url::parse(trimmed) {
        Ok(u) if u.path().is_empty() || u.path() == "/" => format!("{trimmed}/v1"),
        _ => trimmed.to_string(),
    }
}

/// The working directory, absolute.
pub fn current_dir() -> anyhow::Result<PathBuf> {
    std::env::current_dir()
        .map_err(|e| anyhow::anyhow!("cannot determine the working directory: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_get_the_api_root() {
        assert_eq!(
            normalise_base_url("http://127.0.0.1:8080"),
            "http://127.0.0.1:8080/v1"
        );
        assert_eq!(normalise_base_url("http://h:1/v1/"), "http://h:1/v1");
        assert_eq!(normalise_base_url("http://h/api"), "http://h/api");
    }
}
