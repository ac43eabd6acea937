//! A completion's server-side timings in the shape llama.cpp's server returns them with every response
//! (`timings`: prompt and predicted token counts, milliseconds, per-token milliseconds, tokens per second, and
//! the prompt tokens served from the cache), for the OpenAI doors. Ollama's door writes its own durations from
//! the same [`Timings`].

use serde::Serialize;

use crate::provider::{Timings, Usage};

/// llama.cpp's `timings` object.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, utoipa::ToSchema)]
pub struct LlamaTimings {
    /// Prompt tokens whose KV state came from the cache (not computed).
    pub cache_n: u64,
    /// Prompt tokens computed.
    pub prompt_n: u64,
    pub prompt_ms: f64,
    pub prompt_per_token_ms: f64,
    pub prompt_per_second: f64,
    /// Tokens generated.
    pub predicted_n: u64,
    pub predicted_ms: f64,
    pub predicted_per_token_ms: f64,
    pub predicted_per_second: f64,
    /// agentd's additions: milliseconds the request waited for the engine to start it, and for its model to
    /// load (0 when it was loaded), so a client can split the whole into queue, load, prefill and decode.
    pub queue_ms: f64,
    pub load_ms: f64,
}

/// `(per token ms, per second)` of `n` tokens in `ms`.
fn rates(n: u64, ms: f64) -> (f64, f64) {
    if n == 0 || ms <= 0.0 {
        return (0.0, 0.0);
    }
    (ms / n as f64, n as f64 * 1000.0 / ms)
}

impl LlamaTimings {
    /// The timings of a completion whose usage was `usage` (`None` when the provider measured nothing).
    pub fn of(usage: &Usage) -> Option<Self> {
        let t = usage.timings.as_ref()?;
        Some(Self::new(usage.input, usage.cached_input, usage.output, t))
    }

    /// A completion of `input` prompt tokens (`cached` of them from the cache) and `output` generated ones.
    pub fn new(input: u64, cached: u64, output: u64, t: &Timings) -> Self {
        let prompt_n = input.saturating_sub(cached);
        let prompt_ms = t.prefill_ns as f64 / 1e6;
        let predicted_ms = t.decode_ns as f64 / 1e6;
        let (prompt_per_token_ms, prompt_per_second) = rates(prompt_n, prompt_ms);
        let (predicted_per_token_ms, predicted_per_second) = rates(output, predicted_ms);
        Self {
            cache_n: cached,
            prompt_n,
            prompt_ms,
            prompt_per_token_ms,
            prompt_per_second,
            predicted_n: output,
            predicted_ms,
            predicted_per_token_ms,
            predicted_per_second,
            queue_ms: t.queue_ns as f64 / 1e6,
            load_ms: t.load_ns as f64 / 1e6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_rates_follow_llama_cpp() {
        let mut usage = Usage::new(120, 10, 20);
        assert_eq!(LlamaTimings::of(&usage), None);
        usage.timings = Some(Timings {
            load_ns: 0,
            queue_ns: 5_000_000,
            prefill_ns: 200_000_000,
            decode_ns: 500_000_000,
        });
        let t = LlamaTimings::of(&usage).unwrap();
        assert_eq!((t.cache_n, t.prompt_n, t.predicted_n), (20, 100, 10));
        assert_eq!((t.prompt_ms, t.predicted_ms), (200.0, 500.0));
        assert_eq!((t.prompt_per_token_ms, t.prompt_per_second), (2.0, 500.0));
        assert_eq!(
            (t.predicted_per_token_ms, t.predicted_per_second),
            (50.0, 20.0)
        );
        assert_eq!((t.queue_ms, t.load_ms), (5.0, 0.0));
    }
}
