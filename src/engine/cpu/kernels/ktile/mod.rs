//! Row-interleaved tiles for the K-quants Q4_K and Q6_K (the 32-value types' idea, [`super::packed`], on
//! 256-value super-blocks): super-block `i` of eight rows becomes one tile whose 32-byte quant vectors hold four
//! consecutive values of each of the eight rows, with the rows' scales laid out so that one `madd` applies a
//! sub-block's scale to all eight at once. Each type's file says how its blocks are laid out in a tile and runs
//! its integer dots; this module packs matrices, reads rows back, and dispatches.
//!
//! Results are bit for bit the plain-Rust row dot of [`super::kquant`] (`dot_scalar`): the same exact integer
//! sums, and per super-block the same float operations (`term = d·dx·isum − dmin·dx·msum`, `sum += term`).

use super::kquant::{dot_scalar, KQuant};
use crate::engine::cpu::act::BlockQ8K;
use crate::engine::cpu::isa::Isa;

mod q4k;
mod q6k;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use super::packed::ROWS;

/// A K-quant type that has tiles.
pub(crate) trait KTile: KQuant {
    /// Bytes of one tile (super-block `i` of eight rows).
    const TILE: usize;

    /// Puts one raw super-block as row `r` of `tile` (zeroed beforehand).
    fn pack_block(b: &[u8], r: usize, tile: &mut [u8]);

    /// Writes row `r` of `tile` back as the raw super-block it was packed from.
    fn unpack_block(tile: &[u8], r: usize, out: &mut [u8]);

    /// The AVX2 tile: `out[t][r]`.
    ///
    /// # Safety
    /// The processor has AVX2, FMA and F16C; `group` holds `nb` tiles and every `x[t]` `nb` blocks.
    #[cfg(target_arch = "x86_64")]
    unsafe fn tile_avx2<const N: usize>(
        group: &[u8],
        nb: usize,
        x: [&[BlockQ8K]; N],
    ) -> [[f32; ROWS]; N];

    /// The NEON tile (`sdot`: with the dot-product extension).
    ///
    /// # Safety
    /// As for `tile_avx2`, with NEON (and `dotprod` where `sdot` is asked for).
    #[cfg(target_arch = "aarch64")]
    unsafe fn tile_neon<const N: usize, const SDOT: bool>(
        group: &[u8],
        nb: usize,
        x: [&[BlockQ8K]; N],
    ) -> [[f32; ROWS]; N];
}

/// Q4_K and Q6_K as [`super::Tiled`] types.
macro_rules! tiled {
    ($($t:ty),*) => {$(
        impl super::Tiled for $t {
            const TILE: usize = <$t as KTile>::TILE;

            fn pack(raw: &[u8], rows: usize, nb: usize) -> Vec<u8> {
                pack::<$t>(raw, rows, nb)
            }

            fn unpack(tile: &[u8], r: usize, out: &mut [u8]) {
                <$t as KTile>::unpack_block(tile, r, out)
            }

            fn dot_group<const N: usize>(isa: Isa, group: &[u8], x: [&[BlockQ8K]; N]) -> [[f32; ROWS]; N] {
                dot_group::<$t, N>(isa, group, x)
            }
        }
    )*};
}
tiled!(
    crate::engine::cpu::kernels::q4_k::Q4K,
    crate::engine::cpu::kernels::q6_k::Q6K
);

/// Packs a `[rows, nb · 256]` matrix of raw super-blocks into row groups of eight (the last padded with zero
/// blocks, whose scales are 0): group `g`'s tiles are `nb` consecutive tiles.
pub(crate) fn pack<K: KTile>(raw: &[u8], rows: usize, nb: usize) -> Vec<u8> {
    let groups = rows.div_ceil(ROWS);
    let mut out = vec![0u8; groups * nb * K::TILE];
    for (gi, group) in out.chunks_exact_mut(nb * K::TILE).enumerate() {
        for (i, tile) in group.chunks_exact_mut(K::TILE).enumerate() {
            for r in 0..ROWS.min(rows - gi * ROWS) {
                let at = ((gi * ROWS + r) * nb + i) * K::BLOCK_BYTES;
                K::pack_block(&raw[at..at + K::BLOCK_BYTES], r, tile);
            }
        }
    }
    out
}

