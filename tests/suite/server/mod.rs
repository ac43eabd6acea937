//! `agentd serve`'s router over real sockets (127.0.0.1, port 0): the OpenAI routes on the shared SmolLM2
//! engine and on scripted providers, our RemoteProvider pointed at the server (the provider contract through the
//! vLLM path), agent sessions, and a bounded load test.

#[cfg(feature = "local")]
mod budget_sweep;
#[cfg(feature = "local")]
mod cache;
#[cfg(feature = "local")]
mod constraints;
#[cfg(feature = "local")]
mod embeddings;
#[cfg(feature = "local")]
mod extensions;
#[cfg(feature = "local")]
mod hardening;
#[cfg(feature = "local")]
mod infill;
#[cfg(feature = "local")]
mod load;
#[cfg(feature = "local")]
mod logit_bias;
#[cfg(feature = "local")]
mod max_model_len;
#[cfg(feature = "local")]
mod models;
#[cfg(feature = "local")]
mod openai;
#[cfg(feature = "local")]
mod openapi;
#[cfg(feature = "local")]
mod pooled_embeddings;
#[cfg(feature = "local")]
mod prefill;
#[cfg(feature = "local")]
mod raw_text;
#[cfg(feature = "local")]
mod reasoning;
#[cfg(feature = "local")]
mod reliability;
#[cfg(feature = "local")]
mod remote;
mod remote_doors;
#[cfg(feature = "local")]
mod sessions;
#[cfg(feature = "local")]
mod stalled_readers;
#[cfg(feature = "local")]
mod wire;

use std::sync::Arc;

use agentd::provider::Provider;
use agentd::server::{self, AppState, ServerOptions};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::suite::common;

/// `agentd serve --port 0 ARGS` as its own process (so its threads, files and memory can be read apart from the
/// other tests); killed on drop.
pub struct ServeProcess {
    pub child: std::process::Child,
    /// `http://127.0.0.1:PORT`
    pub root: String,
}

impl ServeProcess {
    /// Starts the real binary on the default model file (offline), with `args` after `serve --port 0`.
    pub fn start(args: &[&str]) -> Self {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agentd"));
        command
            .args(["serve", "--port", "0", "--offline", "--model"])
            .arg(common::smollm2_path())
            .args(args);
        Self::spawn(command)
    }

