//! The super-block walking shared by the K-quant types (Q4_K, Q5_K, Q6_K), which all dot 256-value
//! super-blocks with [`BlockQ8K`] activations. A type says only how one of its super-blocks unpacks
//! ([`KQuant`]): into unsigned quants (below 64) and integer scales, chunk by chunk for the SIMD paths, and how
//! the block's exact integer sum becomes a float (its `d`, and its `dmin` or −32 offset). This module owns the
//! rest: the instruction-set dispatch, the row walk of every path, the multiply of the unpacked chunks with
//! each token's activation quants (one unpack serves `N` token rows), the horizontal sums, and the Q4_K/Q5_K
//! scales-and-mins header ([`mins`]), which those two types share.
//!
//! Every integer sum is exact; only the per-block scaling and the accumulation are float. The scalar and NEON
//! paths reduce each block to one integer and scale it with the type's [`KQuant::finish`], so they agree to the
//! bit; the x86 paths scale 8 lanes of partial sums per block and add the lanes at the end.

use super::{f16_at, WeightKernel};
use crate::engine::cpu::act::{BlockQ8K, QK_K};
use crate::engine::cpu::isa::Isa;

#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::*;
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// A K-quant super-block layout, as the drivers see it. The SIMD unpackers hand their chunks to `each(first,
/// chunks)`, a step at a time: chunk `c` holds the block's values `first + W·c ..` (`W` = the vector width in
/// bytes) with their scales, and the driver dots it with every token's activations before the next step.
pub(crate) trait KQuant: WeightKernel<Act = BlockQ8K> {
    /// Whether AVX2 runs `vec_dot_x4` as two passes of two tokens: the type's unpacked step and four tokens'
    /// accumulators overflow its 16 registers, and the spills cost more than the second pass.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    const AVX2_PAIRS: bool;

    /// What [`KQuant::finish`] needs of a block, read once per block.
    type Head: Copy;
    fn head(b: &[u8]) -> Self::Head;

    /// The plain-Rust unpack: value `k` of the block `b` into `q[k]` (unsigned, below 64), and the scale of
    /// each 16 values.
    fn unpack(b: &[u8], q: &mut [u8; QK_K]) -> [i32; 16];

    /// One block's term of the dot with the activation block `xb`, from `isum = Σ_k sc[k]·Σ q·q8` (exact).
    fn finish(h: &Self::Head, xb: &BlockQ8K, isum: i32) -> f32;

    /// What the AVX2 [`KQuant::avx2_finish`] needs of a block.
    #[cfg(target_arch = "x86_64")]
    type Avx2Tail;

    /// Unpacks the block at `p` for AVX2: chunks of 32 unsigned quants, each with the 16 words its `maddubs`
    /// pairs are `madd`-ed with (every pair's scale).
    ///
    /// # Safety
    /// `p` points at the block's `BLOCK_BYTES` readable bytes; the processor has AVX2, FMA and F16C (the
    /// function is inlined into a driver compiled for them).
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2_block(
        p: *const u8,
        each: impl FnMut(usize, &[(__m256i, __m256i)]),
    ) -> Self::Avx2Tail;

    /// `acc` plus the block's term for one token, from that token's 8 lanes of integer sums.
    ///
    /// # Safety
    /// As for [`KQuant::avx2_block`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2_finish(acc: __m256, isum: __m256i, xb: &BlockQ8K, t: &Self::Avx2Tail) -> __m256;

    /// What the AVX-512 [`KQuant::avx512_finish`] needs of a block.
    #[cfg(target_arch = "x86_64")]
    type Avx512Tail;

    /// Unpacks the block at `p` for AVX-512 VNNI: chunks of 64 unsigned quants, each with the 32 words its
    /// `maddubs` pairs are multiplied with by `vpdpwssd`.
    ///
    /// # Safety
    /// `p` points at the block's `BLOCK_BYTES` readable bytes; the processor has AVX-512 F/BW/VL/VNNI, AVX2,
    /// FMA and F16C (the function is inlined into a driver compiled for them).
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512_block(
        p: *const u8,
        each: impl FnMut(usize, &[(__m512i, __m512i)]),
    ) -> Self::Avx512Tail;

