//! `agentd bench tool-calls` on a scripted endpoint: a fake OpenAI server (axum on 127.0.0.1:0) streams tool calls
//! with known delays, so the measured times have known lower bounds (upper bounds are generous: never a tight
//! wall-clock assertion); the percentile and ratio arithmetic is checked exactly on known samples; invalid
//! arguments count as invalid; `--compare` runs A B A B; the agent scenario grows its transcript with real tool
//! results under one session id.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentd::bench::{
    ab_schedule, pair_ratios, percentile, request_body, CallRecord, ChatClient, Distribution,
    RequestSample, Side, Summary,
};
use agentd::provider::{CompletionRequest, Message, ToolChoice, ToolSpec};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

/// A chunk of the stream, sent this long after the request arrived.
type Timed = (u64, Value);
type Script = Arc<dyn Fn(&Value) -> Vec<Timed> + Send + Sync>;

#[derive(Clone)]
struct Fake {
    label: char,
    script: Script,
    /// Shared between servers: the order requests arrived in.
    log: Arc<Mutex<Vec<char>>>,
    bodies: Arc<Mutex<Vec<Value>>>,
}

struct FakeServer {
    base_url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn chat(State(fake): State<Fake>, Json(body): Json<Value>) -> Response {
    let arrived = Instant::now();
    fake.log.lock().unwrap().push(fake.label);
    let chunks = (fake.script)(&body);
    fake.bodies.lock().unwrap().push(body);
    let mut events: Vec<(u64, String)> = chunks
        .into_iter()
        .map(|(at, v)| (at, format!("data: {v}\n\n")))
        .collect();
    let last = events.last().map_or(0, |e| e.0);
    events.push((last, "data: [DONE]\n\n".into()));
    let stream = futures::stream::unfold(events.into_iter(), move |mut rest| async move {
        let (at, text) = rest.next()?;
        tokio::time::sleep_until((arrived + Duration::from_millis(at)).into()).await;
        Some((Ok::<_, Infallible>(Bytes::from(text)), rest))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

async fn models() -> Json<Value> {
    Json(json!({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}))
}

async fn start(label: char, log: Arc<Mutex<Vec<char>>>, script: Script) -> FakeServer {
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let fake = Fake {
        label,
        script,
        log,
        bodies: bodies.clone(),
    };
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .with_state(fake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    FakeServer {
        base_url: format!("http://{addr}/v1"),
        bodies,
        task,
    }
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "c", "object": "chat.completion.chunk", "model": "fake-model",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

/// Text at 50 ms, the call's name at 100 ms, arguments in two pieces closing at 200 ms, finish and usage at
/// 250 ms.
fn tool_call_stream(name: &str, args: [&str; 2]) -> Vec<Timed> {
    vec![
        (0, chunk(json!({"role": "assistant", "content": ""}), None)),
        (50, chunk(json!({"content": "Sure."}), None)),
        (
            100,
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                       "function": {"name": name, "arguments": ""}}]}),
                None,
            ),
        ),
        (
            150,
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": args[0]}}]}),
                None,
            ),
        ),
        (
            200,
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": args[1]}}]}),
                None,
            ),
        ),
        (250, chunk(json!({}), Some("tool_calls"))),
        (
            250,
            json!({"id": "c", "object": "chat.completion.chunk", "choices": [],
                   "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}}),
        ),
    ]
}

fn weather() -> ToolSpec {
    ToolSpec::new(
        "get_weather",
        "Get the weather.",
        json!({"type": "object",
               "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
               "required": ["city", "unit"]}),
    )
    .unwrap()
}

fn forced_body() -> Value {
    let request = CompletionRequest {
        messages: vec![Message::user("What's the weather like in Paris today?")],
        tools: vec![weather()],
        tool_choice: ToolChoice::Tool {
            name: "get_weather".into(),
        },
        ..CompletionRequest::default()
    };
    request_body(&request, "fake-model", Some("s1"))
}

fn script(f: impl Fn(&Value) -> Vec<Timed> + Send + Sync + 'static) -> Script {
    Arc::new(f)
}

// ---- the arithmetic, on known samples ----

#[test]
fn percentiles_of_known_samples_are_exact() {
    // 0..=100 shuffled: rank h = p exactly.
    let mut v: Vec<f64> = (0..=100).map(f64::from).collect();
    v.reverse();
    v.swap(3, 70);
    assert_eq!(
        Distribution::of(&v),
        Some(Distribution {
            n: 101,
            mean: 50.0,
            min: 0.0,
            p50: 50.0,
            p90: 90.0,
            p99: 99.0,
            max: 100.0
        })
    );
    assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), Some(2.5));
    assert_eq!(percentile(&[10.0, 20.0], 25.0), Some(12.5));
    assert_eq!(percentile(&[5.0], 90.0), Some(5.0));
    assert_eq!(percentile(&[], 50.0), None);
    // Non-finite values are left out.
    assert_eq!(
        Distribution::of(&[f64::NAN, 3.0]).map(|d| (d.n, d.p99)),
        Some((1, 3.0))
    );
    assert_eq!(Distribution::of(&[]), None);
}

