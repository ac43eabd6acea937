//! The rules that read the prompt's own files and words (file blocks):
//!
//! - [`UnchangedBlock`]: a block that changes nothing before any change landed (the model copied the file it was
//!   shown, bug included) is answered as the failure it is, with the task restated: told only "nothing changed",
//!   a small model repeats that sentence as its answer;
//! - [`NextNamedFile`]: after a change lands, the first file the prompt named that is still as it was is asked
//!   about (small models change the first file of a two-file job and stop);
//! - [`MissingFile`]: a run about to end without a file the task asks for gets one more turn that starts with
//!   that file's block (a small model that ran the command answers "The task is done." and says so again when
//!   told only that).

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;

use super::{Cx, Reply, Rule};
use crate::agent::EndDecision;
use crate::app::harness::outcome::{Call, Outcome};
use crate::app::harness::profile::{RuleId, Words};
use crate::provider::ToolCall;

/// See the module docs.
pub struct UnchangedBlock;

impl Rule for UnchangedBlock {
    fn id(&self) -> RuleId {
        RuleId::UnchangedBlock
    }

    fn after_call(
        &self,
        _raw: &ToolCall,
        call: &Call,
        outcome: &Outcome,
        cx: &Cx<'_>,
        reply: &mut Reply,
    ) {
        let (Call::Block { .. }, Outcome::NoOp { path }) = (call, outcome) else {
            return;
        };
        if cx.task.landed() {
            return;
        }
        let task = match cx.task.text.as_str() {
            "" => String::new(),
            text => format!(" The task: {text}"),
        };
        reply.content = format!(
            "Your block for {path} is the same as the file: nothing changed, so the task is not done yet.{task}\n\
             Find the line that must change and write {path} again with that line changed."
        );
        reply.is_error = true;
    }
}

/// See the module docs.
pub struct NextNamedFile;

impl Rule for NextNamedFile {
    fn id(&self) -> RuleId {
        RuleId::NextNamedFile
    }

    fn after_call(
        &self,
        _raw: &ToolCall,
        call: &Call,
        outcome: &Outcome,
        cx: &Cx<'_>,
        reply: &mut Reply,
    ) {
        let written = match (call, outcome) {
            (Call::Block { .. }, Outcome::Changed { path, .. }) => path,
            // After a new file, the named ones are what it was made from unless the task asks to change one:
            // asked whether a file it read needs a change, a small model changes it.
            (Call::Block { .. }, Outcome::Created { path, .. })
                if Words::any_in(&cx.profile.words.changing, &cx.task.text) =>
            {
                path
            }
            _ => return,
        };
        let next = cx.task.named.iter().find_map(|(path, text)| {
            (path != written && cx.read(path).as_ref() == Some(text)).then_some(path)
        });
        if let Some(f) = next.filter(|f| !reply.content.contains(f.as_str())) {
            reply.content.push_str(&format!(
                "\n\nNext: does {f} need a change for this task? If it does, write {f}; if not, reply with a \
                 one-line summary."
            ));
        }
    }
}

/// See the module docs. Asked once per prompt.
#[derive(Default)]
pub struct MissingFile(AtomicBool);

impl MissingFile {
    /// A new prompt: the rule may be asked again.
    pub fn reset(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

#[async_trait]
impl Rule for MissingFile {
    fn id(&self) -> RuleId {
        RuleId::MissingFile
    }

    fn on_prompt(&self, _task: &str, _prompt: &mut String, _cx: &Cx<'_>) {
        self.reset();
    }

    async fn before_end(&self, cx: &Cx<'_>) -> Option<EndDecision> {
        // A run that changed something is past this: the missing name may be one its code reads.
        if cx.task.landed() || self.0.load(Ordering::Relaxed) {
            return None;
        }
        let path = asked_for_missing(cx)?;
        self.0.store(true, Ordering::Relaxed);
        Some(EndDecision::Continue {
            note: format!("{path} does not exist yet, and the task asks for it."),
            prefill: Some(format!("{path}\n```\n")),
        })
    }
}

/// Extensions that, written alone (`.py`), name a kind of file rather than a file.
const CODE_EXTENSIONS: [&str; 16] = [
    "py", "js", "ts", "rs", "go", "c", "h", "java", "rb", "txt", "md", "json", "toml", "yaml",
    "yml", "sh",
];

/// The first file the task names that does not exist yet (and may be made in the session's scope), when the
/// task asks for something to be made: a word that looks like a relative file path (an extension with a
/// letter: not `3.14`, not `e.g.`; not a web domain).
pub fn asked_for_missing(cx: &Cx<'_>) -> Option<String> {
    let task = &cx.task.text;
    if !Words::any_in(&cx.profile.words.making, task) {
        return None;
    }
    task.split_whitespace().find_map(|word| {
        let word = crate::app::mentions::prompt_word(word);
        let path = crate::app::harness::blocks::path_word(word, &[])?;
        let (stem, ext) = path.rsplit_once('.')?;
        // `.py files` names a kind of file; `.env` is one.
        let kind = stem.is_empty() && CODE_EXTENSIONS.contains(&ext);
        let domain = ["com", "org", "net", "io", "dev"].contains(&ext);
        let file = ext.chars().any(|c| c.is_ascii_alphabetic())
            && !domain
            && !matches!(path.as_str(), "e.g" | "i.e");
        (file && !kind && cx.scope.may_create(&path)).then_some(path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::harness::profile::{EditFormat, Profile};
    use crate::app::harness::rules::Task;
    use crate::tools::policy::FileScope;

    fn missing(task: &str, scope: &FileScope) -> Option<String> {
        let task = Task {
            text: task.into(),
            ..Task::default()
        };
        let profile = Profile::small();
        asked_for_missing(&Cx {
            task: &task,
            scope,
            profile: &profile,
            format: EditFormat::Blocks,
        })
    }

    #[test]
    fn a_missing_file_the_task_asks_for() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("data.csv"), "a\n").unwrap();
        std::fs::write(dir.path().join("compute.py"), "print(1)\n").unwrap();
        let root = &FileScope::within(dir.path());
        let task = "Count the lines of data.csv (for example with wc -l) and write the count into a new file count.txt.";
        assert_eq!(missing(task, root).as_deref(), Some("count.txt"));
        assert_eq!(
            missing(
                "Run compute.py and record what it prints in `out/result.txt`.",
                root
            )
            .as_deref(),
            Some("out/result.txt")
        );
        // Nothing to make, a file that exists, numbers, abbreviations and domains.
        assert_eq!(missing("Does notes.md exist?", root), None);
        assert_eq!(missing("Write a header into data.csv.", root), None);
        assert_eq!(
            missing(
                "Create PI = 3.14159 in data.csv, e.g. at the top; see example.com",
                root
            ),
            None
        );
        // A path outside the workspace is not one to make.
        assert_eq!(missing("Write the count into ../count.txt.", root), None);
        // An extension alone is a kind of file: the file to make is the one named after it.
        assert_eq!(
            missing(
                "How many .py files are there? Write the number into answer.txt.",
                root
            )
            .as_deref(),
            Some("answer.txt")
        );
        std::fs::write(dir.path().join("count.txt"), "7\n").unwrap();
        assert_eq!(missing(task, root), None);
    }
}
