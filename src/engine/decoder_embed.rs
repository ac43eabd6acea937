//! Embeddings from a decoder (a chat model served with `--pooling`, llama.cpp's flag): every input runs through
//! the same paged forward pass as generation, on a KV store of its own that is dropped afterwards, and the final
//! norm's hidden states (not the logits) are pooled — the mean of every token, the first token or the last —
//! then L2-normalised, as llama.cpp's server does by default. Attention stays causal, as the model was trained.
//! Short inputs share forward passes; a long one goes in chunks, as a prompt does.

use crate::engine::backend::Model;
use crate::engine::encoder::Pooling;
use crate::engine::error::{EngineError, Result};
use crate::engine::kv::{BatchSeq, KvDtype, StandaloneSeq, StepOutput};

/// Tokens fed in one forward pass (bounds the attention scratch and the hidden rows kept per pass).
const PASS_TOKENS: usize = 512;
/// Tokens whose keys and values one group of inputs keeps at once; a longer input is a group of its own.
const GROUP_TOKENS: usize = 4096;

/// One piece of an input fed in a pass: which input, where it starts, where it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    input: usize,
    start: usize,
    end: usize,
}

/// Splits inputs into passes of at most [`PASS_TOKENS`] tokens, in order; an input longer than a pass goes in
/// chunks in successive passes, and no pass holds two pieces of one input.
fn plan_passes(lengths: &[usize]) -> Vec<Vec<Piece>> {
    let mut passes: Vec<Vec<Piece>> = Vec::new();
    let mut current: Vec<Piece> = Vec::new();
    let mut used = 0;
    for (input, &len) in lengths.iter().enumerate() {
        let mut start = 0;
        while start < len {
            let end = (start + PASS_TOKENS).min(len);
            let n = end - start;
            let again = current.iter().any(|p| p.input == input);
            if !current.is_empty() && (used + n > PASS_TOKENS || again) {
                passes.push(std::mem::take(&mut current));
                used = 0;
            }
            current.push(Piece { input, start, end });
            used += n;
            start = end;
        }
    }
    if !current.is_empty() {
        passes.push(current);
    }
    passes
}

/// Groups consecutive inputs so that each group's tokens fit [`GROUP_TOKENS`] (a longer input alone).
fn plan_groups(lengths: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (i, &len) in lengths.iter().enumerate() {
        if i > start && used + len > GROUP_TOKENS {
            groups.push(start..i);
            start = i;
            used = 0;
        }
        used += len;
    }
    if start < lengths.len() {
        groups.push(start..lengths.len());
    }
    groups
}

/// Pools the hidden rows (`[tokens × width]`, row-major) of one input.
fn pool_rows(rows: &[f32], width: usize, pooling: Pooling) -> Vec<f32> {
    let n = rows.len() / width.max(1);
    let row = |i: usize| &rows[i * width..(i + 1) * width];
    match pooling {
        Pooling::Cls => row(0).to_vec(),
        Pooling::Last => row(n - 1).to_vec(),
        Pooling::Mean => {
            let mut sum = vec![0f64; width];
            for i in 0..n {
                sum.iter_mut()
                    .zip(row(i))
                    .for_each(|(s, &v)| *s += v as f64);
            }
            sum.iter().map(|&s| (s / n as f64) as f32).collect()
        }
        Pooling::Max => {
            let mut max = row(0).to_vec();
            for i in 1..n {
                max.iter_mut().zip(row(i)).for_each(|(m, &v)| *m = m.max(v));
            }
            max
        }
    }
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt();
    if norm > 1e-12 {
        v.iter_mut().for_each(|x| *x = (*x as f64 / norm) as f32);
    }
}

