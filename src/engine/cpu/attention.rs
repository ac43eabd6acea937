//! Causal attention of one layer over the paged KV store, for every row of a batch: the CPU engine's attention
//! kernel.
//!
//! Work is split into items of (a tile of up to [`TILE_ROWS`] consecutive rows of one sequence, one KV head).
//! An item walks the keys its rows can see in chunks of [`CHUNK`] positions, and every query of the tile — each
//! row times the query heads sharing that KV head (grouped-query attention) — is scored against the chunk and
//! folded into its output with an online softmax (running maximum and sum, flash-attention style). A chunk's keys
//! and values (32 KB for 64-wide heads) stay in the core's cache while up to `TILE_ROWS × n_rep` queries read
//! them, instead of every (row, head) streaming the whole context from memory: what keeps a long prompt (a coding
//! client's system prompt of 20k tokens) from turning prefill quadratic in memory traffic.

use crate::engine::arch::SlidingWindow;
use crate::engine::cpu::act::SyncPtr;
use crate::engine::cpu::isa::Isa;
use crate::engine::cpu::pool::ThreadPool;
use crate::engine::cpu::vector::exp;
use half::f16;

use crate::engine::kv::{KvBlocks, BLOCK_TOKENS};

/// `fn NAME(isa, args…)`: runs `GENERIC(args…)` compiled for AVX-512F or AVX2+FMA when `isa` allows (the
/// compiler vectorizes the generic body for the widest one), else as built.
macro_rules! dispatch {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)? = $generic:ident) => {
        $(#[$m])*
        fn $name(isa: Isa, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma,avx512f")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    $generic($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    $generic($($arg),*)
                }
                if isa.has_avx512() {
                    // SAFETY: `has_avx512` checked that the processor has AVX-512F (and AVX2, FMA).
                    return unsafe { avx512($($arg),*) };
                }
                if isa.has_avx2() {
                    // SAFETY: `has_avx2` checked that the processor has AVX2 and FMA.
                    return unsafe { avx2($($arg),*) };
                }
            }
            let _ = isa;
            $generic($($arg),*)
        }
    };
}

/// Rows of one sequence attended together (they share every key chunk they both see).
pub const TILE_ROWS: usize = 8;
/// Key positions scored per online-softmax step (a whole number of KV blocks).
pub const CHUNK: usize = 4 * BLOCK_TOKENS;

/// Per-thread scratch (floats) [`attend`] needs for a model with `n_head` query heads of `head_dim`.
pub fn scratch_per_thread(n_head: usize, head_dim: usize) -> usize {
    CHUNK + 2 * CHUNK * head_dim + BLOCK_TOKENS * head_dim + 2 * TILE_ROWS * n_head
}

/// The shape of one layer's attention.
pub struct Heads {
    pub head_dim: usize,
    pub n_head: usize,
    pub n_kv: usize,
    /// Multiplies q·k.
    pub scale: f32,
}

