//! MCP servers as tools, with a real server made by the official `mcp` Python SDK
//! (`tests/fixtures/mcp/demo_server.py`) over stdio and streamable HTTP: the handshake, the listing, calls,
//! namespaced tools through the real agent loop (a scripted provider calls them), the environment and working
//! directory a stdio server gets, and the failures — a server that exits mid-call, one that hangs past its
//! timeout, a command that does not exist, a policy that forbids a server's tags.
//!
//! The Python with `mcp` installed is `$AGENTD_TEST_PYTHON`, else `$AGENTD_HOME/venv-openai-sdk/bin/python` (the
//! venv `.ci/run` makes). Without one the tests say so and pass, unless `AGENTD_REQUIRE_MCP` is set (CI sets it).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentd::agent::{agent_loop, AgentContext, AgentEvent, AgentLoopConfig, AgentMessage};
use agentd::app::mcp_servers::{self, McpServerConfig};
use agentd::mcp::transport::{Http, Stdio};
use agentd::mcp::{McpClient, McpError, Transport};
use agentd::provider::{ScriptedProvider, ScriptedReply};
use agentd::tools::policy::Policy;
use agentd::tools::tool::PolicyTag;
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn server_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/demo_server.py")
}

/// A Python that can import `mcp`, or `None` (the test is skipped unless MCP is required).
fn python() -> Option<String> {
    let candidates = [
        std::env::var("AGENTD_TEST_PYTHON").ok(),
        Some(
            agentd::env::agentd_home()
                .join("venv-openai-sdk/bin/python")
                .display()
                .to_string(),
        ),
    ];
    let found = candidates.into_iter().flatten().find(|p| {
        std::process::Command::new(p)
            .args(["-c", "import mcp"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("AGENTD_REQUIRE_MCP").is_none(),
            "no Python with the `mcp` package (set AGENTD_TEST_PYTHON)"
        );
        eprintln!("skipped: no Python with the `mcp` package (set AGENTD_TEST_PYTHON)");
    }
    found
}

async fn stdio_client(python: &str) -> McpClient {
    let transport = Transport::Stdio(
        Stdio::spawn(python, &[server_script().display().to_string()], &[], None).unwrap(),
    );
    McpClient::connect("demo", transport, Duration::from_secs(60))
        .await
        .unwrap()
}

#[tokio::test]
async fn stdio_handshake_listing_calls_and_failures() {
    let Some(py) = python() else { return };
    let client = stdio_client(&py).await;
    assert_eq!(client.server_info["name"], "demo");
    let tools = client.list_tools(Duration::from_secs(30)).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    for want in ["add", "secret", "echo_env", "crash", "hang"] {
        assert!(names.contains(&want), "{names:?}");
    }
    let add = tools.iter().find(|t| t.name == "add").unwrap();
    assert_eq!(add.input_schema["properties"]["a"]["type"], "integer");
    let sum = client
        .call_tool("add", json!({"a": 2, "b": 3}), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!((sum.text.as_str(), sum.is_error), ("5", false));
    // A wrong argument is the server's error result, not ours.
    let bad = client
        .call_tool("add", json!({"a": "x"}), Duration::from_secs(30))
        .await;
    assert!(
        matches!(&bad, Ok(o) if o.is_error) || matches!(&bad, Err(McpError::Rpc { .. })),
        "{bad:?}"
    );
    // Hanging past the timeout: a timeout error, and the server still answers afterwards.
    let hang = client
        .call_tool("hang", json!({}), Duration::from_secs(1))
        .await;
    assert!(matches!(hang, Err(McpError::Timeout { .. })), "{hang:?}");
    let again = client
        .call_tool("secret", json!({}), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(again.text.contains("pineapple"));
    // Exiting mid-call: the call fails at once with the reason, and so does every later call.
    let started = std::time::Instant::now();
    let crash = client
        .call_tool("crash", json!({}), Duration::from_secs(60))
        .await;
    match &crash {
        Err(McpError::Gone { message, .. }) => {
            assert!(message.contains("crashing on purpose"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    let after = client
        .call_tool("add", json!({"a": 1, "b": 1}), Duration::from_secs(60))
        .await;
    assert!(matches!(after, Err(McpError::Gone { .. })), "{after:?}");
}

#[tokio::test]
async fn a_server_that_floods_its_output_is_given_up_on() {
    let Some(py) = python() else { return };
    // Flooding the protocol channel: the call fails at once with the reason, our memory never holds more than a
    // bounded line of it, and later calls fail too.
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/flood_server.py");
    let transport =
        Transport::Stdio(Stdio::spawn(&py, &[script.display().to_string()], &[], None).unwrap());
    let client = McpClient::connect("flood", transport, Duration::from_secs(60))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let flood = client
        .call_tool("flood", json!({}), Duration::from_secs(60))
        .await;
    match &flood {
        Err(McpError::Gone { message, .. }) => {
            assert!(message.contains("not JSON-RPC"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    let after = client
        .call_tool("flood", json!({}), Duration::from_secs(60))
        .await;
    assert!(matches!(after, Err(McpError::Gone { .. })), "{after:?}");
    client.close().await;
    // Flooding stderr (the SDK's server puts stray stdout writes there): the call answers, and what is kept of
    // stderr for error messages stays a few short lines.
    let client = stdio_client(&py).await;
    let ok = client
        .call_tool("flood", json!({}), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(ok.text, "flooded");
    let sum = client
        .call_tool("add", json!({"a": 2, "b": 3}), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(sum.text, "5");
    client.close().await;
}

#[tokio::test]
async fn a_missing_command_is_a_start_error() {
    let r = Stdio::spawn("/no/such/mcp-server", &[], &[], None);
    assert!(r.is_err());
    let mut servers = BTreeMap::new();
    servers.insert(
        "ghost".to_string(),
        McpServerConfig {
            command: Some("/no/such/mcp-server".into()),
            ..Default::default()
        },
    );
    let (tools, warnings) =
        mcp_servers::start(&servers, &std::env::temp_dir(), &Policy::all()).await;
    assert!(tools.is_empty());
    assert!(
        warnings[0].contains("cannot start MCP server ghost"),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn namespaced_tools_run_through_the_agent_loop() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut servers = BTreeMap::new();
    servers.insert(
        "demo".to_string(),
        McpServerConfig {
            command: Some(py.clone()),
            args: vec![server_script().display().to_string()],
            env: [("GREETING".to_string(), "hello from settings".to_string())].into(),
            tags: Some(vec!["read_only".into()]),
            timeout_secs: Some(2.0),
            ..Default::default()
        },
    );
    // A policy without `exec`: a stdio server tagged read_only is allowed.
    let (tools, warnings) = mcp_servers::start(&servers, dir.path(), &Policy::read_only()).await;
    assert!(warnings.is_empty(), "{warnings:?}");
    let names: Vec<String> = tools.iter().map(|t| t.spec().name.clone()).collect();
    assert!(names.contains(&"demo__secret".to_string()), "{names:?}");
    assert!(tools.iter().all(|t| t.tags() == [PolicyTag::ReadOnly]));
    let provider = Arc::new(ScriptedProvider::new([
        ScriptedReply::new().tool_call_with_id("c1", "demo__secret", "{}"),
        ScriptedReply::new().tool_call_with_id("c2", "demo__echo_env", r#"{"name": "GREETING"}"#),
        ScriptedReply::new().tool_call_with_id("c3", "demo__hang", "{}"),
        ScriptedReply::new().tool_call_with_id("c4", "demo__crash", "{}"),
        ScriptedReply::new().tool_call_with_id("c5", "demo__add", r#"{"a": 1, "b": 2}"#),
        ScriptedReply::text_only("The secret word is pineapple."),
    ]));
    let mut config = AgentLoopConfig::new(provider.clone());
    config.cwd = dir.path().to_path_buf();
    let context = AgentContext {
        system_prompt: "test".into(),
        messages: vec![],
        tools,
    };
    let events: Vec<AgentEvent> = agent_loop(
        vec![AgentMessage::user("what is the secret?")],
        context,
        config,
        CancellationToken::new(),
    )
    .collect()
    .await;
    let results: Vec<(String, bool)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolExecutionEnd { result, .. } => {
                Some((result.content.clone(), result.is_error))
            }
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 5, "{results:?}");
    assert_eq!(results[0], ("The secret word is pineapple.".into(), false));
    assert_eq!(results[1], ("hello from settings".into(), false));
    assert!(
        results[2].1
            && results[2]
                .0
                .contains("did not answer tools/call within 2 s"),
        "{:?}",
        results[2]
    );
    assert!(
        results[3].1 && results[3].0.contains("is not running"),
        "{:?}",
        results[3]
    );
    assert!(
        results[4].1 && results[4].0.contains("is not running"),
        "{:?}",
        results[4]
    );
    // The model saw the secret in the next request.
    let second = &provider.requests()[1];
    let seen = format!("{:?}", second.messages);
    assert!(seen.contains("pineapple"));
    assert!(second.tools.iter().any(|t| t.name == "demo__add"));
}

#[tokio::test]
async fn a_policy_that_forbids_a_servers_tags_leaves_it_out() {
    let mut servers = BTreeMap::new();
    servers.insert(
        "runner".to_string(),
        McpServerConfig {
            command: Some("/bin/true".into()),
            ..Default::default()
        },
    );
    let (tools, warnings) =
        mcp_servers::start(&servers, &std::env::temp_dir(), &Policy::read_only()).await;
    assert!(tools.is_empty());
    assert!(warnings[0].contains("does not allow exec"), "{warnings:?}");
}

#[tokio::test]
async fn streamable_http_transport() {
    let Some(py) = python() else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(&py)
        .arg(server_script())
        .args(["http", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut client = None;
    for _ in 0..100 {
        let transport = Transport::Http(Http::new(&url, &[]).unwrap());
        match McpClient::connect("web", transport, Duration::from_secs(10)).await {
            Ok(c) => {
                client = Some(c);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let client = client.expect("the HTTP server did not come up");
    let tools = client.list_tools(Duration::from_secs(30)).await.unwrap();
    assert!(tools.iter().any(|t| t.name == "add"));
    let sum = client
        .call_tool("add", json!({"a": 20, "b": 22}), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(sum.text, "42");
    client.close().await;
    let _ = child.kill().await;
    // Nothing listens any more: a clear error, not a hang.
    let gone = client
        .call_tool("add", json!({"a": 1, "b": 1}), Duration::from_secs(10))
        .await;
    assert!(gone.is_err());
}
