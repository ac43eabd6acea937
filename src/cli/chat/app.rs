//! The chat's state and behaviour: keys → actions (send, steer, follow up, abort, quit, edit, scroll, pick),
//! slash commands and `!cmd`, and the events that come back from the agent and from background tasks.
//! Anything slow (a run, loading a model, compacting, a shell command) runs in a task and reports back through
//! [`UiEvent`]s, so the screen never freezes.

use std::time::{Duration, Instant};

use agentd::agent::{AgentEvent, AgentMessage};
use crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use super::commands::{self, Slash};
use super::editor::Editor;
use super::transcript::{Item, NoticeKind, Transcript};
use crate::cli::agent_setup::coding_session::ContextUsage;
use crate::cli::agent_setup::{sessions, CodingSession};

/// Two Ctrl+C presses within this long quit.
const QUIT_WINDOW: Duration = Duration::from_millis(1500);

/// What background work reports to the UI loop.
pub enum UiEvent {
    Agent(AgentEvent),
    Usage(ContextUsage),
    Notice(NoticeKind, String),
    /// A run ended (its failures already arrived as events; an error here means it never started).
    RunFinished(Result<(), String>),
    /// The session changed under the agent (resume, fork, tree, compact, new): redraw the transcript from it;
    /// put `editor` into the input when given.
    Reloaded {
        editor: Option<String>,
    },
    /// A background operation ended.
    Idle,
    BashDone(AgentMessage),
}

/// What a picker does with the chosen value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickAction {
    Resume,
    Model,
    Fork,
}

/// A list to choose from (replaces the editor while open).
pub struct Picker {
    pub title: String,
    /// (label, value)
    pub items: Vec<(String, String)>,
    pub selected: usize,
    pub action: PickAction,
}

/// A message queued while the agent works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub follow_up: bool,
    pub text: String,
}

pub struct App {
    pub session: CodingSession,
    pub transcript: Transcript,
    pub editor: Editor,
    pub picker: Option<Picker>,
    pub queued: Vec<Queued>,
    pub usage: Option<ContextUsage>,
    /// A run is in progress.
    pub running: bool,
    /// A background operation (loading a model, compacting, a shell command), by name.
    pub busy: Option<String>,
    pub expand_tools: bool,
    /// Lines scrolled up from the bottom of the transcript.
    pub scroll: usize,
    pub quit: bool,
    pub tick: usize,
    last_ctrl_c: Option<Instant>,
    /// Esc came before the run had started: abort it when it does.
    abort_pending: bool,
    /// Cancels a running `!cmd`.
    bash_cancel: Option<CancellationToken>,
    tx: UnboundedSender<UiEvent>,
}

impl App {
    pub fn new(session: CodingSession, tx: UnboundedSender<UiEvent>) -> Self {
        let mut app = Self {
            session,
            transcript: Transcript::default(),
            editor: Editor::default(),
            picker: None,
            queued: Vec::new(),
            usage: None,
            running: false,
            busy: None,
            expand_tools: false,
            scroll: 0,
            quit: false,
            tick: 0,
            last_ctrl_c: None,
            abort_pending: false,
            bash_cancel: None,
            tx,
        };
        app.transcript.load(&app.session.agent().state().messages);
        app.refresh_usage();
        app
    }

    /// The welcome lines: model, context files, skills, warnings.
    pub fn welcome(&mut self) {
        let backend = self.session.backend();
        let report = self.session.report().clone();
        let mut text = format!(
            "agentd chat — {} ({}) in {}. /help for commands and keys.",
            backend.model_name(),
            backend.describe(),
            self.session.cwd().display()
        );
        for f in &report.context_files {
            text.push_str(&format!("\ncontext: {}", f.display()));
        }
        if !report.skills.is_empty() {
            let names: Vec<&str> = report.skills.iter().map(|s| s.name.as_str()).collect();
            text.push_str(&format!("\nskills: {}", names.join(", ")));
        }
        self.transcript.notice(NoticeKind::Info, text);
        for w in &report.warnings {
            self.transcript
                .notice(NoticeKind::Error, format!("warning: {w}"));
        }
    }

