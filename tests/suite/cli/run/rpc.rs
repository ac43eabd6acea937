//! `agentd run --mode rpc` end to end: a client on the child's stdin/stdout checks that every line is one JSON
//! object, that bad lines get error responses without ending the process, and drives prompt (with a real
//! `read`), get_state, get_messages, set_model, abort, compact, fork and new_session.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{wait_child, Sandbox};

/// An RPC client over the child's stdin/stdout.
struct Rpc {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Rpc {
    fn start(mut cmd: Command) -> Self {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line, parsed (every line must be one JSON object).
    fn next(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(Duration::from_secs(30))
            .expect("an RPC line");
        let v: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"));
        assert!(v.is_object(), "{line}");
        v
    }

    /// Lines until one matches, returning it and everything before it.
    fn until(&self, pred: impl Fn(&Value) -> bool) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let v = self.next();
            if pred(&v) {
                return (v, before);
            }
            before.push(v);
        }
    }

    fn response(&self, command: &str) -> Value {
        self.until(|v| v["type"] == "response" && v["command"] == command)
            .0
    }
}

fn is_agent_end(v: &Value) -> bool {
    v["type"] == "agent_end"
}

#[test]
fn rpc_mode_end_to_end() {
    let sb = Sandbox::new(json!({"chunk_delay_ms": 5, "replies": [
        {"steps": [{"text": "Looking."}, {"tool_call": {"name": "read", "arguments": {"path": "notes.txt"}}}]},
        "Milk.",
        {"steps": [{"text": "forever"}, {"hang": true}]},
        "## Goal\nTest compaction.\n\n## Progress\nAsked about notes.",
    ]}));
    std::fs::write(sb.cwd.join("notes.txt"), "milk\n").unwrap();
    let mut rpc = Rpc::start(sb.cmd(&["run", "--mode", "rpc"]));

    // Malformed lines get error responses and the process keeps going.
    rpc.send("this is not json");
    let r = rpc.next();
    assert_eq!(
        (
            r["type"].clone(),
            r["command"].clone(),
            r["success"].clone()
        ),
        (json!("response"), json!("parse"), json!(false))
    );
    rpc.send(r#"{"no_type": 1}"#);
    assert_eq!(rpc.next()["command"], "parse");
    rpc.send(r#"{"type": "frobnicate", "id": 7}"#);
    let r = rpc.next();
    assert_eq!(r["command"], "frobnicate");
    assert_eq!(r["id"], 7);
    assert!(r["error"].as_str().unwrap().contains("unknown command"));
    rpc.send(r#"{"type": "prompt"}"#);
    let r = rpc.next();
    assert_eq!(
        (r["command"].clone(), r["success"].clone()),
        (json!("prompt"), json!(false))
    );

    // A prompt: the response first, then the events, a real read among them.
    rpc.send(r#"{"type": "prompt", "message": "what do my notes say?", "id": "p1"}"#);
    let r = rpc.next();
    assert_eq!(
        r,
        json!({"type": "response", "command": "prompt", "id": "p1", "success": true})
    );
    let (end, events) = rpc.until(is_agent_end);
    assert_eq!(end["reason"], "completed");
    let read = events
        .iter()
        .find(|e| e["type"] == "tool_execution_end")
        .expect("a tool execution");
    assert_eq!(read["result"]["content"], "milk\n");

    rpc.send(r#"{"type": "get_state"}"#);
    let state = rpc.response("get_state");
    assert_eq!(state["success"], true);
    assert_eq!(state["data"]["model"], "scripted");
    assert_eq!(state["data"]["is_streaming"], false);
    assert_eq!(state["data"]["message_count"], 4);
    assert!(state["data"]["context_tokens"].as_u64().unwrap() > 0);
    assert!(state["data"]["session_file"]
        .as_str()
        .unwrap()
        .ends_with(".jsonl"));

    rpc.send(r#"{"type": "get_messages"}"#);
    let messages = rpc.response("get_messages")["data"]["messages"].clone();
    let roles: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool_result", "assistant"]);

    rpc.send(r#"{"type": "set_model", "model": "no-such-model"}"#);
    let r = rpc.response("set_model");
    assert_eq!(r["success"], false);
    assert!(r["error"].as_str().unwrap().contains("unknown model"));
    rpc.send(r#"{"type": "set_model", "model": "scripted"}"#);
    assert_eq!(rpc.response("set_model")["success"], true);

    // Abort a hanging reply; steer and follow_up are accepted while it runs.
    rpc.send(r#"{"type": "prompt", "message": "hang please"}"#);
    assert_eq!(rpc.response("prompt")["success"], true);
    rpc.send(r#"{"type": "prompt", "message": "while running"}"#);
    let r = rpc.response("prompt");
    assert_eq!(
        r["success"], false,
        "a plain prompt while running is refused: {r}"
    );
    rpc.send(r#"{"type": "abort"}"#);
    assert_eq!(rpc.response("abort")["success"], true);
    let (end, _) = rpc.until(is_agent_end);
    assert_eq!(end["reason"], "aborted");

    // Compaction summarises with the model (the 4th reply).
    rpc.send(r#"{"type": "compact", "custom_instructions": "focus on the notes"}"#);
    let r = rpc.response("compact");
    assert_eq!(r["success"], true, "{r}");
    assert!(r["data"]["summary"]
        .as_str()
        .unwrap()
        .contains("Test compaction."));
    assert!(r["data"]["tokens_before"].as_u64().unwrap() > 0);

    // Fork from a user message: a new session file, the message's text returned.
    rpc.send(r#"{"type": "get_fork_messages"}"#);
    let points = rpc.response("get_fork_messages")["data"]["messages"].clone();
    let last = points
        .as_array()
        .unwrap()
        .last()
        .expect("a fork point")
        .clone();
    rpc.send(&json!({"type": "fork", "entry_id": last["entry_id"]}).to_string());
    let r = rpc.response("fork");
    assert_eq!(r["success"], true, "{r}");
    assert_eq!(r["data"]["text"], last["text"]);
    assert_eq!(r["data"]["text"], "hang please");

    rpc.send(r#"{"type": "new_session"}"#);
    assert_eq!(rpc.response("new_session")["success"], true);
    rpc.send(r#"{"type": "get_messages"}"#);
    assert_eq!(rpc.response("get_messages")["data"]["messages"], json!([]));

    // End of input: the process exits 0.
    rpc.stdin.take();
    let status = wait_child(&mut rpc.child, Duration::from_secs(20));
    assert_eq!(status, Some(0));
    assert!(sb.session_files().len() >= 2, "the fork is a second file");
}

/// RPC mode asks before `exec` and `write` by default: a bash call becomes an `approval_request` with the
/// command as its preview; `allow` runs it, `deny` (with a reason) gives the model an error result, `always`
/// runs this and every later call of the tool without asking, and an `edit` request carries its diff.
#[test]
fn rpc_approvals_are_a_request_response_pair() {
    let sb = Sandbox::new(json!([
        {"steps": [{"tool_call": {"name": "bash", "arguments": {"command": "echo approved-run"}}}]},
        {"steps": [{"tool_call": {"name": "bash", "arguments": {"command": "echo second"}}}]},
        // Read first: an edit of a file the session has not read is answered with its text, not made.
        {"steps": [{"tool_call": {"name": "read", "arguments": {"path": "notes.txt"}}}]},
        {"steps": [{"tool_call": {"name": "edit", "arguments": {"path": "notes.txt", "edits": [{"old_text": "milk", "new_text": "oat milk"}]}}}]},
        {"steps": [{"tool_call": {"name": "bash", "arguments": {"command": "echo third"}}}]},
        {"steps": [{"tool_call": {"name": "bash", "arguments": {"command": "echo fourth"}}}]},
        "Done."
    ]));
    std::fs::write(sb.cwd.join("notes.txt"), "milk\n").unwrap();
    let mut rpc = Rpc::start(sb.cmd(&["run", "--mode", "rpc", "--no-session"]));
    rpc.send(r#"{"type": "prompt", "message": "run it"}"#);
    assert_eq!(rpc.response("prompt")["success"], true);

    // 1: allowed by the command's own id.
    let (request, _) = rpc.until(|v| v["type"] == "approval_request");
    assert_eq!(request["tool_name"], "bash");
    assert_eq!(request["tags"], json!(["exec"]));
    assert_eq!(request["preview"], "$ echo approved-run");
    rpc.send(r#"{"type": "get_state"}"#);
    let state = rpc.response("get_state");
    assert_eq!(state["data"]["pending_approvals"][0]["id"], request["id"]);
    rpc.send(
        &json!({"type": "approval_response", "id": request["id"], "decision": "allow"}).to_string(),
    );
    assert_eq!(rpc.response("approval_response")["success"], true);
    let (end, _) = rpc.until(|v| v["type"] == "tool_execution_end");
    assert_eq!(end["is_error"], false, "{end}");
    assert!(end["result"]["content"]
        .as_str()
        .unwrap()
        .contains("approved-run"));

    // 2: denied with a reason; an unknown id is an error response.
    let (request, _) = rpc.until(|v| v["type"] == "approval_request");
    rpc.send(
        r#"{"type": "approval_response", "approval_id": "approval-999", "decision": "allow"}"#,
    );
    let r = rpc.response("approval_response");
    assert_eq!(r["success"], false);
    assert!(r["error"].as_str().unwrap().contains("approval-999"));
    rpc.send(
        &json!({"type": "approval_response", "approval_id": request["id"], "decision": "deny",
                "reason": "not on this machine"})
        .to_string(),
    );
    let (end, _) = rpc.until(|v| v["type"] == "tool_execution_end");
    assert_eq!(end["is_error"], true);
    let content = end["result"]["content"].as_str().unwrap();
    assert!(content.contains("not on this machine"), "{content}");

    // 3: the edit's request shows the diff; always-allowed.
    let (request, _) = rpc.until(|v| v["type"] == "approval_request");
    assert_eq!(request["tool_name"], "edit");
    let preview = request["preview"].as_str().unwrap();
    assert!(
        preview.contains("-milk") && preview.contains("+oat milk"),
        "{preview}"
    );
    assert_eq!(
        std::fs::read_to_string(sb.cwd.join("notes.txt")).unwrap(),
        "milk\n",
        "nothing is written before the answer"
    );
    rpc.send(
        &json!({"type": "approval_response", "approval_id": request["id"], "decision": "allow"})
            .to_string(),
    );
    rpc.until(|v| v["type"] == "tool_execution_end");
    assert_eq!(
        std::fs::read_to_string(sb.cwd.join("notes.txt")).unwrap(),
        "oat milk\n"
    );

    // 4: "always" for bash; 5 runs without a request.
    let (request, _) = rpc.until(|v| v["type"] == "approval_request");
    assert_eq!(request["preview"], "$ echo third");
    rpc.send(
        &json!({"type": "approval_response", "approval_id": request["id"], "decision": "always"})
            .to_string(),
    );
    let (end, before) = rpc.until(is_agent_end);
    assert_eq!(end["reason"], "completed");
    assert!(
        !before.iter().any(|v| v["type"] == "approval_request"),
        "always: no second request"
    );
    let outputs: Vec<&str> = before
        .iter()
        .filter(|v| v["type"] == "tool_execution_end")
        .filter_map(|v| v["result"]["content"].as_str())
        .collect();
    assert!(outputs.iter().any(|o| o.contains("fourth")), "{outputs:?}");
    drop(rpc.stdin.take());
    assert_eq!(wait_child(&mut rpc.child, Duration::from_secs(20)), Some(0));
}

/// Closing stdin while a call waits for approval denies it, and the process still exits 0.
#[test]
fn rpc_eof_denies_a_waiting_approval() {
    let sb = Sandbox::new(json!([
        {"steps": [{"tool_call": {"name": "write", "arguments": {"path": "out.txt", "content": "x"}}}]},
        "Done."
    ]));
    let mut rpc = Rpc::start(sb.cmd(&["run", "--mode", "rpc", "--no-session"]));
    rpc.send(r#"{"type": "prompt", "message": "write it"}"#);
    let (request, _) = rpc.until(|v| v["type"] == "approval_request");
    assert_eq!(request["tool_name"], "write");
    assert!(request["preview"]
        .as_str()
        .unwrap()
        .starts_with("new file out.txt"));
    drop(rpc.stdin.take());
    let (end, _) = rpc.until(|v| v["type"] == "tool_execution_end");
    assert_eq!(end["is_error"], true);
    assert_eq!(wait_child(&mut rpc.child, Duration::from_secs(20)), Some(0));
    assert!(!sb.cwd.join("out.txt").exists());
}

/// A client that sends the next prompt the moment it reads `agent_end` finds the agent free: the end is written
/// only after the run has let the agent go (it raced the run's last steps, and the prompt was refused as running).
#[test]
fn a_prompt_sent_on_agent_end_is_never_refused_as_running() {
    const ROUNDS: usize = 40;
    let replies: Vec<Value> = (0..ROUNDS).map(|i| json!(format!("Reply {i}."))).collect();
    let sb = Sandbox::new(json!(replies));
    let mut rpc = Rpc::start(sb.cmd(&["run", "--mode", "rpc", "--no-session"]));
    for i in 0..ROUNDS {
        rpc.send(&json!({"type": "prompt", "message": format!("prompt {i}"), "id": i}).to_string());
        let r = rpc.response("prompt");
        assert_eq!(r["success"], true, "prompt {i}: {r}");
        let (end, _) = rpc.until(is_agent_end);
        assert_eq!(end["reason"], "completed", "{end}");
        assert!(end.to_string().contains(&format!("Reply {i}.")), "{end}");
    }
    rpc.send(r#"{"type": "get_state"}"#);
    let state = rpc.response("get_state");
    assert_eq!(state["success"], true, "{state}");
    drop(rpc.stdin.take());
    assert_eq!(wait_child(&mut rpc.child, Duration::from_secs(20)), Some(0));
}
