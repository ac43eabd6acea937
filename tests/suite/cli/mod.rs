//! The command line: the real `agentd` binary's `run`, `chat`, model flags and `bench` commands.

mod bench_agent;
mod bench_tool_calls;
mod chat;
#[cfg(feature = "local")]
mod flags;
pub mod run;
