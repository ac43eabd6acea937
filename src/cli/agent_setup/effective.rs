//! The effective settings of `agentd chat` / `agentd run`: agentd's defaults for the door (chat, print or RPC),
//! then the user's settings file, then the project's, then the command-line flags (see
//! `agentd::app::settings`). Every value remembers where it came from, for `agentd config show`.

use std::collections::BTreeMap;
use std::path::Path;

use agentd::agent::CompactionSettings;
use agentd::app::approvals::{Approval, ApprovalPolicy};
use agentd::app::harness::EditFormat;
use agentd::app::settings::{self, FileSettings, Source, Sourced};
use agentd::provider::Thinking;
use agentd::tools::tool::PolicyTag;

use super::{AgentArgs, Failure};

/// Which door the session opens through: it decides the default approvals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Door {
    /// `agentd chat`: ask before write, exec and network.
    Chat,
    /// `agentd run -p` / `--mode json`: allow read_only and write, deny exec and network.
    Print,
    /// `agentd run --mode rpc`: a client answers approval requests, so as chat.
    Rpc,
}

impl Door {
    pub fn default_approvals(self) -> ApprovalPolicy {
        match self {
            Door::Chat | Door::Rpc => ApprovalPolicy::interactive(),
            Door::Print => ApprovalPolicy::print(),
        }
    }

    fn command(self) -> &'static str {
        match self {
            Door::Chat => "agentd chat",
            Door::Print => "agentd run -p",
            Door::Rpc => "agentd run --mode rpc",
        }
    }
}

/// Every setting with its value and source.
#[derive(Debug, Clone)]
pub struct Effective {
    pub door: Door,
    /// `None`: the default model (or the server's first, with a remote).
    pub model: Sourced<Option<String>>,
    pub device: Sourced<String>,
    pub remote: Sourced<Option<String>>,
    pub thinking: Sourced<Option<Thinking>>,
    /// `None`: the default tools; empty: none.
    pub tools: Sourced<Option<Vec<String>>>,
    pub approvals: ApprovalPolicy,
    pub approval_sources: BTreeMap<PolicyTag, Source>,
    pub bash_timeout: Sourced<Option<f64>>,
    pub max_tokens: Sourced<u32>,
    pub max_turns: Sourced<usize>,
    pub temperature: Sourced<Option<f32>>,
    /// `None`: auto (blocks on the local engine, tools on a remote).
    pub edit_format: Sourced<Option<EditFormat>>,
    /// `[mcp.servers.NAME]` of the settings files.
    pub mcp_servers: std::collections::BTreeMap<String, agentd::app::mcp_servers::McpServerConfig>,
    pub compaction: CompactionSettings,
    /// Sources of `enabled`, `reserve_tokens`, `keep_recent_tokens`, `summarize`.
    pub compaction_sources: [Source; 4],
}

const DEFAULT_MAX_TOKENS: u32 = 4096;

fn flag(name: &str, env: Option<&str>, value: &str) -> Source {
    match env {
        Some(var) if std::env::var(var).is_ok_and(|v| v == value) => {
            Source::Flag(format!("environment {var}"))
        }
        _ => Source::Flag(name.to_string()),
    }
}

fn pick<T: Clone>(
    flag_value: Option<T>,
    flag_source: impl FnOnce(&T) -> Source,
    file: &Option<Sourced<T>>,
    default: T,
) -> Sourced<T> {
    if let Some(v) = flag_value {
        let source = flag_source(&v);
        return Sourced { value: v, source };
    }
    if let Some(f) = file {
        return f.clone();
    }
    Sourced {
        value: default,
        source: Source::Default,
    }
}

fn lift<T: Clone>(file: &Option<Sourced<T>>) -> Option<Sourced<Option<T>>> {
    file.as_ref().map(|s| Sourced {
        value: Some(s.value.clone()),
        source: s.source.clone(),
    })
}

