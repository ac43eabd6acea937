//! The arithmetic of the tool-call benchmark, free of I/O so tests can check it on known samples.
//!
//! Definitions (times in milliseconds since the request was sent; "output chunk" = a streamed chunk whose delta
//! carries text, reasoning, or a tool call's name or argument text):
//! - **time to first token** (`ttft`): the first output chunk;
//! - **time to the tool call's name** (`tool_name`): the first chunk carrying a call's function name;
//! - **time to the complete call** (`call_complete`): the chunk after which the first call's arguments parse as a
//!   JSON object (the arguments are closed), else the finish chunk, else the end of the stream;
//! - **total**: the end of the stream (`[DONE]` or the end of the body);
//! - **inter-token latency** (`itl`): the gaps between consecutive output chunks, pooled over all requests;
//! - **time per output token** (`tpot`): `(total − ttft) / (output_tokens − 1)` per request, as vLLM's benchmark
//!   defines it (a server that sends a whole call in one burst shows a tiny TPOT: read it with the ITL);
//! - **output tok/s**: `output_tokens / total` per request, the end-to-end rate (prefill included) that vLLM's
//!   benchmark reports as output throughput; `output_tokens` is the server's `usage.completion_tokens` when it
//!   sends one, else the number of output chunks;
//! - **valid share**: valid calls / (calls made + requests that had to call and made none).
//!
//! Every distribution is a [`Distribution`]: percentiles as [`super::stats`] defines them (linear interpolation
//! between closest ranks, numpy's default), so p50 of `[1, 2, 3, 4]` is 2.5.

use serde::{Deserialize, Serialize};

use super::stats::{percentile, Distribution};

