//! Fuzz target: an MCP server's replies at the message level. A fake streamable-HTTP MCP server on loopback
//! answers the real client's `initialize`, `tools/list` and `tools/call` from a script (a seed of
//! `tests/data/fuzz/mcp/`, mutated structurally or byte by byte), as JSON or as an event stream, cut into
//! chunks of random sizes. Each listed tool becomes an agent tool (its input schema through `ToolSpec`, as a
//! session registers it) and one tool is called. The property: a clear error or an answer, never a panic or a
//! hang. A second test checks that an event stream cut inside a character still decodes that character.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentd::mcp::transport::{Http, Transport};
use agentd::mcp::McpClient;
use agentd::tools::mcp::McpTool;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::{fuzz_with, mutate, Rng};

/// What the fake server answers: per method a reply (its `id` is set to the request's when it has none).
#[derive(Clone, Default)]
struct Script {
    sse: bool,
    chunk: usize,
    session: Option<String>,
    replies: serde_json::Map<String, Value>,
    /// Every reply is these bytes instead (an input that is not a script).
    raw: Option<Vec<u8>>,
    /// Break the serialized reply of this method with these mutation seeds.
    mangle: Option<(String, u64)>,
}

impl Script {
    fn from_input(input: &[u8], rng: &mut Rng) -> Script {
        let sse = rng.below(2) == 0;
        let chunk = 1 + rng.below(64);
        match serde_json::from_slice::<Value>(input) {
            Ok(Value::Object(mut map)) => {
                let session = map
                    .remove("session")
                    .and_then(|v| v.as_str().map(str::to_string));
                let mangle = (rng.below(4) == 0).then(|| {
                    let methods = ["initialize", "tools/list", "tools/call"];
                    (methods[rng.below(3)].to_string(), rng.next())
                });
                Script {
                    sse: map.remove("sse").and_then(|v| v.as_bool()).unwrap_or(sse),
                    chunk,
                    session,
                    replies: map,
                    raw: None,
                    mangle,
                }
            }
            _ => Script {
                sse,
                chunk,
                raw: Some(input.to_vec()),
                ..Script::default()
            },
        }
    }

    fn answer(&self, method: &str, id: &Value) -> Vec<u8> {
        if let Some(raw) = &self.raw {
            return raw.clone();
        }
        let mut reply = self
            .replies
            .get(method)
            .cloned()
            .unwrap_or_else(|| json!({"error": {"code": -32601, "message": "no such method"}}));
        if let Value::Object(m) = &mut reply {
            m.entry("id").or_insert_with(|| id.clone());
            m.entry("jsonrpc").or_insert_with(|| json!("2.0"));
        }
        let mut bytes = serde_json::to_vec(&reply).unwrap_or_default();
        if let Some((m, seed)) = &self.mangle {
            if m == method {
                let mut rng = Rng::new(*seed);
                mutate(&mut rng, &mut bytes, &[], &[b"\n\n", b"data: ", b"\"id\":"]);
            }
        }
        bytes
    }
}

type Shared = Arc<Mutex<Script>>;

async fn handle(State(script): State<Shared>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let Some(id) = request.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response(); // a notification
    };
    let method = request["method"].as_str().unwrap_or_default().to_string();
    let script = script.lock().unwrap().clone();
    let mut bytes = script.answer(&method, &id);
    if script.sse {
        let mut framed = b"event: message\r\ndata: ".to_vec();
        framed.append(&mut bytes);
        framed.extend_from_slice(b"\r\n\r\n");
        bytes = framed;
    }
    let pieces: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(script.chunk)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let kind = if script.sse {
        "text/event-stream"
    } else {
        "application/json"
    };
    let mut resp = Response::new(Body::from_stream(futures::stream::iter(pieces)));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, kind.parse().unwrap());
    if let Some(session) = script.session.as_deref().and_then(|s| s.parse().ok()) {
        resp.headers_mut().insert("mcp-session-id", session);
    }
    resp
}

/// The fake server on a free port; its URL.
async fn fake_server(script: Shared) -> String {
    let app = axum::Router::new()
        .route(
            "/mcp",
            axum::routing::post(handle).delete(|| async { StatusCode::OK }),
        )
        .with_state(script);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// One session with the server as the agent would have it: connect, list, register, call. Whether it got all
/// the way through.
async fn exchange(url: &str) -> bool {
    let timeout = Duration::from_secs(10);
    let transport = Transport::Http(Http::new(url, &[]).unwrap());
    let Ok(client) = McpClient::connect("fuzz", transport, timeout).await else {
        return false;
    };
    let client = Arc::new(client);
    let listed = client.list_tools(timeout).await;
    let mut through = false;
    if let Ok(tools) = &listed {
        for t in tools {
            let _ = McpTool::new(client.clone(), t, Vec::new(), timeout);
        }
        let name = tools.first().map_or("none", |t| t.name.as_str());
        through = client.call_tool(name, json!({}), timeout).await.is_ok();
    }
    client.close().await;
    through
}

#[test]
fn mcp_server_replies() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let script: Shared = Arc::default();
    let url = rt.block_on(fake_server(script.clone()));
    let dict: &[&[u8]] = &[
        b"\"inputSchema\":",
        b"\"nextCursor\":\"c\"",
        b"\"isError\":true",
        b"\"content\":[",
        b"\"$ref\":\"#\"",
        b"\"id\":",
        b"\"method\":\"ping\"",
        b"\\u0000",
    ];
    let started = std::time::Instant::now();
    fuzz_with("mcp", dict, true, |input, rng| {
        *script.lock().unwrap() = Script::from_input(input, rng);
        // A hang would be a failure too: each exchange must end well within its timeouts.
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), exchange(&url))
                .await
                .expect("an MCP exchange hung")
        })
    });
    eprintln!("mcp: {:.1} s", started.elapsed().as_secs_f64());
}

#[test]
fn an_event_stream_cut_inside_a_character_keeps_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let text = "héllo — ünïcödé ✓ 🙂";
    let script: Shared = Arc::new(Mutex::new(Script {
        sse: true,
        chunk: 1,
        replies: serde_json::from_value(json!({
            "initialize": {"result": {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}}},
            "tools/list": {"result": {"tools": [{"name": "t", "inputSchema": {"type": "object"}}]}},
            "tools/call": {"result": {"content": [{"type": "text", "text": text}]}},
        }))
        .unwrap(),
        ..Script::default()
    }));
    rt.block_on(async {
        let url = fake_server(script).await;
        let transport = Transport::Http(Http::new(&url, &[]).unwrap());
        let client = McpClient::connect("utf8", transport, Duration::from_secs(10))
            .await
            .unwrap();
        let out = client
            .call_tool("t", json!({}), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(out.text, text);
    });
}