impl Model {
    /// One pooled, normalised vector per input (each non-empty, within the window and the vocabulary).
    pub fn embed(&self, inputs: &[Vec<u32>], pooling: Pooling) -> Result<Vec<Vec<f32>>> {
        let width = self.config.hidden;
        let mut out = Vec::with_capacity(inputs.len());
        let lengths: Vec<usize> = inputs.iter().map(Vec::len).collect();
        if let Some(i) = lengths.iter().position(|&n| n == 0) {
            return Err(EngineError::Internal(format!(
                "embedding input {i} has no tokens"
            )));
        }
        if let Some(&n) = lengths.iter().find(|&&n| n > self.config.context_length) {
            return Err(EngineError::PromptTooLong {
                tokens: n,
                limit: self.config.context_length,
            });
        }
        for group in plan_groups(&lengths) {
            let inputs = &inputs[group.clone()];
            let lengths = &lengths[group];
            // Each input's blocks, one after another in one store of their own.
            let mut tables = Vec::with_capacity(inputs.len());
            let mut next = 0u32;
            for &len in lengths {
                let n = StandaloneSeq::blocks_for(len) as u32;
                tables.push((next..next + n).collect::<Vec<u32>>());
                next += n;
            }
            let mut store = self.new_paged_store(next as usize, KvDtype::Auto)?;
            let mut hidden: Vec<Vec<f32>> = lengths
                .iter()
                .map(|&len| Vec::with_capacity(len * width))
                .collect();
            for pass in plan_passes(lengths) {
                let batch: Vec<BatchSeq<'_>> = pass
                    .iter()
                    .map(|p| BatchSeq {
                        tokens: &inputs[p.input][p.start..p.end],
                        blocks: &tables[p.input],
                        pos: p.start,
                        logits: p.end - p.start,
                    })
                    .collect();
                let rows = self.forward_batch_as(&mut store, &batch, StepOutput::Hidden)?;
                for (p, rows) in pass.iter().zip(rows) {
                    hidden[p.input].extend_from_slice(&rows);
                }
            }
            for rows in hidden {
                if rows.len() < width {
                    return Err(EngineError::Internal(
                        "the forward pass returned no hidden rows".into(),
                    ));
                }
                let mut v = pool_rows(&rows, width, pooling);
                normalize(&mut v);
                out.push(v);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_keep_each_input_in_order_and_within_the_limit() {
        let lengths = [3, 600, 10, 512, 1, 1];
        let passes = plan_passes(&lengths);
        for pass in &passes {
            let used: usize = pass.iter().map(|p| p.end - p.start).sum();
            assert!(used <= PASS_TOKENS, "{pass:?}");
            let mut inputs: Vec<usize> = pass.iter().map(|p| p.input).collect();
            inputs.dedup();
            assert_eq!(
                inputs.len(),
                pass.len(),
                "two pieces of one input: {pass:?}"
            );
        }
        // Every input's pieces cover it, in order, once.
        for (i, &len) in lengths.iter().enumerate() {
            let pieces: Vec<Piece> = passes
                .iter()
                .flatten()
                .filter(|p| p.input == i)
                .copied()
                .collect();
            let mut at = 0;
            for p in pieces {
                assert_eq!(p.start, at);
                at = p.end;
            }
            assert_eq!(at, len);
        }
        assert_eq!(plan_passes(&[1, 1, 1]).len(), 1);
    }

    #[test]
    fn groups_bound_the_tokens_kept_at_once() {
        assert_eq!(plan_groups(&[10, 20]), vec![0..2]);
        assert_eq!(
            plan_groups(&[4000, 200, 5000, 1]),
            vec![0..1, 1..2, 2..3, 3..4]
        );
        assert_eq!(plan_groups(&[2000, 2000, 100]), vec![0..2, 2..3]);
    }

    #[test]
    fn pooling_picks_the_rows_it_names() {
        let rows = [1f32, 2., 3., 4., 5., 0.];
        assert_eq!(pool_rows(&rows, 2, Pooling::Mean), [3., 2.]);
        assert_eq!(pool_rows(&rows, 2, Pooling::Cls), [1., 2.]);
        assert_eq!(pool_rows(&rows, 2, Pooling::Last), [5., 0.]);
        assert_eq!(pool_rows(&rows, 2, Pooling::Max), [5., 4.]);
        let mut v = vec![3f32, 4.];
        normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = vec![0f32; 3];
        normalize(&mut z);
        assert_eq!(z, [0., 0., 0.]);
    }
}
