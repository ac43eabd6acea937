//! A Model Context Protocol client: what agentd needs to use the tools of MCP servers people already have —
//! `initialize`, `tools/list` (paged) and `tools/call`, over the protocol's two transports: **stdio** (a child
//! process speaking newline-delimited JSON-RPC 2.0 on stdin/stdout; `transport::stdio`) and **streamable HTTP**
//! (JSON-RPC POSTed to one URL, answered as JSON or as a server-sent event stream, with the `Mcp-Session-Id` the
//! server hands out; `transport::http`). Requests the server sends us (`ping`, `roots/list`, …) are answered;
//! notifications are ignored.
//!
//! Written here rather than with `rmcp` (the official Rust SDK): agentd needs three methods of the client side
//! only, and this keeps the dependency tree and its churn out (rmcp's major versions changed its API three times
//! in a year). The protocol version asked for is [`PROTOCOL_VERSION`]; older servers answer with theirs and are
//! accepted.
//!
//! Failures are [`McpError`]s: a server that does not start, dies, hangs past the timeout or answers with a
//! JSON-RPC error. The tool adapter (`tools::mcp`) turns each into an error result the model reads.

mod bounded;
pub mod transport;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};

pub use transport::Transport;

/// The protocol revision this client speaks.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// How an MCP exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    /// The server could not be started or reached (a missing command, a refused connection). Fix the
    /// configuration.
    #[error("cannot start MCP server {server}: {message}")]
    Start { server: String, message: String },
    /// The server went away (its process exited, the connection broke). Later calls fail the same way.
    #[error("MCP server {server} is not running: {message}")]
    Gone { server: String, message: String },
    /// No answer within the timeout.
    #[error("MCP server {server} did not answer {method} within {seconds} s")]
    Timeout {
        server: String,
        method: String,
        seconds: u64,
    },
    /// The server answered with a JSON-RPC error.
    #[error("MCP server {server} refused {method}: {message}")]
    Rpc {
        server: String,
        method: String,
        message: String,
    },
    /// The server sent something that is not the protocol.
    #[error("MCP server {server} broke the protocol: {message}")]
    Protocol { server: String, message: String },
}

/// A tool an MCP server offers.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteTool {
    pub name: String,
    pub description: String,
    /// The tool's `inputSchema` (a JSON Schema object).
    pub input_schema: Value,
    /// `annotations.readOnlyHint`, when the server says so.
    pub read_only: bool,
}

/// What a `tools/call` returned: its text content (non-text parts named) and whether the tool failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOutcome {
    pub text: String,
    pub is_error: bool,
}

/// A connected MCP server.
pub struct McpClient {
    name: String,
    transport: Transport,
    /// The server's `serverInfo` and the protocol version it settled on.
    pub server_info: Value,
    pub protocol_version: String,
}

impl McpClient {
    /// Starts (stdio) or reaches (HTTP) the server `name` and runs the `initialize` handshake within `timeout`.
    pub async fn connect(
        name: &str,
        transport: Transport,
        timeout: Duration,
    ) -> Result<Self, McpError> {
        let mut client = Self {
            name: name.to_string(),
            transport,
            server_info: Value::Null,
            protocol_version: PROTOCOL_VERSION.into(),
        };
        let init = client
            .request(
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "agentd", "version": env!("CARGO_PKG_VERSION")},
                }),
                timeout,
            )
            .await?;
        client.server_info = init.get("serverInfo").cloned().unwrap_or(Value::Null);
        if let Some(v) = init.get("protocolVersion").and_then(Value::as_str) {
            client.protocol_version = v.to_string();
            client.transport.set_protocol_version(v);
        }
        client
            .transport
            .notify(&self::notification("notifications/initialized", json!({})))
            .await
            .map_err(|m| client.gone(m))?;
        Ok(client)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn gone(&self, message: String) -> McpError {
        McpError::Gone {
            server: self.name.clone(),
            message,
        }
    }

    /// One JSON-RPC request; its `result`.
    async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, McpError> {
        let answer = self
            .transport
            .request(method, params, timeout)
            .await
            .map_err(|e| match e {
                transport::Failure::Timeout => McpError::Timeout {
                    server: self.name.clone(),
                    method: method.into(),
                    seconds: timeout.as_secs(),
                },
                transport::Failure::Gone(m) => self.gone(m),
                transport::Failure::Start(m) => McpError::Start {
                    server: self.name.clone(),
                    message: m,
                },
                transport::Failure::Protocol(m) => McpError::Protocol {
                    server: self.name.clone(),
                    message: m,
                },
            })?;
        if let Some(err) = answer.get("error") {
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("error")
                .to_string();
            return Err(McpError::Rpc {
                server: self.name.clone(),
                method: method.into(),
                message,
            });
        }
        Ok(answer.get("result").cloned().unwrap_or(Value::Null))
    }

    /// Every tool the server offers (following `nextCursor`).
    pub async fn list_tools(&self, timeout: Duration) -> Result<Vec<RemoteTool>, McpError> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100 {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = self.request("tools/list", params, timeout).await?;
            for t in page
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let Some(name) = t.get("name").and_then(Value::as_str) else {
                    continue;
                };
                out.push(RemoteTool {
                    name: name.to_string(),
                    description: t
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    input_schema: t
                        .get("inputSchema")
                        .cloned()
                        .unwrap_or_else(|| json!({"type": "object"})),
                    read_only: t
                        .pointer("/annotations/readOnlyHint")
                        .and_then(Value::as_bool)
                        == Some(true),
                });
            }
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        Ok(out)
    }

    /// Calls tool `name` with `arguments` (a JSON object).
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
        timeout: Duration,
    ) -> Result<CallOutcome, McpError> {
        let result = self
            .request(
                "tools/call",
                json!({"name": name, "arguments": arguments}),
                timeout,
            )
            .await?;
        Ok(outcome(&result))
    }

    /// Stops the server (a stdio child is killed with its process group).
    pub async fn close(&self) {
        self.transport.close().await;
    }
}

