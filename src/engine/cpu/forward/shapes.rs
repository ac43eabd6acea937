//! The shapes a loaded model's weights must have, checked once at load: a model file is input from whoever made
//! it, and a matrix or a norm of the wrong size would otherwise surface as an out-of-bounds read in a kernel.

use super::{Ffn, Layer};
use crate::engine::arch::DecoderConfig;
use crate::engine::cpu::qmatrix::QMatrix;
use crate::engine::error::{EngineError, Result};
use crate::engine::gguf::GgufFile;

/// Every layer's matrices, norms and biases, and the output head and its norm, against the configuration.
pub(super) fn check(
    gguf: &GgufFile,
    config: &DecoderConfig,
    layers: &[Layer],
    output: &QMatrix,
    norm: &[f32],
    vocab_size: usize,
    hidden: usize,
) -> Result<()> {
    if output.rows != vocab_size || output.cols != hidden || norm.len() != hidden {
        return Err(EngineError::InvalidGguf {
            path: gguf.path.clone(),
            message: format!(
                "the output head is [{}, {}] with a norm of {}, expected [{vocab_size}, {hidden}] and {hidden}",
                output.rows,
                output.cols,
                norm.len()
            ),
        });
    }
    let (q_out, kv_out) = (
        config.n_head * config.head_dim,
        config.n_kv_head * config.head_dim,
    );
    let ff = layers.first().map_or(0, |l| l.ffn.width());
    for (i, l) in layers.iter().enumerate() {
        let mut shapes = vec![
            (&l.q, q_out, hidden),
            (&l.k, kv_out, hidden),
            (&l.v, kv_out, hidden),
            (&l.o, hidden, q_out),
        ];
        match &l.ffn {
            Ffn::Dense { gate, up, down } => {
                shapes.extend([(gate, ff, hidden), (up, ff, hidden), (down, hidden, ff)])
            }
            Ffn::Moe(m) => {
                for e in 0..m.moe.experts {
                    shapes.extend([
                        (&m.gate[e], ff, hidden),
                        (&m.up[e], ff, hidden),
                        (&m.down[e], hidden, ff),
                    ]);
                }
            }
        }
        let mut vectors: Vec<(&[f32], usize)> = vec![(&l.attn_norm, hidden), (&l.ffn_norm, hidden)];
        if let Some([a, b]) = &l.post_norms {
            vectors.extend([(a.as_slice(), hidden), (b.as_slice(), hidden)]);
        }
        if let Some([q, k]) = &l.qk_norm {
            vectors.extend([
                (q.as_slice(), config.head_dim),
                (k.as_slice(), config.head_dim),
            ]);
        }
        if let Some([bq, bk, bv]) = &l.bias {
            vectors.extend([
                (bq.as_slice(), q_out),
                (bk.as_slice(), kv_out),
                (bv.as_slice(), kv_out),
            ]);
        }
        if let Some((v, n)) = vectors.iter().find(|(v, n)| v.len() != *n) {
            return Err(EngineError::InvalidGguf {
                path: gguf.path.clone(),
                message: format!(
                    "layer {i}: a norm or bias has {} values, expected {n}",
                    v.len()
                ),
            });
        }
        if let Some((m, r, c)) = shapes.iter().find(|(m, r, c)| m.rows != *r || m.cols != *c) {
            return Err(EngineError::InvalidGguf {
                path: gguf.path.clone(),
                message: format!(
                    "layer {i}: a weight is [{}, {}], expected [{r}, {c}]",
                    m.rows, m.cols
                ),
            });
        }
    }
    Ok(())
}
