//! A harness profile: how much help a model gets, as data (codex keeps per-model behaviour as one struct of
//! flags in `model_family.rs`). The model's manifest names its profile (`harness = "small"`); a remote server or a
//! provider the caller built gets `capable`. A profile says how the model changes files, the temperature it
//! decodes at unless told, which rules run (in [`RuleId::ORDER`]) and the word lists the rules that read a task
//! use.

use serde::{Deserialize, Serialize};

/// How the model changes files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EditFormat {
    /// JSON tool calls (`edit`, `write`, …) as the chat template offers them.
    #[default]
    Tools,
    /// File blocks and `bash` blocks in the reply's text; no JSON tools offered (`super::blocks`).
    Blocks,
}

impl EditFormat {
    pub fn name(self) -> &'static str {
        match self {
            EditFormat::Tools => "tools",
            EditFormat::Blocks => "blocks",
        }
    }
}

impl std::str::FromStr for EditFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "tools" => Ok(EditFormat::Tools),
            "blocks" => Ok(EditFormat::Blocks),
            other => Err(format!(
                "unknown edit format `{other}` (expected tools or blocks)"
            )),
        }
    }
}

/// The rules, by name. [`RuleId::ORDER`] is the order they are asked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleId {
    /// A call that just failed, or a change that just landed, is answered instead of run again; repeats that
    /// keep coming stop the run.
    Repeats,
    /// A no-op call after a change landed ends the run as done.
    NoOpFinish,
    /// A first block that changed nothing is answered as a failure, with the task restated.
    UnchangedBlock,
    /// After a change lands, the next file the prompt named that is still unchanged is asked about.
    NextNamedFile,
    /// A block that changed nothing is continued from the model's own second choice.
    SecondChoice,
    /// A run about to end without a file the task asks for gets one more turn that starts with its block.
    MissingFile,
    /// A prompt that asks to run something gets a cue to write the command first.
    CommandCue,
    /// The run checks its own work (files parse, definitions kept, the named command passes) before it ends.
    SelfCheck,
}

impl RuleId {
    /// Every rule, in the order the harness asks them.
    /// A call that would change nothing after a change landed is the model saying it is done, before it is a
    /// repeat.
    pub const ORDER: [RuleId; 8] = [
        RuleId::NoOpFinish,
        RuleId::Repeats,
        RuleId::UnchangedBlock,
        RuleId::NextNamedFile,
        RuleId::SecondChoice,
        RuleId::MissingFile,
        RuleId::CommandCue,
        RuleId::SelfCheck,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RuleId::Repeats => "repeats",
            RuleId::NoOpFinish => "no_op_finish",
            RuleId::UnchangedBlock => "unchanged_block",
            RuleId::NextNamedFile => "next_named_file",
            RuleId::SecondChoice => "second_choice",
            RuleId::MissingFile => "missing_file",
            RuleId::CommandCue => "command_cue",
            RuleId::SelfCheck => "self_check",
        }
    }
}

impl std::str::FromStr for RuleId {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim().replace('-', "_");
        RuleId::ORDER
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = RuleId::ORDER.iter().map(|r| r.name()).collect();
                format!("unknown harness rule `{s}` (known: {})", names.join(", "))
            })
    }
}

/// The rules `--no-loop-rules` turns off: those that answer, stop or continue the model's own calls.
pub const LOOP_GUARDS: [RuleId; 3] = [RuleId::Repeats, RuleId::NoOpFinish, RuleId::SecondChoice];

/// The words the task-reading rules look for (English; a profile may carry other lists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Words {
    /// Words that ask for an existing file to change.
    pub changing: Vec<String>,
    /// Words that ask for a file to be made.
    pub making: Vec<String>,
    /// Words that ask to run something.
    pub command: Vec<String>,
    /// Other words that ask for the workspace to change (with `changing` and `making`: a change task).
    pub other_changes: Vec<String>,
    /// Words that ask for something to be taken out (a test file may then lose assertions).
    pub removing: Vec<String>,
    /// Words a question starts with: a task that is one question, with no word of `making`, asks for no change
    /// (`What does add return?` names the function `add`).
    pub questions: Vec<String>,
}

impl Default for Words {
    #[rustfmt::skip]
    fn default() -> Self {
        let list = |w: &[&str]| w.iter().map(|s| s.to_string()).collect();
        Self {
            changing: list(&[
                "change", "update", "edit", "modify", "fix", "rename", "replace", "remove",
                "delete", "use",
            ]),
            making: list(&[
                "create", "write", "save", "record", "store", "put", "new", "generate",
            ]),
            command: list(&["run", "execute", "wc", "count", "many"]),
            other_changes: list(&[
                "add", "implement", "bump", "make", "move", "refactor", "set", "append", "insert",
                "convert", "rewrite", "sort", "raise",
            ]),
            removing: list(&["remove", "delete", "drop"]),
            questions: list(&[
                "what", "which", "how", "why", "where", "who", "when", "does", "do", "is", "are",
            ]),
        }
    }
}

