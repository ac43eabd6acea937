//! The prompt a blocks session is running, as the loop's hooks need it: the task as the user wrote it, the files
//! it named with their text then, and whether a block has changed a file since. After a block changes an
//! existing file, the first named file still as it was is asked about; a first block that changes nothing is
//! answered as a failure with the task restated; a run about to end without a file the task asks for gets one
//! more turn that starts with that file's block (see [`NamedFiles`]).

use std::sync::Arc;

use crate::tools::policy::FileScope;
use crate::tools::write_block::WRITE_BLOCK;

/// The largest file compared with the text the prompt showed.
const MAX_COMPARED_BYTES: u64 = 1024 * 1024;

/// The prompt now running, the files it named (shown to the model with it) and their text then. After a block
/// changes an existing file, the first of them still as it was is asked about: small models change the first
/// file of a two-file job and stop. A block that changes nothing before any change landed (the model copied the
/// file it was shown, bug included) is answered as the failure it is, with the task restated: told only "nothing
/// changed", a small model repeats that sentence as its answer.
#[derive(Clone)]
pub struct NamedFiles {
    /// The session's files, read through the tools' confinement.
    scope: FileScope,
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
    pub fn new(scope: FileScope) -> Self {
        Self {
            scope,
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
            let now = self.scope.read_text(&path, MAX_COMPARED_BYTES)?;
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

    /// When the task asks for a file that is still missing (`count.txt` in "write the count into a new file
    /// count.txt"): the note and the reply's start for one more turn, for a run about to end without it.
    /// A small model that ran the command answers "The task is done." and says so again when told only that; a
    /// reply that starts with the file's block gets its text.
    pub fn missing_file_turn(&self) -> Option<(String, String)> {
        let Prompted { task, landed, .. } = self.lock().clone();
        // A run that changed something is past this: the missing name may be one its code reads.
        if landed {
            return None;
        }
        let path = asked_for_missing(&task, &self.scope)?;
        Some((
            format!("{path} does not exist yet, and the task asks for it."),
            format!("{path}\n```\n"),
        ))
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
                let created = result.details.get("created").and_then(|v| v.as_bool()) == Some(true);
                if ok && noop == Some(false) {
                    named.lock().landed = true;
                    let content = change.content.clone().unwrap_or(result.content);
                    // After a new file, the named ones are what it was made from unless the task asks to change
                    // one: asked whether a file it read needs a change, a small model changes it.
                    let ask = !created || asks_for_a_change(&named.lock().task);
                    let question = ask.then(|| named.question(&written, &content)).flatten();
                    if let Some(q) = question {
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

/// Words that ask for an existing file to be changed.
const CHANGING: [&str; 10] = [
    "change", "update", "edit", "modify", "fix", "rename", "replace", "remove", "delete", "use",
];

/// Whether `task` asks for some existing file to be changed (a word of [`CHANGING`]).
fn asks_for_a_change(task: &str) -> bool {
    has_word(task, &CHANGING)
}

/// Whether `text` holds one of `words` as a word of its own (any case).
fn has_word(text: &str, words: &[&str]) -> bool {
    text.split_whitespace().any(|w| {
        let w = w
            .trim_matches(|c: char| !c.is_alphanumeric())
            .to_ascii_lowercase();
        words.contains(&w.as_str())
    })
}

/// Words that ask for a file to be made.
const MAKING: [&str; 8] = [
    "create", "write", "save", "record", "store", "put", "new", "generate",
];

/// The first file `task` names that does not exist yet in `scope` (and may be made there), when the task asks for something to be made
/// (a word of [`MAKING`]): a word that looks like a relative file path (an extension with a letter: not
/// `3.14`, not `e.g.`; not a web domain).
fn asked_for_missing(task: &str, scope: &FileScope) -> Option<String> {
    if !has_word(task, &MAKING) {
        return None;
    }
    task.split_whitespace().find_map(|word| {
        let path = super::edit_format::path_word(super::mentions::prompt_word(word), &[])?;
        let ext = path.rsplit_once('.')?.1;
        let domain = ["com", "org", "net", "io", "dev"].contains(&ext);
        let file = ext.chars().any(|c| c.is_ascii_alphabetic())
            && !domain
            && !matches!(path.as_str(), "e.g" | "i.e");
        (file && scope.may_create(&path)).then_some(path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_the_task_asks_for() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data.csv"), "a\n").unwrap();
        std::fs::write(dir.path().join("compute.py"), "print(1)\n").unwrap();
        let root = &FileScope::within(dir.path());
        let task = "Count the lines of data.csv (for example with wc -l) and write the count into a new file count.txt.";
        assert_eq!(asked_for_missing(task, root).as_deref(), Some("count.txt"));
        assert_eq!(
            asked_for_missing(
                "Run compute.py and record what it prints in `out/result.txt`.",
                root
            )
            .as_deref(),
            Some("out/result.txt")
        );
        // Nothing to make, a file that exists, numbers, abbreviations and domains.
        assert_eq!(asked_for_missing("Does notes.md exist?", root), None);
        assert_eq!(
            asked_for_missing("Write a header into data.csv.", root),
            None
        );
        assert_eq!(
            asked_for_missing(
                "Create PI = 3.14159 in data.csv, e.g. at the top; see example.com",
                root
            ),
            None
        );
        // A path outside the workspace is not one to make.
        assert_eq!(
            asked_for_missing("Write the count into ../count.txt.", root),
            None
        );
        std::fs::write(dir.path().join("count.txt"), "7\n").unwrap();
        assert_eq!(asked_for_missing(task, root), None);
    }

    #[test]
    fn tasks_that_ask_to_change_a_file() {
        assert!(asks_for_a_change(
            "Create constants.py with PI, then change circle.py to import it."
        ));
        assert!(asks_for_a_change("Add helpers.py and use it in main.py"));
        assert!(!asks_for_a_change(
            "Count the lines of data.csv and write the count into a new file count.txt."
        ));
        assert!(!asks_for_a_change(
            "Create test_strings.py that imports reverse from strings.py."
        ));
    }
}
