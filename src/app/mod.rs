//! The application layer: the coding session as a library — the agent with its backend, tools, policy,
//! workspace, system prompt (`AGENTS.md`/`CLAUDE.md`, skills), compaction with grounding and `recall`, and the
//! session store with its recorder. Every door builds sessions here: `agentd chat`, `agentd run` (all modes) and
//! the HTTP sessions API, so a session compacts, grounds and recalls the same whichever door it came through.
//! `cli/` keeps flags and the terminal UI; `server/` keeps routes.
//!
//! Files: `approvals` (allow / ask / deny per tool tag, and the requests a door answers), `coding_session` ([`CodingSession`] and its tree operations), `backend` ([`Backend`]: the provider
//! built from a [`crate::config::Config`], or one the caller made), `prompt` (the system prompt, the workspace's file tree and context
//! files), `loop_rules` (repeats answered, a shrinking rewrite stopped), `edit_format` (JSON tool calls or file blocks in
//! the reply), `block_owner` (the file a block written without its path rewrites), `named_files` (the running
//! prompt's task and named files, as the blocks hooks use them), `skills` (`SKILL.md` discovery), `lookup` (where context files, skills, templates and project settings are
//! looked for, and through which file scope each is read), `sessions` (where sessions live and how one is picked), `settings` (the user's and the project's
//! `settings.toml`), `recorder`
//! ([`Recorder`]: the glue between an `Agent` and a `SessionStore`), `error` ([`AppError`]).
//!
//! ## Where things live
//! - **Config dir** (`AGENTS.md`/`CLAUDE.md`, `skills/`): [`crate::env::config_dir`].
//! - **Sessions**: `$AGENTD_HOME/sessions/<directory slug>/` unless [`SessionSettings::sessions_dir`] says
//!   otherwise; dropped tool results in `refs/` beside them.
//! - **Project**: `AGENTS.md` (else `CLAUDE.md`) in the working directory and every ancestor up to `/` (a
//!   confined session: up to its workspace root); skills in `.agentd/skills/*/SKILL.md` of the working directory.
//!   A confined session reads them within its workspace ([`lookup`]).

pub mod approvals;
pub mod backend;
pub mod block_owner;
pub mod coding_session;
pub mod edit_format;
mod error;
pub mod export;
pub mod harness;
pub mod local_engine;
pub mod lookup;
pub mod loop_rules;
pub mod mcp_servers;
pub mod mentions;
#[cfg(feature = "local")]
pub mod model_catalog;
pub mod named_files;
pub mod recorder;
pub mod second_choice;
pub mod sessions;
pub mod settings;
pub mod skills;
pub mod system_prompt;
pub mod templates;

pub use backend::{Backend, BackendKind};
pub use coding_session::{
    text_or_file, CodingSession, ContextUsage, SessionSettings, SetupReport, DEFAULT_TOOLS,
    RECALL_TOOL,
};
pub use error::AppError;
pub use recorder::Recorder;
pub use sessions::SessionChoice;
