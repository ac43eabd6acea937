//! Generated text → content + tool calls: where a call starts in free text (`trigger.rs`), parsing a call in
//! the model's format (`call_parser.rs`) and the streaming assembler that splits a request's output into text
//! and calls (`assembler.rs`).

pub mod assembler;
pub(crate) mod call_parser;
pub(crate) mod delta;
pub(crate) mod trigger;

pub use assembler::OutputAssembler;
pub use delta::{OutputDelta, ToolCall};