/// One layer's attention for a batch. `q` and `att` hold `rows.len()` rows of `n_head * head_dim`; `rows[r]` is
/// (sequence index, absolute position), rows of a sequence consecutive; `tables[si]` lists sequence `si`'s KV
/// blocks in position order; `scratch` holds [`scratch_per_thread`] floats per pool thread.
#[allow(clippy::too_many_arguments)]
pub fn attend(
    pool: &ThreadPool,
    isa: Isa,
    heads: &Heads,
    kv: &KvBlocks,
    layer: usize,
    window: Option<&SlidingWindow>,
    tables: &[&[u32]],
    rows: &[(usize, usize)],
    q: &[f32],
    att: &mut [f32],
    scratch: &mut [f32],
) {
    let Heads {
        head_dim: d,
        n_head,
        n_kv,
        scale,
    } = *heads;
    let n_rep = n_head / n_kv;
    let qw = n_head * d;
    let stride = scratch_per_thread(n_head, d);
    debug_assert!(scratch.len() >= stride * pool.threads());
    debug_assert!(att.len() >= rows.len() * qw);
    // Tiles: runs of up to TILE_ROWS rows of the same sequence.
    let mut tiles: Vec<(usize, usize)> =
        Vec::with_capacity(rows.len().div_ceil(TILE_ROWS) + tables.len());
    let mut r0 = 0;
    while r0 < rows.len() {
        let mut r1 = r0 + 1;
        while r1 < rows.len() && r1 - r0 < TILE_ROWS && rows[r1].0 == rows[r0].0 {
            r1 += 1;
        }
        tiles.push((r0, r1));
        r0 = r1;
    }
    let start_of = |pos: usize| window.map_or(0, |w| w.start(pos));
    let (out_ptr, scratch_ptr) = (SyncPtr(att.as_mut_ptr()), SyncPtr(scratch.as_mut_ptr()));
    pool.run(tiles.len() * n_kv, &|item, thread| {
        let ((r0, r1), kvh) = (tiles[item / n_kv], item % n_kv);
        let blocks = tables[rows[r0].0];
        let nq = (r1 - r0) * n_rep;
        // SAFETY: thread `thread` alone uses scratch[thread * stride..][..stride] (sized by the caller).
        let sc = unsafe { scratch_ptr.slice(thread * stride, stride) };
        let (s_buf, rest) = sc.split_at_mut(CHUNK);
        let (keys_t, rest) = rest.split_at_mut(CHUNK * d);
        let (values, rest) = rest.split_at_mut(CHUNK * d);
        let (keys, rest) = rest.split_at_mut(BLOCK_TOKENS * d);
        let (max, rest) = rest.split_at_mut(nq);
        let sum = &mut rest[..nq];
        max.fill(f32::NEG_INFINITY);
        sum.fill(0.0);
        // SAFETY: (row r, head hh) for r in this tile and hh of this KV head is written by this item only.
        let out = |r: usize, hh: usize| unsafe { out_ptr.slice(r * qw + hh * d, d) };
        for r in r0..r1 {
            for hh in kvh * n_rep..(kvh + 1) * n_rep {
                out(r, hh).fill(0.0);
            }
        }
        let len_max = rows[r0..r1].iter().map(|&(_, p)| p + 1).max().unwrap_or(0);
        let start_min = rows[r0..r1]
            .iter()
            .map(|&(_, p)| start_of(p))
            .min()
            .unwrap_or(0);
        // Chunks start at multiples of CHUNK whatever the tile, so every query sums the same pieces in the same
        // order in any batch (prefill and decode give the same numbers).
        let mut at = start_min / CHUNK * CHUNK;
        while at < len_max {
            let end = (at + CHUNK).min(len_max);
            // The chunk's keys transposed (keys_t[c * CHUNK + j] = k_{at+j}[c], so one query's scores are a row
            // of FMAs) and its values in position order, as f32 whatever the store keeps.
            // A full chunk writes every column; a partial one leaves stale columns (earlier chunks' keys, or the
            // scratch's zeros: always initialised) whose scores are computed and never read — no zeroing, which
            // would be a fill per item and layer at every decode step.
            for_pieces(at, end, |p, b0, n| {
                let (block, slots) = (blocks[b0 / BLOCK_TOKENS], p - b0..n);
                let col = p - at;
                let (v_out, n) = (&mut values[col * d..], slots.len());
                match (
                    kv.f16_keys_t(block, layer, kvh),
                    kv.f16_values(block, layer, kvh, slots.clone()),
                ) {
                    (Some(kt), Some(v16)) if slots.start == 0 => {
                        // The store keeps f16 keys transposed: a block is whole columns of the chunk's keys
                        // (unwritten slots of a partial block fill columns whose scores are never read).
                        keys_block_f16(isa, kt, d, &mut keys_t[col..]);
                        convert_f16(isa, v16, &mut v_out[..n * d]);
                    }
                    _ => {
                        kv.read(block, layer, kvh, 0, slots.clone(), keys);
                        for (j, key) in keys[..n * d].chunks_exact(d).enumerate() {
                            for (c, &x) in key.iter().enumerate() {
                                keys_t[c * CHUNK + col + j] = x;
                            }
                        }
                        kv.read(block, layer, kvh, 1, slots, v_out);
                    }
                }
            });
            for (ri, r) in (r0..r1).enumerate() {
                let pos = rows[r].1;
                // The row's keys in this chunk: none when it ends before the chunk or its window after it.
                let (first, last) = (start_of(pos).max(at), (pos + 1).min(end));
                if first >= last {
                    continue;
                }
                let (lo, hi) = (first - at, last - at);
                for (k, hh) in (kvh * n_rep..(kvh + 1) * n_rep).enumerate() {
                    let qi = ri * n_rep + k;
                    let qh = &q[r * qw + hh * d..r * qw + (hh + 1) * d];
                    chunk_scores(isa, qh, keys_t, s_buf);
                    let s = &mut s_buf[lo..hi];
                    let (m_new, chunk_sum) = chunk_softmax(isa, s, scale, max[qi]);
                    let correction = match max[qi] == f32::NEG_INFINITY {
                        true => 0.0,
                        false => (max[qi] - m_new).exp(),
                    };
                    sum[qi] = sum[qi] * correction + chunk_sum;
                    max[qi] = m_new;
                    let o = out(r, hh);
                    if correction != 1.0 {
                        o.iter_mut().for_each(|x| *x *= correction);
                    }
                    chunk_accumulate(isa, o, s, &values[lo * d..hi * d]);
                }
            }
            at = end;
        }
        for (ri, r) in (r0..r1).enumerate() {
            for (k, hh) in (kvh * n_rep..(kvh + 1) * n_rep).enumerate() {
                let l = sum[ri * n_rep + k];
                if l > 0.0 {
                    let inv = 1.0 / l;
                    out(r, hh).iter_mut().for_each(|x| *x *= inv);
                }
            }
        }
    });
}

