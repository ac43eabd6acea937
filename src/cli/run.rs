//! `agentd run`: the non-interactive modes (Pi's `-p`, `--mode json`, `--mode rpc`).
//!
//! - **text** (the default; `-p`): each message is a prompt; the final answer of each is printed to stdout.
//!   With no message and a piped stdin, stdin is the prompt.
//! - **json** (`--mode json`, also `-p --mode json`): every `AgentEvent` as one JSON object per line on stdout.
//!
//! As in Pi, `-p` means "non-interactive" and `--mode` picks the output, so the two combine in either order.
//! - **rpc** (`--mode rpc`): JSON-line commands on stdin, responses and events on stdout (see `run/rpc.rs`).
//!
//! Exit codes (see `agent_setup`): 0 ok, 1 the run failed, 2 usage, 3 backend unavailable, 130 aborted.
//! Diagnostics go to stderr; stdout carries only the answer (print) or JSON lines (json, rpc).

mod rpc;

use std::io::{IsTerminal as _, Read as _, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use agentd::agent::AgentEndReason;

use super::agent_setup::effective::Door;
use super::agent_setup::{exit, finish, AgentArgs, CodingSession, Failure};
use agentd::app::{sessions, SessionChoice};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Print the final answer.
    Text,
    /// Every event as a JSON line.
    Json,
    /// JSON-line commands on stdin, responses and events on stdout.
    Rpc,
}

#[derive(Debug, clap::Args)]
#[command(after_help = super::agent_setup::AFTER_HELP)]
pub struct RunArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Non-interactive (Pi's `-p`): run the prompts and exit. `run` never asks anything, so this only says so;
    /// it combines with any `--mode` (`-p --mode json "…"` streams the events as JSON lines).
    #[arg(short = 'p', long = "print")]
    pub print: bool,
    /// What goes to stdout: the final answer (text), every event as a JSON line (json), or the RPC protocol
    /// (rpc).
    #[arg(long, value_enum, default_value = "text")]
    pub mode: Mode,
    /// Print the system prompt, then its exact token count on stderr, and exit.
    #[arg(long)]
    pub show_system_prompt: bool,
    /// The prompts, sent one after another.
    #[arg(value_name = "MESSAGE")]
    pub messages: Vec<String>,
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    let result = runtime.block_on(run_async(args));
    // A pending stdin read must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    finish(result)
}

async fn run_async(args: RunArgs) -> anyhow::Result<u8> {
    let mut choice = args.agent.session_choice();
    if choice == SessionChoice::Pick {
        choice = pick_on_terminal(&super::agent_setup::current_dir()?)?;
    }
    let mut prompts = args.messages.clone();
    let mode = args.mode;
    if mode != Mode::Rpc && prompts.is_empty() && !args.show_system_prompt {
        if !std::io::stdin().is_terminal() {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| anyhow::anyhow!("reading stdin: {e}"))?;
            if !text.trim().is_empty() {
                prompts.push(text);
            }
        }
        if prompts.is_empty() {
            return Err(Failure::usage(
                "nothing to prompt: give a message (agentd run -p \"...\") or pipe one on stdin",
            ));
        }
    }
    let door = if mode == Mode::Rpc {
        Door::Rpc
    } else {
        Door::Print
    };
    let session = args.agent.start_session(&choice, door).await?;
    for w in &session.report().warnings {
        eprintln!("warning: {w}");
    }
    if args.show_system_prompt {
        let prompt = session.agent().state().system_prompt;
        println!("{prompt}");
        let usage = session.context_usage().await;
        eprintln!(
            "{} tokens ({}) with {}; {} tool(s) offered",
            usage.tokens,
            if usage.exact {
                "exact, incl. the tools block"
            } else {
                "estimated"
            },
            session.backend().model_name(),
            session.tools().len()
        );
        return Ok(exit::OK);
    }
    match mode {
        Mode::Rpc => rpc::serve(session).await,
        Mode::Text | Mode::Json => prompt_all(&session, &prompts, mode == Mode::Json).await,
    }
}

