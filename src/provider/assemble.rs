//! Building an assistant message while it streams, the same way for every provider: text and thinking deltas
//! are merged into blocks, tool calls are opened, fed argument fragments and closed, and each closed call is
//! checked against the request's tools ([`check_tool_call`]). Every step also emits its [`ProviderEvent`].

use serde_json::Value;

use super::events::EventSender;
use super::{
    AssistantMessage, ContentBlock, ErrorReason, InvalidToolCall, InvalidToolCallKind,
    ProviderError, ProviderEvent, StopReason, TokenLogprob, ToolCall, ToolSpec, Usage,
};

/// How much of a bad arguments text is echoed back to the model.
const ECHO_LIMIT: usize = 2_000;

/// A tool call as it streams.
struct OpenCall {
    id: String,
    name: String,
    raw: String,
    finished: Option<ToolCall>,
}

enum Block {
    Text(String),
    Thinking(String),
    Call(usize),
}

/// Accumulates one assistant message and emits the matching events.
pub(crate) struct Assembler {
    tx: EventSender,
    tools: Vec<ToolSpec>,
    model: String,
    started: bool,
    blocks: Vec<Block>,
    calls: Vec<OpenCall>,
}

impl Assembler {
    pub fn new(tx: EventSender, tools: Vec<ToolSpec>, model: String) -> Self {
        Self {
            tx,
            tools,
            model,
            started: false,
            blocks: Vec::new(),
            calls: Vec::new(),
        }
    }

    fn emit(&self, ev: ProviderEvent) {
        // A closed receiver means the stream was dropped; its guard cancels the work, so nothing to do here.
        let _ = self.tx.unbounded_send(ev);
    }

    /// Emits `start` (once).
    pub fn start(&mut self) {
        if !self.started {
            self.started = true;
            self.emit(ProviderEvent::Start {
                model: self.model.clone(),
            });
        }
    }

    /// Emits the log-probabilities of the tokens behind the next deltas.
    pub fn logprobs(&mut self, entries: Vec<TokenLogprob>) {
        if entries.is_empty() {
            return;
        }
        self.start();
        self.emit(ProviderEvent::Logprobs { entries });
    }

    pub fn text(&mut self, delta: &str) {
        if delta.is_empty() {
            return;
        }
        self.start();
        match self.blocks.last_mut() {
            Some(Block::Text(t)) => t.push_str(delta),
            _ => self.blocks.push(Block::Text(delta.to_string())),
        }
        self.emit(ProviderEvent::TextDelta {
            delta: delta.to_string(),
        });
    }

    pub fn thinking(&mut self, delta: &str) {
        if delta.is_empty() {
            return;
        }
        self.start();
        match self.blocks.last_mut() {
            Some(Block::Thinking(t)) => t.push_str(delta),
            _ => self.blocks.push(Block::Thinking(delta.to_string())),
        }
        self.emit(ProviderEvent::ThinkingDelta {
            delta: delta.to_string(),
        });
    }

    /// Opens a tool call and returns its index. A missing or empty id gets a fresh one.
    pub fn begin_call(&mut self, id: Option<String>, name: &str) -> usize {
        self.start();
        let index = self.calls.len();
        let id = id.filter(|s| !s.is_empty()).unwrap_or_else(new_call_id);
        self.calls.push(OpenCall {
            id: id.clone(),
            name: name.to_string(),
            raw: String::new(),
            finished: None,
        });
        self.blocks.push(Block::Call(index));
        self.emit(ProviderEvent::ToolCallStart {
            index,
            id,
            name: name.to_string(),
        });
        index
    }

    /// Appends argument text to an open call (empty fragments are dropped).
    pub fn call_fragment(&mut self, index: usize, fragment: &str) {
        if fragment.is_empty() {
            return;
        }
        let Some(call) = self.calls.get_mut(index) else {
            return;
        };
        if call.finished.is_some() {
            return;
        }
        call.raw.push_str(fragment);
        self.emit(ProviderEvent::ToolCallDelta {
            index,
            arguments_fragment: fragment.to_string(),
        });
    }

    /// Closes a call: checks it against the tools and emits `tool_call_end`. Closing twice does nothing.
    pub fn end_call(&mut self, index: usize) {
        let Some(call) = self.calls.get_mut(index) else {
            return;
        };
        if call.finished.is_some() {
            return;
        }
        let checked = check_tool_call(&self.tools, &call.id, &call.name, &call.raw);
        if let Some(invalid) = &checked.invalid {
            tracing::warn!(tool = %checked.name, kind = ?invalid.kind, "invalid tool call from the model");
        }
        call.finished = Some(checked.clone());
        self.emit(ProviderEvent::ToolCallEnd {
            index,
            call: checked,
        });
    }

