//! The two MCP transports. **stdio**: the server is a child process (its own process group, killed with it)
//! reading JSON-RPC messages one per line on stdin and writing them on stdout; a reader task matches answers to
//! requests by id, answers the server's own requests and keeps the last lines of stderr for error messages. When
//! the process exits every waiting request fails at once with that reason. **Streamable HTTP**: every message is
//! a POST to one URL; the answer is JSON, or an event stream in which the response to our request arrives; the
//! `Mcp-Session-Id` the server sets on `initialize` goes with every later message.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::Stdio as ProcessStdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

use super::bounded::{self, MAX_STDERR_LINE};
use super::{answer_server_request, notification, Pending};

/// Why a transport exchange failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    Start(String),
    Gone(String),
    Timeout,
    Protocol(String),
}

/// How to reach a server.
pub enum Transport {
    Stdio(Stdio),
    Http(Http),
}

impl Transport {
    /// Sends a request and waits (at most `timeout`) for the message that answers it.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, Failure> {
        match self {
            Transport::Stdio(s) => s.request(method, params, timeout).await,
            Transport::Http(h) => h.request(method, params, timeout).await,
        }
    }

    /// Sends a notification (no answer).
    pub async fn notify(&self, message: &Value) -> Result<(), String> {
        match self {
            Transport::Stdio(s) => s.write(message).await,
            Transport::Http(h) => h.notify(message).await,
        }
    }

    pub fn set_protocol_version(&mut self, version: &str) {
        if let Transport::Http(h) = self {
            h.protocol_version = version.to_string();
        }
    }

    pub async fn close(&self) {
        match self {
            Transport::Stdio(s) => s.close().await,
            Transport::Http(h) => h.close().await,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Lines of a stdio server's stderr kept for error messages.
const STDERR_LINES: usize = 20;

/// A stdio server.
pub struct Stdio {
    /// Shared with the task that writes our answers to the server's requests.
    stdin: SharedStdin,
    child: tokio::sync::Mutex<Child>,
    pending: Arc<Mutex<Pending>>,
    /// Why the server is gone, once it is.
    dead: Arc<Mutex<Option<String>>>,
    next_id: AtomicU64,
}

impl Stdio {
    /// Starts `command args…` in `cwd` with `env` added.
    pub fn spawn(
        command: &str,
        args: &[String],
        env: &[(String, String)],
        cwd: Option<PathBuf>,
    ) -> Result<Self, Failure> {
        let mut cmd = Command::new(command);
        cmd.args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(ProcessStdio::piped())
            .stdout(ProcessStdio::piped())
            .stderr(ProcessStdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Failure::Start(format!("`{command}`: {e}")))?;
        let stdin = child.stdin.take();
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(Failure::Start("the child's pipes are missing".into()));
        };
        let pending: Arc<Mutex<Pending>> = Arc::default();
        let dead: Arc<Mutex<Option<String>>> = Arc::default();
        let tail: Arc<Mutex<VecDeque<String>>> = Arc::default();
        let stdin: SharedStdin = Arc::new(tokio::sync::Mutex::new(stdin));
        let this = Self {
            stdin,
            child: tokio::sync::Mutex::new(child),
            pending: pending.clone(),
            dead: dead.clone(),
            next_id: AtomicU64::new(1),
        };
        let keep = tail.clone();
        tokio::spawn(async move {
            let mut stderr = BufReader::new(stderr);
            while let Ok(Some(line)) = bounded::next_line(&mut stderr, MAX_STDERR_LINE).await {
                let mut text = String::from_utf8_lossy(&line.bytes).into_owned();
                if line.cut {
                    text.push('…');
                }
                let mut t = lock(&keep);
                if t.len() == STDERR_LINES {
                    t.pop_front();
                }
                t.push_back(text);
            }
        });
        // Answers to the server's own requests go through this channel to the writer.
        let (replies, mut outbox) = tokio::sync::mpsc::unbounded_channel::<Value>();
        let reader_pending = pending.clone();
        let reader_dead = dead.clone();
        let reader_tail = tail;
        tokio::spawn(async move {
            let mut stdout = BufReader::new(stdout);
            // Bytes written that were not JSON-RPC messages (a server that floods its output is given up on).
            let mut garbage = 0usize;
            let mut flooded = false;
            while let Ok(Some(line)) = bounded::next_line(&mut stdout, bounded::MAX_LINE).await {
                let msg = match line.cut {
                    true => None,
                    false => serde_json::from_slice::<Value>(line.bytes.trim_ascii()).ok(),
                };
                match msg {
                    Some(msg) => route(msg, &reader_pending, &replies),
                    None if line.bytes.trim_ascii().is_empty() => {}
                    None => {
                        garbage += line.wire_len;
                        if garbage > bounded::MAX_GARBAGE {
                            flooded = true;
                            break;
                        }
                    }
                }
            }
            let tail: Vec<String> = lock(&reader_tail).iter().cloned().collect();
            let why = if flooded {
                format!(
                    "it wrote more than {} MiB that is not JSON-RPC on stdout; it is no longer read",
                    bounded::MAX_GARBAGE >> 20
                )
            } else if tail.is_empty() {
                "its process exited".to_string()
            } else {
                format!("its process exited; its last output: {}", tail.join(" | "))
            };
            *lock(&reader_dead) = Some(why);
            // Dropping the senders wakes every waiting request.
            lock(&reader_pending).clear();
        });
        let writer = this.stdin.clone();
        tokio::spawn(async move {
            while let Some(msg) = outbox.recv().await {
                if write_line(&writer, &msg).await.is_err() {
                    break;
                }
            }
        });
        Ok(this)
    }

    fn gone(&self) -> Option<String> {
        lock(&self.dead).clone()
    }

    async fn write(&self, message: &Value) -> Result<(), String> {
        if let Some(why) = self.gone() {
            return Err(why);
        }
        write_line(&self.stdin, message).await
    }

    async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::oneshot::channel();
        lock(&self.pending).insert(id, tx);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        if let Err(e) = self.write(&msg).await {
            lock(&self.pending).remove(&id);
            return Err(Failure::Gone(e));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(Failure::Gone(
                self.gone().unwrap_or_else(|| "it closed its output".into()),
            )),
            Err(_) => {
                lock(&self.pending).remove(&id);
                let cancel = notification(
                    "notifications/cancelled",
                    json!({"requestId": id, "reason": "timed out"}),
                );
                let _ = self.write(&cancel).await;
                Err(Failure::Timeout)
            }
        }
    }

    async fn close(&self) {
        self.stdin.lock().await.take();
        let mut child = self.child.lock().await;
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            // The whole process group: a server that started helpers takes them with it.
            // SAFETY: kill(2) with a negative pid signals a process group; no memory is involved.
            unsafe {
                libc::kill(-pid, libc::SIGTERM);
            }
        }
        if tokio::time::timeout(Duration::from_secs(2), child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
    }
}

