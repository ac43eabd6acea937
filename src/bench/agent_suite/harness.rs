//! Who drives the model through a task: agentd's own agent (`agentd run --mode json`), or Pi's coding agent
//! (`pi --mode json`, npm `@mariozechner/pi-coding-agent`) against an `agentd serve` of the same model, so the
//! two harnesses meet the same model, server and sampling. Both print Pi's event names as JSON lines; one parser
//! reads them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::process::{run_with_timeout, Finished};
use crate::bench::BenchError;

/// The sampling of one pass over the suite.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Setting {
    /// `None`: the harness's default.
    pub temperature: Option<f32>,
    pub seed: Option<u64>,
}

impl Setting {
    pub fn label(&self) -> String {
        match self.temperature {
            Some(t) => format!("t={t}"),
            None => "defaults".into(),
        }
    }
}

/// One harness, ready to run tasks.
pub enum Harness {
    Agentd {
        bin: PathBuf,
        model: String,
        extra: Vec<String>,
        /// The name its runs are reported under (`agentd`, or `agentd -RULE` for an ablation).
        label: String,
    },
    Pi {
        pi: PathBuf,
        /// Pi's config dir (its `models.json` names the server).
        agent_dir: tempfile::TempDir,
        model_id: String,
        server: ServeChild,
    },
}

/// `agentd serve` in a child process, killed on drop.
pub struct ServeChild {
    child: Child,
    pub root: String,
}

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServeChild {
    /// Starts `bin serve --port 0 --model MODEL ARGS…` and waits for the address it prints.
    pub fn start(bin: &Path, model: &str, args: &[String]) -> Result<Self, BenchError> {
        let mut child = Command::new(bin)
            .args(["serve", "--port", "0", "--offline", "--model", model])
            .args(args)
            .env("AGENTD_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| BenchError::Workload(format!("cannot start {}: {e}", bin.display())))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| BenchError::Workload("agentd serve: no stdout".into()))?;
        let mut lines = BufReader::new(stdout).lines();
        let root = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(rest) = line.split("http://").nth(1) {
                        break format!("http://{}", rest.split_whitespace().next().unwrap_or(""));
                    }
                }
                _ => {
                    let _ = child.kill();
                    return Err(BenchError::Workload(
                        "agentd serve exited before it printed its address".into(),
                    ));
                }
            }
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(Self { child, root })
    }
}

impl Harness {
    /// Pi against a fresh `agentd serve` of `model`; `serve_args` go to the server (sampling overrides).
    pub fn pi(
        bin: &Path,
        pi: PathBuf,
        model: &str,
        serve_args: &[String],
    ) -> Result<Self, BenchError> {
        let server = ServeChild::start(bin, model, serve_args)?;
        let models: Value = reqwest::blocking_get_json(&format!("{}/v1/models", server.root))?;
        let model_id = models["data"][0]["id"]
            .as_str()
            .ok_or_else(|| BenchError::Protocol {
                url: server.root.clone(),
                message: format!("no model in /v1/models: {models}"),
            })?
            .to_string();
        let agent_dir = tempfile::tempdir()
            .map_err(|e| BenchError::Workload(format!("Pi's config dir: {e}")))?;
        let config = serde_json::json!({"providers": {"agentd": {
            "baseUrl": format!("{}/v1", server.root), "api": "openai-completions", "apiKey": "x",
            "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
            "models": [{"id": model_id}]}}});
        std::fs::write(agent_dir.path().join("models.json"), config.to_string())
            .map_err(|e| BenchError::Workload(format!("Pi's models.json: {e}")))?;
        Ok(Harness::Pi {
            pi,
            agent_dir,
            model_id,
            server,
        })
    }

    pub fn name(&self) -> &str {
        match self {
            Harness::Agentd { label, .. } => label,
            Harness::Pi { .. } => "pi",
        }
    }

    /// The command that runs `prompt` in `ws` under `setting`.
    pub fn command(
        &self,
        ws: &Path,
        prompt: &str,
        tools: Option<&str>,
        setting: Setting,
    ) -> Command {
        match self {
            Harness::Agentd {
                bin, model, extra, ..
            } => {
                let mut c = Command::new(bin);
                c.args(["run", "--no-session", "--model", model, "--mode", "json"])
                    .args(["--allow", "all", "--offline", "--workspace"])
                    .arg(ws)
                    .arg("--harness-trace")
                    .arg(trace_file(ws));
                if let Some(t) = tools {
                    c.args(["--tools", t]);
                }
                if let Some(t) = setting.temperature {
                    c.args(["--temperature", &t.to_string()]);
                }
                if let Some(s) = setting.seed {
                    c.args(["--seed", &s.to_string()]);
                }
                c.args(extra).args(["-p", prompt]);
                c
            }
            Harness::Pi {
                pi,
                agent_dir,
                model_id,
                ..
            } => {
                let mut c = Command::new(pi);
                c.args(["--no-session", "--provider", "agentd", "--model", model_id])
                    .args([
                        "--mode",
                        "json",
                        "--offline",
                        "--no-extensions",
                        "--no-skills",
                    ]);
                if let Some(t) = tools {
                    c.args(["--tools", t]);
                }
                c.args(["-p", prompt])
                    .env("PI_CODING_AGENT_DIR", agent_dir.path())
                    .env("PI_OFFLINE", "1");
                c
            }
        }
    }

