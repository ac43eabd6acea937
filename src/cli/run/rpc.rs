//! `agentd run --mode rpc`: Pi's RPC protocol over stdin/stdout, strictly one JSON object per line.
//!
//! Commands (stdin), each `{"type": …, "id"?: …}`: `prompt {message, streaming_behavior?: steer|follow_up}`,
//! `steer {message}`, `follow_up {message}`, `abort`, `get_state`, `get_messages`, `set_model {model}`,
//! `compact {custom_instructions?}`, `new_session`, `fork {entry_id}`, `get_fork_messages`, `bash {command}`,
//! `set_steering_mode {mode}`, `set_follow_up_mode {mode}` (`one_at_a_time` | `all`),
//! `approval_response {approval_id, decision: allow|always|deny, reason?}`. Pi's camelCase field names are
//! accepted too.
//!
//! Approvals: a tool call that the approval policy asks about (RPC mode's default: `write`, `exec`, `network`)
//! is written as `{"type":"approval_request","id":…,"tool_call_id":…,"tool_name":…,"arguments":…,"tags":…,
//! "preview":…}` and waits for an `approval_response` naming that id (`approval_id`, or the command's own
//! `id`). `abort` denies what waits; so does closing stdin.
//!
//! Every command gets one response, `{"type":"response","command":…,"success":…,"id"?:…,"data"?:…,"error"?:…}`,
//! written before any event it causes. `prompt` answers at once; the run's events (`AgentEvent`s, tagged by
//! `type`) follow as it streams. A line that is not a JSON object with a string `type` gets
//! `{"type":"response","command":"parse","success":false,"error":…}`, an unknown type or bad fields an error
//! response under its own name; the process keeps running either way. At end of input it waits for the running
//! prompt to finish, then exits 0.
//!
//! A run's last `agent_end` is written once the run has let the agent go ([`EndGate`]): a client that reads it and
//! at once sends the next `prompt` (or `compact`, `fork`, …) is never told that the agent is running.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agentd::agent::QueueMode;
use agentd::app::approvals::Decision;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cli::agent_setup::{exit, CodingSession};

/// What a `prompt` sent while the agent runs should become.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Behavior {
    Steer,
    #[serde(alias = "followUp")]
    FollowUp,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Command {
    Prompt {
        message: String,
        #[serde(default, alias = "streamingBehavior")]
        streaming_behavior: Option<Behavior>,
    },
    Steer {
        message: String,
    },
    FollowUp {
        message: String,
    },
    Abort,
    GetState,
    GetMessages,
    SetModel {
        #[serde(alias = "modelId", alias = "model_id")]
        model: String,
    },
    Compact {
        #[serde(default, alias = "customInstructions")]
        custom_instructions: Option<String>,
    },
    NewSession,
    Fork {
        #[serde(alias = "entryId")]
        entry_id: String,
    },
    GetForkMessages,
    Bash {
        command: String,
    },
    SetSteeringMode {
        mode: QueueModeName,
    },
    SetFollowUpMode {
        mode: QueueModeName,
    },
    /// Answers an `approval_request`: the request's id in `approval_id` (or as the command's `id`).
    ApprovalResponse {
        #[serde(default, alias = "approvalId", alias = "request_id")]
        approval_id: Option<String>,
        decision: Decision,
        #[serde(default)]
        reason: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, Deserialize)]
enum QueueModeName {
    #[serde(rename = "one_at_a_time", alias = "one-at-a-time")]
    OneAtATime,
    #[serde(rename = "all")]
    All,
}

impl From<QueueModeName> for QueueMode {
    fn from(m: QueueModeName) -> Self {
        match m {
            QueueModeName::OneAtATime => QueueMode::OneAtATime,
            QueueModeName::All => QueueMode::All,
        }
    }
}

const COMMANDS: [&str; 16] = [
    "prompt",
    "steer",
    "follow_up",
    "abort",
    "get_state",
    "get_messages",
    "set_model",
    "compact",
    "new_session",
    "fork",
    "get_fork_messages",
    "bash",
    "set_steering_mode",
    "set_follow_up_mode",
    "approval_response",
    "parse",
];

/// The single writer of stdout: one line per value, flushed; `Null` stops it.
type Out = mpsc::UnboundedSender<Value>;