    /// Opens the session picker (`-r`).
    pub fn start_resume_picker(&mut self) {
        self.command(Slash::Resume(None));
    }

    /// Sends `text` as if typed and entered.
    pub fn submit_text(&mut self, text: &str) {
        self.editor.set_text(text);
        self.submit(false);
    }

    fn info(&mut self, text: impl Into<String>) {
        self.transcript.notice(NoticeKind::Info, text);
        self.scroll = 0;
    }

    fn error(&mut self, text: impl Into<String>) {
        self.transcript.notice(NoticeKind::Error, text);
        self.scroll = 0;
    }

    pub fn refresh_usage(&self) {
        let session = self.session.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let usage = session.context_usage().await;
            let _ = tx.send(UiEvent::Usage(usage));
        });
    }

    /// Handles what a background task or the agent reported.
    pub fn on_ui_event(&mut self, ev: UiEvent) {
        match ev {
            UiEvent::Agent(ev) => {
                if let AgentEvent::MessageStart {
                    message: AgentMessage::User { content, .. },
                } = &ev
                {
                    if let Some(pos) = self.queued.iter().position(|q| &q.text == content) {
                        self.queued.remove(pos);
                    }
                }
                if let AgentEvent::MessageEnd {
                    message: AgentMessage::Assistant(a),
                } = &ev
                {
                    if let Some(u) = &mut self.usage {
                        if a.usage.total > 0 {
                            u.tokens = a.usage.total;
                        }
                    }
                }
                if matches!(ev, AgentEvent::AgentStart) && std::mem::take(&mut self.abort_pending) {
                    self.session.abort();
                }
                self.transcript.apply(&ev);
                if matches!(ev, AgentEvent::AgentEnd { .. }) {
                    self.refresh_usage();
                }
            }
            UiEvent::Usage(u) => self.usage = Some(u),
            UiEvent::Notice(kind, text) => {
                self.transcript.notice(kind, text);
            }
            UiEvent::RunFinished(result) => {
                self.running = false;
                self.abort_pending = false;
                self.queued.clear();
                if let Err(e) = result {
                    self.error(format!("error: {e}"));
                }
                if let Some(e) = self.session.session_error() {
                    self.error(format!("session: {e}"));
                }
                self.refresh_usage();
            }
            UiEvent::Reloaded { editor } => {
                self.transcript.load(&self.session.agent().state().messages);
                if let Some(text) = editor {
                    self.editor.set_text(&text);
                }
                self.scroll = 0;
                self.refresh_usage();
            }
            UiEvent::Idle => {
                self.busy = None;
                self.refresh_usage();
            }
            UiEvent::BashDone(m) => {
                self.busy = None;
                self.bash_cancel = None;
                if let AgentMessage::BashExecution {
                    command,
                    output,
                    exit_code,
                    exclude_from_context,
                    ..
                } = m
                {
                    self.transcript.items.push(Item::Bash {
                        command,
                        output,
                        exit_code,
                        excluded: exclude_from_context,
                    });
                }
                self.scroll = 0;
                self.refresh_usage();
            }
        }
    }

    /// Handles a terminal event.
    pub fn on_terminal_event(&mut self, ev: Event) {
        match ev {
            Event::Key(key) if key.kind != KeyEventKind::Release => self.on_key(key),
            Event::Paste(text) if self.picker.is_none() => self.editor.insert_str(&text),
            _ => {}
        }
    }

    fn on_key(&mut self, key: KeyEvent) {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let alt = key.modifiers.contains(KeyModifiers::ALT);
        if ctrl && key.code == KeyCode::Char('c') {
            return self.ctrl_c();
        }
        if self.picker.is_some() {
            return self.picker_key(key);
        }
        match key.code {
            KeyCode::Enter if alt => self.submit(true),
            KeyCode::Enter if key.modifiers.contains(KeyModifiers::SHIFT) => self.editor.newline(),
            KeyCode::Enter => self.submit(false),
            KeyCode::Char('j') if ctrl => self.editor.newline(),
            KeyCode::Esc => self.escape(),
            KeyCode::Char('d') if ctrl => {
                if self.editor.is_empty() {
                    self.quit();
                } else {
                    self.editor.delete();
                }
            }
            KeyCode::Char('o') if ctrl => self.expand_tools = !self.expand_tools,
            KeyCode::Char('a') if ctrl => self.editor.home(),
            KeyCode::Char('e') if ctrl => self.editor.end(),
            KeyCode::Char('u') if ctrl => self.editor.delete_to_start(),
            KeyCode::Char('w') if ctrl => self.editor.delete_word(),
            KeyCode::Char('l') if ctrl => self.scroll = 0,
            KeyCode::Char(c) if !ctrl => self.editor.insert_char(c),
            KeyCode::Backspace => self.editor.backspace(),
            KeyCode::Delete => self.editor.delete(),
            KeyCode::Left => self.editor.left(),
            KeyCode::Right => self.editor.right(),
            KeyCode::Home => self.editor.home(),
            KeyCode::End => self.editor.end(),
            KeyCode::Up => self.editor.up(),
            KeyCode::Down => self.editor.down(),
            KeyCode::PageUp => self.scroll = self.scroll.saturating_add(10),
            KeyCode::PageDown => self.scroll = self.scroll.saturating_sub(10),
            KeyCode::Tab => self.editor.insert_str("    "),
            _ => {}
        }
    }

    fn ctrl_c(&mut self) {
        let now = Instant::now();
        if self
            .last_ctrl_c
            .is_some_and(|t| now.duration_since(t) < QUIT_WINDOW)
        {
            return self.quit();
        }
        self.last_ctrl_c = Some(now);
        self.picker = None;
        self.editor.clear();
        self.info("(press Ctrl+C again to quit)");
    }

    pub fn quit(&mut self) {
        self.session.abort();
        if let Some(c) = &self.bash_cancel {
            c.cancel();
        }
        self.quit = true;
    }

    fn escape(&mut self) {
        if self.running {
            self.session.abort();
            self.abort_pending = !self.session.is_running();
            self.session.agent().clear_queues();
            self.queued.clear();
            self.info("aborting…");
        } else if let Some(c) = self.bash_cancel.take() {
            c.cancel();
        }
    }

    /// Enter (follow_up: Alt+Enter): a slash command, a shell command, a steer or follow-up while the agent
    /// works, or a prompt.
    fn submit(&mut self, follow_up: bool) {
        let text = self.editor.text();
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return;
        }
        self.scroll = 0;
        if trimmed.starts_with('/') && !trimmed.starts_with("//") {
            self.editor.take();
            return match commands::parse(trimmed) {
                Ok(cmd) => self.command(cmd),
                Err(e) => self.error(e),
            };
        }
        if let Some(cmd) = trimmed.strip_prefix('!') {
            let (exclude, cmd) = match cmd.strip_prefix('!') {
                Some(c) => (true, c.trim()),
                None => (false, cmd.trim()),
            };
            if cmd.is_empty() {
                return;
            }
            if self.running || self.busy.is_some() {
                return self
                    .error("wait for the agent to finish (or Esc) before running a command");
            }
            let cmd = cmd.to_string();
            self.editor.take();
            return self.bash(cmd, exclude);
        }
        let text = self.editor.take();
        if self.running {
            if follow_up {
                self.session.follow_up(&text);
            } else {
                self.session.steer(&text);
            }
            self.queued.push(Queued { follow_up, text });
            return;
        }
        if self.busy.is_some() {
            self.editor.set_text(&text);
            return self.error("busy; try again in a moment");
        }
        self.running = true;
        let session = self.session.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let result = session
                .prompt(&text)
                .await
                .map(|_| ())
                .map_err(|e| format!("{e:#}"));
            let _ = tx.send(UiEvent::RunFinished(result));
        });
    }

    fn bash(&mut self, command: String, exclude: bool) {
        let cancel = CancellationToken::new();
        self.bash_cancel = Some(cancel.clone());
        self.busy = Some(format!("running `{command}` (Esc stops it)"));
        let session = self.session.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            match session.run_bash(&command, exclude, cancel).await {
                Ok(m) => {
                    let _ = tx.send(UiEvent::BashDone(m));
                }
                Err(e) => {
                    let _ = tx.send(UiEvent::Notice(
                        NoticeKind::Error,
                        format!("!{command}: {e:#}"),
                    ));
                    let _ = tx.send(UiEvent::Idle);
                }
            }
        });
    }

    /// Runs `work` in the background under `label`; its `Ok(Some(text))` is shown, an error reported.
    fn background<F>(&mut self, label: &str, reload: bool, work: F)
    where
        F: std::future::Future<Output = anyhow::Result<(Option<String>, Option<String>)>>
            + Send
            + 'static,
    {
        if self.running {
            return self.error("the agent is running; wait for it or press Esc first");
        }
        if let Some(b) = &self.busy {
            return self.error(format!("busy ({b}); try again in a moment"));
        }
        self.busy = Some(label.to_string());
        let tx = self.tx.clone();
        tokio::spawn(async move {
            match work.await {
                Ok((notice, editor)) => {
                    if reload {
                        let _ = tx.send(UiEvent::Reloaded { editor });
                    }
                    if let Some(n) = notice {
                        let _ = tx.send(UiEvent::Notice(NoticeKind::Info, n));
                    }
                }
                Err(e) => {
                    let _ = tx.send(UiEvent::Notice(NoticeKind::Error, format!("{e:#}")));
                }
            }
            let _ = tx.send(UiEvent::Idle);
        });
    }

    fn command(&mut self, cmd: Slash) {
        let session = self.session.clone();
        match cmd {
            Slash::Help => self.info(commands::help()),
            Slash::Quit => self.quit(),
            Slash::Tools => {
                let tools = session.tools();
                let mut text = if tools.is_empty() {
                    "No tools are offered (--no-tools).".to_string()
                } else {
                    "Tools:".to_string()
                };
                for (name, what) in tools {
                    text.push_str(&format!("\n  {name:<6} {what}"));
                }
                self.info(text);
            }
            Slash::Session => {
                let state = session.state_json();
                let usage = self
                    .usage
                    .map(|u| format!("{} / {} tokens", u.tokens, u.window))
                    .unwrap_or_else(|| "counting…".into());
                let file = session
                    .session_file()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "(none yet: created with the first message)".into());
                self.info(format!(
                    "Session {}\n  file: {file}\n  messages: {}\n  model: {} ({})\n  context: {usage}\n  cwd: {}",
                    session.session_label(),
                    state["message_count"],
                    state["model"].as_str().unwrap_or_default(),
                    state["backend"].as_str().unwrap_or_default(),
                    session.cwd().display()
                ));
            }
            Slash::New => {
                if self.running {
                    return self.error("the agent is running; wait for it or press Esc first");
                }
                match session.new_session() {
                    Ok(()) => {
                        self.transcript.clear();
                        self.info("New session.");
                        self.refresh_usage();
                    }
                    Err(e) => self.error(format!("{e:#}")),
                }
            }
            Slash::Model(None) => {
                let backend = session.backend();
                let mut items: Vec<(String, String)> = backend
                    .provider
                    .models()
                    .into_iter()
                    .map(|m| (format!("{}  ({} tokens)", m.id, m.context_window), m.id))
                    .collect();
                if backend.engine_args.is_some() {
                    for name in agentd::engine::manifest::known_names() {
                        if !items.iter().any(|(_, v)| v == &name) {
                            items.push((format!("{name}  (load)"), name));
                        }
                    }
                }
                self.open_picker("Model (Enter loads it, Esc cancels)", items, PickAction::Model);
            }
            Slash::Model(Some(name)) => self.background(&format!("loading {name}"), false, async move {
                let model = session.set_model(&name).await?;
                Ok((Some(format!("Model: {model}")), None))
            }),
            Slash::Resume(None) => match session.list_sessions() {
                Ok(list) if list.is_empty() => self.info("No sessions for this directory yet."),
                Ok(list) => {
                    let items = list
                        .iter()
                        .map(|s| (sessions::describe(s), s.path.display().to_string()))
                        .collect();
                    self.open_picker("Resume a session", items, PickAction::Resume);
                }
                Err(e) => self.error(format!("{e:#}")),
            },
            Slash::Resume(Some(spec)) => self.background("opening the session", true, async move {
                let path = session.resume(&spec).await?;
                Ok((Some(format!("Resumed {}", path.display())), None))
            }),
            Slash::Fork(None) => match session.fork_points() {
                Ok(points) if points.is_empty() => self.info("No user message to fork from yet."),
                Ok(points) => {
                    let items = points
                        .into_iter()
                        .map(|(id, text)| {
                            let line: String = text.lines().next().unwrap_or_default().chars().take(70).collect();
                            (format!("{id}  {line}"), id)
                        })
                        .collect();
                    self.open_picker("Fork from before which message?", items, PickAction::Fork);
                }
                Err(e) => self.error(format!("{e:#}")),
            },
            Slash::Fork(Some(id)) => self.background("forking", true, async move {
                let (text, path) = session.fork(&id).await?;
                Ok((Some(format!("Forked into {}", path.display())), Some(text)))
            }),
            Slash::Tree(None) => match session.tree() {
                Ok(tree) => self.info(format!(
                    "{}\n(/tree ENTRY continues from an entry; /fork ENTRY copies the path into a new session)",
                    tree.trim_end()
                )),
                Err(e) => self.error(format!("{e:#}")),
            },
            Slash::Tree(Some(id)) => self.background("moving in the tree", true, async move {
                let text = session.navigate(&id).await?;
                Ok((Some(format!("Now at {id}.")), text))
            }),
            Slash::Compact(focus) => self.background("compacting", true, async move {
                let r = session.compact(focus.as_deref()).await?;
                Ok((
                    Some(format!(
                        "Compacted: {} → {} tokens ({} messages summarised).",
                        r["tokens_before"], r["tokens_after"], r["dropped_messages"]
                    )),
                    None,
                ))
            }),
        }
    }

    pub fn open_picker(&mut self, title: &str, items: Vec<(String, String)>, action: PickAction) {
        if items.is_empty() {
            return self.info("Nothing to pick.");
        }
        self.picker = Some(Picker {
            title: title.to_string(),
            items,
            selected: 0,
            action,
        });
    }

    fn picker_key(&mut self, key: KeyEvent) {
        let Some(p) = &mut self.picker else { return };
        match key.code {
            KeyCode::Esc => self.picker = None,
            KeyCode::Up => p.selected = p.selected.saturating_sub(1),
            KeyCode::Down => p.selected = (p.selected + 1).min(p.items.len().saturating_sub(1)),
            KeyCode::PageUp => p.selected = p.selected.saturating_sub(10),
            KeyCode::PageDown => {
                p.selected = (p.selected + 10).min(p.items.len().saturating_sub(1))
            }
            KeyCode::Enter => {
                let action = p.action;
                let value = p.items.get(p.selected).map(|(_, v)| v.clone());
                self.picker = None;
                if let Some(v) = value {
                    self.command(match action {
                        PickAction::Resume => Slash::Resume(Some(v)),
                        PickAction::Model => Slash::Model(Some(v)),
                        PickAction::Fork => Slash::Fork(Some(v)),
                    });
                }
            }
            _ => {}
        }
    }
}
