//! A fake OpenAI-compatible (vLLM-flavoured) server for RemoteProvider tests: an axum app on 127.0.0.1:0 that
//! answers `/v1/chat/completions` with scripted responses (SSE chunks with optional delays, error statuses,
//! hangs), serves `/v1/models` and optionally `/tokenize`, and records every request it receives.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

/// What the server does for one chat request.
#[derive(Clone, Debug)]
pub enum Reply {
    /// 200 with these SSE `data:` payloads (each becomes `data: …\n\n`), `delay` before each, then the end of
    /// the body — or, with `hang`, no end at all.
    Sse {
        events: Vec<String>,
        delay: Duration,
        hang: bool,
    },
    /// Any status, headers and body, sent at once.
    Raw {
        status: u16,
        headers: Vec<(String, String)>,
        content_type: String,
        body: String,
    },
    /// Never answer (not even headers).
    HangBeforeHeaders,
}

impl Reply {
    /// A complete SSE stream of these chunks followed by `[DONE]`.
    pub fn sse(chunks: Vec<Value>) -> Self {
        let mut events: Vec<String> = chunks.iter().map(Value::to_string).collect();
        events.push("[DONE]".into());
        Reply::Sse {
            events,
            delay: Duration::ZERO,
            hang: false,
        }
    }

    /// An error status with an OpenAI-style body.
    pub fn error(status: u16, message: &str) -> Self {
        Reply::Raw {
            status,
            headers: Vec::new(),
            content_type: "application/json".into(),
            body: json!({"object": "error", "message": message, "type": "Error", "param": null, "code": status})
                .to_string(),
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        if let Reply::Raw { headers, .. } = &mut self {
            headers.push((name.into(), value.into()));
        }
        self
    }
}

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
}

#[derive(Default)]
struct Inner {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<Recorded>>,
    /// `None`: `/tokenize` is 404 (a server without it); `Some(n)`: it answers `count: n`.
    tokenize_count: Mutex<Option<u64>>,
    models: Mutex<Vec<Value>>,
}

/// The running server. Dropping it stops it.
pub struct FakeServer {
    pub base_url: String,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    /// Starts the server with these chat replies, served in order.
    pub async fn start(replies: Vec<Reply>) -> Self {
        let inner = Arc::new(Inner::default());
        inner.replies.lock().unwrap().extend(replies);
        *inner.models.lock().unwrap() =
            vec![json!({"id": "fake-model", "object": "model", "max_model_len": 4096})];
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/completions", post(completions))
            .route("/v1/models", get(models))
            .route("/tokenize", post(tokenize))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            inner,
            task,
        }
    }

    pub fn push(&self, reply: Reply) {
        self.inner.replies.lock().unwrap().push_back(reply);
    }

    pub fn set_tokenize_count(&self, count: Option<u64>) {
        *self.inner.tokenize_count.lock().unwrap() = count;
    }

    /// Every request so far (chat, models and tokenize).
    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.requests.lock().unwrap().clone()
    }

    /// The chat requests so far.
    pub fn chat_requests(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.path == "/v1/chat/completions")
            .collect()
    }
}

fn record(inner: &Inner, path: &str, headers: HeaderMap, body: &str) {
    inner.requests.lock().unwrap().push(Recorded {
        path: path.into(),
        headers,
        body: serde_json::from_str(body).unwrap_or(Value::Null),
    });
}

async fn chat(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: String) -> Response {
    record(&inner, "/v1/chat/completions", headers, &body);
    next_reply(&inner).await
}

/// The legacy `/v1/completions` (raw text), answered from the same queue of replies.
async fn completions(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    record(&inner, "/v1/completions", headers, &body);
    next_reply(&inner).await
}

async fn next_reply(inner: &Inner) -> Response {
    let reply = inner.replies.lock().unwrap().pop_front();
    match reply {
        None => Response::builder()
            .status(500)
            .body(Body::from("the fake server has no reply left"))
            .unwrap(),
        Some(Reply::HangBeforeHeaders) => {
            futures::future::pending::<()>().await;
            unreachable!()
        }
        Some(Reply::Raw {
            status,
            headers,
            content_type,
            body,
        }) => {
            let mut b = Response::builder()
                .status(StatusCode::from_u16(status).unwrap())
                .header("content-type", content_type);
            for (k, v) in headers {
                b = b.header(k, v);
            }
            b.body(Body::from(body)).unwrap()
        }
        Some(Reply::Sse {
            events,
            delay,
            hang,
        }) => {
            let frames = futures::stream::unfold(
                (events.into_iter(), delay, hang),
                |(mut it, delay, hang)| async move {
                    match it.next() {
                        Some(data) => {
                            if !delay.is_zero() {
                                tokio::time::sleep(delay).await;
                            }
                            Some((
                                Ok::<String, Infallible>(format!("data: {data}\n\n")),
                                (it, delay, hang),
                            ))
                        }
                        None if hang => {
                            futures::future::pending::<()>().await;
                            None
                        }
                        None => None,
                    }
                },
            );
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(frames))
                .unwrap()
        }
    }
}

async fn models(State(inner): State<Arc<Inner>>, headers: HeaderMap) -> Response {
    record(&inner, "/v1/models", headers, "null");
    let data = inner.models.lock().unwrap().clone();
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from(
            json!({"object": "list", "data": data}).to_string(),
        ))
        .unwrap()
}

async fn tokenize(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: String) -> Response {
    record(&inner, "/tokenize", headers, &body);
    let count = *inner.tokenize_count.lock().unwrap();
    match count {
        None => Response::builder()
            .status(404)
            .body(Body::from("{\"detail\":\"Not Found\"}"))
            .unwrap(),
        Some(n) => Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Body::from(
                json!({"count": n, "max_model_len": 4096, "tokens": []}).to_string(),
            ))
            .unwrap(),
    }
}

/// A `chat.completion.chunk` with one choice.
pub fn chunk(delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}]
    })
}

/// The final `include_usage` chunk (no choices).
pub fn usage_chunk(prompt: u64, completion: u64, cached: u64) -> Value {
    json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "fake-model",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": cached}}
    })
}

/// A text reply as vLLM streams it: role first, the text in pieces, `stop`, then usage.
pub fn text_reply(pieces: &[&str], prompt: u64, completion: u64) -> Vec<Value> {
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    chunks.extend(pieces.iter().map(|p| chunk(json!({"content": p}), None)));
    chunks.push(chunk(json!({}), Some("stop")));
    chunks.push(usage_chunk(prompt, completion, 0));
    chunks
}

/// A raw-text reply as vLLM's `/v1/completions` streams it: the text in pieces, `stop`, then usage.
pub fn completion_reply(pieces: &[&str], prompt: u64, completion: u64) -> Vec<Value> {
    let piece = |text: &str, finish: Option<&str>| {
        json!({"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "fake-model",
               "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}]})
    };
    let mut chunks: Vec<Value> = pieces.iter().map(|p| piece(p, None)).collect();
    chunks.push(piece("", Some("stop")));
    let mut usage = usage_chunk(prompt, completion, 0);
    usage["object"] = json!("text_completion");
    chunks.push(usage);
    chunks
}

/// A tool-call delta for `index`.
pub fn call_delta(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
    let mut call = json!({"index": index, "function": {"arguments": args}});
    if let Some(id) = id {
        call["id"] = json!(id);
        call["type"] = json!("function");
    }
    if let Some(name) = name {
        call["function"]["name"] = json!(name);
    }
    json!({"tool_calls": [call]})
}
