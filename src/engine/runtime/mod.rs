//! The engine thread: the actor that owns the model and answers requests (`actor.rs`), its loop (`engine_loop.rs`),
//! the scheduler that decides what every step runs over the paged KV pool and keeps the books (`scheduler.rs`), the
//! typed step it hands to the runner and takes back (`schedule_output.rs`), the runner that does the forward pass and
//! the sampling (`runner.rs`), and one sequence's decode state (`sequence.rs`). Nothing else in the engine imports it.

pub(crate) mod actor;
pub(crate) mod engine_loop;
pub(crate) mod runner;
pub(crate) mod schedule_output;
pub mod scheduler;
pub(crate) mod sequence;