    /// Closes call `index` as cut by the output token limit: it keeps its arguments (valid JSON when
    /// `closed_early`: the engine closed it with the shortest completion) and is marked
    /// [`InvalidToolCallKind::Truncated`], so nobody runs it as if it were complete.
    pub fn end_call_truncated(&mut self, index: usize, closed_early: bool) {
        let Some(call) = self.calls.get_mut(index) else {
            return;
        };
        if call.finished.is_some() {
            return;
        }
        // Never a broken call: arguments the limit cut open are closed as valid JSON (appended, so what was
        // streamed stands).
        let tail = super::json_tail::closing_tail(&call.raw);
        if !tail.is_empty() {
            call.raw.push_str(&tail);
            self.emit(ProviderEvent::ToolCallDelta {
                index,
                arguments_fragment: tail,
            });
        }
        let Some(call) = self.calls.get_mut(index) else {
            return;
        };
        let mut checked = check_tool_call(&self.tools, &call.id, &call.name, &call.raw);
        let how = if closed_early {
            "it was closed early so its JSON is valid, but its arguments may be incomplete"
        } else {
            "its arguments are incomplete"
        };
        checked.invalid = Some(InvalidToolCall {
            kind: InvalidToolCallKind::Truncated,
            message: format!(
                "This `{}` call was cut off by the output token limit ({how}) and was not executed. Retry \
                 with a shorter call.",
                call.name
            ),
            raw_arguments: Some(call.raw.clone()),
        });
        call.finished = Some(checked.clone());
        self.emit(ProviderEvent::ToolCallEnd {
            index,
            call: checked,
        });
    }

    /// Closes call `index` of an output the limit stopped: whole if its arguments already parse (the limit cut
    /// what came after), else as [`end_call_truncated`](Self::end_call_truncated).
    pub fn end_call_at_limit(&mut self, index: usize) {
        let whole = self
            .calls
            .get(index)
            .is_some_and(|c| super::json_tail::closing_tail(&c.raw).is_empty());
        match whole {
            true => self.end_call(index),
            false => self.end_call_truncated(index, false),
        }
    }

    pub fn end_open_calls(&mut self) {
        for i in 0..self.calls.len() {
            self.end_call(i);
        }
    }

    pub fn call_count(&self) -> usize {
        self.calls.len()
    }

    /// The message so far. Open calls appear as they would if they were closed now.
    pub fn message(&self) -> AssistantMessage {
        let content =
            self.blocks
                .iter()
                .filter_map(|b| match b {
                    Block::Text(t) => Some(ContentBlock::Text { text: t.clone() }),
                    Block::Thinking(t) => Some(ContentBlock::Thinking {
                        thinking: t.clone(),
                    }),
                    Block::Call(i) => self.calls.get(*i).map(|c| {
                        ContentBlock::ToolCall(c.finished.clone().unwrap_or_else(|| {
                            check_tool_call(&self.tools, &c.id, &c.name, &c.raw)
                        }))
                    }),
                })
                .collect();
        AssistantMessage { content }
    }

    /// Closes open calls and emits `done`. `stop` with tool calls is `tool_use`, and `tool_use` without calls is
    /// `stop` (servers differ here).
    pub fn done(mut self, stop_reason: StopReason, usage: Usage) {
        self.start();
        self.end_open_calls();
        let stop_reason = match stop_reason {
            StopReason::Stop if !self.calls.is_empty() => StopReason::ToolUse,
            StopReason::ToolUse if self.calls.is_empty() => StopReason::Stop,
            other => other,
        };
        let message = self.message();
        self.emit(ProviderEvent::Done {
            stop_reason,
            usage,
            message,
        });
    }

    /// Emits the `error` event (`aborted` for a cancellation), with the message so far.
    pub fn fail(mut self, error: &ProviderError, usage: Usage) {
        self.start();
        let reason = match error {
            ProviderError::Cancelled => ErrorReason::Aborted,
            _ => ErrorReason::Error,
        };
        let partial = self.message();
        self.emit(ProviderEvent::Error {
            reason,
            kind: error.kind(),
            message: error.to_string(),
            usage,
            partial,
        });
    }
}

/// A fresh tool-call id (`call_` and 24 hex digits).
pub(crate) fn new_call_id() -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("call_{}", &id[..24])
}