    /// Starts `command` (an `agentd serve` on port 0) and waits for the line that names its address.
    pub fn spawn(mut command: std::process::Command) -> Self {
        use std::io::{BufRead, BufReader};
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("start agentd serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let root = loop {
            let line = lines
                .next()
                .expect("agentd serve exited")
                .expect("read stdout");
            if let Some(rest) = line.split("http://").nth(1) {
                break format!("http://{}", rest.split_whitespace().next().unwrap_or(""));
            }
        };
        Self { child, root }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process's resident memory, in MiB.
    pub fn rss_mb(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        Some(line.split_whitespace().nth(1)?.parse::<f64>().ok()? / 1024.0)
    }

    /// How many threads and open file descriptors the process has.
    pub fn threads_and_fds(&self) -> (usize, usize) {
        let count = |what: &str| {
            std::fs::read_dir(format!("/proc/{}/{what}", self.pid()))
                .map(|d| d.count())
                .unwrap_or(0)
        };
        (count("task"), count("fd"))
    }

    /// SIGKILL, and wait for it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A server running on the current test's runtime.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`
    pub root: String,
    pub state: AppState,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub async fn start(state: AppState) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let root = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server::serve(listener, state.clone(), async move {
            let _ = stopped.await;
        }));
        Self {
            root,
            state,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// On the shared real engine.
    #[cfg(feature = "local")]
    pub async fn local(options: ServerOptions) -> Self {
        let provider = agentd::provider::LocalProvider::new(common::engine().clone());
        Self::start(AppState::new(Arc::new(provider), options)).await
    }

    /// On an engine of its own (for tests that read the engine's gauges while other tests use the shared one).
    #[cfg(feature = "local")]
    pub async fn local_own(options: ServerOptions) -> Self {
        let engine = tokio::task::spawn_blocking(|| {
            agentd::engine::Engine::load(agentd::engine::EngineOptions {
                model: agentd::model_files::fetch::ModelSelector::Path(common::smollm2_path()),
                device: agentd::engine::DeviceSpec::Cpu,
                ..Default::default()
            })
            .expect("load the default model")
        })
        .await
        .expect("the loading task");
        let provider = agentd::provider::LocalProvider::new(engine);
        Self::start(AppState::new(Arc::new(provider), options)).await
    }

    /// On any provider (one without raw completions or a tokenizer: those routes answer 501).
    pub async fn with_provider(provider: Arc<dyn Provider>, options: ServerOptions) -> Self {
        Self::start(AppState::new(provider, options)).await
    }

    /// On a scripted provider, with agent sessions written to `sessions_dir`.
    pub async fn scripted_with_sessions(
        provider: &agentd::provider::ScriptedProvider,
        sessions_dir: &std::path::Path,
    ) -> Self {
        Self::with_provider(
            Arc::new(provider.clone()),
            ServerOptions {
                sessions: agentd::server::sessions::SessionOptions {
                    dir: Some(sessions_dir.to_path_buf()),
                    ..Default::default()
                },
                allow_exec_without_key: true,
                ..ServerOptions::default()
            },
        )
        .await
    }

    /// Sends `text` to agent session `id` and reads the whole event stream.
    pub async fn prompt_session(&self, id: &str, text: &str) -> Vec<Value> {
        let resp = client()
            .post(self.url(&format!("/v1/sessions/{id}/prompt")))
            .json(&serde_json::json!({"content": text}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        sse(resp).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.root)
    }

    /// Sends the shutdown signal and waits for `serve` to return.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.task.take() {
            Some(t) => t.await.expect("serve panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.state.shutdown.cancel();
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().build().unwrap()
}

/// POSTs JSON; returns the status and the body as JSON (or as a string when it is not JSON).
pub async fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = client().post(url).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// `DELETE url`; the status.
pub async fn delete(url: &str) -> u16 {
    client().delete(url).send().await.unwrap().status().as_u16()
}

/// The id of the (first) model a server serves, as requests must name it.
pub async fn served_model(server: &TestServer) -> String {
    let (status, text) = get(&server.url("/v1/models")).await;
    assert_eq!(status, 200, "{text}");
    let models: Value = serde_json::from_str(&text).unwrap();
    models["data"][0]["id"].as_str().unwrap().to_string()
}

pub async fn get(url: &str) -> (u16, String) {
    let r = client().get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Reads a whole SSE response: the `data:` payloads in order (`[DONE]` included as a string).
pub async fn sse(resp: reqwest::Response) -> Vec<Value> {
    let mut events = Vec::new();
    let mut reader = SseReader::new(resp);
    while let Some(ev) = reader.next().await {
        events.push(ev);
    }
    events
}

/// POSTs a streamed chat completion (`body` has `stream: true`) and reads it to its end, pausing `pause` after
/// each event (a slow reader); whether it ended with `[DONE]`.
pub async fn stream_chat(
    http: &reqwest::Client,
    root: &str,
    body: &Value,
    pause: std::time::Duration,
) -> bool {
    let resp = http
        .post(format!("{root}/v1/chat/completions"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut reader = SseReader::new(resp);
    let mut done = false;
    while let Some(ev) = reader.next().await {
        done |= ev == Value::String("[DONE]".into());
        if !pause.is_zero() {
            tokio::time::sleep(pause).await;
        }
    }
    done
}

/// Incremental SSE reader over a response.
pub struct SseReader {
    body: futures::stream::BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
    buf: String,
}

impl SseReader {
    pub fn new(resp: reqwest::Response) -> Self {
        Self {
            body: resp.bytes_stream().boxed(),
            buf: String::new(),
        }
    }

    /// The next `data:` payload: JSON, or `Value::String("[DONE]")`.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let data: Vec<&str> = block
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                let data = data.join("\n");
                return Some(
                    serde_json::from_str(&data).unwrap_or(Value::String(data.to_string())),
                );
            }
            match self.body.next().await {
                Some(Ok(bytes)) => self.buf.push_str(&String::from_utf8_lossy(&bytes)),
                _ => return None,
            }
        }
    }
}
