//! The loops shared by the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), which all dot with
//! [`BlockQ8`] activations. A type says how to turn one of its blocks into 32 bytes ([`Block32`]); the drivers
//! here walk the row, multiply those bytes with the activation quants (one weight unpack serves `N` token rows)
//! and apply the scales. `vec_dot` is the `N = 1` instance and `vec_dot_x4` the `N = 4` one of the same code,
//! so a token's result is bit-identical whichever way it was batched.
//!
//! Two kinds of block:
//! - signed (Q4_0, Q5_0, Q8_0): weights are `d · w` with `w` an i8; the block sum is `d_w d_x Σ w y`.
//! - with a min (Q4_1, Q5_1): weights are `d · q + m` with `0 ≤ q < 32`; the block sum is
//!   `d_w d_x Σ q y + m s_x`, with the activation's `s = d_x Σ y` (llama.cpp's `ggml_vec_dot_q4_1_q8_1`).
//!
//! Every integer sum is exact; only the per-block scaling and the accumulation are float.

use candle_core::quantized::GgmlDType;

use super::{f16_at, WeightKernel};
use crate::engine::cpu::act::BlockQ8;
use crate::engine::cpu::isa::Isa;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "aarch64")]
use std::arch::aarch64::*;

/// A 32-value weight block layout, as the drivers see it. The f16 `d` is always the block's first two bytes,
/// and the f16 `m` (types with a min) the next two.
pub(super) trait Block32 {
    /// The type's name and GGUF type (for [`WeightKernel`]).
    const NAME: &'static str;
    #[cfg_attr(not(test), allow(dead_code))]
    const DTYPE: GgmlDType;
    /// Bytes per block.
    const BYTES: usize;
    /// Whether the unpacked weights are signed i8 (`d · w`) or unsigned bytes below 32 with a min (`d · q + m`).
    const SIGNED: bool;

    /// `Σ w_j y_j` over one block (`b` is the block's `BYTES` bytes), the weights as the unpack functions give
    /// them: signed values for signed types, the unsigned quants (without `m`) for the others.
    fn idot(b: &[u8], y: &[i8; 32]) -> i32;

    /// The 32 unpacked weights (element `j` in byte `j`).
    ///
    /// # Safety
    /// `p` points at `BYTES` readable bytes; the processor has AVX2.
    #[cfg(target_arch = "x86_64")]
    unsafe fn unpack_avx2(p: *const u8) -> __m256i;

    /// As [`Block32::unpack_avx2`], free to use AVX-512 BW/VL (mask registers).
    ///
    /// # Safety
    /// `p` points at `BYTES` readable bytes; the processor has AVX2 and AVX-512 F/BW/VL.
    #[cfg(target_arch = "x86_64")]
    unsafe fn unpack_avx512(p: *const u8) -> __m256i;

    /// For the signed types: the 32 weights plus 128 (`w ^ 0x80`), as the unsigned operand of `vpdpbusd`;
    /// the VNNI driver takes `128 · Σy` (the activation block's exact `sum`) back off, so that no per-token
    /// sign trick is needed. Unused for the unsigned types.
    ///
    /// # Safety
    /// As for [`Block32::unpack_avx512`].
    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl")]
    unsafe fn unpack_vnni(p: *const u8) -> __m256i {
        // SAFETY: the caller's guarantees are this function's.
        let q = unsafe { Self::unpack_avx512(p) };
        _mm256_xor_si256(q, _mm256_set1_epi8(0x80u8 as i8))
    }

    /// The 32 unpacked weights as two halves (elements 0..16, 16..32), always as i8 (values below 32 for
    /// the unsigned types).
    ///
    /// # Safety
    /// `p` points at `BYTES` readable bytes; the processor has NEON (every aarch64 one does).
    #[cfg(target_arch = "aarch64")]
    unsafe fn unpack_neon(p: *const u8) -> (int8x16_t, int8x16_t);
}

