//! The settings files of `agentd chat` and `agentd run`: the user's (`~/.agentd/settings.toml`, or
//! `$AGENTD_HOME/settings.toml` when `AGENTD_HOME` is set) and the project's (`.agentd/settings.toml` in the
//! working directory). The project's override the user's key by key, and command-line flags override both.
//!
//! ```toml
//! model = "qwen2.5-coder-0.5b"   # a known name, or the served model id with `remote`
//! device = "cpu"                 # auto | cpu | cuda | cuda:N | metal
//! remote = "http://gpu-box:8000" # use an OpenAI-compatible server instead of the in-process engine
//! thinking = "off"               # off | minimal | low | medium | high (reasoning models)
//! tools = ["read", "edit", "write", "bash"]
//! bash_timeout = 300             # seconds
//! max_tokens = 4096
//! max_turns = 50
//! temperature = 0.2
//! edit_format = "blocks"         # blocks | tools | auto (blocks on the local engine)
//!
//! [mcp.servers.files]            # MCP servers whose tools the agent may call (see `app::mcp_servers`)
//! command = "python3"
//! args = ["files_server.py"]
//!
//! [approvals]                    # per tool tag: allow | ask | deny ("all" sets every tag)
//! write = "allow"
//! exec = "ask"
//!
//! [compaction]
//! enabled = true
//! reserve_tokens = 16384
//! keep_recent_tokens = 20000
//! summarize = true
//! ```
//!
//! An unknown key or a value of the wrong type is an error naming the file (never silently ignored).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::approvals::{Approval, ApprovalPolicy};
use super::AppError;
use crate::provider::Thinking;
use crate::tools::policy::{FileScope, Policy};

/// One settings file, as written (every key optional).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsFile {
    pub model: Option<String>,
    pub device: Option<String>,
    pub remote: Option<String>,
    pub thinking: Option<Thinking>,
    pub tools: Option<Vec<String>>,
    pub bash_timeout: Option<f64>,
    pub max_tokens: Option<u32>,
    pub max_turns: Option<usize>,
    pub temperature: Option<f32>,
    /// `blocks`, `tools` or `auto`.
    pub edit_format: Option<String>,
    /// Tag (`read_only`, `write`, `exec`, `network`, `all`) → mode.
    pub approvals: Option<BTreeMap<String, Approval>>,
    pub compaction: Option<CompactionFile>,
    /// `[mcp.servers.NAME]` tables (see `app::mcp_servers`).
    pub mcp: Option<McpFile>,
}

/// `[mcp]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpFile {
    #[serde(default)]
    pub servers: BTreeMap<String, super::mcp_servers::McpServerConfig>,
}

/// `[compaction]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionFile {
    pub enabled: Option<bool>,
    pub reserve_tokens: Option<u64>,
    pub keep_recent_tokens: Option<u64>,
    pub summarize: Option<bool>,
}

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// agentd's default (for the door in question).
    Default,
    /// The user's settings file.
    User(PathBuf),
    /// The project's settings file.
    Project(PathBuf),
    /// A command-line flag (or the environment variable standing in for it).
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::User(p) => write!(f, "user {}", p.display()),
            Source::Project(p) => write!(f, "project {}", p.display()),
            Source::Flag(name) => f.write_str(name),
        }
    }
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

/// The settings files merged key by key (later files win), each value with its file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FileSettings {
    pub model: Option<Sourced<String>>,
    pub device: Option<Sourced<String>>,
    pub remote: Option<Sourced<String>>,
    pub thinking: Option<Sourced<Thinking>>,
    pub tools: Option<Sourced<Vec<String>>>,
    pub bash_timeout: Option<Sourced<f64>>,
    pub max_tokens: Option<Sourced<u32>>,
    pub max_turns: Option<Sourced<usize>>,
    pub temperature: Option<Sourced<f32>>,
    /// `Some(None)`: `auto` written out.
    pub edit_format: Option<Sourced<Option<super::harness::EditFormat>>>,
    /// Per tag, in the order the files set them (an `all` expands to every tag).
    pub approvals: Vec<(Policy, Sourced<Approval>)>,
    pub compaction_enabled: Option<Sourced<bool>>,
    pub reserve_tokens: Option<Sourced<u64>>,
    pub keep_recent_tokens: Option<Sourced<u64>>,
    pub summarize: Option<Sourced<bool>>,
    /// MCP servers by name (the project's table replaces the user's of the same name).
    pub mcp_servers: BTreeMap<String, super::mcp_servers::McpServerConfig>,
}

