//! Sampling: turns a step's logits into a token. Greedy, temperature, top-k, top-p, min-p, repetition /
//! presence / frequency penalties, reproducible with a seed.
//!
//! The sampler works in two steps so that grammar constraints can sit between them: [`Sampler::adjust`]
//! applies penalties to the raw logits, [`Sampler::pick`] draws from (possibly masked) logits.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::error::{EngineError, Result};

/// Tokens whose scaled logit is this far below the best are ignored by top-p/min-p/random draws: their
/// probability is below e^-30 of the best token's, so dropping them changes no draw measurably while it keeps
/// the sort small on 150k-token vocabularies.
const NEGLIGIBLE_LOGIT_GAP: f32 = 30.0;

/// Sampling settings of one request. `temperature == 0` is greedy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplingParams {
    pub temperature: f32,
    /// 0 disables.
    pub top_k: usize,
    /// In (0, 1]; 1 disables.
    pub top_p: f32,
    /// In [0, 1]; 0 disables.
    pub min_p: f32,
    /// llama.cpp-style multiplicative penalty over the last `repeat_last_n` tokens; 1 disables.
    pub repetition_penalty: f32,
    pub repeat_last_n: usize,
    /// OpenAI-style additive penalties over the generated tokens, in [-2, 2].
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// Seed for reproducible draws; `None` draws from entropy.
    pub seed: Option<u64>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.7,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: None,
        }
    }
}

impl SamplingParams {
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Rejects out-of-range values with a message naming the parameter and its range.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(EngineError::InvalidSampling(m));
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if !self.repetition_penalty.is_finite() || self.repetition_penalty <= 0.0 {
            return bad(format!(
                "repetition_penalty must be > 0, got {}",
                self.repetition_penalty
            ));
        }
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(format!("{name} must be in [-2, 2], got {v}"));
            }
        }
        Ok(())
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

/// A sampler for one sequence (it owns the random state).
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        let rng = match params.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_entropy(),
        };
        Ok(Self { params, rng })
    }

    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Applies the penalties in place. `context` is the whole sequence so far, `generated` its generated tail.
    pub fn adjust(&self, logits: &mut [f32], context: &[u32], generated: &[u32]) {
        let p = &self.params;
        if p.repetition_penalty != 1.0 && p.repeat_last_n > 0 {
            let start = context.len().saturating_sub(p.repeat_last_n);
            let mut seen: Vec<u32> = context[start..].to_vec();
            seen.sort_unstable();
            seen.dedup();
            for id in seen {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l = if *l > 0.0 {
                        *l / p.repetition_penalty
                    } else {
                        *l * p.repetition_penalty
                    };
                }
            }
        }
        if p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 {
            let mut counts: HashMap<u32, usize> = HashMap::new();
            for &id in generated {
                *counts.entry(id).or_default() += 1;
            }
            for (id, n) in counts {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l -= p.presence_penalty + p.frequency_penalty * n as f32;
                }
            }
        }
    }

    /// Draws a token from `logits` (−∞ entries are never drawn). Returns `None` when every entry is −∞.
    pub fn pick(&mut self, logits: &[f32]) -> Option<u32> {
        let best = argmax(logits)?;
        let p = &self.params;
        if p.is_greedy() {
            return Some(best);
        }
        let t = p.temperature;
        let max = logits[best as usize] / t;
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter_map(|(i, &l)| {
                let s = l / t;
                (s.is_finite() && s >= max - NEGLIGIBLE_LOGIT_GAP).then_some((i as u32, s))
            })
            .collect();
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        if p.top_k > 0 && cand.len() > p.top_k {
            cand.truncate(p.top_k);
        }
        // Softmax over the candidates.
        let mut probs: Vec<f32> = cand.iter().map(|&(_, s)| (s - max).exp()).collect();
        let sum: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= sum);
        let mut keep = probs.len();
        if p.min_p > 0.0 {
            let floor = p.min_p * probs[0];
            keep = keep.min(probs.iter().take_while(|&&x| x >= floor).count().max(1));
        }
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            let mut n = 0;
            for &x in &probs[..keep] {
                acc += x;
                n += 1;
                if acc >= p.top_p {
                    break;
                }
            }
            keep = n.max(1);
        }
        let total: f32 = probs[..keep].iter().sum();
        let mut r = self.rng.gen::<f32>() * total;
        for (i, &x) in probs[..keep].iter().enumerate() {
            if r < x {
                return Some(cand[i].0);
            }
            r -= x;
        }
        Some(cand[keep - 1].0)
    }
}