/// One tool call as it was streamed, checked against the offered tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub name: String,
    /// The arguments text exactly as streamed.
    pub arguments: String,
    /// The arguments are JSON and validate against the named tool's schema (and the tool exists).
    pub valid: bool,
    /// Why not, when not valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// What one streamed request measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestSample {
    pub ttft_ms: Option<f64>,
    pub tool_name_ms: Option<f64>,
    pub call_complete_ms: Option<f64>,
    pub total_ms: f64,
    /// Arrival of every output chunk.
    pub chunk_times_ms: Vec<f64>,
    pub output_tokens: u64,
    /// `output_tokens` is the server's count (`usage`), not the number of output chunks.
    pub output_tokens_exact: bool,
    /// `usage.prompt_tokens`, when the server sent usage.
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`, when the server sent it.
    pub cached_prompt_tokens: Option<u64>,
    /// `usage.completion_tokens_details`' accepted and rejected prediction tokens (speculative decoding's
    /// drafts), when the server sent them.
    #[serde(default)]
    pub drafts: Option<(u64, u64)>,
    pub finish_reason: Option<String>,
    /// What the server says it spent, when it sends timings (llama.cpp's `timings`; agentd adds the queue).
    #[serde(default)]
    pub server: Option<ServerTimings>,
    /// Streamed text content.
    pub text: String,
    pub calls: Vec<CallRecord>,
    /// The request failed (HTTP status, connection, malformed stream, error chunk). Its timings are not used.
    pub error: Option<String>,
}

/// The server's own split of a request's time, in milliseconds (`None`: not reported).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerTimings {
    pub queue_ms: Option<f64>,
    pub prefill_ms: Option<f64>,
    pub decode_ms: Option<f64>,
}

impl RequestSample {
    /// A failed request.
    pub fn failed(total_ms: f64, error: impl Into<String>) -> Self {
        Self {
            total_ms,
            error: Some(error.into()),
            ..Self::default()
        }
    }

    /// Gaps between consecutive output chunks.
    pub fn itl_ms(&self) -> Vec<f64> {
        self.chunk_times_ms
            .windows(2)
            .map(|w| w[1] - w[0])
            .collect()
    }

    /// Time per output token after the first: `(total − ttft) / (output_tokens − 1)`.
    pub fn tpot_ms(&self) -> Option<f64> {
        let ttft = self.ttft_ms?;
        if self.output_tokens < 2 || self.total_ms <= ttft {
            return None;
        }
        Some((self.total_ms - ttft) / (self.output_tokens - 1) as f64)
    }

    /// End-to-end output rate: `output_tokens / total`.
    pub fn output_tok_s(&self) -> Option<f64> {
        (self.output_tokens > 0 && self.total_ms > 0.0)
            .then(|| self.output_tokens as f64 * 1000.0 / self.total_ms)
    }

    pub fn is_error(&self) -> bool {
        self.error.is_some()
    }
}

/// Every metric over a set of measured requests (warm-up already left out).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub requests: usize,
    /// Failed requests; none of their timings is in the distributions below.
    pub errors: usize,
    pub ttft_ms: Option<Distribution>,
    pub tool_name_ms: Option<Distribution>,
    pub call_complete_ms: Option<Distribution>,
    pub total_ms: Option<Distribution>,
    /// Pooled over every gap of every request.
    pub itl_ms: Option<Distribution>,
    pub tpot_ms: Option<Distribution>,
    pub output_tok_s: Option<Distribution>,
    pub output_tokens: Option<Distribution>,
    /// Every answered request's `output_tokens` is the server's count (else some are chunk counts).
    pub output_tokens_exact: bool,
    pub prompt_tokens: Option<Distribution>,
    /// Requests that made at least one call.
    pub requests_with_call: usize,
    pub calls: usize,
    pub valid_calls: usize,
    /// Requests that had to call (`call_expected`) and made none; they count against the valid share.
    pub missing_calls: usize,
    /// `valid_calls / (calls + missing_calls)`; `None` when that is 0.
    pub valid_share: Option<f64>,
    /// Speculative decoding, summed over the requests that reported it: draft tokens accepted and rejected.
    #[serde(default)]
    pub drafts: Option<(u64, u64)>,
    /// The server's side, where it reported timings: waiting to start, prompt processing, generation.
    #[serde(default)]
    pub server_queue_ms: Option<Distribution>,
    #[serde(default)]
    pub server_prefill_ms: Option<Distribution>,
    #[serde(default)]
    pub server_decode_ms: Option<Distribution>,
}

impl Summary {
    /// `call_expected`: every request had to make a call (a forced or named `tool_choice`).
    pub fn of(samples: &[RequestSample], call_expected: bool) -> Self {
        let ok: Vec<&RequestSample> = samples.iter().filter(|s| !s.is_error()).collect();
        let dist = |f: &dyn Fn(&RequestSample) -> Option<f64>| {
            let v: Vec<f64> = ok.iter().filter_map(|s| f(s)).collect();
            Distribution::of(&v)
        };
        let itl: Vec<f64> = ok.iter().flat_map(|s| s.itl_ms()).collect();
        let calls: usize = ok.iter().map(|s| s.calls.len()).sum();
        let valid_calls: usize = ok
            .iter()
            .map(|s| s.calls.iter().filter(|c| c.valid).count())
            .sum();
        let requests_with_call = ok.iter().filter(|s| !s.calls.is_empty()).count();
        let missing_calls = if call_expected {
            ok.len() - requests_with_call
        } else {
            0
        };
        let judged = calls + missing_calls;
        Self {
            requests: samples.len(),
            errors: samples.len() - ok.len(),
            ttft_ms: dist(&|s| s.ttft_ms),
            tool_name_ms: dist(&|s| s.tool_name_ms),
            call_complete_ms: dist(&|s| s.call_complete_ms),
            total_ms: dist(&|s| Some(s.total_ms)),
            itl_ms: Distribution::of(&itl),
            tpot_ms: dist(&|s| s.tpot_ms()),
            output_tok_s: dist(&|s| s.output_tok_s()),
            output_tokens: dist(&|s| Some(s.output_tokens as f64)),
            output_tokens_exact: ok.iter().all(|s| s.output_tokens_exact),
            prompt_tokens: dist(&|s| s.prompt_tokens.map(|t| t as f64)),
            requests_with_call,
            calls,
            valid_calls,
            missing_calls,
            valid_share: (judged > 0).then(|| valid_calls as f64 / judged as f64),
            drafts: ok
                .iter()
                .filter_map(|s| s.drafts)
                .reduce(|a, b| (a.0 + b.0, a.1 + b.1)),
            server_queue_ms: dist(&|s| s.server.and_then(|t| t.queue_ms)),
            server_prefill_ms: dist(&|s| s.server.and_then(|t| t.prefill_ms)),
            server_decode_ms: dist(&|s| s.server.and_then(|t| t.decode_ms)),
        }
    }
}

/// One of the two endpoints of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    A,
    B,
}

/// The order a comparison of `pairs` pairs runs in: A B A B … (each pair is one unit on A, then the same unit on
/// B), so slow drifts of a noisy machine hit both sides alike.
pub fn ab_schedule(pairs: usize) -> Vec<Side> {
    (0..pairs).flat_map(|_| [Side::A, Side::B]).collect()
}

/// Pair-by-pair ratios `a[i] / b[i]` and their median.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedRatios {
    /// One per pair where both values exist, are finite, and `b > 0`; `None` for the others.
    pub ratios: Vec<Option<f64>>,
    pub median: Option<f64>,
}

/// `a[i] / b[i]` for every pair `i` (up to the shorter side).
pub fn pair_ratios(a: &[Option<f64>], b: &[Option<f64>]) -> PairedRatios {
    let ratios: Vec<Option<f64>> = a
        .iter()
        .zip(b)
        .map(|(x, y)| match (x, y) {
            (Some(x), Some(y)) if x.is_finite() && y.is_finite() && *y > 0.0 => Some(x / y),
            _ => None,
        })
        .collect();
    let mut present: Vec<f64> = ratios.iter().flatten().copied().collect();
    present.sort_by(f64::total_cmp);
    PairedRatios {
        median: percentile(&present, 50.0),
        ratios,
    }
}