dispatch! {
    /// `scores[j] = q · k_j` for the chunk's [`CHUNK`] keys, given transposed (`keys_t[c * CHUNK + j]`): the
    /// [`CHUNK`] sums stay in registers while each of q's values is broadcast over a row.
    fn chunk_scores(q: &[f32], keys_t: &[f32], scores: &mut [f32]) = chunk_scores_generic
}

#[inline(always)]
fn chunk_scores_generic(q: &[f32], keys_t: &[f32], scores: &mut [f32]) {
    let mut acc = [0f32; CHUNK];
    for (&qc, row) in q.iter().zip(keys_t.chunks_exact(CHUNK)) {
        for (a, &k) in acc.iter_mut().zip(row) {
            *a = qc.mul_add(k, *a);
        }
    }
    scores[..CHUNK].copy_from_slice(&acc);
}

dispatch! {
    /// One online-softmax step over a chunk's raw scores: with `m` the running maximum so far, returns the new maximum
    /// `m'` (of `m` and every `s[j] · scale`) and `Σ_j exp(s[j] · scale − m')`, each `s[j]` replaced by its term.
    fn chunk_softmax(s: &mut [f32], scale: f32, m: f32) -> (f32, f32) = chunk_softmax_generic
}

/// Lanes of the reductions below (independent accumulators the compiler turns into one vector).
const LANES: usize = 16;

#[inline(always)]
fn chunk_softmax_generic(s: &mut [f32], scale: f32, m: f32) -> (f32, f32) {
    let mut lanes = [m; LANES];
    let mut parts = s.chunks_exact_mut(LANES);
    for part in &mut parts {
        for (l, x) in lanes.iter_mut().zip(part.iter_mut()) {
            *x *= scale;
            *l = l.max(*x);
        }
    }
    let tail = parts.into_remainder();
    for x in tail.iter_mut() {
        *x *= scale;
        lanes[0] = lanes[0].max(*x);
    }
    let m_new = lanes.iter().copied().fold(m, f32::max);
    let mut sums = [0f32; LANES];
    let mut parts = s.chunks_exact_mut(LANES);
    for part in &mut parts {
        for (acc, x) in sums.iter_mut().zip(part.iter_mut()) {
            *x = exp(*x - m_new);
            *acc += *x;
        }
    }
    for x in parts.into_remainder() {
        *x = exp(*x - m_new);
        sums[0] += *x;
    }
    (m_new, sums.iter().sum())
}