/// Whether the tiles are the fastest path for `isa`: AVX2, NEON and the portable path. On AVX-512 VNNI the
/// K-quants keep their file rows and the 512-bit kernels of [`super::kquant`] (no VNNI tile is written yet).
pub(crate) fn tiles_for(isa: Isa) -> bool {
    isa != Isa::Avx512Vnni
}

/// The eight rows of one packed row group dotted with `N` activation rows on the best path `isa` allows:
/// `out[t][r]`, bit for bit the row dot of `dot_scalar` (zero for padding rows).
#[inline]
pub(crate) fn dot_group<K: KTile, const N: usize>(
    isa: Isa,
    group: &[u8],
    x: [&[BlockQ8K]; N],
) -> [[f32; ROWS]; N] {
    let nb = x.iter().fold(group.len() / K::TILE, |n, x| n.min(x.len()));
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: `has_avx2` checked AVX2, FMA and F16C on this processor; `nb` tiles lie in `group` and `nb`
        // blocks in every `x[t]`.
        return unsafe { K::tile_avx2::<N>(group, nb, x) };
    }
    #[cfg(target_arch = "aarch64")]
    if isa.has_neon() {
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            // SAFETY: NEON is part of aarch64 and the dot-product extension was just detected; bounds as
            // above.
            return unsafe { K::tile_neon::<N, true>(group, nb, x) };
        }
        // SAFETY: NEON is part of every aarch64 processor; bounds as above.
        return unsafe { K::tile_neon::<N, false>(group, nb, x) };
    }
    let _ = isa;
    tile_scalar::<K, N>(group, nb, x)
}

/// The portable path: each row read back out of the tiles and dotted by `dot_scalar`.
fn tile_scalar<K: KTile, const N: usize>(
    group: &[u8],
    nb: usize,
    x: [&[BlockQ8K]; N],
) -> [[f32; ROWS]; N] {
    let mut out = [[0f32; ROWS]; N];
    let mut row = vec![0u8; nb * K::BLOCK_BYTES];
    for r in 0..ROWS {
        for (i, b) in row.chunks_exact_mut(K::BLOCK_BYTES).enumerate() {
            K::unpack_block(&group[i * K::TILE..(i + 1) * K::TILE], r, b);
        }
        for (out, x) in out.iter_mut().zip(x) {
            out[r] = dot_scalar::<K>(&row, &x[..nb]);
        }
    }
    out
}

/// Helpers shared by the types' x86 tiles.
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use std::arch::x86_64::*;

    /// Four activation bytes (`qs[at..at + 4]`) in every 32-bit lane.
    ///
    /// # Safety
    /// `at + 4 <= qs.len()`; the processor has AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn broadcast(qs: &[i8], at: usize) -> __m256i {
        debug_assert!(at + 4 <= qs.len());
        // SAFETY: the caller guarantees 4 bytes at `at`; the read is unaligned.
        _mm256_set1_epi32(unsafe { std::ptr::read_unaligned(qs.as_ptr().add(at).cast::<i32>()) })
    }

    /// Eight bytes (one per row) at `p` as i32 lanes holding the value in both 16-bit halves: the `madd`
    /// operand that multiplies each row's pair sums by that row's scale. `signed` sign-extends the bytes.
    ///
    /// # Safety
    /// `p` points at 8 readable bytes; the processor has AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn row_scales(p: *const u8, signed: bool) -> __m256i {
        // SAFETY: the caller guarantees 8 bytes; the read is unaligned.
        let b = unsafe { _mm_loadl_epi64(p.cast()) };
        let x = if signed {
            _mm256_cvtepi8_epi32(b)
        } else {
            _mm256_cvtepu8_epi32(b)
        };
        _mm256_or_si256(
            _mm256_and_si256(x, _mm256_set1_epi32(0xffff)),
            _mm256_slli_epi32::<16>(x),
        )
    }

    /// Stores the eight lanes of `v` into `out`.
    #[inline]
    #[target_feature(enable = "avx")]
    pub fn store(v: __m256, out: &mut [f32; 8]) {
        // SAFETY: `out` is 8 floats; the store is unaligned.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), v) }
    }
}

