//! CPU twins of the CUDA kernels in `kernels/`: the same function on host slices, written plainly (rayon over
//! rows, f32 as the kernels compute). They are what the ops run on the CPU, and what the kernels are checked
//! against (`agentd bench parity`, `tests/suite/engine/cuda.rs`).

use rayon::prelude::*;

/// `kernels/rmsnorm.cu` `rms_norm_f32`: each `n`-wide row of `x`, divided by its root mean square
/// (`+ eps` under the root), times `w`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let n = w.len();
    out.par_chunks_mut(n)
        .zip(x.par_chunks(n))
        .for_each(|(o, x)| norm_row(x, w, eps, o));
}

/// `kernels/rmsnorm.cu` `add_rms_norm_f32`: `sum = x + r`, then [`rms_norm`] of `sum`.
pub fn add_rms_norm(x: &[f32], r: &[f32], w: &[f32], eps: f32, sum: &mut [f32], out: &mut [f32]) {
    let n = w.len();
    sum.par_chunks_mut(n)
        .zip(out.par_chunks_mut(n))
        .zip(x.par_chunks(n).zip(r.par_chunks(n)))
        .for_each(|((s, o), (x, r))| {
            for ((s, x), r) in s.iter_mut().zip(x).zip(r) {
                *s = x + r;
            }
            norm_row(s, w, eps, o);
        });
}

fn norm_row(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ss: f32 = x.iter().map(|v| v * v).sum();
    let inv = 1.0 / (ss / x.len() as f32 + eps).sqrt();
    for ((o, x), w) in out.iter_mut().zip(x).zip(w) {
        *o = x * inv * w;
    }
}

/// Where a rotary op rotates.
#[derive(Debug, Clone, Copy)]
pub struct RotaryShape {
    pub heads: usize,
    pub head_dim: usize,
    /// Dimensions rotated at the start of each head (even, at most `head_dim`).
    pub rot: usize,
    /// The absolute position of the first row.
    pub pos: usize,
    /// Pairs (2i, 2i + 1) instead of NeoX's (i, i + rot / 2).
    pub interleaved: bool,
}

/// `kernels/rotary.cu`: rotates `x: [t, heads, head_dim]` at positions `pos..pos + t` with the tables
/// `cos`, `sin`: `[positions, rot / 2]`.
pub fn rotary(x: &[f32], cos: &[f32], sin: &[f32], s: RotaryShape, out: &mut [f32]) {
    let (d, half) = (s.head_dim, s.rot / 2);
    out.par_chunks_mut(d)
        .zip(x.par_chunks(d))
        .enumerate()
        .for_each(|(row, (y, x))| {
            let p = s.pos + row / s.heads;
            let (c, sn) = (
                &cos[p * half..(p + 1) * half],
                &sin[p * half..(p + 1) * half],
            );
            for i in 0..half {
                let (a, b) = match s.interleaved {
                    true => (2 * i, 2 * i + 1),
                    false => (i, i + half),
                };
                let (x0, x1) = (x[a], x[b]);
                y[a] = x0 * c[i] - x1 * sn[i];
                y[b] = x0 * sn[i] + x1 * c[i];
            }
            y[s.rot..].copy_from_slice(&x[s.rot..]);
        });
}

/// One query row at position `p` over keys `lo..=p` (`lo` from the window): softmax of the scaled dot
/// products, then the weighted sum of the values, into `y`.
fn attend<'a>(
    q: &[f32],
    y: &mut [f32],
    p: usize,
    window: Option<usize>,
    scale: f32,
    key: impl Fn(usize) -> &'a [f32],
    val: impl Fn(usize) -> &'a [f32],
) {
    let lo = window.map_or(0, |w| (p + 1).saturating_sub(w));
    let scores: Vec<f32> = (lo..=p)
        .map(|j| q.iter().zip(key(j)).map(|(a, b)| a * b).sum::<f32>() * scale)
        .collect();
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let weights: Vec<f32> = scores.iter().map(|x| (x - max).exp()).collect();
    let total: f32 = weights.iter().sum();
    y.fill(0.0);
    for (j, w) in (lo..=p).zip(&weights) {
        for (y, v) in y.iter_mut().zip(val(j)) {
            *y += w * v;
        }
    }
    for y in y.iter_mut() {
        *y /= total;
    }
}

