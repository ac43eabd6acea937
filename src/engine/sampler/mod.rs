//! Sampling: turns a step's logits into a token. Greedy, temperature, top-k, top-p, min-p, repetition /
//! presence / frequency penalties, per-token logit biases, reproducible with a seed.
//!
//! The sampler works in two steps so that grammar constraints can sit between them: [`Sampler::adjust`]
//! applies penalties and biases to the raw logits, [`Sampler::pick`] draws from (possibly masked) logits.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::engine::error::{EngineError, Result};

/// Tokens whose scaled logit is this far below the best are ignored by top-p/min-p/random draws: their
/// probability is below e^-30 of the best token's, so dropping them changes no draw measurably while it keeps
/// the sort small on 150k-token vocabularies.
const NEGLIGIBLE_LOGIT_GAP: f32 = 30.0;

/// Temperatures below this are greedy (vLLM's `_SAMPLING_EPS`): 0, and values so small (1e-30, subnormals) that
/// scaling by them could only overflow.
pub const GREEDY_BELOW: f32 = 1e-5;

/// Accepted `repetition_penalty` values. 0 or less is meaningless, and a tiny or huge factor would push logits to
/// ±∞ (a logit divided by 1e-30); real use lies within 1–2.
pub const REPETITION_PENALTY_RANGE: std::ops::RangeInclusive<f32> = 0.01..=100.0;

/// Accepted logit biases (OpenAI's range: -100 bans a token in effect, 100 all but forces it).
pub const LOGIT_BIAS_RANGE: std::ops::RangeInclusive<f32> = -100.0..=100.0;

