//! What `POST /v1/responses` answers: the `response` object (output items `reasoning`, `message` with
//! `output_text`, `function_call`; exact usage) and, streamed, OpenAI's event sequence: `response.created`,
//! `response.in_progress`, per item `response.output_item.added` … `response.output_item.done` (with
//! `response.content_part.added` / `response.output_text.delta` / `.done` / `response.content_part.done` for text,
//! `response.reasoning_text.delta` / `.done` for reasoning, `response.function_call_arguments.delta` / `.done` for
//! calls), then `response.completed` (`response.incomplete` when `max_output_tokens` cut it, `response.failed`
//! on an error). Every event carries `type` and `sequence_number` and goes out under its own SSE `event:` name.

use axum::response::sse::Event;
use serde_json::{json, Value};

use super::request::Echo;
use crate::server::chat_answer::{Collected, Render};
use crate::server::error::ApiError;
use crate::server::openai::types::UsageInfo;
use crate::server::source::Piece;

/// Ids and echoes every event of one response repeats.
#[derive(Debug, Clone)]
pub struct Head {
    pub id: String,
    pub created_at: u64,
    pub model: String,
    pub echo: Echo,
}

/// A short random hex id with `prefix` (`msg_…`, `fc_…`, `rs_…`).
fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// The `usage` object of a response.
pub fn usage(u: &UsageInfo) -> Value {
    let mut out_details = json!({"reasoning_tokens": 0});
    // Speculative decoding's drafts, as Chat Completions reports them.
    if let Some(d) = &u.completion_tokens_details {
        out_details["accepted_prediction_tokens"] = d.accepted_prediction_tokens.into();
        out_details["rejected_prediction_tokens"] = d.rejected_prediction_tokens.into();
    }
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.prompt_tokens_details.as_ref().map_or(0, |d| d.cached_tokens)},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": out_details,
        "total_tokens": u.total_tokens,
    })
}

/// The `response` object with `status`, `output` and `usage`.
pub fn response(
    head: &Head,
    status: &str,
    output: Vec<Value>,
    usage_info: Option<&UsageInfo>,
) -> Value {
    let e = &head.echo;
    json!({
        "id": head.id,
        "object": "response",
        "created_at": head.created_at,
        "status": status,
        "background": false,
        "error": null,
        "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "instructions": e.instructions,
        "max_output_tokens": e.max_output_tokens,
        "model": head.model,
        "output": output,
        "parallel_tool_calls": e.parallel_tool_calls,
        "previous_response_id": null,
        "reasoning": {"effort": e.effort, "summary": null},
        "store": false,
        "temperature": e.temperature,
        "text": {"format": e.text_format},
        "tool_choice": e.tool_choice,
        "tools": e.tools,
        "top_p": e.top_p,
        "truncation": "disabled",
        "usage": usage_info.map(usage),
        "user": e.user,
        "metadata": e.metadata,
    })
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message", "id": id, "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    })
}

fn reasoning_item(id: &str, text: &str) -> Value {
    json!({
        "type": "reasoning", "id": id, "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    })
}

fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({
        "type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": arguments,
        "status": status,
    })
}

/// The status a finish reason gives a response.
fn status_of(reason: &str) -> &'static str {
    if reason == "length" {
        "incomplete"
    } else {
        "completed"
    }
}

/// A whole answer as a `response` object.
pub fn collected(head: &Head, done: Collected) -> Value {
    let mut output = Vec::new();
    if !done.reasoning.is_empty() {
        output.push(reasoning_item(&item_id("rs"), &done.reasoning));
    }
    if !done.text.is_empty() || done.calls.is_empty() {
        output.push(message_item(&item_id("msg"), &done.text, "completed"));
    }
    for c in &done.calls {
        output.push(call_item(
            &item_id("fc"),
            &c.id,
            &c.name,
            &c.arguments,
            "completed",
        ));
    }
    response(head, status_of(done.reason), output, Some(&done.usage))
}

