//! Issue 6: session trees (JSONL v3), durability, the exact context budget and compaction, grounding, the
//! response cache and structured logs.

#[cfg(feature = "local")]
mod budget;
#[cfg(feature = "local")]
mod cache;
mod compaction;
mod durability;
mod export;
mod logging;
mod store;

use std::path::{Path, PathBuf};

use agentd::agent::{convert_to_llm, AgentMessage};
use agentd::provider::Message;

/// `tests/fixtures/sessions/NAME`.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sessions")
        .join(name)
}

/// Copies a fixture into `dir` (stores append to the files they open).
pub fn copy_fixture(name: &str, dir: &Path) -> PathBuf {
    let to = dir.join(name);
    std::fs::copy(fixture(name), &to).unwrap();
    to
}

/// What a model would see of `messages` (timestamps aside).
pub fn llm_view(messages: &[AgentMessage]) -> Vec<Message> {
    convert_to_llm(messages)
}