/// `-r` outside the TUI: a numbered list on stderr, the choice read from the terminal.
fn pick_on_terminal(cwd: &std::path::Path) -> anyhow::Result<SessionChoice> {
    if !std::io::stdin().is_terminal() {
        return Err(Failure::usage(
            "--resume needs an interactive terminal to pick a session; use --session ID",
        ));
    }
    let list = sessions::list(&agentd::session::sessions_dir(cwd)).map_err(Failure::from_app)?;
    if list.is_empty() {
        return Err(Failure::usage(format!(
            "no sessions for {} yet",
            cwd.display()
        )));
    }
    for (i, s) in list.iter().enumerate().take(20) {
        eprintln!("{:>2}) {}", i + 1, sessions::describe(s));
    }
    eprint!("session number: ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| anyhow::anyhow!("reading the choice: {e}"))?;
    let n: usize = line
        .trim()
        .parse()
        .map_err(|_| Failure::usage(format!("`{}` is not a session number", line.trim())))?;
    let chosen = list
        .get(n.wrapping_sub(1))
        .ok_or_else(|| Failure::usage(format!("there is no session {n}")))?;
    Ok(SessionChoice::Open(chosen.path.display().to_string()))
}

/// Print and JSON modes: runs each prompt in turn; Ctrl-C aborts the run (exit 130).
async fn prompt_all(session: &CodingSession, prompts: &[String], json: bool) -> anyhow::Result<u8> {
    if json {
        session.subscribe(Arc::new(|ev| {
            Box::pin(async move {
                if let Ok(line) = serde_json::to_string(&ev) {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{line}");
                    let _ = out.flush();
                }
            })
        }));
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    {
        // Registered here, before any prompt is sent, so an early Ctrl-C cannot kill the process.
        let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(|e| anyhow::anyhow!("cannot handle Ctrl-C: {e}"))?;
        let session = session.clone();
        let interrupted = interrupted.clone();
        tokio::spawn(async move {
            while sigint.recv().await.is_some() {
                interrupted.store(true, Ordering::SeqCst);
                session.abort();
            }
        });
    }
    let mut code = exit::OK;
    for text in prompts {
        // `/name args…` of a prompt template becomes the prompt it expands to.
        let expanded = session.expand_template(text);
        // `@path` words put the files they name after the prompt.
        let prompt = session.expand_mentions(expanded.as_deref().unwrap_or(text))?;
        let reason = session.prompt(&prompt).await?;
        let state = session.agent().state();
        match reason {
            AgentEndReason::Completed => {
                if !json {
                    let answer = state
                        .messages
                        .iter()
                        .rev()
                        .find_map(|m| m.as_assistant())
                        .map(|a| a.text())
                        .unwrap_or_default();
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{}", answer.trim_end());
                    let _ = out.flush();
                }
            }
            AgentEndReason::MaxTurns => {
                eprintln!(
                    "error: the agent stopped after the turn limit (--max-turns) without finishing"
                );
                code = exit::FAILED;
                break;
            }
            AgentEndReason::Error => {
                eprintln!(
                    "error: {}",
                    state.last_error.as_deref().unwrap_or("the run failed")
                );
                code = exit::FAILED;
                break;
            }
            AgentEndReason::Stopped => {
                eprintln!(
                    "error: the run was stopped: {}",
                    state
                        .last_error
                        .as_deref()
                        .unwrap_or("a loop rule ended it")
                );
                code = exit::FAILED;
                break;
            }
            AgentEndReason::Failed => {
                eprintln!(
                    "error: the run's checks failed: {}",
                    state.last_error.as_deref().unwrap_or("a check failed")
                );
                code = exit::FAILED;
                break;
            }
            AgentEndReason::Aborted => {
                eprintln!("aborted");
                code = exit::ABORTED;
                break;
            }
        }
        if interrupted.load(Ordering::SeqCst) {
            code = exit::ABORTED;
            break;
        }
    }
    if let Some(e) = session.session_error() {
        eprintln!("warning: {e}");
    }
    Ok(code)
}
