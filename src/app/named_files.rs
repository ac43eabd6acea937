//! The prompt a blocks session is running, as the loop's hooks need it: the task as the user wrote it, the files
//! it named with their text then, and whether a block has changed a file since. After a block lands, the first
//! named file still as it was is asked about; a first block that changes nothing is answered as a failure with
//! the task restated (see [`NamedFiles`]).

use std::sync::Arc;

use crate::tools::write_block::WRITE_BLOCK;

/// The prompt now running, the files it named (shown to the model with it) and their text then. After a block
/// lands, the first of them still as it was is asked about: small models change the first file of a two-file job
/// and stop (Qwen2.5-Coder-0.5B changed `pricing.py` and never the test that expects the old price). A block
/// that changes nothing before any change landed (the model copied the file it was shown, bug included) is
/// answered as the failure it is, with the task restated: told only "nothing changed", Qwen2.5-Coder-0.5B
/// repeated that sentence as its answer and the run ended with the bug in place. (Measured and dropped: one more
/// turn, "nothing in the project has changed…", for a run about to end with the workspace as the prompt found it
/// after a command ran: Qwen2.5-Coder-0.5B repeated that sentence as its answer too.)
#[derive(Clone)]
pub struct NamedFiles {
    root: std::path::PathBuf,
    files: Arc<std::sync::Mutex<Prompted>>,
}

#[derive(Default, Clone)]
struct Prompted {
    task: String,
    files: Vec<(String, String)>,
    /// A block changed a file since the prompt started.
    landed: bool,
}

impl NamedFiles {
    pub fn new(root: impl Into<std::path::PathBuf>) -> Self {
        Self {
            root: root.into(),
            files: Arc::default(),
        }
    }

    /// The prompt now running (`task`, as the user wrote it) and the files it named.
    pub fn set(&self, task: &str, files: &[(String, String)]) {
        *self.lock() = Prompted {
            task: task.trim().to_string(),
            files: files.to_vec(),
            landed: false,
        };
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Prompted> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What a block that left `path` as it was is answered with while no change has landed yet.
    pub fn unchanged_answer(&self, path: &str) -> Option<String> {
        let p = self.lock();
        if p.landed {
            return None;
        }
        let task = if p.task.is_empty() {
            String::new()
        } else {
            format!(" The task: {}", p.task)
        };
        Some(format!(
            "Your block for {path} is the same as the file: nothing changed, so the task is not done yet.{task}\n\
             Find the line that must change and write {path} again with that line changed."
        ))
    }

    /// The first named file, other than `written`, whose text is still what the prompt showed.
    pub fn next_unchanged(&self, written: &str) -> Option<String> {
        let files = self.lock().files.clone();
        files.into_iter().find_map(|(path, text)| {
            let now = std::fs::read_to_string(self.root.join(&path)).ok()?;
            (path != written && now == text).then_some(path)
        })
    }

    /// The question appended to a landed block's result (`content`), if a named file is still as it was and the
    /// result does not already speak of it.
    pub fn question(&self, written: &str, content: &str) -> Option<String> {
        self.next_unchanged(written)
            .filter(|f| !content.contains(f.as_str()))
            .map(|f| {
            format!(
                "Next: does {f} need a change for this task? If it does, write {f}; if not, reply with a one-line \
                 summary."
            )
        })
    }

    /// Puts the question after `write_block` results (and the task after a block that changed nothing), around
    /// `config`'s `after_tool_call`.
    pub fn install(&self, config: &mut crate::agent::hooks::AgentLoopConfig) {
        let next = config.after_tool_call.take();
        let named = self.clone();
        config.after_tool_call = Some(Arc::new(move |call, result| {
            let (named, next) = (named.clone(), next.clone());
            let (call, result) = (call.clone(), result.clone());
            Box::pin(async move {
                let mut change = match next {
                    Some(next) => next(&call, &result).await,
                    None => Default::default(),
                };
                let ok = call.name == WRITE_BLOCK && !change.is_error.unwrap_or(result.is_error);
                let noop = result.details.get("noop").and_then(|v| v.as_bool());
                let written = call
                    .arguments
                    .get("path")
                    .and_then(|p| p.as_str())
                    .unwrap_or_default()
                    .trim_start_matches("./")
                    .to_string();
                if ok && noop == Some(false) {
                    named.lock().landed = true;
                    let content = change.content.clone().unwrap_or(result.content);
                    if let Some(q) = named.question(&written, &content) {
                        change.content = Some(format!("{content}\n\n{q}"));
                    }
                } else if ok && noop == Some(true) {
                    if let Some(answer) = named.unchanged_answer(&written) {
                        change.content = Some(answer);
                        change.is_error = Some(true);
                    }
                }
                change
            })
        }));
    }
}
