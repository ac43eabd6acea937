//! Assembling streamed chunks into one assistant message. Tool calls arrive as deltas keyed by `index`: the id
//! and name usually only in the first delta of a call, argument fragments (sometimes empty) after, several
//! calls may be open at once, and a call may finish in the same chunk as `finish_reason`. A call is announced
//! (`tool_call_start`) once its name is known; fragments that arrive before that are held back. Calls are
//! closed and validated when the stream finishes.

use std::collections::HashMap;

use super::super::assemble::Assembler;
use super::super::{ProviderError, StopReason, Usage};
use super::wire::{Chunk, ToolCallDelta, WireUsage};

/// A call the server has started, by its `index`.
enum Slot {
    /// Not announced yet: no name seen.
    Pending { id: Option<String>, args: String },
    /// Announced as our call number `usize`.
    Open(usize),
}

/// The state of one streamed response.
#[derive(Default)]
pub(super) struct ChunkState {
    slots: HashMap<u64, Slot>,
    /// Server indices in order of first appearance (pending calls are announced in this order).
    order: Vec<u64>,
    last_index: Option<u64>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    /// The server's timings, when it sends them (llama.cpp, agentd).
    pub timings: Option<crate::provider::Timings>,
}

impl ChunkState {
    /// Applies one parsed chunk. An error object inside the stream is returned as the error.
    pub fn apply(&mut self, chunk: Chunk, out: &mut Assembler) -> Result<(), ProviderError> {
        if let Some(err) = chunk_error(&chunk) {
            return Err(err);
        }
        if let Some(u) = &chunk.usage {
            self.usage = Some(usage(u));
        }
        if let Some(t) = chunk.timings {
            self.timings = Some(t.to_timings());
        }
        // Only the first choice (`n = 1`) is assembled.
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(entries) = choice.logprobs.and_then(|l| l.content) {
                out.logprobs(entries.into_iter().map(|e| e.into_entry()).collect());
            }
            let d = choice.delta;
            if let Some(t) = d.reasoning_content.as_deref().or(d.reasoning.as_deref()) {
                out.thinking(t);
            }
            if let Some(t) = &d.content {
                out.text(t);
            }
            for call in d.tool_calls.unwrap_or_default() {
                self.tool_call_delta(call, out);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        Ok(())
    }

    fn tool_call_delta(&mut self, delta: ToolCallDelta, out: &mut Assembler) {
        let (name, args) = match delta.function {
            Some(f) => (
                f.name.filter(|n| !n.is_empty()),
                f.arguments.unwrap_or_default(),
            ),
            None => (None, String::new()),
        };
        let index = match delta.index {
            Some(i) => i,
            // Some servers leave out `index`: a new id starts a new call, anything else continues the last.
            None => match (&delta.id, self.last_index) {
                (Some(_), _) | (None, None) => self.order.len() as u64,
                (None, Some(last)) => last,
            },
        };
        self.last_index = Some(index);
        let slot = self.slots.entry(index).or_insert_with(|| {
            self.order.push(index);
            Slot::Pending {
                id: None,
                args: String::new(),
            }
        });
        match slot {
            Slot::Pending { id, args: held } => {
                if id.is_none() {
                    *id = delta.id.filter(|s| !s.is_empty());
                }
                held.push_str(&args);
                if let Some(name) = name {
                    let ours = out.begin_call(id.take(), &name);
                    out.call_fragment(ours, held);
                    *slot = Slot::Open(ours);
                }
            }
            // A repeated id or name in later deltas (some servers send them every time) is ignored.
            Slot::Open(ours) => out.call_fragment(*ours, &args),
        }
    }

    /// Announces calls that never got a name (they fail validation as unknown tools) and closes every call. When
    /// the server stopped for the output limit (`length`), its last call is the one the limit cut: it is closed as
    /// valid JSON and marked truncated, never passed on broken.
    pub fn close_calls(&mut self, out: &mut Assembler) {
        for index in &self.order {
            if let Some(Slot::Pending { id, args }) = self.slots.get_mut(index) {
                let ours = out.begin_call(id.take(), "");
                out.call_fragment(ours, args);
                self.slots.insert(*index, Slot::Open(ours));
            }
        }
        if self.stop_reason() == Some(StopReason::Length) {
            let last = self.order.last().and_then(|i| match self.slots.get(i) {
                Some(Slot::Open(ours)) => Some(*ours),
                _ => None,
            });
            if let Some(last) = last {
                out.end_call_at_limit(last);
            }
        }
        out.end_open_calls();
    }

    /// The stop reason for the `finish_reason` received (`None`: the stream ended without one).
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.finish_reason.as_deref().map(|r| match r {
            "length" => StopReason::Length,
            "tool_calls" | "function_call" => StopReason::ToolUse,
            // `stop`, `eos`, `stop_sequence`, `end_turn`, `content_filter`, …: the model is done.
            _ => StopReason::Stop,
        })
    }
}

fn usage(u: &WireUsage) -> Usage {
    let cached = u
        .prompt_tokens_details
        .as_ref()
        .and_then(|d| d.cached_tokens)
        .unwrap_or(0);
    // Draft tokens, where the server reports them (an agentd upstream does; vLLM does not).
    let drafts = u.completion_tokens_details.as_ref();
    let accepted = drafts
        .and_then(|d| d.accepted_prediction_tokens)
        .unwrap_or(0);
    let rejected = drafts
        .and_then(|d| d.rejected_prediction_tokens)
        .unwrap_or(0);
    Usage {
        input: u.prompt_tokens,
        output: u.completion_tokens,
        cached_input: cached,
        total: u
            .total_tokens
            .unwrap_or(u.prompt_tokens + u.completion_tokens),
        draft_tokens: accepted + rejected,
        accepted_draft_tokens: accepted,
        timings: None,
    }
}

/// The error a chunk carries, if it is an error object.
fn chunk_error(chunk: &Chunk) -> Option<ProviderError> {
    let (message, code) = if let Some(e) = &chunk.error {
        (
            e.message.clone().unwrap_or_else(|| "unknown error".into()),
            e.code.clone(),
        )
    } else if chunk.object.as_deref() == Some("error") {
        (
            chunk
                .message
                .clone()
                .unwrap_or_else(|| "unknown error".into()),
            chunk.code.clone(),
        )
    } else {
        return None;
    };
    let lower = message.to_lowercase();
    let status = code.and_then(|c| c.as_u64()).unwrap_or(0);
    Some(if super::http::is_context_overflow(&lower) {
        ProviderError::ContextOverflow { message }
    } else if (400..500).contains(&status) {
        ProviderError::InvalidRequest {
            status: status as u16,
            message,
        }
    } else {
        ProviderError::Server {
            status: if status == 0 { 500 } else { status as u16 },
            attempts: 1,
            message: format!("error inside the stream: {message}"),
        }
    })
}
