//! What the chat does for a slash command (and for a choice made in a picker). Quick commands answer at once;
//! slow ones (loading a model, resuming, forking, moving in the tree, compacting) run in a background task that
//! reports back through [`UiEvent`]s.

use crossterm::event::{KeyCode, KeyEvent};

use super::app::{App, PickAction, Picker, UiEvent};
use super::commands::{self, Slash};
use super::display::NoticeKind;
use agentd::app::sessions;

impl App {
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

    pub(super) fn command(&mut self, cmd: Slash) {
        let session = self.session.clone();
        match cmd {
            Slash::Help => {
                let mut text = commands::help();
                let templates = &session.report().templates;
                if !templates.is_empty() {
                    text.push_str("\nPrompt templates:");
                    for t in templates {
                        text.push_str(&format!("\n  /{:<17} {}", t.name, t.description));
                    }
                }
                self.info(text)
            }
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
            Slash::Export(file) => {
                let Some(src) = session.session_file() else {
                    return self.error("nothing to export yet: the session file is created with the first message");
                };
                let out = match file {
                    Some(f) => session.cwd().join(f),
                    None => session.cwd().join(format!(
                        "{}.html",
                        src.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "session".into())
                    )),
                };
                match agentd::app::export::export_file(&src, &out) {
                    Ok(_) => self.info(format!("Exported to {}", out.display())),
                    Err(e) => self.error(format!("{e:#}")),
                }
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
                    "Session {}{}\n  file: {file}\n  messages: {}\n  model: {} ({})\n  context: {usage}\n  cwd: {}",
                    session.session_label(),
                    session.name().map(|n| format!(" \"{n}\"")).unwrap_or_default(),
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
                if backend.can_load_models() {
                    for name in agentd::model_files::manifest::known_names() {
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
            Slash::Fork(None) => self.pick_user_message("fork", PickAction::Fork),
            Slash::Fork(Some(id)) => self.background("forking", true, async move {
                let (text, path) = session.fork(&id).await?;
                Ok((Some(format!("Forked into {}", path.display())), Some(text)))
            }),
            Slash::Tree(None) => match session.tree() {
                Ok(tree) => self.info(format!(
                    "{}\n(/tree ENTRY continues from an entry; /branch ENTRY also summarises the branch left; /rewind N drops messages; /label, /name; /fork ENTRY copies the path into a new session)",
                    tree.trim_end()
                )),
                Err(e) => self.error(format!("{e:#}")),
            },
            Slash::Tree(Some(id)) => self.background("moving in the tree", true, async move {
                let text = session.navigate(&id).await?;
                Ok((Some(format!("Now at {id}.")), text))
            }),
            Slash::Branch(None) => self.pick_user_message("branch", PickAction::Branch),
            Slash::Branch(Some(id)) => self.background("summarising the branch", true, async move {
                let (text, summary) = session.branch_summarized(&id).await?;
                let note = match summary {
                    Some(s) => format!("Branched at {id}. Summary of the branch left:\n{s}"),
                    None => format!("Now at {id}."),
                };
                Ok((Some(note), text))
            }),
            Slash::Rewind(n) => self.background("rewinding", true, async move {
                let (_, summary) = session.rewind_summarized(n).await?;
                Ok((
                    Some(format!(
                        "Rewound {n} message(s); they stay in /tree. Summary:\n{}",
                        summary.unwrap_or_default()
                    )),
                    None,
                ))
            }),
            Slash::Label(arg) => {
                let arg = arg.unwrap_or_default();
                // The first word names an entry when one has that id (or unique prefix of it).
                let (entry, text) = match arg.split_once(char::is_whitespace) {
                    Some((first, rest)) if session.has_entry(first) => (Some(first.to_string()), rest.trim().to_string()),
                    None if !arg.is_empty() && session.has_entry(&arg) => (Some(arg.clone()), String::new()),
                    _ => (None, arg.trim().to_string()),
                };
                self.background("labelling", false, async move {
                    let label = (!text.is_empty()).then_some(text.clone());
                    let id = session.set_label(entry.as_deref(), label).await?;
                    Ok((Some(if text.is_empty() { format!("Label cleared on {id}.") } else { format!("Labelled {id}: {text}") }), None))
                })
            }
            Slash::Name(None) => match session.name() {
                Some(name) => self.info(format!("Session name: {name}")),
                None => self.info("The session has no name; /name NAME gives it one."),
            },
            Slash::Name(Some(name)) => self.background("naming", false, async move {
                session.set_name(&name).await?;
                Ok((Some(format!("Session named: {name}")), None))
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

    /// A picker of the current path's user messages (`/fork`, `/branch`): `verb` from before which one?
    fn pick_user_message(&mut self, verb: &str, action: PickAction) {
        match self.session.fork_points() {
            Ok(points) if points.is_empty() => {
                self.info(format!("No user message to {verb} from yet."))
            }
            Ok(points) => {
                let items = points
                    .into_iter()
                    .map(|(id, text)| {
                        let line: String = text
                            .lines()
                            .next()
                            .unwrap_or_default()
                            .chars()
                            .take(70)
                            .collect();
                        (format!("{id}  {line}"), id)
                    })
                    .collect();
                let mut title = format!("{verb} from before which message?");
                title[..1].make_ascii_uppercase();
                self.open_picker(&title, items, action);
            }
            Err(e) => self.error(format!("{e:#}")),
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

    pub(super) fn picker_key(&mut self, key: KeyEvent) {
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
                        PickAction::Branch => Slash::Branch(Some(v)),
                    });
                }
            }
            _ => {}
        }
    }
}