    /// Runs one task's prompt in `ws`.
    pub fn run(
        &self,
        ws: &Path,
        prompt: &str,
        tools: Option<&str>,
        setting: Setting,
        timeout: Duration,
    ) -> Result<Finished, BenchError> {
        let mut cmd = self.command(ws, prompt, tools, setting);
        cmd.current_dir(ws).stdin(Stdio::null());
        run_with_timeout(cmd, timeout).map_err(|e| {
            BenchError::Workload(format!("cannot run the {} harness: {e}", self.name()))
        })
    }
}

/// Where an agentd run in `ws` traces the harness rules that acted: beside the workspace, not in it.
pub fn trace_file(ws: &Path) -> std::path::PathBuf {
    ws.with_extension("rules")
}

/// What a run's event stream says.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RunEvents {
    pub tool_calls: usize,
    pub tool_errors: usize,
    pub calls: Vec<CallRecord>,
    pub turns: usize,
    pub output_tokens: u64,
    pub end_reason: Option<String>,
    /// The last assistant text.
    pub final_text: String,
    /// Lines that are not JSON (a harness's own log lines).
    pub bad_lines: usize,
}

/// One executed tool call.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CallRecord {
    pub tool: String,
    pub args: Value,
    pub is_error: bool,
    /// The head of the result the model saw.
    pub result: String,
}

fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect(),
        _ => String::new(),
    }
}

fn result_text(result: &Value) -> String {
    match &result["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => result.as_str().unwrap_or_default().to_string(),
    }
}

/// Reads the JSON-lines events both harnesses print (Pi's names: `tool_execution_start` / `_end`,
/// `message_end`, `turn_end`, `agent_end`).
pub fn parse_events(stdout: &[u8]) -> RunEvents {
    let mut info = RunEvents::default();
    let mut open: std::collections::HashMap<String, usize> = Default::default();
    for line in stdout.split(|&b| b == b'\n') {
        if line.is_empty() || line.starts_with(br#"{"type":"message_update""#) {
            continue;
        }
        let Ok(ev) = serde_json::from_slice::<Value>(line) else {
            info.bad_lines += 1;
            continue;
        };
        let id = ev["toolCallId"]
            .as_str()
            .or_else(|| ev["tool_call_id"].as_str())
            .unwrap_or_default()
            .to_string();
        let tool = ev["toolName"]
            .as_str()
            .or_else(|| ev["tool_name"].as_str())
            .unwrap_or_default()
            .to_string();
        match ev["type"].as_str().unwrap_or_default() {
            "tool_execution_start" => {
                info.tool_calls += 1;
                open.insert(id, info.calls.len());
                info.calls.push(CallRecord {
                    tool,
                    args: ev["args"].clone(),
                    is_error: false,
                    result: String::new(),
                });
            }
            "tool_execution_end" => {
                let at = match open.remove(&id) {
                    Some(at) => at,
                    None => {
                        info.calls.push(CallRecord {
                            tool,
                            args: Value::Null,
                            is_error: false,
                            result: String::new(),
                        });
                        info.calls.len() - 1
                    }
                };
                let is_error = ev["isError"]
                    .as_bool()
                    .or_else(|| ev["is_error"].as_bool())
                    .unwrap_or(false);
                let call = &mut info.calls[at];
                call.is_error = is_error;
                call.result = super::tasks::tail(&result_text(&ev["result"]), 400);
                if is_error {
                    info.tool_errors += 1;
                }
            }
            "message_end" => {
                let m = &ev["message"];
                if m["role"] == "assistant" {
                    let text = text_of(m);
                    if !text.trim().is_empty() {
                        info.final_text = super::tasks::tail(&text, 1500);
                    }
                    info.output_tokens += m["usage"]["output"].as_u64().unwrap_or(0);
                }
            }
            "turn_end" => info.turns += 1,
            "agent_end" => {
                info.end_reason = ev["reason"].as_str().map(str::to_string);
            }
            _ => {}
        }
    }
    info
}

/// A small blocking GET for the harness setup (no runtime needed).
mod reqwest {
    use crate::bench::BenchError;

    pub fn blocking_get_json(url: &str) -> Result<serde_json::Value, BenchError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| BenchError::Config(e.to_string()))?;
        rt.block_on(async {
            let resp = ::reqwest::get(url).await.map_err(|e| BenchError::Connect {
                url: url.to_string(),
                message: e.to_string(),
            })?;
            resp.json().await.map_err(|e| BenchError::Protocol {
                url: url.to_string(),
                message: e.to_string(),
            })
        })
    }
}
