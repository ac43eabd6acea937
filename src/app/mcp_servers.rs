//! MCP servers as tools of a coding session (`agentd chat`/`run` and HTTP sessions), from `[mcp.servers.NAME]`
//! in the settings files:
//!
//! ```toml
//! [mcp.servers.files]            # stdio: a command the session starts in its working directory
//! command = "python3"
//! args = ["files_server.py"]
//! env = { ROOT = "." }
//! timeout_secs = 60              # per call (default 60); the handshake and listing get 30
//! tags = ["read_only"]           # approval tags of its tools (default: exec for stdio, network for url)
//!
//! [mcp.servers.search]           # streamable HTTP
//! url = "http://127.0.0.1:9000/mcp"
//! headers = { Authorization = "Bearer …" }
//! ```
//!
//! Each server is started (or reached) when the session starts; its tools join the session's as `NAME__tool`,
//! subject to the session's policy like built-ins (a server whose every tag the policy forbids is not even
//! started; a stdio server of the project's settings file — a command the workspace names — starts only when
//! the policy allows `exec`, whatever tags it claims). A server that cannot start or list its tools is a warning, not a failed session. The servers stop
//! with the session (a stdio child and its process group are killed when the last tool is dropped).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::mcp::transport::{Http, Stdio};
use crate::mcp::{McpClient, Transport};
use crate::tools::mcp::McpTool;
use crate::tools::policy::Policy;
use crate::tools::tool::{PolicyTag, Tool};

/// How long starting a server and listing its tools may take.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// A call's timeout unless the server's settings give one.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// One `[mcp.servers.NAME]` table.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// stdio: the program to run.
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Streamable HTTP: the endpoint.
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Seconds a call may take.
    pub timeout_secs: Option<f64>,
    /// Approval tags of the server's tools (`read_only`, `write`, `exec`, `network`).
    pub tags: Option<Vec<String>>,
    /// `false` leaves the server out.
    pub enabled: Option<bool>,
    /// Set when the table came from the project's settings file (a file of the workspace, which whoever made
    /// the workspace wrote): its stdio command only starts in a session whose policy allows `exec`.
    #[serde(skip)]
    pub project: bool,
}

impl McpServerConfig {
    /// What is wrong with this table, if anything (checked when the settings file is read).
    pub fn problem(&self) -> Option<String> {
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => {
                return Some("give either `command` (stdio) or `url` (HTTP), not both".into())
            }
            (None, None) => return Some("needs `command` (stdio) or `url` (HTTP)".into()),
            _ => {}
        }
        if self
            .timeout_secs
            .is_some_and(|t| !t.is_finite() || t <= 0.0)
        {
            return Some("timeout_secs must be a positive number".into());
        }
        for tag in self.tags.iter().flatten() {
            if let Err(e) = tag.parse::<Policy>() {
                return Some(format!("tags: {e}"));
            }
        }
        None
    }

    /// The approval tags of this server's tools.
    pub fn policy_tags(&self) -> Vec<PolicyTag> {
        match &self.tags {
            Some(tags) => tags
                .iter()
                .filter_map(|t| t.parse::<Policy>().ok())
                .flat_map(|p| p.allowed().collect::<Vec<_>>())
                .collect(),
            None if self.url.is_some() => vec![PolicyTag::Network],
            None => vec![PolicyTag::Exec],
        }
    }
}

/// The tools of the configured servers that `policy` allows, and warnings for the servers that failed.
pub async fn start(
    servers: &BTreeMap<String, McpServerConfig>,
    cwd: &Path,
    policy: &Policy,
) -> (Vec<Arc<dyn Tool>>, Vec<String>) {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut warnings = Vec::new();
    for (name, cfg) in servers {
        if cfg.enabled == Some(false) {
            continue;
        }
        if let Some(p) = cfg.problem() {
            warnings.push(format!("MCP server {name}: {p}"));
            continue;
        }
        if cfg.project && cfg.command.is_some() && !policy.allows(PolicyTag::Exec) {
            warnings.push(format!(
                "MCP server {name} of the project's settings left out: starting it runs a command the project \
                 names, and this session's policy does not allow exec"
            ));
            continue;
        }
        let tags = cfg.policy_tags();
        if policy.check_tags(name, &tags).is_err() {
            warnings.push(format!(
                "MCP server {name} left out: this session's policy does not allow {}",
                tags.iter()
                    .map(|t| t.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            continue;
        }
        match connect(name, cfg, cwd).await {
            Ok((client, listed)) => {
                let timeout = cfg
                    .timeout_secs
                    .map_or(CALL_TIMEOUT, Duration::from_secs_f64);
                for remote in &listed {
                    match McpTool::new(client.clone(), remote, tags.clone(), timeout) {
                        Ok(t) => tools.push(Arc::new(t)),
                        Err(e) => warnings.push(format!("MCP server {name}: {e} (left out)")),
                    }
                }
                tracing::info!(server = %name, tools = listed.len(), "MCP server connected");
            }
            Err(e) => warnings.push(e.to_string()),
        }
    }
    (tools, warnings)
}

async fn connect(
    name: &str,
    cfg: &McpServerConfig,
    cwd: &Path,
) -> Result<(Arc<McpClient>, Vec<crate::mcp::RemoteTool>), crate::mcp::McpError> {
    let start_error = |message: String| crate::mcp::McpError::Start {
        server: name.to_string(),
        message,
    };
    let transport = match (&cfg.command, &cfg.url) {
        (Some(command), _) => {
            let env: Vec<(String, String)> = cfg.env.clone().into_iter().collect();
            Transport::Stdio(
                Stdio::spawn(command, &cfg.args, &env, Some(cwd.to_path_buf()))
                    .map_err(|f| start_error(format!("{f:?}")))?,
            )
        }
        (None, Some(url)) => {
            let headers: Vec<(String, String)> = cfg.headers.clone().into_iter().collect();
            Transport::Http(Http::new(url, &headers).map_err(|f| start_error(format!("{f:?}")))?)
        }
        (None, None) => return Err(start_error("no command or url".into())),
    };
    let client = Arc::new(McpClient::connect(name, transport, START_TIMEOUT).await?);
    let tools = match client.list_tools(START_TIMEOUT).await {
        Ok(t) => t,
        Err(e) => {
            client.close().await;
            return Err(e);
        }
    };
    Ok((client, tools))
}