/// Positions per block of the paged store (`engine::kv::BLOCK_TOKENS`).
pub const BLOCK: usize = crate::engine::kv::BLOCK_TOKENS;

/// The paged store's geometry and a batch's size (see [`paged_attention`]).
#[derive(Debug, Clone, Copy)]
pub struct PagedShape {
    /// Query tokens, all sequences' end to end.
    pub t: usize,
    pub n_head: usize,
    pub n_kv: usize,
    pub head_dim: usize,
    /// Blocks in the store: one layer's buffer is `[2 (k|v), n_blocks, n_kv, BLOCK, head_dim]`.
    pub n_blocks: usize,
    /// Entries per block table in `meta`.
    pub max_blocks: usize,
    pub window: Option<usize>,
    pub scale: f32,
}

impl PagedShape {
    fn block(&self) -> usize {
        self.n_kv * BLOCK * self.head_dim
    }

    /// Where position `p` of the sequence with block table `table` starts for KV head `kvh`.
    fn at(&self, table: &[u32], kvh: usize, p: usize) -> usize {
        table[p / BLOCK] as usize * self.block() + (kvh * BLOCK + p % BLOCK) * self.head_dim
    }

    /// Query token `i`'s block table and position; `meta` = `[seq of each token, position of each token,
    /// block tables of max_blocks each]` (checked by the caller).
    fn token<'m>(&self, meta: &'m [u32], i: usize) -> (&'m [u32], usize) {
        let seq = meta[i] as usize;
        let tables = &meta[2 * self.t..];
        (
            &tables[seq * self.max_blocks..][..self.max_blocks],
            meta[self.t + i] as usize,
        )
    }
}

/// `kernels/attention.cu` `paged_attention_f32`: causal grouped-query attention of `q: [t, n_head, d]` for a
/// batch of sequences over the paged store `cache`, each query token at its own sequence's position; writes
/// `out: [t, n_head, d]`.
pub fn paged_attention(q: &[f32], cache: &[f32], meta: &[u32], s: PagedShape, out: &mut [f32]) {
    let d = s.head_dim;
    let group = s.n_head / s.n_kv;
    let (k, v) = cache.split_at(s.n_blocks * s.block());
    out.par_chunks_mut(d)
        .zip(q.par_chunks(d))
        .enumerate()
        .for_each(|(row, (y, q))| {
            let (i, h) = (row / s.n_head, row % s.n_head);
            let kvh = h / group;
            let (table, p) = s.token(meta, i);
            let key = |j: usize| &k[s.at(table, kvh, j)..][..d];
            let val = |j: usize| &v[s.at(table, kvh, j)..][..d];
            attend(q, y, p, s.window, s.scale, key, val);
        });
}

/// `kernels/attention.cu` `kv_write_f32`: stores `rows` (`[2 (k|v), t, n_kv, d]`) at each token's slot.
pub fn kv_write(cache: &mut [f32], rows: &[f32], meta: &[u32], s: PagedShape) {
    let d = s.head_dim;
    let half = s.n_blocks * s.block();
    for (kind, rows) in rows.chunks(s.t * s.n_kv * d).enumerate() {
        for (r, row) in rows.chunks(d).enumerate() {
            let (i, kvh) = (r / s.n_kv, r % s.n_kv);
            let (table, p) = s.token(meta, i);
            let at = kind * half + s.at(table, kvh, p);
            cache[at..at + d].copy_from_slice(row);
        }
    }
}