fn respond(out: &Out, id: &Option<Value>, command: &str, result: Result<Option<Value>, String>) {
    let mut v = json!({"type": "response", "command": command});
    if let Some(id) = id {
        v["id"] = id.clone();
    }
    match result {
        Ok(data) => {
            v["success"] = json!(true);
            if let Some(d) = data {
                v["data"] = d;
            }
        }
        Err(e) => {
            v["success"] = json!(false);
            v["error"] = json!(e);
        }
    }
    let _ = out.send(v);
}

/// Holds a run's `agent_end` back until the run has let the agent go (the next event of a run that loops again
/// for a late follow-up sends it too), so the client never sees an end while the agent is still busy.
#[derive(Default)]
struct EndGate {
    held: Mutex<Option<Value>>,
}

impl EndGate {
    fn held(&self) -> std::sync::MutexGuard<'_, Option<Value>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `v`, or holds it when it is an `agent_end`; what was held goes first.
    fn pass(&self, out: &Out, v: Value) {
        let mut held = self.held();
        if let Some(end) = held.take() {
            let _ = out.send(end);
        }
        if v["type"] == "agent_end" {
            *held = Some(v);
        } else {
            let _ = out.send(v);
        }
    }

    /// The run is over: writes the end it held.
    fn release(&self, out: &Out) {
        if let Some(end) = self.held().take() {
            let _ = out.send(end);
        }
    }
}

/// The prompt that runs (or ran last), and whether it is over.
struct Run {
    task: JoinHandle<()>,
    over: Arc<AtomicBool>,
}

/// Runs the protocol until stdin closes.
pub async fn serve(session: CodingSession) -> anyhow::Result<u8> {
    let (out, mut lines_out) = mpsc::unbounded_channel::<Value>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(v) = lines_out.recv().await {
            if v.is_null() {
                break;
            }
            let mut line = v.to_string();
            line.push('\n');
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                break;
            }
        }
    });
    let gate = Arc::new(EndGate::default());
    {
        let (out, gate) = (out.clone(), gate.clone());
        session.subscribe(Arc::new(move |ev| {
            if let Ok(v) = serde_json::to_value(&ev) {
                gate.pass(&out, v);
            }
            Box::pin(async {})
        }));
    }
    {
        let out = out.clone();
        session.approvals().set_sink(Some(Arc::new(move |request| {
            if let Ok(Value::Object(mut v)) = serde_json::to_value(&request) {
                v.insert("type".into(), json!("approval_request"));
                let _ = out.send(Value::Object(v));
            }
        })));
    }
    let mut running: Option<Run> = None;
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        let line = match stdin.next_line().await {
            Ok(Some(l)) => l,
            Ok(None) => break,
            Err(e) => {
                respond(&out, &None, "parse", Err(format!("cannot read stdin: {e}")));
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        handle_line(&session, &out, &gate, &line, &mut running).await;
    }
    // Nobody is left to answer: what waits is denied, and later calls that need approval are refused.
    session.approvals().set_sink(None);
    session
        .approvals()
        .deny_all("the RPC client closed its input before answering");
    if let Some(run) = running.take() {
        let _ = run.task.await;
    }
    // The session's listener holds a sender too, so the writer is told to stop (after what is queued).
    let _ = out.send(Value::Null);
    let _ = writer.await;
    if let Some(e) = session.session_error() {
        eprintln!("warning: {e}");
    }
    Ok(exit::OK)
}