/// Every 32-value block type is a [`WeightKernel`] through the drivers below.
impl<B: Block32 + Send + Sync + 'static> WeightKernel for B {
    const NAME: &'static str = B::NAME;
    const DTYPE: GgmlDType = B::DTYPE;
    const BLOCK_ELEMS: usize = 32;
    const BLOCK_BYTES: usize = B::BYTES;
    type Act = BlockQ8;

    fn vec_dot(isa: Isa, w: &[u8], x: &[BlockQ8]) -> f32 {
        let [r] = dot::<B, 1>(isa, w, [x]);
        r
    }

    fn vec_dot_x4(isa: Isa, w: &[u8], x: [&[BlockQ8]; 4]) -> [f32; 4] {
        dot::<B, 4>(isa, w, x)
    }

    fn vec_dot_2x4(isa: Isa, w: [&[u8]; 2], x: [&[BlockQ8]; 4]) -> [[f32; 4]; 2] {
        dot_rows::<B, 2, 4>(isa, w, x)
    }
}

/// Blocks a call can cover: what the weight row and every activation row hold (callers pass equal lengths;
/// the minimum keeps the SIMD paths in bounds whatever they pass).
fn blocks<B: Block32, const N: usize>(w: &[u8], x: &[&[BlockQ8]; N]) -> usize {
    x.iter().fold(w.len() / B::BYTES, |n, x| n.min(x.len()))
}

/// The weight row `w` dotted with `N` activation rows on the best path `isa` allows.
#[inline]
pub(super) fn dot<B: Block32, const N: usize>(isa: Isa, w: &[u8], x: [&[BlockQ8]; N]) -> [f32; N] {
    let [r] = dot_rows::<B, 1, N>(isa, [w], x);
    r
}