/// Parses and checks a finished tool call against the offered `tools`. The result is always a call; a problem
/// is recorded in [`ToolCall::invalid`] with a message for the model (see there). An empty arguments text
/// counts as `{}` (servers send that for tools without parameters).
pub fn check_tool_call(tools: &[ToolSpec], id: &str, name: &str, raw_arguments: &str) -> ToolCall {
    let trimmed = raw_arguments.trim();
    let parsed: Result<Value, serde_json::Error> = if trimmed.is_empty() {
        Ok(Value::Object(Default::default()))
    } else {
        serde_json::from_str(trimmed)
    };
    let mut call = ToolCall {
        id: id.to_string(),
        name: name.to_string(),
        arguments: parsed.as_ref().cloned().unwrap_or(Value::Null),
        invalid: None,
    };
    let Some(spec) = tools.iter().find(|t| t.name == name) else {
        let offered: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let available = if offered.is_empty() {
            "no tools are available in this conversation".to_string()
        } else {
            format!("the available tools are: {}", offered.join(", "))
        };
        call.invalid = Some(InvalidToolCall {
            kind: InvalidToolCallKind::UnknownTool,
            message: format!(
                "Tool `{name}` does not exist; {available}. Call one of these instead."
            ),
            raw_arguments: parsed.is_err().then(|| raw_arguments.to_string()),
        });
        return call;
    };
    match parsed {
        Err(e) => {
            call.invalid = Some(InvalidToolCall {
                kind: InvalidToolCallKind::InvalidJson,
                message: format!(
                    "The arguments of this `{name}` call are not valid JSON ({e}). Received: {}\nCall `{name}` \
                     again with a JSON object that matches its parameters schema.",
                    echo(raw_arguments)
                ),
                raw_arguments: Some(raw_arguments.to_string()),
            });
        }
        Ok(value) => {
            if let Err(errors) = spec.validate_arguments(&value) {
                let list: Vec<String> = errors.iter().map(|e| format!("  - {e}")).collect();
                call.invalid = Some(InvalidToolCall {
                    kind: InvalidToolCallKind::SchemaViolation,
                    message: format!(
                        "The arguments of this `{name}` call do not match its parameters schema:\n{}\n\
                         Received: {}\nCall `{name}` again with corrected arguments.",
                        list.join("\n"),
                        echo(&value.to_string())
                    ),
                    raw_arguments: None,
                });
            }
        }
    }
    call
}

/// `text`, cut at [`ECHO_LIMIT`] bytes (on a character boundary).
fn echo(text: &str) -> String {
    if text.len() <= ECHO_LIMIT {
        return text.to_string();
    }
    let mut end = ECHO_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read_tool() -> ToolSpec {
        ToolSpec::new_unchecked(
            "read",
            "Read a file",
            json!({"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"], "additionalProperties": false}),
        )
    }

    #[test]
    fn valid_call_parses() {
        let call = check_tool_call(&[read_tool()], "c1", "read", r#"{"path": "a.rs"}"#);
        assert_eq!(call, ToolCall::new("c1", "read", json!({"path": "a.rs"})));
        let empty = check_tool_call(
            &[ToolSpec::new_unchecked(
                "read",
                "",
                json!({"type": "object"}),
            )],
            "c",
            "read",
            "",
        );
        assert_eq!(empty.arguments, json!({}));
        assert!(empty.invalid.is_none());
    }

    #[test]
    fn unknown_tool_invalid_json_and_schema_violation_are_marked() {
        let unknown = check_tool_call(&[read_tool()], "c", "delete", "{}");
        let inv = unknown.invalid.unwrap();
        assert_eq!(inv.kind, InvalidToolCallKind::UnknownTool);
        assert!(
            inv.message.contains("`delete`") && inv.message.contains("read"),
            "{}",
            inv.message
        );

        let bad_json = check_tool_call(&[read_tool()], "c", "read", r#"{"path": "a"#);
        assert_eq!(bad_json.arguments, Value::Null);
        let inv = bad_json.invalid.clone().unwrap();
        assert_eq!(inv.kind, InvalidToolCallKind::InvalidJson);
        assert_eq!(inv.raw_arguments.as_deref(), Some(r#"{"path": "a"#));
        assert_eq!(bad_json.arguments_text(), r#"{"path": "a"#);

        let wrong = check_tool_call(&[read_tool()], "c", "read", r#"{"path": 3}"#);
        let inv = wrong.invalid.unwrap();
        assert_eq!(inv.kind, InvalidToolCallKind::SchemaViolation);
        assert!(inv.message.contains("/path"), "{}", inv.message);
        assert_eq!(wrong.arguments, json!({"path": 3}));
    }

    #[test]
    fn echo_is_bounded() {
        let long = "é".repeat(3_000);
        let e = echo(&long);
        assert!(
            e.len() < 2_100 && e.ends_with("(6000 bytes in all)"),
            "{}",
            e.len()
        );
    }
}
