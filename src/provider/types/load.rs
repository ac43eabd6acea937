//! What a provider's engine is doing, for `/metrics`: its batch and queues, KV prefix-cache counters and
//! speculative decoding's counts (vLLM's gauge and counter names).

use serde::{Deserialize, Serialize};

/// A provider's KV prefix-cache counters, in tokens (vLLM's `prefix_cache_queries` / `prefix_cache_hits`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrefixCacheCounts {
    /// Prompt tokens looked up.
    pub queries: u64,
    /// Prompt tokens whose KV state was reused.
    pub hits: u64,
    /// Entries evicted for the memory budget.
    pub evictions: u64,
}

/// What a batching engine is doing now (vLLM's scheduler gauges).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EngineLoad {
    /// Sequences in the running batch.
    pub running: u64,
    /// Requests queued inside the engine (waiting for a batch slot or KV blocks, or preempted).
    pub waiting: u64,
    /// The fraction of KV-cache blocks in use (0 to 1).
    pub kv_cache_usage: f64,
    /// Sequences preempted since start.
    pub preemptions: u64,
    /// Speculative decoding since start (vLLM's `spec_decode` counters).
    #[serde(default)]
    pub spec: SpecDecodeCounts,
}

/// Speculative decoding's counters (vLLM's `vllm:spec_decode_*`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecDecodeCounts {
    /// Verify steps that carried drafts, counted per sequence.
    pub drafts: u64,
    /// Draft tokens verified.
    pub draft_tokens: u64,
    /// Draft tokens accepted.
    pub accepted_tokens: u64,
    /// Draft tokens accepted at each position of a draft (0 = the first).
    pub accepted_per_pos: Vec<u64>,
}
