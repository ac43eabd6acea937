//! [`CommandCue`]: a prompt that asks to run something gets a cue to write the command first (file blocks with
//! `bash` blocks running): small models otherwise guess the output instead of writing the command. The cue says
//! no more than that: a longer one made the model repeat the command or skip its redirect.

use super::{Cx, Rule};
use crate::app::harness::profile::RuleId;

/// What a prompt that asks for a command's output gets appended.
pub const COMMAND_CUE: &str =
    "First write the command the task needs in a ```bash block; you will see its output before you go on.";

/// See the module docs; `bash`: whether `bash` blocks run in this session.
pub struct CommandCue {
    pub bash: bool,
}

impl Rule for CommandCue {
    fn id(&self) -> RuleId {
        RuleId::CommandCue
    }

    fn on_prompt(&self, task: &str, prompt: &mut String, cx: &Cx<'_>) {
        if self.bash && asks_for_a_command(task, &cx.profile.words.command) {
            prompt.push('\n');
            prompt.push_str(COMMAND_CUE);
        }
    }
}

/// Whether `prompt` holds one of `words` (any case) as a request, not as code: `run()`, `app.run` and `run.py`
/// name a `run`.
pub fn asks_for_a_command(prompt: &str, words: &[String]) -> bool {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut rest = prompt;
    while let Some(start) = rest.find(|c: char| is_word(c)) {
        let tail = &rest[start..];
        let end = tail.find(|c: char| !is_word(c)).unwrap_or(tail.len());
        let (word, after) = tail.split_at(end);
        let code = after.starts_with(['(', '.']) || rest[..start].ends_with('.');
        if !code && words.iter().any(|w| w.eq_ignore_ascii_case(word)) {
            return true;
        }
        rest = after;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::harness::profile::Words;

    fn asks(prompt: &str) -> bool {
        asks_for_a_command(prompt, &Words::default().command)
    }

    #[test]
    fn prompts_that_ask_to_run_something() {
        assert!(asks("Run python3 test_prices.py: it fails."));
        assert!(asks("Count the lines (for example with wc -l)."));
        assert!(asks("execute the script and record what it prints"));
        assert!(!asks("Running python3 test_calc.py must succeed."));
        assert!(!asks("Rename run_all to main in app.py"));
        assert!(!asks("Fix the runner in rerun.py"));
        assert!(!asks(
            "Add double(x) to util.py, then use it in main.py so that run() returns double(21)."
        ));
        assert!(!asks("Call app.run with the new port; fix run.py too."));
        assert!(asks("Run it. Then run python3 x.py."));
    }
}