    /// `acc` plus the block's term for one token, from that token's integer sums folded to 8 lanes.
    ///
    /// # Safety
    /// As for [`KQuant::avx512_block`].
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx512_finish(
        acc: __m256,
        isum: __m256i,
        xb: &BlockQ8K,
        t: &Self::Avx512Tail,
    ) -> __m256;

    /// Values sharing one scale on the NEON path: 32 (a chunk's two halves take `sc[0]`) or 16 (the first half
    /// takes `sc[0]`, the second `sc[1]`).
    #[cfg(target_arch = "aarch64")]
    const NEON_SCALE_VALUES: usize;

    /// Unpacks the block at `p` for NEON: chunks of 32 quants as two 16-byte halves.
    ///
    /// # Safety
    /// `p` points at the block's `BLOCK_BYTES` readable bytes (NEON is part of every aarch64 processor).
    #[cfg(target_arch = "aarch64")]
    unsafe fn neon_block(p: *const u8, each: impl FnMut(usize, &[NeonChunk]));
}

/// 32 unpacked quants (values `0..16` and `16..32` of the chunk) and their scales, for NEON.
#[cfg(target_arch = "aarch64")]
#[derive(Clone, Copy)]
pub(crate) struct NeonChunk {
    pub q: [int8x16_t; 2],
    pub sc: [i32; 2],
}

/// One weight row · one activation row on the best path `isa` allows.
pub(super) fn vec_dot<K: KQuant>(isa: Isa, w: &[u8], x: &[BlockQ8K]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.has_avx512() {
            // SAFETY: `has_avx512` checked AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C at run time; the
            // kernel reads only the blocks both slices hold.
            return unsafe { x86::dot_avx512::<K, 1>(w, [x]) }[0];
        }
        if isa.has_avx2() {
            // SAFETY: `has_avx2` checked AVX2, FMA and F16C at run time; bounds as above.
            return unsafe { x86::dot_avx2::<K, 1>(w, [x]) }[0];
        }
    }
    #[cfg(target_arch = "aarch64")]
    if isa.has_neon() {
        return neon::dot::<K, 1>(w, [x])[0];
    }
    let _ = isa;
    dot_scalar::<K>(w, x)
}