impl Words {
    /// Whether `text` holds one of `words` as a word of its own (any case).
    pub fn any_in(words: &[String], text: &str) -> bool {
        text.split_whitespace().any(|w| {
            let w = w
                .trim_matches(|c: char| !c.is_alphanumeric())
                .to_ascii_lowercase();
            words.contains(&w)
        })
    }

    /// Whether `task` asks for a change to the workspace (a file changed or made).
    pub fn asks_for_change(&self, task: &str) -> bool {
        let task = task.trim();
        let first = task.split_whitespace().next().unwrap_or("");
        let question = task.ends_with('?')
            && !task.contains("? ")
            && !task.contains(". ")
            && Self::any_in(&self.questions, first);
        if question && !Self::any_in(&self.making, task) {
            return false;
        }
        [&self.changing, &self.making, &self.other_changes]
            .iter()
            .any(|words| Self::any_in(words, task))
    }
}

/// How much help a model gets.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub edit_format: EditFormat,
    /// The temperature replies decode at unless the session sets one.
    pub temperature: Option<f32>,
    /// The rules that run, in [`RuleId::ORDER`].
    pub rules: Vec<RuleId>,
    pub words: Words,
}

impl Profile {
    /// Small local models: file blocks, greedy decoding (as Aider runs small models at temperature 0: sampling a
    /// small model's long tail breaks code it would otherwise copy right), every rule.
    pub fn small() -> Self {
        Self {
            name: "small".into(),
            edit_format: EditFormat::Blocks,
            temperature: Some(0.0),
            rules: RuleId::ORDER.to_vec(),
            words: Words::default(),
        }
    }

    /// Capable models and remote servers: grammar-constrained JSON tools, no crutches; the run still checks its
    /// own work and stops a loop that repeats itself.
    pub fn capable() -> Self {
        Self {
            name: "capable".into(),
            edit_format: EditFormat::Tools,
            temperature: None,
            rules: vec![RuleId::Repeats, RuleId::SelfCheck],
            words: Words::default(),
        }
    }

    /// The profile called `name`.
    pub fn named(name: &str) -> Result<Self, String> {
        match name.trim() {
            "small" => Ok(Self::small()),
            "capable" => Ok(Self::capable()),
            other => Err(format!(
                "unknown harness profile `{other}` (expected small or capable)"
            )),
        }
    }

    /// The profile of a model the local engine runs: the one its manifest names; a model without a manifest
    /// (a GGUF file given by path) is taken as small, the models the engine is mostly given.
    pub fn for_local_model(model: &str) -> Self {
        crate::model_files::manifest::find(model)
            .ok()
            .and_then(|m| m.harness)
            .and_then(|name| Self::named(&name).ok())
            .unwrap_or_else(Self::small)
    }

    /// This profile without the `off` rules.
    pub fn without(mut self, off: &[RuleId]) -> Self {
        self.rules.retain(|r| !off.contains(r));
        self
    }

    pub fn runs(&self, rule: RuleId) -> bool {
        self.rules.contains(&rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_by_name_and_profiles_differ() {
        for r in RuleId::ORDER {
            assert_eq!(r.name().parse::<RuleId>(), Ok(r));
        }
        assert_eq!("second-choice".parse::<RuleId>(), Ok(RuleId::SecondChoice));
        assert!("no_such_rule"
            .parse::<RuleId>()
            .unwrap_err()
            .contains("known:"));
        let small = Profile::small().without(&[RuleId::SecondChoice]);
        assert!(!small.runs(RuleId::SecondChoice) && small.runs(RuleId::Repeats));
        assert_eq!(Profile::capable().edit_format, EditFormat::Tools);
        assert!(!Profile::capable().runs(RuleId::UnchangedBlock));
        assert!(Profile::named("huge").is_err());
    }

    #[test]
    fn task_words() {
        let w = Words::default();
        assert!(w.asks_for_change("Fix the bug in calc.py."));
        assert!(w.asks_for_change("Create a file todo.txt"));
        assert!(!w.asks_for_change("How many .py files are there?"));
        assert!(!w.asks_for_change("What does parse() return?"));
        assert!(!w.asks_for_change("What does add in calc.py return?"));
        assert!(w.asks_for_change("How many lines? Write the count into n.txt."));
    }
}