/// The item being streamed.
enum Open {
    None,
    Reasoning {
        id: String,
        text: String,
    },
    Text {
        id: String,
        text: String,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// The streamed answer's events (see the module docs).
pub struct ResponseStream {
    head: Head,
    seq: u64,
    open: Open,
    /// Finished items, for the final `response`.
    output: Vec<Value>,
}

impl ResponseStream {
    pub fn new(head: Head) -> Self {
        Self {
            head,
            seq: 0,
            open: Open::None,
            output: Vec::new(),
        }
    }

    fn event(&mut self, kind: &str, mut body: Value) -> Event {
        if let Some(o) = body.as_object_mut() {
            o.insert("type".into(), json!(kind));
            o.insert("sequence_number".into(), json!(self.seq));
        }
        self.seq += 1;
        Event::default().event(kind).data(body.to_string())
    }

    fn index(&self) -> usize {
        self.output.len()
    }

    /// Closes the open item (its `.done` events), if any.
    fn close(&mut self) -> Vec<Event> {
        let index = self.index();
        let mut out = Vec::new();
        match std::mem::replace(&mut self.open, Open::None) {
            Open::None => return out,
            Open::Reasoning { id, text } => {
                out.push(self.event(
                    "response.reasoning_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
                ));
                let item = reasoning_item(&id, &text);
                out.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
                self.output.push(item);
            }
            Open::Text { id, text } => {
                out.push(self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "text": text,
                           "logprobs": []}),
                ));
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "part": {"type": "output_text", "text": text, "annotations": []}}),
                ));
                let item = message_item(&id, &text, "completed");
                out.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
                self.output.push(item);
            }
            Open::Call {
                id,
                call_id,
                name,
                arguments,
            } => {
                out.push(self.event(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "name": name, "arguments": arguments}),
                ));
                let item = call_item(&id, &call_id, &name, &arguments, "completed");
                out.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
                self.output.push(item);
            }
        }
        out
    }
}

impl Render for ResponseStream {
    type Frame = axum::response::sse::Event;

    fn response<S>(frames: S) -> axum::response::Response
    where
        S: futures::Stream<Item = Self::Frame> + Send + 'static,
    {
        crate::server::sse::response(frames)
    }

    fn start(&mut self) -> Vec<Event> {
        let r = response(&self.head, "in_progress", Vec::new(), None);
        vec![
            self.event("response.created", json!({"response": r})),
            self.event("response.in_progress", json!({"response": r})),
        ]
    }

    fn piece(&mut self, piece: Piece) -> Vec<Event> {
        let mut out = Vec::new();
        match piece {
            Piece::Reasoning(delta) => {
                if !matches!(self.open, Open::Reasoning { .. }) {
                    out.extend(self.close());
                    let id = item_id("rs");
                    let index = self.index();
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": reasoning_item(&id, "")}),
                    ));
                    self.open = Open::Reasoning {
                        id,
                        text: String::new(),
                    };
                }
                let index = self.index();
                if let Open::Reasoning { id, text } = &mut self.open {
                    text.push_str(&delta);
                    let id = id.clone();
                    out.push(self.event(
                        "response.reasoning_text.delta",
                        json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta}),
                    ));
                }
            }
            Piece::Text(delta) => {
                if !matches!(self.open, Open::Text { .. }) {
                    out.extend(self.close());
                    let id = item_id("msg");
                    let index = self.index();
                    let item = json!({"type": "message", "id": id, "status": "in_progress",
                                      "role": "assistant", "content": []});
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    ));
                    out.push(self.event(
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                               "part": {"type": "output_text", "text": "", "annotations": []}}),
                    ));
                    self.open = Open::Text {
                        id,
                        text: String::new(),
                    };
                }
                let index = self.index();
                if let Open::Text { id, text } = &mut self.open {
                    text.push_str(&delta);
                    let id = id.clone();
                    out.push(self.event(
                        "response.output_text.delta",
                        json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta,
                               "logprobs": []}),
                    ));
                }
            }
            Piece::ToolStart {
                id: call_id, name, ..
            } => {
                out.extend(self.close());
                let id = item_id("fc");
                let index = self.index();
                out.push(self.event(
                    "response.output_item.added",
                    json!({"output_index": index, "item": call_item(&id, &call_id, &name, "", "in_progress")}),
                ));
                self.open = Open::Call {
                    id,
                    call_id,
                    name,
                    arguments: String::new(),
                };
            }
            Piece::ToolArgs { fragment, .. } => {
                let index = self.index();
                if let Open::Call { id, arguments, .. } = &mut self.open {
                    arguments.push_str(&fragment);
                    let id = id.clone();
                    out.push(self.event(
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": index, "delta": fragment}),
                    ));
                }
            }
            Piece::Logprobs(_) => {}
            Piece::Finish { reason, usage, .. } => {
                out.extend(self.close());
                let status = status_of(reason);
                let r = response(
                    &self.head,
                    status,
                    std::mem::take(&mut self.output),
                    Some(&usage),
                );
                let kind = if status == "incomplete" {
                    "response.incomplete"
                } else {
                    "response.completed"
                };
                out.push(self.event(kind, json!({"response": r})));
            }
            Piece::Fail(e) => {
                out.extend(self.close());
                out.extend(self.failure(&e));
            }
        }
        out
    }

    fn queue_failure(&mut self, error: &ApiError) -> Vec<Event> {
        let mut out = self.start();
        out.extend(self.failure(error));
        out
    }
}

impl ResponseStream {
    /// `response.failed` with the error.
    fn failure(&mut self, e: &ApiError) -> Vec<Event> {
        let mut r = response(&self.head, "failed", std::mem::take(&mut self.output), None);
        r["error"] = json!({"code": e.code.unwrap_or(e.kind), "message": e.message});
        vec![self.event("response.failed", json!({"response": r}))]
    }
}