fn sample(
    ttft: f64,
    name: f64,
    call: f64,
    total: f64,
    chunks: &[f64],
    valid: bool,
) -> RequestSample {
    RequestSample {
        ttft_ms: Some(ttft),
        tool_name_ms: Some(name),
        call_complete_ms: Some(call),
        total_ms: total,
        chunk_times_ms: chunks.to_vec(),
        output_tokens: chunks.len() as u64,
        calls: vec![CallRecord {
            name: "get_weather".into(),
            arguments: "{}".into(),
            valid,
            problem: None,
        }],
        ..RequestSample::default()
    }
}

#[test]
fn summary_leaves_out_failures_and_counts_missing_calls() {
    let samples = vec![
        sample(10.0, 20.0, 40.0, 50.0, &[10.0, 20.0, 30.0], true),
        sample(30.0, 40.0, 60.0, 70.0, &[30.0, 34.0, 50.0], false),
        RequestSample {
            ttft_ms: Some(5.0),
            total_ms: 25.0,
            chunk_times_ms: vec![5.0, 15.0],
            output_tokens: 2,
            text: "no call".into(),
            ..RequestSample::default()
        },
        RequestSample::failed(1.0, "HTTP 500: boom"),
    ];
    let s = Summary::of(&samples, true);
    assert_eq!((s.requests, s.errors), (4, 1));
    assert_eq!((s.calls, s.valid_calls, s.missing_calls), (2, 1, 1));
    assert_eq!(s.requests_with_call, 2);
    assert_eq!(s.valid_share, Some(1.0 / 3.0));
    // ttft over the three answered requests: 5, 10, 30.
    let ttft = s.ttft_ms.unwrap();
    assert_eq!((ttft.n, ttft.p50, ttft.min, ttft.max), (3, 10.0, 5.0, 30.0));
    // ITL pooled: 10, 10 | 4, 16 | 10  → sorted 4 10 10 10 16.
    let itl = s.itl_ms.unwrap();
    assert_eq!(
        (itl.n, itl.p50, itl.min, itl.max, itl.mean),
        (5, 10.0, 4.0, 16.0, 10.0)
    );
    // TPOT = (total − ttft) / (n − 1): 40/2, 40/2, 20/1 → 20 ms each.
    let tpot = s.tpot_ms.unwrap();
    assert_eq!((tpot.n, tpot.min, tpot.max), (3, 20.0, 20.0));
    // tok/s = n / total: 3/50 ms, 3/70 ms, 2/25 ms → 60, 42.9, 80.
    let tok_s = s.output_tok_s.unwrap();
    assert_eq!((tok_s.p50, tok_s.max), (60.0, 80.0));
    assert_eq!(s.tool_name_ms.unwrap().n, 2);

    // With `auto` a reply without a call is not held against the share.
    let auto = Summary::of(&samples, false);
    assert_eq!((auto.missing_calls, auto.valid_share), (0, Some(0.5)));
}

#[test]
fn ab_pairs_alternate_and_ratios_pair_up() {
    assert_eq!(
        ab_schedule(3),
        vec![Side::A, Side::B, Side::A, Side::B, Side::A, Side::B]
    );
    let r = pair_ratios(
        &[Some(50.0), Some(30.0), None, Some(10.0)],
        &[Some(100.0), Some(10.0), Some(5.0), Some(40.0)],
    );
    assert_eq!(r.ratios, vec![Some(0.5), Some(3.0), None, Some(0.25)]);
    assert_eq!(r.median, Some(0.5));
    assert_eq!(pair_ratios(&[Some(1.0)], &[Some(0.0)]).median, None);
}

