//! Retrying a failed attempt from a fresh sample (rule `resample`, file blocks). A small model told that its
//! change failed a check mostly writes the same block again (at temperature 0 it must). So when the self-check
//! fails on a change, the attempt is taken back instead: the files the prompt changed get their text from before
//! it (created ones are removed), the transcript the model sees is cut back to the prompt, and the next reply is
//! sampled at [`TEMPERATURE`] with a seed per attempt — the workspace is the scratch copy, and the attempt that
//! passes its checks is the one kept. Attempts are the self-check's retries; when they are spent, the run ends
//! `Failed` with the last attempt's files.

use crate::provider::Sampling;
use crate::tools::policy::FileScope;
use crate::transcript::AgentMessage;

/// The temperature a retried attempt is sampled at.
pub const TEMPERATURE: f32 = 0.7;

/// Where the retries stand for the prompt now running.
#[derive(Debug, Default)]
pub struct Attempts {
    /// The prompt as the model got it (the message the view is cut back to).
    prompt: String,
    /// Attempts taken back so far.
    taken_back: u64,
    /// An attempt was taken back and the view not cut yet (the next transcript ends with the harness's note).
    armed: bool,
    /// The index of the last note that took an attempt back: the view skips from after the prompt to after it.
    from: Option<usize>,
}

impl Attempts {
    /// A new prompt.
    pub fn start(prompt: &str) -> Self {
        Self {
            prompt: prompt.to_string(),
            ..Self::default()
        }
    }

    /// An attempt was taken back; the next request starts over from the prompt.
    pub fn take_back(&mut self) -> u64 {
        self.taken_back += 1;
        self.armed = true;
        self.taken_back
    }

    /// The transcript the model sees: `messages` without the attempts taken back.
    pub fn view(&mut self, messages: &[AgentMessage]) -> Vec<AgentMessage> {
        if self.armed {
            self.armed = false;
            self.from = messages.len().checked_sub(1);
        }
        let Some(from) = self.from.filter(|f| *f < messages.len()) else {
            return messages.to_vec();
        };
        let is_prompt = |m: &AgentMessage| match m {
            AgentMessage::User { content, .. } => content.trim() == self.prompt.trim(),
            _ => false,
        };
        let Some(prompt) = messages[..from].iter().rposition(is_prompt) else {
            return messages.to_vec();
        };
        messages[..=prompt]
            .iter()
            .chain(&messages[from + 1..])
            .cloned()
            .collect()
    }

    /// The sampling of the next request: after an attempt was taken back, [`TEMPERATURE`] and a seed of its own.
    pub fn sampling(&self, base: &Sampling) -> Option<Sampling> {
        (self.taken_back > 0).then(|| Sampling {
            temperature: Some(TEMPERATURE),
            seed: Some(base.seed.unwrap_or(0).wrapping_add(self.taken_back)),
            ..base.clone()
        })
    }
}

/// Gives the files `changed` (path, text before the prompt; `None`: the prompt created it) their text back,
/// through `scope`. What could not be restored, with why.
pub fn restore(scope: &FileScope, changed: &[(String, Option<String>)]) -> Vec<String> {
    let mut failed = Vec::new();
    for (path, before) in changed {
        let done = scope
            .resolve(path)
            .map_err(|e| e.to_string())
            .and_then(|abs| {
                match before {
                    Some(text) => std::fs::write(&abs, text),
                    None => std::fs::remove_file(&abs),
                }
                .map_err(|e| e.to_string())
            });
        if let Err(e) = done {
            failed.push(format!("{path}: {e}"));
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_skips_the_attempts_taken_back() {
        let m = |s: &str| AgentMessage::user(s);
        let mut a = Attempts::start("Fix calc.py.");
        let first = vec![m("Fix calc.py."), m("attempt 1"), m("note 1")];
        assert_eq!(a.view(&first).len(), 3);
        assert_eq!(a.sampling(&Sampling::default()), None);
        assert_eq!(a.take_back(), 1);
        // The transcript that ends with the note: only the prompt is seen.
        let v = a.view(&first);
        assert_eq!(v.len(), 1);
        let more = [first.clone(), vec![m("attempt 2")]].concat();
        let v = a.view(&more);
        assert_eq!(v.len(), 2);
        assert!(matches!(&v[1], AgentMessage::User { content, .. } if content == "attempt 2"));
        let s = a.sampling(&Sampling::default()).unwrap();
        assert_eq!((s.temperature, s.seed), (Some(TEMPERATURE), Some(1)));
    }

    #[test]
    fn restore_gives_back_the_text_and_removes_what_was_made() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("ws");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("a.py"), "broken\n").unwrap();
        std::fs::write(dir.join("new.py"), "x\n").unwrap();
        let scope = FileScope::within(&dir);
        let changed = vec![
            ("a.py".to_string(), Some("fine\n".to_string())),
            ("new.py".to_string(), None),
            ("../outside.py".to_string(), Some("no\n".to_string())),
        ];
        let failed = restore(&scope, &changed);
        assert_eq!(std::fs::read_to_string(dir.join("a.py")).unwrap(), "fine\n");
        assert!(!dir.join("new.py").exists());
        assert_eq!(failed.len(), 1, "{failed:?}");
        assert!(!root.path().join("outside.py").exists());
    }
}
