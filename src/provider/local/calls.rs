//! The engine's tool calls as the local provider shows them, with the one rule that sits between: a call that
//! repeats an earlier call of the same message (small models loop on their last call) is never shown — it ends
//! the output.
//!
//! Only a call that may still turn out to be a repeat is held back: one with the name of an earlier call whose
//! arguments, as written so far (whitespace outside strings ignored), are still a prefix of that call's. As soon
//! as it departs from every earlier call it is shown with what was held and streams on fragment by fragment; a
//! call of a new tool streams from its start, so a long second call (a whole file as a `write`) is not held back
//! until it ends. A call that was shown and
//! then ends equal to an earlier one in value (written with other key order) ends the output after it.

use serde_json::Value;

use crate::engine::{EngineToolCall, OutputDelta};
use crate::provider::assemble::Assembler;

/// JSON text with the whitespace outside strings dropped, fed in pieces (a piece may end inside a string or
/// after a backslash).
#[derive(Default, Clone)]
struct Compact {
    text: String,
    in_string: bool,
    escaped: bool,
}

impl Compact {
    fn push(&mut self, piece: &str) {
        for c in piece.chars() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == '"' {
                    self.in_string = false;
                }
            } else if c == '"' {
                self.in_string = true;
            } else if c.is_whitespace() {
                continue;
            }
            self.text.push(c);
        }
    }

    fn of(text: &str) -> String {
        let mut c = Self::default();
        c.push(text);
        c.text
    }
}

/// The call being held: its deltas so far and its arguments as written, compacted.
struct Held {
    name: String,
    deltas: Vec<OutputDelta>,
    args: Compact,
}

/// The engine's calls as the provider sees them (see the module doc). Call indices map engine → ours (the same
/// in practice; kept apart so neither side relies on it).
#[derive(Default)]
pub(super) struct CallMap {
    pub map: Vec<(usize, usize)>,
    /// The engine is closing a call early (see [`crate::engine::TokenEvent::closes_call`]).
    pub closing: bool,
    /// The call held back, with whatever followed it.
    held: Option<Held>,
    /// `(name, arguments)` of every call ended so far, parsed (what makes two calls the same) and compacted
    /// (what a call being written is compared with).
    seen: Vec<((String, Value), String)>,
    /// A repeated call was found: the output ends before it (or after it, when it was already shown).
    pub repeated: bool,
}

impl CallMap {
    fn ours(&self, engine_index: usize) -> Option<usize> {
        self.map
            .iter()
            .find(|(e, _)| *e == engine_index)
            .map(|(_, o)| *o)
    }

    /// Shows what is held (the output ended inside a held call, or the call departed from every earlier one).
    pub fn flush(&mut self, out: &mut Assembler) {
        if let Some(held) = self.held.take() {
            for d in held.deltas {
                self.show(d, out);
            }
        }
    }

    fn show(&mut self, d: OutputDelta, out: &mut Assembler) {
        match d {
            OutputDelta::Content { text } => out.text(&text),
            OutputDelta::ToolCallStart { index, id, name } => {
                let ours = out.begin_call(Some(id), &name);
                self.map.push((index, ours));
            }
            OutputDelta::ToolCallArguments { index, fragment } => {
                if let Some(ours) = self.ours(index) {
                    out.call_fragment(ours, &fragment);
                }
            }
            OutputDelta::ToolCallEnd { index, call } => {
                // Shown already, yet the same call in value: nothing after it is shown.
                self.repeated |= self.seen_before(&call);
                self.seen.push((
                    call_key(&call.name, &call.arguments),
                    Compact::of(&call.arguments),
                ));
                if let Some(ours) = self.ours(index) {
                    if self.closing {
                        out.end_call_truncated(ours, true);
                    } else {
                        out.end_call(ours);
                    }
                }
            }
            // Cut off by `length`, a stop string or a cancel: the call stays open and is closed (and marked) with
            // the message.
            OutputDelta::ToolCallIncomplete { index, .. } => {
                tracing::debug!(index, "a tool call was cut off");
            }
        }
    }

    /// Whether the held call may still be a repeat: an earlier call of its name has arguments its own begin.
    fn may_repeat(&self, held: &Held) -> bool {
        self.seen
            .iter()
            .any(|((name, _), args)| *name == held.name && args.starts_with(&held.args.text))
    }

    /// Takes one delta: shown now, or held while the call being written may repeat an earlier one.
    pub fn take(&mut self, d: OutputDelta, out: &mut Assembler) {
        if self.repeated {
            return;
        }
        if let OutputDelta::ToolCallEnd { call, .. } = &d {
            if self.held.is_some() && self.seen_before(call) {
                self.held = None;
                self.repeated = true;
                return;
            }
        }
        let held = match (&mut self.held, &d) {
            (Some(held), _) => held,
            (None, OutputDelta::ToolCallStart { name, .. }) => self.held.insert(Held {
                name: name.clone(),
                deltas: Vec::new(),
                args: Compact::default(),
            }),
            (None, _) => return self.show(d, out),
        };
        let ended = match &d {
            OutputDelta::ToolCallArguments { fragment, .. } => {
                held.args.push(fragment);
                false
            }
            OutputDelta::ToolCallEnd { .. } => true,
            _ => false,
        };
        held.deltas.push(d);
        let keep = !ended && self.held.as_ref().is_some_and(|h| self.may_repeat(h));
        if !keep {
            self.flush(out);
        }
    }