async fn handle_line(
    session: &CodingSession,
    out: &Out,
    gate: &Arc<EndGate>,
    line: &str,
    running: &mut Option<Run>,
) {
    let value: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            return respond(out, &None, "parse", Err(format!("not JSON: {e}")));
        }
    };
    let id = value.get("id").cloned();
    let Some(kind) = value
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return respond(
            out,
            &id,
            "parse",
            Err("a command is a JSON object with a string `type`".into()),
        );
    };
    if !COMMANDS.contains(&kind.as_str()) || kind == "parse" {
        return respond(
            out,
            &id,
            &kind,
            Err(format!(
                "unknown command `{kind}` (known: {})",
                COMMANDS[..COMMANDS.len() - 1].join(", ")
            )),
        );
    }
    let command: Command = match serde_json::from_value(value) {
        Ok(c) => c,
        Err(e) => {
            return respond(
                out,
                &id,
                &kind,
                Err(format!("invalid `{kind}` command: {e}")),
            )
        }
    };
    let busy = running
        .as_ref()
        .is_some_and(|r| !r.over.load(Ordering::SeqCst))
        || session.is_running();
    let result = match command {
        Command::Prompt {
            message,
            streaming_behavior,
        } => match (busy, streaming_behavior) {
            (false, _) => {
                respond(out, &id, &kind, Ok(None));
                let s = session.clone();
                let over = Arc::new(AtomicBool::new(false));
                let (done, gate, out) = (over.clone(), gate.clone(), out.clone());
                let task = tokio::spawn(async move {
                    // Failures are data: the run's events and `get_state` report them.
                    let _ = s.prompt(&message).await;
                    // Over before the end is written: the client's next command finds the agent free.
                    done.store(true, Ordering::SeqCst);
                    gate.release(&out);
                });
                // The next command (an `abort`, say) must find the run started.
                let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
                while !session.is_running()
                    && !task.is_finished()
                    && tokio::time::Instant::now() < deadline
                {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                *running = Some(Run { task, over });
                return;
            }
            (true, Some(Behavior::Steer)) => {
                session.steer(&message);
                Ok(None)
            }
            (true, Some(Behavior::FollowUp)) => {
                session.follow_up(&message);
                Ok(None)
            }
            (true, None) => Err(
                "the agent is running: send `steer` or `follow_up`, or set streaming_behavior"
                    .into(),
            ),
        },
        Command::Steer { message } => {
            session.steer(&message);
            Ok(None)
        }
        Command::FollowUp { message } => {
            session.follow_up(&message);
            Ok(None)
        }
        Command::Abort => {
            session.abort();
            Ok(None)
        }
        Command::GetState => {
            let mut state = session.state_json();
            let usage = session.context_usage().await;
            state["context_tokens"] = json!(usage.tokens);
            state["context_tokens_exact"] = json!(usage.exact);
            state["pending_approvals"] = json!(session.approvals().pending());
            state["approvals"] = json!(session.approvals().policy().to_string());
            Ok(Some(state))
        }
        Command::GetMessages => Ok(Some(json!({"messages": session.agent().state().messages}))),
        Command::SetModel { model } => session
            .set_model(&model)
            .await
            .map(|m| Some(json!({"model": m})))
            .map_err(|e| format!("{e:#}")),
        Command::Compact {
            custom_instructions,
        } => session
            .compact(custom_instructions.as_deref())
            .await
            .map(Some)
            .map_err(|e| format!("{e:#}")),
        Command::NewSession => session
            .new_session()
            .map(|()| Some(json!({"cancelled": false})))
            .map_err(|e| format!("{e:#}")),
        Command::Fork { entry_id } => session
            .fork(&entry_id)
            .await
            .map(|(text, path)| {
                Some(json!({"text": text, "session_file": path, "cancelled": false}))
            })
            .map_err(|e| format!("{e:#}")),
        Command::GetForkMessages => session
            .fork_points()
            .map(|points| {
                let messages: Vec<Value> = points
                    .into_iter()
                    .map(|(entry_id, text)| json!({"entry_id": entry_id, "text": text}))
                    .collect();
                Some(json!({ "messages": messages }))
            })
            .map_err(|e| format!("{e:#}")),
        Command::Bash { command } => session
            .run_bash(&command, false, CancellationToken::new())
            .await
            .map(|m| serde_json::to_value(m).ok())
            .map_err(|e| format!("{e:#}")),
        Command::SetSteeringMode { mode } => {
            session.agent().set_steering_mode(mode.into());
            Ok(None)
        }
        Command::SetFollowUpMode { mode } => {
            session.agent().set_follow_up_mode(mode.into());
            Ok(None)
        }
        Command::ApprovalResponse {
            approval_id,
            decision,
            reason,
        } => match approval_id.or_else(|| id.as_ref().and_then(|v| v.as_str().map(String::from))) {
            Some(approval) => session
                .approvals()
                .resolve(&approval, decision, reason)
                .map(|()| None)
                .map_err(|e| e.to_string()),
            None => Err("name the request: approval_id (or id) of the approval_request".into()),
        },
    };
    respond(out, &id, &kind, result);
}