/// Sampling settings of one request. A temperature below [`GREEDY_BELOW`] (e.g. 0) is greedy.
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
    /// Added to the named tokens' logits before anything else (OpenAI's `logit_bias`), each in
    /// [`LOGIT_BIAS_RANGE`]. Token ids are checked against the model's vocabulary when a request is admitted
    /// ([`SamplingParams::validate_tokens`]).
    pub logit_bias: Vec<(u32, f32)>,
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
            logit_bias: Vec::new(),
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

    /// Rejects out-of-range values with a message naming the parameter and its range. NaN and infinities are
    /// out of every range. What passes cannot make [`Sampler::pick`] panic or produce NaN probabilities.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(EngineError::InvalidSampling(m));
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return bad(format!(
                "temperature must be a finite number >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if !REPETITION_PENALTY_RANGE.contains(&self.repetition_penalty) {
            return bad(format!(
                "repetition_penalty must be in [{}, {}] (1 disables it), got {}",
                REPETITION_PENALTY_RANGE.start(),
                REPETITION_PENALTY_RANGE.end(),
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
        if let Some((id, b)) = self
            .logit_bias
            .iter()
            .find(|(_, b)| !LOGIT_BIAS_RANGE.contains(b))
        {
            return bad(format!(
                "logit_bias values must be in [{}, {}], got {b} for token {id}",
                LOGIT_BIAS_RANGE.start(),
                LOGIT_BIAS_RANGE.end()
            ));
        }
        Ok(())
    }

    /// Rejects a `logit_bias` naming a token the model does not have (`vocab_size` logits).
    pub fn validate_tokens(&self, vocab_size: usize) -> Result<()> {
        match self
            .logit_bias
            .iter()
            .find(|(id, _)| *id as usize >= vocab_size)
        {
            Some((id, _)) => Err(EngineError::InvalidSampling(format!(
                "logit_bias names token {id}, outside the model's vocabulary (ids 0 to {})",
                vocab_size.saturating_sub(1)
            ))),
            None => Ok(()),
        }
    }

    /// Whether draws are greedy: a temperature below [`GREEDY_BELOW`] (0, or so small that dividing by it says
    /// nothing but "take the best").
    pub fn is_greedy(&self) -> bool {
        self.temperature < GREEDY_BELOW
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

    /// Applies the logit biases, then the penalties, in place. `context` is the whole sequence so far,
    /// `generated` its generated tail.
    pub fn adjust(&self, logits: &mut [f32], context: &[u32], generated: &[u32]) {
        let p = &self.params;
        for &(id, bias) in &p.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += bias;
            }
        }
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

    /// Draws a token from `logits` (−∞ and NaN entries are never drawn; a +∞ entry is taken greedily). Returns
    /// `None` when no entry can be drawn (every one is −∞ or NaN).
    pub fn pick(&mut self, logits: &[f32]) -> Option<u32> {
        let (cand, probs) = match self.distribution(logits)? {
            Distribution::Certain(id) => return Some(id),
            Distribution::Weighted { cand, probs } => (cand, probs),
        };
        let total: f32 = probs.iter().sum();
        let mut r = self.rng.gen::<f32>() * total;
        for (&id, &x) in cand.iter().zip(&probs) {
            if r < x {
                return Some(id);
            }
            r -= x;
        }
        // Rounding left `r` past the last weight: the last candidate (any kept one is a valid draw).
        cand.last().copied()
    }

    /// The tokens a draw chooses among and their (unnormalised, finite, positive) weights, after temperature,
    /// top-k, min-p and top-p. Scores are `(logit − best) / temperature`, so they are ≤ 0 and finite for every
    /// finite logit whatever the temperature: the best token always weighs 1 and the sum never is 0 or NaN.
    fn distribution(&self, logits: &[f32]) -> Option<Distribution> {
        let best = argmax(logits)?;
        let p = &self.params;
        let top = logits[best as usize];
        if p.is_greedy() || top == f32::INFINITY {
            return Some(Distribution::Certain(best));
        }
        let t = p.temperature;
        // NaN and −∞ scores fail the comparison and are dropped; `best` scores exactly 0 and stays.
        let score = |l: f32| {
            let s = (l - top) / t;
            (s >= -NEGLIGIBLE_LOGIT_GAP).then_some(s)
        };
        let mut scored: Vec<(u32, f32)> = if p.top_k > 0 && p.top_k < logits.len() / 8 {
            // Only the k best can be kept: select them in one pass instead of collecting the vocabulary.
            best_k(logits, score, p.top_k)
        } else {
            let scored = logits.iter().enumerate();
            scored
                .filter_map(|(i, &l)| score(l).map(|s| (i as u32, s)))
                .collect()
        };
        if p.top_k == 0 && p.min_p <= 0.0 && p.top_p >= 1.0 {
            // Nothing truncates the distribution: no order is needed (the best token still weighs 1).
            let probs = scored.iter().map(|&(_, s)| s.exp()).collect();
            return Some(Distribution::Weighted {
                cand: scored.into_iter().map(|(id, _)| id).collect(),
                probs,
            });
        }
        // Best first, ties by token id: a total order, so the kept set and its order never depend on how
        // the candidates were arranged. With top-k, only the k best are selected (linear) and sorted.
        let order = |a: &(u32, f32), b: &(u32, f32)| by_rank(*a, *b);
        if p.top_k > 0 && scored.len() > p.top_k {
            scored.select_nth_unstable_by(p.top_k - 1, order);
            scored.truncate(p.top_k);
        }
        scored.sort_unstable_by(order);
        // Softmax weights, relative to the best (which weighs exactly 1).
        let weights: Vec<f32> = scored.iter().map(|&(_, s)| s.exp()).collect();
        let sum: f32 = weights.iter().sum();
        let mut keep = weights.len();
        if p.min_p > 0.0 {
            let floor = p.min_p * weights[0];
            keep = keep.min(weights.iter().take_while(|&&x| x >= floor).count().max(1));
        }
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            let mut n = 0;
            for &x in &weights[..keep] {
                acc += x / sum;
                n += 1;
                if acc >= p.top_p {
                    break;
                }
            }
            keep = n.max(1);
        }
        Some(Distribution::Weighted {
            cand: scored[..keep].iter().map(|&(id, _)| id).collect(),
            probs: weights[..keep].to_vec(),
        })
    }
}

/// Candidates best first (higher score), ties by lower token id: the total order top-k keeps by.
fn by_rank(a: (u32, f32), b: (u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// The `k` best of `logits` by [`by_rank`] of their `score(logit)` (in no particular order; `None`: dropped),
/// with a heap whose top is the worst kept. `score` must not decrease as the logit grows: then, once `k` are
/// kept, a logit not above the worst kept one's cannot rank better (its score is at most equal, and a tie goes to
/// the lower id, seen earlier), so it is skipped without being scored — one compare per token of the vocabulary.
fn best_k(logits: &[f32], score: impl Fn(f32) -> Option<f32>, k: usize) -> Vec<(u32, f32)> {
    struct Ranked((u32, f32));
    impl PartialEq for Ranked {
        fn eq(&self, o: &Self) -> bool {
            by_rank(self.0, o.0).is_eq()
        }
    }
    impl Eq for Ranked {}
    impl PartialOrd for Ranked {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Ranked {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            by_rank(self.0, o.0)
        }
    }
    let mut heap = std::collections::BinaryHeap::with_capacity(k + 1);
    // The logit of the worst kept candidate once `k` are kept (NaN never passes `l > bar`).
    let mut bar = f32::NEG_INFINITY;
    for (c, chunk) in logits.chunks(LANES).enumerate() {
        // Most of the vocabulary is below the bar once `k` are kept: one vectorized test per 16 logits.
        if !chunk.iter().fold(false, |above, &l| above | (l > bar)) {
            continue;
        }
        for (j, &l) in chunk.iter().enumerate() {
            let i = c * LANES + j;
            if l.partial_cmp(&bar) != Some(std::cmp::Ordering::Greater) {
                continue;
            }
            let Some(s) = score(l) else {
                continue;
            };
            let cand = (i as u32, s);
            if heap.len() < k {
                heap.push(Ranked(cand));
            } else if heap
                .peek()
                .is_some_and(|w: &Ranked| by_rank(cand, w.0).is_lt())
            {
                heap.pop();
                heap.push(Ranked(cand));
            } else {
                continue;
            }
            if heap.len() == k {
                bar = heap.peek().map_or(bar, |w| logits[w.0 .0 as usize]);
            }
        }
    }
    heap.into_iter().map(|r| r.0).collect()
}

/// What [`Sampler::pick`] draws from.
#[derive(Debug)]
enum Distribution {
    /// One token only (greedy, or a +∞ logit).
    Certain(u32),
    /// Candidates with positive finite weights (most likely first when the distribution was truncated).
    Weighted { cand: Vec<u32>, probs: Vec<f32> },
}

/// Index of the largest logit that is neither NaN nor −∞ (+∞ counts; the first of equal ones, −0 equal to 0).
/// Two passes a compiler vectorizes — the largest value in 16 lanes (NaN fails every `>`), then the first
/// index holding it, 16 at a time — instead of one scalar compare-and-branch per token of the vocabulary.
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let mut chunks = logits.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (m, &l) in lanes.iter_mut().zip(chunk) {
            if l > *m {
                *m = l;
            }
        }
    }
    let mut top = f32::NEG_INFINITY;
    for &l in lanes.iter().chain(chunks.remainder()) {
        if l > top {
            top = l;
        }
    }
    if top == f32::NEG_INFINITY {
        return None;
    }
    let (c, chunk) = logits
        .chunks(LANES)
        .enumerate()
        .find(|(_, chunk)| chunk.iter().fold(false, |hit, &l| hit | (l == top)))?;
    let i = chunk.iter().position(|&l| l == top)?;
    Some((c * LANES + i) as u32)
}

/// Lanes of the vectorized scans over the vocabulary.
const LANES: usize = 16;

/// `log_softmax(logits)[id]` and the `n` most likely tokens with their log-probabilities. NaN logits count as
/// −∞; when some logits are +∞ they share all the probability. Never NaN.
pub fn logprobs(logits: &[f32], id: u32, n: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits
        .iter()
        .copied()
        .filter(|l| !l.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let clean = |l: f32| -> f32 {
        if l.is_nan() {
            f32::NEG_INFINITY
        } else if max == f32::INFINITY {
            // Only the +∞ entries carry probability; give them equal finite scores.
            if l == f32::INFINITY {
                0.0
            } else {
                f32::NEG_INFINITY
            }
        } else {
            l
        }
    };
    let shift = if max == f32::INFINITY { 0.0 } else { max };
    let lse = if shift == f32::NEG_INFINITY {
        f32::NEG_INFINITY
    } else {
        shift
            + logits
                .iter()
                .map(|&l| (clean(l) - shift).exp())
                .sum::<f32>()
                .ln()
    };
    let logprob_of = |l: f32| {
        let l = clean(l);
        if l == f32::NEG_INFINITY || lse == f32::NEG_INFINITY {
            f32::NEG_INFINITY
        } else {
            l - lse
        }
    };
    let lp = logits
        .get(id as usize)
        .map_or(f32::NEG_INFINITY, |&l| logprob_of(l));
    let mut top: Vec<(u32, f32)> = Vec::new();
    if n > 0 && !logits.is_empty() {
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let k = n.min(idx.len());
        let order =
            |a: &u32, b: &u32| clean(logits[*b as usize]).total_cmp(&clean(logits[*a as usize]));
        idx.select_nth_unstable_by(k - 1, order);
        idx.truncate(k);
        idx.sort_unstable_by(order);
        top = idx
            .into_iter()
            .map(|i| (i, logprob_of(logits[i as usize])))
            .collect();
    }
    (lp, top)
}

#[cfg(test)]
mod tests;