/// Index of the largest finite logit.
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_nan() || l == f32::NEG_INFINITY {
            continue;
        }
        if best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map(|(i, _)| i as u32)
}

/// `log_softmax(logits)[id]` and the `n` most likely tokens with their log-probabilities.
pub fn logprobs(logits: &[f32], id: u32, n: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = max + logits.iter().map(|&l| (l - max).exp()).sum::<f32>().ln();
    let lp = logits
        .get(id as usize)
        .map_or(f32::NEG_INFINITY, |&l| l - lse);
    let mut top: Vec<(u32, f32)> = Vec::new();
    if n > 0 {
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let k = n.min(idx.len());
        idx.select_nth_unstable_by(k - 1, |&a, &b| {
            logits[b as usize].total_cmp(&logits[a as usize])
        });
        idx.truncate(k);
        idx.sort_unstable_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        top = idx
            .into_iter()
            .map(|i| (i, logits[i as usize] - lse))
            .collect();
    }
    (lp, top)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_argmax_and_skips_masked() {
        let mut s = Sampler::new(SamplingParams::greedy()).unwrap();
        assert_eq!(s.pick(&[0.1, 3.0, 2.0]), Some(1));
        assert_eq!(s.pick(&[0.1, f32::NEG_INFINITY, 2.0]), Some(2));
        assert_eq!(s.pick(&[f32::NEG_INFINITY; 3]), None);
    }

    #[test]
    fn seeded_sampling_is_reproducible() {
        let params = SamplingParams {
            temperature: 1.0,
            seed: Some(7),
            ..SamplingParams::default()
        };
        let logits: Vec<f32> = (0..100).map(|i| (i % 7) as f32 * 0.3).collect();
        let draw = |p: &SamplingParams| {
            let mut s = Sampler::new(p.clone()).unwrap();
            (0..20)
                .map(|_| s.pick(&logits).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(&params), draw(&params));
        let other = SamplingParams {
            seed: Some(8),
            ..params.clone()
        };
        assert_ne!(draw(&params), draw(&other));
    }

    #[test]
    fn top_k_one_and_tiny_top_p_are_greedy() {
        let logits = [1.0, 5.0, 4.9, 0.0];
        for params in [
            SamplingParams {
                temperature: 1.0,
                top_k: 1,
                seed: Some(1),
                ..SamplingParams::default()
            },
            SamplingParams {
                temperature: 1.0,
                top_p: 0.01,
                seed: Some(1),
                ..SamplingParams::default()
            },
            SamplingParams {
                temperature: 1.0,
                min_p: 0.99,
                seed: Some(1),
                ..SamplingParams::default()
            },
        ] {
            let mut s = Sampler::new(params).unwrap();
            for _ in 0..50 {
                assert_eq!(s.pick(&logits), Some(1));
            }
        }
    }

    #[test]
    fn penalties_lower_seen_tokens() {
        let s = Sampler::new(SamplingParams {
            repetition_penalty: 2.0,
            presence_penalty: 1.0,
            frequency_penalty: 0.5,
            ..SamplingParams::greedy()
        })
        .unwrap();
        let mut logits = vec![4.0, -1.0, 4.0];
        s.adjust(&mut logits, &[0, 1, 0], &[0, 0]);
        // token 0: 4/2 = 2, then -1 - 0.5*2 = 0; token 1: -1*2 = -2 (not generated); token 2 untouched.
        assert_eq!(logits, vec![0.0, -2.0, 4.0]);
    }

    #[test]
    fn invalid_values_are_rejected_with_names() {
        for (p, needle) in [
            (
                SamplingParams {
                    temperature: -0.1,
                    ..SamplingParams::default()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    top_p: 0.0,
                    ..SamplingParams::default()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    top_p: 1.5,
                    ..SamplingParams::default()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    presence_penalty: 3.0,
                    ..SamplingParams::default()
                },
                "presence_penalty",
            ),
        ] {
            let err = Sampler::new(p).err().unwrap().to_string();
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn logprobs_are_normalised() {
        let (lp, top) = logprobs(&[0.0, 0.0], 0, 2);
        assert!((lp - 0.5f32.ln()).abs() < 1e-6);
        assert_eq!(top.len(), 2);
    }
}
