//! A tool of an MCP server as an agent tool: named `SERVER__tool` (so two servers' `search` tools stay apart),
//! its `inputSchema` as the spec's parameters (so the local engine constrains its arguments like a built-in's),
//! tagged for approvals as its server is configured (`exec` for a stdio server, `network` for an HTTP one, unless
//! the settings say otherwise). A call waits at most the server's timeout and stops when the run is aborted; a
//! server that died, hung or refused gives the model an error result, never a stuck session.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use super::tool::{aborted, PolicyTag, Tool, ToolContext, ToolError, ToolOutput};
use crate::mcp::{McpClient, RemoteTool};
use crate::schema::ToolSpec;

/// The name a server's tool goes by: `SERVER__tool`, in the characters tool names may hold, at most 64 long.
pub fn namespaced(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut name = format!("{}__{}", clean(server), clean(tool));
    name.truncate(64);
    name
}

/// One remote tool.
pub struct McpTool {
    spec: ToolSpec,
    remote: String,
    client: Arc<McpClient>,
    tags: Vec<PolicyTag>,
    timeout: Duration,
}

impl McpTool {
    /// The agent tool for `tool` of `client`'s server; an input schema the engine cannot admit is an error
    /// (the tool is then left out, with a warning).
    pub fn new(
        client: Arc<McpClient>,
        tool: &RemoteTool,
        tags: Vec<PolicyTag>,
        timeout: Duration,
    ) -> Result<Self, String> {
        let name = namespaced(client.name(), &tool.name);
        let description = if tool.description.is_empty() {
            format!("{} (MCP server {})", tool.name, client.name())
        } else {
            tool.description.clone()
        };
        let spec = ToolSpec::new(&name, &description, tool.input_schema.clone())
            .map_err(|e| format!("tool {name}: {e}"))?;
        Ok(Self {
            spec,
            remote: tool.name.clone(),
            client,
            tags,
            timeout,
        })
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn tags(&self) -> &[PolicyTag] {
        &self.tags
    }

    async fn call(
        &self,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args = if args.is_null() { json!({}) } else { args };
        let call = self.client.call_tool(&self.remote, args, self.timeout);
        let outcome = tokio::select! {
            r = call => r,
            () = ctx.cancel.cancelled() => return Err(aborted(&self.spec.name)),
        };
        match outcome {
            Ok(o) if o.is_error => Err(ToolError::RespondToModel(if o.text.is_empty() {
                format!("{} failed (the server gave no reason)", self.spec.name)
            } else {
                o.text
            })),
            Ok(o) => Ok(ToolOutput::new(
                o.text,
                json!({"server": self.client.name(), "tool": self.remote}),
            )),
            Err(e) => Err(ToolError::RespondToModel(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_namespaced_and_clean() {
        assert_eq!(super::namespaced("files", "read"), "files__read");
        assert_eq!(super::namespaced("my server", "a.b/c"), "my_server__a_b_c");
        assert_eq!(super::namespaced(&"x".repeat(80), "t").len(), 64);
    }
}