/// Resolves `args` for `door` in `cwd`.
pub fn resolve(args: &AgentArgs, door: Door, cwd: &Path) -> anyhow::Result<Effective> {
    // The local user's own directory: its project settings are read as they are.
    let project = agentd::tools::policy::FileScope::unconfined(cwd);
    let files: FileSettings = settings::load(&project).map_err(Failure::from_app)?;
    let model = pick(
        args.model
            .clone()
            .or_else(|| {
                args.model_path
                    .as_deref()
                    .map(crate::cli::engine_args::path_as_model)
            })
            .map(Some),
        |v| match (&args.model_path, v) {
            (Some(_), _) => Source::Flag("--model-path".into()),
            (None, v) => flag("--model", Some("AGENTD_MODEL"), v.as_deref().unwrap_or("")),
        },
        &lift(&files.model),
        None,
    );
    let device = pick(
        args.device.clone(),
        |v| flag("--device", Some("AGENTD_DEVICE"), v),
        &files.device,
        "auto".to_string(),
    );
    let remote = pick(
        args.remote.clone().map(Some),
        |_| Source::Flag("--remote".into()),
        &lift(&files.remote),
        None,
    );
    let thinking = pick(
        args.thinking.map(Some),
        |_| Source::Flag("--thinking".into()),
        &lift(&files.thinking),
        None,
    );
    let tools_flag = if args.no_tools {
        Some(Some(Vec::new()))
    } else {
        args.tools.clone().map(Some)
    };
    let tools = pick(
        tools_flag,
        |_| {
            Source::Flag(if args.no_tools {
                "--no-tools".into()
            } else {
                "--tools".into()
            })
        },
        &lift(&files.tools),
        None,
    );
    let bash_timeout = pick(
        args.bash_timeout.map(Some),
        |_| Source::Flag("--bash-timeout".into()),
        &lift(&files.bash_timeout),
        None,
    );
    let max_tokens = pick(
        args.max_tokens,
        |_| Source::Flag("--max-tokens".into()),
        &files.max_tokens,
        DEFAULT_MAX_TOKENS,
    );
    let max_turns = pick(
        args.max_turns,
        |_| Source::Flag("--max-turns".into()),
        &files.max_turns,
        agentd::agent::hooks::DEFAULT_MAX_TURNS,
    );
    let temperature = pick(
        args.temperature.map(Some),
        |_| Source::Flag("--temperature".into()),
        &lift(&files.temperature),
        None,
    );

    let edit_format_flag = match args.edit_format.as_deref().map(str::trim) {
        None => None,
        Some("auto") => Some(None),
        Some(other) => {
            Some(Some(other.parse::<EditFormat>().map_err(|e| {
                Failure::usage(format!("--edit-format: {e}"))
            })?))
        }
    };
    let edit_format = pick(
        edit_format_flag,
        |_| Source::Flag("--edit-format".into()),
        &files.edit_format,
        None,
    );

    let (mut approvals, mut approval_sources) = files.approvals_over(door.default_approvals());
    for (value, mode, name) in [
        (&args.ask, Approval::Ask, "--ask"),
        (&args.allow, Approval::Allow, "--allow"),
        (&args.deny, Approval::Deny, "--deny"),
    ] {
        let Some(tags) = value else { continue };
        let parsed: agentd::tools::policy::Policy = tags
            .parse()
            .map_err(|e| Failure::usage(format!("{name}: {e}")))?;
        for tag in parsed.allowed() {
            approvals.set(tag, mode);
            approval_sources.insert(tag, Source::Flag(name.into()));
        }
    }

    let mut compaction = CompactionSettings::default();
    let mut compaction_sources: [Source; 4] = std::array::from_fn(|_| Source::Default);
    if let Some(s) = &files.compaction_enabled {
        compaction.enabled = s.value;
        compaction_sources[0] = s.source.clone();
    }
    if let Some(s) = &files.reserve_tokens {
        compaction.reserve_tokens = s.value;
        compaction_sources[1] = s.source.clone();
    }
    if let Some(s) = &files.keep_recent_tokens {
        compaction.keep_recent_tokens = s.value;
        compaction_sources[2] = s.source.clone();
    }
    if let Some(s) = &files.summarize {
        compaction.summarize = s.value;
        compaction_sources[3] = s.source.clone();
    }
    Ok(Effective {
        door,
        model,
        device,
        remote,
        thinking,
        tools,
        approvals,
        approval_sources,
        bash_timeout,
        max_tokens,
        max_turns,
        temperature,
        edit_format,
        mcp_servers: files.mcp_servers.clone(),
        compaction,
        compaction_sources,
    })
}