dispatch! {
    /// `out += Σ_j w[j] · v_j` over the `w.len()` rows of `values` (rows of `out.len()`), [`CHUNK`] columns of `out`
    /// at a time held in registers.
    fn chunk_accumulate(out: &mut [f32], w: &[f32], values: &[f32]) = chunk_accumulate_generic
}

#[inline(always)]
fn chunk_accumulate_generic(out: &mut [f32], w: &[f32], values: &[f32]) {
    let d = out.len();
    let mut off = 0;
    while off + CHUNK <= d {
        let mut acc = [0f32; CHUNK];
        acc.copy_from_slice(&out[off..off + CHUNK]);
        for (&wj, row) in w.iter().zip(values.chunks_exact(d)) {
            for (a, &v) in acc.iter_mut().zip(&row[off..off + CHUNK]) {
                *a = wj.mul_add(v, *a);
            }
        }
        out[off..off + CHUNK].copy_from_slice(&acc);
        off += CHUNK;
    }
    if off < d {
        for (&wj, row) in w.iter().zip(values.chunks_exact(d)) {
            for (o, &v) in out[off..].iter_mut().zip(&row[off..]) {
                *o = wj.mul_add(v, *o);
            }
        }
    }
}

/// `out[c * CHUNK + j] = kt[c * BLOCK_TOKENS + j]` as f32 for every `c < d` and `j < BLOCK_TOKENS`: one block's
/// keys as the store keeps them (f16, transposed) into the chunk's transposed keys, a conversion of whole rows
/// (no shuffles: the store's layout is already the chunk's).
fn keys_block_f16(isa: Isa, kt: &[f16], d: usize, out: &mut [f32]) {
    assert!(
        kt.len() >= d * BLOCK_TOKENS && out.len() >= (d - 1) * CHUNK + BLOCK_TOKENS,
        "transposed keys out of bounds"
    );
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: `has_avx2` checked AVX2 and F16C; the bounds were asserted above.
        unsafe { x86::keys_block_f16(kt, d, out) };
        return;
    }
    let _ = isa;
    for (c, col) in kt.chunks_exact(BLOCK_TOKENS).take(d).enumerate() {
        for (o, x) in out[c * CHUNK..c * CHUNK + BLOCK_TOKENS].iter_mut().zip(col) {
            *o = x.to_f32();
        }
    }
}

/// `out[i] = src[i]` as f32 (values as the store keeps them, f16).
fn convert_f16(isa: Isa, src: &[f16], out: &mut [f32]) {
    let out = &mut out[..src.len()];
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: `has_avx2` checked AVX2 and F16C; `out` is as long as `src`.
        unsafe { x86::convert_f16(src, out) };
        return;
    }
    let _ = isa;
    for (o, x) in out.iter_mut().zip(src) {
        *o = x.to_f32();
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{BLOCK_TOKENS, CHUNK};
    use half::f16;

    /// [`super::keys_block_f16`]: two conversions of 8 per column.
    ///
    /// # Safety
    /// AVX2 and F16C must be present; `kt` must hold `d * BLOCK_TOKENS` values and `out`
    /// `(d - 1) * CHUNK + BLOCK_TOKENS`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn keys_block_f16(kt: &[f16], d: usize, out: &mut [f32]) {
        let (s, o) = (kt.as_ptr(), out.as_mut_ptr());
        for c in 0..d {
            for half in [0, 8] {
                let at = c * BLOCK_TOKENS + half;
                let x = _mm256_cvtph_ps(_mm_loadu_si128(s.add(at) as *const __m128i));
                _mm256_storeu_ps(o.add(c * CHUNK + half), x);
            }
        }
    }

    /// [`super::convert_f16`].
    ///
    /// # Safety
    /// AVX2 and F16C must be present; `out` as long as `src`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn convert_f16(src: &[f16], out: &mut [f32]) {
        let n8 = src.len() / 8 * 8;
        let (s, o) = (src.as_ptr(), out.as_mut_ptr());
        for i in (0..n8).step_by(8) {
            _mm256_storeu_ps(
                o.add(i),
                _mm256_cvtph_ps(_mm_loadu_si128(s.add(i) as *const __m128i)),
            );
        }
        for i in n8..src.len() {
            out[i] = src[i].to_f32();
        }
    }
}

