//! candle's own ops over the paged KV store (`engine::kv`), for the devices and modes our fused kernels do not
//! cover: Metal, `--weights native` on the CPU, and `AGENTD_CANDLE_OPS=candle`. A step's keys and values are
//! scattered into their block slots in place (`scatter_set`), and each sequence attends over its own blocks,
//! gathered in table order (`index_select`), with a causal (and sliding-window) mask. The fused path
//! (`fused::paged`) does the same in one kernel; this one needs nothing but candle, so every backend shares one
//! KV store and one scheduler.

use candle_core::{Device, Tensor};

use crate::engine::error::{EngineError, Result};
use crate::engine::kv::BLOCK_TOKENS;

/// One sequence of a step: its block table, the position of its first new token, how many new tokens.
#[derive(Debug, Clone, Copy)]
pub struct SeqSlice<'a> {
    pub blocks: &'a [u32],
    pub pos: usize,
    pub len: usize,
}

/// A step's layout for candle's ops, built once on the host and read by every layer.
pub struct PagedLayout {
    /// The row of the flattened store (`[2 · n_blocks · n_kv · BLOCK_TOKENS, head_dim]`) that each row of the
    /// step's keys and values (`[2, t, n_kv]` order) goes to, repeated across `head_dim` for `scatter_set`.
    slots: Tensor,
    seqs: Vec<SeqAt>,
    n_blocks: usize,
    n_kv: usize,
    head_dim: usize,
    t: usize,
}

struct SeqAt {
    /// First row of the sequence in the step.
    start: usize,
    len: usize,
    /// Positions the sequence attends over once this step's tokens are in (`pos + len`).
    kv_len: usize,
    /// The blocks covering `kv_len` positions, in order (u32).
    blocks: Tensor,
    /// Additive causal masks `[len, kv_len]`: over every earlier position, and within the sliding window.
    mask: Option<Tensor>,
    window_mask: Option<Tensor>,
}