/// A TOML string literal.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

impl Effective {
    /// `(key, value as TOML, source)` for every setting, in the order of the settings file.
    pub fn rows(&self) -> Vec<(String, String, String)> {
        let mut rows = Vec::new();
        let mut row = |key: &str, value: String, source: &Source| {
            rows.push((key.to_string(), value, source.to_string()));
        };
        let unset = |what: &str| format!("# {what}");
        row(
            "model",
            self.model
                .value
                .as_deref()
                .map_or_else(|| unset("the default model"), quoted),
            &self.model.source,
        );
        row("device", quoted(&self.device.value), &self.device.source);
        row(
            "remote",
            self.remote
                .value
                .as_deref()
                .map_or_else(|| unset("none: the in-process engine"), quoted),
            &self.remote.source,
        );
        row(
            "thinking",
            self.thinking
                .value
                .map_or_else(|| unset("the model's default"), |t| quoted(t.as_str())),
            &self.thinking.source,
        );
        row(
            "tools",
            match &self.tools.value {
                Some(list) => {
                    let items: Vec<String> = list.iter().map(|t| quoted(t)).collect();
                    format!("[{}]", items.join(", "))
                }
                None => {
                    let items: Vec<String> = agentd::app::DEFAULT_TOOLS
                        .iter()
                        .map(|t| quoted(t))
                        .collect();
                    format!("[{}]", items.join(", "))
                }
            },
            &self.tools.source,
        );
        row(
            "bash_timeout",
            self.bash_timeout.value.map_or_else(
                || {
                    format!(
                        "{}",
                        agentd::tools::bash::DEFAULT_BASH_TIMEOUT.as_secs_f64()
                    )
                },
                |t| t.to_string(),
            ),
            &self.bash_timeout.source,
        );
        row(
            "max_tokens",
            self.max_tokens.value.to_string(),
            &self.max_tokens.source,
        );
        row(
            "max_turns",
            self.max_turns.value.to_string(),
            &self.max_turns.source,
        );
        row(
            "temperature",
            self.temperature.value.map_or_else(
                || unset("0 with file blocks, else the backend's default"),
                |t| t.to_string(),
            ),
            &self.temperature.source,
        );
        row(
            "edit_format",
            quoted(self.edit_format.value.map_or("auto", EditFormat::name)),
            &self.edit_format.source,
        );
        for (tag, mode) in self.approvals.modes() {
            let source = self
                .approval_sources
                .get(&tag)
                .cloned()
                .unwrap_or(Source::Default);
            let source = match source {
                Source::Default => Source::Flag(format!("default for {}", self.door.command())),
                other => other,
            };
            row(
                &format!("approvals.{}", tag.as_str()),
                quoted(mode.as_str()),
                &source,
            );
        }
        let c = &self.compaction;
        for (i, (key, value)) in [
            ("compaction.enabled", c.enabled.to_string()),
            ("compaction.reserve_tokens", c.reserve_tokens.to_string()),
            (
                "compaction.keep_recent_tokens",
                c.keep_recent_tokens.to_string(),
            ),
            ("compaction.summarize", c.summarize.to_string()),
        ]
        .into_iter()
        .enumerate()
        {
            row(key, value, &self.compaction_sources[i]);
        }
        rows
    }
}
