//! What the rules see: a tool call read once into a typed [`Call`], and what it did as a typed [`Outcome`],
//! found by comparing the file's text before and after the call (read through the workspace's confinement), not
//! from the tools' `details` or the wording of their results.

use crate::provider::ToolCall;
use crate::tools::write_block::WRITE_BLOCK;

/// The largest file whose text is kept before and after a call.
pub const MAX_TRACKED_BYTES: u64 = 1024 * 1024;

/// A tool call, by what it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `edit`: `(old_text, new_text)` pairs in one file.
    Edit {
        path: String,
        pairs: Vec<(String, String)>,
    },
    /// `write`: the whole new text of a file.
    Write { path: String, content: String },
    /// `write_block`: a file block, placed in the file by its matching lines.
    Block { path: String, content: String },
    /// `bash`: a command.
    Command(String),
    /// Any other tool (reads, searches, an MCP server's tools); `mutating` when it may change the workspace.
    Other { mutating: bool },
}

impl Call {
    /// `call` read by its tool's name; `mutating` says whether a tool of another name may change files.
    pub fn of(call: &ToolCall, mutating: bool) -> Self {
        let text = |k: &str| {
            call.arguments
                .get(k)
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let path = || text("path").map(|p| p.trim_start_matches("./").to_string());
        match (call.name.as_str(), path()) {
            ("edit", Some(path)) => Call::Edit {
                path,
                pairs: call
                    .arguments
                    .get("edits")
                    .and_then(|e| e.as_array())
                    .map(|edits| {
                        edits
                            .iter()
                            .map(|e| {
                                let t = |k: &str| {
                                    e.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string()
                                };
                                (t("old_text"), t("new_text"))
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            ("write", Some(path)) => Call::Write {
                path,
                content: text("content").unwrap_or_default(),
            },
            (WRITE_BLOCK, Some(path)) => Call::Block {
                path,
                content: text("content").unwrap_or_default(),
            },
            ("bash", _) => Call::Command(text("command").unwrap_or_default()),
            _ => Call::Other { mutating },
        }
    }

    /// The file a file-changing call names.
    pub fn path(&self) -> Option<&str> {
        match self {
            Call::Edit { path, .. } | Call::Write { path, .. } | Call::Block { path, .. } => {
                Some(path)
            }
            _ => None,
        }
    }

    /// The text this call would leave in its file, which reads `current` (`None`: cannot be told).
    pub fn predicted(&self, current: &str) -> Option<String> {
        match self {
            Call::Write { content, .. } => Some(content.clone()),
            Call::Block { content, .. } => {
                Some(crate::tools::write_block::apply_block(Some(current), content).new_text)
            }
            Call::Edit { pairs, .. } => {
                pairs
                    .iter()
                    .try_fold(current.to_string(), |text, (old, new)| {
                        (!old.is_empty() && text.matches(old.as_str()).count() == 1)
                            .then(|| text.replacen(old.as_str(), new, 1))
                    })
            }
            _ => None,
        }
    }

    /// Whether the call may change the workspace.
    pub fn mutating(&self) -> bool {
        match self {
            Call::Other { mutating } => *mutating,
            _ => true,
        }
    }
}

/// What a call did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// An existing file changed.
    Changed {
        path: String,
        before: String,
        after: String,
    },
    /// A new file.
    Created { path: String, text: String },
    /// The call ran and left its file as it was.
    NoOp { path: String },
    /// The tool refused or failed (`retry`: the same call may be sent again, as after a read-before-write
    /// refusal that showed the file).
    Refused { error: String, retry: bool },
    /// A rule answered the call; it did not run.
    Answered,
    /// A command ran (`ok`: it exited with 0).
    Ran { command: String, ok: bool },
    /// Anything else that ran.
    Done,
}

impl Outcome {
    /// The outcome of `call` from its result and its file's text before and after (`None`: no such file, or
    /// not a text file the harness tracks).
    pub fn of(
        call: &Call,
        is_error: bool,
        content: &str,
        before: Option<String>,
        after: Option<String>,
    ) -> Self {
        if let Call::Command(command) = call {
            return Outcome::Ran {
                command: command.clone(),
                ok: !is_error,
            };
        }
        if is_error {
            return Outcome::Refused {
                error: content.to_string(),
                retry: content.starts_with(crate::tools::edit::UNREAD_REFUSAL),
            };
        }
        let Some(path) = call.path() else {
            return Outcome::Done;
        };
        let path = path.to_string();
        match (before, after) {
            (Some(b), Some(a)) if a == b => Outcome::NoOp { path },
            (Some(before), Some(after)) => Outcome::Changed {
                path,
                before,
                after,
            },
            (None, Some(text)) => Outcome::Created { path, text },
            _ => Outcome::Done,
        }
    }

    /// Whether the workspace changed.
    pub fn landed(&self) -> bool {
        matches!(self, Outcome::Changed { .. } | Outcome::Created { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn calls_and_outcomes_are_typed() {
        let edit = Call::of(
            &ToolCall::new(
                "1",
                "edit",
                json!({"path": "./a.py", "edits": [{"old_text": "1", "new_text": "2"}]}),
            ),
            true,
        );
        assert_eq!(
            edit,
            Call::Edit {
                path: "a.py".into(),
                pairs: vec![("1".into(), "2".into())]
            }
        );
        let read = Call::of(&ToolCall::new("2", "read", json!({"path": "a.py"})), false);
        assert!(!read.mutating() && read.path().is_none());
        let same = Outcome::of(&edit, false, "ok", Some("x".into()), Some("x".into()));
        assert_eq!(
            same,
            Outcome::NoOp {
                path: "a.py".into()
            }
        );
        assert!(Outcome::of(&edit, false, "ok", None, Some("y".into())).landed());
        let refused = Outcome::of(&edit, true, "no match", Some("x".into()), Some("x".into()));
        assert!(matches!(refused, Outcome::Refused { retry: false, .. }));
    }
}