/// Calls `f(p, b0, n)` for each KV block overlapping positions `lo..hi`: `p` the first position used in it, `b0`
/// the block's first position, `n` the slots to read (`b0 + n` is the end of the piece).
#[inline(always)]
fn for_pieces(lo: usize, hi: usize, mut f: impl FnMut(usize, usize, usize)) {
    let mut p = lo;
    while p < hi {
        let b0 = p / BLOCK_TOKENS * BLOCK_TOKENS;
        let n = (hi - b0).min(BLOCK_TOKENS);
        f(p, b0, n);
        p = b0 + n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_keys_and_values_are_converted_exactly_on_every_isa() {
        for isa in Isa::available() {
            for (n, d) in [(16, 64), (13, 64), (8, 80), (5, 64), (16, 12), (1, 8)] {
                let src: Vec<f16> = (0..n * d)
                    .map(|i| f16::from_f32(((i * 7919) % 1013) as f32 * 0.031 - 15.0))
                    .collect();
                // A block's keys as the store keeps them ([c * BLOCK_TOKENS + slot]) land in columns 3.. of
                // every row of the chunk's transposed keys.
                let kt: Vec<f16> = (0..d * BLOCK_TOKENS)
                    .map(|i| f16::from_f32(((i * 6007) % 997) as f32 * 0.029 - 14.0))
                    .collect();
                let mut got = vec![f32::NAN; d * CHUNK];
                keys_block_f16(isa, &kt, d, &mut got[3..]);
                for c in 0..d {
                    for j in 0..BLOCK_TOKENS {
                        let want = kt[c * BLOCK_TOKENS + j].to_f32();
                        let at = 3 + c * CHUNK + j;
                        assert_eq!(got[at], want, "{isa:?} d={d} j={j} c={c}");
                    }
                    // Nothing outside the block's columns is written.
                    let row = &got[c * CHUNK..(c + 1) * CHUNK];
                    let mut outside = row[..3].iter().chain(&row[3 + BLOCK_TOKENS..]);
                    assert!(outside.all(|x| x.is_nan()), "{isa:?} d={d} c={c}");
                }
                let mut vals = vec![f32::NAN; n * d + 1];
                convert_f16(isa, &src, &mut vals);
                assert!(vals[..n * d]
                    .iter()
                    .zip(&src)
                    .all(|(a, b)| *a == b.to_f32()));
                assert!(vals[n * d].is_nan());
            }
        }
    }

    #[test]
    fn softmax_step_matches_a_plain_softmax() {
        let raw: Vec<f32> = (0..37)
            .map(|i| ((i * 7919) % 23) as f32 * 0.37 - 4.0)
            .collect();
        let mut s = raw.clone();
        let (m, sum) = chunk_softmax_generic(&mut s, 0.125, f32::NEG_INFINITY);
        let want_m = raw
            .iter()
            .map(|x| x * 0.125)
            .fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(m, want_m);
        let want: Vec<f32> = raw.iter().map(|x| (x * 0.125 - want_m).exp()).collect();
        for (a, b) in s.iter().zip(&want) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        assert!((sum - want.iter().sum::<f32>()).abs() < 1e-5);
    }
}