/// One weight row · four activation rows (each weight block unpacked once for the four) on the best path.
pub(super) fn vec_dot_x4<K: KQuant>(isa: Isa, w: &[u8], x: [&[BlockQ8K]; 4]) -> [f32; 4] {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.has_avx512() {
            // SAFETY: as in `vec_dot`.
            return unsafe { x86::dot_avx512::<K, 4>(w, x) };
        }
        if isa.has_avx2() {
            if K::AVX2_PAIRS {
                // SAFETY: as in `vec_dot`.
                let [a, b] = unsafe { x86::dot_avx2::<K, 2>(w, [x[0], x[1]]) };
                // SAFETY: as in `vec_dot`.
                let [c, d] = unsafe { x86::dot_avx2::<K, 2>(w, [x[2], x[3]]) };
                return [a, b, c, d];
            }
            // SAFETY: as in `vec_dot`.
            return unsafe { x86::dot_avx2::<K, 4>(w, x) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    if isa.has_neon() {
        return neon::dot::<K, 4>(w, x);
    }
    let _ = isa;
    x.map(|x| dot_scalar::<K>(w, x))
}

/// Blocks a call can cover: what the weight row and every activation row hold (callers pass equal lengths;
/// the minimum keeps the SIMD paths in bounds whatever they pass).
#[inline(always)]
fn blocks<K: KQuant, const N: usize>(w: &[u8], x: &[&[BlockQ8K]; N]) -> usize {
    x.iter()
        .fold(w.len() / K::BLOCK_BYTES, |n, x| n.min(x.len()))
}

/// The portable path: each block unpacked to bytes, dotted per 16 values, scaled by [`KQuant::finish`].
pub(super) fn dot_scalar<K: KQuant>(w: &[u8], x: &[BlockQ8K]) -> f32 {
    let mut q = [0u8; QK_K];
    let mut sum = 0f32;
    for (b, xb) in w.chunks_exact(K::BLOCK_BYTES).zip(x) {
        let sc = K::unpack(b, &mut q);
        let isum: i32 = q
            .chunks_exact(16)
            .zip(xb.qs.chunks_exact(16))
            .zip(sc)
            .map(|((q, a), s)| {
                s * q
                    .iter()
                    .zip(a)
                    .map(|(&q, &a)| q as i32 * a as i32)
                    .sum::<i32>()
            })
            .sum();
        sum += K::finish(&K::head(b), xb, isum);
    }
    sum
}

/// The header Q4_K and Q5_K share: f16 `d` at 0, f16 `dmin` at 2, 12 bytes of packed 6-bit scales and mins at
/// 4. Value `k` of sub-block `s` (32 values) is `d·sc[s]·q − dmin·m[s]`, so a block's term is
///
/// `dx·(d·Σ_s sc[s]·Σ q·q8 − dmin·Σ_s m[s]·Σ q8)`,
///
/// where `Σ q8` over sub-block `s` is `bsums[2s] + bsums[2s + 1]` of the activation block.
pub(crate) mod mins {
    use super::{f16_at, BlockQ8K};
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::*;

    /// The 8 sub-block scales and the 8 mins (6 bits each), from the 12 packed bytes: bytes 0–3 hold scales
    /// 0–3 in their low 6 bits, bytes 4–7 mins 0–3; scales and mins 4–7 keep their low 4 bits in the nibbles of
    /// bytes 8–11 and their top 2 bits in the top 2 bits of bytes 0–3 (scales) and 4–7 (mins). Returned as
    /// little-endian byte lanes of a u64 each.
    #[inline(always)]
    pub fn scales_mins(s: &[u8]) -> (u64, u64) {
        let word = |at: usize| u32::from_le_bytes([s[at], s[at + 1], s[at + 2], s[at + 3]]);
        let (a, b, c) = (word(0), word(4), word(8));
        const LOW6: u32 = 0x3f3f_3f3f;
        const LOW4: u32 = 0x0f0f_0f0f;
        const TOP2: u32 = 0x3030_3030; // bits 6–7 shifted down to 4–5
        let sc_lo = a & LOW6;
        let mn_lo = b & LOW6;
        let sc_hi = (c & LOW4) | ((a >> 2) & TOP2);
        let mn_hi = ((c >> 4) & LOW4) | ((b >> 2) & TOP2);
        (
            sc_lo as u64 | (sc_hi as u64) << 32,
            mn_lo as u64 | (mn_hi as u64) << 32,
        )
    }

    /// The block's scale of each 16 values (sub-block `s`'s scale twice), for the plain-Rust unpack.
    #[inline(always)]
    pub fn scales16(b: &[u8]) -> [i32; 16] {
        let (sc, _) = scales_mins(&b[4..16]);
        std::array::from_fn(|k| ((sc >> (8 * (k / 2))) & 0xff) as i32)
    }

    /// Σ over sub-blocks of `m[s]·(bsums[2s] + bsums[2s + 1])`.
    #[inline(always)]
    fn min_term(mins: u64, bsums: &[i16; 16]) -> i32 {
        (0..8)
            .map(|s| {
                ((mins >> (8 * s)) & 0xff) as i32 * (bsums[2 * s] as i32 + bsums[2 * s + 1] as i32)
            })
            .sum()
    }

    /// `d`, `dmin` and the mins of a block.
    #[derive(Clone, Copy)]
    pub struct Head {
        d: f32,
        dmin: f32,
        mins: u64,
    }

    #[inline(always)]
    pub fn head(b: &[u8]) -> Head {
        Head {
            d: f16_at(b, 0),
            dmin: f16_at(b, 2),
            mins: scales_mins(&b[4..16]).1,
        }
    }

    /// The block's term, as a [`super::KQuant::finish`].
    #[inline(always)]
    pub fn finish(h: &Head, xb: &BlockQ8K, isum: i32) -> f32 {
        let msum = min_term(h.mins, &xb.bsums);
        h.d * xb.d * isum as f32 - h.dmin * xb.d * msum as f32
    }

    /// What the AVX2 finish needs: `d` and `dmin` as scalars (folded with `dx` per token: two fewer
    /// registers held across the block, which the AVX2 kernels, with 16 registers, run faster with) and the
    /// mins paired for the `bsums`.
    #[cfg(target_arch = "x86_64")]
    pub struct Avx2Tail {
        d: f32,
        dmin: f32,
        mins2: __m256i,
    }

    /// The block's AVX2 tail and its 8 scales as 16-bit words, in both 128-bit lanes (for `pshufb`
    /// broadcasts with [`super::x86::word_mask`]).
    ///
    /// # Safety
    /// `p` points at the block's 16 header bytes; the processor has AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub unsafe fn avx2_head(p: *const u8) -> (Avx2Tail, __m256i) {
        let (d, dmin) = super::x86::f16x2(p);
        let (sc, mn) = scales_mins(std::slice::from_raw_parts(p.add(4), 12));
        let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
        let mins2 = mins_paired(mn);
        (Avx2Tail { d, dmin, mins2 }, sc16)
    }

    /// `acc + dx·(d·isum − dmin·Σ m·bsums)` for one token.
    ///
    /// # Safety
    /// The processor has AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub unsafe fn avx2_finish(acc: __m256, isum: __m256i, xb: &BlockQ8K, t: &Avx2Tail) -> __m256 {
        let bs = _mm256_loadu_si256(xb.bsums.as_ptr() as *const __m256i);
        let msum = _mm256_madd_epi16(bs, t.mins2);
        let acc = _mm256_fmadd_ps(_mm256_set1_ps(t.d * xb.d), _mm256_cvtepi32_ps(isum), acc);
        _mm256_fnmadd_ps(_mm256_set1_ps(t.dmin * xb.d), _mm256_cvtepi32_ps(msum), acc)
    }

    /// What the AVX-512 finish needs: `d` and `dmin` broadcast once per block for all the tokens, and the
    /// mins paired for the `bsums`.
    #[cfg(target_arch = "x86_64")]
    pub struct Avx512Tail {
        d: __m256,
        dmin: __m256,
        mins2: __m256i,
    }

    /// The block's AVX-512 tail and its 8 scales as 16-bit words in the low 128 bits (for `vpermw`).
    ///
    /// # Safety
    /// `p` points at the block's 16 header bytes; the processor has AVX-512 F/BW/VL, AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub unsafe fn avx512_head(p: *const u8) -> (Avx512Tail, __m512i) {
        let (d, dmin) = super::x86::f16x2(p);
        let (sc, mn) = scales_mins(std::slice::from_raw_parts(p.add(4), 12));
        let sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(sc as i64)));
        let tail = Avx512Tail {
            d: _mm256_set1_ps(d),
            dmin: _mm256_set1_ps(dmin),
            mins2: mins_paired(mn),
        };
        (tail, sc16)
    }

    /// `acc + dx·(d·isum − dmin·Σ m·bsums)` for one token.
    ///
    /// # Safety
    /// The processor has AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub unsafe fn avx512_finish(
        acc: __m256,
        isum: __m256i,
        xb: &BlockQ8K,
        t: &Avx512Tail,
    ) -> __m256 {
        let bs = _mm256_loadu_si256(xb.bsums.as_ptr() as *const __m256i);
        let msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, t.mins2));
        let block = _mm256_fnmadd_ps(t.dmin, msum, _mm256_mul_ps(t.d, _mm256_cvtepi32_ps(isum)));
        _mm256_fmadd_ps(_mm256_set1_ps(xb.d), block, acc)
    }

    /// `mins` (8 bytes) widened to 16 i16 lanes, each twice: `[m0, m0, m1, m1, …, m7, m7]`, to `madd` with the
    /// 16 `bsums` of an activation block.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn mins_paired(mins: u64) -> __m256i {
        let m = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(mins as i64));
        _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m))
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    //! The AVX2 and AVX-512 VNNI drivers and the helpers the types' unpackers share.

    use std::arch::x86_64::*;

    use super::{blocks, KQuant};
    use crate::engine::cpu::act::BlockQ8K;

    /// The f16 pair at `p` (unaligned) as f32s, with F16C.
    #[inline(always)]
    pub unsafe fn f16x2(p: *const u8) -> (f32, f32) {
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
    }

    /// The f16 at `p` (unaligned; reads 2 bytes) as f32, with F16C.
    #[inline(always)]
    pub unsafe fn f16x1(p: *const u8) -> f32 {
        let bits = (p as *const u16).read_unaligned();
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    /// The 16-bit lane shuffle mask (for `pshufb` on both 128-bit lanes) that broadcasts word `k`.
    #[inline(always)]
    pub unsafe fn word_mask(k: i32) -> __m256i {
        _mm256_set1_epi16((((2 * k + 1) << 8) | (2 * k)) as i16)
    }

    /// A 512-bit register of 16-bit lanes: `a` in the low 256 bits, `b` in the high (`vpermw` indices,
    /// shift counts).
    #[inline(always)]
    pub unsafe fn halves(a: i16, b: i16) -> __m512i {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi16(a)),
            _mm256_set1_epi16(b),
        )
    }

    /// Sum of the 8 lanes.
    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// The sum of the 16 lanes folded into 8.
    #[inline(always)]
    unsafe fn fold512(v: __m512i) -> __m256i {
        _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64::<1>(v))
    }

    /// One K-quant row · `N` activation rows, AVX2: per chunk and token, `maddubs` (quant × int8 pairs into
    /// 16 bits, which cannot saturate: 2·63·128 < 2¹⁵) then `madd` by the scales into 8 lanes of i32.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(in crate::engine::cpu::kernels) unsafe fn dot_avx2<K: KQuant, const N: usize>(
        w: &[u8],
        x: [&[BlockQ8K]; N],
    ) -> [f32; N] {
        let nb = blocks::<K, N>(w, &x);
        let mut acc = [_mm256_setzero_ps(); N];
        for i in 0..nb {
            // i < nb ≤ w.len() / BLOCK_BYTES: the block lies inside `w`.
            let p = w.as_ptr().add(i * K::BLOCK_BYTES);
            let mut isum = [_mm256_setzero_si256(); N];
            let tail = K::avx2_block(p, |first, chunks| {
                for (t, xt) in x.iter().enumerate() {
                    // i < nb ≤ xt.len(); `first + 32·chunks.len()` ≤ 256.
                    let a = xt.get_unchecked(i).qs.as_ptr().add(first);
                    for (c, &(q, s)) in chunks.iter().enumerate() {
                        let av = _mm256_loadu_si256(a.add(32 * c) as *const __m256i);
                        let pc = _mm256_madd_epi16(_mm256_maddubs_epi16(q, av), s);
                        isum[t] = _mm256_add_epi32(isum[t], pc);
                    }
                }
            });
            for (t, xt) in x.iter().enumerate() {
                acc[t] = K::avx2_finish(acc[t], isum[t], xt.get_unchecked(i), &tail);
            }
        }
        let mut out = [0f32; N];
        for (o, a) in out.iter_mut().zip(acc) {
            *o = hsum(a);
        }
        out
    }

    /// One K-quant row · `N` activation rows, AVX-512 VNNI: per chunk (64 values) and token, `maddubs` then
    /// `vpdpwssd` by the scales, folding the scale multiply into the accumulate.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub(in crate::engine::cpu::kernels) unsafe fn dot_avx512<K: KQuant, const N: usize>(
        w: &[u8],
        x: [&[BlockQ8K]; N],
    ) -> [f32; N] {
        let nb = blocks::<K, N>(w, &x);
        let mut acc = [_mm256_setzero_ps(); N];
        for i in 0..nb {
            // i < nb ≤ w.len() / BLOCK_BYTES: the block lies inside `w`.
            let p = w.as_ptr().add(i * K::BLOCK_BYTES);
            let mut isum = [_mm512_setzero_si512(); N];
            let tail = K::avx512_block(p, |first, chunks| {
                for (t, xt) in x.iter().enumerate() {
                    // i < nb ≤ xt.len(); `first + 64·chunks.len()` ≤ 256.
                    let a = xt.get_unchecked(i).qs.as_ptr().add(first);
                    for (c, &(q, s)) in chunks.iter().enumerate() {
                        let av = _mm512_loadu_si512(a.add(64 * c) as *const _);
                        isum[t] = _mm512_dpwssd_epi32(isum[t], _mm512_maddubs_epi16(q, av), s);
                    }
                }
            });
            for (t, xt) in x.iter().enumerate() {
                acc[t] = K::avx512_finish(acc[t], fold512(isum[t]), xt.get_unchecked(i), &tail);
            }
        }
        let mut out = [0f32; N];
        for (o, a) in out.iter_mut().zip(acc) {
            *o = hsum(a);
        }
        out
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    //! The NEON driver, with the dot-product extension (`sdot`) or with widening multiplies (base NEON).

    use std::arch::aarch64::*;

    use super::{blocks, KQuant};
    use crate::engine::cpu::act::BlockQ8K;

    /// A 16-byte signed dot product into 4 lanes (which lane gets which products is the implementation's).
    trait Dot {
        /// # Safety
        /// The CPU must have what the implementation uses.
        unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t;
    }

    /// `sdot` (the dot-product extension), shared with the packed tiles (`kernels::neon_sdot`).
    struct Sdot;
    impl Dot for Sdot {
        #[inline(always)]
        unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
            // SAFETY: only reached from functions compiled with (and run after detecting) `dotprod`.
            unsafe { super::super::neon_sdot(acc, a, b) }
        }
    }

    /// Base NEON: widening multiplies, pairs added into 32 bits. Each product is at most 63·128 in
    /// magnitude for the K-quants' 6-bit-or-narrower weights, so a pair fits 16 bits.
    struct Smull;
    impl Dot for Smull {
        #[inline(always)]
        unsafe fn dot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
            let p = vaddq_s16(
                vmull_s8(vget_low_s8(a), vget_low_s8(b)),
                vmull_high_s8(a, b),
            );
            vpadalq_s16(acc, p)
        }
    }

    pub(super) fn dot<K: KQuant, const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        if std::arch::is_aarch64_feature_detected!("dotprod") {
            // SAFETY: the dot-product extension was detected at run time (NEON is always there).
            unsafe { dot_sdot::<K, N>(w, x) }
        } else {
            // SAFETY: NEON is part of every aarch64 CPU.
            unsafe { dot_smull::<K, N>(w, x) }
        }
    }

    #[target_feature(enable = "neon,dotprod")]
    unsafe fn dot_sdot<K: KQuant, const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        body::<K, Sdot, N>(w, x)
    }

    #[target_feature(enable = "neon")]
    unsafe fn dot_smull<K: KQuant, const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        body::<K, Smull, N>(w, x)
    }

    /// Per chunk and token: the integer dot of each half, times its scale into 4 lanes; per block and token,
    /// the lanes added and scaled with [`KQuant::finish`] (the scalar path's float expression, so the two
    /// agree to the bit).
    #[inline(always)]
    unsafe fn body<K: KQuant, D: Dot, const N: usize>(w: &[u8], x: [&[BlockQ8K]; N]) -> [f32; N] {
        let nb = blocks::<K, N>(w, &x);
        let mut out = [0f32; N];
        for i in 0..nb {
            let b = &w[i * K::BLOCK_BYTES..(i + 1) * K::BLOCK_BYTES];
            let head = K::head(b);
            let mut isum = [vdupq_n_s32(0); N];
            K::neon_block(b.as_ptr(), |first, chunks| {
                for (t, xt) in x.iter().enumerate() {
                    // i < nb ≤ xt.len(); `first + 32·chunks.len()` ≤ 256.
                    let a = xt.get_unchecked(i).qs.as_ptr().add(first);
                    for (c, ch) in chunks.iter().enumerate() {
                        let (a0, a1) = (vld1q_s8(a.add(32 * c)), vld1q_s8(a.add(32 * c + 16)));
                        let z = vdupq_n_s32(0);
                        isum[t] = if K::NEON_SCALE_VALUES == 32 {
                            vmlaq_n_s32(
                                isum[t],
                                D::dot(D::dot(z, ch.q[0], a0), ch.q[1], a1),
                                ch.sc[0],
                            )
                        } else {
                            let s = vmlaq_n_s32(isum[t], D::dot(z, ch.q[0], a0), ch.sc[0]);
                            vmlaq_n_s32(s, D::dot(z, ch.q[1], a1), ch.sc[1])
                        };
                    }
                }
            });
            for (t, xt) in x.iter().enumerate() {
                out[t] += K::finish(&head, xt.get_unchecked(i), vaddvq_s32(isum[t]));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::super::{q4_k::Q4K, q5_k::Q5K, q6_k::Q6K, testing};
    use super::KQuant;
    use crate::engine::cpu::act::{ActBlock, BlockQ8K};
    use crate::engine::cpu::isa::Isa;

    /// A row and activations of different lengths: every path covers the blocks both hold, no more (the
    /// shared walk's bound), bit for bit what the equal-length call gives.
    fn uneven<K: KQuant>() {
        let mut rng = StdRng::seed_from_u64(K::BLOCK_BYTES as u64);
        let mut w: Vec<u8> = (0..3 * K::BLOCK_BYTES).map(|_| rng.gen()).collect();
        for b in w.chunks_exact_mut(K::BLOCK_BYTES) {
            // Finite f16 scales (random bytes could be NaN): Q6_K's `d` is its last two bytes.
            let at = if K::BLOCK_BYTES == 210 {
                vec![208]
            } else {
                vec![0, 2]
            };
            for at in at {
                b[at..at + 2].copy_from_slice(&testing::scale(&mut rng, 0.01));
            }
        }
        let mut x = vec![BlockQ8K::default(); 3];
        BlockQ8K::quantize(&testing::activations(&mut rng, 3 * 256), &mut x);
        let two = 2 * K::BLOCK_BYTES;
        for isa in Isa::available() {
            let want = K::vec_dot(isa, &w[..two], &x[..2]);
            let long_w = K::vec_dot(isa, &w, &x[..2]);
            let long_x = K::vec_dot(isa, &w[..two], &x);
            assert_eq!(
                want.to_bits(),
                long_w.to_bits(),
                "{} {}",
                K::NAME,
                isa.name()
            );
            assert_eq!(
                want.to_bits(),
                long_x.to_bits(),
                "{} {}",
                K::NAME,
                isa.name()
            );
        }
    }

    #[test]
    fn uneven_lengths_cover_the_common_blocks() {
        uneven::<Q4K>();
        uneven::<Q5K>();
        uneven::<Q6K>();
    }
}
