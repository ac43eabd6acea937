//! Benchmark building blocks that `agentd bench` and the integration tests share: a streaming OpenAI Chat
//! Completions client that times every chunk as it arrives ([`openai_client`]), and the pure arithmetic over
//! those timings ([`metrics`]): per-metric summaries, the share of valid tool calls, A/B pairing; the one
//! percentile definition every bench uses ([`stats`]);
//! the loopback load generator of `agentd bench load` ([`loadgen`]); the JSON Schema validity suite of
//! `agentd bench schemas` ([`schema_suite`]).
//!
//! Nothing here asserts a speed: the CLI prints what it measures, the tests check the arithmetic.

pub mod loadgen;
pub mod metrics;
pub mod openai_client;
pub mod schema_suite;
pub mod stats;

pub use metrics::{
    ab_schedule, pair_ratios, CallRecord, PairedRatios, RequestSample, Side, Summary,
};
pub use openai_client::{request_body, ChatClient};
pub use stats::{percentile, Distribution, Spread};

/// Why the bench client could not do what it was asked (a streamed request never fails: its problems are
/// recorded in [`RequestSample::error`]).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The HTTP client could not be built, or the URL is not a URL. Fix the flag.
    #[error("bench client configuration: {0}")]
    Config(String),
    /// The server could not be reached. Check the URL and that the server runs.
    #[error("cannot reach {url}: {message}")]
    Connect { url: String, message: String },
    /// The server answered with an error status.
    #[error("{url} answered HTTP {status}: {message}")]
    Http {
        url: String,
        status: u16,
        message: String,
    },
    /// The server's answer is not what the OpenAI API sends.
    #[error("malformed response from {url}: {message}")]
    Protocol { url: String, message: String },
}
