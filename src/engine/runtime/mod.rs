//! The engine thread: the actor that owns the model and answers requests (`actor.rs`), the scheduler that
//! batches every running sequence into one forward pass over the paged KV store (`scheduler.rs`), and one
//! sequence's decode state (`sequence.rs`). Nothing else in the engine imports it.

pub(crate) mod actor;
pub mod scheduler;
pub(crate) mod sequence;