/// A server's stdin, shared by requests and the answers to the server's own requests.
type SharedStdin = Arc<tokio::sync::Mutex<Option<ChildStdin>>>;

/// Writes `message` as one line.
async fn write_line(stdin: &SharedStdin, message: &Value) -> Result<(), String> {
    let mut guard = stdin.lock().await;
    let Some(stdin) = guard.as_mut() else {
        return Err("its stdin is closed".into());
    };
    let mut line = message.to_string();
    line.push('\n');
    stdin
        .write_all(line.as_bytes())
        .await
        .map_err(|e| format!("writing to it failed: {e}"))?;
    stdin
        .flush()
        .await
        .map_err(|e| format!("writing to it failed: {e}"))
}

/// Sends `msg` where it belongs: an answer to its waiting request, or (a request of the server's) our reply.
fn route(
    msg: Value,
    pending: &Mutex<Pending>,
    replies: &tokio::sync::mpsc::UnboundedSender<Value>,
) {
    let is_answer =
        msg.get("method").is_none() && (msg.get("result").is_some() || msg.get("error").is_some());
    if is_answer {
        if let Some(id) = msg.get("id").and_then(Value::as_u64) {
            if let Some(tx) = lock(pending).remove(&id) {
                let _ = tx.send(msg);
            }
        }
        return;
    }
    if let Some(reply) = answer_server_request(&msg) {
        let _ = replies.send(reply);
    }
}

/// Appends `chunk` to `buf` with each CRLF as LF (a CR at its end stays: its LF may open the next chunk).
fn append_lf(buf: &mut Vec<u8>, chunk: &[u8]) {
    let mut i = 0;
    while i < chunk.len() {
        if !(chunk[i] == b'\r' && chunk.get(i + 1) == Some(&b'\n')) {
            buf.push(chunk[i]);
        }
        i += 1;
    }
}

