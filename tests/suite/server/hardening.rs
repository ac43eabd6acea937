//! The server against a hostile browser and hostile requests, over real sockets: a foreign `Host` (DNS
//! rebinding), a cross-origin form post, a `text/plain` body, CORS for a listed origin, agent sessions that could
//! run commands on a server without a key, request bounds, and `/health` staying responsive while pathological
//! requests are processed.

use std::time::{Duration, Instant};

use agentd::provider::{ScriptedProvider, ScriptedReply};
use agentd::server::browser_safety::BrowserPolicy;
use agentd::server::ServerOptions;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{post, TestServer};

/// One HTTP/1.1 request written by hand (so every header is exactly what a browser could send); returns the
/// status, the response head and the body.
async fn raw(server: &TestServer, request: &str) -> (u16, String, String) {
    let addr = server.root.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await.unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_string(), body.to_string())
}

fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut r = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    r
}

async fn scripted(options: ServerOptions) -> TestServer {
    let provider = ScriptedProvider::new(vec![ScriptedReply::text_only("hello"); 4]);
    TestServer::with_provider(std::sync::Arc::new(provider), options).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_hosts_origins_and_content_types_are_refused() {
    let server = scripted(ServerOptions::default()).await;
    let chat = r#"{"messages": [{"role": "user", "content": "hi"}]}"#;
    let port = server.root.rsplit(':').next().unwrap().to_string();

    // DNS rebinding: the page's own name in Host.
    let (status, _, body) = raw(
        &server,
        &request(
            "POST",
            "/v1/chat/completions",
            &[
                ("Host", &format!("evil.example:{port}")),
                ("Content-Type", "application/json"),
            ],
            chat,
        ),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("evil.example"), "{body}");
    let (status, _, _) = raw(
        &server,
        &request("GET", "/v1/models", &[("Host", "evil.example")], ""),
    )
    .await;
    assert_eq!(status, 403);

    // Loopback names are fine.
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let (status, _, body) = raw(
            &server,
            &request("GET", "/v1/models", &[("Host", &host)], ""),
        )
        .await;
        assert_eq!(status, 200, "{host}: {body}");
    }

    // A cross-site form post (no preflight in a browser): refused before anything runs.
    let host = format!("127.0.0.1:{port}");
    let (status, _, body) = raw(
        &server,
        &request(
            "POST",
            "/v1/sessions",
            &[
                ("Host", &host),
                ("Origin", "http://evil.example"),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            "workspace=/&tools=bash",
        ),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(server.state.sessions.is_empty(), "no session was created");
    // `Origin: null` (sandboxed frames, file pages) is foreign too.
    let (status, _, _) = raw(
        &server,
        &request(
            "POST",
            "/v1/chat/completions",
            &[
                ("Host", &host),
                ("Origin", "null"),
                ("Content-Type", "application/json"),
            ],
            chat,
        ),
    )
    .await;
    assert_eq!(status, 403);

    // A `text/plain` body (a "simple" cross-site request even without Origin) is not JSON to us.
    let (status, _, body) = raw(
        &server,
        &request(
            "POST",
            "/v1/chat/completions",
            &[("Host", &host), ("Content-Type", "text/plain")],
            chat,
        ),
    )
    .await;
    assert_eq!(status, 415, "{body}");

    // Same-origin (the server's own page) and plain clients work.
    let (status, _, body) = raw(
        &server,
        &request(
            "POST",
            "/v1/chat/completions",
            &[
                ("Host", &host),
                ("Origin", &format!("http://{host}")),
                ("Content-Type", "application/json; charset=utf-8"),
            ],
            chat,
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = post(
        &server.url("/v1/chat/completions"),
        &serde_json::from_str(chat).unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_origins_get_cors_and_named_hosts_are_allowed() {
    let server = scripted(ServerOptions {
        browser: BrowserPolicy {
            allowed_hosts: vec!["agentd.lan".into()],
            cors_origins: vec!["http://localhost:3000".into()],
            bound: None,
        },
        ..ServerOptions::default()
    })
    .await;
    let (status, head, _) = raw(
        &server,
        &request(
            "OPTIONS",
            "/v1/chat/completions",
            &[
                ("Host", "agentd.lan:8080"),
                ("Origin", "http://localhost:3000"),
                ("Access-Control-Request-Method", "POST"),
                (
                    "Access-Control-Request-Headers",
                    "authorization, content-type",
                ),
            ],
            "",
        ),
    )
    .await;
    assert_eq!(status, 204, "{head}");
    let head = head.to_ascii_lowercase();
    assert!(
        head.contains("access-control-allow-origin: http://localhost:3000"),
        "{head}"
    );
    assert!(head.contains("access-control-allow-methods:"), "{head}");
    assert!(
        head.contains("access-control-allow-headers: authorization, content-type"),
        "{head}"
    );
    let (status, head, body) = raw(
        &server,
        &request(
            "POST",
            "/v1/chat/completions",
            &[
                ("Host", "agentd.lan:8080"),
                ("Origin", "http://localhost:3000"),
                ("Content-Type", "application/json"),
            ],
            r#"{"messages": [{"role": "user", "content": "hi"}]}"#,
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(head
        .to_ascii_lowercase()
        .contains("access-control-allow-origin: http://localhost:3000"));
    // Another origin still is not.
    let (status, _, _) = raw(
        &server,
        &request(
            "OPTIONS",
            "/v1/chat/completions",
            &[("Host", "agentd.lan"), ("Origin", "http://localhost:4000")],
            "",
        ),
    )
    .await;
    assert_eq!(status, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_that_write_or_execute_need_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().to_str().unwrap().to_string();
    let open = scripted(ServerOptions::default()).await;
    let (status, body) = post(
        &open.url("/v1/sessions"),
        &json!({"workspace": workspace, "tools": ["read", "bash"], "policy": "all"}),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("bash"),
        "{body}"
    );
    // Read-only tools (or a read-only policy) are fine without a key.
    let (status, body) = post(
        &open.url("/v1/sessions"),
        &json!({"workspace": workspace, "tools": ["read", "bash"], "policy": "read_only"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    let keyed = scripted(ServerOptions {
        api_key: Some("sk-test".into()),
        ..ServerOptions::default()
    })
    .await;
    let resp = super::client()
        .post(keyed.url("/v1/sessions"))
        .bearer_auth("sk-test")
        .json(&json!({"workspace": workspace, "tools": ["read", "bash"], "policy": "all"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 201);

    let allowed = scripted(ServerOptions {
        allow_exec_without_key: true,
        ..ServerOptions::default()
    })
    .await;
    let (status, body) = post(
        &allowed.url("/v1/sessions"),
        &json!({"workspace": workspace, "tools": ["write"], "policy": "all"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_bounds_are_400s_naming_the_limit() {
    let server = scripted(ServerOptions::default()).await;
    let tool = |i: usize| json!({"type": "function", "function": {"name": format!("t{i}"), "parameters": {"type": "object"}}});
    let cases = [
        (
            json!({"messages": [{"role": "user", "content": "hi"}], "tools": (0..129).map(tool).collect::<Vec<_>>()}),
            "tools",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}], "stop": (0..17).map(|i| format!("s{i}")).collect::<Vec<_>>()}),
            "stop",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}], "stop": ["x".repeat(300)]}),
            "stop",
        ),
        (
            json!({"messages": (0..4097).map(|_| json!({"role": "user", "content": "hi"})).collect::<Vec<_>>()}),
            "messages",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {
                "name": "big", "description": "d".repeat(70_000)}}]}),
            "tools[0]",
        ),
    ];
    for (body, param) in cases {
        let (status, r) = post(&server.url("/v1/chat/completions"), &body).await;
        assert_eq!(status, 400, "{param}: {r}");
        assert_eq!(r["error"]["param"], param, "{r}");
        assert_eq!(r["error"]["code"], "limit_exceeded", "{r}");
        assert!(
            r["error"]["message"].as_str().unwrap().contains("at most"),
            "{r}"
        );
    }
}

/// Requests that take real CPU to check (big bodies, many schemas) run off the async workers, so `/health` answers
/// promptly meanwhile. (A hang check: `/health` must answer within a second while they are processed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_answers_while_pathological_requests_are_checked() {
    let server = scripted(ServerOptions::default()).await;
    // 128 tools with many-property schemas, and ~4,000 long messages: tens of MB of checking each.
    let schema = json!({"type": "object", "properties": (0..40).map(|i| (format!("p{i}"), json!({"type": "string", "pattern": "^[a-z]+[0-9]*$", "maxLength": 64}))).collect::<serde_json::Map<String, Value>>()});
    let tools: Vec<Value> = (0..128)
        .map(|i| json!({"type": "function", "function": {"name": format!("t{i}"), "parameters": schema}}))
        .collect();
    let messages: Vec<Value> = (0..4000)
        .map(|i| json!({"role": if i % 2 == 0 {"user"} else {"assistant"}, "content": "x".repeat(2_000)}))
        .collect();
    let heavy = json!({"messages": messages, "tools": tools, "max_tokens": 1});
    let mut load = Vec::new();
    for _ in 0..4 {
        let url = server.url("/v1/chat/completions");
        let body = heavy.clone();
        load.push(tokio::spawn(async move { post(&url, &body).await.0 }));
    }
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let t = Instant::now();
        let resp = super::client()
            .get(server.url("/health"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        slowest = slowest.max(t.elapsed());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        slowest < Duration::from_secs(1),
        "/health took {slowest:?} under load"
    );
    for l in load {
        let status = l.await.unwrap();
        assert!(status == 200 || status == 503, "{status}");
    }
}

/// The web page: `GET /` is open (a browser cannot send a bearer key when it navigates) and static; it carries a
/// strict CSP and nothing from elsewhere; `/version` tells the page whether to ask for a key; the API stays
/// closed without the key; a foreign `Host` is refused for the page too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_web_page_is_open_static_and_locked_down() {
    let server = scripted(ServerOptions {
        api_key: Some("sk-page".into()),
        ..ServerOptions::default()
    })
    .await;
    let resp = super::client().get(server.url("/")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let csp = resp.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let body = resp.text().await.unwrap();
    assert!(body.contains("<title>agentd</title>") && body.contains("/v1/chat/completions"));
    assert!(!body.contains("http://") && !body.contains("https://"));
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'sha256-"));
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    let version: serde_json::Value = super::client()
        .get(server.url("/version"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(version["auth"], true);
    let resp = super::client()
        .get(server.url("/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let (status, _, _) = raw(
        &server,
        &request("GET", "/", &[("Host", "evil.example")], ""),
    )
    .await;
    assert_eq!(status, 403);
}