// ---- the client against the fake server ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn known_delays_give_known_bounds() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let server = start(
        'A',
        log,
        script(|_| {
            tool_call_stream(
                "get_weather",
                [r#"{"city": "Paris","#, r#" "unit": "celsius"}"#],
            )
        }),
    )
    .await;
    let client = ChatClient::new(&server.base_url, None).unwrap();
    let s = client.stream_chat(&forced_body(), &[weather()]).await;
    assert_eq!(s.error, None);
    let (ttft, name, call) = (
        s.ttft_ms.unwrap(),
        s.tool_name_ms.unwrap(),
        s.call_complete_ms.unwrap(),
    );
    // Lower bounds are exact (the server sleeps at least that long); upper bounds are generous.
    assert!((50.0..2_050.0).contains(&ttft), "ttft {ttft}");
    assert!((100.0..2_100.0).contains(&name), "name {name}");
    assert!((200.0..2_200.0).contains(&call), "call {call}");
    assert!(
        (250.0..2_250.0).contains(&s.total_ms),
        "total {}",
        s.total_ms
    );
    assert!(ttft <= name && name <= call && call <= s.total_ms);
    // Four output chunks (text, name, two argument pieces): three gaps.
    assert_eq!(s.chunk_times_ms.len(), 4);
    assert_eq!(s.itl_ms().len(), 3);
    assert_eq!((s.output_tokens, s.output_tokens_exact), (8, true));
    assert_eq!(s.prompt_tokens, Some(40));
    assert_eq!(s.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(s.text, "Sure.");
    assert_eq!(
        s.calls,
        vec![CallRecord {
            name: "get_weather".into(),
            arguments: r#"{"city": "Paris", "unit": "celsius"}"#.into(),
            valid: true,
            problem: None,
        }]
    );
    // The session id travels in `user`; the request streams.
    let body = server.bodies.lock().unwrap()[0].clone();
    assert_eq!(body["user"], "s1");
    assert_eq!(body["stream"], true);
    assert_eq!(body["tool_choice"]["function"]["name"], "get_weather");

    // The same request ten times: every measured percentile obeys the bounds.
    let mut samples = Vec::new();
    for _ in 0..10 {
        samples.push(client.stream_chat(&forced_body(), &[weather()]).await);
    }
    let summary = Summary::of(&samples, true);
    assert_eq!(summary.valid_share, Some(1.0));
    let call = summary.call_complete_ms.unwrap();
    assert!(call.min >= 200.0 && call.p99 < 2_200.0, "{call:?}");
    assert!(summary.ttft_ms.unwrap().min >= 50.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_are_counted_as_invalid() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let n = Arc::new(Mutex::new(0usize));
    let server = start(
        'A',
        log,
        script(move |_| {
            let mut n = n.lock().unwrap();
            *n += 1;
            match *n {
                // A schema violation: `city` is a number and `unit` is missing.
                1 => tool_call_stream("get_weather", [r#"{"city": "#, r#"5}"#]),
                // Not JSON at all: the call is never closed.
                2 => tool_call_stream("get_weather", [r#"{"city": "Par"#, r#"is"#]),
                // A tool that was not offered.
                3 => tool_call_stream("get_time", [r#"{"tz": "#, r#""UTC"}"#]),
                _ => tool_call_stream(
                    "get_weather",
                    [r#"{"city": "Paris", "#, r#""unit": "celsius"}"#],
                ),
            }
        }),
    )
    .await;
    let client = ChatClient::new(&server.base_url, None).unwrap();
    let mut samples = Vec::new();
    for _ in 0..4 {
        samples.push(client.stream_chat(&forced_body(), &[weather()]).await);
    }
    let valid: Vec<bool> = samples.iter().map(|s| s.calls[0].valid).collect();
    assert_eq!(valid, vec![false, false, false, true]);
    assert!(samples[..3].iter().all(|s| s.calls[0].problem.is_some()));
    // An unclosed call is complete when the stream finishes it.
    assert!(samples[1].call_complete_ms.unwrap() >= 250.0);
    let summary = Summary::of(&samples, true);
    assert_eq!((summary.calls, summary.valid_calls), (4, 1));
    assert_eq!(summary.valid_share, Some(0.25));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_errors_and_error_chunks_are_failed_samples() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let server = start(
        'A',
        log,
        script(|_| vec![(10, json!({"object": "error", "message": "out of memory"}))]),
    )
    .await;
    let client = ChatClient::new(&server.base_url, None).unwrap();
    let s = client.stream_chat(&forced_body(), &[weather()]).await;
    assert!(s.error.unwrap().contains("out of memory"));
    let nowhere = ChatClient::new("http://127.0.0.1:9/v1", None).unwrap();
    let s = nowhere.stream_chat(&forced_body(), &[weather()]).await;
    assert!(s.error.is_some());
    assert_eq!(Summary::of(&[s], true).errors, 1);
}

// ---- the command ----

async fn bench(args: &[&str]) -> Value {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentd"))
        .args(["bench", "tool-calls", "--json"])
        .args(args)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "agentd bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_runs_a_b_a_b_and_reports_pair_ratios() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let call = |_: &Value| {
        tool_call_stream(
            "get_weather",
            [r#"{"city": "Paris", "#, r#""unit": "celsius"}"#],
        )
    };
    let a = start('A', log.clone(), script(call)).await;
    let b = start('B', log.clone(), script(call)).await;
    let report = bench(&[
        "--endpoint",
        &a.base_url,
        "--compare",
        &b.base_url,
        "--reps",
        "3",
        "--warmup",
        "1",
    ])
    .await;
    // One warm-up pair, then three measured pairs, strictly alternating.
    assert_eq!(log.lock().unwrap().iter().collect::<String>(), "ABABABAB");
    let cmp = &report["comparison"];
    assert_eq!(cmp["pairs"], 3);
    let metrics = cmp["metrics"].as_array().unwrap();
    let call_ratios = metrics
        .iter()
        .find(|m| m["metric"] == "call_complete_ms")
        .unwrap();
    assert_eq!(call_ratios["ratios"].as_array().unwrap().len(), 3);
    assert!(call_ratios["median"].as_f64().unwrap() > 0.0);
    for side in report["endpoints"].as_array().unwrap() {
        assert_eq!(side["model"], "fake-model");
        assert_eq!(side["summary"]["requests"], 3);
        assert_eq!(side["summary"]["valid_share"], 1.0);
        assert!(side["summary"]["call_complete_ms"]["min"].as_f64().unwrap() >= 200.0);
    }
    // Forced requests are the anchor's, with a cold-prompt nonce.
    let body = a.bodies.lock().unwrap()[0].clone();
    assert_eq!(body["tool_choice"]["function"]["name"], "get_weather");
    assert!(body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .starts_with("[request "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_scenario_grows_the_transcript_with_real_tool_results() {
    let log = Arc::new(Mutex::new(Vec::new()));
    // Answer every turn with a call to the tool it names, with valid-looking arguments.
    let server = start(
        'A',
        log,
        script(|body| {
            let name = body["tool_choice"]["function"]["name"]
                .as_str()
                .unwrap_or("?")
                .to_string();
            tool_call_stream(&name, [r#"{"path": "#, r#""src"}"#])
        }),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("turns.svg");
    let report = bench(&[
        "--endpoint",
        &server.base_url,
        "--scenario",
        "agent",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--plot",
        svg.to_str().unwrap(),
    ])
    .await;
    let bodies = server.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 10);
    let session = bodies[0]["user"].as_str().unwrap().to_string();
    assert!(session.starts_with("bench-"));
    for (i, b) in bodies.iter().enumerate() {
        assert_eq!(b["user"], session.as_str(), "one session id for every turn");
        // system + task, then a call and its result per earlier turn.
        assert_eq!(b["messages"].as_array().unwrap().len(), 2 + 2 * i);
    }
    let names: Vec<&str> = bodies
        .iter()
        .map(|b| b["tool_choice"]["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["ls", "read", "find", "read", "grep", "read", "grep", "read", "ls", "read"]
    );
    // The scripted call of turn 1, with `content: ""` (llama-cpp-python rejects `null`).
    let call = &bodies[1]["messages"][2];
    assert_eq!(call["role"], "assistant");
    assert_eq!(call["content"], "");
    assert_eq!(call["tool_calls"][0]["function"]["name"], "ls");
    // Turn 3 sees the real README read at turn 2.
    let readme = &bodies[2]["messages"][5];
    assert_eq!(readme["role"], "tool");
    assert!(readme["content"]
        .as_str()
        .unwrap()
        .contains("Counts how often each word occurs"));
    let turns = report["endpoints"][0]["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 10);
    let tokens: Vec<f64> = turns
        .iter()
        .map(|t| t["prompt_tokens"].as_f64().unwrap())
        .collect();
    // The fake server reports a constant 40 prompt tokens, so the exact count is taken from it.
    assert!(tokens.iter().all(|&t| t == 40.0));
    assert!(
        report["endpoints"][0]["last_over_first_turn"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg") && plot.contains("polyline"));
}

#[cfg(feature = "local")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_own_split_is_reported_and_fits_in_the_clients_total() {
    crate::suite::common::smollm2_path();
    let report = bench(&["--local", "--offline", "--reps", "2", "--warmup", "0"]).await;
    let summary = &report["endpoints"][0]["summary"];
    for key in ["server_queue_ms", "server_prefill_ms", "server_decode_ms"] {
        assert_eq!(summary[key]["n"], 2, "{key}: {summary}");
    }
    for run in report["runs"].as_array().unwrap() {
        for turn in run["turns"].as_array().unwrap() {
            let s = &turn["sample"];
            let server = &s["server"];
            let part = |k: &str| server[k].as_f64().unwrap();
            let (queue, prefill, decode) =
                (part("queue_ms"), part("prefill_ms"), part("decode_ms"));
            assert!(prefill > 0.0 && decode > 0.0 && queue >= 0.0, "{server}");
            // The server's parts happen inside the client's request, and the first token comes after prefill.
            let total = s["total_ms"].as_f64().unwrap();
            assert!(
                queue + prefill + decode <= total + 1.0,
                "{server} vs total {total}"
            );
            assert!(
                prefill <= s["ttft_ms"].as_f64().unwrap() + 1.0,
                "{server} vs {s}"
            );
        }
    }
}