/// `M` weight rows each dotted with `N` activation rows: on x86 one pass in which every activation load
/// serves all `M` rows; each row's results are bit for bit those of [`dot`].
#[inline]
pub(super) fn dot_rows<B: Block32, const M: usize, const N: usize>(
    isa: Isa,
    w: [&[u8]; M],
    x: [&[BlockQ8]; N],
) -> [[f32; N]; M] {
    #[cfg(target_arch = "x86_64")]
    {
        if isa.has_avx512() {
            // SAFETY: `has_avx512` checked AVX2, FMA, F16C and AVX-512 F/BW/VL/VNNI on this processor.
            return unsafe { x86::dot_avx512::<B, M, N>(w, x) };
        }
        if isa.has_avx2() {
            // SAFETY: `has_avx2` checked AVX2, FMA and F16C on this processor.
            return unsafe { x86::dot_avx2::<B, M, N>(w, x) };
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if isa.has_neon() {
            if std::arch::is_aarch64_feature_detected!("dotprod") {
                // SAFETY: NEON is part of aarch64 and the dot-product extension was just detected.
                return w.map(|w| unsafe { neon::dot_sdot::<B, N>(w, x) });
            }
            // SAFETY: NEON is part of every aarch64 processor.
            return w.map(|w| unsafe { neon::dot_mull::<B, N>(w, x) });
        }
    }
    let _ = isa;
    w.map(|w| dot_scalar::<B, N>(w, x))
}

/// The portable path: integer block sums, then the scales (plus the min term for the unsigned types).
pub(super) fn dot_scalar<B: Block32, const N: usize>(w: &[u8], x: [&[BlockQ8]; N]) -> [f32; N] {
    let nb = blocks::<B, N>(w, &x);
    x.map(|x| {
        let mut sum = 0f32;
        for (b, a) in w.chunks_exact(B::BYTES).zip(&x[..nb]) {
            sum += f16_at(b, 0) * a.d * B::idot(b, &a.qs) as f32;
            if !B::SIGNED {
                sum += f16_at(b, 2) * a.s;
            }
        }
        sum
    })
}

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    //! AVX2 and AVX-512 VNNI drivers and the unpacking helpers the types share.

    use super::{blocks, Block32, BlockQ8};
    use std::arch::x86_64::*;

    /// The 32 nibbles of 16 bytes at `p`: low nibbles are elements 0..16, high nibbles 16..32.
    ///
    /// # Safety
    /// `p` points at 16 readable bytes; the processor has AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn nibbles(p: *const u8) -> __m256i {
        // SAFETY: the caller guarantees 16 readable bytes at `p`; the load is unaligned.
        let b = unsafe { _mm_loadu_si128(p.cast()) };
        _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16::<4>(b), b),
            _mm256_set1_epi8(0x0f),
        )
    }

    /// The little-endian u32 at `p` (the Q5 types' fifth bits).
    ///
    /// # Safety
    /// `p` points at 4 readable bytes.
    #[inline]
    pub unsafe fn u32_at(p: *const u8) -> u32 {
        // SAFETY: the caller guarantees 4 readable bytes; `read_unaligned` has no alignment requirement.
        u32::from_le(unsafe { std::ptr::read_unaligned(p.cast::<u32>()) })
    }

    /// Byte `j` is 0xff where bit `j` of `bits` is set, else 0 (AVX2 has no byte masks).
    #[inline]
    #[target_feature(enable = "avx2")]
    pub fn bit_bytes(bits: u32) -> __m256i {
        // Byte j takes the source byte holding its bit (j / 8), then tests bit j % 8 of it.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits as i32),
            _mm256_setr_epi64x(
                0,
                0x0101_0101_0101_0101,
                0x0202_0202_0202_0202,
                0x0303_0303_0303_0303,
            ),
        );
        let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select)
    }

    /// The f16 `d` (lane 0) and, for the types with a min, `m` (lane 1) of the block at `p`.
    ///
    /// # Safety
    /// `p` points at 4 readable bytes; the processor has F16C.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn scales(p: *const u8) -> __m128 {
        // SAFETY: every block is at least 18 bytes, so its first 4 are readable; the read is unaligned.
        let raw = unsafe { std::ptr::read_unaligned(p.cast::<i32>()) };
        _mm_cvtph_ps(_mm_cvtsi32_si128(raw))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// AVX2 has no u8·i8 dot into i32: `maddubs` (pairs into i16, which cannot overflow here: the unsigned
    /// side is at most 128 and the signed one at most 127 in magnitude) then `madd` with ones, added to `acc`.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn mul_avx2(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
        _mm256_add_epi32(acc, p)
    }

    /// VNNI: the u8·i8 products summed by fours straight into `acc`'s i32 lanes.
    #[inline]
    #[target_feature(enable = "avx512f,avx512vl,avx512vnni")]
    fn mul_vnni(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, u, s)
    }

    /// One driver body for both instruction sets. Per block: unpack the weights once; signed weights go
    /// through the sign trick on AVX2 (|w| as the unsigned operand, y with w's sign as the signed one:
    /// `maddubs` would saturate on `w + 128`), and as `w + 128` on VNNI, with `−128 · Σy` as the start
    /// value of the integer dot (exact, and no per-token work besides a scalar move); then per
    /// token one integer dot, one conversion and one fused multiply-add into that token's 8-lane accumulator.
    /// Even and odd blocks go to separate accumulators (two dependency chains: `vec_dot` would otherwise wait
    /// on the FMA latency every block), for every `N` alike, so batching never changes a result.
    macro_rules! driver {
        ($(#[$doc:meta])* $name:ident, $features:literal, $unpack:ident, $mul:ident, $vnni:literal) => {
            $(#[$doc])*
            ///
            /// # Safety
            /// The processor has the features this function is compiled for.
            #[target_feature(enable = $features)]
            pub unsafe fn $name<B: Block32, const M: usize, const N: usize>(
                w: [&[u8]; M],
                x: [&[BlockQ8]; N],
            ) -> [[f32; N]; M] {
                let nb = w.iter().map(|w| blocks::<B, N>(w, &x)).min().unwrap_or(0);
                // Lane t of the mins accumulators is token t (the drivers run N <= 4).
                const { assert!(N <= 4) };
                let mut acc = [[[_mm256_setzero_ps(); N]; M]; 2];
                let mut mins = [[_mm_setzero_ps(); M]; 2];
                // Block `i` into accumulator set `k`.
                let mut step = |i: usize, k: usize| {
                    let mut q = [_mm256_setzero_si256(); M];
                    let mut dw = [_mm256_setzero_ps(); M];
                    let mut mw = [_mm_setzero_ps(); M];
                    for r in 0..M {
                        // SAFETY: i < nb ≤ w[r].len() / BYTES, so the block's BYTES bytes lie inside `w[r]`.
                        unsafe {
                            let p = w[r].as_ptr().add(i * B::BYTES);
                            q[r] = if $vnni && B::SIGNED { B::unpack_vnni(p) } else { B::$unpack(p) };
                            let dm = scales(p);
                            dw[r] = _mm256_broadcastss_ps(dm);
                            mw[r] = _mm_movehdup_ps(dm);
                        }
                    }
                    if !B::SIGNED {
                        // Σ over the block of m·y = m · s: one FMA per row for all the tokens.
                        let mut sy = [0f32; 4];
                        for t in 0..N {
                            // SAFETY: i < nb ≤ x[t].len().
                            sy[t] = unsafe { x[t].get_unchecked(i).s };
                        }
                        let sy = _mm_loadu_ps(sy.as_ptr());
                        for r in 0..M {
                            let m = _mm_shuffle_ps::<0>(mw[r], mw[r]);
                            mins[k][r] = _mm_fmadd_ps(m, sy, mins[k][r]);
                        }
                    }
                    let sign = B::SIGNED && !$vnni;
                    for t in 0..N {
                        // SAFETY: i < nb ≤ x[t].len(); `qs` is 32 bytes, read unaligned.
                        let (a, y) = unsafe {
                            let a = x[t].get_unchecked(i);
                            (a, _mm256_loadu_si256(a.qs.as_ptr().cast()))
                        };
                        // VNNI, signed types: lane 0 starts at −128 · Σy (|Σy| ≤ 4096), undoing the +128.
                        let seed = if $vnni && B::SIGNED {
                            _mm256_zextsi128_si256(_mm_cvtsi32_si128(a.sum.wrapping_mul(-128)))
                        } else {
                            _mm256_setzero_si256()
                        };
                        let dy = _mm256_set1_ps(a.d);
                        for r in 0..M {
                            let (u, y) = if sign {
                                (_mm256_sign_epi8(q[r], q[r]), _mm256_sign_epi8(y, q[r]))
                            } else {
                                (q[r], y)
                            };
                            acc[k][r][t] = _mm256_fmadd_ps(
                                _mm256_mul_ps(dw[r], dy),
                                _mm256_cvtepi32_ps($mul(seed, u, y)),
                                acc[k][r][t],
                            );
                        }
                    }
                };
                let mut i = 0;
                while i + 1 < nb {
                    step(i, 0);
                    step(i + 1, 1);
                    i += 2;
                }
                if i < nb {
                    step(i, 0);
                }
                let mut out = [[0f32; N]; M];
                for r in 0..M {
                    let mut m = [0f32; 4];
                    _mm_storeu_ps(m.as_mut_ptr(), _mm_add_ps(mins[0][r], mins[1][r]));
                    for t in 0..N {
                        out[r][t] = hsum(_mm256_add_ps(acc[0][r][t], acc[1][r][t])) + m[t];
                    }
                }
                out
            }
        };
    }

    driver!(
        /// The AVX2 + FMA + F16C path.
        dot_avx2,
        "avx2,fma,f16c",
        unpack_avx2,
        mul_avx2,
        false
    );
    driver!(
        /// The AVX-512 VNNI path (256-bit vectors: `vpdpbusd` replaces `maddubs` + `madd`, and the Q5 types
        /// take their fifth bits from a mask register).
        dot_avx512,
        "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni",
        unpack_avx512,
        mul_vnni,
        true
    );
}

#[cfg(target_arch = "aarch64")]
pub(super) mod neon {
    //! NEON drivers: with the dot-product extension (`sdot`) or with widening multiplies (base NEON).

    use super::{blocks, Block32, BlockQ8};
    use std::arch::aarch64::*;

    /// The 32 nibbles of 16 bytes at `p` as (low nibbles: elements 0..16, high nibbles: 16..32).
    ///
    /// # Safety
    /// `p` points at 16 readable bytes.
    #[inline]
    #[target_feature(enable = "neon")]
    pub unsafe fn nibbles(p: *const u8) -> (uint8x16_t, uint8x16_t) {
        // SAFETY: the caller guarantees 16 readable bytes; `vld1q_u8` has no alignment requirement.
        let b = unsafe { vld1q_u8(p) };
        (vandq_u8(b, vdupq_n_u8(0x0f)), vshrq_n_u8::<4>(b))
    }

    /// `0x10` in byte `j` of the first half where bit `j` of `bits` is set, and in byte `j` of the second
    /// half where bit `16 + j` is (the Q5 types' fifth bits, shifted into place).
    #[inline]
    #[target_feature(enable = "neon")]
    pub fn fifth_bits(bits: u32) -> (uint8x16_t, uint8x16_t) {
        (fifth_bits16(bits), fifth_bits16(bits >> 16))
    }

    /// `0x10` in byte `j` where bit `j` of the low 16 bits of `bits` is set.
    #[inline]
    #[target_feature(enable = "neon")]
    fn fifth_bits16(bits: u32) -> uint8x16_t {
        // Byte j takes the source byte holding its bit (j / 8), then tests bit j % 8 of it.
        let spread = vcombine_u8(vdup_n_u8(bits as u8), vdup_n_u8((bits >> 8) as u8));
        let select = vreinterpretq_u8_u64(vdupq_n_u64(0x8040_2010_0804_0201));
        vandq_u8(vtstq_u8(spread, select), vdupq_n_u8(0x10))
    }

    /// `acc + Σ` of the four products per lane, with the dot-product extension.
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    pub(in crate::engine::cpu::kernels) fn sdot(
        acc: int32x4_t,
        a: int8x16_t,
        b: int8x16_t,
    ) -> int32x4_t {
        let mut acc = acc;
        // SAFETY: `sdot` only reads and writes these registers; the dot-product extension is enabled for
        // this function (callers reach it only where it was detected).
        unsafe {
            std::arch::asm!(
                "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
                acc = inout(vreg) acc,
                a = in(vreg) a,
                b = in(vreg) b,
                options(pure, nomem, nostack, preserves_flags)
            );
        }
        acc
    }

    /// The block's integer dot with `sdot`.
    #[inline]
    #[target_feature(enable = "neon,dotprod")]
    fn idot_sdot(w: (int8x16_t, int8x16_t), y: (int8x16_t, int8x16_t)) -> int32x4_t {
        sdot(sdot(vdupq_n_s32(0), w.0, y.0), w.1, y.1)
    }

    /// The block's integer dot with widening multiplies (i8·i8 fits i16) and pairwise widening adds.
    #[inline]
    #[target_feature(enable = "neon")]
    fn idot_mull(w: (int8x16_t, int8x16_t), y: (int8x16_t, int8x16_t)) -> int32x4_t {
        let acc = vpaddlq_s16(vmull_s8(vget_low_s8(w.0), vget_low_s8(y.0)));
        let acc = vpadalq_s16(acc, vmull_high_s8(w.0, y.0));
        let acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(w.1), vget_low_s8(y.1)));
        vpadalq_s16(acc, vmull_high_s8(w.1, y.1))
    }

    /// The f16 `d` and `m` (garbage for the signed types) of the block at `p`, as f32.
    ///
    /// # Safety
    /// `p` points at 4 readable bytes.
    #[inline]
    unsafe fn scales(p: *const u8) -> (f32, f32) {
        // SAFETY: the caller guarantees 4 readable bytes.
        let b = unsafe { std::slice::from_raw_parts(p, 4) };
        (
            crate::engine::cpu::kernels::block32::f16_at(b, 0),
            crate::engine::cpu::kernels::block32::f16_at(b, 2),
        )
    }

    macro_rules! driver {
        ($(#[$doc:meta])* $name:ident, $features:literal, $idot:ident) => {
            $(#[$doc])*
            ///
            /// # Safety
            /// The processor has the features this function is compiled for.
            #[target_feature(enable = $features)]
            pub unsafe fn $name<B: Block32, const N: usize>(w: &[u8], x: [&[BlockQ8]; N]) -> [f32; N] {
                let nb = blocks::<B, N>(w, &x);
                // Even and odd blocks into separate accumulators, as on x86.
                let mut acc = [[vdupq_n_f32(0.0); N]; 2];
                let mut mins = [[0f32; N]; 2];
                let mut step = |i: usize, k: usize| {
                    // SAFETY: i < nb ≤ w.len() / BYTES, so the block's BYTES bytes lie inside `w`.
                    let (q, (d, m)) = unsafe {
                        let p = w.as_ptr().add(i * B::BYTES);
                        (B::unpack_neon(p), scales(p))
                    };
                    for t in 0..N {
                        // SAFETY: i < nb ≤ x[t].len(); `qs` is 32 bytes.
                        let (a, y) = unsafe {
                            let a = x[t].get_unchecked(i);
                            (a, (vld1q_s8(a.qs.as_ptr()), vld1q_s8(a.qs.as_ptr().add(16))))
                        };
                        let s = vcvtq_f32_s32($idot(q, y));
                        acc[k][t] = vfmaq_f32(acc[k][t], s, vdupq_n_f32(d * a.d));
                        if !B::SIGNED {
                            mins[k][t] += m * a.s;
                        }
                    }
                };
                let mut i = 0;
                while i + 1 < nb {
                    step(i, 0);
                    step(i + 1, 1);
                    i += 2;
                }
                if i < nb {
                    step(i, 0);
                }
                let mut out = [0f32; N];
                for t in 0..N {
                    out[t] = vaddvq_f32(vaddq_f32(acc[0][t], acc[1][t])) + (mins[0][t] + mins[1][t]);
                }
                out
            }
        };
    }

    driver!(
        /// NEON with the dot-product extension.
        dot_sdot,
        "neon,dotprod",
        idot_sdot
    );
    driver!(
        /// Base NEON.
        dot_mull,
        "neon",
        idot_mull
    );
}

#[cfg(test)]
mod tests {
    use std::hint::black_box;
    use std::time::Instant;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use crate::engine::cpu::act::{quantize_q8, BlockQ8};
    use crate::engine::cpu::isa::Isa;
    use crate::engine::cpu::kernels::{
        q4_0::Q4_0, q4_1::Q4_1, q5_0::Q5_0, q5_1::Q5_1, q8_0::Q8_0, WeightKernel,
    };

    /// Nanoseconds per call of `f`: the best of 40 rounds of about 1 ms (short rounds, so that some run
    /// without the processor being taken away on a shared machine).
    fn ns_per_call(mut f: impl FnMut()) -> f64 {
        let start = Instant::now();
        let mut calls = 0u64;
        while start.elapsed().as_micros() < 1000 {
            f();
            calls += 1;
        }
        (0..40)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..calls {
                    f();
                }
                t.elapsed().as_nanos() as f64 / calls as f64
            })
            .fold(f64::INFINITY, f64::min)
    }

    fn time<K: WeightKernel<Act = BlockQ8>>(rng: &mut StdRng) {
        for cols in [896usize, 4864] {
            let blocks = cols / 32;
            let mut w: Vec<u8> = (0..2 * blocks * K::BLOCK_BYTES)
                .map(|_| rng.gen())
                .collect();
            for b in w.chunks_exact_mut(K::BLOCK_BYTES) {
                // Finite scales (random bytes could be f16 NaN/infinity): d = 0.01, m = −0.1 where present.
                b[..4].copy_from_slice(&[0x1f, 0x21, 0x66, 0xae]);
            }
            let x: Vec<f32> = (0..4 * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let mut a = vec![BlockQ8::default(); 4 * blocks];
            quantize_q8(&x, &mut a);
            let a: Vec<&[BlockQ8]> = a.chunks_exact(blocks).collect();
            let x4 = [a[0], a[1], a[2], a[3]];
            let (w, w1) = w.split_at(blocks * K::BLOCK_BYTES);
            for isa in Isa::available() {
                let one = ns_per_call(|| {
                    black_box(K::vec_dot(isa, black_box(w), black_box(a[0])));
                });
                let four = ns_per_call(|| {
                    black_box(K::vec_dot_x4(isa, black_box(w), black_box(x4)));
                });
                let eight = ns_per_call(|| {
                    black_box(K::vec_dot_2x4(isa, black_box([w, w1]), black_box(x4)));
                });
                println!(
                    "{} {cols:>4} cols {:>10}: vec_dot {one:>7.0} ns/row, vec_dot_x4 {:>7.1} ns/row-dot, \
                     vec_dot_2x4 {:>7.1} ns/row-dot",
                    K::NAME,
                    isa.name(),
                    four / 4.0,
                    eight / 8.0
                );
            }
        }
    }

    /// `cargo test --release --lib engine::cpu::kernels::block32 -- --ignored --nocapture`
    #[test]
    #[ignore = "timing, run by hand"]
    fn timing() {
        let mut rng = StdRng::seed_from_u64(7);
        time::<Q4_0>(&mut rng);
        time::<Q4_1>(&mut rng);
        time::<Q5_0>(&mut rng);
        time::<Q5_1>(&mut rng);
        time::<Q8_0>(&mut rng);
    }
}
