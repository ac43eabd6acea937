//! All measurement code: what `agentd bench engine | constraint | schemas | load | tool-calls | bfcl` and the tests
//! measure, and the arithmetic over it. The CLI (`src/cli/bench/`) only parses flags and prints what these
//! return; `benches/` holds the `cargo bench` micro-benchmarks of single kernels.
//!
//! - [`stats`]: the one percentile definition (linear interpolation, numpy's default), [`Distribution`] and
//!   [`Spread`], process memory readings.
//! - [`engine`]: prefill / decode tok/s of the local engine (`bench engine`; this and the next two need the
//!   `local` feature).
//! - [`constraint`]: grammar-constraint overhead per token and on decode speed (`bench constraint`).
//! - [`schema_suite`]: the JSON Schema validity suite (`bench schemas` and `tests/suite/engine/schemas.rs`).
//! - [`loadgen`]: the loopback load generator (`bench load` and the server load test).
//! - [`openai_client`]: a streaming Chat Completions client that times every chunk as it arrives; [`metrics`]:
//!   the per-request arithmetic over those timings (TTFT, ITL, TPOT, valid share, A/B pairing);
//!   [`tool_calls`]: the workloads and runs of `bench tool-calls`.
//! - [`agent_suite`]: the coding-task suite under agentd's and Pi's harnesses (`bench agent`).
//! - [`bfcl`]: BFCL's functions and questions, asked of an endpoint and judged (`bench bfcl`).
//! - [`fim`]: completion as you type against `/infill` servers and held-out FIM quality (`bench fim`).
//!
//! Nothing here asserts a speed: the CLI prints what it measures, the tests check the arithmetic.

pub mod agent_suite;
pub mod bfcl;
#[cfg(feature = "local")]
pub mod constraint;
#[cfg(feature = "local")]
pub mod engine;
pub mod fim;
pub mod loadgen;
pub mod metrics;
pub mod openai_client;
#[cfg(feature = "local")]
pub mod schema_suite;
pub mod stats;
pub mod tool_calls;

pub use metrics::{
    ab_schedule, pair_ratios, CallRecord, PairedRatios, RequestSample, ServerTimings, Side, Summary,
};
pub use openai_client::{request_body, ChatClient};
pub use stats::{percentile, Distribution, Spread};

#[cfg(feature = "local")]
use crate::engine::EngineError;

/// Why a bench could not do what it was asked (a streamed request never fails: its problems are recorded in
/// [`RequestSample::error`]).
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
    /// The local engine failed (or refused a bench's tool spec or prompt); the engine error says what to do.
    #[cfg(feature = "local")]
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A bench tool or schema was refused (a bug in the bench's own definitions).
    #[error("bench schema: {0}")]
    Schema(#[from] crate::schema::SchemaError),
    /// The local engine failed during the named step (a repetition, a scenario); the source says why.
    #[cfg(feature = "local")]
    #[error("{at}")]
    EngineAt {
        at: String,
        #[source]
        source: EngineError,
    },
    /// The bench's own workload could not be prepared (a fixture project, a scripted call): a full disk or a
    /// bug in the bench; the message says which file or step.
    #[error("{0}")]
    Workload(String),
    /// A data set file (BFCL's) is missing, unreadable or not JSON lines; the message names the file.
    #[error("{path}: {message}")]
    Dataset { path: String, message: String },
    /// Nothing was measured (no repetition gave a finite value). Check the flags (`--reps`).
    #[error("no measurements")]
    NoMeasurements,
}

#[cfg(feature = "local")]
impl BenchError {
    /// `EngineAt` for `e` at step `at`.
    pub fn engine_at(at: impl Into<String>, source: EngineError) -> Self {
        Self::EngineAt {
            at: at.into(),
            source,
        }
    }
}
