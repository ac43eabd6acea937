//! RemoteProvider when the server fails: rate limits and server errors retried with backoff, a hanging server
//! against the idle and request timeouts, cancellation mid-stream, and every bad-input error.

use super::*;

#[tokio::test]
async fn rate_limit_then_success_honours_retry_after() {
    let server = FakeServer::start(vec![
        Reply::error(429, "slow down").with_header("retry-after", "1"),
        Reply::sse(text_reply(&["ok"], 5, 1)),
    ])
    .await;
    let started = Instant::now();
    let c =
        collect(provider(&server).stream(CompletionRequest::user("hi"), CancellationToken::new()))
            .await;
    let waited = started.elapsed();
    assert_eq!(c.error, None);
    assert_eq!(c.message.text(), "ok");
    assert_eq!(server.chat_requests().len(), 2);
    assert!(
        waited >= Duration::from_millis(950),
        "Retry-After: 1 was not honoured ({waited:?})"
    );
    assert!(waited < Duration::from_secs(4), "{waited:?}");
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff_then_reported() {
    let server = FakeServer::start(vec![
        Reply::error(503, "overloaded"),
        Reply::error(502, "bad gateway"),
        Reply::sse(text_reply(&["fine"], 5, 1)),
    ])
    .await;
    let c =
        collect(provider(&server).stream(CompletionRequest::user("hi"), CancellationToken::new()))
            .await;
    assert_eq!(c.message.text(), "fine");
    assert_eq!(server.chat_requests().len(), 3);

    // At most 3 retries: the 4th failure is reported, with the attempts counted.
    let server = FakeServer::start(vec![Reply::error(429, "busy"); 5]).await;
    let c =
        collect(provider(&server).stream(CompletionRequest::user("hi"), CancellationToken::new()))
            .await;
    let (reason, kind, message) = error_of(&c.events);
    assert_eq!((reason, kind), (ErrorReason::Error, ErrorKind::RateLimited));
    assert!(
        message.contains("4 attempts") && message.contains("busy"),
        "{message}"
    );
    assert_eq!(server.chat_requests().len(), 4);

    // A Retry-After beyond the limit fails at once instead of sleeping.
    let server = FakeServer::start(vec![
        Reply::error(429, "later").with_header("retry-after", "3600")
    ])
    .await;
    let started = Instant::now();
    let c =
        collect(provider(&server).stream(CompletionRequest::user("hi"), CancellationToken::new()))
            .await;
    assert_eq!(error_of(&c.events).1, ErrorKind::RateLimited);
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn a_hanging_server_hits_the_idle_and_request_timeouts() {
    let server = FakeServer::start(vec![
        Reply::Sse {
            events: vec![chunk(json!({"content": "partial"}), None).to_string()],
            delay: Duration::ZERO,
            hang: true,
        },
        Reply::HangBeforeHeaders,
    ])
    .await;
    let cfg = RemoteConfig {
        timeouts: Timeouts {
            connect_secs: 1.0,
            request_secs: 0.4,
            idle_secs: 0.4,
        },
        ..config(&server)
    };
    let p = RemoteProvider::new(cfg).unwrap();
    let started = Instant::now();
    let c = collect(p.stream(CompletionRequest::user("hi"), CancellationToken::new())).await;
    contract::assert_well_formed(&c.events);
    let (_, kind, message) = error_of(&c.events);
    assert_eq!(kind, ErrorKind::Timeout);
    assert!(message.contains("idle timeout"), "{message}");
    assert_eq!(c.message.text(), "partial", "what arrived is kept");
    assert!(started.elapsed() < Duration::from_secs(3));

    let c = collect(p.stream(CompletionRequest::user("hi"), CancellationToken::new())).await;
    let (_, kind, message) = error_of(&c.events);
    assert_eq!(kind, ErrorKind::Timeout);
    assert!(message.contains("request timeout"), "{message}");
}

#[tokio::test]
async fn cancellation_mid_stream_aborts_promptly() {
    let server = FakeServer::start(vec![Reply::Sse {
        events: vec![chunk(json!({"content": "Hel"}), None).to_string()],
        delay: Duration::ZERO,
        hang: true,
    }])
    .await;
    let took =
        contract::assert_cancel_mid_stream(&provider(&server), CompletionRequest::user("hi")).await;
    assert!(took < Duration::from_millis(500), "{took:?}");
}

#[tokio::test]
async fn bad_input_gives_clear_errors() {
    // Wrong API key: 401 surfaced as such, not retried.
    let server = FakeServer::start(vec![Reply::error(401, "Unauthorized")]).await;
    let c =
        collect(provider(&server).stream(CompletionRequest::user("hi"), CancellationToken::new()))
            .await;
    let (_, kind, message) = error_of(&c.events);
    assert_eq!(kind, ErrorKind::Auth);
    assert!(
        message.contains("401") && message.contains("API key"),
        "{message}"
    );
    assert_eq!(server.chat_requests().len(), 1);

    // Unknown model: vLLM's 404.
    let server =
        FakeServer::start(vec![Reply::error(404, "The model `nope` does not exist.")]).await;
    let req = CompletionRequest {
        model: "nope".into(),
        ..CompletionRequest::user("hi")
    };
    let c = collect(provider(&server).stream(req, CancellationToken::new())).await;
    let (_, kind, message) = error_of(&c.events);
    assert_eq!(kind, ErrorKind::UnknownModel);
    assert!(message.contains("`nope`"), "{message}");
    assert_eq!(server.chat_requests()[0].body["model"], "nope");

    // Context overflow recognised in a 400.
    let server = FakeServer::start(vec![Reply::error(
        400,
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
    )])
    .await;
    let c =
        collect(provider(&server).stream(CompletionRequest::user("hi"), CancellationToken::new()))
            .await;
    assert_eq!(error_of(&c.events).1, ErrorKind::ContextOverflow);

    // Malformed SSE: a chunk that is not JSON, a body that is not an event stream, a stream cut short.
    for (body, needle) in [
        ("data: {\"choices\": [\n\n", "not valid JSON"),
        (
            "<html><body>502 Bad Gateway</body></html>\n",
            "unexpected line",
        ),
        (
            "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"a\"}}]}\n\n",
            "ended before",
        ),
    ] {
        let server = FakeServer::start(vec![Reply::Raw {
            status: 200,
            headers: vec![],
            content_type: "text/event-stream".into(),
            body: body.into(),
        }])
        .await;
        let c = collect(
            provider(&server).stream(CompletionRequest::user("hi"), CancellationToken::new()),
        )
        .await;
        contract::assert_well_formed(&c.events);
        let (_, kind, message) = error_of(&c.events);
        assert_eq!(kind, ErrorKind::Protocol, "{message}");
        assert!(message.contains(needle), "{needle}: {message}");
    }

    // An error object inside the stream.
    let server = FakeServer::start(vec![Reply::sse(vec![
        chunk(json!({"content": "a"}), None),
        json!({"error": {"message": "engine died", "type": "InternalServerError", "code": 500}}),
    ])])
    .await;
    let c =
        collect(provider(&server).stream(CompletionRequest::user("hi"), CancellationToken::new()))
            .await;
    let (_, kind, message) = error_of(&c.events);
    assert_eq!(kind, ErrorKind::Server);
    assert!(message.contains("engine died"), "{message}");

    // Unreachable base URL: a port nobody listens on (retried, then reported with the URL).
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cfg = RemoteConfig {
        retry: Retry {
            max_retries: 1,
            initial_backoff_ms: 1,
            max_backoff_ms: 1,
            max_retry_after_secs: 1.0,
        },
        ..RemoteConfig::new(format!("http://127.0.0.1:{port}/v1"), "m")
    };
    let c = collect(
        RemoteProvider::new(cfg)
            .unwrap()
            .stream(CompletionRequest::user("hi"), CancellationToken::new()),
    )
    .await;
    let (_, kind, message) = error_of(&c.events);
    assert_eq!(kind, ErrorKind::Connect);
    assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");

    // A base URL that is not a URL is a configuration error up front.
    let err = RemoteProvider::new(RemoteConfig::new("localhost:8000", "m"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("remote.base_url"), "{err}");
}
