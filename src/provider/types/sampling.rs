//! A request's sampling settings as the provider layer holds them (each unset one leaves the provider's
//! default), merged with a server's defaults and checked against the ranges every provider accepts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Sampling settings; `None` leaves the provider's default (the server's, on a remote).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sampling {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub min_p: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub seed: Option<u64>,
    /// Token id to bias added to its logit (OpenAI's `logit_bias`, each in [-100, 100]).
    pub logit_bias: Option<BTreeMap<u32, f32>>,
}

/// `top_k` for a request that sets none (llama.cpp server's default).
pub const DEFAULT_TOP_K: usize = 40;
/// `top_p` for a request that sets none (llama.cpp server's default).
pub const DEFAULT_TOP_P: f32 = 0.95;
/// `min_p` for a request that sets none (llama.cpp server's default).
pub const DEFAULT_MIN_P: f32 = 0.05;

impl Sampling {
    /// These settings, with every one left unset taken from `defaults` (a server's
    /// `--override-generation-config`).
    pub fn or(&self, defaults: &Sampling) -> Sampling {
        Sampling {
            temperature: self.temperature.or(defaults.temperature),
            top_p: self.top_p.or(defaults.top_p),
            top_k: self.top_k.or(defaults.top_k),
            min_p: self.min_p.or(defaults.min_p),
            presence_penalty: self.presence_penalty.or(defaults.presence_penalty),
            frequency_penalty: self.frequency_penalty.or(defaults.frequency_penalty),
            repetition_penalty: self.repetition_penalty.or(defaults.repetition_penalty),
            seed: self.seed.or(defaults.seed),
            logit_bias: self
                .logit_bias
                .clone()
                .or_else(|| defaults.logit_bias.clone()),
        }
    }

    /// Greedy decoding (temperature 0).
    pub fn greedy() -> Self {
        Self {
            temperature: Some(0.0),
            ..Self::default()
        }
    }

    /// Checks every set value against the ranges the OpenAI and vLLM APIs allow (an unset one takes a valid
    /// default), so every provider refuses the same requests with the same message.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(t) = self.temperature {
            if !t.is_finite() || t < 0.0 {
                return Err(format!("temperature must be a finite number >= 0, got {t}"));
            }
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(format!("top_p must be in (0, 1], got {p}"));
            }
        }
        if let Some(p) = self.min_p {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("min_p must be in [0, 1], got {p}"));
            }
        }
        if let Some(r) = self.repetition_penalty {
            if !REPETITION_PENALTY_RANGE.contains(&r) {
                return Err(format!(
                    "repetition_penalty must be in [{}, {}] (1 disables it), got {r}",
                    REPETITION_PENALTY_RANGE.start(),
                    REPETITION_PENALTY_RANGE.end()
                ));
            }
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if let Some(v) = v.filter(|v| !(-2.0..=2.0).contains(v)) {
                return Err(format!("{name} must be in [-2, 2], got {v}"));
            }
        }
        let biases = self.logit_bias.iter().flatten();
        if let Some((id, b)) = biases
            .into_iter()
            .find(|(_, b)| !LOGIT_BIAS_RANGE.contains(b))
        {
            return Err(format!(
                "logit_bias values must be in [{}, {}], got {b} for token {id}",
                LOGIT_BIAS_RANGE.start(),
                LOGIT_BIAS_RANGE.end()
            ));
        }
        Ok(())
    }
}

/// `repetition_penalty`'s allowed values (a divisor of positive logits: it must stay positive).
pub const REPETITION_PENALTY_RANGE: std::ops::RangeInclusive<f32> = 0.01..=100.0;
/// `logit_bias`'s allowed values (OpenAI's).
pub const LOGIT_BIAS_RANGE: std::ops::RangeInclusive<f32> = -100.0..=100.0;
