//! What `agentd chat` and `agentd run` share: the flags that pick the backend, the tools, the system prompt and
//! the session; turning them into a ready [`CodingSession`]; and the exit codes scripts can rely on.
//!
//! Files: `backend` (local engine, `--remote`, a config file, or the test-only scripted provider), `scripted`
//! (that provider's JSON script and request log), `prompt` (the system prompt, `AGENTS.md` context files),
//! `skills` (`SKILL.md` discovery), `sessions` (where sessions live and how `-c`/`-r`/`--session` find one),
//! `coding_session` (the agent plus its session: what every mode drives).
//!
//! ## Where things live
//! - **Config dir** (`AGENTS.md`/`CLAUDE.md`, `skills/`): `$AGENTD_HOME` when set (one variable relocates
//!   everything; tests rely on it), else `~/.config/agentd`.
//! - **Sessions**: `$AGENTD_HOME/sessions/<directory slug>/` (`$AGENTD_HOME` defaults to `~/.cache/agentd`).
//! - **Project**: `AGENTS.md` (else `CLAUDE.md`) in the working directory and every ancestor up to `/`;
//!   skills in `.agentd/skills/*/SKILL.md` of the working directory.
//!
//! ## Exit codes
//! `0` success · `1` the run failed (model or provider error, turn limit, internal error) · `2` usage (bad flags
//! or values, unknown tool or policy tag, a session that does not exist, nothing to prompt) · `3` the backend
//! is unavailable (the model cannot be loaded, `--remote` unreachable or refusing) · `130` aborted (Ctrl-C,
//! Esc, an RPC `abort` in print mode).

pub mod backend;
pub mod coding_session;
pub mod prompt;
pub mod scripted;
pub mod sessions;
pub mod skills;

use std::io::Write as _;
use std::path::PathBuf;

pub use coding_session::CodingSession;

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

    pub fn backend(message: impl Into<String>) -> anyhow::Error {
        Failure {
            code: exit::BACKEND,
            message: message.into(),
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
    /// A GGUF file to load instead of a named model.
    #[arg(long, value_name = "FILE.gguf", conflicts_with_all = ["model", "remote"])]
    pub model_path: Option<PathBuf>,
    /// auto | cpu | cuda | cuda:N | metal (local engine).
    #[arg(long, default_value = "auto", env = "AGENTD_DEVICE")]
    pub device: String,
    /// How quantized weights are kept: auto | native | q8_0 (local engine).
    #[arg(long, default_value = "auto")]
    pub weights: agentd::engine::model::WeightFormat,
    /// Use only the model cache; fetch nothing.
    #[arg(long)]
    pub offline: bool,
    /// Use an OpenAI-compatible server (`agentd serve`, vLLM) at URL instead of the in-process engine.
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,
    /// The environment variable holding the remote server's API key.
    #[arg(long, value_name = "VAR", requires = "remote")]
    pub api_key_env: Option<String>,
    /// A configuration file (`configs/*.toml`): provider, engine and remote settings. Flags override it.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,

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
    /// What tools may do: read_only, write, exec, network (comma-separated), or all / none.
    #[arg(long, value_name = "TAGS", default_value = "all")]
    pub allow: String,

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

    /// Most tokens one model reply may generate.
    #[arg(long, default_value_t = 4096)]
    pub max_tokens: u32,
    /// Model calls per prompt before the run stops.
    #[arg(long, default_value_t = agentd::agent::hooks::DEFAULT_MAX_TURNS)]
    pub max_turns: usize,
    /// Sampling temperature (default: the backend's).
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

/// Reads `value` as a file when it names one, else takes it as the text itself (Pi's rule).
pub fn text_or_file(value: &str) -> anyhow::Result<String> {
    let path = std::path::Path::new(value);
    if value.len() < 4096 && !value.contains('\n') && path.is_file() {
        return std::fs::read_to_string(path)
            .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display())));
    }
    Ok(value.to_string())
}

/// The working directory, absolute.
pub fn current_dir() -> anyhow::Result<PathBuf> {
    std::env::current_dir()
        .map_err(|e| anyhow::anyhow!("cannot determine the working directory: {e}"))
}
