//! What the assembler hands out: finished tool calls and the steps of assembled output, and call ids.

use serde::{Deserialize, Serialize};

/// A finished tool call. `arguments` is the JSON text of the arguments exactly as generated (the concatenation
/// of the call's argument fragments).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One step of assembled output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputDelta {
    /// Reply text (never part of a call).
    Content { text: String },
    /// Call number `index` (0-based, in order) has begun; its name is known.
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of call `index`'s argument JSON text.
    ToolCallArguments { index: usize, fragment: String },
    /// Call `index` is complete.
    ToolCallEnd { index: usize, call: ToolCall },
    /// Generation stopped (length, stop string, cancel) inside call `index`; it is not a usable call.
    ToolCallIncomplete {
        index: usize,
        id: String,
        text: String,
    },
}

/// A fresh `call_…` id (24 random hex digits), unique per call.
pub fn new_call_id() -> String {
    let hex = uuid::Uuid::new_v4().simple().to_string();
    format!("call_{}", &hex[..24])
}
