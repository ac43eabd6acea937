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
use super::display::{Item, NoticeKind, Transcript};
use super::editor::Editor;
use agentd::app::approvals::{ApprovalRequest, Decision};
use agentd::app::{CodingSession, ContextUsage};

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
    /// A tool call waits for the user's y / n / always.
    Approval(ApprovalRequest),
}

/// What a picker does with the chosen value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PickAction {
    Resume,
    Model,
    Fork,
    Branch,
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
    /// Tool calls waiting for approval, oldest (the one shown) first.
    pub approvals: std::collections::VecDeque<ApprovalRequest>,
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
    pub(super) last_ctrl_c: Option<Instant>,
    /// Esc came before the run had started: abort it when it does.
    pub(super) abort_pending: bool,
    /// A steer or follow-up was queued after the run had finished: deliver it when its end is reported.
    resume_queued: bool,
    /// The session-file error last shown (shown once).
    shown_session_error: Option<String>,
    /// Cancels a running `!cmd`.
    pub(super) bash_cancel: Option<CancellationToken>,
    pub(super) tx: UnboundedSender<UiEvent>,
}

impl App {
    pub fn new(session: CodingSession, tx: UnboundedSender<UiEvent>) -> Self {
        let mut app = Self {
            session,
            transcript: Transcript::default(),
            editor: Editor::default(),
            picker: None,
            approvals: Default::default(),
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
            resume_queued: false,
            shown_session_error: None,
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

    pub(super) fn info(&mut self, text: impl Into<String>) {
        self.transcript.notice(NoticeKind::Info, text);
        self.scroll = 0;
    }

    pub(super) fn error(&mut self, text: impl Into<String>) {
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
                self.approvals.clear();
                self.abort_pending = false;
                if let Err(e) = result {
                    self.error(format!("error: {e}"));
                }
                if std::mem::take(&mut self.resume_queued) && self.session.agent().has_queued() {
                    // Typed in the moment between the run's last look at its queues and its end.
                    self.run_queued();
                    return;
                }
                self.queued.clear();
                if let Some(e) = self.session.session_error() {
                    if self.shown_session_error.as_ref() != Some(&e) {
                        self.error(format!("session: {e}"));
                        self.shown_session_error = Some(e);
                    }
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
            UiEvent::Approval(request) => {
                // Answered or dropped meanwhile (an abort denies what waits): nothing to ask.
                if self
                    .session
                    .approvals()
                    .pending()
                    .iter()
                    .any(|p| p.id == request.id)
                {
                    self.approvals.push_back(request);
                }
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
        if !self.approvals.is_empty() {
            return self.approval_key(key);
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
            KeyCode::Tab => self.tab(),
            _ => {}
        }
    }

    /// y / Enter allow, a always (this tool, for the rest of the session), n / Esc deny.
    fn approval_key(&mut self, key: KeyEvent) {
        let decision = match key.code {
            KeyCode::Char('y') | KeyCode::Char('Y') | KeyCode::Enter => Decision::Allow,
            KeyCode::Char('a') | KeyCode::Char('A') => Decision::Always,
            KeyCode::Char('n') | KeyCode::Char('N') | KeyCode::Esc => Decision::Deny,
            _ => return,
        };
        let Some(request) = self.approvals.pop_front() else {
            return;
        };
        let verb = match decision {
            Decision::Allow => "allowed",
            Decision::Always => "allowed for this session",
            Decision::Deny => "denied",
        };
        match self
            .session
            .approvals()
            .resolve(&request.id, decision, None)
        {
            Ok(()) => self.info(format!("{verb}: {}", request.tool_name)),
            Err(e) => self.error(format!("approval: {e}")),
        }
        // Requests answered elsewhere (or denied by an abort) are no longer shown.
        let waiting: Vec<String> = self
            .session
            .approvals()
            .pending()
            .into_iter()
            .map(|p| p.id)
            .collect();
        self.approvals.retain(|r| waiting.contains(&r.id));
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
            self.resume_queued = false;
            self.info("aborting…");
        } else if let Some(c) = self.bash_cancel.take() {
            c.cancel();
        }
    }

    /// Tab: completes an `@path` word at the cursor (listing the matches when there are several); elsewhere
    /// it indents.
    fn tab(&mut self) {
        let word = self.editor.word_before_cursor();
        let Some(partial) = word.strip_prefix('@') else {
            return self.editor.insert_str("    ");
        };
        let (insert, matches) = agentd::app::mentions::complete_path(self.session.cwd(), partial);
        if !insert.is_empty() {
            self.editor.insert_str(&insert);
        }
        if !matches.is_empty() {
            let shown: Vec<&str> = matches.iter().take(40).map(String::as_str).collect();
            let more = matches.len().saturating_sub(shown.len());
            let tail = if more > 0 {
                format!("  … and {more} more")
            } else {
                String::new()
            };
            self.info(format!("{}{tail}", shown.join("  ")));
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
        let mut text = text.clone();
        if trimmed.starts_with('/') && !trimmed.starts_with("//") {
            // Built-in commands first, then prompt templates (`/name args…` becomes the prompt it expands to).
            match commands::parse(trimmed) {
                Ok(cmd) => {
                    self.editor.take();
                    return self.command(cmd);
                }
                Err(e) => match self.session.expand_template(trimmed) {
                    Some(prompt) => text = prompt,
                    None => {
                        self.editor.take();
                        return self.error(e);
                    }
                },
            }
        }
        let trimmed = text.trim();
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
        // `@path` words put the files they name after the prompt; a refused one keeps the text in the editor.
        let text = match self.session.expand_mentions(&text) {
            Ok(t) => t,
            Err(e) => return self.error(format!("{e}")),
        };
        let typed = self.editor.take();
        if self.running {
            let delivered = if follow_up {
                self.session.follow_up(&text)
            } else {
                self.session.steer(&text)
            };
            self.resume_queued |= !delivered;
            self.queued.push(Queued { follow_up, text });
            return;
        }
        if self.busy.is_some() {
            self.editor.set_text(&typed);
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

    /// Runs the messages queued while the last run was finishing.
    fn run_queued(&mut self) {
        self.running = true;
        let session = self.session.clone();
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let result = session
                .continue_queued()
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
}
