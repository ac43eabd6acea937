//! `agentd chat`: the interactive coding assistant in the terminal.
//!
//! The UI is ratatui over crossterm in raw mode on the alternate screen. Why not a line editor (rustyline,
//! reedline)? A line editor owns the terminal while it reads a line, so output cannot stream while the user
//! types, and it cannot tell Enter from Alt+Enter or take Esc while the agent works; raw-mode key events can,
//! and a full-screen layout keeps the status line (model, session, exact context usage) in place while the
//! transcript streams above the input.
//!
//! Files: `app` (state, keys, commands, background tasks), `view` (drawing), `transcript` (display items from
//! agent events), `editor` (the input buffer), `commands` (slash-command parsing and help).
//!
//! While the UI is up, this process's stderr goes to `$AGENTD_HOME/chat.log` so log lines cannot scribble on
//! the screen.

mod actions;
mod app;
mod commands;
mod display;
mod editor;
mod view;

use std::io::{IsTerminal as _, Write as _};
use std::sync::Arc;
use std::time::Duration;

use crossterm::event::{DisableBracketedPaste, EnableBracketedPaste, EventStream};
use crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use futures::StreamExt as _;
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use tokio::sync::mpsc;

use super::agent_setup::{exit, finish, AgentArgs, CodingSession, Failure};
use agentd::app::SessionChoice;
use app::{App, UiEvent};

#[derive(Debug, clap::Args)]
#[command(after_help = super::agent_setup::AFTER_HELP)]
pub struct ChatArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
    /// Prompts to send when the chat opens.
    #[arg(value_name = "MESSAGE")]
    pub messages: Vec<String>,
}

pub fn run(args: ChatArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    let result = runtime.block_on(chat(args));
    runtime.shutdown_timeout(Duration::from_millis(200));
    finish(result)
}

async fn chat(args: ChatArgs) -> anyhow::Result<u8> {
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(Failure::usage(
            "agentd chat needs a terminal; use `agentd run` for scripts (-p, --mode json, --mode rpc)",
        ));
    }
    let mut choice = args.agent.session_choice();
    let pick = choice == SessionChoice::Pick;
    if pick {
        choice = SessionChoice::New;
    }
    let session = args
        .agent
        .start_session(&choice, crate::cli::agent_setup::effective::Door::Chat)
        .await?;
    let log = agentd::env::agentd_home().join("chat.log");
    let redirect = StderrRedirect::to(&log);
    let result = ui(session, pick, args.messages).await;
    drop(redirect);
    result
}

/// Restores the terminal when dropped (also on early returns), and on panic through the hook.
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> anyhow::Result<Self> {
        enable_raw_mode()
            .map_err(|e| anyhow::anyhow!("cannot switch the terminal to raw mode: {e}"))?;
        let guard = TerminalGuard;
        crossterm::execute!(
            std::io::stdout(),
            EnterAlternateScreen,
            EnableBracketedPaste
        )
        .map_err(|e| anyhow::anyhow!("cannot set up the terminal: {e}"))?;
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            previous(info);
        }));
        Ok(guard)
    }
}

fn restore_terminal() {
    let _ = disable_raw_mode();
    let _ = crossterm::execute!(
        std::io::stdout(),
        DisableBracketedPaste,
        LeaveAlternateScreen,
        crossterm::cursor::Show
    );
    let _ = std::io::stdout().flush();
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

async fn ui(session: CodingSession, pick: bool, initial: Vec<String>) -> anyhow::Result<u8> {
    let (tx, mut rx) = mpsc::unbounded_channel::<UiEvent>();
    {
        let tx = tx.clone();
        session.subscribe(Arc::new(move |ev| {
            let _ = tx.send(UiEvent::Agent(ev));
            Box::pin(async {})
        }));
    }
    {
        let tx = tx.clone();
        session.approvals().set_sink(Some(Arc::new(move |request| {
            let _ = tx.send(UiEvent::Approval(request));
        })));
    }
    let guard = TerminalGuard::enter()?;
    let mut terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))
        .map_err(|e| anyhow::anyhow!("cannot start the terminal UI: {e}"))?;
    let mut app = App::new(session.clone(), tx);
    app.welcome();
    if pick {
        app.start_resume_picker();
    }
    for message in initial {
        app.submit_text(&message);
    }
    let mut events = EventStream::new();
    let mut tick = tokio::time::interval(Duration::from_millis(120));
    let mut failure = None;
    loop {
        if let Err(e) = terminal.draw(|f| view::draw(f, &app)) {
            failure = Some(anyhow::anyhow!("drawing the screen: {e}"));
            break;
        }
        tokio::select! {
            ev = events.next() => match ev {
                Some(Ok(ev)) => app.on_terminal_event(ev),
                Some(Err(e)) => {
                    failure = Some(anyhow::anyhow!("reading the terminal: {e}"));
                    break;
                }
                None => break,
            },
            Some(ev) = rx.recv() => {
                app.on_ui_event(ev);
                while let Ok(ev) = rx.try_recv() {
                    app.on_ui_event(ev);
                }
            }
            _ = tick.tick() => app.tick = app.tick.wrapping_add(1),
        }
        if app.quit {
            break;
        }
    }
    session.approvals().set_sink(None);
    session.abort();
    let _ = tokio::time::timeout(Duration::from_secs(3), session.agent().wait_for_idle()).await;
    drop(terminal);
    drop(guard);
    match failure {
        Some(e) => Err(e),
        None => Ok(exit::OK),
    }
}

/// Sends this process's stderr to a file while alive (so log lines cannot draw over the UI); restores it when
/// dropped. Does nothing when the file cannot be opened.
struct StderrRedirect {
    saved: Option<i32>,
}

impl StderrRedirect {
    fn to(path: &std::path::Path) -> Self {
        use std::os::fd::AsRawFd as _;
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let Ok(file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        else {
            return Self { saved: None };
        };
        let _ = std::io::stderr().flush();
        // SAFETY: dup/dup2 on descriptors we own or that the process always has (2); no memory is involved.
        let saved = unsafe { libc::dup(2) };
        if saved < 0 {
            return Self { saved: None };
        }
        // SAFETY: as above; `file` stays open until after dup2 has made its own copy on fd 2.
        if unsafe { libc::dup2(file.as_raw_fd(), 2) } < 0 {
            // SAFETY: `saved` is a descriptor we just created.
            unsafe { libc::close(saved) };
            return Self { saved: None };
        }
        Self { saved: Some(saved) }
    }
}

impl Drop for StderrRedirect {
    fn drop(&mut self) {
        if let Some(saved) = self.saved.take() {
            let _ = std::io::stderr().flush();
            // SAFETY: restores fd 2 from the copy made in `to`, then closes that copy.
            unsafe {
                libc::dup2(saved, 2);
                libc::close(saved);
            }
        }
    }
}