/// A `tools/call` result as text: text parts as they are, structured content as JSON, other parts named.
fn outcome(result: &Value) -> CallOutcome {
    let mut parts: Vec<String> = Vec::new();
    for c in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match c.get("type").and_then(Value::as_str) {
            Some("text") => parts.push(
                c.get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            ),
            Some("resource") => {
                let r = c.get("resource").cloned().unwrap_or(Value::Null);
                match r.get("text").and_then(Value::as_str) {
                    Some(t) => parts.push(t.to_string()),
                    None => parts.push(format!(
                        "[resource {}]",
                        r.get("uri").and_then(Value::as_str).unwrap_or("?")
                    )),
                }
            }
            Some(kind) => parts.push(format!("[{kind} content omitted]")),
            None => {}
        }
    }
    if parts.is_empty() {
        if let Some(s) = result.get("structuredContent") {
            parts.push(s.to_string());
        }
    }
    CallOutcome {
        text: parts.join("\n"),
        is_error: result
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    }
}

/// A JSON-RPC notification.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// The answer to a request the server sent us: `ping` is answered, `roots/list` with no roots, the rest with
/// "method not found".
pub fn answer_server_request(request: &Value) -> Option<Value> {
    let id = request.get("id")?.clone();
    let method = request.get("method")?.as_str()?;
    Some(match method {
        "ping" => json!({"jsonrpc": "2.0", "id": id, "result": {}}),
        "roots/list" => json!({"jsonrpc": "2.0", "id": id, "result": {"roots": []}}),
        _ => json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32601, "message": format!("agentd does not offer {method}")}}),
    })
}

/// Pending requests by id, each waiting for its answer.
pub type Pending = HashMap<u64, tokio::sync::oneshot::Sender<Value>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_become_text() {
        let r = json!({"content": [{"type": "text", "text": "a"}, {"type": "image", "data": "…"},
                                   {"type": "resource", "resource": {"uri": "file:///x", "text": "b"}}],
                       "isError": true});
        assert_eq!(
            outcome(&r),
            CallOutcome {
                text: "a\n[image content omitted]\nb".into(),
                is_error: true
            }
        );
        let r = json!({"content": [], "structuredContent": {"n": 1}});
        assert_eq!(outcome(&r).text, "{\"n\":1}");
    }

    #[test]
    fn server_requests_are_answered() {
        let ping =
            answer_server_request(&json!({"jsonrpc": "2.0", "id": 7, "method": "ping"})).unwrap();
        assert_eq!(ping, json!({"jsonrpc": "2.0", "id": 7, "result": {}}));
        let other = answer_server_request(
            &json!({"jsonrpc": "2.0", "id": "x", "method": "sampling/createMessage"}),
        )
        .unwrap();
        assert_eq!(other["error"]["code"], -32601);
        assert!(answer_server_request(
            &json!({"jsonrpc": "2.0", "method": "notifications/progress"})
        )
        .is_none());
    }
}