/// The user's settings file (see the module docs).
pub fn user_path() -> PathBuf {
    if let Some(h) = std::env::var_os("AGENTD_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h).join("settings.toml");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".agentd").join("settings.toml")
}

/// The project's settings file in `cwd`.
pub fn project_path(cwd: &Path) -> PathBuf {
    cwd.join(".agentd").join("settings.toml")
}

/// The largest settings file read.
const MAX_SETTINGS_BYTES: u64 = 1024 * 1024;

/// Reads one settings file; `None` when it does not exist. A file that does not parse is a usage error.
pub fn read(path: &Path) -> Result<Option<SettingsFile>, AppError> {
    read_within(&FileScope::unconfined(path.parent().unwrap_or(path)), path)
}

/// [`read`] within `scope`: a file that resolves outside it (a link out of a confined workspace) is an error
/// that shows nothing of it.
pub fn read_within(scope: &FileScope, path: &Path) -> Result<Option<SettingsFile>, AppError> {
    let cannot = |e: String| AppError::usage(format!("cannot read {}: {e}", path.display()));
    if let Err(e) = scope.resolve(path) {
        return Err(cannot(e.to_string()));
    }
    if !scope.exists(path) {
        return Ok(None);
    }
    let bytes = scope
        .read_bytes(path, MAX_SETTINGS_BYTES)
        .map_err(|e| cannot(e.to_string()))?;
    let text = String::from_utf8(bytes).map_err(|_| cannot("not UTF-8 text".into()))?;
    let file: SettingsFile = toml::from_str(&text).map_err(|e| {
        let at = match e.span() {
            Some(span) => {
                let line = text[..span.start.min(text.len())].matches('\n').count();
                let shown = text.lines().nth(line).unwrap_or("").trim();
                format!(":{}: `{shown}`", line + 1)
            }
            None => String::new(),
        };
        AppError::usage(format!("{}{at}: {}", path.display(), e.message().trim()))
    })?;
    if let Some(approvals) = &file.approvals {
        for tag in approvals.keys() {
            tag.parse::<Policy>()
                .map_err(|e| AppError::usage(format!("{}: [approvals] {e}", path.display())))?;
        }
    }
    for (name, server) in file.mcp.iter().flat_map(|m| m.servers.iter()) {
        if let Some(problem) = server.problem() {
            return Err(AppError::usage(format!(
                "{}: [mcp.servers.{name}] {problem}",
                path.display()
            )));
        }
    }
    if let Some(format) = file.edit_format.as_deref().map(str::trim) {
        if format != "auto" {
            format
                .parse::<super::harness::EditFormat>()
                .map_err(|e| AppError::usage(format!("{}: edit_format: {e}", path.display())))?;
        }
    }
    if file
        .bash_timeout
        .is_some_and(|t| !t.is_finite() || t <= 0.0)
    {
        return Err(AppError::usage(format!(
            "{}: bash_timeout must be a positive number of seconds",
            path.display()
        )));
    }
    Ok(Some(file))
}

/// The user's file and the project's (in `project`'s working directory, read within that scope), merged.
pub fn load(project: &FileScope) -> Result<FileSettings, AppError> {
    let mut merged = FileSettings::default();
    let user = user_path();
    if let Some(file) = read(&user)? {
        merged.apply(file, &Source::User(user));
    }
    let path = project_path(project.cwd());
    if let Some(file) = read_within(project, &path)? {
        merged.apply(file, &Source::Project(path));
    }
    Ok(merged)
}

impl FileSettings {
    /// Lays `file` over what is there.
    pub fn apply(&mut self, file: SettingsFile, source: &Source) {
        fn set<T>(slot: &mut Option<Sourced<T>>, value: Option<T>, source: &Source) {
            if let Some(value) = value {
                *slot = Some(Sourced {
                    value,
                    source: source.clone(),
                });
            }
        }
        set(&mut self.model, file.model, source);
        set(&mut self.device, file.device, source);
        set(&mut self.remote, file.remote, source);
        set(&mut self.thinking, file.thinking, source);
        set(&mut self.tools, file.tools, source);
        set(&mut self.bash_timeout, file.bash_timeout, source);
        set(&mut self.max_tokens, file.max_tokens, source);
        set(&mut self.max_turns, file.max_turns, source);
        set(&mut self.temperature, file.temperature, source);
        if let Some(mcp) = file.mcp.clone() {
            let project = matches!(source, Source::Project(_));
            self.mcp_servers
                .extend(mcp.servers.into_iter().map(|(name, mut server)| {
                    server.project = project;
                    (name, server)
                }));
        }
        if let Some(format) = file.edit_format.as_deref().map(str::trim) {
            // Checked when the file is read (`load`), so a bad value never gets here.
            let value = format.parse().ok();
            self.edit_format = Some(Sourced {
                value,
                source: source.clone(),
            });
        }
        // `all` first, so a file's specific tags win over its `all`.
        let mut approvals: Vec<(String, Approval)> =
            file.approvals.unwrap_or_default().into_iter().collect();
        approvals.sort_by_key(|(tag, _)| tag.trim() != "all");
        for (tags, mode) in approvals {
            if let Ok(tags) = tags.parse::<Policy>() {
                self.approvals.push((
                    tags,
                    Sourced {
                        value: mode,
                        source: source.clone(),
                    },
                ));
            }
        }
        if let Some(c) = file.compaction {
            set(&mut self.compaction_enabled, c.enabled, source);
            set(&mut self.reserve_tokens, c.reserve_tokens, source);
            set(&mut self.keep_recent_tokens, c.keep_recent_tokens, source);
            set(&mut self.summarize, c.summarize, source);
        }
    }

    /// `base` with the files' approvals laid over it, and where each tag's mode came from.
    pub fn approvals_over(
        &self,
        base: ApprovalPolicy,
    ) -> (
        ApprovalPolicy,
        BTreeMap<crate::tools::tool::PolicyTag, Source>,
    ) {
        let mut policy = base;
        let mut sources = BTreeMap::new();
        for (tags, mode) in &self.approvals {
            for tag in tags.allowed() {
                policy.set(tag, mode.value);
                sources.insert(tag, mode.source.clone());
            }
        }
        (policy, sources)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tool::PolicyTag;

    #[test]
    fn project_overrides_user_key_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user.toml");
        let project = dir.path().join("project.toml");
        std::fs::write(
            &user,
            "model = \"a\"\ndevice = \"cpu\"\n[approvals]\nall = \"ask\"\nread_only = \"allow\"\n[compaction]\nsummarize = false\n",
        )
        .unwrap();
        std::fs::write(
            &project,
            "model = \"b\"\nthinking = \"off\"\n[approvals]\nexec = \"deny\"\n",
        )
        .unwrap();
        let mut merged = FileSettings::default();
        merged.apply(read(&user).unwrap().unwrap(), &Source::User(user.clone()));
        merged.apply(
            read(&project).unwrap().unwrap(),
            &Source::Project(project.clone()),
        );
        assert_eq!(merged.model.as_ref().unwrap().value, "b");
        assert_eq!(
            merged.model.as_ref().unwrap().source,
            Source::Project(project.clone())
        );
        assert_eq!(merged.device.as_ref().unwrap().source, Source::User(user));
        assert_eq!(merged.thinking.as_ref().unwrap().value, Thinking::Off);
        assert!(!merged.summarize.as_ref().unwrap().value);
        let (policy, sources) = merged.approvals_over(ApprovalPolicy::print());
        assert_eq!(
            policy.to_string(),
            "read_only=allow,write=ask,exec=deny,network=ask"
        );
        assert_eq!(sources[&PolicyTag::Exec], Source::Project(project));
        assert!(read(&dir.path().join("missing.toml")).unwrap().is_none());
    }

    #[test]
    fn bad_files_are_errors_that_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        for (text, needle) in [
            ("modle = \"x\"", "modle"),
            ("max_tokens = \"lots\"", "max_tokens"),
            ("[approvals]\nwrite = \"maybe\"", "maybe"),
            ("[approvals]\nwrote = \"ask\"", "wrote"),
            ("bash_timeout = -1", "bash_timeout"),
            ("model = ", "s.toml"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = read(&path).unwrap_err().to_string();
            assert!(e.contains("s.toml") && e.contains(needle), "{text:?}: {e}");
        }
    }
}