/// Where the first blank line (`\n\n`) of `buf` starts, looking from just before `scanned` (what an earlier
/// look already searched; its last byte may have been a CR since dropped, so two back).
fn find_blank_line(buf: &[u8], scanned: usize) -> Option<usize> {
    let from = scanned.saturating_sub(2);
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\n\n")
        .map(|p| p + from)
}

/// A streamable-HTTP server.
pub struct Http {
    client: reqwest::Client,
    url: String,
    headers: Vec<(String, String)>,
    session: Mutex<Option<String>>,
    protocol_version: String,
    next_id: AtomicU64,
}

impl Http {
    pub fn new(url: &str, headers: &[(String, String)]) -> Result<Self, Failure> {
        let client = reqwest::Client::builder()
            .build()
            .map_err(|e| Failure::Start(e.to_string()))?;
        Ok(Self {
            client,
            url: url.to_string(),
            headers: headers.to_vec(),
            session: Mutex::new(None),
            protocol_version: super::PROTOCOL_VERSION.into(),
            next_id: AtomicU64::new(1),
        })
    }

    fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut req = self
            .client
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", &self.protocol_version)
            .body(body.to_string());
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        if let Some(id) = lock(&self.session).clone() {
            req = req.header("mcp-session-id", id);
        }
        req
    }

    async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, Failure> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let exchange = async {
            let resp = self.post(&msg).send().await.map_err(|e| {
                if e.is_connect() {
                    Failure::Start(format!("cannot reach {}: {e}", self.url))
                } else {
                    Failure::Gone(e.to_string())
                }
            })?;
            if let Some(sid) = resp
                .headers()
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
            {
                *lock(&self.session) = Some(sid.to_string());
            }
            let status = resp.status();
            if !status.is_success() {
                let text = resp.text().await.unwrap_or_default();
                return Err(Failure::Gone(format!("HTTP {status}: {}", text.trim())));
            }
            let sse = resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            let mut body = resp.bytes_stream();
            if !sse {
                let mut bytes = Vec::new();
                while let Some(chunk) = body.next().await {
                    let chunk = chunk.map_err(|e| Failure::Gone(e.to_string()))?;
                    if bytes.len() + chunk.len() > bounded::MAX_LINE {
                        return Err(Failure::Protocol(format!(
                            "the answer is larger than {} MiB",
                            bounded::MAX_LINE >> 20
                        )));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                return serde_json::from_slice(&bytes)
                    .map_err(|e| Failure::Protocol(format!("the answer is not JSON: {e}")));
            }
            // Bytes until an event is whole: a character split across chunks is decoded once both halves came.
            // Event streams may end lines with CRLF (uvicorn's do), possibly split across chunks.
            let mut buf: Vec<u8> = Vec::new();
            let mut scanned = 0;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| Failure::Gone(e.to_string()))?;
                if buf.last() == Some(&b'\r') && chunk.first() == Some(&b'\n') {
                    buf.pop();
                }
                append_lf(&mut buf, &chunk);
                if buf.len() > bounded::MAX_LINE {
                    return Err(Failure::Protocol(format!(
                        "the server's event stream went past {} MiB without ending an event",
                        bounded::MAX_LINE >> 20
                    )));
                }
                while let Some(end) = find_blank_line(&buf, scanned) {
                    scanned = 0;
                    let event: Vec<u8> = buf.drain(..end + 2).collect();
                    let event = String::from_utf8_lossy(&event);
                    let data: String = event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim_start)
                        .collect::<Vec<_>>()
                        .join("\n");
                    let Ok(v) = serde_json::from_str::<Value>(&data) else {
                        continue;
                    };
                    if v.get("id").and_then(Value::as_u64) == Some(id) && v.get("method").is_none()
                    {
                        return Ok(v);
                    }
                }
                scanned = buf.len();
            }
            Err(Failure::Gone(
                "the event stream ended without an answer".into(),
            ))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(Failure::Timeout),
        }
    }

    async fn notify(&self, message: &Value) -> Result<(), String> {
        let resp = self.post(message).send().await.map_err(|e| e.to_string())?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(format!("HTTP {}", resp.status()))
        }
    }

    async fn close(&self) {
        let Some(id) = lock(&self.session).clone() else {
            return;
        };
        let _ = self
            .client
            .delete(&self.url)
            .header("mcp-session-id", id)
            .timeout(Duration::from_secs(2))
            .send()
            .await;
    }
}