/// Helpers shared by the NEON tiles of the K-quants and of the 32-value types ([`super::super::packed`]).
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    use std::arch::aarch64::*;

    use crate::engine::cpu::kernels::f16_at;

    /// A 32-byte weight vector as two registers: rows 0..4 and rows 4..8.
    pub type Half = (int8x16_t, int8x16_t);

    /// `Σ_v q[v] · y[4v..4v + 4]` per row (exact), rows 0..4 and 4..8: `sdot` where `SDOT`, else widening
    /// multiplies (an i8 product fits 16 bits) added in pairs into 32 bits.
    ///
    /// # Safety
    /// The processor has the dot-product extension where `SDOT`; `y` holds `4 · q.len()` bytes.
    #[inline]
    pub unsafe fn dot4<const SDOT: bool>(q: &[Half], y: &[i8]) -> (int32x4_t, int32x4_t) {
        assert!(y.len() >= 4 * q.len());
        if SDOT {
            // SAFETY: the caller guarantees the dot-product extension.
            unsafe { dot_sdot(q, y) }
        } else {
            dot_mull(q, y)
        }
    }

    #[inline]
    fn bcast(y: &[i8], v: usize) -> int8x16_t {
        let b = &y[4 * v..4 * v + 4];
        // SAFETY: NEON is part of every aarch64 processor.
        unsafe {
            vreinterpretq_s8_s32(vdupq_n_s32(i32::from_le_bytes([
                b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8,
            ])))
        }
    }

    #[target_feature(enable = "neon,dotprod")]
    fn dot_sdot(q: &[Half], y: &[i8]) -> (int32x4_t, int32x4_t) {
        let (mut s0, mut s1) = (vdupq_n_s32(0), vdupq_n_s32(0));
        for (v, q) in q.iter().enumerate() {
            let b = bcast(y, v);
            s0 = crate::engine::cpu::kernels::neon_sdot(s0, q.0, b);
            s1 = crate::engine::cpu::kernels::neon_sdot(s1, q.1, b);
        }
        (s0, s1)
    }

    #[target_feature(enable = "neon")]
    fn dot_mull(q: &[Half], y: &[i8]) -> (int32x4_t, int32x4_t) {
        let z = vdupq_n_s32(0);
        let mut p = [z; 4];
        for (v, q) in q.iter().enumerate() {
            let b = bcast(y, v);
            p[0] = vpadalq_s16(p[0], vmull_s8(vget_low_s8(q.0), vget_low_s8(b)));
            p[1] = vpadalq_s16(p[1], vmull_high_s8(q.0, b));
            p[2] = vpadalq_s16(p[2], vmull_s8(vget_low_s8(q.1), vget_low_s8(b)));
            p[3] = vpadalq_s16(p[3], vmull_high_s8(q.1, b));
        }
        (vpaddq_s32(p[0], p[1]), vpaddq_s32(p[2], p[3]))
    }

    /// The eight f16 at `tile[at..at + 16]` as two registers of f32.
    pub fn f16x8(tile: &[u8], at: usize) -> (float32x4_t, float32x4_t) {
        let v: [f32; 8] = std::array::from_fn(|r| f16_at(tile, at + 2 * r));
        // SAFETY: `v` is 8 floats (NEON is part of every aarch64 processor).
        unsafe { (vld1q_f32(v.as_ptr()), vld1q_f32(v.as_ptr().add(4))) }
    }

    /// Stores both registers into `out`.
    pub fn store(v: (float32x4_t, float32x4_t), out: &mut [f32; 8]) {
        // SAFETY: `out` is 8 floats.
        unsafe {
            vst1q_f32(out.as_mut_ptr(), v.0);
            vst1q_f32(out.as_mut_ptr().add(4), v.1);
        }
    }
}