    /// Whether an ended call equals one of this message's earlier calls (name and parsed arguments).
    fn seen_before(&self, call: &EngineToolCall) -> bool {
        let key = call_key(&call.name, &call.arguments);
        self.seen.iter().any(|(k, _)| *k == key)
    }
}

/// What makes two calls the same call: the name and the parsed arguments (unparsable ones as their text).
fn call_key(name: &str, arguments: &str) -> (String, Value) {
    let args =
        serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_string()));
    (name.to_string(), args)
}

#[cfg(test)]
mod tests {
    use futures::channel::mpsc;

    use super::*;
    use crate::provider::ProviderEvent;

    fn start(index: usize, name: &str) -> OutputDelta {
        OutputDelta::ToolCallStart {
            index,
            id: format!("call_{index}"),
            name: name.into(),
        }
    }

    fn args(index: usize, fragment: &str) -> OutputDelta {
        OutputDelta::ToolCallArguments {
            index,
            fragment: fragment.into(),
        }
    }

    fn end(index: usize, name: &str, arguments: &str) -> OutputDelta {
        OutputDelta::ToolCallEnd {
            index,
            call: EngineToolCall {
                id: format!("call_{index}"),
                name: name.into(),
                arguments: arguments.into(),
            },
        }
    }

    /// Feeds `deltas` one at a time; after each, the events that came out (as short strings).
    fn run(deltas: Vec<OutputDelta>) -> (Vec<Vec<String>>, bool) {
        let (tx, mut rx) = mpsc::unbounded();
        let mut out = Assembler::new(tx, Vec::new(), "m".into());
        let mut calls = CallMap::default();
        let mut after = Vec::new();
        for d in deltas {
            calls.take(d, &mut out);
            let mut now = Vec::new();
            while let Ok(ev) = rx.try_recv() {
                now.push(match ev {
                    ProviderEvent::ToolCallStart { name, .. } => format!("start {name}"),
                    ProviderEvent::ToolCallDelta {
                        arguments_fragment, ..
                    } => format!("args {arguments_fragment}"),
                    ProviderEvent::ToolCallEnd { .. } => "end".to_string(),
                    ProviderEvent::TextDelta { delta } => format!("text {delta}"),
                    _ => continue,
                });
            }
            after.push(now);
        }
        calls.flush(&mut out);
        (after, calls.repeated)
    }

    #[test]
    fn a_second_call_of_another_tool_streams_from_its_start() {
        let (after, repeated) = run(vec![
            start(0, "read"),
            args(0, r#"{"path": "a.txt"}"#),
            end(0, "read", r#"{"path": "a.txt"}"#),
            start(1, "write"),
            args(1, r#"{"path": "b.txt", "#),
            args(1, r#""content": "long"#),
            end(1, "write", r#"{"path": "b.txt", "content": "long"}"#),
        ]);
        assert!(!repeated);
        assert_eq!(after[3], ["start write"]);
        assert_eq!(after[4], [r#"args {"path": "b.txt", "#]);
        assert_eq!(after[5], [r#"args "content": "long"#]);
        assert_eq!(after[6], ["end"]);
    }

    #[test]
    fn a_call_of_the_same_tool_is_held_only_while_it_may_repeat() {
        let (after, repeated) = run(vec![
            start(0, "read"),
            args(0, r#"{"path": "a.txt"}"#),
            end(0, "read", r#"{"path": "a.txt"}"#),
            start(1, "read"),
            // Other spacing, still the same text so far: held.
            args(1, "{ \"path\":  \"a"),
            // Departs ("a.md"): shown with what was held, then streamed.
            args(1, ".md"),
            args(1, "\"}"),
            end(1, "read", r#"{ "path":  "a.md"}"#),
        ]);
        assert!(!repeated);
        assert!(after[3].is_empty() && after[4].is_empty(), "{after:?}");
        assert_eq!(
            after[5],
            ["start read", "args { \"path\":  \"a", "args .md"]
        );
        assert_eq!(after[6], ["args \"}"]);
        assert_eq!(after[7], ["end"]);
    }

    #[test]
    fn a_repeated_call_is_never_shown_and_ends_the_output() {
        let (after, repeated) = run(vec![
            start(0, "read"),
            args(0, r#"{"path": "a.txt"}"#),
            end(0, "read", r#"{"path": "a.txt"}"#),
            start(1, "read"),
            args(1, "{\"path\":\n \"a.txt\"}"),
            end(1, "read", "{\"path\":\n \"a.txt\"}"),
            OutputDelta::Content {
                text: "after".into(),
            },
        ]);
        assert!(repeated);
        assert!(after[3..].iter().all(Vec::is_empty), "{after:?}");
    }

    #[test]
    fn a_repeat_in_other_key_order_is_shown_but_ends_the_output_after_it() {
        let first = r#"{"path": "a", "limit": 5}"#;
        let (after, repeated) = run(vec![
            start(0, "read"),
            args(0, first),
            end(0, "read", first),
            start(1, "read"),
            args(1, r#"{"limit": 5, "path": "a"}"#),
            end(1, "read", r#"{"limit": 5, "path": "a"}"#),
            OutputDelta::Content {
                text: "after".into(),
            },
        ]);
        assert!(repeated);
        assert_eq!(after[5], ["end"]);
        assert!(after[6].is_empty(), "{after:?}");
    }

    #[test]
    fn compacting_keeps_string_whitespace_across_pieces() {
        let mut c = Compact::default();
        for piece in ["{ \"a b", "\\\" c\" ", ":\t[1, ", "2 ] }"] {
            c.push(piece);
        }
        assert_eq!(c.text, "{\"a b\\\" c\":[1,2]}");
    }
}