impl PagedLayout {
    /// Checks that every token's position lies in a block of its table and every block in the store.
    pub fn new(
        seqs: &[SeqSlice<'_>],
        n_blocks: usize,
        n_kv: usize,
        head_dim: usize,
        window: Option<usize>,
        device: &Device,
    ) -> Result<Self> {
        let t: usize = seqs.iter().map(|s| s.len).sum();
        let mut at = Vec::with_capacity(seqs.len());
        let mut start = 0;
        for (i, s) in seqs.iter().enumerate() {
            let kv_len = s.pos + s.len;
            let used = kv_len.div_ceil(BLOCK_TOKENS);
            if used > s.blocks.len() || s.blocks.iter().any(|&b| b as usize >= n_blocks) {
                return Err(EngineError::Internal(format!(
                    "sequence {i}'s block table does not cover {kv_len} positions of the KV store"
                )));
            }
            let masked = s.len > 1;
            let mask = match masked {
                true => Some(causal_mask(s.len, s.pos, None, device)?),
                false => None,
            };
            let window_mask = match window {
                Some(w) if kv_len > w => Some(causal_mask(s.len, s.pos, Some(w), device)?),
                _ => mask.clone(),
            };
            at.push(SeqAt {
                start,
                len: s.len,
                kv_len,
                blocks: Tensor::new(&s.blocks[..used], device)?,
                mask,
                window_mask,
            });
            start += s.len;
        }
        let mut slots = Vec::with_capacity(2 * t * n_kv * head_dim);
        for which in 0..2 {
            for s in seqs {
                for p in s.pos..s.pos + s.len {
                    let block = s.blocks[p / BLOCK_TOKENS] as usize;
                    for h in 0..n_kv {
                        let row = ((which * n_blocks + block) * n_kv + h) * BLOCK_TOKENS
                            + p % BLOCK_TOKENS;
                        slots.extend(std::iter::repeat_n(row as u32, head_dim));
                    }
                }
            }
        }
        Ok(Self {
            slots: Tensor::from_vec(slots, (2 * t * n_kv, head_dim), device)?,
            seqs: at,
            n_blocks,
            n_kv,
            head_dim,
            t,
        })
    }

    fn check(&self, cache: &Tensor) -> Result<()> {
        let want = [2, self.n_blocks, self.n_kv, BLOCK_TOKENS, self.head_dim];
        if cache.dims() != want {
            return Err(EngineError::Internal(format!(
                "a paged KV layer of {:?} for a step laid out over {want:?}",
                cache.dims()
            )));
        }
        Ok(())
    }

    /// Writes `k`, `v` (`[1, t, n_kv, head_dim]`, the step's tokens end to end) into their slots of `cache`
    /// (`[2, n_blocks, n_kv, BLOCK_TOKENS, head_dim]`), in place.
    pub fn write(&self, cache: &Tensor, k: &Tensor, v: &Tensor) -> Result<()> {
        self.check(cache)?;
        let rows = 2 * self.t * self.n_kv;
        let src = Tensor::stack(&[k.squeeze(0)?, v.squeeze(0)?], 0)?
            .reshape((rows, self.head_dim))?
            .contiguous()?;
        let flat = cache.reshape((2 * self.n_blocks * self.n_kv * BLOCK_TOKENS, self.head_dim))?;
        flat.scatter_set(&self.slots, &src, 0)?;
        Ok(())
    }

    /// Attention of `q: [1, n_head, t, head_dim]` (rotated; the step's tokens end to end) over `cache`, each
    /// token over its own sequence's keys up to its position (within the window on `windowed` layers).
    /// Returns `[1, t, n_head · head_dim]`.
    pub fn attention(
        &self,
        q: &Tensor,
        cache: &Tensor,
        windowed: bool,
        scale: f64,
    ) -> Result<Tensor> {
        self.check(cache)?;
        let (_, n_head, t, d) = q.dims4()?;
        if t != self.t || d != self.head_dim || !n_head.is_multiple_of(self.n_kv) {
            return Err(EngineError::Internal(format!(
                "paged attention of q {:?} over {:?} for {} tokens",
                q.dims(),
                cache.dims(),
                self.t
            )));
        }
        let n_rep = n_head / self.n_kv;
        let mut out = Vec::with_capacity(self.seqs.len());
        for s in &self.seqs {
            let blocks = cache.index_select(&s.blocks, 1)?; // [2, nb, n_kv, B, d]
            let nb = s.blocks.dim(0)?;
            let side = |which: usize| -> Result<Tensor> {
                Ok(blocks
                    .get(which)?
                    .transpose(0, 1)?
                    .contiguous()?
                    .reshape((1, self.n_kv, nb * BLOCK_TOKENS, d))?
                    .narrow(2, 0, s.kv_len)?)
            };
            let (k, v) = (side(0)?, side(1)?);
            // Query heads sharing a KV head are consecutive: fold them into rows, [1, n_kv, n_rep · len, d].
            let q = q.narrow(2, s.start, s.len)?.contiguous()?.reshape((
                1,
                self.n_kv,
                n_rep * s.len,
                d,
            ))?;
            let att = (q.matmul(&k.t()?)? * scale)?;
            let mask = match windowed {
                true => s.window_mask.as_ref(),
                false => s.mask.as_ref(),
            };
            let att = match mask {
                Some(mask) => att
                    .reshape((1, self.n_kv, n_rep, s.len, s.kv_len))?
                    .broadcast_add(mask)?
                    .reshape((1, self.n_kv, n_rep * s.len, s.kv_len))?,
                None => att,
            };
            let att = candle_nn::ops::softmax_last_dim(&att)?;
            let y = att.matmul(&v.contiguous()?)?; // [1, n_kv, n_rep · len, d]
            out.push(
                y.reshape((1, n_head, s.len, d))?
                    .transpose(1, 2)?
                    .reshape((1, s.len, n_head * d))?,
            );
        }
        Ok(Tensor::cat(&out, 1)?)
    }
}

/// Additive mask `[t, pos + t]`: 0 where query `i` (absolute `pos + i`) may see key `j` — not after it, and
/// with a `window`, not `window` or more positions before it — −∞ elsewhere.
fn causal_mask(t: usize, pos: usize, window: Option<usize>, device: &Device) -> Result<Tensor> {
    let kv_len = pos + t;
    let data: Vec<f32> = (0..t)
        .flat_map(|i| {
            (0..kv_len).map(move |j| {
                let q = pos + i;
                let hidden = j > q || window.is_some_and(|w| q - j >= w);
                if hidden {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Ok(Tensor::from_vec(data, (t, kv_len), device)?)
}
