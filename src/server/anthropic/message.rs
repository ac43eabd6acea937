//! What `POST /v1/messages` answers: the `message` object (`thinking`, `text` and `tool_use` blocks,
//! `stop_reason` `end_turn` / `max_tokens` / `tool_use`, exact usage with cached input apart) and, streamed,
//! Anthropic's events: `message_start`, `ping`, per block `content_block_start` / `content_block_delta`
//! (`text_delta`, `thinking_delta`, `input_json_delta`) / `content_block_stop`, then `message_delta` (stop reason,
//! usage) and `message_stop`; a failure after the stream started is an `error` event.

use axum::response::sse::Event;
use serde_json::{json, Value};

use crate::server::chat_answer::{Collected, Render};
use crate::server::error::ApiError;
use crate::server::source::Piece;
use crate::server::usage::UsageInfo;

/// What every event of one message repeats.
#[derive(Debug, Clone)]
pub struct Head {
    pub id: String,
    /// The model name the client sent (echoed, as an alias may have mapped it).
    pub model: String,
    /// The prompt's tokens, known before the stream starts (for `message_start`).
    pub input_tokens: u64,
}

/// Anthropic's `stop_reason` for OpenAI's `finish_reason`.
fn stop_reason(reason: &str) -> &'static str {
    match reason {
        "length" => "max_tokens",
        "tool_calls" => "tool_use",
        _ => "end_turn",
    }
}

/// `usage` with the cached part of the prompt apart, as Anthropic counts it.
fn usage(u: &UsageInfo) -> Value {
    let cached = u
        .prompt_tokens_details
        .as_ref()
        .map_or(0, |d| d.cached_tokens);
    json!({
        "input_tokens": u.prompt_tokens.saturating_sub(cached),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": u.completion_tokens,
    })
}

/// A call's arguments as the `input` object.
fn input_of(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| json!({}))
}

/// A whole answer as a `message`.
pub fn collected(head: &Head, done: Collected) -> Value {
    let mut content = Vec::new();
    if !done.reasoning.is_empty() {
        content.push(json!({"type": "thinking", "thinking": done.reasoning, "signature": ""}));
    }
    if !done.text.is_empty() || done.calls.is_empty() {
        content.push(json!({"type": "text", "text": done.text}));
    }
    for c in &done.calls {
        content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input_of(&c.arguments)}));
    }
    json!({
        "id": head.id, "type": "message", "role": "assistant", "model": head.model,
        "content": content, "stop_reason": stop_reason(done.reason), "stop_sequence": null,
        "usage": usage(&done.usage),
    })
}

/// The kind of the block being streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    None,
    Thinking,
    Text,
    Call,
}

/// The streamed answer's events.
pub struct MessageStream {
    head: Head,
    open: Open,
    /// Index of the next block.
    next: usize,
}

impl MessageStream {
    pub fn new(head: Head) -> Self {
        Self {
            head,
            open: Open::None,
            next: 0,
        }
    }

    fn event(kind: &str, mut body: Value) -> Event {
        if let Some(o) = body.as_object_mut() {
            o.insert("type".into(), json!(kind));
        }
        Event::default().event(kind).data(body.to_string())
    }

    fn close(&mut self) -> Vec<Event> {
        if self.open == Open::None {
            return Vec::new();
        }
        self.open = Open::None;
        let index = self.next;
        self.next += 1;
        vec![Self::event("content_block_stop", json!({"index": index}))]
    }

    /// Opens a block of `kind` (closing another one) with its start event.
    fn open(&mut self, kind: Open, block: Value) -> Vec<Event> {
        if self.open == kind && kind != Open::Call {
            return Vec::new();
        }
        let mut out = self.close();
        self.open = kind;
        out.push(Self::event(
            "content_block_start",
            json!({"index": self.next, "content_block": block}),
        ));
        out
    }

    fn delta(&self, delta: Value) -> Event {
        Self::event(
            "content_block_delta",
            json!({"index": self.next, "delta": delta}),
        )
    }

    fn error(e: &ApiError) -> Event {
        Self::event(
            "error",
            json!({"error": {"type": e.anthropic_type(), "message": e.message}}),
        )
    }
}

impl Render for MessageStream {
    type Frame = axum::response::sse::Event;

    fn response<S>(frames: S) -> axum::response::Response
    where
        S: futures::Stream<Item = Self::Frame> + Send + 'static,
    {
        crate::server::sse::response(frames)
    }

    fn start(&mut self) -> Vec<Event> {
        let message = json!({
            "id": self.head.id, "type": "message", "role": "assistant", "model": self.head.model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": self.head.input_tokens, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 0},
        });
        vec![
            Self::event("message_start", json!({"message": message})),
            Self::event("ping", json!({})),
        ]
    }

    fn piece(&mut self, piece: Piece) -> Vec<Event> {
        let mut out = Vec::new();
        match piece {
            Piece::Reasoning(t) => {
                out.extend(self.open(
                    Open::Thinking,
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                ));
                out.push(self.delta(json!({"type": "thinking_delta", "thinking": t})));
            }
            Piece::Text(t) => {
                out.extend(self.open(Open::Text, json!({"type": "text", "text": ""})));
                out.push(self.delta(json!({"type": "text_delta", "text": t})));
            }
            Piece::ToolStart { id, name, .. } => {
                out.extend(self.open(
                    Open::Call,
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                ));
            }
            Piece::ToolArgs { fragment, .. } => {
                out.push(self.delta(json!({"type": "input_json_delta", "partial_json": fragment})));
            }
            Piece::Logprobs(_) => {}
            Piece::Finish {
                reason, usage: u, ..
            } => {
                out.extend(self.close());
                out.push(Self::event(
                    "message_delta",
                    json!({"delta": {"stop_reason": stop_reason(reason), "stop_sequence": null},
                           "usage": usage(&u)}),
                ));
                out.push(Self::event("message_stop", json!({})));
            }
            Piece::Fail(e) => {
                out.extend(self.close());
                out.push(Self::error(&e));
            }
        }
        out
    }

    fn queue_failure(&mut self, error: &ApiError) -> Vec<Event> {
        vec![Self::error(error)]
    }
}
